#pragma once
// Vectorised exp, log, tanh, erf, sigmoid, SiLU and GELU (both forms) over contiguous floats:
// the fused recurrent gates, the unary ops and the attention kernel's softmax. Where SLEEF is built
// (Debian's libsleef-dev; 1.0 ulp, erfc 1.5) they run a register at a time through its exp, log, tanh
// and erf: 16 lanes on AVX-512 builds (the default -march=native on such machines), 8 on AVX2 builds;
// the last partial register is loaded and stored under a mask, so every element of an array goes
// through the same code whatever the split between threads. Elsewhere the same formulas run on
// std::exp, std::log, std::tanh and std::erf.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(TENSORGRAD_HAVE_SLEEF) && (defined(__AVX2__) || defined(__AVX512F__))
#include <immintrin.h>
#include <sleef.h>
#define TENSORGRAD_SLEEF_LANES 1
#endif

namespace tensorgrad::kernels {

#ifdef TENSORGRAD_SLEEF_LANES
// One register of floats (a GCC vector type: +, -, *, / and comparisons work lane-wise) and the
// few operations the formulas below need beyond those.
namespace simd {
#if defined(__AVX512F__)
using F = __m512;
constexpr int kWidth = 16;
inline F load(const float* p) { return _mm512_loadu_ps(p); }
inline void store(float* p, F v) { _mm512_storeu_ps(p, v); }
inline F load_first(const float* p, int n) { return _mm512_maskz_loadu_ps(__mmask16((1u << n) - 1u), p); }
inline void store_first(float* p, F v, int n) { _mm512_mask_storeu_ps(p, __mmask16((1u << n) - 1u), v); }
inline F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
inline F exp(F v) { return Sleef_expf16_u10avx512f(v); }
inline F log(F v) { return Sleef_logf16_u10avx512f(v); }
inline F tanh(F v) { return Sleef_tanhf16_u10avx512f(v); }
inline F erf(F v) { return Sleef_erff16_u10avx512f(v); }
#else
using F = __m256;
constexpr int kWidth = 8;
inline __m256i first_mask(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline F load(const float* p) { return _mm256_loadu_ps(p); }
inline void store(float* p, F v) { _mm256_storeu_ps(p, v); }
inline F load_first(const float* p, int n) { return _mm256_maskload_ps(p, first_mask(n)); }
inline void store_first(float* p, F v, int n) { _mm256_maskstore_ps(p, first_mask(n), v); }
inline F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
inline F exp(F v) { return Sleef_expf8_u10avx2(v); }
inline F log(F v) { return Sleef_logf8_u10avx2(v); }
inline F tanh(F v) { return Sleef_tanhf8_u10avx2(v); }
inline F erf(F v) { return Sleef_erff8_u10avx2(v); }
#endif
// Lane-wise integers, as comparisons of F give them (-1 true, 0 false).
typedef int32_t I __attribute__((vector_size(sizeof(F))));
inline F splat(float a) { return F{} + a; }
inline F bits_and(F a, uint32_t m) { return F(I(a) & I(splat(std::bit_cast<float>(m)))); }
inline F abs(F a) { return bits_and(a, 0x7fffffffu); }
// c where the lane's test holds, else b (GCC's vector conditional).
inline F select(I test, F c, F b) { return test ? c : b; }
}  // namespace simd
#endif

/// Applies `v` (a register at a time) over [0, n) where SLEEF is built, else the scalar `s`; y may be x.
template <class Vector, class Scalar>
inline void map_n(const float* x, float* y, int64_t n, [[maybe_unused]] Vector v, [[maybe_unused]] Scalar s) {
#ifdef TENSORGRAD_SLEEF_LANES
  int64_t i = 0;
  for (; i + simd::kWidth <= n; i += simd::kWidth) simd::store(y + i, v(simd::load(x + i)));
  if (i < n) simd::store_first(y + i, v(simd::load_first(x + i, int(n - i))), int(n - i));
#else
  for (int64_t i = 0; i < n; ++i) y[i] = s(x[i]);
#endif
}

#ifdef TENSORGRAD_SLEEF_LANES
#define TENSORGRAD_LANES(body) [](simd::F v) { return body; }
#else
#define TENSORGRAD_LANES(body) nullptr
#endif

/// y = exp(x), SLEEF's expf_u10 (at most 1.0 ulp) or std::exp.
inline void exp_n(const float* x, float* y, int64_t n) {
  map_n(x, y, n, TENSORGRAD_LANES(simd::exp(v)), [](float a) { return std::exp(a); });
}

/// y = log(x) (NaN below 0, -inf at 0), SLEEF's logf_u10 or std::log.
inline void log_n(const float* x, float* y, int64_t n) {
  map_n(x, y, n, TENSORGRAD_LANES(simd::log(v)), [](float a) { return std::log(a); });
}

/// y = x / (1 + exp(-x)) (SiLU, Elfwing et al. 2018).
inline void silu_n(const float* x, float* y, int64_t n) {
  map_n(x, y, n, TENSORGRAD_LANES(v / (1.0f + simd::exp(-v))), [](float a) { return a / (1.0f + std::exp(-a)); });
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
  const float zh = std::bit_cast<float>(std::bit_cast<uint32_t>(z) & 0xfffff000u);
  const float d = (z - zh) * (z + zh);
  return t * std::exp(-zh * zh) * std::exp(p - d);
}
/// erfc(z) for any z: 2 - erfc(-z) below 0.
inline float erfc_fast(float z) { return z < 0.0f ? 2.0f - erfc_nonnegative(-z) : erfc_nonnegative(z); }
#ifdef TENSORGRAD_SLEEF_LANES
/// erfc_fast a register at a time.
inline simd::F erfc_fast(simd::F z) {
  using simd::F;
  const F a = simd::abs(z);
  const F t = 1.0f / simd::fma(simd::splat(0.5f), a, simd::splat(1.0f));
  const F s = simd::fma(t, simd::splat(kErfcS1), simd::splat(kErfcS0));
  F p = simd::splat(kErfcP[11]);
  for (int k = 10; k >= 0; --k) p = simd::fma(p, s, simd::splat(kErfcP[k]));
  const F zh = simd::bits_and(a, 0xfffff000u);
  const F d = (a - zh) * (a + zh);
  F e = t * simd::exp(-zh * zh) * simd::exp(p - d);
  e = simd::select(a > 10.1f, simd::splat(0.0f), e);
  e = simd::select(a != a, a, e);  // NaN stays NaN
  return simd::select(z < 0.0f, 2.0f - e, e);
}
#endif

/// y = x (1 + erf(x / sqrt 2)) / 2: GELU's exact form (Hendrycks & Gimpel
/// 2016; Keras' approximate=False), computed as x erfc(-x / sqrt 2) / 2,
/// which does not cancel for negative x as 1 + erf does (100 ulps at x = -3),
/// with erfc_fast.
inline void gelu_n(const float* x, float* y, int64_t n) {
  map_n(x, y, n, TENSORGRAD_LANES(0.5f * v * erfc_fast(v * -float(M_SQRT1_2))),
        [](float a) { return 0.5f * a * erfc_fast(-a * float(M_SQRT1_2)); });
}

/// dx = g (Phi(x) + x phi(x)), GELU's derivative, Phi(x) = erfc(-x / sqrt 2)
/// / 2 (erfc_fast) and phi the normal density.
inline void gelu_backward_n(const float* x, const float* g, float* dx, int64_t n) {
  constexpr float kInvSqrt2Pi = 0.3989422804014327f;
#ifdef TENSORGRAD_SLEEF_LANES
  auto one = [](simd::F v, simd::F gv) {
    const simd::F cdf = 0.5f * erfc_fast(v * -float(M_SQRT1_2)), pdf = kInvSqrt2Pi * simd::exp(-0.5f * (v * v));
    return gv * simd::fma(v, pdf, cdf);
  };
  int64_t i = 0;
  for (; i + simd::kWidth <= n; i += simd::kWidth) simd::store(dx + i, one(simd::load(x + i), simd::load(g + i)));
  if (i < n) {
    const int rest = int(n - i);
    simd::store_first(dx + i, one(simd::load_first(x + i, rest), simd::load_first(g + i, rest)), rest);
  }
#else
  for (int64_t i = 0; i < n; ++i)
    dx[i] = g[i] * (0.5f * erfc_fast(-x[i] * float(M_SQRT1_2)) + x[i] * std::exp(-0.5f * x[i] * x[i]) * kInvSqrt2Pi);
#endif
}

/// y = erf(x), SLEEF's erff_u10 (at most 1.0 ulp) or std::erf.
inline void erf_n(const float* x, float* y, int64_t n) {
  map_n(x, y, n, TENSORGRAD_LANES(simd::erf(v)), [](float a) { return std::erf(a); });
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
  map_n(x, y, n, TENSORGRAD_LANES(v / (1.0f + simd::exp(v * (kGeluTanhA + kGeluTanhB * (v * v))))),
        gelu_tanh_value);
}

/// y = 1 / (1 + exp(-x)); exp(-x) overflows to infinity for x < -88, which
/// gives exactly 0, as the scalar formula does.
inline void sigmoid_n(const float* x, float* y, int64_t n) {
  map_n(x, y, n, TENSORGRAD_LANES(1.0f / (1.0f + simd::exp(-v))), [](float a) { return 1.0f / (1.0f + std::exp(-a)); });
}

/// y = tanh(x), SLEEF's tanhf_u10 or std::tanh.
inline void tanh_n(const float* x, float* y, int64_t n) {
  map_n(x, y, n, TENSORGRAD_LANES(simd::tanh(v)), [](float a) { return std::tanh(a); });
}

#undef TENSORGRAD_LANES

}  // namespace tensorgrad::kernels
