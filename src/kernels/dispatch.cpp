#include "kernels/kernels.h"

#include <string>

#include "tensorgrad/core/error.h"

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
    case OpKind::Mul:
    case OpKind::Maximum:
    case OpKind::Minimum:
    case OpKind::GreaterEqual: return binary(op, in[0], in[1], out, ctx);
    case OpKind::Reshape: return;  // a view: the planner gave it its input's memory
    case OpKind::Rsqrt:
    case OpKind::Gelu:
    case OpKind::Silu:
    case OpKind::Elu:
    case OpKind::LeakyRelu:
    case OpKind::Softplus:
    case OpKind::Scale:
    case OpKind::Relu:
    case OpKind::Sigmoid:
    case OpKind::Tanh:
    case OpKind::Dropout: return unary(op, at, in[0], out, ctx);
    case OpKind::Softmax:
    case OpKind::LogSoftmax: return softmax(op, in[0], out, ctx);
    case OpKind::SoftmaxCrossEntropy: return softmax_cross_entropy(in, out);
    case OpKind::MseLoss: return mse_loss(in, out);
    case OpKind::MaeLoss: return mae_loss(in, out);
    case OpKind::HuberLoss: return huber_loss(at, in, out);
    case OpKind::BinaryCrossEntropy: return binary_cross_entropy(in, out);
    case OpKind::Sum:
    case OpKind::Mean: return reduce_all(op, in[0], out);
    case OpKind::SumTo: return sum_to(in[0], out, ctx);
    case OpKind::BroadcastTo: return broadcast_to(in[0], out);
    case OpKind::MeanLastAxis: return mean_last_axis(in[0], out, ctx);
    case OpKind::Slice: return slice(at, in[0], out);
    case OpKind::SliceBackward: return slice_backward(at, in[0], out);
    case OpKind::Concat: return concat(at, in[0], in[1], out);
    case OpKind::Gather: return gather(in[0], in[1], out, ctx);
    case OpKind::GatherBackward: return gather_backward(in[0], in[1], out);
    case OpKind::ToIndex: return to_index(in[0], out);
    case OpKind::Im2Col: return im2col(at.window, in[0], out, ctx);
    case OpKind::Col2Im: return col2im(at.window, in[0], out, ctx);
    case OpKind::MaxPool2D:
    case OpKind::AvgPool2D: return pool2d(op, at.window, in[0], out, ctx);
    case OpKind::Conv2D: return conv2d(at.window, in[0], in[1], out, ctx);
    case OpKind::Conv2DBackwardInput: return conv2d_backward_input(at.window, in[0], in[1], out, ctx);
    case OpKind::Conv2DBackwardFilter: return conv2d_backward_filter(at.window, in[0], in[1], out, ctx);
    case OpKind::BatchNormStats: return batch_norm_stats(in[0], out, ctx);
    case OpKind::BatchNorm: return batch_norm(at, in[0], in[1], in[2], in[3], out, ctx);
    case OpKind::BatchNormParamGrad: return batch_norm_param_grad(at, in[0], in[1], in[2], out, ctx);
    case OpKind::BatchNormBackward: return batch_norm_backward(at, in, out, ctx);
    case OpKind::MaxPool2DBackward: return max_pool2d_backward(at.window, in[0], in[1], out, ctx);
    case OpKind::AvgPool2DBackward: return avg_pool2d_backward(at.window, in[0], out, ctx);
    case OpKind::GeluBackward:
    case OpKind::SiluBackward:
    case OpKind::EluBackward:
    case OpKind::LeakyReluBackward:
    case OpKind::SoftplusBackward: return activation_backward(op, at, in[0], in[1], out, ctx);
    case OpKind::RsqrtBackward:
    case OpKind::ReluBackward:
    case OpKind::SigmoidBackward:
    case OpKind::TanhBackward: return unary_backward(op, in[0], in[1], out, ctx);
    case OpKind::SoftmaxBackward:
    case OpKind::LogSoftmaxBackward: return softmax_backward(op, in[0], in[1], out, ctx);
    case OpKind::SoftmaxCrossEntropyBackward: return softmax_cross_entropy_backward(in, out);
    case OpKind::MseLossBackward: return mse_loss_backward(in, out);
    case OpKind::MaeLossBackward: return mae_loss_backward(in, out);
    case OpKind::HuberLossBackward: return huber_loss_backward(at, in, out);
    case OpKind::BinaryCrossEntropyBackward: return binary_cross_entropy_backward(in, out);
    case OpKind::Accuracy: return accuracy(in[0], in[1], out);
    case OpKind::BinaryAccuracy: return binary_accuracy(at, in[0], in[1], out);
    case OpKind::TopKAccuracy: return top_k_accuracy(at, in[0], in[1], out);
    case OpKind::AccumulateGrad:
    case OpKind::OptimizerTick:
    case OpKind::AdamWUpdate:
    case OpKind::SgdUpdate:
    case OpKind::RmspropUpdate:
    case OpKind::AdagradUpdate:
    case OpKind::MovingAverage: return optimizer(op, at, in, ctx);
    case OpKind::ClipValue: return clip_value(at, in[0], ctx);
    case OpKind::SquaredNorm: return squared_norm(in[0], out);
    case OpKind::ClipNorm: return clip_norm(at, in[0], in[1], ctx);
    case OpKind::Count: break;
  }
  unhandled_op(op, "kernels::run_kernel");
}

void unhandled_op(OpKind op, const char* function) {
  std::string message = "internal error: op '";
  message += op < OpKind::Count ? op_info(op).name : "count";
  message += "' not handled by ";
  message += function;
  throw Error(message);
}

}  // namespace tensorgrad::kernels
