#pragma once
// Attention layers: keras.layers.MultiHeadAttention, KerasHub's
// transformer blocks and their position embeddings.
#include <array>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tensorgrad/nn/layers.h"

namespace tensorgrad::nn {

/// Multi-head attention (keras.layers.MultiHeadAttention, Keras 3; Vaswani
/// et al. 2017): the query, key and value projected per head, scaled
/// dot-product attention per head, and the heads projected back. Called on
/// {query, value}, {query, value, key} or {query, value, key,
/// attention_mask} (Keras' call arguments in that order; give value again
/// as key to pass a mask alone): query {Tq, Eq}, value {Tv, Ev}, key {Tv,
/// Ek}, attention_mask {Tq, Tv} (1 attends, 0 does not, as Keras'; every
/// shape without the batch) -> {Tq, output_shape}. Weights in Keras 3's
/// layout: query_kernel {Eq, num_heads, key_dim}, query_bias {num_heads,
/// key_dim}, key_kernel {Ek, num_heads, key_dim}, key_bias, value_kernel
/// {Ev, num_heads, value_dim}, value_bias, output_kernel {num_heads,
/// value_dim, output_shape}, output_bias {output_shape} (the biases with
/// use_bias), kernels Glorot-uniform, biases zero. Attention runs as one
/// fused op that never stores the {Tq, Tv} weights, so Keras'
/// return_attention_scores is not offered. Dropout (training only) drops
/// attention weights, its masks from the layer's seed and the model's
/// training step alone, as Dropout's. `seed` fixes them (Keras' seed
/// argument); without one it is drawn from the global generator when the
/// layer is made.
class MultiHeadAttention : public Layer {
 public:
  /// value_dim 0: key_dim; output_shape 0: the query's last dimension;
  /// use_causal_mask: each query attends to the keys up to its own position
  /// (Keras' call argument, fixed per layer here since a graph is built
  /// once). Throws ValueError for num_heads or key_dim < 1, a negative
  /// value_dim or output_shape, or a dropout outside [0, 1).
  MultiHeadAttention(int64_t num_heads, int64_t key_dim, int64_t value_dim = 0, float dropout = 0.0f,
                     bool use_bias = true, int64_t output_shape = 0, bool use_causal_mask = false,
                     std::optional<uint64_t> seed = std::nullopt);
  const char* type() const override { return "MultiHeadAttention"; }
  /// Takes two to four inputs (see the class); throws ShapeError naming the
  /// input whose shape does not fit.
  Shape build_inputs(std::span<const Shape> input_shapes) override;
  /// Throws ValueError: the layer takes {query, value} at least.
  Shape build(const Shape& input_shape) override;
  /// Self-attention is {x, x}: call the layer on both.
  Value call(Builder& b, Value x, const CallOptions& options) override;
  Value call_inputs(Builder& b, std::span<const Value> inputs, const CallOptions& options) override;
  /// Reads Keras' masks: a query attends where it and the key (the value's
  /// mask, and the key's) are tokens; a padded query's output is 0.
  bool supports_masking() const override { return true; }
  /// The output carries the query's mask.
  bool produces_mask(const std::vector<bool>& input_masked) const override { return input_masked[0]; }
  std::shared_ptr<Layer> clone() const override { return clone_layer(*this); }
  LayerConfig config() const override;

 private:
  int64_t num_heads_, key_dim_, value_dim_, output_shape_;
  float dropout_;
  bool use_bias_, use_causal_mask_;
  uint64_t seed_;
  std::array<int64_t, 3> built_features_{};  // query, value and key features of the first call
  WeightId query_kernel_, query_bias_, key_kernel_, key_bias_, value_kernel_, value_bias_, output_kernel_, output_bias_;
};

/// What KerasHub's TransformerEncoder and TransformerDecoder share: their
/// arguments, the feed-forward sub-block (feedforward_intermediate_dense,
/// the activation, feedforward_output_dense, feedforward_layer_norm), and
/// the residual connection with layer normalization around each sub-block
/// (after it, or before it with normalize_first). Masks: a sequence's mask
/// (Embedding(mask_zero)) is a padding mask, and the output carries the
/// first input's.
class TransformerBlock : public Layer {
 public:
  /// The block on x alone (no encoder sequence, no padding-mask input).
  ///@{
  Shape build(const Shape& input_shape) override { return build_inputs({&input_shape, 1}); }
  Value call(Builder& b, Value x, const CallOptions& options) override { return call_inputs(b, {&x, 1}, options); }
  ///@}
  bool supports_masking() const override { return true; }
  /// The output carries the first input's mask.
  bool produces_mask(const std::vector<bool>& input_masked) const override { return input_masked[0]; }
  LayerConfig config() const override;

