#pragma once
// Keras' weight initialisers, drawn from the global generator (core/random.h).
#include "tensorgrad/core/tensor.h"

namespace tensorgrad::nn {

/// Glorot (Xavier) uniform, Keras' default kernel initialiser:
/// U(-l, l) with l = sqrt(6 / (fan_in + fan_out)).
Tensor glorot_uniform(const Shape& shape, int64_t fan_in, int64_t fan_out);
/// U(low, high) (Keras' RandomUniform; Embedding uses (-0.05, 0.05)).
Tensor random_uniform(const Shape& shape, float low, float high);
/// Keras' Orthogonal initialiser for a {rows, cols} matrix: the Q factor of
/// the QR decomposition of a standard normal matrix, signs fixed by R's
/// diagonal, so rows (rows <= cols) or columns are orthonormal.
Tensor orthogonal(int64_t rows, int64_t cols);

}  // namespace tensorgrad::nn
