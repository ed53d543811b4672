#include <array>
#include <string>

#include "kernels/kernels.h"
#include "ops/op_table.h"
#include "tensorgrad/core/error.h"

namespace tensorgrad::kernels {

namespace {
/// One kernel invocation; a table entry reads what its kernel takes.
struct KernelCall {
  OpKind op;
  const OpAttrs& at;
  std::span<const TensorRef> in;
  const TensorRef& out;
  const KernelContext& ctx;
};

struct KernelEntry {
  OpKind kind;
  void (*run)(const KernelCall& k);
};

// Families that share one kernel function, which picks the formula by op.
void run_binary(const KernelCall& k) { binary(k.op, k.in[0], k.in[1], k.out, k.ctx); }
void run_unary(const KernelCall& k) { unary(k.op, k.at, k.in[0], k.out, k.ctx); }
void run_unary_backward(const KernelCall& k) { unary_backward(k.op, k.in[0], k.in[1], k.out, k.ctx); }
void run_activation_backward(const KernelCall& k) { activation_backward(k.op, k.at, k.in[0], k.in[1], k.out, k.ctx); }
void run_softmax(const KernelCall& k) { softmax(k.op, k.in[0], k.out, k.ctx); }
void run_softmax_backward(const KernelCall& k) { softmax_backward(k.op, k.in[0], k.in[1], k.out, k.ctx); }
void run_reduce_all(const KernelCall& k) { reduce_all(k.op, k.in[0], k.out); }
void run_reduce_axis(const KernelCall& k) { reduce_axis(k.op, k.at.axis, k.in[0], k.out, k.ctx); }
void run_pool2d(const KernelCall& k) { pool2d(k.op, k.at.window, k.in[0], k.out, k.ctx); }
void run_optimizer(const KernelCall& k) { optimizer(k.op, k.at, k.in, k.ctx); }
// Leaves are bound to outside memory and a view shares its input's (the
// planner gave it that memory), so neither computes anything.
void run_nothing(const KernelCall&) {}

// The kernel half of the op table: entry i runs OpKind i.
constexpr auto kKernels = std::to_array<KernelEntry>({
    {OpKind::Leaf, run_nothing},
    {OpKind::Fill, [](const KernelCall& k) {
       for (int64_t i = 0; i < k.out.numel(); ++i) k.out.f()[i] = k.at.scale;
     }},
    {OpKind::MatMul, [](const KernelCall& k) {
       matmul(k.at, k.in[0], k.in[1], k.out, k.ctx, 0.0f, k.in.size() == 3 ? k.in[2].f() : nullptr,
              (k.at.flags & kReluOutput) != 0);
     }},
    {OpKind::Add, [](const KernelCall& k) {
       if (k.at.flags & kReluOutput) return add_relu(k.in[0], k.in[1], k.out, k.ctx);
       binary(k.op, k.in[0], k.in[1], k.out, k.ctx);
     }},
    {OpKind::Sub, run_binary},
    {OpKind::Mul, run_binary},
    {OpKind::Maximum, run_binary},
    {OpKind::Minimum, run_binary},
    {OpKind::GreaterEqual, run_binary},
    {OpKind::Scale, run_unary},
    {OpKind::Relu, run_unary},
    {OpKind::Sigmoid, run_unary},
    {OpKind::Tanh, run_unary},
    {OpKind::Softmax, run_softmax},
    {OpKind::LogSoftmax, run_softmax},
    {OpKind::SoftmaxCrossEntropy, [](const KernelCall& k) { softmax_cross_entropy(k.in, k.out); }},
    {OpKind::MseLoss, [](const KernelCall& k) { mse_loss(k.in, k.out); }},
    {OpKind::MaeLoss, [](const KernelCall& k) { mae_loss(k.in, k.out); }},
    {OpKind::HuberLoss, [](const KernelCall& k) { huber_loss(k.at, k.in, k.out); }},
    {OpKind::BinaryCrossEntropy, [](const KernelCall& k) { binary_cross_entropy(k.in, k.out); }},
    {OpKind::Dropout, [](const KernelCall& k) {
       dropout(k.at, k.in[0], uint64_t(*static_cast<const int64_t*>(k.in[1].data)), k.out, k.ctx);
     }},
    {OpKind::Sum, run_reduce_all},
    {OpKind::Mean, run_reduce_all},
    {OpKind::SumTo, [](const KernelCall& k) { sum_to(k.in[0], k.out, k.ctx); }},
    {OpKind::BroadcastTo, [](const KernelCall& k) { broadcast_to(k.in[0], k.out); }},
    {OpKind::Reshape, run_nothing},
    {OpKind::Rsqrt, run_unary},
    {OpKind::Gelu, run_unary},
    {OpKind::Silu, run_unary},
    {OpKind::Elu, run_unary},
    {OpKind::LeakyRelu, run_unary},
    {OpKind::Softplus, run_unary},
    {OpKind::MeanLastAxis,
     [](const KernelCall& k) { reduce_axis(k.op, k.in[0].shape.rank() - 1, k.in[0], k.out, k.ctx); }},
    {OpKind::Slice, [](const KernelCall& k) { slice(k.at, k.in[0], k.out); }},
    {OpKind::Concat, [](const KernelCall& k) { concat(k.at, k.in, k.out); }},
    {OpKind::Gather, [](const KernelCall& k) { gather(k.in[0], k.in[1], k.out, k.ctx); }},
    {OpKind::ToIndex, [](const KernelCall& k) { to_index(k.in[0], k.out); }},
    {OpKind::Im2Col, [](const KernelCall& k) { im2col(k.at.window, k.in[0], k.out, k.ctx); }},
    {OpKind::Col2Im, [](const KernelCall& k) { col2im(k.at.window, k.in[0], k.out, k.ctx); }},
    {OpKind::MaxPool2D, run_pool2d},
    {OpKind::AvgPool2D, run_pool2d},
    {OpKind::Conv2D, [](const KernelCall& k) {
       // kBatchStatsOutput: the statistics go just before the output (the plan left room there)
       float* stats = k.at.flags & kBatchStatsOutput ? k.out.f() - batch_stats_side_floats(k.out.shape[-1]) : nullptr;
       conv2d(k.at.window, k.in[0], k.in[1], k.out, k.ctx, k.in.size() == 3 ? k.in[2].f() : nullptr,
              (k.at.flags & kReluOutput) != 0, stats);
     }},
    {OpKind::BatchNormStats, [](const KernelCall& k) { batch_norm_stats(k.in[0], k.out, k.ctx); }},
    {OpKind::AttachedBatchStats, run_nothing},
    {OpKind::BatchNorm,
     [](const KernelCall& k) { batch_norm(k.at, k.in, k.out, k.ctx); }},
    {OpKind::Div, run_binary},
    {OpKind::Exp, run_unary},
    {OpKind::Log, run_unary},
    {OpKind::Sqrt, run_unary},
    {OpKind::Pow, run_unary},
    {OpKind::Clamp, run_unary},
    {OpKind::SumAxis, run_reduce_axis},
    {OpKind::MeanAxis, run_reduce_axis},
    {OpKind::MaxAxis, run_reduce_axis},
    {OpKind::Transpose, [](const KernelCall& k) { transpose(k.at, k.in[0], k.out); }},
    {OpKind::LstmSequence, [](const KernelCall& k) { lstm_sequence(k.in[0], k.in[1], k.out, k.ctx); }},
    {OpKind::GruSequence, [](const KernelCall& k) { gru_sequence(k.in[0], k.in[1], k.in[2], k.out, k.ctx); }},
    {OpKind::ReluBackward, run_unary_backward},
    {OpKind::SigmoidBackward, run_unary_backward},
    {OpKind::TanhBackward, run_unary_backward},
    {OpKind::SoftmaxBackward, run_softmax_backward},
    {OpKind::LogSoftmaxBackward, run_softmax_backward},
    {OpKind::SoftmaxCrossEntropyBackward, [](const KernelCall& k) { softmax_cross_entropy_backward(k.in, k.out); }},
    {OpKind::MseLossBackward, [](const KernelCall& k) { mse_loss_backward(k.in, k.out); }},
    {OpKind::MaeLossBackward, [](const KernelCall& k) { mae_loss_backward(k.in, k.out); }},
    {OpKind::HuberLossBackward, [](const KernelCall& k) { huber_loss_backward(k.at, k.in, k.out); }},
    {OpKind::BinaryCrossEntropyBackward, [](const KernelCall& k) { binary_cross_entropy_backward(k.in, k.out); }},
    {OpKind::RsqrtBackward, run_unary_backward},
    {OpKind::GeluBackward, run_activation_backward},
    {OpKind::SiluBackward, run_activation_backward},
    {OpKind::EluBackward, run_activation_backward},
    {OpKind::LeakyReluBackward, run_activation_backward},
    {OpKind::SoftplusBackward, run_activation_backward},
    {OpKind::SliceBackward, [](const KernelCall& k) { slice_backward(k.at, k.in[0], k.out); }},
    {OpKind::GatherBackward, [](const KernelCall& k) { gather_backward(k.in[0], k.in[1], k.out); }},
    {OpKind::MaxPool2DBackward,
     [](const KernelCall& k) { max_pool2d_backward(k.at.window, k.in[0], k.in[1], k.out, (k.at.flags & kMaskNonPositive) != 0, k.ctx); }},
    {OpKind::AvgPool2DBackward,
     [](const KernelCall& k) {
       avg_pool2d_backward(k.at.window, k.in[0], k.out, k.ctx, (k.at.flags & kMaskNonPositive) ? k.in[1].f() : nullptr);
     }},
    {OpKind::Conv2DBackwardInput,
     [](const KernelCall& k) {
       const bool masked = (k.at.flags & kMaskNonPositive) != 0;
       const size_t addends = k.in.size() - 2 - (masked ? 1 : 0);
       conv2d_backward_input(k.at.window, k.in[0], k.in[1], k.out, k.ctx, addends ? k.in[2].f() : nullptr,
                             masked ? k.in.back().f() : nullptr);
     }},
    {OpKind::Conv2DBackwardFilter,
     [](const KernelCall& k) { conv2d_backward_filter(k.at.window, k.in[0], k.in[1], k.out, k.ctx); }},
    {OpKind::BatchNormParamGrad,
     [](const KernelCall& k) { batch_norm_param_grad(k.at, k.in, k.out, k.ctx); }},
    {OpKind::BatchNormBackward, [](const KernelCall& k) { batch_norm_backward(k.at, k.in, k.out, k.ctx); }},
    {OpKind::ClampBackward, run_activation_backward},
    {OpKind::MaxAxisBackward,
     [](const KernelCall& k) { max_axis_backward(k.at.axis, k.in[0], k.in[1], k.out, k.ctx); }},
    {OpKind::LstmSequenceBackward,
     [](const KernelCall& k) { lstm_sequence_backward(k.in[0], k.in[1], k.in[2], k.out, k.ctx); }},
    {OpKind::GruSequenceBackward,
     [](const KernelCall& k) { gru_sequence_backward(k.in[0], k.in[1], k.in[2], k.out, k.ctx); }},
    {OpKind::Accuracy, [](const KernelCall& k) { accuracy(k.in[0], k.in[1], k.out); }},
    {OpKind::BinaryAccuracy, [](const KernelCall& k) { binary_accuracy(k.at, k.in[0], k.in[1], k.out); }},
    {OpKind::TopKAccuracy, [](const KernelCall& k) { top_k_accuracy(k.at, k.in[0], k.in[1], k.out); }},
    {OpKind::AccumulateGrad, run_optimizer},
    {OpKind::OptimizerTick, run_optimizer},
    {OpKind::AdamWUpdate, run_optimizer},
    {OpKind::SgdUpdate, run_optimizer},
    {OpKind::RmspropUpdate, run_optimizer},
    {OpKind::AdagradUpdate, run_optimizer},
    {OpKind::ClipValue, [](const KernelCall& k) { clip_value(k.at, k.in[0], k.ctx); }},
    {OpKind::SquaredNorm,
     [](const KernelCall& k) { squared_norm(k.in[0], k.in.size() == 2 ? k.in[1].f() : nullptr, k.out); }},
    {OpKind::ClipNorm, [](const KernelCall& k) { clip_norm(k.at, k.in[0], k.in[1], k.ctx); }},
    {OpKind::MovingAverage, run_optimizer},
    {OpKind::AdvanceCounter, [](const KernelCall& k) { ++*static_cast<int64_t*>(k.in[0].data); }},
    {OpKind::PolyakUpdate, run_optimizer},
    {OpKind::Assign, run_optimizer},
});
static_assert(indexed_by_op_kind(kKernels), "kKernels must list every OpKind once, in enum order");
}  // namespace

void run_kernel(OpKind op, const OpAttrs& at, std::span<const TensorRef> in, const TensorRef& out,
                const KernelContext& ctx) {
  if (size_t(op) >= kKernels.size()) unhandled_op(op, "kernels::run_kernel");
  kKernels[size_t(op)].run(KernelCall{op, at, in, out, ctx});
}

// Twice the multiply-adds of a product-like op (op_flops's list); 0 for the others.
static double product_flops(OpKind op, const OpAttrs& at, std::span<const Shape> in, const Shape& out) {
  if (op == OpKind::MatMul) {
    const Shape& a = in[0];
    return 2.0 * double(out.numel()) * double(at.trans_a ? a[a.rank() - 2] : a[a.rank() - 1]);
  }
  if (op == OpKind::AccumulateGrad && in.size() == 3) {  // the product form (acc, A, B): MatMul's count
    const Shape product[2] = {in[1], in[2]};
    return product_flops(OpKind::MatMul, at, product, out);
  }
  // The recurrent sequences: a {B, H} x U{H, gates*H} product a step, B*T steps' rows in all.
  if (op == OpKind::LstmSequence || op == OpKind::GruSequence || op == OpKind::LstmSequenceBackward ||
      op == OpKind::GruSequenceBackward)
    return 2.0 * double(out[0]) * double(out[1]) * double(in[1].numel());
  // A convolution and its gradients: 2 (the forward's outputs) kh kw C.
  if (op == OpKind::Conv2D) return 2.0 * double(out.numel()) * double(in[1].numel() / in[1][3]);
  if (op == OpKind::Conv2DBackwardInput) return 2.0 * double(in[0].numel()) * double(in[1].numel() / in[1][3]);
  if (op == OpKind::Conv2DBackwardFilter) return 2.0 * double(in[1].numel()) * double(out.numel() / out[3]);
  return 0.0;  // element-wise ops and reductions: their bytes are their cost
}

double op_flops(OpKind op, const OpAttrs& at, std::span<const Shape> in, const Shape& out) {
  const double products = product_flops(op, at, in, out);
  return products > 0.0 ? products : double(out.numel());
}

void unhandled_op(OpKind op, const char* function) {
  std::string message = "internal error: op '";
  message += op < OpKind::Count ? op_info(op).name : "count";
  message += "' not handled by ";
  message += function;
  throw Error(message);
}

}  // namespace tensorgrad::kernels
