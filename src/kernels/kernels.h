#pragma once
// CPU kernels of the op set, forward and backward. Internal to the library:
// the graph backend and the eager API (src/ag) call `run_kernel`; nothing else does.
// Kernels trust their inputs: shapes were checked by the shape rule and data
// (labels, ids) by the layer that fed it, so a kernel never throws (save
// run_kernel's internal error for an op outside its table).
#include <algorithm>
#include <cstdint>
#include <vector>
#include <span>
#include <thread>

#include "core/thread_pool.h"
#include "tensorgrad/core/dtype.h"
#include "kernels/index_errors.h"
#include "tensorgrad/core/kernel_arg.h"
#include "tensorgrad/core/shape.h"
#include "tensorgrad/ops/op.h"

namespace tensorgrad::kernels {

/// A tensor as a kernel sees it: the backend-neutral kernel argument, whose
/// device address is a host pointer on the CPU.
using TensorRef = KernelArg;

/// What a run hands every kernel.
struct KernelContext {
  ComputePool* pool = nullptr;  // null: run on the calling thread only
  // The mixed_bfloat16 policy on a CPU with AVX512-BF16: MatMul, the product
  // form of AccumulateGrad and the convolutions round their inputs to
  // bfloat16 and accumulate in float32 (kernels/bfloat16.h).
  bool bf16 = false;
};

/// Below this much work (op_flops of ops/op_table.h summed over a graph, or
/// one eager op's) threads cost more than they save, so the work runs on the
/// calling thread.
/// bench/parallel_threshold measures small steps on both sides of it.
inline constexpr double kParallelFlops = 1e6;

/// One kernel invocation. Every kernel of the CPU table (dispatch.cpp) takes
/// this one argument, so that the table maps each op straight to its function
/// and a kernel never asks which op it runs: one function per op, forward and
/// backward side by side in the file of their family.
struct KernelCall {
  const OpAttrs& at;
  std::span<const TensorRef> in;
  const TensorRef& out;
  const KernelContext& ctx;
};

/// Runs op on `in`, writing `out` (or, for in-place ops, their first input).
void run_kernel(OpKind op, const OpAttrs& attrs, std::span<const TensorRef> in, const TensorRef& out,
                const KernelContext& ctx);

/// The learning rate that schedule `kind` (LrScheduleKind, not kConstantLr)
/// gives at step t (the updates applied before this one), from its encoded
/// steps and values, computed in double: OptimizerTick's formula, which
/// learning_rate_at (opt/schedules.h) also reports with.
double scheduled_learning_rate(uint32_t kind, std::span<const int64_t> steps, std::span<const float> values, int64_t t);

/// Splits [0, n) into tiles of `tile` and runs f(begin, end) on the pool
/// (ComputePool::parallelize). Runs inline when there is no pool or a single
/// tile. Allocates nothing.
template <class F>
void parallel_for(ComputePool* pool, size_t n, size_t tile, F&& f) {
  if (n <= tile || !pool || pool->threads() <= 1) {
    if (n) f(size_t(0), n);
    return;
  }
  using Fn = std::remove_reference_t<F>;
  pool->parallelize(
      n, tile, [](void* c, size_t start, size_t len) { (*static_cast<Fn*>(c))(start, start + len); },
      const_cast<void*>(static_cast<const void*>(&f)));
}

/// One parallel_for's view of a SlotBuffers: an automatic variable, so that
/// a task that names it reaches the caller's buffers (a task naming the
/// caller's thread_local would reach the worker's own instance).
template <class T>
class SlotView {
 public:
  explicit SlotView(std::vector<std::vector<T>>* slots) : slots_(slots) {}
  /// The running thread's buffer: prepare's n elements, 64-byte aligned.
  T* mine() const {
    std::vector<T>& v = (*slots_)[size_t(ComputePool::current_slot())];
    const auto address = reinterpret_cast<uintptr_t>(v.data());
    return v.data() + ((64 - address % 64) % 64) / sizeof(T);
  }

