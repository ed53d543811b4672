#include <string>

#include "tensorgrad/core/error.h"
#include "tensorgrad/ops/gradients.h"

namespace tensorgrad {

std::vector<Value> backward_walk(Builder& b, const Tape& tape, Value loss, std::span<const Value> wrt, Value seed) {
  const Shape loss_shape = b.shape(loss);
  if (size_t(loss.id) >= tape.size())
    throw IndexError("backward_walk: the loss, value " + std::to_string(loss.id) + ", is not on the tape (" +
                     std::to_string(tape.size()) + " entries)");
  // Values after the loss cannot feed it: the walk never looks past it.
  const size_t n = size_t(loss.id) + 1;
  // Forward: which values depend on some wrt. Backward: which feed the loss.
  std::vector<bool> depends(n, false), feeds(n, false);
  for (Value w : wrt) {
    b.shape(w);  // a handle of another builder is an error, not "no gradient"
    if (size_t(w.id) < n) depends[size_t(w.id)] = true;
  }
  for (size_t i = 0; i < n; ++i)
    for (Value in : tape.application(i).inputs)
      if (depends[size_t(in.id)]) depends[i] = true;
  feeds[n - 1] = true;
  for (size_t i = n; i-- > 0;)
    if (feeds[i])
      for (Value in : tape.application(i).inputs) feeds[size_t(in.id)] = true;

  std::vector<Value> grad(n);
  grad[n - 1] = seed;
  if (loss_shape.rank() != 0) grad[n - 1] = b.broadcast_to(grad[n - 1], loss_shape);
  for (size_t i = n; i-- > 0;) {
    if (!grad[i].valid()) continue;
    const Application app = tape.application(i);
    if (app.op == OpKind::Leaf) continue;
    if (app.inputs.size() > size_t(kMaxOpInputs))
      throw Error("backward_walk: value " + std::to_string(i) + " has " + std::to_string(app.inputs.size()) +
                  " inputs; no op takes more than " + std::to_string(kMaxOpInputs));
    // Copy what the rule needs: the ops it appends may move the tape's storage.
    const OpKind op = app.op;
    const OpAttrs attrs = app.attrs;
    const size_t k = app.inputs.size();
    Value ins[kMaxOpInputs];
    bool needs[kMaxOpInputs] = {};
    bool any = false;
    for (size_t j = 0; j < k; ++j) {
      ins[j] = app.inputs[j];
      needs[j] = depends[size_t(ins[j].id)] && feeds[size_t(ins[j].id)];
      any = any || needs[j];
    }
    if (!any) continue;
    Value dx[kMaxOpInputs];
    gradient_rule(b, op, attrs, {ins, k}, Value{int32_t(i)}, grad[i], {needs, k}, {dx, k});
    for (size_t j = 0; j < k; ++j) {
      if (!needs[j] || !dx[j].valid()) continue;
      Value& acc = grad[size_t(ins[j].id)];
      acc = acc.valid() ? b.add(acc, dx[j]) : dx[j];
    }
  }
  std::vector<Value> out;
  out.reserve(wrt.size());
  for (Value w : wrt) out.push_back(size_t(w.id) < n ? grad[size_t(w.id)] : Value{});
  return out;
}

}  // namespace tensorgrad
