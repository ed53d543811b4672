// Batch normalization over every axis but the last (channels), fused: two
// passes over the activation forward (statistics, then the affine map) and
// two backward (the two per-channel sums, then dx), where the same
// normalization composed of element-wise ops took about ten passes forward
// and twenty backward. Sums are accumulated in double per slice of rows.
// Folded in: a ReLU after the map (forward in the same pass; backward as a
// mask the two backward kernels recompute from x, so the masked gradient is
// never written) and a residual added before it (a ResNet block's shortcut).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <immintrin.h>
#include <type_traits>
#include <vector>

#include "kernels/kernels.h"

namespace tensorgrad::kernels {

namespace {
// Rows of the {rows, C} view handed to one task.
constexpr size_t kRowTile = 256;
// At most this many row slices, each with its own partial sums.
constexpr size_t kMaxSlices = 16;

int64_t channels(const TensorRef& x) { return x.shape.rank() == 0 ? 1 : x.shape[-1]; }

// Runs f(row_begin, row_end, sums) over row slices, each with its own
// zeroed `width` doubles, then adds the slices into `total` (width doubles).
template <class F>
void reduce_rows(const KernelContext& ctx, int64_t rows, int64_t width, double* total, F&& f) {
  // The slices depend on the rows only, not the threads: the sums are the
  // same at any thread count, and a slice a descheduled worker holds is a
  // small part of the work (ComputePool).
  const size_t slices = std::max<size_t>(1, std::min(kMaxSlices, size_t(rows) / kRowTile));
  thread_local std::vector<double> partial;  // the caller's; slice s owns [s*width, (s+1)*width)
  partial.assign(slices * size_t(width), 0.0);
  double* parts = partial.data();  // named in the task, `partial` would be each worker's own
  parallel_for(ctx.pool, slices, 1, [&](size_t s0, size_t s1) {
    for (size_t s = s0; s < s1; ++s)
      f(int64_t(s) * rows / int64_t(slices), (int64_t(s) + 1) * rows / int64_t(slices), parts + s * size_t(width));
  });
  for (int64_t j = 0; j < width; ++j) total[j] = 0.0;
  for (size_t s = 0; s < slices; ++s)
    for (int64_t j = 0; j < width; ++j) total[j] += partial[s * size_t(width) + size_t(j)];
}

// The statistics' two per-channel sums over rows [r0, r1) of x {rows, C}
// into s[0, 2C) (s[c] += x, s[C + c] += x^2, the square in double), in
// double and in row order: sixteen channels at a time with their 32 sums
// in registers (AVX), where a loop over c inside the loop over rows loads
// and stores every sum once a row. The same operations in the same order,
// so the same bits. With AVX intrinsics: a first form in GCC's 512-bit
// vector extensions (1.10 -> 0.79 s of a resnet epoch on an AVX-512 Xeon)
// compiled to stack round trips on AVX2, compute-bound at 3-6 GB/s on an
// AVX2 EPYC; this form runs at 36 GB/s there in cache. The last C % 16
// channels take the scalar loop.
#if defined(__AVX512F__)
// Eight floats to doubles. The zero-masked form: GCC 12 warns that the plain
// _mm512_cvtps_pd's undefined pass-through "may be used uninitialized".
inline __m512d widen(__m256 v) { return _mm512_maskz_cvtps_pd(__mmask8(0xFF), v); }
#endif

void stats_sums(const float* px, int64_t r0, int64_t r1, int64_t C, double* s) {
  int64_t c0 = 0;
#if defined(__AVX512F__)
  // Eight doubles a register: half the instructions of the AVX form, the
  // same operations per channel in the same order.
  for (; c0 + 16 <= C; c0 += 16) {
    __m512d sum[2], square[2];  // channels c0..c0+7, c0+8..c0+15
    for (int q = 0; q < 2; ++q) {
      sum[q] = _mm512_loadu_pd(s + c0 + 8 * q);
      square[q] = _mm512_loadu_pd(s + C + c0 + 8 * q);
    }
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = px + r * C + c0;
      for (int q = 0; q < 2; ++q) {
        const __m512d x = widen(_mm256_loadu_ps(xr + 8 * q));
        sum[q] = _mm512_add_pd(sum[q], x);
        square[q] = _mm512_add_pd(square[q], _mm512_mul_pd(x, x));
      }
    }
    for (int q = 0; q < 2; ++q) {
      _mm512_storeu_pd(s + c0 + 8 * q, sum[q]);
      _mm512_storeu_pd(s + C + c0 + 8 * q, square[q]);
    }
  }
#elif defined(__AVX__)
  for (; c0 + 16 <= C; c0 += 16) {
    __m256d sum[4], square[4];  // channels c0..c0+3, c0+4..c0+7, ...
    for (int q = 0; q < 4; ++q) {
      sum[q] = _mm256_loadu_pd(s + c0 + 4 * q);
      square[q] = _mm256_loadu_pd(s + C + c0 + 4 * q);
    }
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = px + r * C + c0;
      for (int q = 0; q < 4; ++q) {
        const __m256d x = _mm256_cvtps_pd(_mm_loadu_ps(xr + 4 * q));
        sum[q] = _mm256_add_pd(sum[q], x);
        square[q] = _mm256_add_pd(square[q], _mm256_mul_pd(x, x));
      }
    }
    for (int q = 0; q < 4; ++q) {
      _mm256_storeu_pd(s + c0 + 4 * q, sum[q]);
      _mm256_storeu_pd(s + C + c0 + 4 * q, square[q]);
    }
  }
#endif
  for (int64_t r = r0; r < r1 && c0 < C; ++r) {
    const float* xr = px + r * C;
    for (int64_t c = c0; c < C; ++c) {
      s[c] += xr[c];
      s[C + c] += double(xr[c]) * xr[c];
    }
  }
}

