// Root mean square normalization over the last axis (RmsNorm) and its
// gradient (RmsNormBackward), one row of D features at a time: the row's
// sum of squares in kLanes float accumulators (a vector register, as the
// compiler keeps a plain float sum serial), then one pass that writes it.
// Rows are independent, so any thread count gives the same bits.
#include <cmath>

#include "kernels/kernels.h"
#include "kernels/lanes.h"

namespace tensorgrad::kernels {

namespace {

// sum(a b) over n floats, in kLanes partial sums added at the end.
float dot_lanes(const float* a, const float* b, int64_t n) {
  Vec acc{};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) acc += load_vec(a + j) * load_vec(b + j);
  float s = 0.0f;
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  for (; j < n; ++j) s += a[j] * b[j];
  return s;
}

// Runs f(row) over the rows of x {..., D}, in tasks of about 16K floats.
template <class F>
void for_each_row(const KernelCall& c, F f) {
  const int64_t d = c.in[0].shape[-1], rows = c.in[0].numel() / d;
  parallel_for(c.ctx.pool, size_t(rows), size_t(std::max<int64_t>(1, 16384 / d)), [&](size_t rb, size_t re) {
    for (size_t r = rb; r < re; ++r) f(int64_t(r), d);
  });
}

}  // namespace

// y = x r [w], r = 1 / sqrt(sum(x^2) / D + eps)
void rms_norm_forward(const KernelCall& c) {
  const float* x = c.in[0].f();
  const float* w = c.in.size() == 2 ? c.in[1].f() : nullptr;
  float* y = c.out.f();
  const float eps = c.at.eps;
  for_each_row(c, [=](int64_t r, int64_t d) {
    const float* xr = x + r * d;
    float* yr = y + r * d;
    const float inv = 1.0f / std::sqrt(dot_lanes(xr, xr, d) / float(d) + eps);
    if (w)
      for (int64_t j = 0; j < d; ++j) yr[j] = xr[j] * inv * w[j];
    else
      for (int64_t j = 0; j < d; ++j) yr[j] = xr[j] * inv;
  });
}

// in: x, g [, w]. With h = g w: dx = r h - x r^3 sum(h x) / D
void rms_norm_backward(const KernelCall& c) {
  const float *x = c.in[0].f(), *g = c.in[1].f();
  const float* w = c.in.size() == 3 ? c.in[2].f() : nullptr;
  float* dx = c.out.f();
  const float eps = c.at.eps;
  for_each_row(c, [=](int64_t r, int64_t d) {
    const float *xr = x + r * d, *gr = g + r * d;
    float* dr = dx + r * d;
    const float inv = 1.0f / std::sqrt(dot_lanes(xr, xr, d) / float(d) + eps);
    // h = g w is formed in dx's row first (the row is its own scratch)
    const float* h = gr;
    if (w) {
      for (int64_t j = 0; j < d; ++j) dr[j] = gr[j] * w[j];
      h = dr;
    }
    const float k = dot_lanes(h, xr, d) / float(d) * inv * inv * inv;
    for (int64_t j = 0; j < d; ++j) dr[j] = inv * h[j] - k * xr[j];
  });
}

}  // namespace tensorgrad::kernels
