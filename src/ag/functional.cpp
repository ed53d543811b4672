#include "tensorgrad/ag/functional.h"

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "ag/autograd.h"
#include "kernels/index_errors.h"
#include "tensorgrad/core/error.h"

namespace tensorgrad::ag {

using detail::apply;

namespace {

Tensor constant(float v) { return Tensor(tensorgrad::Tensor::full(Shape{}, v)); }

Tensor with_param(OpKind op, const Tensor& x, float param) { return apply(op, {x}, op_param_attrs(op, param)); }

// One draw of a dropout stream (the generator's, or the default one): its
// key into at.seed, and its next counter as the int64 {1} input the dropout
// ops read, on `device`.
Tensor dropout_draw(Generator* generator, OpAttrs& at, Device device) {
  Generator& g = generator ? *generator : default_generator();
  at.seed = g.dropout_key();
  tensorgrad::Tensor counter = tensorgrad::Tensor::empty(Shape{1}, DType::Int64);
  counter.data<int64_t>()[0] = int64_t(g.next_dropout_counter());
  return Tensor(detail::copy_to(counter, device));
}

int normalized_dim(const char* op, int dim, int rank) {
  if (dim < -rank || dim >= rank)
    throw IndexError(std::string(op) + ": dimension " + std::to_string(dim) + " is outside [" +
                     std::to_string(-rank) + ", " + std::to_string(rank) + ") for a tensor of rank " +
                     std::to_string(rank));
  return dim < 0 ? dim + rank : dim;
}

void last_dim_only(const char* op, const Tensor& x, int dim) {
  if (normalized_dim(op, dim, x.dim()) != x.dim() - 1)
    throw ValueError(std::string(op) + ": only the last dimension (dim -1) is built; got dim " + std::to_string(dim) +
                     " of a tensor of shape " + x.shape().str() + ". Move that axis last first");
}

// The ids feed a Gather, whose device kernels check them themselves (the
// Vulkan backend's reports a bad id and its position, and the IndexError
// comes at the next sync point, as CUDA's device-side asserts do), so ids on
// a device are not read back for it. On the CPU they are checked here, with
// the kernels' text (index_errors.h): one message on every device.
void check_ids(const char* op, const Tensor& ids, int64_t n, const char* what) {
  if (ids.dtype() != DType::Int32)
    throw TypeError(std::string(op) + ": " + what + " must be int32; got " + dtype_name(ids.dtype()));
  // On a device the kernel checks them (an IndexError at the next sync
  // point), so that no op waits for the queue to read them back.
  if (ids.device() != Device::CPU) return;
  const tensorgrad::Tensor host = ids.data().to(Device::CPU);
  const int32_t* p = host.data<int32_t>();
  for (int64_t i = 0; i < ids.numel(); ++i)
    if (p[i] < 0 || p[i] >= n) throw kernels::gather_id_error(p[i], i, n);
}

// The engine's losses take {B, N}: a tensor of another rank is viewed as one
// (rank 0 and 1 as rows of one element, higher ranks flattened after the
// first axis). The mean over every element does not depend on the split.
Tensor as_rows(const Tensor& x) {
  const Shape& s = x.shape();
  if (s.rank() == 2) return x;
  if (s.rank() <= 1) return reshape(x, Shape{s.numel(), 1});
  return flatten(x);
}

Tensor elementwise_loss(OpKind op, const char* name, const Tensor& input, const Tensor& target, float param = 0.0f) {
  if (input.defined() && target.defined() && input.shape() != target.shape())
    throw ShapeError(std::string(name) + ": input " + input.shape().str() + " and target " + target.shape().str() +
                     " must have the same shape");
  return apply(op, {as_rows(input), as_rows(target)}, op_param_attrs(op, param));
}

Window2D square_window(int64_t kernel, int64_t stride, int64_t padding, int64_t dilation) {
  Window2D w;
  w.kh = w.kw = kernel;
  w.sh = w.sw = stride;
  w.dh = w.dw = dilation;
  w.pad_top = w.pad_left = w.pad_bottom = w.pad_right = padding;
  return w;
}

Tensor pool(OpKind op, const Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  OpAttrs at;
  at.window = square_window(kernel, stride == 0 ? kernel : stride, padding, 1);
  return apply(op, {x}, at);
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return apply(OpKind::Add, {a, b}); }
Tensor sub(const Tensor& a, const Tensor& b) { return apply(OpKind::Sub, {a, b}); }
Tensor mul(const Tensor& a, const Tensor& b) { return apply(OpKind::Mul, {a, b}); }
Tensor maximum(const Tensor& a, const Tensor& b) { return apply(OpKind::Maximum, {a, b}); }
Tensor minimum(const Tensor& a, const Tensor& b) { return apply(OpKind::Minimum, {a, b}); }
Tensor ge(const Tensor& a, const Tensor& b) { return apply(OpKind::GreaterEqual, {a, b}); }
Tensor masked_fill(const Tensor& x, const Tensor& mask, float value) {
  return apply(OpKind::MaskedFill, {x, mask}, op_param_attrs(OpKind::MaskedFill, value));
}
// As Builder::where: two masked_fills and an add, so the branch not taken
// cannot bring its inf or NaN in.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  const Tensor unset = masked_fill(constant(1.0f), cond, 0.0f);
  return add(masked_fill(a, unset, 0.0f), masked_fill(b, cond, 0.0f));
}
Tensor operator-(const Tensor& x) { return with_param(OpKind::Scale, x, -1.0f); }
Tensor operator+(const Tensor& x, float s) { return add(x, constant(s)); }
Tensor operator+(float s, const Tensor& x) { return add(constant(s), x); }
Tensor operator-(const Tensor& x, float s) { return sub(x, constant(s)); }
Tensor operator-(float s, const Tensor& x) { return sub(constant(s), x); }
Tensor operator*(const Tensor& x, float s) { return with_param(OpKind::Scale, x, s); }
Tensor operator*(float s, const Tensor& x) { return with_param(OpKind::Scale, x, s); }

Tensor div(const Tensor& a, const Tensor& b) { return apply(OpKind::Div, {a, b}); }
Tensor operator/(const Tensor& x, float s) { return div(x, constant(s)); }
Tensor operator/(float s, const Tensor& x) { return div(constant(s), x); }

Tensor matmul(const Tensor& a, const Tensor& b) { return apply(OpKind::MatMul, {a, b}); }

Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias) {
  if (input.dim() < 1) throw ShapeError("linear: the input needs a feature axis; got a scalar");
  OpAttrs at;
  at.trans_b = true;
  const Shape& s = input.shape();
  const bool flat = s.rank() == 2;
  const int64_t in = s[-1];
  Tensor x = flat ? input : reshape(input, Shape{in == 0 ? 0 : s.numel() / in, in});
  // A {out} bias rides in the GEMM (its output starts as the bias); other
  // shapes broadcast through add.
  const bool fused = bias.defined() && bias.dim() == 1 && weight.dim() == 2 && bias.size(0) == weight.size(0);
  Tensor y = fused ? apply(OpKind::MatMul, {x, weight, bias}, at) : apply(OpKind::MatMul, {x, weight}, at);
  if (bias.defined() && !fused) y = add(y, bias);
  if (flat) return y;
  Shape out = s;
  out.set(-1, y.size(1));
  return reshape(y, out);
}

