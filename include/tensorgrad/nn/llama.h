#pragma once
// The LLaMA family of language models (Touvron et al. 2023) as layers and
// models: RMS normalization, rotary position embedding, grouped-query
// attention, the gated (SwiGLU) feed-forward, the decoder block, and the
// backbone and causal LM a LlamaConfig builds (KerasHub's Llama*).
#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "tensorgrad/nn/attention.h"
#include "tensorgrad/nn/layers.h"
#include "tensorgrad/nn/model.h"
#include "tensorgrad/ops/builder.h"

namespace tensorgrad::nn {

/// Root-mean-square normalization (keras.layers.RMSNormalization, Keras 3;
/// Zhang & Sennrich 2019): y = x / sqrt(mean(x^2) + epsilon) * scale over
/// the last axis, scale {features} (ones), no shift and no centering. One
/// fused op (gradients to x and scale). Throws ValueError unless
/// epsilon > 0.
class RMSNormalization : public Layer {
 public:
  /// Keras 3's default epsilon, 1e-6 (llama.cpp's files say theirs).
  explicit RMSNormalization(float epsilon = 1e-6f);
  const char* type() const override { return "RMSNormalization"; }
  /// Normalizes each step alone: passes a mask on.
  bool supports_masking() const override { return true; }
  Shape build(const Shape& input_shape) override;
  Value call(Builder& b, Value x, const CallOptions& options) override;
  std::shared_ptr<Layer> clone() const override { return clone_layer(*this); }
  LayerConfig config() const override;
  /// The epsilon added to the mean square.
  float epsilon() const { return epsilon_; }

 private:
  float epsilon_;
  WeightId scale_;
};

/// Rotary position embedding (keras_hub.layers.RotaryEmbedding; Su et al.
/// 2021, RoFormer): x {T, heads, head_dim} (without the batch), each pair of
/// features of each head at step t rotated by the angle t / scaling_factor *
/// max_wavelength^(-2i / dims) of the pair's index i. The pairing is
/// RopePairing::Halves (feature i with i + dims / 2: Hugging Face's and
/// KerasHub's rotate_half) or RopePairing::Adjacent (2i with 2i + 1: ggml's
/// GGML_ROPE_TYPE_NORM, what llama.cpp runs for LLaMA files); dims (0: all
/// head_dim) features rotate, the others pass. Steps count from 0 in a
/// full call. No weights. One fused op; the gradient is the inverse
/// rotation. Throws ValueError for max_wavelength or scaling_factor <= 0
/// or a negative or odd dims; ShapeError (at build) for an input that is
/// not {T, heads, head_dim} or dims > head_dim.
class RotaryEmbedding : public Layer {
 public:
  /// KerasHub's arguments, then the pairing and the rotated features (0: all).
  explicit RotaryEmbedding(float max_wavelength = 10000.0f, float scaling_factor = 1.0f,
                           RopePairing pairing = RopePairing::Halves, int64_t dims = 0);
  /// The same from the op's options (theta is max_wavelength).
  explicit RotaryEmbedding(const RopeOptions& options);
  const char* type() const override { return "RotaryEmbedding"; }
  bool supports_masking() const override { return true; }
  Shape build(const Shape& input_shape) override;
  Value call(Builder& b, Value x, const CallOptions& options) override;
  std::shared_ptr<Layer> clone() const override { return clone_layer(*this); }
  LayerConfig config() const override;
  /// The rotation (theta is max_wavelength).
  const RopeOptions& options() const { return options_; }