 private:
  std::vector<std::vector<T>>* slots_;
};

/// Scratch for the tiles of a parallel_for: one buffer per slot of the pool
/// (ComputePool::current_slot), grown by prepare() on the calling thread
/// before the tiles run, so that no worker ever allocates. Kept by the
/// caller (a thread_local of the kernel). A thread_local buffer of the
/// worker's own grew the first time that worker happened to take a tile of
/// the kernel, which under oneTBB's dynamic scheduling could be any step:
/// steps were not allocation-free.
template <class T>
class SlotBuffers {
 public:
  /// Every slot of `pool` (null: the calling thread's only) holds at least
  /// n elements from a 64-byte boundary; the view the tasks read them by.
  SlotView<T> prepare(ComputePool* pool, size_t n) {
    const size_t slots = size_t(std::max(pool ? pool->threads() : 1, ComputePool::slots_here()));
    if (slots_.size() < slots) slots_.resize(slots);
    for (std::vector<T>& v : slots_)
      if (v.size() < n + kSlack) v.resize(n + kSlack);
    return SlotView<T>(&slots_);
  }

 private:
  static constexpr size_t kSlack = 64 / sizeof(T) + 1;
  std::vector<std::vector<T>> slots_;
};

/// The threads a pool may run (1 for none).
inline int64_t pool_threads(const ComputePool* pool) { return pool ? pool->threads() : 1; }

/// A tensor viewed as {outer, axis, inner} around one of its axes (slices,
/// concatenation, reductions along an axis).
struct Around {
  int64_t outer = 1, axis = 1, inner = 1;
};
inline Around around(const Shape& s, int axis) {
  Around a;
  for (int d = 0; d < axis; ++d) a.outer *= s[d];
  a.axis = s[axis];
  for (int d = axis + 1; d < s.rank(); ++d) a.inner *= s[d];
  return a;
}

/// v clamped to [lo, hi], written so that NaN stays NaN (as torch.clamp and
/// Keras' ops.clip): Clamp and ClipValue.
inline float clamp_value(float v, float lo, float hi) { return v > hi ? hi : v < lo ? lo : v; }
/// max(v, 0) with NaN kept (torch.relu and Keras' relu give NaN for NaN;
/// the comparison is false for it); -0 gives +0. Every ReLU, fused or not.
inline float relu_value(float v) { return v <= 0.0f ? 0.0f : v; }
/// ReLU's gradient given its output y: zero where y <= 0, g elsewhere, a NaN
/// y included (PyTorch's threshold_backward). Every ReLU mask, fused or not.
inline float relu_pass(float y, float g) { return y <= 0.0f ? 0.0f : g; }
/// max(acc, v) where a NaN wins and the first NaN seen stays (torch.max,
/// PyTorch's and Keras' max pooling): the max pools' running maximum.
inline float nan_max(float acc, float v) { return v > acc || v != v ? v : acc; }

/// The index of the first maximum of p[0], p[stride], ... p[(n-1) stride]
/// (n >= 1); a NaN counts as maximal, so the first NaN wins (torch.max).
/// MaxAxis reads its value, MaxAxisBackward routes the gradient to it.
inline int64_t first_max(const float* p, int64_t n, int64_t stride) {
  float m = p[0];
  if (m != m) return 0;
  int64_t best = 0;
  for (int64_t j = 1; j < n; ++j) {
    const float v = p[j * stride];
    if (v != v) return j;
    if (v > m) m = v, best = j;
  }
  return best;
}

/// B{rows, cols}^T as {cols, rows}, in the calling thread's buffer, which
/// grows once and is then reused (valid until that thread's next call).
const float* transposed(const float* b, int64_t rows, int64_t cols);
/// libxsmm_init, once per process (its JIT dispatchers need it first).
void init_xsmm();
/// C{m,n} = beta C + op(A){m,k} B{k,n}, row-major with leading dimensions,
/// on the calling thread: libxsmm's JIT kernel, OpenBLAS where libxsmm has
/// none. beta is 0 or 1 (all libxsmm takes).
void gemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, bool trans_a, const float* b, int64_t ldb,
          float* c, int64_t ldc, float beta);

// Kernel groups, one file each.
/// C = beta C + op(A) op(B) (MatMul's product; beta 1 for AccumulateGrad's
/// product form), beta 0 or 1; with a bias {N} (rank 2, beta 0), C =
/// op(A) op(B) + bias on every row, the GEMM adding into rows set to it;
/// with relu (MatMul's kReluOutput), then max(C, 0), block by block while
/// the rows are in cache.
void matmul(const OpAttrs& at, const TensorRef& a, const TensorRef& b, const TensorRef& c, const KernelContext& ctx,
            float beta = 0.0f, const float* bias = nullptr, bool relu = false);