Tensor transpose(const Tensor& x, int dim0, int dim1) {
  OpAttrs at;
  at.axis = normalized_dim("transpose", dim0, x.dim());
  at.axis2 = normalized_dim("transpose", dim1, x.dim());
  return apply(OpKind::Transpose, {x}, at);
}

Tensor t(const Tensor& x) {
  if (x.dim() != 2) throw ShapeError("t: needs a matrix {M, N}; got " + x.shape().str() + ". Use transpose(x, dim0, dim1)");
  return transpose(x, 0, 1);
}

Tensor relu(const Tensor& x) { return apply(OpKind::Relu, {x}); }
Tensor sigmoid(const Tensor& x) { return apply(OpKind::Sigmoid, {x}); }
Tensor tanh(const Tensor& x) { return apply(OpKind::Tanh, {x}); }
Tensor gelu(const Tensor& x, std::string_view approximate) {
  if (approximate == "none") return apply(OpKind::Gelu, {x});
  if (approximate == "tanh") return apply(OpKind::GeluTanh, {x});
  throw ValueError("gelu: approximate must be \"none\" (the exact form) or \"tanh\"; got \"" +
                   std::string(approximate) + "\"");
}
Tensor silu(const Tensor& x) { return apply(OpKind::Silu, {x}); }
Tensor relu6(const Tensor& x) { return clamp(x, 0.0f, 6.0f); }
// As nn::apply_activation's hard_sigmoid: one clamp between two scalings.
Tensor hardsigmoid(const Tensor& x) { return clamp(x + 3.0f, 0.0f, 6.0f) * (1.0f / 6.0f); }
Tensor hardswish(const Tensor& x) { return x * hardsigmoid(x); }
Tensor elu(const Tensor& x, float alpha) { return with_param(OpKind::Elu, x, alpha); }
Tensor leaky_relu(const Tensor& x, float negative_slope) { return with_param(OpKind::LeakyRelu, x, negative_slope); }
Tensor softplus(const Tensor& x) { return apply(OpKind::Softplus, {x}); }
Tensor rsqrt(const Tensor& x) { return apply(OpKind::Rsqrt, {x}); }
Tensor exp(const Tensor& x) { return apply(OpKind::Exp, {x}); }
Tensor log(const Tensor& x) { return apply(OpKind::Log, {x}); }
Tensor sqrt(const Tensor& x) { return apply(OpKind::Sqrt, {x}); }
Tensor erf(const Tensor& x) { return apply(OpKind::Erf, {x}); }
Tensor pow(const Tensor& x, float exponent) { return with_param(OpKind::Pow, x, exponent); }