 private:
  RopeOptions options_;
};

/// The pairing named "halves" or "adjacent" (RotaryEmbedding's config);
/// ValueError for another name.
RopePairing rope_pairing_from_name(const std::string& name);

/// Grouped-query attention (keras.layers.GroupedQueryAttention, Keras 3;
/// Ainslie et al. 2023), causal, with rotary position embedding applied to
/// the queries and keys when `rotary` is given (KerasHub's LlamaAttention).
/// num_query_heads query heads share num_key_value_heads key/value heads
/// (which must divide them): query head h reads key/value head h /
/// (num_query_heads / num_key_value_heads), as Hugging Face's
/// repeat_interleave, through the fused attention op without copying the
/// shared heads (num_key_value_heads = num_query_heads is multi-head
/// attention, 1 multi-query attention). Called on x {T, E} (self-attention)
/// -> {T, E}. Weights in Keras 3's EinsumDense layouts: query_kernel {E,
/// num_query_heads, head_dim}, key_kernel and value_kernel {E,
/// num_key_value_heads, head_dim}, output_kernel {num_query_heads,
/// head_dim, E} (Glorot-uniform), and with use_bias the biases
/// query_bias/key_bias/value_bias {heads, head_dim} and output_bias {E}
/// (zeros). Dropout (training only) on the attention weights. Throws
/// ValueError for sizes < 1, heads that do not divide, or a dropout outside
/// [0, 1); ShapeError for an input that is not {T, E}.
class GroupedQueryAttention : public Layer {
 public:
  /// Keras 3's arguments (use_bias false: LLaMA's projections have none),
  /// the rotary embedding of the queries and keys (none: no positions),
  /// and the dropout's seed (drawn from the global generator when absent).
  GroupedQueryAttention(int64_t head_dim, int64_t num_query_heads, int64_t num_key_value_heads, float dropout = 0.0f,
                        bool use_bias = false, std::optional<RopeOptions> rotary = std::nullopt,
                        std::optional<uint64_t> seed = std::nullopt);
  const char* type() const override { return "GroupedQueryAttention"; }
  Shape build(const Shape& input_shape) override;
  Value call(Builder& b, Value x, const CallOptions& options) override;
  std::shared_ptr<Layer> clone() const override { return clone_layer(*this); }
  LayerConfig config() const override;

 private:
  int64_t head_dim_, num_query_heads_, num_key_value_heads_;
  float dropout_;
  bool use_bias_;
  std::optional<RopeOptions> rotary_;
  uint64_t seed_;
  int64_t built_features_ = 0;  // E of the first call
  std::array<WeightId, 8> w_;  // {query, key, value, output} x {kernel, bias}
};

/// The gated feed-forward network of LLaMA (SwiGLU, Shazeer 2020):
/// down(activation(gate(x)) * up(x)), x {..., E} -> {..., E}, with
/// gate_kernel and up_kernel {E, intermediate_dim} and down_kernel
/// {intermediate_dim, E} (Keras' Dense layout, Glorot-uniform), no biases;
/// activation "silu" (SwiGLU) or any of Dense's activations ("gelu":
/// GeGLU). Throws ValueError for intermediate_dim < 1 or an unknown
/// activation.
class GatedFeedForward : public Layer {
 public:
  /// The hidden width and the gate's activation (a name Dense takes).
  explicit GatedFeedForward(int64_t intermediate_dim, const std::string& activation = "silu");
  const char* type() const override { return "GatedFeedForward"; }
  bool supports_masking() const override { return true; }
  Shape build(const Shape& input_shape) override;
  Value call(Builder& b, Value x, const CallOptions& options) override;
  std::shared_ptr<Layer> clone() const override { return clone_layer(*this); }
  LayerConfig config() const override;

