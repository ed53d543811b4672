#pragma once
// The eager API's ops, as torch:: and torch::nn::functional name them. Each
// runs at once through the op table (its shape rule, its CPU kernel) and, in
// gradient mode with an input that requires grad, records itself for
// backward. Shape errors are the op table's: ShapeError naming the op and
// both shapes; TypeError for a dtype an op does not take (every op but the
// ids of index_select / embedding / cross_entropy is float32).
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string_view>

#include "tensorgrad/ag/tensor.h"
#include "tensorgrad/ops/op.h"

namespace tensorgrad::ag {

// ---- arithmetic, with NumPy / PyTorch broadcasting ----

/// a + b, a - b, a * b element-wise with broadcasting (torch.add, torch.sub,
/// torch.mul).
///@{
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
///@}
/// Element-wise max / min with broadcasting; the gradient goes to a where
/// a >= b (a <= b), else to b (ties to a). NaN in either gives NaN.
///@{
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
///@}
/// 1 where a >= b, else 0 (float32, broadcasting; torch.ge as a float mask). No gradient flows through it.
Tensor ge(const Tensor& a, const Tensor& b);
/// x with `value` wherever mask != 0 (torch.masked_fill, with a float32 0/1
/// mask): x and mask broadcast together; what x holds under the mask is
/// replaced, `value` may be infinite. The gradient passes to x where the
/// mask is 0. Throws ShapeError when the shapes do not broadcast.
Tensor masked_fill(const Tensor& x, const Tensor& mask, float value);
/// a where cond != 0, else b (torch.where, cond a float32 0/1 mask), the
/// three broadcast together; an inf or NaN in the branch not taken does not
/// leak into the result or its gradient. Throws ShapeError as masked_fill.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
/// add, sub and mul as operators.
///@{
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
///@}
/// -x (x scaled by -1).
Tensor operator-(const Tensor& x);
/// x + s, s + x, x - s and s - x: the scalar as a {} tensor, broadcast.
///@{
Tensor operator+(const Tensor& x, float s);
Tensor operator+(float s, const Tensor& x);
Tensor operator-(const Tensor& x, float s);
Tensor operator-(float s, const Tensor& x);
///@}
/// x * s (the engine's Scale op).
///@{
Tensor operator*(const Tensor& x, float s);
Tensor operator*(float s, const Tensor& x);
///@}

/// a / b, element-wise with broadcasting (IEEE division: x / 0 is inf or NaN, as PyTorch).
Tensor div(const Tensor& a, const Tensor& b);
/// div as operators; a scalar is a {} tensor, broadcast.
///@{
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator/(const Tensor& x, float s);
Tensor operator/(float s, const Tensor& x);
///@}

/// a {M, K} x b {K, N} -> {M, N}, or batched: a {B, M, K} x b {B, K, N} ->
/// {B, M, N} (torch.bmm; equal B, no broadcasting of the batch).
Tensor matmul(const Tensor& a, const Tensor& b);
/// input {..., in} x weight^T, weight {out, in} (PyTorch's layout), plus
/// bias {out} when defined -> {..., out} (torch.nn.functional.linear). One
/// matmul with the weight transposed in the kernel (no copy).
Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor());
/// x {..., a, ..., b, ...} with dimensions dim0 and dim1 swapped (a copy; negative dims count from the end).
Tensor transpose(const Tensor& x, int dim0, int dim1);
/// The transpose of a matrix {M, N} -> {N, M} (ShapeError for another rank).
Tensor t(const Tensor& x);

// ---- element-wise functions ----

