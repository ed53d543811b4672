#include "tensorgrad/ag/nn/attention.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "tensorgrad/ag/functional.h"
#include "tensorgrad/core/error.h"

namespace tensorgrad::ag::nn {

namespace {

std::string str(int64_t v) { return std::to_string(v); }

// A mask as the additive float32 tensor it stands for: an int32 (bool) mask
// gives -inf where nonzero and 0 elsewhere; a float32 mask is itself.
Tensor additive_mask(const char* name, const Tensor& mask, const Shape& want) {
  if (mask.shape() != want)
    throw ShapeError(std::string("MultiheadAttention: expects ") + name + " " + want.str() + "; got " +
                     mask.shape().str());
  if (mask.dtype() == DType::Float32) return mask;
  if (mask.dtype() != DType::Int32)
    throw TypeError(std::string("MultiheadAttention: ") + name +
                    " must be int32 (1 = ignore, torch's bool mask) or float32 (added to the scores)");
  std::vector<float> v = mask.to_vector();
  for (float& x : v) x = x != 0.0f ? -std::numeric_limits<float>::infinity() : 0.0f;
  return tensor(std::span<const float>(v), want);
}

void check_input(const char* name, const Tensor& t, int64_t embed_dim, bool batch_first) {
  if (!t.defined()) throw StateError(std::string("MultiheadAttention: ") + name + " is undefined");
  if (t.dim() != 3 || t.size(-1) != embed_dim)
    throw ShapeError(std::string("MultiheadAttention: expects ") + name + (batch_first ? " {N, " : " {") +
                     (std::string(name) == "query" ? "L" : "S") + (batch_first ? ", " : ", N, ") + str(embed_dim) +
                     "} (embed_dim " + str(embed_dim) + "); got " + t.shape().str());
}

}  // namespace

MultiheadAttention::MultiheadAttention(int64_t embed_dim, int64_t num_heads, bool bias, bool batch_first)
    : embed_dim_(embed_dim), num_heads_(num_heads), bias_(bias), batch_first_(batch_first) {
  if (embed_dim < 1 || num_heads < 1)
    throw ValueError("MultiheadAttention: embed_dim and num_heads must be >= 1; got " + str(embed_dim) + " and " +
                     str(num_heads));
  if (embed_dim % num_heads != 0)
    throw ValueError("MultiheadAttention: embed_dim must be divisible by num_heads; got embed_dim " + str(embed_dim) +
                     " and num_heads " + str(num_heads));
  {
    // xavier_uniform_ of {3E, E}: fan_in E, fan_out 3E.
    const float bound = std::sqrt(6.0f / float(embed_dim + 3 * embed_dim));
    NoGradGuard no_grad;
    in_proj_weight =
        register_parameter("in_proj_weight", (rand(Shape{3 * embed_dim, embed_dim}) * (2.0f * bound) - bound).detach());
  }
  if (bias) in_proj_bias = register_parameter("in_proj_bias", zeros(Shape{3 * embed_dim}));
  out_proj = register_module("out_proj", std::make_shared<Linear>(embed_dim, embed_dim, bias));
  if (bias) {
    NoGradGuard no_grad;
    out_proj->bias.zero_();
  }
}

ModuleConfig MultiheadAttention::config() const {
  ModuleConfig c(type());
  c.set("embed_dim", embed_dim_);
  c.set("num_heads", num_heads_);
  c.set("bias", bias_);
  c.set("batch_first", batch_first_);
  return c;
}

MultiheadAttentionOutput MultiheadAttention::forward(const Tensor& query_in, const Tensor& key_in,
                                                     const Tensor& value_in, const Tensor& key_padding_mask,
                                                     const Tensor& attn_mask, bool need_weights) {
  check_input("query", query_in, embed_dim_, batch_first_);
  check_input("key", key_in, embed_dim_, batch_first_);
  check_input("value", value_in, embed_dim_, batch_first_);
  const Tensor query = batch_first_ ? query_in : transpose(query_in, 0, 1);
  const Tensor key = batch_first_ ? key_in : transpose(key_in, 0, 1);
  const Tensor value = batch_first_ ? value_in : transpose(value_in, 0, 1);
  const int64_t n = query.size(0), l = query.size(1), s = key.size(1), e = embed_dim_, h = num_heads_,
                d = e / h;
  if (key.size(0) != n || value.size(0) != n)
    throw ShapeError("MultiheadAttention: query, key and value must have one batch size; got " +
                     query_in.shape().str() + ", " + key_in.shape().str() + " and " + value_in.shape().str());
  if (value.size(1) != s)
    throw ShapeError("MultiheadAttention: key and value must have one length S; got " + key_in.shape().str() +
                     " and " + value_in.shape().str());
  const Tensor kpm = key_padding_mask.defined() ? additive_mask("key_padding_mask", key_padding_mask, Shape{n, s})
                                                : Tensor();
  const Tensor am = attn_mask.defined() ? additive_mask("attn_mask", attn_mask, Shape{l, s}) : Tensor();

  auto block = [&](const Tensor& t, int64_t i) { return t.defined() ? narrow(t, 0, i * e, e) : Tensor(); };
  // {N, len, E} -> {N * heads, len, d}.
  auto heads = [&](const Tensor& t, int64_t len) {
    return reshape(transpose(reshape(t, Shape{n, len, h, d}), 1, 2), Shape{n * h, len, d});
  };
  const Tensor q = heads(linear(query, block(in_proj_weight, 0), block(in_proj_bias, 0)), l);
  const Tensor k = heads(linear(key, block(in_proj_weight, 1), block(in_proj_bias, 1)), s);
  const Tensor v = heads(linear(value, block(in_proj_weight, 2), block(in_proj_bias, 2)), s);

  Tensor o, weights;  // {N * heads, L, d}; {N, heads, L, S} when asked for
  if (!need_weights) {
    // The fused op, which never holds the {L, S} weights: the masks added into one of {1 or N * heads, 1 or L, S}.
    Tensor mask;
    if (kpm.defined()) {
      mask = reshape(kpm, Shape{n, 1, 1, s}) + zeros(Shape{1, h, 1, 1}, {.device = kpm.device()});
      if (am.defined()) mask = mask + reshape(am, Shape{1, 1, l, s});
      mask = reshape(mask, Shape{n * h, am.defined() ? l : 1, s});
    } else if (am.defined()) {
      mask = reshape(am, Shape{1, l, s});
    }
    o = scaled_dot_product_attention(q, k, v, mask, 0.0f, false, 1.0f / std::sqrt(float(d)));
  } else {
    Tensor scores = reshape(matmul(q / std::sqrt(float(d)), transpose(k, 1, 2)), Shape{n, h, l, s});
    if (kpm.defined()) scores = scores + reshape(kpm, Shape{n, 1, 1, s});
    if (am.defined()) scores = scores + am;
    weights = softmax(scores, -1);
    o = matmul(reshape(weights, Shape{n * h, l, s}), v);
  }
  Tensor out = out_proj->forward(reshape(transpose(reshape(o, Shape{n, h, l, d}), 1, 2), Shape{n, l, e}));
  if (!batch_first_) out = transpose(out, 0, 1);
  return {out, need_weights ? mean(weights, 1) : Tensor()};
}

Tensor MultiheadAttention::forward(const Tensor& x) { return forward(x, x, x, Tensor(), Tensor(), false).attn_output; }

}  // namespace tensorgrad::ag::nn