 private:
  int64_t intermediate_dim_;
  std::string activation_;
  WeightId gate_, up_, down_;
};

/// A token embedding that is also the output projection
/// (keras_hub.layers.ReversibleEmbedding): called on token ids {T} (a model
/// input: int32, or float32 holding whole numbers) it gives their rows of
/// embeddings {input_dim, output_dim} (uniform in [-0.05, 0.05]); called
/// again (the same layer) on a sequence {T, output_dim} it gives logits {T,
/// input_dim}: x embeddings^T when tie_weights (one matrix for both, as
/// GPT-2 and small LLaMA models), else x reverse_embeddings, a second
/// weight {output_dim, input_dim}. Ids are checked as Embedding checks
/// them. Throws ValueError for a size < 1.
class ReversibleEmbedding : public Layer {
 public:
  /// input_dim tokens of output_dim features; tie_weights: the reverse
  /// call uses the embeddings themselves.
  ReversibleEmbedding(int64_t input_dim, int64_t output_dim, bool tie_weights = true);
  const char* type() const override { return "ReversibleEmbedding"; }
  /// Ids {T} embed, a sequence {T, output_dim} projects back (each call
  /// its own shape; the weights are declared once).
  Shape build_inputs(std::span<const Shape> input_shapes) override;
  Shape build(const Shape& input_shape) override;
  Value call(Builder& b, Value x, const CallOptions& options) override;
  bool takes_token_ids() const override { return true; }
  bool reads_token_ids(const Shape& input_shape) const override { return input_shape.rank() == 1; }
  void validate_input(const Tensor& x) const override;
  std::shared_ptr<Layer> clone() const override { return clone_layer(*this); }
  LayerConfig config() const override;
  /// The vocabulary size V.
  int64_t input_dim() const { return input_dim_; }
  /// The embedding width E.
  int64_t output_dim() const { return output_dim_; }
  /// Whether the reverse call reuses the embeddings.
  bool tie_weights() const { return tie_weights_; }

 private:
  int64_t input_dim_, output_dim_;
  bool tie_weights_;
  WeightId embeddings_, reverse_;
};

/// The settings of a LLaMA-family model (KerasHub's LlamaBackbone
/// arguments; llama.cpp's llama.* GGUF keys in brackets).
struct LlamaConfig {
  int64_t vocabulary_size = 32000;    ///< token ids [0, V) [tokenizer.ggml.tokens' length]
  int64_t hidden_dim = 4096;          ///< E, the width [llama.embedding_length]
  int64_t num_layers = 32;            ///< decoder blocks [llama.block_count]
  int64_t num_query_heads = 32;       ///< [llama.attention.head_count]
  int64_t num_key_value_heads = 32;   ///< divides num_query_heads [llama.attention.head_count_kv]
  int64_t intermediate_dim = 11008;   ///< the feed-forward width [llama.feed_forward_length]
  int64_t max_sequence_length = 2048; ///< context: the model's input length T [llama.context_length]
  float rope_max_wavelength = 10000.0f;  ///< rotary theta [llama.rope.freq_base]
  float rope_scaling_factor = 1.0f;      ///< positions divided by it [llama.rope.scale_linear]
  /// Rotary pairing: Halves as Hugging Face's checkpoints, Adjacent as
  /// llama.cpp's files (save_llama converts between them).
  RopePairing rope_pairing = RopePairing::Halves;
  float layer_norm_epsilon = 1e-5f;   ///< RMS norm epsilon [llama.attention.layer_norm_rms_epsilon]
  bool tie_word_embeddings = false;   ///< output projection = token embeddings^T [no output.weight]
  float dropout = 0.0f;               ///< on attention weights and after each sub-block, training only
  /// head_dim = hidden_dim / num_query_heads.
  int64_t head_dim() const { return num_query_heads > 0 ? hidden_dim / num_query_heads : 0; }
  /// Throws ValueError naming the first setting out of range: sizes < 1,
  /// num_query_heads not dividing hidden_dim, num_key_value_heads not
  /// dividing num_query_heads, an odd head_dim, rope settings <= 0, an
  /// epsilon <= 0, a dropout outside [0, 1).
  void validate() const;
};

/// A LLaMA decoder block (KerasHub's LlamaTransformerDecoder), pre-norm:
/// x + attention(rms_norm(x)), then h + feed_forward(rms_norm(h)), with
/// GroupedQueryAttention (causal, rotary, no biases) and GatedFeedForward
/// (SwiGLU). Called on x {T, E} -> {T, E}. Weights ('.'-joined as
/// TransformerDecoder's): self_attention_layernorm.scale {E},
/// self_attention.{query,key,value,output}_kernel (GroupedQueryAttention's
/// layouts), feedforward_layernorm.scale {E},
/// feedforward_{gate,up,down}_kernel (GatedFeedForward's). The config's
/// vocabulary, layer count and tie are not read. Throws as
/// LlamaConfig::validate.
class LlamaDecoder : public Layer {
 public:
  /// A block of `config`'s sizes; seed: the dropout's stream (drawn from
  /// the global generator when absent).
  explicit LlamaDecoder(const LlamaConfig& config, std::optional<uint64_t> seed = std::nullopt);
  const char* type() const override { return "LlamaDecoder"; }
  Shape build(const Shape& input_shape) override;
  Value call(Builder& b, Value x, const CallOptions& options) override;
  /// One generation step: x {1, steps, E} at `positions` int32 {steps}
  /// (consecutive, from the cache's first free slot), its keys and values
  /// written into `cache` (DecoderCache's tensors, {num_key_value_heads,
  /// capacity, head_dim}). Gives what the full call gives at those steps.
  Value call_with_cache(Builder& b, Value x, Value positions, const DecoderCache& cache);
  std::shared_ptr<Layer> clone() const override { return clone_layer(*this); }
  LayerConfig config() const override;
  /// The settings the block was made with.
  const LlamaConfig& llama_config() const { return config_; }
  /// The key/value heads and their size: the cache's shape.
  ///@{
  int64_t num_key_value_heads() const { return config_.num_key_value_heads; }
  int64_t head_dim() const { return config_.head_dim(); }
  ///@}