Tensor clamp(const Tensor& x, float min, float max) {
  OpAttrs at;
  at.clamp_min = min;
  at.clamp_max = max;
  return apply(OpKind::Clamp, {x}, at);
}

Tensor dropout(const Tensor& x, float p, bool training, Generator* generator) {
  if (!(p >= 0.0f && p < 1.0f)) throw ValueError("dropout: p must be in [0, 1); got " + std::to_string(p));
  if (!training) return x;
  OpAttrs at;
  at.rate = p;
  return apply(OpKind::Dropout, {x, dropout_draw(generator, at, x.device())}, at);
}

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask, float dropout_p, bool is_causal,
                                    std::optional<float> scale, Generator* generator, bool enable_gqa) {
  const char* op = "scaled_dot_product_attention";
  const Shape& qs = query.shape();
  if (qs.rank() < 2 || key.dim() != qs.rank() || value.dim() != qs.rank())
    throw ShapeError(std::string(op) + ": query, key and value must share a rank of at least 2 ({..., L, E}); got " +
                     qs.str() + ", " + key.shape().str() + ", " + value.shape().str());
  if (!(dropout_p >= 0.0f && dropout_p < 1.0f))
    throw ValueError(std::string(op) + ": dropout_p must be in [0, 1); got " + std::to_string(dropout_p));
  const int r = qs.rank();
  // The leading axes: key's and value's equal; the query's equal to theirs, but with enable_gqa the heads
  // (axis -3), which the key's must divide.
  const Shape &ks = key.shape(), &vs = value.shape();
  bool fit = true;
  for (int i = 0; i + 2 < r; ++i) {
    fit = fit && ks[i] == vs[i];
    const bool heads = enable_gqa && i == r - 3;
    fit = fit && (heads ? ks[i] > 0 && qs[i] % ks[i] == 0 : ks[i] == qs[i]);
  }
  if (enable_gqa && r < 3)
    throw ShapeError(std::string(op) + ": enable_gqa needs a heads axis ({..., heads, L, E}, rank >= 3); got " +
                     qs.str());
  if (!fit)
    throw ShapeError(std::string(op) + ": " +
                     (enable_gqa ? "key and value must have the query's leading axes, except for a number of heads "
                                   "(axis -3) that divides the query's"
                                 : "query, key and value must have the same leading axes (pass enable_gqa = true for "
                                   "fewer key-value heads than query heads)") +
                     "; got " + qs.str() + ", " + ks.str() + ", " + vs.str());
  int64_t n = 1, nkv = 1;
  for (int i = 0; i < r - 2; ++i) n *= qs[i], nkv *= ks[i];
  const int64_t l = qs[r - 2], e = qs[r - 1], s = key.size(-2);
  auto rows = [&](const Tensor& t) { return reshape(t, Shape{&t == &query ? n : nkv, t.size(-2), t.size(-1)}); };
  OpAttrs at;
  at.factor = scale ? *scale : 1.0f / std::sqrt(float(e));
  at.flags = is_causal ? kCausal : 0u;
  std::vector<Tensor> in{rows(query), rows(key), rows(value)};
  if (attn_mask.defined()) {
    const Shape& ms = attn_mask.shape();
    bool lead_ones = true, lead_same = ms.rank() == r;
    for (int i = 0; i + 2 < ms.rank(); ++i) {
      lead_ones = lead_ones && ms[i] == 1;
      lead_same = lead_same && ms[i] == qs[i];
    }
    if ((ms.rank() != 2 && ms.rank() != r) || !(lead_ones || lead_same) || (ms[-2] != l && ms[-2] != 1) ||
        ms[-1] != s)
      throw ShapeError(std::string(op) + ": attn_mask must be {L, S} or of the query's rank with leading axes " +
                       "equal to the query's or 1 and L or 1 rows: L = " + std::to_string(l) + ", S = " +
                       std::to_string(s) + " for query " + qs.str() + "; got " + ms.str());
    Tensor additive = attn_mask;
    if (attn_mask.dtype() == DType::Int32) {  // PyTorch's bool mask: 0 hides
      std::vector<float> v = attn_mask.to_vector();
      for (float& x : v) x = x != 0.0f ? 0.0f : -INFINITY;
      additive = Tensor(tensorgrad::Tensor::from_vector(std::span<const float>(v), ms)).to(query.device());
    } else if (attn_mask.dtype() != DType::Float32) {
      throw TypeError(std::string(op) + ": attn_mask must be int32 (bool) or float32; got " +
                      dtype_name(attn_mask.dtype()));
    }
    in.push_back(reshape(additive, Shape{lead_ones ? 1 : n, ms[-2], s}));
    at.flags |= kAttentionMask;
  }
  if (dropout_p > 0.0f) {
    at.rate = dropout_p;
    in.push_back(dropout_draw(generator, at, query.device()));
  }
  const Tensor y = apply(OpKind::Attention, in, at);
  std::vector<int64_t> out;
  for (int i = 0; i < r - 1; ++i) out.push_back(qs[i]);
  out.push_back(value.size(-1));
  return reshape(narrow(y, -1, 0, value.size(-1)), Shape(out));
}

