// The LLaMA modules of the eager API on the fused RMS norm, rotary and
// attention ops (Hugging Face's modeling_llama, in tensorgrad's ops).
#include "tensorgrad/ag/nn/llama.h"

#include <cmath>
#include <string>

#include "tensorgrad/ag/functional.h"
#include "tensorgrad/core/error.h"

namespace tensorgrad::ag::nn {

namespace {

const tensorgrad::nn::LlamaConfig& validated(const tensorgrad::nn::LlamaConfig& c) {
  c.validate();
  return c;
}

RopeOptions rope_of(const tensorgrad::nn::LlamaConfig& c) {
  return RopeOptions{.dims = 0, .theta = c.rope_max_wavelength, .scaling_factor = c.rope_scaling_factor,
                     .pairing = c.rope_pairing};
}

// Positions 0..t-1, int32 {t}.
Tensor positions(int64_t t) {
  tensorgrad::Tensor p = tensorgrad::Tensor::zeros(Shape{t}, DType::Int32);
  for (int64_t i = 0; i < t; ++i) p.data<int32_t>()[i] = int32_t(i);
  return Tensor(p);
}

}  // namespace

RMSNorm::RMSNorm(int64_t normalized_shape, float eps, bool elementwise_affine) : d_(normalized_shape), eps_(eps) {
  if (normalized_shape < 1)
    throw ValueError("RMSNorm: normalized_shape must be >= 1; got " + std::to_string(normalized_shape));
  if (!(eps > 0.0f) || !std::isfinite(eps))
    throw ValueError("RMSNorm: eps must be finite and > 0; got " + std::to_string(eps));
  if (elementwise_affine) weight = register_parameter("weight", ones(Shape{d_}));
}

ModuleConfig RMSNorm::config() const {
  ModuleConfig c(type());
  c.set("normalized_shape", d_);
  c.set("eps", double(eps_));
  c.set("elementwise_affine", weight.defined());
  return c;
}

Tensor RMSNorm::forward(const Tensor& x) {
  if (x.dim() < 1 || x.size(-1) != d_)
    throw ShapeError("RMSNorm: expects {..., " + std::to_string(d_) + "}; got " + x.shape().str());
  return rms_norm(x, weight, eps_);
}

LlamaAttention::LlamaAttention(const tensorgrad::nn::LlamaConfig& config) : config_(validated(config)) {
  const int64_t e = config_.hidden_dim, d = config_.head_dim();
  q_proj = register_module("q_proj", std::make_shared<Linear>(e, config_.num_query_heads * d, false));
  k_proj = register_module("k_proj", std::make_shared<Linear>(e, config_.num_key_value_heads * d, false));
  v_proj = register_module("v_proj", std::make_shared<Linear>(e, config_.num_key_value_heads * d, false));
  o_proj = register_module("o_proj", std::make_shared<Linear>(config_.num_query_heads * d, e, false));
}

Tensor LlamaAttention::forward(const Tensor& x) {
  const int64_t e = config_.hidden_dim, d = config_.head_dim(), hq = config_.num_query_heads,
                hkv = config_.num_key_value_heads;
  if (x.dim() != 3 || x.size(-1) != e)
    throw ShapeError("LlamaAttention: expects {batch, steps, " + std::to_string(e) + "}; got " + x.shape().str());
  const int64_t b = x.size(0), t = x.size(1);
  const Tensor pos = positions(t);
  const RopeOptions rope = rope_of(config_);
  // {B, T, heads, D}, rotated, as {B, heads, T, D}.
  auto heads = [&](Linear& proj, int64_t h, bool rotate) {
    Tensor y = reshape(proj.forward(x), Shape{b, t, h, d});
    if (rotate) y = rotary_embedding(y, pos, rope);
    return transpose(y, 1, 2);
  };
  const Tensor q = heads(*q_proj, hq, true), k = heads(*k_proj, hkv, true), v = heads(*v_proj, hkv, false);
  const Tensor a = scaled_dot_product_attention(q, k, v, Tensor(), 0.0f, /*is_causal=*/true, std::nullopt, nullptr,
                                                /*enable_gqa=*/true);
  return o_proj->forward(reshape(transpose(a, 1, 2), Shape{b, t, hq * d}));
}

LlamaMLP::LlamaMLP(int64_t hidden_size, int64_t intermediate_size) {
  gate_proj = register_module("gate_proj", std::make_shared<Linear>(hidden_size, intermediate_size, false));
  up_proj = register_module("up_proj", std::make_shared<Linear>(hidden_size, intermediate_size, false));
  down_proj = register_module("down_proj", std::make_shared<Linear>(intermediate_size, hidden_size, false));
}

Tensor LlamaMLP::forward(const Tensor& x) {
  return down_proj->forward(silu(gate_proj->forward(x)) * up_proj->forward(x));
}

LlamaDecoderLayer::LlamaDecoderLayer(const tensorgrad::nn::LlamaConfig& config) {
  const tensorgrad::nn::LlamaConfig& c = validated(config);
  self_attn = register_module("self_attn", std::make_shared<LlamaAttention>(c));
  mlp = register_module("mlp", std::make_shared<LlamaMLP>(c.hidden_dim, c.intermediate_dim));
  input_layernorm = register_module("input_layernorm", std::make_shared<RMSNorm>(c.hidden_dim, c.layer_norm_epsilon));
  post_attention_layernorm =
      register_module("post_attention_layernorm", std::make_shared<RMSNorm>(c.hidden_dim, c.layer_norm_epsilon));
}

Tensor LlamaDecoderLayer::forward(const Tensor& x) {
  const Tensor h = x + self_attn->forward(input_layernorm->forward(x));
  return h + mlp->forward(post_attention_layernorm->forward(h));
}

LlamaModel::LlamaModel(const tensorgrad::nn::LlamaConfig& config) : context_(config.max_sequence_length) {
  const tensorgrad::nn::LlamaConfig& c = validated(config);
  embed_tokens = register_module("embed_tokens", std::make_shared<Embedding>(c.vocabulary_size, c.hidden_dim));
  layers = register_module("layers", std::make_shared<Sequential>());
  for (int64_t i = 0; i < c.num_layers; ++i) layers->push_back(std::make_shared<LlamaDecoderLayer>(c));
  norm = register_module("norm", std::make_shared<RMSNorm>(c.hidden_dim, c.layer_norm_epsilon));
}

Tensor LlamaModel::forward(const Tensor& ids) {
  if (ids.dim() != 2 || ids.size(1) > context_)
    throw ShapeError("LlamaModel: expects token ids {batch, steps} with steps <= max_sequence_length (" +
                     std::to_string(context_) + "); got " + ids.shape().str());
  return norm->forward(layers->forward(embed_tokens->forward(ids)));
}

LlamaForCausalLM::LlamaForCausalLM(const tensorgrad::nn::LlamaConfig& config) : config_(validated(config)) {
  model = register_module("model", std::make_shared<LlamaModel>(config_));
  if (!config_.tie_word_embeddings)
    lm_head = register_module("lm_head", std::make_shared<Linear>(config_.hidden_dim, config_.vocabulary_size, false));
}

Tensor LlamaForCausalLM::forward(const Tensor& ids) {
  const Tensor h = model->forward(ids);
  return lm_head ? lm_head->forward(h) : linear(h, model->embed_tokens->weight);
}

}  // namespace tensorgrad::ag::nn
