#pragma once
// The op set: every operation tensorgrad can run and its attributes. Each
// op's name, arity, shape rule and gradient rule are one entry of the op table
// (src/ops/op_table.cpp), its kernel one entry of the kernel table
// (src/kernels/dispatch.cpp). The lazy graph records ops through the Builder
// interface (ops/builder.h); the eager API (ag) runs them at once through the
// same table, and through Builder too in ag::EagerBuilder.
#include <cmath>
#include <cstdint>
#include <span>

#include "tensorgrad/core/dtype.h"
#include "tensorgrad/core/shape.h"

namespace tensorgrad {

enum class OpKind : uint8_t {
  Leaf,  // input, parameter or state: no kernel, memory bound from outside
  Fill,  // constant of attrs.shape filled with attrs.scale
  // forward ops
  MatMul,               // (A{M,K}, B{K,N} [, bias{N}]) -> {M,N} (the bias added to every row), or batched
                        //   (A{B,M,K}, B{B,K,N}) -> {B,M,N} (equal B, no bias);
                        //   attrs.trans_a/trans_b transpose the last two axes of the operands
  Add, Sub, Mul,        // NumPy broadcasting; Add with flags kReluOutput: then ReLU, in the same pass
  Maximum, Minimum,     // NumPy broadcasting as Add; a where a >= b (a <= b) else b; a NaN in either gives NaN
  GreaterEqual,         // (a, b) broadcast as Add -> 1 where a >= b, else 0 (the mask of Maximum/Minimum gradients)
  Scale,                // x * attrs.scale
  Relu, Sigmoid, Tanh,
  Softmax, LogSoftmax,  // along the last axis
  SoftmaxCrossEntropy,  // (logits{B,C}, labels{B,C} f32 | {B} i32 [, weights{B}]) -> scalar mean
  MseLoss,              // (pred{B,N}, target{B,N} [, weights{B} | {B,N}]) -> scalar sum(w (p - t)^2) / (B N)
  MaeLoss,              // (pred{B,N}, target{B,N} [, weights{B} | {B,N}]) -> scalar sum(w |p - t|) / (B N)
  HuberLoss,            // as MaeLoss; per element d^2 / 2 if |d| <= delta else delta (|d| - delta / 2),
                        //   delta = attrs.scale > 0
  BinaryCrossEntropy,   // (logits{B,N}, targets{B,N} in [0,1] [, weights{B} | {B,N}])
                        //   -> scalar sum(w (max(z,0) - z y + log1p(exp(-|z|)))) / (B N)
  Dropout,              // (x, counter int64{1}): inverted dropout, rate attrs.scale; the mask is
                        //   hash(attrs.seed, counter) per element (core/random.h)
  Sum, Mean,            // over every element -> scalar
  SumTo,                // reduce a broadcast result back to attrs.shape
  BroadcastTo,          // expand to attrs.shape
  Reshape,              // same elements, shape attrs.shape; a view (no copy)
  Rsqrt,                // 1 / sqrt(x)
  Gelu, Silu, Elu, LeakyRelu, Softplus,  // Elu alpha / LeakyRelu slope in attrs.scale
  MeanLastAxis,         // {..., N} -> {..., 1}
  Slice,                // attrs.length entries from attrs.start along attrs.axis
  Concat,               // (x0, x1, ... up to kMaxOpInputs) joined along attrs.axis
  Gather,               // (table{V,D}, ids int32{...}) -> {..., D}: embedding lookup
  ToIndex,              // float32 holding whole numbers -> int32 (checked by the caller)
  Im2Col,               // x{B,H,W,C} -> {B*Ho*Wo, kh*kw*C}, rows (b,oy,ox), columns (ky,kx,c); attrs.window
  Col2Im,               // the adjoint of Im2Col: {B*Ho*Wo, kh*kw*C} -> attrs.shape {B,H,W,C}, summing overlaps
  MaxPool2D, AvgPool2D, // x{B,H,W,C} -> {B,Ho,Wo,C}; attrs.window (padding excluded from averages)
  Conv2D,               // (x{B,H,W,C}, kernel{kh,kw,C,F} [, bias{F}]) -> {B,Ho,Wo,F}; attrs.window (zero
                        //   padding); the bias is added to every output pixel while its row is in cache;
                        //   flags kReluOutput: then ReLU, in the same pass
  BatchNormStats,       // x{..., C} -> {2, C}: the mean and the biased variance over every axis but the last
  AttachedBatchStats,   // (y{B,Ho,Wo,F}) -> {2, F}: BatchNormStats of y, which y's Conv2D (flags kBatchStatsOutput)
                        //   wrote beside y, image by image while each was in cache; a view of that memory, no
                        //   kernel. Made by the lazy graph only, when it folds a BatchNormStats into the Conv2D
                        //   (the fusion pass, graph/fuse.h); the same bits as BatchNormStats
  BatchNorm,            // (x{..., C}, stats{2,C}, gamma{C}, beta{C} [, residual{..., C}]) ->
                        //   (x - mean) / sqrt(var + eps) gamma + beta [+ residual]; eps = attrs.scale; attrs.length
                        //   1: stats are x's own (their gradient folds into dx); flags kReluOutput: then ReLU, in
                        //   the same pass. The residual is a ResNet block's shortcut, folded in from an Add
                        //   (the fusion pass, graph/fuse.h)
  Div,                  // a / b, NumPy broadcasting as Add
  Exp, Log, Sqrt,       // e^x, natural log, square root (NaN below 0, as std::log / std::sqrt)
  Pow,                  // x^attrs.scale (std::pow: NaN for x < 0 with a non-integer exponent)
  Clamp,                // min(max(x, attrs.clamp_min), attrs.clamp_max); either bound may be infinite; NaN stays NaN
  SumAxis, MeanAxis,    // sum / mean along attrs.axis: the axis dropped, or kept as 1 with attrs.keepdim
  MaxAxis,              // max along attrs.axis (keepdim as SumAxis); a NaN in the slice gives NaN
  Transpose,            // axes attrs.axis and attrs.axis2 swapped (a copy); rank 2..Shape::kMaxRank
  // Fused recurrent layers over a whole sequence (B batch, T steps, H units), zero initial states.
  LstmSequence,         // (xw{B,T,4H} = x W + bias, U{H,4H}) -> {B,T,6H}: per step [h | c | i | f | g | o],
                        //   gates i, f, g, o (Keras' i, f, c, o) after their activations; z = xw_t + h_{t-1} U,
                        //   c = f c_{t-1} + i g, h = o tanh(c) (Hochreiter & Schmidhuber 1997, as keras.layers.LSTM)
  GruSequence,          // (xw{B,T,3H} = x W + input bias, U{H,3H}, recurrent bias{3H}) -> {B,T,5H}: per step
                        //   [h | z | r | n | hn], hn = h_{t-1} U_n + rb_n; z, r = sigmoid(xw + h_{t-1} U + rb),
                        //   n = tanh(xw_n + r hn), h = z h_{t-1} + (1 - z) n (reset_after, as cuDNN and PyTorch)
  // backward ops (inputs listed at each gradient rule)
  ReluBackward, SigmoidBackward, TanhBackward, SoftmaxBackward, LogSoftmaxBackward,
  SoftmaxCrossEntropyBackward, MseLossBackward,
  MaeLossBackward, HuberLossBackward, BinaryCrossEntropyBackward,  // (pred, target [, weights], g scalar) -> dpred
  RsqrtBackward,        // (y, g)
  GeluBackward, SiluBackward, EluBackward, LeakyReluBackward, SoftplusBackward,  // (x, g)
  SliceBackward,        // g -> zeros of attrs.shape with g placed at the slice
  GatherBackward,       // (g{..., D}, ids) -> {V, D} = attrs.shape, rows summed per id
  MaxPool2DBackward,    // (x, g) -> dx: each window's gradient to its first maximum (as PyTorch);
                        //   flags kMaskNonPositive: also zero where x <= 0 (x a ReLU's output)
  AvgPool2DBackward,    // (g [, y]) -> dx of attrs.shape; flags kMaskNonPositive (with y{B,H,W,C}): then zero where
                        //   y <= 0 (y a ReLU's output, the ReLU's backward folded in)
  Conv2DBackwardInput,  // (g{B,Ho,Wo,F}, kernel [, addend{B,H,W,C}] [, y{B,H,W,C}]) -> dx of attrs.shape
                        //   {B,H,W,C} [+ addend]: the addend is another gradient of the same input, folded in
                        //   from an Add (the fusion pass, graph/fuse.h) and added per image while it is in
                        //   cache; flags kMaskNonPositive (with y, the last input): then zero where y <= 0
                        //   (y a ReLU's output, the ReLU's backward folded in)
  Conv2DBackwardFilter, // (x, g{B,Ho,Wo,F}) -> dkernel of attrs.shape {kh,kw,C,F}
  BatchNormParamGrad,   // (x, stats, g [, gamma, beta]) -> {2, C}: [sum(g xhat); sum(g)], the gradients of gamma
                        //   and beta; flags kReluOutput (with gamma and beta): g counts only where the forward's
                        //   x a + b > 0, the gradient of a ReLU folded into the BatchNorm, without its own pass
  BatchNormBackward,    // (x, stats, gamma, g, param_grad [, beta]) -> dx; attributes as BatchNorm's; flags
                        //   kReluOutput (with beta): g masked as BatchNormParamGrad's
  ClampBackward,        // (x, g) -> g where clamp_min <= x <= clamp_max, else 0 (PyTorch's rule); attributes as Clamp's
  MaxAxisBackward,      // (x, g) -> dx: g to the first maximal element of each slice along attrs.axis (a NaN
                        //   counts as maximal), 0 elsewhere; g has MaxAxis's output shape (attrs.keepdim)
  LstmSequenceBackward, // (y{B,T,6H}, U{H,4H}, g{B,T,6H}) -> dz{B,T,4H}: the gradient of the gates' pre-activations
                        //   (= d xw), back through time; every part of g counts (h, c and the gates)
  GruSequenceBackward,  // (y{B,T,5H}, U{H,3H}, g{B,T,5H}) -> {B,T,4H}: [dz | dr | dn] pre-activation (= d xw)
                        //   and d hn, so that d(h U + rb) = [dz | dr | d hn]
  // metrics
  Accuracy,  // (logits{B,C}, labels) -> scalar count of rows whose argmax is the label
  BinaryAccuracy,  // (pred{B,N}, target{B,N}) -> scalar count of (pred > attrs.scale) == (target > 0.5)
  TopKAccuracy,    // (scores{B,C}, labels int32{B} | one-hot f32{B,C}) -> scalar count of rows whose label has
                   //   fewer than k = attrs.length strictly greater scores (tf.math.in_top_k)
  // optimizer ops: update their first input in place
  AccumulateGrad,  // (acc, g): acc += g; or (acc, A, B): acc += op(A) op(B), MatMul's product with its
                   //   trans_a / trans_b and rank 2, in one GEMM that adds into acc (the weight
                   //   gradient of a Dense layer written straight into its accumulator)
  OptimizerTick,   // (hyper, step int64{1} [, schedule steps int64{n}, schedule values float32{m}]): with a
                   //   schedule (attrs.flags, an LrScheduleKind), hyper[kLr] = the schedule at t (before the
                   //   increment, as Keras), in double; then t += 1, hyper's bias corrections for the new t (in
                   //   double) and kStepDampening (0 at t = 1, as PyTorch's momentum buffer starts as the gradient)
  // The updates: attrs.flags (OptimizerFlag) choose the mode, hyper (HyperSlot) holds the numbers; the
  // optional state inputs are present exactly when their flag is set. attrs.zero_grad clears grad after use.
  AdamWUpdate,     // (param, grad, m, v, hyper): Adam with decoupled decay (AdamW) or L2 (kL2WeightDecay)
  SgdUpdate,       // (param, grad, [momentum buffer if kUseMomentum], hyper): PyTorch's SGD; kNesterov
  RmspropUpdate,   // (param, grad, mean square, [mean gradient if kCentered], [momentum buffer if kUseMomentum],
                   //   hyper): RMSprop; kEpsInsideSqrt: sqrt(v + eps) (Keras) else sqrt(v) + eps (PyTorch)
  AdagradUpdate,   // (param, grad, sum of squares, hyper): Adagrad; kEpsInsideSqrt as RmspropUpdate
  // gradient clipping, in place on a persistent gradient accumulator
  ClipValue,       // (grad): clamp every element to [-attrs.scale, attrs.scale] (clipvalue; NaN stays NaN)
  SquaredNorm,     // (x [, running {2}]) -> {2}: the sum of x's squares (plus running's), accumulated in double
                   //   and kept as the pair (s, e), the sum being s 4^e, so that no finite sum overflows
  ClipNorm,        // (grad, squared norm {2} as SquaredNorm's): grad *= c / max(norm, c) (Keras' clip_by_norm,
                   //   clipnorm), or with kClipNormEps min(1, c / (norm + 1e-6)) (PyTorch's clip_grad_norm_);
                   //   c = attrs.scale; with kNonFiniteNormToNaN an inf or NaN norm makes grad NaN (TensorFlow's
                   //   clip_by_global_norm), logged once per process
  MovingAverage,   // (state, value): state = scale * state + (1 - scale) * value (batch-norm statistics)
  AdvanceCounter,  // (counter int64{1}): counter += 1, in place: a graph's random stream, once per run
  // updates of one persistent tensor from another (target networks, snapshots), in place on the first input
  PolyakUpdate,    // (target, source, tau float32 {} or {1}): target = tau * source + (1 - tau) * target, in float;
                   //   tau = 1 copies source exactly (NaN and infinities included). tau is a tensor, so changing it
                   //   needs no rebuild
  Assign,          // (target, source): target = source, a copy of the bytes; same shape and dtype, any dtype
  Count
};

/// Layout of the optimizer hyper-parameter tensor (one float32 vector per
/// model's optimizer state, a persistent device tensor). The step count lives
/// apart, in an int64 tensor, so it never saturates (a float32 count stops at
/// 2^24); OptimizerTick writes Adam's bias corrections 1 / (1 - beta^t),
/// computed in double, into kBiasCorrection1/2 and SGD's dampening of the
/// step into kStepDampening, so that a step writes nothing from the host.
/// The clip thresholds are not here but in the clipping ops' attrs.scale
/// (fixed at compile, like the optimizer's modes).
enum HyperSlot : int {
  kLr,               // learning rate: set from the host, or under a schedule written by OptimizerTick
  kBeta1, kBeta2,    // Adam's moment decays
  kEps,              // Adam, RMSprop, Adagrad: epsilon
  kWeightDecay,      // decoupled (p *= 1 - lr wd) or L2 (g += wd p), per kL2WeightDecay
  kBiasCorrection1,  // Adam: 1 / (1 - beta1^t), written by OptimizerTick
  kBiasCorrection2,  // Adam: 1 / (1 - beta2^t), written by OptimizerTick
  kMomentum,         // SGD, RMSprop: the momentum factor
  kDampening,        // SGD: PyTorch's dampening
  kStepDampening,    // SGD: the dampening of this step, written by OptimizerTick: 0 at t = 1, else kDampening
  kRho,              // RMSprop: the decay of the mean square (Keras' rho, PyTorch's alpha)
  kHyperSize
};

/// Modes of the update and clipping ops (OpAttrs::flags), fixed when the
/// graph is built; the numbers they use are in the hyper tensor.
enum OptimizerFlag : uint32_t {
  kL2WeightDecay = 1u << 0,  // g += wd p before the update (PyTorch's weight_decay) instead of p *= 1 - lr wd
  kUseMomentum = 1u << 1,    // SGD, RMSprop: a momentum buffer input
  kNesterov = 1u << 2,       // SGD: Nesterov momentum (with kUseMomentum)
  kCentered = 1u << 3,       // RMSprop: a mean-gradient input; the variance estimate is v - mean^2
  kEpsInsideSqrt = 1u << 4,  // RMSprop, Adagrad: divide by sqrt(v + eps) (Keras), not sqrt(v) + eps (PyTorch)
  kClipNormEps = 1u << 5,    // ClipNorm: PyTorch's coefficient min(1, c / (norm + 1e-6)), not Keras' c / max(norm, c)
  kNonFiniteNormToNaN = 1u << 6,  // ClipNorm: an inf or NaN norm sets the gradient to NaN (TensorFlow's rule)
};

/// The mode of MaxPool2DBackward, AvgPool2DBackward and Conv2DBackwardInput
/// (OpAttrs::flags): the gradient a ReLU's backward would pass on, when x
/// (the max-pool's input; the others' extra last input) is that ReLU's
/// output (dx also zero where x <= 0). The fusion pass (graph/fuse.h)
/// folds a ReluBackward into the op that made its incoming gradient
/// (conv, ReLU, pool; ReLU, conv, as a ResNet block's output, whose
/// gradient is the next block's convolution's plus its shortcut's; ReLU,
/// global average pooling), which saves the pass of ReluBackward over the
/// activation.
inline constexpr uint32_t kMaskNonPositive = 1u << 0;
/// The mode of MatMul, Conv2D, BatchNorm and Add (OpAttrs::flags): the output passed
/// through ReLU in the op's own pass, while each row is in cache; the
/// gradient is ReLU's (g where the output > 0), then the op's. The fusion
/// pass (graph/fuse.h) folds a Relu applied to one of these ops' outputs
/// into it: Dense-ReLU, conv-BN-ReLU and residual add-ReLU take
/// one pass over the activation (and one kernel launch) fewer. On
/// BatchNormParamGrad and BatchNormBackward (with gamma and beta as extra
/// inputs) it is the gradient side of a BatchNorm's: g counts only where
/// the forward's value before the ReLU is > 0, so no ReluBackward pass runs.
inline constexpr uint32_t kReluOutput = 1u << 0;
/// The mode of Conv2D (OpAttrs::flags): it also writes its output's batch
/// statistics (BatchNormStats's {2, F}: mean and biased variance per
/// filter) beside the output, in the batch_stats_side_floats(F) floats
/// just before it, summed per image while the image's output is in cache
/// (one pass over the activation fewer than BatchNormStats after it).
/// AttachedBatchStats reads them. Only a lazy graph sets it (it plans the
/// memory before the output); the eager API refuses it with a ValueError.
inline constexpr uint32_t kBatchStatsOutput = 1u << 1;
/// The floats a Conv2D with kBatchStatsOutput writes just before its output
/// of `filters` channels: the {2, filters} statistics, padded to a multiple
/// of 64 bytes so that the output keeps its alignment. They lie before the
/// output so that their place does not move when a plan runs fewer rows.
constexpr int64_t batch_stats_side_floats(int64_t filters) { return (2 * filters + 15) / 16 * 16; }
/// Whether `op` takes kReluOutput (MatMul, Conv2D, BatchNorm, Add).
constexpr bool takes_relu_output(OpKind op) {
  return op == OpKind::MatMul || op == OpKind::Conv2D || op == OpKind::BatchNorm || op == OpKind::Add;
}

/// The learning-rate schedule OptimizerTick computes (its attrs.flags), and
/// what its two schedule inputs hold: `steps` (int64) and `values` (float32),
/// the fields of keras.optimizers.schedules' class of the same name
/// (opt/schedules.h). Step counts stay int64 so that they are exact at any
/// size; rates are float32, as the user gave them.
enum LrScheduleKind : uint32_t {
  kConstantLr = 0,          // no schedule inputs; hyper[kLr] is set from the host
  kPiecewiseConstantDecay,  // steps {boundaries..., INT64_MAX}, values {values...}: one step per value, the
                            //   last an end marker, so the rate is values[i] for the first i with t <= steps[i]
  kExponentialDecay,        // steps {decay_steps, staircase 0/1}, values {initial_learning_rate, decay_rate}
  kCosineDecay,             // steps {decay_steps, warmup_steps, has warmup_target 0/1},
                            //   values {initial_learning_rate, alpha, warmup_target}
  kCosineDecayRestarts,     // steps {first_decay_steps}, values {initial_learning_rate, t_mul, m_mul, alpha}
};

/// A sliding window over the two spatial axes of {B, H, W, C} (convolution
/// patches and pooling). Pads are in input pixels.
struct Window2D {
  int64_t kh = 1, kw = 1;                // window size
  int64_t sh = 1, sw = 1;                // strides
  int64_t dh = 1, dw = 1;                // dilation
  int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  int64_t out_h(int64_t h) const { return (h + pad_top + pad_bottom - dh * (kh - 1) - 1) / sh + 1; }
  int64_t out_w(int64_t w) const { return (w + pad_left + pad_right - dw * (kw - 1) - 1) / sw + 1; }
};

/// Attributes of one op application. Unused fields stay at their defaults.
struct OpAttrs {
  bool trans_a = false, trans_b = false;  // MatMul
  float scale = 0.0f;                     // Scale factor, Dropout rate, Fill value, slopes, momentum,
                                          // Huber delta, BinaryAccuracy threshold, clip threshold
  uint64_t seed = 0;                      // Dropout: the stream's key
  bool zero_grad = false;                 // optimizer update: clear the gradient accumulator after use
  uint32_t flags = 0;                     // optimizer updates and clipping: OptimizerFlag bits;
                                          // MaxPool2DBackward, AvgPool2DBackward, Conv2DBackwardInput:
                                          // kMaskNonPositive;
                                          // MatMul, Conv2D, BatchNorm, Add,
                                          // BatchNormParamGrad, BatchNormBackward: kReluOutput;
                                          // Conv2D: kBatchStatsOutput
  Shape shape;                            // SumTo / BroadcastTo / Fill / Reshape target; backward input shapes
  int axis = 0;                           // Slice / Concat / SumAxis / MeanAxis / MaxAxis / Transpose, in [0, rank)
  int axis2 = 0;                          // Transpose: the axis swapped with `axis`
  bool keepdim = false;                   // SumAxis / MeanAxis / MaxAxis: keep the reduced axis as size 1
  float clamp_min = -INFINITY, clamp_max = INFINITY;  // Clamp / ClampBackward bounds
  int64_t start = 0, length = 0;          // Slice; length: TopKAccuracy's k
  Window2D window;                        // Im2Col / Col2Im / pooling
};

/// Static facts of an op.
struct OpInfo {
  const char* name;
  int min_inputs, max_inputs;
  bool in_place;  // writes its first input; the output aliases it
  bool view = false;  // the output is its first input's memory, unchanged (Reshape)
};
const OpInfo& op_info(OpKind op);

/// Result of a shape rule.
struct OpSignature {
  Shape shape;
  DType dtype = DType::Float32;
};

/// The shape rule of `op`: the output shape and dtype from the inputs'.
/// Throws ShapeError (incompatible shapes) or TypeError (wrong dtype), naming
/// the op, what it expected and what came.
OpSignature infer_signature(OpKind op, std::span<const Shape> shapes, std::span<const DType> dtypes,
                            const OpAttrs& attrs);

/// NumPy broadcasting of two shapes; throws ShapeError naming both when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op_name);

}  // namespace tensorgrad
