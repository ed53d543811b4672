#pragma once
// The op set: every operation tensorgrad can run and its attributes. Each
// op is one line of the op list (ops/op_list.h: name, arity, effect, its
// float parameter and how that scales with the batch, flop rule), from which
// the enum and OpInfo are made; its shape and gradient rules are its entry of
// the op table (src/ops/op_table.cpp), its kernel one entry of the kernel
// table (src/kernels/dispatch.cpp), both checked against the list. The lazy
// graph records ops through the Builder interface (ops/builder.h); the eager
// API (ag) runs them at once through the same table, and through Builder too
// in ag::EagerBuilder.
#include <cmath>
#include <cstdint>
#include <span>

#include "tensorgrad/core/dtype.h"
#include "tensorgrad/core/shape.h"

namespace tensorgrad {

/// Every op tensorgrad can run, in the order of the op list (ops/op_list.h),
/// where each op's inputs, output and attributes are described. Count is the
/// number of ops, not an op.
enum class OpKind : uint8_t {
#define TG_OP(kind, ...) kind,
#include "tensorgrad/ops/op_list.h"
#undef TG_OP
  Count
};

/// Layout of the optimizer hyper-parameter tensor (one float32 vector per
/// model's optimizer state, a persistent device tensor). The step count lives
/// apart, in an int64 tensor, so it never saturates (a float32 count stops at
/// 2^24); OptimizerTick writes Adam's bias corrections 1 / (1 - beta^t),
/// computed in double, into kBiasCorrection1/2 and SGD's dampening of the
/// step into kStepDampening, so that a step writes nothing from the host.
/// The clip thresholds are not here but in the clipping ops' attrs.clip
/// (fixed at compile, like the optimizer's modes).
enum HyperSlot : int {
  kLr,               ///< learning rate: set from the host, or under a schedule written by OptimizerTick
  kBeta1,            ///< Adam's decay of the first moment (beta_1)
  kBeta2,            ///< Adam's decay of the second moment (beta_2)
  kEps,              ///< Adam, RMSprop, Adagrad: epsilon
  kWeightDecay,      ///< decoupled (p *= 1 - lr wd) or L2 (g += wd p), per kL2WeightDecay
  kBiasCorrection1,  ///< Adam: 1 / (1 - beta1^t), written by OptimizerTick
  kBiasCorrection2,  ///< Adam: 1 / (1 - beta2^t), written by OptimizerTick
  kMomentum,         ///< SGD, RMSprop: the momentum factor
  kDampening,        ///< SGD: PyTorch's dampening
  kStepDampening,    ///< SGD: the dampening of this step, written by OptimizerTick: 0 at t = 1, else kDampening
  kRho,              ///< RMSprop: the decay of the mean square (Keras' rho, PyTorch's alpha)
  kHyperSize         ///< the number of slots: the hyper tensor's length, not a slot
};

/// Modes of the update and clipping ops (OpAttrs::flags), fixed when the
/// graph is built; the numbers they use are in the hyper tensor.
enum OptimizerFlag : uint32_t {
  kL2WeightDecay = 1u << 0,  ///< g += wd p before the update (PyTorch's weight_decay) instead of p *= 1 - lr wd
  kUseMomentum = 1u << 1,    ///< SGD, RMSprop: a momentum buffer input
  kNesterov = 1u << 2,       ///< SGD: Nesterov momentum (with kUseMomentum)
  kCentered = 1u << 3,       ///< RMSprop: a mean-gradient input; the variance estimate is v - mean^2
  kEpsInsideSqrt = 1u << 4,  ///< RMSprop, Adagrad: divide by sqrt(v + eps) (Keras), not sqrt(v) + eps (PyTorch)
  kClipNormEps = 1u << 5,    ///< ClipNorm: PyTorch's coefficient min(1, c / (norm + 1e-6)), not Keras' c / max(norm, c)
  kNonFiniteNormToNaN = 1u << 6,  ///< ClipNorm: an inf or NaN norm sets the gradient to NaN (TensorFlow's rule)
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
/// The modes of Attention and AttentionBackward (OpAttrs::flags): kCausal
/// hides key j from query i where j > i + Lk - Lq (the queries are the last
/// Lq positions of the keys', as a key-value cache has them: FlashAttention
/// 2.1's alignment, PyTorch's is_causal when Lq = Lk); kAttentionMask says
/// the op's fourth input is an additive mask.
///@{
inline constexpr uint32_t kCausal = 1u << 2;
inline constexpr uint32_t kAttentionMask = 1u << 3;
///@}
/// The mode of Rope (OpAttrs::flags): rotate by the negated angle, the
/// inverse rotation, which is the rotation's gradient (its transpose).
inline constexpr uint32_t kRopeInverse = 1u << 0;

/// How a rotary position embedding pairs the features it rotates: Halves
/// pairs feature i with i + dims/2 (Hugging Face's rotate_half, KerasHub's
/// RotaryEmbedding); Adjacent pairs 2i with 2i + 1 (ggml's
/// GGML_ROPE_TYPE_NORM, llama.cpp's LLaMA).
enum class RopePairing : uint8_t { Halves, Adjacent };

/// A rotary position embedding (RoFormer, Su et al. 2021): pair i of the
/// rotated features at position p turns by the angle
/// p / scaling_factor * theta^(-2i / dims), i in [0, dims / 2).
struct RopeOptions {
  int64_t dims = 0;             ///< features rotated, even, <= D; 0: all D. Features from dims on pass unchanged
                                ///< (ggml's n_dims, GGUF's llama.rope.dimension_count)
  float theta = 10000.0f;       ///< the base, > 0 (KerasHub's max_wavelength, GGUF's llama.rope.freq_base)
  float scaling_factor = 1.0f;  ///< positions are divided by it, > 0 (KerasHub's scaling_factor: linear scaling)
  RopePairing pairing = RopePairing::Halves;  ///< which features form a pair
  /// Equal when every field is.
  bool operator==(const RopeOptions&) const = default;
};
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
  kConstantLr = 0,          ///< no schedule inputs; hyper[kLr] is set from the host
  kPiecewiseConstantDecay,  ///< steps {boundaries..., INT64_MAX}, values {values...}: one step per value, the
                            ///<   last an end marker, so the rate is values[i] for the first i with t <= steps[i]
  kExponentialDecay,        ///< steps {decay_steps, staircase 0/1}, values {initial_learning_rate, decay_rate}
  kCosineDecay,             ///< steps {decay_steps, warmup_steps, has warmup_target 0/1},
                            ///<   values {initial_learning_rate, alpha, warmup_target}
  kCosineDecayRestarts,     ///< steps {first_decay_steps}, values {initial_learning_rate, t_mul, m_mul, alpha}
};

/// A sliding window over the two spatial axes of {B, H, W, C} (convolution
/// patches and pooling). Pads are in input pixels.
struct Window2D {
  /// The window's height and width, in taps.
  ///@{
  int64_t kh = 1, kw = 1;
  ///@}
  /// The strides along H and W, in input pixels.
  ///@{
  int64_t sh = 1, sw = 1;
  ///@}
  /// The dilations along H and W: input pixels between two taps.
  ///@{
  int64_t dh = 1, dw = 1;
  ///@}
  /// Zero padding on each side, in input pixels (Keras' "same" pads the
  /// bottom and right one more when the total is odd).
  ///@{
  int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  ///@}
  /// Conv2D and its backward ops only (pooling: 1): the channels split into
  /// this many groups, each convolved with its own filters (Keras 3's and
  /// PyTorch's `groups`; ONNX's `group`). The input's channels C and the
  /// filters F are multiples of it; the kernel is {kh, kw, C / groups, F},
  /// filters [g F/groups, (g+1) F/groups) reading channels
  /// [g C/groups, (g+1) C/groups). groups == C is a depthwise convolution.
  int64_t groups = 1;
  /// The output height for an input of height `h`: floor((h + pads - dh (kh - 1) - 1) / sh) + 1.
  int64_t out_h(int64_t h) const { return (h + pad_top + pad_bottom - dh * (kh - 1) - 1) / sh + 1; }
  /// The output width for an input of width `w`, as out_h.
  int64_t out_w(int64_t w) const { return (w + pad_left + pad_right - dw * (kw - 1) - 1) / sw + 1; }
  /// Equal when every field is.
  bool operator==(const Window2D&) const = default;
};

/// Attributes of one op application: typed fields, each read by the ops
/// named beside it and by no other, so that no field has two meanings.
/// Unused fields stay at their defaults. Two applications of an op with equal
/// attributes compute the same function (operator==, which the batch rule of
/// backend/executable.h relies on: a field added here is compared there
/// without further code).
struct OpAttrs {
  /// MatMul, AccumulateGrad's product form
  ///@{
  bool trans_a = false, trans_b = false;
  ///@}
  float value = 0.0f;                     ///< Fill: the constant
  float factor = 0.0f;                    ///< Scale: the multiplier
  float rate = 0.0f;                      ///< Dropout: the probability of dropping an element, in [0, 1)
  float alpha = 0.0f;                     ///< Elu, EluBackward: the negative side's scale
  float negative_slope = 0.0f;            ///< LeakyRelu, LeakyReluBackward
  float exponent = 0.0f;                  ///< Pow
  float delta = 0.0f;                     ///< HuberLoss, HuberLossBackward: the quadratic zone's half-width, > 0
  float threshold = 0.0f;                 ///< BinaryAccuracy: predictions above it count as 1
  float clip = 0.0f;                      ///< ClipValue: the bound; ClipNorm: the largest norm
  float momentum = 0.0f;                  ///< MovingAverage: the old state's weight
  float eps = 0.0f;                       ///< BatchNorm, BatchNormParamGrad, BatchNormBackward, RmsNorm,
                                          ///< RmsNormBackward: epsilon, > 0
  bool own_stats = false;                 ///< BatchNorm, BatchNormBackward: the statistics are the input's own,
                                          ///< so their gradient folds into dx
  int64_t k = 0;                          ///< TopKAccuracy: how many top scores count, >= 1
  uint64_t seed = 0;                      ///< Dropout: the stream's key
  bool zero_grad = false;                 ///< optimizer update: clear the gradient accumulator after use
  uint32_t flags = 0;                     ///< optimizer updates and clipping: OptimizerFlag bits;
                                          ///< MaxPool2DBackward, AvgPool2DBackward, Conv2DBackwardInput:
                                          ///< kMaskNonPositive;
                                          ///< MatMul, Conv2D, BatchNorm, Add,
                                          ///< BatchNormParamGrad, BatchNormBackward: kReluOutput;
                                          ///< Conv2D: kBatchStatsOutput;
                                          ///< Attention, AttentionBackward: kCausal, kAttentionMask;
                                          ///< Rope: kRopeInverse;
                                          ///< OptimizerTick: an LrScheduleKind
  Shape shape;                            ///< SumTo / BroadcastTo / Fill / Reshape target; backward input shapes
  int axis = 0;                           ///< Slice / Concat / SumAxis / MeanAxis / MaxAxis / Transpose, in [0, rank)
  int axis2 = 0;                          ///< Transpose: the axis swapped with `axis`
  bool keepdim = false;                   ///< SumAxis / MeanAxis / MaxAxis: keep the reduced axis as size 1
  /// Clamp / ClampBackward bounds
  ///@{
  float clamp_min = -INFINITY, clamp_max = INFINITY;
  ///@}
  /// Slice, SliceBackward: `length` entries from `start`
  ///@{
  int64_t start = 0, length = 0;
  ///@}
  Window2D window;                        ///< pooling, Conv2D and their backward ops
  RopeOptions rope;                       ///< Rope: the rotation
  /// Equal when every field is: two applications of an op with equal
  /// attributes compute the same function.
  bool operator==(const OpAttrs&) const = default;
};

/// What an op does to memory (ops/op_list.h's effect column).
enum class OpEffect : uint8_t {
  Computes,  ///< writes a new output
  InPlace,   ///< writes its first input; the output aliases it
  View,      ///< the output is its first input's memory, unchanged (Reshape)
};

/// How an op's float parameter (OpInfo::param) depends on the batch size
/// (ops/op_list.h's batch column). A graph is built once for the largest
/// batch and planned for fewer rows (backend/executable.h's BatchRule), so
/// every attribute that depends on the batch must say how.
enum class BatchScaling : uint8_t {
  Fixed,        ///< the same at every batch size
  InverseRows,  ///< c / rows (a mean's 1 / n): rescaled when the graph runs fewer rows
};

/// Static facts of an op: its line of the op list (ops/op_list.h).
struct OpInfo {
  const char* name;  ///< the op's name in messages and graph dumps ("matmul")
  /// The fewest and the most inputs the op takes.
  ///@{
  int min_inputs, max_inputs;
  ///@}
  bool in_place;      ///< writes its first input; the output aliases it
  bool view = false;  ///< the output is its first input's memory, unchanged (Reshape)
  float OpAttrs::*param = nullptr;  ///< the op's one float parameter, or none
  BatchScaling param_batch = BatchScaling::Fixed;  ///< how param depends on the batch size
};
/// The facts of `op`; throws std::out_of_range for OpKind::Count.
const OpInfo& op_info(OpKind op);

/// Attributes with `op`'s float parameter (OpInfo::param: Elu's alpha,
/// LeakyRelu's negative slope, Pow's exponent, ...) set to `value`, every
/// other field at its default. Throws ValueError when `op` has no float
/// parameter and `value` is not 0 (a parameter that would be ignored).
OpAttrs op_param_attrs(OpKind op, float value);

/// Result of a shape rule.
struct OpSignature {
  Shape shape;                   ///< the output's shape
  DType dtype = DType::Float32;  ///< the output's dtype
};

/// The shape rule of `op`: the output shape and dtype from the inputs'.
/// Throws ShapeError (incompatible shapes) or TypeError (wrong dtype), naming
/// the op, what it expected and what came.
OpSignature infer_signature(OpKind op, std::span<const Shape> shapes, std::span<const DType> dtypes,
                            const OpAttrs& attrs);

/// NumPy broadcasting of two shapes; throws ShapeError naming both when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op_name);

}  // namespace tensorgrad