 private:
  Value block(Builder& b, Value x, Value positions, const CallOptions& options, const DecoderCache* cache);
  LlamaConfig config_;
  uint64_t seed_;
  std::array<WeightId, 4> attention_;  // query, key, value, output kernels
  std::array<WeightId, 3> feed_forward_;  // gate, up, down kernels
  WeightId attention_norm_, feed_forward_norm_;
};

/// The LLaMA backbone (KerasHub's LlamaBackbone): token ids {T} (T =
/// max_sequence_length) -> hidden states {T, hidden_dim}: a
/// ReversibleEmbedding "token_embedding", num_layers LlamaDecoder blocks
/// "transformer_layer_0", ..., and a final RMSNormalization
/// "sequence_output_layernorm". Throws as LlamaConfig::validate.
class LlamaBackbone : public Model {
 public:
  /// The backbone of `config` (its tie_word_embeddings is not read).
  explicit LlamaBackbone(const LlamaConfig& config, const std::string& name = "llama_backbone");
  /// The settings the model was made with.
  const LlamaConfig& llama_config() const { return config_; }

 private:
  LlamaConfig config_;
};

/// A LLaMA causal language model (KerasHub's LlamaCausalLM): the backbone
/// followed by the output projection, token ids {T} -> logits {T,
/// vocabulary_size}: the token embedding called again in reverse
/// (tie_word_embeddings) or its own reverse_embeddings. Train it with
/// compile/fit on next-token targets (sparse_categorical_crossentropy
/// from logits), generate with CausalLM, save it for llama.cpp with
/// io::save_llama. Throws as LlamaConfig::validate.
class LlamaCausalLM : public Model {
 public:
  /// The model of `config`, its weights initialised as its layers'
  /// (Glorot-uniform kernels, uniform embeddings, unit scales).
  explicit LlamaCausalLM(const LlamaConfig& config, const std::string& name = "llama_causal_lm");
  /// The settings the model was made with.
  const LlamaConfig& llama_config() const { return config_; }

 private:
  LlamaConfig config_;
};

}  // namespace tensorgrad::nn