// elementwise.cpp: the element-wise ops and the reductions, each op's
// formula on a shared loop (NumPy broadcasting for the binary ones).
void add_forward(const KernelCall& k);  // kReluOutput: max(a + b, 0), with the Relu kernel's max
void sub_forward(const KernelCall& k);
void mul_forward(const KernelCall& k);
void div_forward(const KernelCall& k);
void maximum_forward(const KernelCall& k);
void minimum_forward(const KernelCall& k);
void greater_equal_forward(const KernelCall& k);
void masked_fill_forward(const KernelCall& k);
// attention.cpp: Attention and AttentionBackward (FlashAttention's tiles).
void attention_forward(const KernelCall& c);
void attention_backward(const KernelCall& c);
// rms_norm.cpp: RmsNorm and RmsNormBackward, a row of the last axis per step.
void rms_norm_forward(const KernelCall& c);
void rms_norm_backward(const KernelCall& c);
// rope.cpp: Rope (both directions, kRopeInverse), from a table of cosines and sines computed in double.
void rope_forward(const KernelCall& c);
void scale_forward(const KernelCall& k);
void relu_forward(const KernelCall& k);
void relu_backward(const KernelCall& k);
void sigmoid_forward(const KernelCall& k);
void sigmoid_backward(const KernelCall& k);
void tanh_forward(const KernelCall& k);
void tanh_backward(const KernelCall& k);
void rsqrt_forward(const KernelCall& k);
void rsqrt_backward(const KernelCall& k);
void gelu_forward(const KernelCall& k);
void gelu_backward(const KernelCall& k);
void gelu_tanh_forward(const KernelCall& k);
void gelu_tanh_backward(const KernelCall& k);
void silu_forward(const KernelCall& k);
void silu_backward(const KernelCall& k);
void elu_forward(const KernelCall& k);
void elu_backward(const KernelCall& k);
void leaky_relu_forward(const KernelCall& k);
void leaky_relu_backward(const KernelCall& k);
void softplus_forward(const KernelCall& k);
void softplus_backward(const KernelCall& k);
void exp_forward(const KernelCall& k);
void log_forward(const KernelCall& k);
void sqrt_forward(const KernelCall& k);
void erf_forward(const KernelCall& k);
void erf_backward(const KernelCall& k);
void pow_forward(const KernelCall& k);
void clamp_forward(const KernelCall& k);
void clamp_backward(const KernelCall& k);
/// Inverted dropout of x into y: element i kept (and scaled by 1 / (1 - rate))
/// when hash_uniform(hash_random(at.seed, counter), i) >= rate, so the mask is
/// a pure function of (key, counter, index), whatever the threads.
void dropout_forward(const KernelCall& k);
/// Sum and Mean: every element, in index order, accumulated in double.
void sum_forward(const KernelCall& k);
void mean_forward(const KernelCall& k);
/// SumAxis, MeanAxis, MaxAxis and MeanLastAxis (axis = the last; 0 for an
/// empty axis where MeanAxis gives NaN): y = x reduced along the axis, each
/// output element summed in index order; MaxAxis takes the first maximum
/// (first_max), where MaxAxisBackward routes the gradient.
void sum_axis_forward(const KernelCall& k);
void mean_axis_forward(const KernelCall& k);
void mean_last_axis_forward(const KernelCall& k);
void max_axis_forward(const KernelCall& k);
void max_axis_backward(const KernelCall& k);
void slice(const OpAttrs& at, const TensorRef& x, const TensorRef& y);
void slice_backward(const OpAttrs& at, const TensorRef& g, const TensorRef& dx);
void concat(const OpAttrs& at, std::span<const TensorRef> in, const TensorRef& y);
/// y = x with axes at.axis and at.axis2 swapped, any dtype (by element size).
void transpose(const OpAttrs& at, const TensorRef& x, const TensorRef& y);
void gather(const TensorRef& table, const TensorRef& ids, const TensorRef& y, const KernelContext& ctx);
void gather_backward(const TensorRef& g, const TensorRef& ids, const TensorRef& dtable);
void to_index(const TensorRef& x, const TensorRef& y);
/// cols{B*Ho*Wo, kh*kw*C} = the patches of x{B,H,W,C}: row (b, oy, ox), column (ky, kx, c), zeros for padding.
void im2col(const Window2D& w, const TensorRef& x, const TensorRef& cols, const KernelContext& ctx);
// conv.cpp: direct convolution over channels-last images, kernel {kh, kw, C, F}.
// With a bias {F} (null: none), each output row gets it while in cache, and
// with relu (kReluOutput) then max(v, 0), as the Relu kernel computes it.
// With stats (null: none; kBatchStatsOutput), also y's batch statistics
// {2, F} there, each image's sums taken while its output is in cache.
void conv2d(const Window2D& w, const TensorRef& x, const TensorRef& kernel, const TensorRef& y,
            const KernelContext& ctx, const float* bias = nullptr, bool relu = false, float* stats = nullptr);