Tensor rms_norm(const Tensor& input, const Tensor& weight, float eps) {
  OpAttrs at;
  at.eps = eps;
  return weight.defined() ? apply(OpKind::RmsNorm, {input, weight}, at) : apply(OpKind::RmsNorm, {input}, at);
}

Tensor rotary_embedding(const Tensor& x, const Tensor& positions, const RopeOptions& options) {
  OpAttrs at;
  at.rope = options;
  return apply(OpKind::Rope, {x, positions}, at);
}

Tensor softmax(const Tensor& x, int dim) {
  last_dim_only("softmax", x, dim);
  return apply(OpKind::Softmax, {x});
}

Tensor log_softmax(const Tensor& x, int dim) {
  last_dim_only("log_softmax", x, dim);
  return apply(OpKind::LogSoftmax, {x});
}

Tensor sum(const Tensor& x) { return apply(OpKind::Sum, {x}); }
Tensor mean(const Tensor& x) { return apply(OpKind::Mean, {x}); }

namespace {
Tensor reduce_axis(OpKind op, const char* name, const Tensor& x, int dim, bool keepdim) {
  OpAttrs at;
  at.axis = normalized_dim(name, dim, x.dim());
  at.keepdim = keepdim;
  return apply(op, {x}, at);
}
}  // namespace

Tensor sum(const Tensor& x, int dim, bool keepdim) { return reduce_axis(OpKind::SumAxis, "sum", x, dim, keepdim); }
Tensor mean(const Tensor& x, int dim, bool keepdim) { return reduce_axis(OpKind::MeanAxis, "mean", x, dim, keepdim); }
Tensor amax(const Tensor& x, int dim, bool keepdim) { return reduce_axis(OpKind::MaxAxis, "amax", x, dim, keepdim); }

Tensor reshape(const Tensor& x, const Shape& shape) {
  OpAttrs at;
  at.shape = shape;
  return apply(OpKind::Reshape, {x}, at);
}

Tensor flatten(const Tensor& x) {
  const Shape& s = x.shape();
  if (s.rank() < 1) throw ShapeError("flatten: needs a batch axis; got a scalar");
  return reshape(x, Shape{s[0], s[0] == 0 ? 0 : s.numel() / s[0]});
}

Tensor broadcast_to(const Tensor& x, const Shape& shape) {
  OpAttrs at;
  at.shape = shape;
  return apply(OpKind::BroadcastTo, {x}, at);
}

Tensor narrow(const Tensor& x, int dim, int64_t start, int64_t length) {
  OpAttrs at;
  at.axis = normalized_dim("narrow", dim, x.dim());
  at.start = start;
  at.length = length;
  return apply(OpKind::Slice, {x}, at);
}

Tensor cat(std::span<const Tensor> tensors, int dim) {
  if (tensors.empty()) throw ValueError("cat: needs at least one tensor; got none");
  OpAttrs at;
  at.axis = normalized_dim("cat", dim, tensors[0].dim());
  if (tensors.size() == 1) return tensors[0].clone();
  // One Concat takes up to kMaxOpInputs tensors; more are joined in groups,
  // the first input of each group being the result so far.
  constexpr size_t kMax = 6;
  Tensor out = tensors[0];
  size_t next = 1;
  while (next < tensors.size()) {
    Tensor group[kMax];
    size_t k = 0;
    group[k++] = out;
    while (k < kMax && next < tensors.size()) group[k++] = tensors[next++];
    out = apply(OpKind::Concat, {group, k}, at);
  }
  return out;
}