// The affine map y = x a + b of batch norm: a = gamma inv, b = beta - mean
// a per channel, from stats {2, C} = [mean; var]. One function computes the
// coefficients and one the value, so that a backward kernel that recomputes
// the forward's value to mask a folded ReLU gets its bits exactly.
void affine_coefficients(const OpAttrs& at, const float* stats, const float* gamma, const float* beta, int64_t C,
                         std::vector<float>& a, std::vector<float>& b) {
  a.resize(size_t(C));
  b.resize(size_t(C));
  for (int64_t c = 0; c < C; ++c) {
    a[size_t(c)] = gamma[c] * (1.0f / std::sqrt(stats[C + c] + at.eps));
    b[size_t(c)] = beta[c] - stats[c] * a[size_t(c)];
  }
}
inline float affine(float x, float a, float b) { return std::fma(x, a, b); }

// 1 / sqrt(var + eps) per channel, from stats {2, C} = [mean; var].
void inverse_std(const float* stats, int64_t C, float eps, std::vector<float>& inv) {
  inv.resize(size_t(C));
  for (int64_t c = 0; c < C; ++c) inv[size_t(c)] = 1.0f / std::sqrt(stats[C + c] + eps);
}

// The gradient a folded ReLU passes on: g where the forward's value before
// the ReLU (x a + b) is > 0, else 0, as ReluBackward gives it from y.
inline float relu_masked(float x, float g, float a, float b) { return relu_pass(affine(x, a, b), g); }

// Runs body(std::true_type) when `relu`, else body(std::false_type): the
// row loops are compiled once with the mask and once without.
template <class Body>
void with_relu(bool relu, Body&& body) {
  if (relu) body(std::true_type{});
  else body(std::false_type{});
}

