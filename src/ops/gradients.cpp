#include "tensorgrad/ops/gradients.h"

#include <string>

#include "tensorgrad/core/error.h"

namespace tensorgrad {

// Every gradient rule of the op set, one case each. x = inputs, y = output,
// g = d(loss)/dy, dx = the results.
void gradient_rule(Builder& b, OpKind op, const OpAttrs& at, std::span<const Value> x, Value y, Value g,
                   std::span<const bool> needs, std::span<Value> dx) {
  auto need = [&](size_t i) { return i < needs.size() && needs[i]; };
  auto back = [&](OpKind k, std::initializer_list<Value> in) { return b.apply(k, in); };
  switch (op) {
    case OpKind::MatMul: {  // C = op(A) op(B)
      const bool ta = at.trans_a, tb = at.trans_b;
      if (need(0)) dx[0] = ta ? b.matmul(x[1], g, tb, true) : b.matmul(g, x[1], false, !tb);
      if (need(1)) dx[1] = tb ? b.matmul(g, x[0], true, ta) : b.matmul(x[0], g, !ta, false);
      return;
    }
    case OpKind::Add:
      if (need(0)) dx[0] = b.sum_to(g, b.shape(x[0]));
      if (need(1)) dx[1] = b.sum_to(g, b.shape(x[1]));
      return;
    case OpKind::Sub:
      if (need(0)) dx[0] = b.sum_to(g, b.shape(x[0]));
      if (need(1)) dx[1] = b.scale(b.sum_to(g, b.shape(x[1])), -1.0f);
      return;
    case OpKind::Mul:
      if (need(0)) dx[0] = b.sum_to(b.mul(g, x[1]), b.shape(x[0]));
      if (need(1)) dx[1] = b.sum_to(b.mul(g, x[0]), b.shape(x[1]));
      return;
    case OpKind::Scale: dx[0] = b.scale(g, at.scale); return;
    case OpKind::Relu: dx[0] = back(OpKind::ReluBackward, {y, g}); return;
    case OpKind::Sigmoid: dx[0] = back(OpKind::SigmoidBackward, {y, g}); return;
    case OpKind::Tanh: dx[0] = back(OpKind::TanhBackward, {y, g}); return;
    case OpKind::Softmax: dx[0] = back(OpKind::SoftmaxBackward, {y, g}); return;
    case OpKind::LogSoftmax: dx[0] = back(OpKind::LogSoftmaxBackward, {y, g}); return;
    case OpKind::Dropout: dx[0] = b.apply(OpKind::Dropout, {g}, at); return;  // same stream, same mask
    case OpKind::Sum: dx[0] = b.broadcast_to(g, b.shape(x[0])); return;
    case OpKind::Mean: dx[0] = b.scale(b.broadcast_to(g, b.shape(x[0])), 1.0f / float(b.shape(x[0]).numel())); return;
    case OpKind::SumTo: dx[0] = b.broadcast_to(g, b.shape(x[0])); return;
    case OpKind::BroadcastTo: dx[0] = b.sum_to(g, b.shape(x[0])); return;
    case OpKind::SoftmaxCrossEntropy:  // labels and weights take no gradient
      dx[0] = x.size() == 3 ? back(OpKind::SoftmaxCrossEntropyBackward, {x[0], x[1], x[2], g})
                            : back(OpKind::SoftmaxCrossEntropyBackward, {x[0], x[1], g});
      return;
    case OpKind::MseLoss: {
      Value d = x.size() == 3 ? back(OpKind::MseLossBackward, {x[0], x[1], x[2], g})
                              : back(OpKind::MseLossBackward, {x[0], x[1], g});
      if (need(0)) dx[0] = d;
      if (need(1)) dx[1] = b.scale(d, -1.0f);
      return;
    }
    case OpKind::Fill:
    case OpKind::Leaf:
      return;
    default:
      throw Error(std::string("op '") + op_info(op).name + "' has no gradient rule");
  }
}

}  // namespace tensorgrad
