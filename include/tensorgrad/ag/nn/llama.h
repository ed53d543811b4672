#pragma once
// The LLaMA family in the eager API, as torch.nn and Hugging Face's
// transformers (modeling_llama) name the modules and parameters, so a
// Hugging Face LLaMA state dict loads by name (load_state_dict).
#include <cstdint>
#include <memory>

#include "tensorgrad/ag/nn/conv.h"
#include "tensorgrad/ag/nn/module.h"
#include "tensorgrad/ag/nn/modules.h"
#include "tensorgrad/nn/llama.h"

namespace tensorgrad::ag::nn {

/// Root-mean-square normalization over the last dimension (torch.nn.RMSNorm
/// with normalized_shape the last dimension; Hugging Face's LlamaRMSNorm):
/// x / sqrt(mean(x^2) + eps) * weight, weight {normalized_shape} (ones)
/// when elementwise_affine. One fused op. ValueError for a size < 1 or an
/// eps not finite and > 0; ShapeError for an input whose last dimension is
/// not normalized_shape.
class RMSNorm : public Module {
 public:
  /// torch.nn.RMSNorm's arguments (normalized_shape: the last dimension's size).
  explicit RMSNorm(int64_t normalized_shape, float eps = 1e-6f, bool elementwise_affine = true);
  const char* type() const override { return "RMSNorm"; }
  ModuleConfig config() const override;
  /// x {..., normalized_shape} -> the same shape.
  Tensor forward(const Tensor& x) override;
  Tensor weight;  ///< {normalized_shape}; undefined without elementwise_affine

 private:
  int64_t d_;
  float eps_;
};

/// Grouped-query causal self-attention with rotary position embedding
/// (Hugging Face's LlamaAttention): q_proj {Hq D, E}, k_proj and v_proj
/// {Hkv D, E}, o_proj {E, Hq D} (Linear, no bias); query head h reads
/// key-value head h / (Hq / Hkv) through the fused attention op without
/// copying. Throws as LlamaConfig::validate.
class LlamaAttention : public Module {
 public:
  /// The attention of `config`'s sizes (its rotary settings included).
  explicit LlamaAttention(const tensorgrad::nn::LlamaConfig& config);
  const char* type() const override { return "LlamaAttention"; }
  /// x {B, T, E} at positions 0..T-1 -> {B, T, E}. ShapeError for another shape.
  Tensor forward(const Tensor& x) override;
  /// The projections (Hugging Face's names and layouts).
  ///@{
  std::shared_ptr<Linear> q_proj, k_proj, v_proj, o_proj;
  ///@}

 private:
  tensorgrad::nn::LlamaConfig config_;
};

/// The gated feed-forward (Hugging Face's LlamaMLP, SwiGLU):
/// down_proj(silu(gate_proj(x)) * up_proj(x)), gate_proj and up_proj {I,
/// E}, down_proj {E, I} (Linear, no bias). ValueError for a size < 1.
class LlamaMLP : public Module {
 public:
  /// Hugging Face's hidden_size (E) and intermediate_size (I).
  LlamaMLP(int64_t hidden_size, int64_t intermediate_size);
  const char* type() const override { return "LlamaMLP"; }
  /// x {..., E} -> {..., E}.
  Tensor forward(const Tensor& x) override;
  /// The three projections.
  ///@{
  std::shared_ptr<Linear> gate_proj, up_proj, down_proj;
  ///@}
};

/// A pre-norm LLaMA block (Hugging Face's LlamaDecoderLayer): x +
/// self_attn(input_layernorm(x)), then h + mlp(post_attention_layernorm(h)).
/// Throws as LlamaConfig::validate.
class LlamaDecoderLayer : public Module {
 public:
  /// A block of `config`'s sizes.
  explicit LlamaDecoderLayer(const tensorgrad::nn::LlamaConfig& config);
  const char* type() const override { return "LlamaDecoderLayer"; }
  /// x {B, T, E} -> {B, T, E}.
  Tensor forward(const Tensor& x) override;
  /// The norms before the attention and before the MLP.
  ///@{
  std::shared_ptr<RMSNorm> input_layernorm, post_attention_layernorm;
  ///@}
  std::shared_ptr<LlamaAttention> self_attn;  ///< the attention sub-block
  std::shared_ptr<LlamaMLP> mlp;              ///< the feed-forward sub-block
};

/// The LLaMA decoder stack (Hugging Face's LlamaModel): embed_tokens
/// (Embedding {V, E}), layers "0", "1", ... (LlamaDecoderLayer), norm.
class LlamaModel : public Module {
 public:
  /// The stack of `config`'s sizes.
  explicit LlamaModel(const tensorgrad::nn::LlamaConfig& config);
  const char* type() const override { return "LlamaModel"; }
  /// ids {B, T} (int32, T <= max_sequence_length) -> hidden states {B, T, E}.
  Tensor forward(const Tensor& ids) override;
  std::shared_ptr<Embedding> embed_tokens;  ///< {V, E}
  std::shared_ptr<Sequential> layers;       ///< the blocks, "0", "1", ...
  std::shared_ptr<RMSNorm> norm;            ///< the final norm

 private:
  int64_t context_;
};

/// A LLaMA causal language model (Hugging Face's LlamaForCausalLM): model
/// (LlamaModel) and lm_head (Linear {V, E}, no bias) whose weight is
/// model.embed_tokens.weight itself when tie_word_embeddings (one
/// parameter; the state dict then holds it once, under
/// model.embed_tokens.weight, as Hugging Face saves tied weights).
/// Parameter names are Hugging Face's (model.layers.0.self_attn.q_proj.weight,
/// ...). The rotary pairing is config.rope_pairing (Halves for Hugging
/// Face's checkpoints). Throws as LlamaConfig::validate.
class LlamaForCausalLM : public Module {
 public:
  /// The model of `config`, initialised as PyTorch's modules are.
  explicit LlamaForCausalLM(const tensorgrad::nn::LlamaConfig& config);
  const char* type() const override { return "LlamaForCausalLM"; }
  /// ids {B, T} int32 -> logits {B, T, V}.
  Tensor forward(const Tensor& ids) override;
  std::shared_ptr<LlamaModel> model;  ///< the decoder stack
  std::shared_ptr<Linear> lm_head;    ///< null when tied: the logits use model->embed_tokens->weight
  /// The settings the model was made with.
  const tensorgrad::nn::LlamaConfig& llama_config() const { return config_; }

 private:
  tensorgrad::nn::LlamaConfig config_;
};

}  // namespace tensorgrad::ag::nn
