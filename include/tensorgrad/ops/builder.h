#pragma once
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>

#include "tensorgrad/core/tensor.h"
#include "tensorgrad/ops/op.h"

namespace tensorgrad {

/// A handle to a value inside a Builder (a graph node; an ag tensor in an ag::EagerBuilder).
struct Value {
  int32_t id = -1;  ///< the builder's index of the value; -1: none
  /// Whether it refers to a value (a default-constructed one does not:
  /// an absent optional input).
  bool valid() const { return id >= 0; }
  /// The same value of the same builder.
  bool operator==(const Value&) const = default;
};

/// The small interface every gradient rule and every layer is written
/// against. The lazy graph (graph/graph.h) records ops; the eager API
/// (ag/eager_builder.h) runs them at once. The typed helpers below all go through `apply`.
class Builder {
 public:
  virtual ~Builder() = default;

  /// Applies `op` to `inputs`; checks the shape rule (throws ShapeError /
  /// TypeError) and returns the result.
  virtual Value apply(OpKind op, std::span<const Value> inputs, const OpAttrs& attrs) = 0;
  /// A parameter (or other persistent tensor) bound into the computation.
  /// The same tensor memory given twice gives the same Value (shared layers).
  /// `trainable` false: no gradient flows to it, no update, no decay.
  virtual Value parameter(const Tensor& tensor, const char* name, bool trainable) = 0;
  /// Shape and dtype of a value; throw IndexError for a handle this builder did not make.
  ///@{
  virtual Shape shape(Value v) const = 0;
  virtual DType dtype(Value v) const = 0;
  ///@}

  /// apply() with the inputs as a braced list: `b.apply(OpKind::Add, {x, y})`.
  Value apply(OpKind op, std::initializer_list<Value> inputs, const OpAttrs& attrs = {}) {
    return apply(op, std::span<const Value>(inputs.begin(), inputs.size()), attrs);
  }

