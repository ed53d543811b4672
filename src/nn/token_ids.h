#pragma once
// The check of token ids a layer reads from a model input (Embedding,
// TokenAndPositionEmbedding). Private to the nn layer.
#include <cstdint>
#include <string>

#include "tensorgrad/core/tensor.h"

namespace tensorgrad::nn::detail {

// Throws ValueError for an id that is not a whole number, IndexError for one
// outside [0, vocabulary), naming `layer`, the value and its row and step.
void check_token_ids(const std::string& layer, const Tensor& x, int64_t vocabulary);

}  // namespace tensorgrad::nn::detail
