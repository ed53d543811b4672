#pragma once
// Vectorised sigmoid and tanh over contiguous floats, for the fused recurrent
// kernels' gates. On AVX2 builds (the default -march=native on x86-64) they
// run 8 lanes at a time through SLEEF's exp and tanh (Debian's libsleef-dev,
// 1.0 ulp); elsewhere, and for the tail, std::exp and std::tanh.
#include <cmath>
#include <cstdint>

#if defined(__AVX2__) && defined(TENSORGRAD_HAVE_SLEEF)
#include <immintrin.h>
#include <sleef.h>
#define TENSORGRAD_SLEEF_AVX2 1
#endif

namespace tensorgrad::kernels {

/// y[i] = 1 / (1 + exp(-x[i])) for i < n; y may be x. exp(-x) overflows to
/// infinity for x < -88, which gives exactly 0, as the scalar formula does.
inline void sigmoid_n(const float* x, float* y, int64_t n) {
  int64_t i = 0;
#ifdef TENSORGRAD_SLEEF_AVX2
  const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
  for (; i + 8 <= n; i += 8) {
    const __m256 e = Sleef_expf8_u10avx2(_mm256_xor_ps(_mm256_loadu_ps(x + i), sign));
    _mm256_storeu_ps(y + i, _mm256_div_ps(one, _mm256_add_ps(one, e)));
  }
#endif
  for (; i < n; ++i) y[i] = 1.0f / (1.0f + std::exp(-x[i]));
}

/// y[i] = tanh(x[i]) for i < n; y may be x.
inline void tanh_n(const float* x, float* y, int64_t n) {
  int64_t i = 0;
#ifdef TENSORGRAD_SLEEF_AVX2
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, Sleef_tanhf8_u10avx2(_mm256_loadu_ps(x + i)));
#endif
  for (; i < n; ++i) y[i] = std::tanh(x[i]);
}

}  // namespace tensorgrad::kernels
