#pragma once
// Vectorised exp, log, tanh, erf, sigmoid, SiLU and GELU (both forms) over contiguous floats:
// the fused recurrent gates and the unary ops. On AVX2 builds (the default -march=native on x86-64) they
// run 8 lanes at a time through SLEEF's exp, log, tanh, erf and erfc (Debian's
// libsleef-dev; 1.0 ulp, erfc 1.5); elsewhere, and for the tail, the same
// formulas on std::exp, std::log, std::tanh, std::erf and std::erfc.
#include <cmath>
#include <cstdint>

#if defined(__AVX2__) && defined(TENSORGRAD_HAVE_SLEEF)
#include <immintrin.h>
#include <sleef.h>
#define TENSORGRAD_SLEEF_AVX2 1
#endif

namespace tensorgrad::kernels {

/// Applies a SLEEF 8-lane function `v` over [0, n - n % 8) and the scalar
/// `s` over the rest (and everywhere without AVX2); y may be x.
template <class Vector, class Scalar>
inline void map_n(const float* x, float* y, int64_t n, [[maybe_unused]] Vector v, Scalar s) {
  int64_t i = 0;
#ifdef TENSORGRAD_SLEEF_AVX2
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, v(_mm256_loadu_ps(x + i)));
#endif
  for (; i < n; ++i) y[i] = s(x[i]);
}

#ifdef TENSORGRAD_SLEEF_AVX2
#define TENSORGRAD_LANES(body) [](__m256 v) { return body; }
#else
#define TENSORGRAD_LANES(body) nullptr
#endif

/// y = exp(x), SLEEF's expf8_u10 (at most 1.0 ulp) or std::exp.
inline void exp_n(const float* x, float* y, int64_t n) {
  map_n(x, y, n, TENSORGRAD_LANES(Sleef_expf8_u10avx2(v)), [](float a) { return std::exp(a); });
}

/// y = log(x) (NaN below 0, -inf at 0), SLEEF's logf8_u10 or std::log.
inline void log_n(const float* x, float* y, int64_t n) {
  map_n(x, y, n, TENSORGRAD_LANES(Sleef_logf8_u10avx2(v)), [](float a) { return std::log(a); });
}

/// y = x / (1 + exp(-x)) (SiLU, Elfwing et al. 2018).
inline void silu_n(const float* x, float* y, int64_t n) {
  map_n(x, y, n,
        TENSORGRAD_LANES(_mm256_div_ps(
            v, _mm256_add_ps(_mm256_set1_ps(1.0f), Sleef_expf8_u10avx2(_mm256_xor_ps(v, _mm256_set1_ps(-0.0f)))))),
        [](float a) { return a / (1.0f + std::exp(-a)); });
}

/// y = x (1 + erf(x / sqrt 2)) / 2: GELU's exact form (Hendrycks & Gimpel
/// 2016; Keras' approximate=False), computed as x erfc(-x / sqrt 2) / 2,
/// which does not cancel for negative x as 1 + erf does (100 ulps at x = -3).
/// SLEEF's erfcf8_u15 (1.5 ulp) or std::erfc.
inline void gelu_n(const float* x, float* y, int64_t n) {
  map_n(x, y, n,
        TENSORGRAD_LANES(_mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), v),
                                       Sleef_erfcf8_u15avx2(_mm256_mul_ps(v, _mm256_set1_ps(-float(M_SQRT1_2)))))),
        [](float a) { return 0.5f * a * std::erfc(-a * float(M_SQRT1_2)); });
}

/// y = erf(x), SLEEF's erff8_u10 (at most 1.0 ulp) or std::erf.
inline void erf_n(const float* x, float* y, int64_t n) {
  map_n(x, y, n, TENSORGRAD_LANES(Sleef_erff8_u10avx2(v)), [](float a) { return std::erf(a); });
}

/// GELU's tanh approximation (Hendrycks & Gimpel 2016; PyTorch's
/// approximate="tanh", Keras' approximate=True) rewritten through
/// (1 + tanh u) / 2 = 1 / (1 + exp(-2u)): y = x / (1 + exp(-2u)),
/// u = sqrt(2 / pi) (x + 0.044715 x^3). The sum 1 + tanh u would cancel for
/// negative x (all digits gone by x = -5); the quotient keeps them until
/// exp(-2u) overflows (x < -9.5), past which y is below 4e-38 and comes out
/// as -0. -2u is written as x (a + b x^2), a = -2 sqrt(2 / pi), b = 0.044715 a.
constexpr float kGeluTanhA = -1.5957691216057308f, kGeluTanhB = -0.07135481627260025f;
inline float gelu_tanh_value(float a) { return a / (1.0f + std::exp(a * (kGeluTanhA + kGeluTanhB * a * a))); }
inline void gelu_tanh_n(const float* x, float* y, int64_t n) {
  map_n(x, y, n,
        TENSORGRAD_LANES(_mm256_div_ps(
            v, _mm256_add_ps(_mm256_set1_ps(1.0f),
                             Sleef_expf8_u10avx2(_mm256_mul_ps(
                                 v, _mm256_add_ps(_mm256_set1_ps(kGeluTanhA),
                                                  _mm256_mul_ps(_mm256_set1_ps(kGeluTanhB), _mm256_mul_ps(v, v)))))))),
        gelu_tanh_value);
}

/// y = 1 / (1 + exp(-x)); exp(-x) overflows to infinity for x < -88, which
/// gives exactly 0, as the scalar formula does.
inline void sigmoid_n(const float* x, float* y, int64_t n) {
  map_n(x, y, n,
        TENSORGRAD_LANES(_mm256_div_ps(
            _mm256_set1_ps(1.0f),
            _mm256_add_ps(_mm256_set1_ps(1.0f), Sleef_expf8_u10avx2(_mm256_xor_ps(v, _mm256_set1_ps(-0.0f)))))),
        [](float a) { return 1.0f / (1.0f + std::exp(-a)); });
}

/// y = tanh(x), SLEEF's tanhf8_u10 or std::tanh.
inline void tanh_n(const float* x, float* y, int64_t n) {
  map_n(x, y, n, TENSORGRAD_LANES(Sleef_tanhf8_u10avx2(v)), [](float a) { return std::tanh(a); });
}

#undef TENSORGRAD_LANES

}  // namespace tensorgrad::kernels
