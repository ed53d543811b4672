#pragma once
// Attention layers (keras.layers.MultiHeadAttention).
#include <optional>

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
/// attention weights, from the layer's seed and the model's random stream.
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
  std::shared_ptr<Layer> clone() const override { return clone_layer(*this); }
  LayerConfig config() const override;

 private:
  int64_t num_heads_, key_dim_, value_dim_, output_shape_;
  float dropout_;
  bool use_bias_, use_causal_mask_;
  uint64_t seed_;
  WeightId query_kernel_, query_bias_, key_kernel_, key_bias_, value_kernel_, value_bias_, output_kernel_, output_bias_;
};

}  // namespace tensorgrad::nn
