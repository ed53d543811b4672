#pragma once
// The check of token ids a layer reads from a model input (Embedding,
// TokenAndPositionEmbedding), and the padding mask of mask_zero. Private to
// the nn layer.
#include <cstdint>
#include <string>

#include "tensorgrad/core/tensor.h"
#include "tensorgrad/ops/builder.h"

namespace tensorgrad::nn::detail {

// Throws ValueError for an id that is not a whole number, IndexError for one
// outside [0, vocabulary), naming `layer`, the value and its row and step.
void check_token_ids(const std::string& layer, const Tensor& x, int64_t vocabulary);

// Keras' mask_zero: ids int32 {B, T} -> float32 {B, T}, 0 where the id is 0
// (padding), 1 elsewhere; looked up in a constant {vocabulary, 1} table.
Value padding_mask(Builder& b, Value ids, int64_t vocabulary);

}  // namespace tensorgrad::nn::detail
