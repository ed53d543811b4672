#include <array>
#include <string>

#include "kernels/kernels.h"
#include "ops/op_table.h"
#include "tensorgrad/core/error.h"

namespace tensorgrad::kernels {

namespace {
struct KernelEntry {
  OpKind kind;
  void (*run)(const KernelCall& k);
};

// Leaves are bound to outside memory and a view shares its input's (the
// planner gave it that memory), so neither computes anything.
void run_nothing(const KernelCall&) {}

// The kernel half of the op table, the CPU backend's: entry i runs OpKind i,
// each op's own function (a lambda where it only unpacks the call).
constexpr auto kKernels = std::to_array<KernelEntry>({
    {OpKind::Leaf, run_nothing},
    {OpKind::Fill, [](const KernelCall& k) {
       for (int64_t i = 0; i < k.out.numel(); ++i) k.out.f()[i] = k.at.value;
     }},
    {OpKind::MatMul, [](const KernelCall& k) {
       matmul(k.at, k.in[0], k.in[1], k.out, k.ctx, 0.0f, k.in.size() == 3 ? k.in[2].f() : nullptr,
              (k.at.flags & kReluOutput) != 0);
     }},
    {OpKind::Add, add_forward},
    {OpKind::Sub, sub_forward},
    {OpKind::Mul, mul_forward},
    {OpKind::Maximum, maximum_forward},
    {OpKind::Minimum, minimum_forward},
    {OpKind::GreaterEqual, greater_equal_forward},
    {OpKind::MaskedFill, masked_fill_forward},
    {OpKind::Scale, scale_forward},
    {OpKind::Relu, relu_forward},
    {OpKind::Sigmoid, sigmoid_forward},
    {OpKind::Tanh, tanh_forward},
    {OpKind::Softmax, softmax_forward},
    {OpKind::LogSoftmax, log_softmax_forward},
    {OpKind::SoftmaxCrossEntropy, [](const KernelCall& k) { softmax_cross_entropy(k.in, k.out); }},
    {OpKind::MseLoss, [](const KernelCall& k) { mse_loss(k.in, k.out); }},
    {OpKind::MaeLoss, [](const KernelCall& k) { mae_loss(k.in, k.out); }},
    {OpKind::HuberLoss, [](const KernelCall& k) { huber_loss(k.at, k.in, k.out); }},
    {OpKind::BinaryCrossEntropy, [](const KernelCall& k) { binary_cross_entropy(k.in, k.out); }},
    {OpKind::Dropout, dropout_forward},
    {OpKind::Sum, sum_forward},
    {OpKind::Mean, mean_forward},
    {OpKind::SumTo, [](const KernelCall& k) { sum_to(k.in[0], k.out, k.ctx); }},
    {OpKind::BroadcastTo, [](const KernelCall& k) { broadcast_to(k.in[0], k.out); }},
    {OpKind::Reshape, run_nothing},
    {OpKind::Rsqrt, rsqrt_forward},
    {OpKind::Gelu, gelu_forward},
    {OpKind::GeluTanh, gelu_tanh_forward},
    {OpKind::Silu, silu_forward},
    {OpKind::Elu, elu_forward},
    {OpKind::LeakyRelu, leaky_relu_forward},
    {OpKind::Softplus, softplus_forward},
    {OpKind::MeanLastAxis, mean_last_axis_forward},
    {OpKind::Slice, [](const KernelCall& k) { slice(k.at, k.in[0], k.out); }},
    {OpKind::Concat, [](const KernelCall& k) { concat(k.at, k.in, k.out); }},
    {OpKind::Gather, [](const KernelCall& k) { gather(k.in[0], k.in[1], k.out, k.ctx); }},
    {OpKind::ToIndex, [](const KernelCall& k) { to_index(k.in[0], k.out); }},
    {OpKind::MaxPool2D, max_pool2d_forward},
    {OpKind::AvgPool2D, avg_pool2d_forward},
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
    {OpKind::Div, div_forward},
    {OpKind::Exp, exp_forward},
    {OpKind::Log, log_forward},
    {OpKind::Sqrt, sqrt_forward},
    {OpKind::Erf, erf_forward},
    {OpKind::Pow, pow_forward},
    {OpKind::Clamp, clamp_forward},
    {OpKind::SumAxis, sum_axis_forward},
    {OpKind::MeanAxis, mean_axis_forward},
    {OpKind::MaxAxis, max_axis_forward},
    {OpKind::Transpose, [](const KernelCall& k) { transpose(k.at, k.in[0], k.out); }},
    {OpKind::LstmSequence,
     [](const KernelCall& k) {
       const bool states = k.in.size() == 4;
       lstm_sequence(k.in[0], k.in[1], states ? k.in[2].f() : nullptr, states ? k.in[3].f() : nullptr, k.out, k.ctx);
     }},
    {OpKind::GruSequence,
     [](const KernelCall& k) {
       gru_sequence(k.in[0], k.in[1], k.in[2], k.in.size() == 4 ? k.in[3].f() : nullptr, k.out, k.ctx);
     }},
    {OpKind::Attention, attention_forward},
    {OpKind::RmsNorm, rms_norm_forward},
    {OpKind::Rope, rope_forward},
    {OpKind::ReluBackward, relu_backward},
    {OpKind::SigmoidBackward, sigmoid_backward},
    {OpKind::TanhBackward, tanh_backward},
    {OpKind::SoftmaxBackward, softmax_backward},
    {OpKind::LogSoftmaxBackward, log_softmax_backward},
    {OpKind::SoftmaxCrossEntropyBackward, [](const KernelCall& k) { softmax_cross_entropy_backward(k.in, k.out); }},
    {OpKind::MseLossBackward, [](const KernelCall& k) { mse_loss_backward(k.in, k.out); }},
    {OpKind::MaeLossBackward, [](const KernelCall& k) { mae_loss_backward(k.in, k.out); }},
    {OpKind::HuberLossBackward, [](const KernelCall& k) { huber_loss_backward(k.at, k.in, k.out); }},
    {OpKind::BinaryCrossEntropyBackward, [](const KernelCall& k) { binary_cross_entropy_backward(k.in, k.out); }},
    {OpKind::RsqrtBackward, rsqrt_backward},
    {OpKind::GeluBackward, gelu_backward},
    {OpKind::GeluTanhBackward, gelu_tanh_backward},
    {OpKind::SiluBackward, silu_backward},
    {OpKind::EluBackward, elu_backward},
    {OpKind::LeakyReluBackward, leaky_relu_backward},
    {OpKind::SoftplusBackward, softplus_backward},
    {OpKind::ErfBackward, erf_backward},
    {OpKind::SliceBackward, [](const KernelCall& k) { slice_backward(k.at, k.in[0], k.out); }},
    {OpKind::GatherBackward, [](const KernelCall& k) { gather_backward(k.in[0], k.in[1], k.out); }},
    {OpKind::MaxPool2DBackward, max_pool2d_backward},
    {OpKind::AvgPool2DBackward, avg_pool2d_backward},
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
    {OpKind::ClampBackward, clamp_backward},
    {OpKind::MaxAxisBackward, max_axis_backward},
    {OpKind::LstmSequenceBackward,
     [](const KernelCall& k) {
       lstm_sequence_backward(k.in[0], k.in[1], k.in[2], k.in.size() == 4 ? k.in[3].f() : nullptr, k.out, k.ctx);
     }},
    {OpKind::GruSequenceBackward,
     [](const KernelCall& k) {
       gru_sequence_backward(k.in[0], k.in[1], k.in[2], k.in.size() == 4 ? k.in[3].f() : nullptr, k.out, k.ctx);
     }},
    {OpKind::AttentionBackward, attention_backward},
    {OpKind::RmsNormBackward, rms_norm_backward},
    {OpKind::Accuracy, [](const KernelCall& k) { accuracy(k.in[0], k.in[1], k.out); }},
    {OpKind::BinaryAccuracy, [](const KernelCall& k) { binary_accuracy(k.at, k.in[0], k.in[1], k.out); }},
    {OpKind::TopKAccuracy, [](const KernelCall& k) { top_k_accuracy(k.at, k.in[0], k.in[1], k.out); }},
    {OpKind::AccumulateGrad, accumulate_grad},
    {OpKind::OptimizerTick, optimizer_tick},
    {OpKind::AdamWUpdate, adamw_update},
    {OpKind::SgdUpdate, sgd_update},
    {OpKind::RmspropUpdate, rmsprop_update},
    {OpKind::AdagradUpdate, adagrad_update},
    {OpKind::ClipValue, [](const KernelCall& k) { clip_value(k.at, k.in[0], k.ctx); }},
    {OpKind::SquaredNorm,
     [](const KernelCall& k) { squared_norm(k.in[0], k.in.size() == 2 ? k.in[1].f() : nullptr, k.out); }},
    {OpKind::ClipNorm, [](const KernelCall& k) { clip_norm(k.at, k.in[0], k.in[1], k.ctx); }},
    {OpKind::MovingAverage, moving_average},
    {OpKind::AdvanceCounter, [](const KernelCall& k) { ++*static_cast<int64_t*>(k.in[0].data); }},
    {OpKind::PolyakUpdate, polyak_update},
    {OpKind::Assign, assign},
});
static_assert(indexed_by_op_kind(kKernels), "kKernels must list every OpKind once, in enum order");
}  // namespace

void run_kernel(OpKind op, const OpAttrs& at, std::span<const TensorRef> in, const TensorRef& out,
                const KernelContext& ctx) {
  if (size_t(op) >= kKernels.size()) unhandled_op(op, "kernels::run_kernel");
  kKernels[size_t(op)].run(KernelCall{at, in, out, ctx});
}

void unhandled_op(OpKind op, const char* function) {
  std::string message = "internal error: op '";
  message += op < OpKind::Count ? op_info(op).name : "count";
  message += "' not handled by ";
  message += function;
  throw Error(message);
}

}  // namespace tensorgrad::kernels