  // Typed helpers; shapes as in op.h.
  /// op(a){M,K} x op(b){K,N} -> {M,N}, or batched op(a){B,M,K} x op(b){B,K,N}
  /// -> {B,M,N} (the same B); trans_a / trans_b transpose the last two axes.
  /// Throws TypeError for a non-float32 operand, ShapeError (naming both
  /// shapes) for other ranks, mixed ranks, different B or different K.
  Value matmul(Value a, Value b, bool trans_a = false, bool trans_b = false);
  /// op(a){M,K} x op(b){K,N} + bias{N} (added to every row) -> {M,N}, in one
  /// GEMM whose output starts as the bias (a Dense layer; PyTorch's
  /// F.linear). Rank 2 only. Throws as matmul, and ShapeError when bias is
  /// not {N}.
  Value matmul(Value a, Value b, Value bias, bool trans_a = false, bool trans_b = false);
  /// a + b, a - b and a * b element-wise with NumPy broadcasting. Throw
  /// ShapeError naming both shapes when they do not broadcast, TypeError for
  /// a non-float32 operand.
  ///@{
  Value add(Value a, Value b) { return apply(OpKind::Add, {a, b}); }
  Value sub(Value a, Value b) { return apply(OpKind::Sub, {a, b}); }
  Value mul(Value a, Value b) { return apply(OpKind::Mul, {a, b}); }
  ///@}
  /// a / b with NumPy broadcasting (shape as Add; IEEE division: x / 0 is
  /// +-inf or NaN). Throws ShapeError naming both shapes when they do not
  /// broadcast, TypeError for a non-float32 operand.
  Value div(Value a, Value b) { return apply(OpKind::Div, {a, b}); }
  /// e^x, element-wise; x float32 (else TypeError), any shape.
  Value exp(Value x) { return apply(OpKind::Exp, {x}); }
  /// Natural log, element-wise (-inf at 0, NaN below); x float32 (else TypeError).
  Value log(Value x) { return apply(OpKind::Log, {x}); }
  /// Square root, element-wise (NaN below 0); x float32 (else TypeError).
  Value sqrt(Value x) { return apply(OpKind::Sqrt, {x}); }
  /// x^p element-wise, as std::pow / torch.pow (NaN for x < 0 with a
  /// non-integer p); x float32 (else TypeError).
  Value pow(Value x, float p);
  /// x clamped to [min, max] element-wise, NaN staying NaN; either bound may
  /// be infinite (a one-sided clamp). The gradient passes where
  /// min <= x <= max (PyTorch's rule). Throws ValueError when min > max or
  /// a bound is NaN, TypeError for a non-float32 x.
  Value clamp(Value x, float min, float max);
  /// Sum of x along `axis` (in [0, rank)): the axis dropped, or kept as 1
  /// with `keepdim`. Throws ShapeError for an axis outside x (or a scalar x),
  /// TypeError for a non-float32 x.
  Value sum_axis(Value x, int axis, bool keepdim = false);
  /// Mean of x along `axis`; shapes and errors as sum_axis.
  Value mean_axis(Value x, int axis, bool keepdim = false);
  /// Max of x along `axis` (a NaN in the slice gives NaN, as torch.max); the
  /// gradient goes to the first maximal element. Shapes and errors as sum_axis.
  Value max_axis(Value x, int axis, bool keepdim = false);
  /// x {..., d_axis, ..., d_axis2, ...} with the two axes swapped (a copy),
  /// rank 2..Shape::kMaxRank, any dtype. Throws ShapeError for a lower rank or
  /// an axis outside [0, rank).
  Value transpose(Value x, int axis, int axis2);
  /// Element-wise max(a, b) with NumPy broadcasting (shape as Add). The
  /// gradient goes to a where a >= b, to b elsewhere (TensorFlow's rule).
  Value maximum(Value a, Value b) { return apply(OpKind::Maximum, {a, b}); }
  /// Element-wise min(a, b) with NumPy broadcasting. The gradient goes to a
  /// where a <= b, to b elsewhere.
  Value minimum(Value a, Value b) { return apply(OpKind::Minimum, {a, b}); }
  /// x with `value` wherever mask != 0 (torch.masked_fill, the mask a
  /// float32 tensor of 0 and 1 rather than bool): x and mask broadcast as
  /// Add, the result has the broadcast shape. What x holds under the mask
  /// (an infinity, a NaN) is replaced; `value` may be infinite (-inf masks
  /// attention scores before a softmax). The gradient passes to x where the
  /// mask is 0; the mask takes none. Throws ShapeError when the shapes do
  /// not broadcast, TypeError for a non-float32 operand.
  Value masked_fill(Value x, Value mask, float value);
  /// a where cond != 0, else b (torch.where and ONNX's Where, cond a float32
  /// 0/1 mask): the three broadcast together. The branch not taken never
  /// reaches the result, so an infinity or NaN there does not leak in (as
  /// torch.where). The gradient goes to a where cond is set, to b elsewhere.
  /// Built from two masked_fills and an add. Throws as masked_fill.
  Value where(Value cond, Value a, Value b);
  /// x * s.
  Value scale(Value x, float s);
  /// max(x, 0), 1 / (1 + e^-x) and tanh(x), element-wise; x float32 (else
  /// TypeError), any shape. ReLU propagates NaN.
  ///@{
  Value relu(Value x) { return apply(OpKind::Relu, {x}); }
  Value sigmoid(Value x) { return apply(OpKind::Sigmoid, {x}); }
  Value tanh(Value x) { return apply(OpKind::Tanh, {x}); }
  ///@}
  /// Softmax and log-softmax along the last axis (torch.softmax(x, -1)),
  /// computed stably (the row's max subtracted first); x float32 (else
  /// TypeError).
  ///@{
  Value softmax(Value x) { return apply(OpKind::Softmax, {x}); }
  Value log_softmax(Value x) { return apply(OpKind::LogSoftmax, {x}); }
  ///@}
  /// Mean over rows of weights[i] * cross-entropy(softmax(logits[i]), labels[i]).
  Value softmax_cross_entropy(Value logits, Value labels, Value weights = {});
  /// sum(weights * (pred - target)^2) / numel(pred), weights optional.
  Value mse_loss(Value pred, Value target, Value weights = {});
  /// pred, target {B, N}; weights {B} (per row) or {B, N} (per element), optional.
  /// Scalar sum(weights * |pred - target|) / (B N). Gradient sign(pred - target), 0 where equal.
  Value mae_loss(Value pred, Value target, Value weights = {});
  /// pred, target {B, N}; weights {B} or {B, N}, optional; delta > 0. With
  /// d = pred - target, per element e = d^2 / 2 where |d| <= delta, else
  /// delta (|d| - delta / 2) (Keras' Huber; PyTorch's smooth_l1 for delta = 1).
  /// Scalar sum(weights * e) / (B N).
  Value huber_loss(Value pred, Value target, float delta = 1.0f, Value weights = {});
  /// logits, targets {B, N} (targets in [0, 1]); weights {B} or {B, N}, optional.
  /// Scalar sum(weights * (max(z, 0) - z y + log1p(exp(-|z|)))) / (B N): the
  /// cross-entropy of sigmoid(z) against y, finite for any finite z.
  Value binary_cross_entropy(Value logits, Value targets, Value weights = {});
  /// Inverted dropout with drop probability `rate` (in [0, 1), else
  /// ValueError), random stream `seed`; x float32 (else TypeError). The mask
  /// is a hash of (seed, counter, index), the counter being `counter` when
  /// given (an int64 tensor {1}, else TypeError / ShapeError) and this
  /// builder's rng_counter() otherwise, so a graph and an eager builder at the
  /// same counter drop the same elements.
  Value dropout(Value x, float rate, uint64_t seed, Value counter = {});
  /// The int64 {1} counter that dropout draws from (the random stream is a
  /// tensor that persists between runs): in a Graph the model's counter,
  /// advanced by one at the start of every run by an op the first call adds;
  /// in an eager builder its own counter. Throws Error in a builder that has
  /// none.
  virtual Value rng_counter() = 0;
  /// The sum and the mean of every element of x: a scalar {}.
  ///@{
  Value sum(Value x) { return apply(OpKind::Sum, {x}); }
  Value mean(Value x) { return apply(OpKind::Mean, {x}); }
  ///@}
  /// x summed down to `shape` (the adjoint of broadcasting); x itself when already that shape.
  Value sum_to(Value x, const Shape& shape);
  /// x expanded to `shape` by NumPy broadcasting; x itself when already that shape.
  Value broadcast_to(Value x, const Shape& shape);
  /// A constant of `shape` filled with `value`.
  Value fill(const Shape& shape, float value);
  /// The same elements under a new shape (a view: no copy).
  Value reshape(Value x, const Shape& shape);
  /// `length` entries of x from `start` along `axis`.
  Value slice(Value x, int axis, int64_t start, int64_t length);
  /// a and b joined along `axis`.
  Value concat(Value a, Value b, int axis);
  /// xs (2 to kMaxOpInputs of them, of one rank and dtype, equal outside
  /// `axis`) joined along `axis` in order. Throws ShapeError for another
  /// count, an axis outside them or shapes that differ outside it, TypeError
  /// for mixed dtypes.
  Value concat(std::span<const Value> xs, int axis);
  /// A one-input op, with its float parameter (OpInfo::param: Elu's alpha,
  /// LeakyRelu's negative slope, Pow's exponent) set to `param`. Throws
  /// ValueError when the op has no float parameter and `param` is not 0.
  Value unary(OpKind op, Value x, float param = 0.0f);
  /// Layer normalization over the last axis (Ba et al. 2016), the one
  /// formula of keras.layers.LayerNormalization and torch.nn.LayerNorm:
  /// y = (x - mean) / sqrt(var + eps) * gamma + beta, the mean and the biased
  /// variance over the last axis of x {..., D}; gamma and beta {D} each
  /// optional (no scale, no shift). Composed from recorded ops, so gradients
  /// reach x, gamma and beta. Throws TypeError for a non-float32 x,
  /// ShapeError for a scalar x or a gamma / beta that does not broadcast
  /// against it.
  Value layer_norm(Value x, float eps, Value gamma = {}, Value beta = {});
  /// Options of scaled_dot_product_attention.
  struct AttentionOptions {
    Value mask;            ///< added to the scaled scores, {1 or N, 1 or Lq, Lk} (0 keeps, -inf hides); optional
    bool causal = false;   ///< hide key j from query i where j > i + Lk - Lq (queries last, as a key-value cache)
    float scale = NAN;     ///< the scores' factor; NaN: 1 / sqrt(D)
    float dropout = 0.0f;  ///< drop probability of the weights, in [0, 1)
    uint64_t seed = 0;     ///< the dropout's random stream (drawn at rng_counter())
  };
  /// softmax(q k^T scale + mask) v per n (torch.nn.functional.
  /// scaled_dot_product_attention on {N, L, D} with N = batch x heads): q
  /// {N, Lq, D}, k {Nkv, Lk, D}, v {Nkv, Lk, Dv} -> {N, Lq, Dv}, by one fused
  /// op (Attention) that never stores the {Lq, Lk} weights (FlashAttention,
  /// Dao et al. 2022). A query that sees no key gives 0 and no gradient.
  /// Grouped-query attention (Ainslie et al. 2023): Nkv may be any divisor
  /// of N, and query row n then reads key-value row n / (N / Nkv), k and v
  /// never copied. With N = batch x query heads and Nkv = batch x key-value
  /// heads, both batch-major, query head h reads key-value head h / (heads /
  /// kv heads): Hugging Face's repeat_interleave of the key-value heads,
  /// PyTorch's enable_gqa. The gradients of k and v have their shapes, each
  /// key-value row's summed over the query rows that read it. Nkv = N is
  /// plain multi-head attention. Throws ShapeError when the shapes do not fit
  /// (Nkv not dividing N among them), TypeError for non-float32 inputs,
  /// ValueError for a dropout outside [0, 1) or a non-finite scale.
  Value scaled_dot_product_attention(Value q, Value k, Value v, const AttentionOptions& options);
  /// scaled_dot_product_attention with the default options (no mask, not
  /// causal, scale 1 / sqrt(D), no dropout).
  Value scaled_dot_product_attention(Value q, Value k, Value v) { return scaled_dot_product_attention(q, k, v, {}); }
  /// Root mean square normalization over the last axis (Zhang & Sennrich
  /// 2019), the formula of keras.layers.RMSNormalization, torch.nn.
  /// functional.rms_norm and ggml_rms_norm: y = x / sqrt(mean(x^2) + eps)
  /// * weight, the mean over the last axis of x {..., D}; weight {D}
  /// optional (no scale). One fused op (RmsNorm) with its own backward op;
  /// gradients reach x and weight. Throws TypeError for a non-float32 x or
  /// weight, ShapeError for a scalar x, an empty last axis or a weight that
  /// is not {D}, ValueError for an eps that is not finite and > 0.
  Value rms_norm(Value x, float eps, Value weight = {});
  /// Rotary position embedding (RoFormer, Su et al. 2021) as one fused op
  /// (Rope): x {B, T, H, D} float32 (batch, steps, heads, head features),
  /// positions int32 {T}, each >= 0. Pair (a, b) of every head at step t
  /// (which features pair: options.pairing) turns to (a cos - b sin, a sin +
  /// b cos) by the angle positions[t] / scaling_factor * theta^(-2i / dims)
  /// for the pair's index i in [0, dims / 2); features from dims on pass
  /// unchanged. The angle and its cosine and sine are computed in double on
  /// the CPU, in float32 on Vulkan. The gradient reaches x (the rotation by
  /// the negated angle); positions take none. Throws TypeError for a
  /// non-float32 x or non-int32 positions, ShapeError for an x not of rank 4,
  /// positions not {T} or dims > D (or an odd D with dims 0), ValueError for
  /// an odd or negative dims, or a theta or scaling_factor not finite and
  /// > 0. A negative position is a ValueError when the CPU kernel runs (a
  /// device rotates it by its negative angle).
  Value rotary_embedding(Value x, Value positions, const RopeOptions& options);
  /// MaxPool2D or AvgPool2D of x {B, H, W, C} with `window`.
  Value windowed(OpKind op, Value x, const Window2D& window);
};

}  // namespace tensorgrad
