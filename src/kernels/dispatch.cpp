#include "kernels/kernels.h"

namespace tensorgrad::kernels {

void run_kernel(OpKind op, const OpAttrs& at, std::span<const TensorRef> in, const TensorRef& out,
                const KernelContext& ctx) {
  switch (op) {
    case OpKind::Leaf: return;
    case OpKind::Fill:
      for (int64_t i = 0; i < out.numel(); ++i) out.f()[i] = at.scale;
      return;
    case OpKind::MatMul: return matmul(at, in[0], in[1], out, ctx);
    case OpKind::Add:
    case OpKind::Sub:
    case OpKind::Mul: return binary(op, in[0], in[1], out, ctx);
    case OpKind::Scale:
    case OpKind::Relu:
    case OpKind::Sigmoid:
    case OpKind::Tanh:
    case OpKind::Dropout: return unary(op, at, in[0], out, ctx);
    case OpKind::Softmax:
    case OpKind::LogSoftmax: return softmax(op, in[0], out, ctx);
    case OpKind::SoftmaxCrossEntropy: return softmax_cross_entropy(in, out);
    case OpKind::MseLoss: return mse_loss(in, out);
    case OpKind::Sum:
    case OpKind::Mean: return reduce_all(op, in[0], out);
    case OpKind::SumTo: return sum_to(in[0], out);
    case OpKind::BroadcastTo: return broadcast_to(in[0], out);
    case OpKind::ReluBackward:
    case OpKind::SigmoidBackward:
    case OpKind::TanhBackward: return unary_backward(op, in[0], in[1], out, ctx);
    case OpKind::SoftmaxBackward:
    case OpKind::LogSoftmaxBackward: return softmax_backward(op, in[0], in[1], out, ctx);
    case OpKind::SoftmaxCrossEntropyBackward: return softmax_cross_entropy_backward(in, out);
    case OpKind::MseLossBackward: return mse_loss_backward(in, out);
    case OpKind::Accuracy: return accuracy(in[0], in[1], out);
    case OpKind::AccumulateGrad:
    case OpKind::OptimizerTick:
    case OpKind::AdamWUpdate:
    case OpKind::SgdUpdate: return optimizer(op, at, in, ctx);
    case OpKind::Count: return;
  }
}

}  // namespace tensorgrad::kernels
