#include "tensorgrad/ops/gradients.h"

#include <string>

#include "tensorgrad/core/error.h"

namespace tensorgrad {

namespace {
OpKind backward_of(OpKind op) {
  switch (op) {
    case OpKind::Gelu: return OpKind::GeluBackward;
    case OpKind::Silu: return OpKind::SiluBackward;
    case OpKind::Elu: return OpKind::EluBackward;
    case OpKind::LeakyRelu: return OpKind::LeakyReluBackward;
    case OpKind::Softplus: return OpKind::SoftplusBackward;
    case OpKind::Leaf: case OpKind::Fill: case OpKind::MatMul: case OpKind::Add: case OpKind::Sub: case OpKind::Mul:
    case OpKind::Scale: case OpKind::Relu: case OpKind::Sigmoid: case OpKind::Tanh: case OpKind::Softmax:
    case OpKind::LogSoftmax: case OpKind::SoftmaxCrossEntropy: case OpKind::MseLoss: case OpKind::Dropout:
    case OpKind::Sum: case OpKind::Mean: case OpKind::SumTo: case OpKind::BroadcastTo: case OpKind::Reshape:
    case OpKind::Rsqrt: case OpKind::MeanLastAxis: case OpKind::Slice: case OpKind::Concat: case OpKind::Gather:
    case OpKind::ToIndex: case OpKind::Im2Col: case OpKind::Col2Im: case OpKind::MaxPool2D: case OpKind::AvgPool2D:
    case OpKind::ReluBackward: case OpKind::SigmoidBackward: case OpKind::TanhBackward: case OpKind::SoftmaxBackward:
    case OpKind::LogSoftmaxBackward: case OpKind::SoftmaxCrossEntropyBackward: case OpKind::MseLossBackward:
    case OpKind::RsqrtBackward: case OpKind::GeluBackward: case OpKind::SiluBackward: case OpKind::EluBackward:
    case OpKind::LeakyReluBackward: case OpKind::SoftplusBackward: case OpKind::SliceBackward:
    case OpKind::GatherBackward: case OpKind::MaxPool2DBackward: case OpKind::AvgPool2DBackward: case OpKind::Accuracy:
    case OpKind::AccumulateGrad: case OpKind::OptimizerTick: case OpKind::AdamWUpdate: case OpKind::SgdUpdate:
    case OpKind::RmspropUpdate: case OpKind::AdagradUpdate: case OpKind::ClipValue: case OpKind::SquaredNorm:
    case OpKind::ClipNorm:
    case OpKind::MovingAverage: case OpKind::Maximum: case OpKind::Minimum: case OpKind::GreaterEqual:
    case OpKind::MaeLoss: case OpKind::HuberLoss: case OpKind::BinaryCrossEntropy: case OpKind::MaeLossBackward:
    case OpKind::HuberLossBackward: case OpKind::BinaryCrossEntropyBackward: case OpKind::BinaryAccuracy:
    case OpKind::TopKAccuracy: case OpKind::Conv2D: case OpKind::Conv2DBackwardInput:
    case OpKind::Conv2DBackwardFilter: case OpKind::BatchNormStats: case OpKind::BatchNorm:
    case OpKind::BatchNormParamGrad: case OpKind::BatchNormBackward: case OpKind::Count:
      break;
  }
  throw Error(std::string("internal error: op '") + op_info(op).name + "' not handled by backward_of");
}

OpAttrs with_shape(OpAttrs at, const Shape& shape) {
  at.shape = shape;
  return at;
}
}  // namespace

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
    case OpKind::Maximum:    // m = [a >= b]: da = g m, db = g (1 - m) (ties go to a, as TensorFlow)
    case OpKind::Minimum: {  // m = [a <= b] = [b >= a]
      Value m = op == OpKind::Maximum ? back(OpKind::GreaterEqual, {x[0], x[1]})
                                      : back(OpKind::GreaterEqual, {x[1], x[0]});
      Value ga = b.mul(g, m);  // g m and g - g m are exact: m is 0 or 1
      if (need(0)) dx[0] = b.sum_to(ga, b.shape(x[0]));
      if (need(1)) dx[1] = b.sum_to(b.sub(g, ga), b.shape(x[1]));
      return;
    }
    case OpKind::GreaterEqual: return;  // piecewise constant: no gradient
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
    case OpKind::Reshape: dx[0] = b.reshape(g, b.shape(x[0])); return;
    case OpKind::Rsqrt: dx[0] = back(OpKind::RsqrtBackward, {y, g}); return;
    case OpKind::Gelu:
    case OpKind::Silu:
    case OpKind::Elu:
    case OpKind::LeakyRelu:
    case OpKind::Softplus: dx[0] = b.apply(backward_of(op), {x[0], g}, at); return;
    case OpKind::MeanLastAxis:
      dx[0] = b.scale(b.broadcast_to(g, b.shape(x[0])), 1.0f / float(b.shape(x[0])[-1]));
      return;
    case OpKind::Slice: dx[0] = b.apply(OpKind::SliceBackward, {g}, with_shape(at, b.shape(x[0]))); return;
    case OpKind::Concat: {
      const int64_t na = b.shape(x[0])[at.axis], nb = b.shape(x[1])[at.axis];
      if (need(0)) dx[0] = b.slice(g, at.axis, 0, na);
      if (need(1)) dx[1] = b.slice(g, at.axis, na, nb);
      return;
    }
    case OpKind::Gather:  // ids take no gradient
      dx[0] = b.apply(OpKind::GatherBackward, {g, x[1]}, with_shape(at, b.shape(x[0])));
      return;
    case OpKind::Im2Col: dx[0] = b.apply(OpKind::Col2Im, {g}, with_shape(at, b.shape(x[0]))); return;
    case OpKind::Col2Im: dx[0] = b.windowed(OpKind::Im2Col, g, at.window); return;
    // Conv2D's input and filter gradients are its adjoints; each of the three
    // is linear in both arguments, so the rules close over the three ops.
    case OpKind::Conv2D:  // y = conv(x, k)
      if (need(0)) dx[0] = b.apply(OpKind::Conv2DBackwardInput, {g, x[1]}, with_shape(at, b.shape(x[0])));
      if (need(1)) dx[1] = b.apply(OpKind::Conv2DBackwardFilter, {x[0], g}, with_shape(at, b.shape(x[1])));
      return;
    case OpKind::Conv2DBackwardInput:  // y = conv^T(gy, k)
      if (need(0)) dx[0] = b.apply(OpKind::Conv2D, {g, x[1]}, at);
      if (need(1)) dx[1] = b.apply(OpKind::Conv2DBackwardFilter, {g, x[0]}, with_shape(at, b.shape(x[1])));
      return;
    case OpKind::Conv2DBackwardFilter:  // y = filter gradient(x, gy)
      if (need(0)) dx[0] = b.apply(OpKind::Conv2DBackwardInput, {x[1], g}, with_shape(at, b.shape(x[0])));
      if (need(1)) dx[1] = b.apply(OpKind::Conv2D, {x[0], g}, at);
      return;
    case OpKind::BatchNormStats: {  // mean = sum(x)/N, var = sum((x - mean)^2)/N
      const Shape xs = b.shape(x[0]);
      const int64_t c = xs[-1];
      const float inv_n = float(c) / float(xs.numel());
      Value g_mean = b.reshape(b.slice(g, 0, 0, 1), Shape{c});
      Value g_var = b.reshape(b.slice(g, 0, 1, 1), Shape{c});
      Value mean = b.reshape(b.slice(y, 0, 0, 1), Shape{c});
      Value centered = b.sub(x[0], mean);
      dx[0] = b.add(b.scale(b.mul(centered, b.scale(g_var, 2.0f)), inv_n), b.scale(g_mean, inv_n));
      return;
    }
    case OpKind::BatchNorm: {
      Value sums = b.apply(OpKind::BatchNormParamGrad, {x[0], x[1], g}, at);
      const int64_t c = b.shape(x[2])[0];
      if (need(0)) dx[0] = b.apply(OpKind::BatchNormBackward, {x[0], x[1], x[2], g, sums}, at);
      if (need(2)) dx[2] = b.reshape(b.slice(sums, 0, 0, 1), Shape{c});
      if (need(3)) dx[3] = b.reshape(b.slice(sums, 0, 1, 1), Shape{c});
      if (need(1) && at.length != 1) {  // given statistics: d/dmean = -sum(g) gamma inv, d/dvar = -sum(g xhat) gamma inv^2 / 2
        Value var = b.reshape(b.slice(x[1], 0, 1, 1), Shape{c});
        Value inv = b.apply(OpKind::Rsqrt, {b.add(var, b.fill(Shape{}, at.scale))});
        Value k = b.mul(x[2], inv);
        Value d_mean = b.scale(b.mul(b.reshape(b.slice(sums, 0, 1, 1), Shape{c}), k), -1.0f);
        Value d_var = b.scale(b.mul(b.reshape(b.slice(sums, 0, 0, 1), Shape{c}), b.mul(k, inv)), -0.5f);
        OpAttrs cat;
        cat.axis = 0;
        dx[1] = b.apply(OpKind::Concat, {b.reshape(d_mean, Shape{1, c}), b.reshape(d_var, Shape{1, c})}, cat);
      }
      return;  // with the batch's own statistics, their gradient is inside dx[0]
    }
    case OpKind::MaxPool2D: dx[0] = b.apply(OpKind::MaxPool2DBackward, {x[0], g}, at); return;
    case OpKind::AvgPool2D: dx[0] = b.apply(OpKind::AvgPool2DBackward, {g}, with_shape(at, b.shape(x[0]))); return;
    case OpKind::SliceBackward: dx[0] = b.slice(g, at.axis, at.start, at.length); return;
    case OpKind::ToIndex: return;  // ids are not differentiable
    case OpKind::SoftmaxCrossEntropy:  // labels and weights take no gradient
      dx[0] = x.size() == 3 ? back(OpKind::SoftmaxCrossEntropyBackward, {x[0], x[1], x[2], g})
                            : back(OpKind::SoftmaxCrossEntropyBackward, {x[0], x[1], g});
      return;
    case OpKind::MseLoss:    // dpred = 2 w (p - t) g / (B N)
    case OpKind::MaeLoss:    // dpred = w sign(p - t) g / (B N)
    case OpKind::HuberLoss: {  // dpred = w clip(p - t, -delta, delta) g / (B N); dtarget = -dpred for all three
      const OpKind k = op == OpKind::MseLoss   ? OpKind::MseLossBackward
                       : op == OpKind::MaeLoss ? OpKind::MaeLossBackward
                                               : OpKind::HuberLossBackward;
      Value d = x.size() == 3 ? b.apply(k, {x[0], x[1], x[2], g}, at) : b.apply(k, {x[0], x[1], g}, at);
      if (need(0)) dx[0] = d;
      if (need(1)) dx[1] = b.scale(d, -1.0f);
      return;
    }
    case OpKind::BinaryCrossEntropy:  // dlogits = w (sigmoid(z) - y) g / (B N); targets and weights take no gradient
      dx[0] = x.size() == 3 ? back(OpKind::BinaryCrossEntropyBackward, {x[0], x[1], x[2], g})
                            : back(OpKind::BinaryCrossEntropyBackward, {x[0], x[1], g});
      return;
    case OpKind::Fill:
    case OpKind::Leaf:
      return;
    case OpKind::ReluBackward: case OpKind::SigmoidBackward: case OpKind::TanhBackward: case OpKind::SoftmaxBackward:
    case OpKind::LogSoftmaxBackward: case OpKind::SoftmaxCrossEntropyBackward: case OpKind::MseLossBackward:
    case OpKind::RsqrtBackward: case OpKind::GeluBackward: case OpKind::SiluBackward: case OpKind::EluBackward:
    case OpKind::LeakyReluBackward: case OpKind::SoftplusBackward: case OpKind::GatherBackward:
    case OpKind::MaxPool2DBackward: case OpKind::AvgPool2DBackward: case OpKind::Accuracy: case OpKind::AccumulateGrad:
    case OpKind::OptimizerTick: case OpKind::AdamWUpdate: case OpKind::SgdUpdate:
    case OpKind::RmspropUpdate: case OpKind::AdagradUpdate: case OpKind::ClipValue: case OpKind::SquaredNorm:
    case OpKind::ClipNorm: case OpKind::MovingAverage:
    case OpKind::MaeLossBackward: case OpKind::HuberLossBackward: case OpKind::BinaryCrossEntropyBackward:
    case OpKind::BinaryAccuracy: case OpKind::TopKAccuracy: case OpKind::BatchNormParamGrad:
    case OpKind::BatchNormBackward: case OpKind::Count:
      break;
  }
  throw Error(std::string("op '") + op_info(op).name + "' has no gradient rule");
}

}  // namespace tensorgrad