// batch_norm_param_grad's two per-channel sums over rows [r0, r1) into
// s[0, 2C): s[c] += g (x - mean) (the difference in float, the product and
// the sum in double), s[C + c] += g, in row order; with kMasked, g is 0
// where the forward's x a + b <= 0 (relu_masked). Sixteen channels at a
// time in registers (AVX-512, or AVX2 and FMA for the mask's fused x a +
// b), as stats_sums; the last C % 16 channels, and CPUs without them, take
// the scalar loop, which computes the same expressions.
template <bool kMasked>
void param_grad_sums(const float* px, const float* pg, const float* mean, const float* a, const float* b, int64_t r0,
                     int64_t r1, int64_t C, double* s) {
  int64_t c0 = 0;
#if defined(__AVX512F__)
  for (; c0 + 16 <= C; c0 += 16) {
    __m512d sum_gx[2], sum_g[2];  // channels c0..c0+7, c0+8..c0+15
    for (int q = 0; q < 2; ++q) {
      sum_gx[q] = _mm512_loadu_pd(s + c0 + 8 * q);
      sum_g[q] = _mm512_loadu_pd(s + C + c0 + 8 * q);
    }
    const __m256 m_lo = _mm256_loadu_ps(mean + c0), m_hi = _mm256_loadu_ps(mean + c0 + 8);
    __m512 va = _mm512_setzero_ps(), vb = _mm512_setzero_ps();
    if constexpr (kMasked) {
      va = _mm512_loadu_ps(a + c0);
      vb = _mm512_loadu_ps(b + c0);
    }
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = px + r * C + c0;
      const float* gr = pg + r * C + c0;
      // g kept where the forward's x a + b > 0; +0.0 elsewhere, as relu_masked's 0.0f
      __mmask16 keep = 0xFFFF;
      if constexpr (kMasked)
        keep = _mm512_cmp_ps_mask(_mm512_fmadd_ps(_mm512_loadu_ps(xr), va, vb), _mm512_setzero_ps(), _CMP_NLE_UQ);
      const __m512d g_lo = _mm512_maskz_cvtps_pd(__mmask8(keep), _mm256_loadu_ps(gr)),
                    g_hi = _mm512_maskz_cvtps_pd(__mmask8(keep >> 8), _mm256_loadu_ps(gr + 8));
      const __m512d d_lo = widen(_mm256_sub_ps(_mm256_loadu_ps(xr), m_lo)),
                    d_hi = widen(_mm256_sub_ps(_mm256_loadu_ps(xr + 8), m_hi));
      sum_gx[0] = _mm512_fmadd_pd(g_lo, d_lo, sum_gx[0]);
      sum_gx[1] = _mm512_fmadd_pd(g_hi, d_hi, sum_gx[1]);
      sum_g[0] = _mm512_add_pd(sum_g[0], g_lo);
      sum_g[1] = _mm512_add_pd(sum_g[1], g_hi);
    }
    for (int q = 0; q < 2; ++q) {
      _mm512_storeu_pd(s + c0 + 8 * q, sum_gx[q]);
      _mm512_storeu_pd(s + C + c0 + 8 * q, sum_g[q]);
    }
  }
#elif defined(__AVX2__) && defined(__FMA__)
  for (; c0 + 16 <= C; c0 += 16) {
    __m256d sum_gx[4], sum_g[4];  // channels c0..c0+3, c0+4..c0+7, ...
    for (int q = 0; q < 4; ++q) {
      sum_gx[q] = _mm256_loadu_pd(s + c0 + 4 * q);
      sum_g[q] = _mm256_loadu_pd(s + C + c0 + 4 * q);
    }
    __m256 m[2], va[2], vb[2];
    for (int h = 0; h < 2; ++h) {
      m[h] = _mm256_loadu_ps(mean + c0 + 8 * h);
      if constexpr (kMasked) {
        va[h] = _mm256_loadu_ps(a + c0 + 8 * h);
        vb[h] = _mm256_loadu_ps(b + c0 + 8 * h);
      }
    }
    for (int64_t r = r0; r < r1; ++r) {
      for (int h = 0; h < 2; ++h) {
        const __m256 x = _mm256_loadu_ps(px + r * C + c0 + 8 * h);
        __m256 g = _mm256_loadu_ps(pg + r * C + c0 + 8 * h);
        // +0.0 where masked, as relu_masked's 0.0f
        if constexpr (kMasked)
          g = _mm256_and_ps(g, _mm256_cmp_ps(_mm256_fmadd_ps(x, va[h], vb[h]), _mm256_setzero_ps(), _CMP_NLE_UQ));
        const __m256 d = _mm256_sub_ps(x, m[h]);
        const __m256d g_lo = _mm256_cvtps_pd(_mm256_castps256_ps128(g)), g_hi = _mm256_cvtps_pd(_mm256_extractf128_ps(g, 1));
        const __m256d d_lo = _mm256_cvtps_pd(_mm256_castps256_ps128(d)), d_hi = _mm256_cvtps_pd(_mm256_extractf128_ps(d, 1));
        sum_gx[2 * h] = _mm256_fmadd_pd(g_lo, d_lo, sum_gx[2 * h]);
        sum_gx[2 * h + 1] = _mm256_fmadd_pd(g_hi, d_hi, sum_gx[2 * h + 1]);
        sum_g[2 * h] = _mm256_add_pd(sum_g[2 * h], g_lo);
        sum_g[2 * h + 1] = _mm256_add_pd(sum_g[2 * h + 1], g_hi);
      }
    }
    for (int q = 0; q < 4; ++q) {
      _mm256_storeu_pd(s + c0 + 4 * q, sum_gx[q]);
      _mm256_storeu_pd(s + C + c0 + 4 * q, sum_g[q]);
    }
  }