 protected:
  /// Throws ValueError for intermediate_dim or num_heads < 1, a dropout
  /// outside [0, 1), an epsilon <= 0, or an unknown activation, naming `type`.
  TransformerBlock(const char* prefix, const char* type, int64_t intermediate_dim, int64_t num_heads, float dropout,
                   const std::string& activation, float layer_norm_epsilon, bool normalize_first,
                   std::optional<uint64_t> seed);
  /// Declares an attention sub-block's weights, `<prefix>.query_kernel` ...
  /// in MultiHeadAttention's layout ({query, key, value, output} x {kernel,
  /// bias}), for queries of width e and keys and values of width kv.
  std::array<WeightId, 8> declare_attention_block(const std::string& prefix, int64_t e, int64_t kv);
  /// Declares a layer normalization's `<prefix>.gamma` (ones) and `.beta` (zeros) of width e.
  std::array<WeightId, 2> declare_norm(const std::string& prefix, int64_t e);
  /// Declares the feed-forward weights and their normalization for width e.
  void declare_feedforward(int64_t e);
  /// x + dropout(f(norm(x))) with normalize_first, else norm(x + dropout(f(x))); the dropout (training
  /// only) from the layer's seed plus `stream`.
  Value sub_block(Builder& b, Value x, const std::function<Value(Value)>& f, const std::array<WeightId, 2>& norm,
                  bool training, uint64_t stream);
  /// The feed-forward sub-block on h {B, T, E}, its residual included.
  Value feedforward_block(Builder& b, Value h, bool training);

  /// The constructor's arguments (the seed drawn when none was given).
  ///@{
  int64_t intermediate_dim_, num_heads_;
  float dropout_, epsilon_;
  Activation activation_;
  bool normalize_first_;
  uint64_t seed_;
  ///@}

 private:
  std::array<WeightId, 2> ff_norm_;
  WeightId ff1_k_, ff1_b_, ff2_k_, ff2_b_;
};

/// A transformer encoder block (keras_hub.layers.TransformerEncoder; Vaswani
/// et al. 2017): self-attention and a feed-forward network of
/// `intermediate_dim` units, each with a residual connection and layer
/// normalization after it, or before it with normalize_first (pre-norm, as
/// GPT-2 and torch.nn.TransformerEncoderLayer(norm_first=True)). Called on x
/// {T, E} or on {x, padding_mask} with padding_mask {T} (1 for tokens, 0 for
/// padding, which no query attends to) -> {T, E}. E must divide by
/// num_heads (key_dim = E / num_heads). Dropout (training only) on the
/// attention weights and after each sub-block, its masks from the layer's
/// seed (drawn from the global generator when the layer is made, unless
/// given) and the model's training step alone, as Dropout's. Weights (Keras 3's layouts,
/// '.'-joined names): self_attention.{query,key,value,output}_{kernel,bias}
/// as MultiHeadAttention's, self_attention_layer_norm.{gamma,beta},
/// feedforward_intermediate_dense.{kernel,bias} {E, I}, {I},
/// feedforward_output_dense.{kernel,bias} {I, E}, {E},
/// feedforward_layer_norm.{gamma,beta}.
class TransformerEncoder : public TransformerBlock {
 public:
  /// activation: a name activation_from_name reads ("relu", "gelu", ...).
  /// Throws ValueError for intermediate_dim or num_heads < 1, a dropout
  /// outside [0, 1), an epsilon <= 0, or an unknown activation.
  TransformerEncoder(int64_t intermediate_dim, int64_t num_heads, float dropout = 0.0f,
                     const std::string& activation = "relu", float layer_norm_epsilon = 1e-5f,
                     bool normalize_first = false, std::optional<uint64_t> seed = std::nullopt);
  const char* type() const override { return "TransformerEncoder"; }
  /// {x} or {x, padding_mask {T}}, x {T, E}; throws ShapeError for another
  /// rank or an E that num_heads does not divide.
  Shape build_inputs(std::span<const Shape> input_shapes) override;
  Value call_inputs(Builder& b, std::span<const Value> inputs, const CallOptions& options) override;
  std::shared_ptr<Layer> clone() const override { return clone_layer(*this); }

