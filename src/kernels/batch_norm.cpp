// Batch normalization over every axis but the last (channels), fused: two
// passes over the activation forward (statistics, then the affine map) and
// two backward (the two per-channel sums, then dx), where the same
// normalization composed of element-wise ops took about ten passes forward
// and twenty backward. Sums are accumulated in double per slice of rows.
#include <cmath>
#include <cstring>
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
// in registers (GCC vector extensions), where a loop over c inside the loop
// over rows loads and stores every sum once a row. The same operations in
// the same order, so the same bits; the resnet epoch's batch_norm_stats
// went from 1.10 to 0.79 s (TG_PROFILE), about memory's rate for its one
// stream. batch_norm_param_grad, written the same way, was no faster (its
// two streams already at memory's rate) and keeps the plain loop. The last
// C % 16 channels take the scalar loop.
typedef double v8d __attribute__((vector_size(64)));
typedef float v16f __attribute__((vector_size(64)));

inline v16f load16(const float* p) {
  v16f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline v8d low_half(v16f v) {
  return __builtin_convertvector(__builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7), v8d);
}
inline v8d high_half(v16f v) {
  return __builtin_convertvector(__builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15), v8d);
}

void stats_sums(const float* px, int64_t r0, int64_t r1, int64_t C, double* s) {
  int64_t c0 = 0;
  for (; c0 + 16 <= C; c0 += 16) {
    v8d sum[2], square[2];  // channels c0..c0+7 and c0+8..c0+15
    std::memcpy(sum, s + c0, sizeof sum);
    std::memcpy(square, s + C + c0, sizeof square);
    for (int64_t r = r0; r < r1; ++r) {
      const v16f x = load16(px + r * C + c0);
      const v8d x0 = low_half(x), x1 = high_half(x);
      sum[0] += x0;
      sum[1] += x1;
      square[0] += x0 * x0;
      square[1] += x1 * x1;
    }
    std::memcpy(s + c0, sum, sizeof sum);
    std::memcpy(s + C + c0, square, sizeof square);
  }
  for (int64_t r = r0; r < r1 && c0 < C; ++r) {
    const float* xr = px + r * C;
    for (int64_t c = c0; c < C; ++c) {
      s[c] += xr[c];
      s[C + c] += double(xr[c]) * xr[c];
    }
  }
}

// out[r, c] = x[r, c] a[c] + g[r, c] k[c] + b[c] over all rows, on the pool
// (g may be null: the term is dropped), then max(out, 0) with relu (as the
// Relu kernel computes it).
void affine_rows(const KernelContext& ctx, const float* x, const float* g, const float* a, const float* k,
                 const float* b, float* out, int64_t rows, int64_t C, bool relu = false) {
  parallel_for(ctx.pool, size_t(rows), kRowTile, [&](size_t r0, size_t r1) {
    for (size_t r = r0; r < r1; ++r) {
      const float* xr = x + int64_t(r) * C;
      float* o = out + int64_t(r) * C;
      if (g) {
        const float* gr = g + int64_t(r) * C;
        for (int64_t c = 0; c < C; ++c) o[c] = xr[c] * a[c] + gr[c] * k[c] + b[c];
      } else if (relu) {
        for (int64_t c = 0; c < C; ++c) {
          const float v = xr[c] * a[c] + b[c];
          o[c] = v > 0.0f ? v : 0.0f;
        }
      } else {
        for (int64_t c = 0; c < C; ++c) o[c] = xr[c] * a[c] + b[c];
      }
    }
  });
}

// 1 / sqrt(var + eps) per channel, from stats {2, C} = [mean; var].
void inverse_std(const float* stats, int64_t C, float eps, std::vector<float>& inv) {
  inv.resize(size_t(C));
  for (int64_t c = 0; c < C; ++c) inv[size_t(c)] = 1.0f / std::sqrt(stats[C + c] + eps);
}
}  // namespace

