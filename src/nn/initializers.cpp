// Keras' weight initializers (tensorgrad/nn/layers.h, nn::initializers),
// drawn from the global generator (core/random.h).
#include "nn/loading.h"

#include <cmath>
#include <random>
#include <vector>

#include "tensorgrad/core/error.h"
#include "tensorgrad/core/random.h"
#include "tensorgrad/nn/layers.h"

// LAPACK from OpenBLAS (column-major Fortran interface).
extern "C" {
void sgeqrf_(const int* m, const int* n, float* a, const int* lda, float* tau, float* work, const int* lwork, int* info);
void sorgqr_(const int* m, const int* n, const int* k, float* a, const int* lda, const float* tau, float* work,
             const int* lwork, int* info);
}

namespace tensorgrad::nn {

namespace detail {
namespace {
thread_local int loading_depth = 0;
}
LoadingScope::LoadingScope() { ++loading_depth; }
LoadingScope::~LoadingScope() { --loading_depth; }
bool LoadingScope::active() { return loading_depth > 0; }
}  // namespace detail

namespace {
// U(low, high), Keras' RandomUniform.
Tensor draw_uniform(const Shape& shape, float low, float high) {
  if (detail::LoadingScope::active()) return Tensor::zeros(shape);
  // Drawn on the host, then one copy into the new weight (a device upload later).
  std::vector<float> values(size_t(shape.numel()));
  std::uniform_real_distribution<float> dist(low, high);
  for (float& v : values) v = dist(global_generator());
  return Tensor::from_vector(values, shape);
}

// Glorot uniform: U(-l, l), l = sqrt(6 / (fan_in + fan_out)).
Tensor draw_glorot_uniform(const Shape& shape, int64_t fan_in, int64_t fan_out) {
  const float limit = std::sqrt(6.0f / float(fan_in + fan_out));
  return draw_uniform(shape, -limit, limit);
}

// Keras' Orthogonal for a {rows, cols} matrix: the Q factor of the QR
// decomposition of a standard normal matrix, signs fixed by R's diagonal, so
// rows (rows <= cols) or columns are orthonormal.
Tensor draw_orthogonal(int64_t rows, int64_t cols) {
  if (detail::LoadingScope::active()) return Tensor::zeros(Shape{rows, cols});
  // QR of a tall {m, n} normal matrix, m = max, n = min; Q is {m, n} with
  // orthonormal columns. For rows < cols the result is Q transposed.
  const int m = int(std::max(rows, cols)), n = int(std::min(rows, cols));
  std::vector<float> a(size_t(m) * size_t(n));  // column-major {m, n}
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : a) v = normal(global_generator());
  std::vector<float> tau(static_cast<size_t>(n));
  int info = 0, lwork = -1;
  float query = 0;
  sgeqrf_(&m, &n, a.data(), &m, tau.data(), &query, &lwork, &info);
  lwork = std::max(1, int(query));
  std::vector<float> work(static_cast<size_t>(lwork));
  sgeqrf_(&m, &n, a.data(), &m, tau.data(), work.data(), &lwork, &info);
  if (info != 0) throw Error("orthogonal initialiser: QR decomposition failed (LAPACK info " + std::to_string(info) + ")");
  std::vector<float> diag_sign(static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) diag_sign[size_t(j)] = a[size_t(j) * size_t(m) + size_t(j)] < 0.0f ? -1.0f : 1.0f;
  lwork = -1;
  sorgqr_(&m, &n, &n, a.data(), &m, tau.data(), &query, &lwork, &info);
  lwork = std::max(1, int(query));
  work.assign(size_t(lwork), 0.0f);
  sorgqr_(&m, &n, &n, a.data(), &m, tau.data(), work.data(), &lwork, &info);
  if (info != 0) throw Error("orthogonal initialiser: forming Q failed (LAPACK info " + std::to_string(info) + ")");
  std::vector<float> out(size_t(rows) * size_t(cols));  // on the host, then one copy into the weight
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      const float q = a[size_t(j) * size_t(m) + size_t(i)] * diag_sign[size_t(j)];  // Q[i, j]
      if (rows >= cols) out[size_t(i) * size_t(cols) + size_t(j)] = q;               // {m, n} as is
      else out[size_t(j) * size_t(cols) + size_t(i)] = q;                            // transposed to {n, m}
    }
  return Tensor::from_vector(out, Shape{rows, cols});
}
}  // namespace

namespace initializers {

Initializer glorot_uniform() {
  return [](const Shape& shape) {
    if (shape.rank() < 2)
      throw ShapeError("glorot_uniform: needs a kernel of rank 2 or more ({in, out}, or {..., in, out} for a "
                       "convolution) to take its fans from; got " + shape.str() + ". Use zeros() for a bias");
    int64_t receptive = 1;  // Keras' compute_fans: the leading axes are the receptive field
    for (int d = 0; d < shape.rank() - 2; ++d) receptive *= shape[d];
    return draw_glorot_uniform(shape, shape[-2] * receptive, shape[-1] * receptive);
  };
}

Initializer orthogonal() {
  return [](const Shape& shape) {
    if (shape.rank() != 2) throw ShapeError("orthogonal: needs a matrix {rows, cols}; got " + shape.str());
    return draw_orthogonal(shape[0], shape[1]);
  };
}

Initializer random_uniform(float low, float high) {
  return [low, high](const Shape& shape) { return draw_uniform(shape, low, high); };
}

Initializer constant(float value) {
  return [value](const Shape& shape) { return Tensor::full(shape, value); };
}

}  // namespace initializers

}  // namespace tensorgrad::nn