Tensor cat(std::initializer_list<Tensor> tensors, int dim) {
  return cat(std::span<const Tensor>(tensors.begin(), tensors.size()), dim);
}

Tensor index_select(const Tensor& x, const Tensor& index) {
  if (x.dim() < 1) throw ShapeError("index_select: needs a tensor with rows; got a scalar");
  if (index.dim() != 1) throw ShapeError("index_select: the index must be {K}; got " + index.shape().str());
  const Shape& s = x.shape();
  check_ids("index_select", index, s[0], "index");
  const int64_t row = s[0] == 0 ? 0 : s.numel() / s[0];
  Tensor rows = apply(OpKind::Gather, {reshape(x, Shape{s[0], row}), index});
  Shape out = s;
  out.set(0, index.numel());
  return reshape(rows, out);
}

Tensor embedding(const Tensor& ids, const Tensor& weight) {
  if (weight.dim() != 2) throw ShapeError("embedding: the weight must be {num_embeddings, dim}; got " + weight.shape().str());
  check_ids("embedding", ids, weight.size(0), "id");
  return apply(OpKind::Gather, {weight, ids});
}

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride, int64_t padding,
              int64_t dilation, int64_t groups) {
  OpAttrs at;
  at.window = square_window(weight.defined() && weight.dim() == 4 ? weight.size(0) : 1, stride, padding, dilation);
  at.window.groups = groups;
  if (weight.defined() && weight.dim() == 4) at.window.kw = weight.size(1);
  // A {F} bias rides in the kernel (added to each output row in cache);
  // other shapes broadcast through add.
  const bool fused = bias.defined() && bias.dim() == 1 && weight.defined() && weight.dim() == 4 &&
                     bias.size(0) == weight.size(3);
  if (fused) return apply(OpKind::Conv2D, {x, weight, bias}, at);
  Tensor y = apply(OpKind::Conv2D, {x, weight}, at);
  return bias.defined() ? add(y, bias) : y;
}

Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  return pool(OpKind::MaxPool2D, x, kernel, stride, padding);
}

Tensor avg_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  return pool(OpKind::AvgPool2D, x, kernel, stride, padding);
}

Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, bool training,
                  const Tensor& running_mean, const Tensor& running_var, float eps) {
  OpAttrs at;
  at.eps = eps;
  at.own_stats = training;
  if (training) return apply(OpKind::BatchNorm, {x, apply(OpKind::BatchNormStats, {x}), weight, bias}, at);
  if (!running_mean.defined() || !running_var.defined())
    throw ValueError("batch_norm: evaluation (training = false) normalizes with running_mean and running_var; give "
                     "both, or pass training = true to use the batch's statistics");
  const int64_t c = running_mean.numel();
  OpAttrs rows;
  rows.axis = 0;
  Tensor stats = apply(OpKind::Concat, {reshape(running_mean, Shape{1, c}), reshape(running_var, Shape{1, c})}, rows);
  return apply(OpKind::BatchNorm, {x, stats, weight, bias}, at);
}

Tensor mse_loss(const Tensor& input, const Tensor& target) {
  return elementwise_loss(OpKind::MseLoss, "mse_loss", input, target);
}

Tensor l1_loss(const Tensor& input, const Tensor& target) {
  return elementwise_loss(OpKind::MaeLoss, "l1_loss", input, target);
}

Tensor huber_loss(const Tensor& input, const Tensor& target, float delta) {
  return elementwise_loss(OpKind::HuberLoss, "huber_loss", input, target, delta);
}

Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target) {
  return elementwise_loss(OpKind::BinaryCrossEntropy, "binary_cross_entropy_with_logits", logits, target);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target) {
  if (logits.defined() && target.defined() && logits.dim() == 2 && target.dim() == 1 &&
      target.dtype() != DType::Int32)
    throw TypeError("cross_entropy: class ids (a target of shape " + target.shape().str() + ") must be int32; got " +
                    dtype_name(target.dtype()) + ". Convert them, or pass probabilities of the logits' shape " +
                    logits.shape().str());
  // Class ids are checked by the kernels (index_errors.h) on every device.
  return apply(OpKind::SoftmaxCrossEntropy, {logits, target});
}

}  // namespace tensorgrad::ag