#endif
  for (int64_t r = r0; r < r1 && c0 < C; ++r) {
    const float* xr = px + r * C;
    const float* gr = pg + r * C;
    for (int64_t c = c0; c < C; ++c) {
      const float gv = kMasked ? relu_masked(xr[c], gr[c], a[c], b[c]) : gr[c];
      s[c] = std::fma(double(gv), double(xr[c] - mean[c]), s[c]);
      s[C + c] += gv;
    }
  }
}

// stats {2, C} = [mean; biased variance] from the sums over `rows` rows.
void stats_from_sums(const double* total, int64_t rows, int64_t C, float* out) {
  for (int64_t c = 0; c < C; ++c) {
    const double mean = rows ? total[c] / double(rows) : 0.0;
    const double var = rows ? total[C + c] / double(rows) - mean * mean : 0.0;
    out[c] = float(mean);
    out[C + c] = float(std::max(var, 0.0));  // rounding can leave -1e-17 for a constant channel
  }
}
}  // namespace

void image_stats_sums(const float* image, int64_t rows, int64_t C, double* sums) {
  std::fill(sums, sums + 2 * C, 0.0);
  stats_sums(image, 0, rows, C, sums);
}

void stats_from_image_sums(const double* sums, int64_t images, int64_t rows, int64_t C, float* stats) {
  thread_local std::vector<double> total;
  total.assign(size_t(2 * C), 0.0);
  for (int64_t i = 0; i < images; ++i)
    for (int64_t j = 0; j < 2 * C; ++j) total[size_t(j)] += sums[i * 2 * C + j];
  stats_from_sums(total.data(), rows, C, stats);
}

void batch_norm_stats(const TensorRef& x, const TensorRef& stats, const KernelContext& ctx) {
  const int64_t C = channels(x), rows = x.numel() / std::max<int64_t>(C, 1);
  const float* px = x.f();
  if (x.shape.rank() >= 3) {
    // Image by image, as a Conv2D with kBatchStatsOutput sums its output: the same bits.
    const int64_t images = x.shape[0], image_rows = images ? rows / images : 0;
    thread_local std::vector<double> sums;  // the caller's; image i owns [2Ci, 2C(i+1))
    sums.resize(size_t(images * 2 * C));
    double* ps = sums.data();
    parallel_for(ctx.pool, size_t(images), 1, [&](size_t i0, size_t i1) {
      for (size_t i = i0; i < i1; ++i)
        image_stats_sums(px + int64_t(i) * image_rows * C, image_rows, C, ps + int64_t(i) * 2 * C);
    });
    stats_from_image_sums(ps, images, rows, C, stats.f());
    return;
  }
  thread_local std::vector<double> total;
  total.resize(size_t(2 * C));
  reduce_rows(ctx, rows, 2 * C, total.data(),
              [&](int64_t r0, int64_t r1, double* s) { stats_sums(px, r0, r1, C, s); });
  stats_from_sums(total.data(), rows, C, stats.f());
}

// in: x, stats, gamma, beta [, residual]. y = x a + b [+ residual], then
// max(y, 0) with kReluOutput (as the Relu kernel computes it).
void batch_norm(const OpAttrs& at, std::span<const TensorRef> in, const TensorRef& y, const KernelContext& ctx) {
  const TensorRef& x = in[0];
  const int64_t C = channels(x), rows = x.numel() / std::max<int64_t>(C, 1);
  thread_local std::vector<float> a, b;
  affine_coefficients(at, in[1].f(), in[2].f(), in[3].f(), C, a, b);
  const float* px = x.f();
  const float* residual = in.size() > 4 ? in[4].f() : nullptr;
  const bool relu = (at.flags & kReluOutput) != 0;
  float* out = y.f();
  const float *pa = a.data(), *pb = b.data();
  parallel_for(ctx.pool, size_t(rows), kRowTile, [&](size_t r0, size_t r1) {
    for (size_t r = r0; r < r1; ++r) {
      const float* xr = px + int64_t(r) * C;
      float* o = out + int64_t(r) * C;
      if (residual) {
        const float* sr = residual + int64_t(r) * C;
        if (relu) {
          for (int64_t c = 0; c < C; ++c) {
            const float v = affine(xr[c], pa[c], pb[c]) + sr[c];
            o[c] = relu_value(v);
          }
        } else {
          for (int64_t c = 0; c < C; ++c) o[c] = affine(xr[c], pa[c], pb[c]) + sr[c];
        }
      } else if (relu) {
        for (int64_t c = 0; c < C; ++c) {
          const float v = affine(xr[c], pa[c], pb[c]);
          o[c] = relu_value(v);
        }
      } else {
        for (int64_t c = 0; c < C; ++c) o[c] = affine(xr[c], pa[c], pb[c]);
      }
    }
  });
}

