#pragma once
// Vectorised exp, log, tanh, erf, sigmoid, SiLU and GELU (both forms) over contiguous floats:
// the fused recurrent gates and the unary ops. On AVX2 builds (the default -march=native on x86-64) they
// run 8 lanes at a time through SLEEF's exp, log, tanh, erf and erfc (Debian's
// libsleef-dev; 1.0 ulp, erfc 1.5); elsewhere, and for the tail, the same
// formulas on std::exp, std::log, std::tanh, std::erf and std::erfc.
#include <cmath>
#include <cstdint>
#include <cstring>

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

/// erfc(z) for z >= 0 by the Vulkan backend's shader's approximation: t
/// e^(-z^2 + P(t)) with t = 1 / (1 + z / 2) (the form of Numerical Recipes'
/// erfcc), P a Chebyshev series in s = (2t - t(10.1) - 1) / (1 - t(10.1))
/// over z in [0, 10.1], here in monomial form evaluated by Horner's rule
/// (half the dependent steps of Clenshaw's recurrence; both within 4.1e-7
/// relative of erfc in float32); e^(-z^2) as e^(-zh^2) e^(-(z - zh)(z + zh))
/// with zh z's leading 12 bits, so that zh^2 is exact (one exp of -z^2 + P
/// would be off by ulp(z^2), 1e-6 by z = 4); 0 past 10.1, where erfc is
/// below float32's smallest subnormal. SLEEF's erfcf8_u15 took three times
/// as long, a tenth of a transformer's training step.
constexpr float kErfcTa = 1.652892530e-1f;                                                          // t at z = 10.1
constexpr float kErfcS1 = 2.0f / (1.0f - kErfcTa), kErfcS0 = -(kErfcTa + 1.0f) / (1.0f - kErfcTa);  // s = S1 t + S0
constexpr float kErfcP[12] = {-5.595379924e-01f, 5.711974088e-01f, 1.594378064e-02f,  -2.961067286e-02f,
                              -1.083452928e-03f, 3.746635349e-03f, -2.720988364e-04f, -5.553441280e-04f,
                              1.303228310e-04f,  6.921987017e-05f, -2.304504596e-05f, -4.810835434e-06f};
inline float erfc_nonnegative(float z) {
  if (std::isnan(z)) return z;
  if (z > 10.1f) return 0.0f;
  const float t = 1.0f / (1.0f + 0.5f * z), s = std::fma(t, kErfcS1, kErfcS0);
  float p = kErfcP[11];
  for (int k = 10; k >= 0; --k) p = std::fma(p, s, kErfcP[k]);
  uint32_t bits;
  std::memcpy(&bits, &z, 4);
  bits &= 0xfffff000u;
  float zh;
  std::memcpy(&zh, &bits, 4);
  const float d = (z - zh) * (z + zh);
  return t * std::exp(-zh * zh) * std::exp(p - d);
}
/// erfc(z) for any z: 2 - erfc(-z) below 0.
inline float erfc_fast(float z) { return z < 0.0f ? 2.0f - erfc_nonnegative(-z) : erfc_nonnegative(z); }
#ifdef TENSORGRAD_SLEEF_AVX2
inline __m256 erfc_fast8(__m256 z) {
  const __m256 one = _mm256_set1_ps(1.0f), a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), z);
  const __m256 t = _mm256_div_ps(one, _mm256_fmadd_ps(_mm256_set1_ps(0.5f), a, one));
  const __m256 s = _mm256_fmadd_ps(t, _mm256_set1_ps(kErfcS1), _mm256_set1_ps(kErfcS0));
  __m256 p = _mm256_set1_ps(kErfcP[11]);
  for (int k = 10; k >= 0; --k) p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(kErfcP[k]));
  const __m256 zh = _mm256_and_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(int(0xfffff000u))));
  const __m256 d = _mm256_mul_ps(_mm256_sub_ps(a, zh), _mm256_add_ps(a, zh));
  __m256 e =
      _mm256_mul_ps(_mm256_mul_ps(t, Sleef_expf8_u10avx2(_mm256_mul_ps(_mm256_xor_ps(zh, _mm256_set1_ps(-0.0f)), zh))),
                    Sleef_expf8_u10avx2(_mm256_sub_ps(p, d)));
  e = _mm256_blendv_ps(e, _mm256_setzero_ps(), _mm256_cmp_ps(a, _mm256_set1_ps(10.1f), _CMP_GT_OQ));
  e = _mm256_blendv_ps(e, a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));  // NaN stays NaN
  return _mm256_blendv_ps(e, _mm256_sub_ps(_mm256_set1_ps(2.0f), e), _mm256_cmp_ps(z, _mm256_setzero_ps(), _CMP_LT_OQ));
}
#endif

/// y = x (1 + erf(x / sqrt 2)) / 2: GELU's exact form (Hendrycks & Gimpel
/// 2016; Keras' approximate=False), computed as x erfc(-x / sqrt 2) / 2,
/// which does not cancel for negative x as 1 + erf does (100 ulps at x = -3),
/// with erfc_fast.
inline void gelu_n(const float* x, float* y, int64_t n) {
  map_n(x, y, n,
        TENSORGRAD_LANES(_mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), v),
                                       erfc_fast8(_mm256_mul_ps(v, _mm256_set1_ps(-float(M_SQRT1_2)))))),
        [](float a) { return 0.5f * a * erfc_fast(-a * float(M_SQRT1_2)); });
}

/// dx = g (Phi(x) + x phi(x)), GELU's derivative, Phi(x) = erfc(-x / sqrt 2)
/// / 2 (erfc_fast) and phi the normal density.
inline void gelu_backward_n(const float* x, const float* g, float* dx, int64_t n) {
  constexpr float kInvSqrt2Pi = 0.3989422804014327f;
  auto one = [](float v, float gv) {
    return gv * (0.5f * erfc_fast(-v * float(M_SQRT1_2)) + v * std::exp(-0.5f * v * v) * kInvSqrt2Pi);
  };
  int64_t i = 0;
#ifdef TENSORGRAD_SLEEF_AVX2
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 cdf =
        _mm256_mul_ps(_mm256_set1_ps(0.5f), erfc_fast8(_mm256_mul_ps(v, _mm256_set1_ps(-float(M_SQRT1_2)))));
    const __m256 pdf = _mm256_mul_ps(_mm256_set1_ps(kInvSqrt2Pi),
                                     Sleef_expf8_u10avx2(_mm256_mul_ps(_mm256_set1_ps(-0.5f), _mm256_mul_ps(v, v))));
    _mm256_storeu_ps(dx + i, _mm256_mul_ps(_mm256_loadu_ps(g + i), _mm256_fmadd_ps(v, pdf, cdf)));
  }
#endif
  for (; i < n; ++i) dx[i] = one(x[i], g[i]);
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