// addend (null: none): added to dx, as OpKind::Conv2DBackwardInput's third
// input; mask (null: none): then dx zero where mask <= 0 (kMaskNonPositive).
void conv2d_backward_input(const Window2D& w, const TensorRef& g, const TensorRef& kernel, const TensorRef& dx,
                           const KernelContext& ctx, const float* addend = nullptr, const float* mask = nullptr);
void conv2d_backward_filter(const Window2D& w, const TensorRef& x, const TensorRef& g, const TensorRef& dkernel,
                            const KernelContext& ctx);
// grouped_conv.cpp: the convolutions with Window2D::groups > 1 (depthwise
// included), kernel {kh, kw, C/groups, F}; the direct kernels above hand
// them over, with the same arguments.
void grouped_conv2d(const Window2D& w, const TensorRef& x, const TensorRef& kernel, const TensorRef& y,
                    const KernelContext& ctx, const float* bias, bool relu, float* stats);
void grouped_conv2d_backward_input(const Window2D& w, const TensorRef& g, const TensorRef& kernel,
                                   const TensorRef& dx, const KernelContext& ctx, const float* addend,
                                   const float* mask);
void grouped_conv2d_backward_filter(const Window2D& w, const TensorRef& x, const TensorRef& g,
                                    const TensorRef& dkernel, const KernelContext& ctx);
// winograd.cpp: the 3x3 unit-stride convolutions by F(4x4, 3x3) or F(2x2, 3x3), when
// winograd_applies (the public switch set_winograd_convolutions, and the
// shapes it names); same arguments as the direct kernels above.
inline constexpr int64_t kWinogradMinChannels = 16;
bool winograd_applies(const Window2D& w, int64_t channels, int64_t filters);
// The filter gradient by Winograd: also images of at least this many
// outputs a side (F(4x4) only; smaller ones keep the direct kernel).
inline constexpr int64_t kWinogradFilterMinSide = 8;
bool winograd_filter_applies(const Window2D& w, int64_t channels, int64_t filters, int64_t out_h, int64_t out_w);
// image_sums (null: none): each image's image_stats_sums of y, image b's at image_sums + 2 F b.
void winograd_conv2d(const Window2D& w, const TensorRef& x, const TensorRef& kernel, const TensorRef& y,
                     const KernelContext& ctx, const float* bias, bool relu, double* image_sums);
void winograd_conv2d_backward_input(const Window2D& w, const TensorRef& g, const TensorRef& kernel,
                                    const TensorRef& dx, const KernelContext& ctx, const float* addend,
                                    const float* mask);
void winograd_conv2d_backward_filter(const Window2D& w, const TensorRef& x, const TensorRef& g,
                                     const TensorRef& dkernel, const KernelContext& ctx);
// batch_norm.cpp: batch normalization over every axis but the last.
// x of rank 3 or more: summed image by image (axis 0), the images' sums then
// added in order, as a Conv2D with kBatchStatsOutput sums its output (the
// same bits); rank 2: in fixed slices of rows.
void batch_norm_stats(const TensorRef& x, const TensorRef& stats, const KernelContext& ctx);
// One image's batch-statistics sums: sums[c] = the sum of image{rows, C}'s
// column c, sums[C + c] that of its squares, in double (zeroed first).
void image_stats_sums(const float* image, int64_t rows, int64_t C, double* sums);
// stats {2, C} = [mean; biased variance] over `rows` rows in all, from
// `images` images' image_stats_sums, stored one after another.
void stats_from_image_sums(const double* sums, int64_t images, int64_t rows, int64_t C, float* stats);
// in: x, stats, gamma, beta [, residual] (the op's inputs, as at OpKind::BatchNorm).
void batch_norm(const OpAttrs& at, std::span<const TensorRef> in, const TensorRef& y, const KernelContext& ctx);
// in: x, stats, g [, gamma, beta] (as at OpKind::BatchNormParamGrad).
void batch_norm_param_grad(const OpAttrs& at, std::span<const TensorRef> in, const TensorRef& sums,
                           const KernelContext& ctx);
void batch_norm_backward(const OpAttrs& at, std::span<const TensorRef> in, const TensorRef& dx,
                         const KernelContext& ctx);
