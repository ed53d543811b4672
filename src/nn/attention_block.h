#pragma once
// Multi-head attention on bound weights: keras.layers.MultiHeadAttention's
// computation, shared by the layers that hold its weights among their own
// (the transformer blocks). Private to the nn layer.
#include <vector>

#include "tensorgrad/ops/builder.h"

namespace tensorgrad::nn::detail {

// Keras 3's layout: kernels {E, heads, dim}, biases {heads, dim} (invalid:
// none), the output kernel {heads, value_dim, out} and its bias {out}.
struct AttentionWeights {
  Value query_kernel, query_bias, key_kernel, key_bias, value_kernel, value_bias, output_kernel, output_bias;
};

// One call: query {B, Tq, Eq}, value {B, Tv, Ev}, key {B, Tv, Ek}, keep
// {B, Tq, Tv} (1 attends; invalid: all), the causal mask, the weights'
// dropout (0 at inference) and its stream.
struct AttentionCall {
  Value query, value, key, keep;
  bool causal = false;
  float dropout = 0.0f;
  uint64_t seed = 0;
  // Step-by-step decoding: the keys and values {B h, capacity, dim} the
  // projected ones are written into at `slot` {1, capacity, 1} (appending
  // Assign nodes to `updates`), attended through the additive `visible`
  // {1, Tq, capacity}.
  Value key_cache, value_cache, slot, visible;
  std::vector<Value>* updates = nullptr;
};

// {B, Tq, out}.
Value multi_head_attention(Builder& b, const AttentionWeights& w, int64_t heads, const AttentionCall& c);

}  // namespace tensorgrad::nn::detail