/// max(x, 0), 1 / (1 + e^-x), tanh(x), element by element (torch.relu,
/// torch.sigmoid, torch.tanh).
///@{
Tensor relu(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
///@}
/// GELU (Hendrycks & Gimpel 2016), element by element, any shape, as
/// torch.nn.functional.gelu(x, approximate): "none" (the default) is the
/// exact x Phi(x) = x (1 + erf(x / sqrt 2)) / 2; "tanh" its tanh
/// approximation x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) / 2 (Keras'
/// gelu(approximate=True)). NaN stays NaN. ValueError for any other
/// `approximate`, naming the two it takes; TypeError for a non-float32 x.
Tensor gelu(const Tensor& x, std::string_view approximate = "none");
/// x sigmoid(x) (torch.nn.functional.silu, Keras' swish).
Tensor silu(const Tensor& x);
/// min(max(x, 0), 6) (torch.nn.functional.relu6): a clamp, its gradient
/// passing where 0 <= x <= 6.
Tensor relu6(const Tensor& x);
/// relu6(x + 3) / 6 (torch.nn.functional.hardsigmoid, Keras 3's
/// hard_sigmoid; ONNX's HardSigmoid with alpha 1/6, beta 0.5).
Tensor hardsigmoid(const Tensor& x);
/// x hardsigmoid(x) (torch.nn.functional.hardswish, MobileNetV3's h-swish;
/// ONNX's HardSwish).
Tensor hardswish(const Tensor& x);
/// x where x > 0, else alpha (e^x - 1) (torch.nn.functional.elu).
Tensor elu(const Tensor& x, float alpha = 1.0f);
/// x where x > 0, else negative_slope x (torch.nn.functional.leaky_relu,
/// PyTorch's default slope).
Tensor leaky_relu(const Tensor& x, float negative_slope = 0.01f);
/// log(1 + e^x), computed without overflow (torch.nn.functional.softplus).
Tensor softplus(const Tensor& x);
/// 1 / sqrt(x).
Tensor rsqrt(const Tensor& x);
/// e^x.
Tensor exp(const Tensor& x);
/// Natural logarithm (log(0) = -inf, log of a negative number NaN, as PyTorch).
Tensor log(const Tensor& x);
/// Square root (NaN below 0).
Tensor sqrt(const Tensor& x);
/// The error function, erf(x) = 2 / sqrt(pi) int_0^x e^(-t^2) dt, element
/// by element, any shape (torch.erf): erf(+-inf) = +-1, NaN stays NaN. Its
/// gradient is 2 / sqrt(pi) e^(-x^2). TypeError for a non-float32 tensor.
Tensor erf(const Tensor& x);
/// x^exponent; NaN for a negative x with a non-integer exponent (std::pow,
/// torch.pow). The gradient at exponent 0 is 0.
Tensor pow(const Tensor& x, float exponent);
/// min(max(x, min), max); either bound may be infinite; ValueError when min > max
/// or a bound is NaN. The gradient passes where min <= x <= max (PyTorch's rule).
Tensor clamp(const Tensor& x, float min, float max);
/// Inverted dropout (torch.nn.functional.dropout): with `training`, each
/// element is zeroed with probability p and the rest scaled by 1 / (1 - p);
/// without, x itself. The mask is hash(generator's dropout key, its next
/// counter), the function a graph's Dropout uses (ag::Generator). ValueError
/// for p outside [0, 1).
Tensor dropout(const Tensor& x, float p = 0.5f, bool training = true, Generator* generator = nullptr);
/// Softmax / log-softmax along `dim`; only the last dimension is built
/// (ValueError for another: move that axis last first).
///@{
Tensor softmax(const Tensor& x, int dim = -1);
/// torch.nn.functional.scaled_dot_product_attention: softmax(query key^T
/// scale + mask) value over the last two axes, query {..., L, E}, key
/// {..., S, E}, value {..., S, Ev} (equal leading axes, e.g. {batch, heads})
/// -> {..., L, Ev}. attn_mask: int32 (PyTorch's bool: 1 takes part, 0 is
/// hidden) or float32 (added to the scores), of shape {L, S} or of the
/// query's rank with leading axes equal to the query's or all 1 and L or 1;
/// is_causal hides the keys after each query (the queries being the last L
/// of the S positions); scale defaults to 1 / sqrt(E); dropout_p drops
/// weights from the generator's stream. One fused op that stores no {L, S}
/// matrix (FlashAttention, Dao et al. 2022); a query that sees no key gives
/// 0. enable_gqa (PyTorch 2.5's): key and value may have fewer heads (axis
/// -3, Hkv) than the query (Hq, a multiple), query head h reading key-value
/// head h / (Hq / Hkv) (grouped-query attention, Hugging Face's
/// repeat_interleave), without copying key or value; their gradients keep
/// their shapes. Without it, leading axes that differ are a ShapeError.
/// Throws ShapeError for shapes that do not fit, TypeError for other
/// dtypes, ValueError for a dropout_p outside [0, 1).
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask = Tensor(), float dropout_p = 0.0f, bool is_causal = false,
                                    std::optional<float> scale = std::nullopt, Generator* generator = nullptr,
                                    bool enable_gqa = false);