// recurrent.cpp: fused LSTM and GRU over a sequence (layouts there and at the ops).
// h0, c0: the initial states {B, H}, or null for zeros.
void lstm_sequence(const TensorRef& xw, const TensorRef& u, const float* h0, const float* c0, const TensorRef& y,
                   const KernelContext& ctx);
void lstm_sequence_backward(const TensorRef& y, const TensorRef& u, const TensorRef& g, const float* c0,
                            const TensorRef& dz, const KernelContext& ctx);
void gru_sequence(const TensorRef& xw, const TensorRef& u, const TensorRef& rb, const float* h0, const TensorRef& y,
                  const KernelContext& ctx);
void gru_sequence_backward(const TensorRef& y, const TensorRef& u, const TensorRef& g, const float* h0,
                           const TensorRef& out, const KernelContext& ctx);
// window.cpp: pooling over channels-last images (at.window). The max pools
// take each window's first maximum, a NaN winning (nan_max); the backward
// routes g there, and with kMaskNonPositive (its input a ReLU's output) also
// zero where x <= 0. The average pools leave padding out of the count;
// AvgPool2DBackward's kMaskNonPositive: dx zero where its mask input <= 0.
void max_pool2d_forward(const KernelCall& k);
void max_pool2d_backward(const KernelCall& k);
void avg_pool2d_forward(const KernelCall& k);
void avg_pool2d_backward(const KernelCall& k);
void broadcast_to(const TensorRef& x, const TensorRef& out);
void sum_to(const TensorRef& x, const TensorRef& out, const KernelContext& ctx);
// softmax.cpp: along the last axis; the backward kernels take y and g.
void softmax_forward(const KernelCall& k);
void softmax_backward(const KernelCall& k);
void log_softmax_forward(const KernelCall& k);
void log_softmax_backward(const KernelCall& k);
void softmax_cross_entropy(std::span<const TensorRef> in, const TensorRef& out);
void softmax_cross_entropy_backward(std::span<const TensorRef> in, const TensorRef& dx);
void mse_loss(std::span<const TensorRef> in, const TensorRef& out);
void mse_loss_backward(std::span<const TensorRef> in, const TensorRef& dx);
void accuracy(const TensorRef& pred, const TensorRef& labels, const TensorRef& out);
// losses.cpp: element-wise losses over {B, N} and the metrics beside accuracy.
void mae_loss(std::span<const TensorRef> in, const TensorRef& out);
void mae_loss_backward(std::span<const TensorRef> in, const TensorRef& dx);
void huber_loss(const OpAttrs& at, std::span<const TensorRef> in, const TensorRef& out);
void huber_loss_backward(const OpAttrs& at, std::span<const TensorRef> in, const TensorRef& dx);
void binary_cross_entropy(std::span<const TensorRef> in, const TensorRef& out);
void binary_cross_entropy_backward(std::span<const TensorRef> in, const TensorRef& dx);
void binary_accuracy(const OpAttrs& at, const TensorRef& pred, const TensorRef& target, const TensorRef& out);
void top_k_accuracy(const OpAttrs& at, const TensorRef& scores, const TensorRef& labels, const TensorRef& out);
// optimizer.cpp: the in-place updates of persistent state (formulas there).
void accumulate_grad(const KernelCall& k);
void optimizer_tick(const KernelCall& k);
void adamw_update(const KernelCall& k);
void sgd_update(const KernelCall& k);
void rmsprop_update(const KernelCall& k);
void adagrad_update(const KernelCall& k);
void moving_average(const KernelCall& k);
void polyak_update(const KernelCall& k);
void assign(const KernelCall& k);
// Gradient clipping (optimizer.cpp), in place on a gradient: ClipValue and
// ClipNorm; SquaredNorm writes sum(x^2) plus running's (null: none),
// accumulated in double, to out {2} as a norm pair (ops/norm_pair.h).
void squared_norm(const TensorRef& x, const float* running, const TensorRef& out);
void clip_value(const OpAttrs& at, const TensorRef& g, const KernelContext& ctx);
void clip_norm(const OpAttrs& at, const TensorRef& g, const TensorRef& squared_norm, const KernelContext& ctx);

/// Throws Error("internal error: op '<name>' not handled by <function>"): an
/// op the kernel table has no entry for (a value outside OpKind; a dispatch bug).
[[noreturn]] void unhandled_op(OpKind op, const char* function);

}  // namespace tensorgrad::kernels