void batch_norm_stats(const TensorRef& x, const TensorRef& stats, const KernelContext& ctx) {
  const int64_t C = channels(x), rows = x.numel() / std::max<int64_t>(C, 1);
  const float* px = x.f();
  thread_local std::vector<double> total;
  total.resize(size_t(2 * C));
  reduce_rows(ctx, rows, 2 * C, total.data(),
              [&](int64_t r0, int64_t r1, double* s) { stats_sums(px, r0, r1, C, s); });
  float* out = stats.f();
  for (int64_t c = 0; c < C; ++c) {
    const double mean = rows ? total[size_t(c)] / double(rows) : 0.0;
    const double var = rows ? total[size_t(C + c)] / double(rows) - mean * mean : 0.0;
    out[c] = float(mean);
    out[C + c] = float(std::max(var, 0.0));  // rounding can leave -1e-17 for a constant channel
  }
}

void batch_norm(const OpAttrs& at, const TensorRef& x, const TensorRef& stats, const TensorRef& gamma,
                const TensorRef& beta, const TensorRef& y, const KernelContext& ctx) {
  const int64_t C = channels(x), rows = x.numel() / std::max<int64_t>(C, 1);
  thread_local std::vector<float> inv, a, b;
  inverse_std(stats.f(), C, at.scale, inv);
  a.resize(size_t(C));
  b.resize(size_t(C));
  for (int64_t c = 0; c < C; ++c) {
    a[size_t(c)] = gamma.f()[c] * inv[size_t(c)];
    b[size_t(c)] = beta.f()[c] - stats.f()[c] * a[size_t(c)];
  }
  affine_rows(ctx, x.f(), nullptr, a.data(), nullptr, b.data(), y.f(), rows, C, (at.flags & kReluOutput) != 0);
}

void batch_norm_param_grad(const OpAttrs& at, const TensorRef& x, const TensorRef& stats, const TensorRef& g,
                           const TensorRef& sums, const KernelContext& ctx) {
  const int64_t C = channels(x), rows = x.numel() / std::max<int64_t>(C, 1);
  const float* px = x.f();
  const float* pg = g.f();
  const float* mean = stats.f();
  thread_local std::vector<double> total;
  total.resize(size_t(2 * C));
  reduce_rows(ctx, rows, 2 * C, total.data(), [&](int64_t r0, int64_t r1, double* s) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = px + r * C;
      const float* gr = pg + r * C;
      for (int64_t c = 0; c < C; ++c) {
        s[c] += double(gr[c]) * (xr[c] - mean[c]);
        s[C + c] += gr[c];
      }
    }
  });
  thread_local std::vector<float> inv;
  inverse_std(stats.f(), C, at.scale, inv);
  float* out = sums.f();
  for (int64_t c = 0; c < C; ++c) {
    out[c] = float(total[size_t(c)] * inv[size_t(c)]);  // sum(g xhat): gamma's gradient
    out[C + c] = float(total[size_t(C + c)]);            // sum(g): beta's gradient
  }
}

// in: x, stats, gamma, g, sums (batch_norm_param_grad's). With the batch's
// own statistics (attrs.length 1) their dependence on x is included:
// dx = gamma inv (g - sum(g)/N - xhat sum(g xhat)/N), as k g + a x + b.
void batch_norm_backward(const OpAttrs& at, std::span<const TensorRef> in, const TensorRef& dx,
                         const KernelContext& ctx) {
  const TensorRef &x = in[0], &stats = in[1], &gamma = in[2], &g = in[3], &sums = in[4];
  const int64_t C = channels(x), rows = x.numel() / std::max<int64_t>(C, 1);
  const bool batch_stats = at.length == 1;
  thread_local std::vector<float> inv, k, a, b;
  inverse_std(stats.f(), C, at.scale, inv);
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
  affine_rows(ctx, x.f(), g.f(), a.data(), k.data(), b.data(), dx.f(), rows, C);
}

}  // namespace tensorgrad::kernels