Tensor log_softmax(const Tensor& x, int dim = -1);
///@}

// ---- reductions and shapes ----

/// Sum / mean of every element -> a tensor of shape {}.
///@{
Tensor sum(const Tensor& x);
Tensor mean(const Tensor& x);
///@}
/// Sum / mean / max along `dim` (negative counts from the end): the
/// dimension dropped, or kept as 1 with `keepdim` (torch.sum(x, dim,
/// keepdim), torch.amax). amax's gradient goes to the first maximal element,
/// and a NaN in a slice gives NaN. IndexError for a dim outside the tensor.
///@{
Tensor sum(const Tensor& x, int dim, bool keepdim = false);
Tensor mean(const Tensor& x, int dim, bool keepdim = false);
Tensor amax(const Tensor& x, int dim, bool keepdim = false);
///@}
/// The same elements under `shape` (a view: shared memory and version
/// counter, no copy). ShapeError when the element counts differ.
Tensor reshape(const Tensor& x, const Shape& shape);
/// {N, d1, d2, ...} -> {N, d1 * d2 * ...}.
Tensor flatten(const Tensor& x);
/// x expanded to `shape` by broadcasting (torch.Tensor.expand, but a copy).
Tensor broadcast_to(const Tensor& x, const Shape& shape);
/// `length` entries from `start` along `dim` (torch.narrow; a copy).
Tensor narrow(const Tensor& x, int dim, int64_t start, int64_t length);
/// The tensors joined along `dim` (torch.cat): same rank and dtype, equal
/// outside `dim`. One tensor gives a copy of it; none is a ValueError.
///@{
Tensor cat(std::span<const Tensor> tensors, int dim = 0);
Tensor cat(std::initializer_list<Tensor> tensors, int dim = 0);
///@}
/// Rows of x {N, ...} picked by int32 `index` {K} -> {K, ...} (torch.index_select
/// along dim 0). The gradient adds up over repeated indices. Ids must be in
/// [0, N): checked, IndexError naming the first bad one. Ids on a GPU are
/// checked by the kernel instead (no read back): the IndexError names one
/// bad id and comes at the next sync point (a read back, backward()'s end,
/// synchronize), as CUDA's device-side assert does, and no optimizer update
/// queued before it is thrown changes anything.
Tensor index_select(const Tensor& x, const Tensor& index);
/// weight {V, D} rows for int32 ids of any shape -> {ids..., D}
/// (torch.nn.functional.embedding). Ids checked as index_select's.
Tensor embedding(const Tensor& ids, const Tensor& weight);

// ---- convolution and pooling, channels-last as the engine ----

/// x {N, H, W, C} convolved with weight {kh, kw, C / groups, F} (the
/// engine's layout; the Conv2d module, ag/nn/conv.h, takes PyTorch's) plus
/// bias {F} when defined -> {N, Ho, Wo, F}. Zero padding of `padding`
/// pixels on every side. groups (torch.nn.functional.conv2d's) splits the
/// channels and the filters into that many groups, filter group g seeing
/// channel group g only; ValueError unless it divides C and F.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), int64_t stride = 1,
              int64_t padding = 0, int64_t dilation = 1, int64_t groups = 1);
