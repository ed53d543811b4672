#include "tensorgrad/graph/graph.h"

#include "tensorgrad/core/error.h"
#include "tensorgrad/ops/gradients.h"

namespace tensorgrad {

const Node& Graph::node(Value v) const {
  if (v.id < 0 || size_t(v.id) >= nodes_.size())
    throw IndexError("value " + std::to_string(v.id) + " is not a node of this graph (" +
                     std::to_string(nodes_.size()) + " nodes)");
  return nodes_[size_t(v.id)];
}

Value Graph::add_leaf(NodeRole role, const std::string& name, const Shape& shape, DType dtype, const Tensor& bound,
                      bool trainable) {
  Node n;
  n.role = role;
  n.name = name;
  n.shape = shape;
  n.dtype = dtype;
  n.bound = bound;
  n.trainable = trainable;
  nodes_.push_back(std::move(n));
  return Value{int32_t(nodes_.size() - 1)};
}

Value Graph::input(const std::string& name, const Shape& shape, DType dtype) {
  return add_leaf(NodeRole::Input, name, shape, dtype, Tensor{}, false);
}

Value Graph::parameter(const Tensor& tensor, const char* name, bool trainable) {
  if (!tensor.defined()) throw StateError(std::string("parameter '") + name + "' is an undefined tensor");
  auto it = bound_index_.find(tensor.raw());
  if (it != bound_index_.end()) return Value{it->second};
  Value v = add_leaf(NodeRole::Parameter, name, tensor.shape(), tensor.dtype(), tensor, trainable);
  bound_index_[tensor.raw()] = v.id;
  return v;
}

Value Graph::state(const Tensor& tensor, const std::string& name) {
  if (!tensor.defined()) throw StateError("state '" + name + "' is an undefined tensor");
  Value v = add_leaf(NodeRole::State, name, tensor.shape(), tensor.dtype(), tensor, false);
  bound_index_[tensor.raw()] = v.id;
  return v;
}

Value Graph::apply(OpKind op, std::span<const Value> inputs, const OpAttrs& attrs) {
  if (inputs.size() > size_t(Node::kMaxInputs)) throw Error("too many inputs for one op");
  Shape shapes[Node::kMaxInputs];
  DType dtypes[Node::kMaxInputs];
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Node& in = node(inputs[i]);
    shapes[i] = in.shape;
    dtypes[i] = in.dtype;
  }
  OpSignature sig = infer_signature(op, {shapes, inputs.size()}, {dtypes, inputs.size()}, attrs);
  if (op_info(op).in_place && node(inputs[0]).role == NodeRole::Op)
    throw Error(std::string(op_info(op).name) + " updates its first input in place; it must be a persistent tensor");
  Node n;
  n.op = op;
  n.attrs = attrs;
  for (size_t i = 0; i < inputs.size(); ++i) n.inputs[i] = inputs[i];
  n.n_inputs = int(inputs.size());
  n.shape = sig.shape;
  n.dtype = sig.dtype;
  nodes_.push_back(std::move(n));
  return Value{int32_t(nodes_.size() - 1)};
}

std::vector<Value> Graph::trainable_parameters() const {
  std::vector<Value> out;
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].role == NodeRole::Parameter && nodes_[i].trainable) out.push_back(Value{int32_t(i)});
  return out;
}

std::vector<Value> Graph::gradients(Value loss, std::span<const Value> wrt, float seed) {
  const Shape loss_shape = node(loss).shape;
  if (loss_shape.numel() != 1) throw ShapeError("gradients: the loss must be a scalar; got shape " + loss_shape.str());
  return gradients(loss, wrt, fill(Shape{}, seed));
}

std::vector<Value> Graph::gradients(Value loss, std::span<const Value> wrt, Value seed) {
  const Shape loss_shape = node(loss).shape;  // a copy: appending nodes below may move nodes_
  if (loss_shape.numel() != 1) throw ShapeError("gradients: the loss must be a scalar; got shape " + loss_shape.str());
  if (node(seed).shape.rank() != 0)
    throw ShapeError("gradients: the seed must be a scalar {}; got shape " + node(seed).shape.str());
  const size_t n = size_t(loss.id) + 1;
  // Forward: which nodes depend on some wrt. Backward: which feed the loss.
  std::vector<bool> depends(n, false), feeds(n, false);
  for (Value w : wrt) {
    node(w);
    if (size_t(w.id) < n) depends[size_t(w.id)] = true;
  }
  for (size_t i = 0; i < n; ++i)
    for (Value in : nodes_[i].input_values())
      if (depends[size_t(in.id)]) depends[i] = true;
  feeds[n - 1] = true;
  for (size_t i = n; i-- > 0;)
    if (feeds[i])
      for (Value in : nodes_[i].input_values()) feeds[size_t(in.id)] = true;

  std::vector<Value> grad(n);
  grad[n - 1] = seed;
  if (loss_shape.rank() != 0) grad[n - 1] = broadcast_to(grad[n - 1], loss_shape);
  for (size_t i = n; i-- > 0;) {
    if (!grad[i].valid() || nodes_[i].role != NodeRole::Op) continue;
    // Copy what the rule needs: appending nodes may move nodes_.
    const OpKind op = nodes_[i].op;
    const OpAttrs attrs = nodes_[i].attrs;
    const int k = nodes_[i].n_inputs;
    Value ins[Node::kMaxInputs];
    bool needs[Node::kMaxInputs] = {};
    bool any = false;
    for (int j = 0; j < k; ++j) {
      ins[j] = nodes_[i].inputs[size_t(j)];
      needs[j] = depends[size_t(ins[j].id)] && feeds[size_t(ins[j].id)];
      any = any || needs[j];
    }
    if (!any) continue;
    Value dx[Node::kMaxInputs];
    gradient_rule(*this, op, attrs, {ins, size_t(k)}, Value{int32_t(i)}, grad[i], {needs, size_t(k)},
                  {dx, size_t(k)});
    for (int j = 0; j < k; ++j) {
      if (!needs[j] || !dx[j].valid()) continue;
      Value& acc = grad[size_t(ins[j].id)];
      acc = acc.valid() ? add(acc, dx[j]) : dx[j];
    }
  }
  std::vector<Value> out;
  out.reserve(wrt.size());
  for (Value w : wrt) out.push_back(size_t(w.id) < n ? grad[size_t(w.id)] : Value{});
  return out;
}

}  // namespace tensorgrad