 private:
  int64_t built_features_ = 0;         // E of the first call
  std::array<WeightId, 8> attention_;  // {query, key, value, output} x {kernel, bias}
  std::array<WeightId, 2> attention_norm_;
};

/// The self-attention state of one TransformerDecoder for generation one
/// position at a time (KerasHub's self_attention_cache and
/// self_attention_cache_update_index): the keys and values of every position
/// seen so far, kept between runs of a graph.
struct DecoderCache {
  /// {batch x num_heads, capacity, head_dim} persistent tensors of the graph
  /// (Graph::state), zero at first; each call writes its position's keys
  /// and values into them in place.
  ///@{
  Value key, value;
  ///@}
  /// {1, capacity, 1} float32: 1 at the position the call writes, 0 elsewhere.
  Value slot;
  /// {1, 1, capacity} float32, added to the scores: 0 at the positions
  /// written so far and the call's own, -inf at the others.
  Value visible;
  /// Receives the nodes that write key and value: make them outputs of the
  /// graph, so that every run updates the cache.
  std::vector<Value>* updates = nullptr;
};

/// A transformer decoder block (keras_hub.layers.TransformerDecoder; Vaswani
/// et al. 2017): causal self-attention, then, when an encoder sequence is
/// given, cross-attention to it, then a feed-forward network of
/// `intermediate_dim` units; each sub-block with a residual connection and
/// layer normalization after it, or before it with normalize_first (pre-norm,
/// as GPT-2 and torch.nn.TransformerDecoderLayer(norm_first=True)). Called on
/// the inputs, in KerasHub's order, decoder_sequence {T, E}, then optionally
/// encoder_sequence {S, E_enc}, decoder_padding_mask {T}, and (with an
/// encoder sequence) encoder_padding_mask {S} (1 for tokens, 0 for padding,
/// which no query attends to) -> {T, E}. Self-attention is always causal
/// (KerasHub's default use_causal_mask): position t attends to 0..t. E must
/// divide by num_heads (key_dim = E / num_heads). Dropout (training only) on
/// the attention weights and after each sub-block, its masks from the
/// layer's seed and the training step alone, as TransformerEncoder's. Whether the block has
/// cross-attention is fixed by its first call. Weights (Keras 3's layouts,
/// '.'-joined names): self_attention.{query,key,value,output}_{kernel,bias}
/// as MultiHeadAttention's, self_attention_layer_norm.{gamma,beta}; with an
/// encoder, cross_attention.* (key and value kernels {E_enc, heads,
/// key_dim}) and cross_attention_layer_norm.*; then
/// feedforward_intermediate_dense.{kernel,bias} {E, I}, {I},
/// feedforward_output_dense.{kernel,bias} {I, E}, {E},
/// feedforward_layer_norm.{gamma,beta}. A shared block (called again) keeps
/// its weights and takes any sequence lengths, with the same features and
/// the same kind of call (with or without an encoder sequence).
class TransformerDecoder : public TransformerBlock {
 public:
  /// As TransformerEncoder's. Throws ValueError for intermediate_dim or
  /// num_heads < 1, a dropout outside [0, 1), an epsilon <= 0, or an
  /// unknown activation.
  TransformerDecoder(int64_t intermediate_dim, int64_t num_heads, float dropout = 0.0f,
                     const std::string& activation = "relu", float layer_norm_epsilon = 1e-5f,
                     bool normalize_first = false, std::optional<uint64_t> seed = std::nullopt);
  const char* type() const override { return "TransformerDecoder"; }
  /// The inputs as the class lists them; throws ShapeError for a sequence
  /// that is not {steps, features}, features num_heads does not divide, or
  /// a padding mask of another length, ValueError for other counts.
  Shape build_inputs(std::span<const Shape> input_shapes) override;
  Value call_inputs(Builder& b, std::span<const Value> inputs, const CallOptions& options) override;
  /// One decoding step at inference: x {batch, 1, E}, the position after
  /// those in `cache`, whose keys and values it writes there (shapes in
  /// DecoderCache; capacity any length). Gives the block's output for that
  /// position, as the full call gives it at that step. Throws ValueError for
  /// a block with cross-attention, ShapeError for other shapes.
  Value call_with_cache(Builder& b, Value x, const DecoderCache& cache);