/// Max / average pooling of x {N, H, W, C} over kernel x kernel windows;
/// stride 0 means stride = kernel (as PyTorch's default). Averages exclude padding.
///@{
Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride = 0, int64_t padding = 0);
Tensor avg_pool2d(const Tensor& x, int64_t kernel, int64_t stride = 0, int64_t padding = 0);
///@}

/// Batch normalization over every axis but the last (channels-last, so
/// {N, C} or {N, H, W, C}): (x - mean) / sqrt(var + eps) * weight + bias,
/// weight and bias {C}. With `training` the statistics are x's own (mean and
/// biased variance over the batch, their gradient included); without, they
/// are running_mean and running_var {C}, which must then be given. This
/// function does not update running statistics (PyTorch's does when given
/// them in training; the BatchNorm modules of ag/nn/conv.h do).
/// ShapeError for channel counts that differ, ValueError for eps <= 0 or
/// missing running statistics in evaluation.
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, bool training = true,
                  const Tensor& running_mean = Tensor(), const Tensor& running_var = Tensor(), float eps = 1e-5f);

/// Root mean square normalization over the last dimension:
/// torch.nn.functional.rms_norm(input, (D,), weight, eps) (normalized_shape
/// being the last dimension only): input / sqrt(mean(input^2) + eps) *
/// weight, input {..., D} float32, weight {D} optional. eps defaults to
/// 1e-6 (Keras' RMSNormalization; PyTorch's default is the dtype's machine
/// epsilon). One fused op; gradients reach input and weight. Throws
/// TypeError for non-float32 tensors, ShapeError for a scalar input or a
/// weight that is not {D}, ValueError for an eps not finite and > 0.
Tensor rms_norm(const Tensor& input, const Tensor& weight = Tensor(), float eps = 1e-6f);
/// Rotary position embedding (RoFormer, Su et al. 2021) as one fused op: x
/// {B, T, H, D} float32 (batch, steps, heads, head features), positions
/// int32 {T}, each >= 0. Pair i (options.pairing: Halves pairs feature i
/// with i + dims / 2, Hugging Face's rotate_half; Adjacent pairs 2i with
/// 2i + 1, ggml's GGML_ROPE_TYPE_NORM) of the first options.dims features
/// (0: all D) of every head at step t turns by positions[t] /
/// scaling_factor * theta^(-2i / dims); the rest pass unchanged. Angles in
/// double on the CPU, float32 on Vulkan. The gradient reaches x. Throws
/// TypeError for a non-float32 x or non-int32 positions, ShapeError for an x
/// not of rank 4, positions not {T} or dims > D, ValueError for an odd or
/// negative dims, a theta or scaling_factor not finite and > 0, or (on the
/// CPU) a negative position.
Tensor rotary_embedding(const Tensor& x, const Tensor& positions, const RopeOptions& options = {});

// ---- losses (mean over every element, PyTorch's default reduction) ----

/// mean((input - target)^2); both of one shape.
Tensor mse_loss(const Tensor& input, const Tensor& target);
/// mean(|input - target|).
Tensor l1_loss(const Tensor& input, const Tensor& target);
/// mean of 0.5 d^2 where |d| <= delta, else delta (|d| - 0.5 delta), d = input - target (torch's huber_loss).
Tensor huber_loss(const Tensor& input, const Tensor& target, float delta = 1.0f);
/// logits {B, C} against class ids (int32 {B}) or class probabilities
/// (float32 {B, C}): mean over rows of -sum(target log softmax(logits)), as
/// torch.nn.functional.cross_entropy. Ids outside [0, C) are an IndexError.
Tensor cross_entropy(const Tensor& logits, const Tensor& target);
/// mean(max(z, 0) - z y + log(1 + e^-|z|)), the stable form of
/// binary_cross_entropy(sigmoid(z), y); z and y of one shape.
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target);

}  // namespace tensorgrad::ag