// in: x, stats, g [, gamma, beta with kReluOutput: g masked where the
// forward's x a + b <= 0, the folded ReLU's gradient, without a pass of its own].
void batch_norm_param_grad(const OpAttrs& at, std::span<const TensorRef> in, const TensorRef& sums,
                           const KernelContext& ctx) {
  const TensorRef &x = in[0], &stats = in[1], &g = in[2];
  const int64_t C = channels(x), rows = x.numel() / std::max<int64_t>(C, 1);
  const float* px = x.f();
  const float* pg = g.f();
  const float* mean = stats.f();
  const bool relu = (at.flags & kReluOutput) != 0;
  thread_local std::vector<float> a, b;
  if (relu) affine_coefficients(at, stats.f(), in[3].f(), in[4].f(), C, a, b);
  const float *pa = a.data(), *pb = b.data();
  thread_local std::vector<double> total;
  total.resize(size_t(2 * C));
  with_relu(relu, [&](auto masked) {
    reduce_rows(ctx, rows, 2 * C, total.data(), [&](int64_t r0, int64_t r1, double* s) {
      param_grad_sums<decltype(masked)::value>(px, pg, mean, pa, pb, r0, r1, C, s);
    });
  });
  thread_local std::vector<float> inv;
  inverse_std(stats.f(), C, at.eps, inv);
  float* out = sums.f();
  for (int64_t c = 0; c < C; ++c) {
    out[c] = float(total[size_t(c)] * inv[size_t(c)]);  // sum(g xhat): gamma's gradient
    out[C + c] = float(total[size_t(C + c)]);            // sum(g): beta's gradient
  }
}

// in: x, stats, gamma, g, sums (batch_norm_param_grad's) [, beta with
// kReluOutput: g masked as there]. With the batch's own statistics
// (attrs.own_stats) their dependence on x is included:
// dx = gamma inv (g - sum(g)/N - xhat sum(g xhat)/N), as k g + a x + b.
void batch_norm_backward(const OpAttrs& at, std::span<const TensorRef> in, const TensorRef& dx,
                         const KernelContext& ctx) {
  const TensorRef &x = in[0], &stats = in[1], &gamma = in[2], &g = in[3], &sums = in[4];
  const int64_t C = channels(x), rows = x.numel() / std::max<int64_t>(C, 1);
  const bool batch_stats = at.own_stats;
  const bool relu = (at.flags & kReluOutput) != 0;
  thread_local std::vector<float> inv, k, a, b, fa, fb;
  if (relu) affine_coefficients(at, stats.f(), gamma.f(), in[5].f(), C, fa, fb);
  inverse_std(stats.f(), C, at.eps, inv);
  k.resize(size_t(C));
  a.resize(size_t(C));
  b.resize(size_t(C));
  const float inv_n = rows ? 1.0f / float(rows) : 0.0f;
  for (int64_t c = 0; c < C; ++c) {
    const float kc = gamma.f()[c] * inv[size_t(c)];
    k[size_t(c)] = kc;
    if (batch_stats) {
      const float mean_g = sums.f()[C + c] * inv_n, mean_gxhat = sums.f()[c] * inv_n;
      a[size_t(c)] = -kc * inv[size_t(c)] * mean_gxhat;
      b[size_t(c)] = -kc * mean_g - a[size_t(c)] * stats.f()[c];
    } else {
      a[size_t(c)] = 0.0f;
      b[size_t(c)] = 0.0f;
    }
  }
  const float *px = x.f(), *pg = g.f(), *pa = a.data(), *pk = k.data(), *pb = b.data();
  const float *fwd_a = fa.data(), *fwd_b = fb.data();
  float* out = dx.f();
  with_relu(relu, [&](auto masked) {
    parallel_for(ctx.pool, size_t(rows), kRowTile, [&](size_t r0, size_t r1) {
      for (size_t r = r0; r < r1; ++r) {
        const float* xr = px + int64_t(r) * C;
        const float* gr = pg + int64_t(r) * C;
        float* o = out + int64_t(r) * C;
        for (int64_t c = 0; c < C; ++c) {
          const float gv = masked ? relu_masked(xr[c], gr[c], fwd_a[c], fwd_b[c]) : gr[c];
          o[c] = xr[c] * pa[c] + gv * pk[c] + pb[c];
        }
      }
    });
  });
}

}  // namespace tensorgrad::kernels