  /// The number of heads and each head's key size (the cache's shape).
  ///@{
  int64_t num_heads() const { return num_heads_; }
  int64_t head_dim() const { return head_dim_; }
  ///@}
  std::shared_ptr<Layer> clone() const override { return clone_layer(*this); }

 private:
  Value block(Builder& b, Value x, Value encoder, Value decoder_mask, Value encoder_mask, const CallOptions& options,
              const DecoderCache* cache);
  int64_t head_dim_ = 0;
  bool cross_ = false;
  std::array<int64_t, 2> built_features_{};  // E and the encoder's features (0: none) of the first call
  std::array<WeightId, 8> self_attention_, cross_attention_;  // {query, key, value, output} x {kernel, bias}
  std::array<WeightId, 2> self_norm_, cross_norm_;
};

/// Learned position embeddings (keras_hub.layers.PositionEmbedding): for x
/// {T, E}, the first T rows of its table embeddings {sequence_length, E}
/// (Glorot-uniform), the same for every row of the batch (x's values are
/// not read; add the result to x). Throws ValueError for sequence_length < 1.
class PositionEmbedding : public Layer {
 public:
  /// A table for sequences of up to sequence_length steps.
  explicit PositionEmbedding(int64_t sequence_length);
  const char* type() const override { return "PositionEmbedding"; }
  /// x {T, E} with T <= sequence_length, else ShapeError.
  Shape build(const Shape& input_shape) override;
  Value call(Builder& b, Value x, const CallOptions& options) override;
  std::shared_ptr<Layer> clone() const override { return clone_layer(*this); }
  LayerConfig config() const override;

 private:
  int64_t sequence_length_;
  WeightId embeddings_;
};

/// Token and position embeddings summed (keras_hub.layers.
/// TokenAndPositionEmbedding): token ids {T} (int32, or float32 holding
/// whole numbers) -> {T, embedding_dim}, token_embedding.embeddings
/// {vocabulary_size, embedding_dim} (uniform in [-0.05, 0.05], as Keras'
/// Embedding) looked up plus position_embedding.embeddings {sequence_length,
/// embedding_dim} (Glorot-uniform). Ids are checked as Embedding checks
/// them. Throws ValueError for a size < 1.
class TokenAndPositionEmbedding : public Layer {
 public:
  /// Ids in [0, vocabulary_size), sequences of up to sequence_length steps;
  /// mask_zero as Embedding's (id 0 is padding, marked by a mask).
  TokenAndPositionEmbedding(int64_t vocabulary_size, int64_t sequence_length, int64_t embedding_dim,
                            bool mask_zero = false);
  const char* type() const override { return "TokenAndPositionEmbedding"; }
  /// ids {T} with T <= sequence_length, else ShapeError.
  Shape build(const Shape& input_shape) override;
  Value call(Builder& b, Value x, const CallOptions& options) override;
  /// The embeddings of ids {batch, T} at given positions {batch, T} (int32,
  /// each in [0, sequence_length)) rather than 0..T-1: a decoding step's
  /// (KerasHub's start_index). ShapeError for other shapes or dtypes.
  Value call_at(Builder& b, Value ids, Value positions);
  /// The longest sequence the position table covers.
  int64_t sequence_length() const { return sequence_length_; }
  /// The token ids it reads: [0, vocabulary_size).
  int64_t vocabulary_size() const { return vocabulary_size_; }
  bool takes_token_ids() const override { return true; }
  void validate_input(const Tensor& x) const override;
  /// With mask_zero: the output carries the padding mask.
  bool produces_mask(const std::vector<bool>&) const override { return mask_zero_; }
  /// 0 where the id is 0, 1 elsewhere.
  Value compute_mask(Builder& b, std::span<const Value> inputs, std::span<const Value> masks) override;
  /// Whether id 0 is padding.
  bool mask_zero() const { return mask_zero_; }
  std::shared_ptr<Layer> clone() const override { return clone_layer(*this); }
  LayerConfig config() const override;

 private:
  int64_t vocabulary_size_, sequence_length_, embedding_dim_;
  bool mask_zero_;
  WeightId tokens_, positions_;
};

}  // namespace tensorgrad::nn
