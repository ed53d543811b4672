// Grouped convolutions over channels-last images (Window2D::groups > 1):
// x{B, H, W, C}, kernel {kh, kw, C/G, F}, y{B, Ho, Wo, F}, filters
// [g F/G, (g+1) F/G) reading channels [g C/G, (g+1) C/G).
//
// A depthwise convolution (G == C) does kh*kw multiply-adds per output and
// reads each input pixel about kh*kw / (sh*sw) times from cache: it is
// bound by memory, not arithmetic. Its forward pass and input gradient sum
// each pixel's channels a register at a time (contiguous in x, the
// kernel's tap and y; lanes.h's vectors of the machine's width, -march of
// the kernels' build) over the taps in the register and store each result
// once. There is no hand-written ISA path: every machine runs this code,
// and the kernels' tests run it built for AVX2 as well as natively. One
// row is one task, so an image of one batch still spreads over the
// threads. Its filter gradient sums each tap's products over an output row
// in registers and adds them once per row. The other groupings (ResNeXt's,
// depth multipliers > 1) pass over a row per tap, the group's filters
// innermost.
//
// Every sum is taken in an order fixed by the shapes (taps in order, the
// filter gradient over fixed slices of the batch added in order), so the
// results are the same bits at any thread count. Float32 under both
// policies (mixed_bfloat16 included).
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/lanes.h"

namespace tensorgrad::kernels {

namespace {

struct Dims {
  int64_t B, H, W, C, Ho, Wo, F, G, Cg, Fg;
  bool depthwise() const { return Cg == 1 && Fg == 1; }
  // The depthwise loops' case: depth multiplier 1, at most kMaxTaps taps.
  bool depthwise_fast(const Window2D& w) const;
};

Dims dims_of(const Window2D& win, const Shape& x, const Shape& y) {
  const int64_t G = win.groups;
  return {x[0], x[1], x[2], x[3], y[1], y[2], y[3], G, x[3] / G, y[3] / G};
}

// The first output column ox with ox * sw - pad + tap >= 0, and one past the
// last with ox * sw - pad + tap < W (clamped to [0, Wo]).
void valid_columns(int64_t tap_offset, int64_t stride, int64_t W, int64_t Wo, int64_t* lo, int64_t* hi) {
  // ix = ox * stride + tap_offset
  int64_t first = tap_offset >= 0 ? 0 : (-tap_offset + stride - 1) / stride;
  int64_t last = W - 1 - tap_offset < 0 ? -1 : (W - 1 - tap_offset) / stride;  // the last valid ox
  *lo = std::min(first, Wo);
  *hi = std::clamp<int64_t>(last + 1, *lo, Wo);
}

// y[ox, :] += the products of one tap over the valid columns.
void forward_tap(const Dims& d, const float* xr, const float* kt, int64_t lo, int64_t hi, int64_t sw,
                 int64_t offset, float* row) {
  for (int64_t ox = lo; ox < hi; ++ox) {
    const float* __restrict xp = xr + (ox * sw + offset) * d.C;
    float* __restrict yp = row + ox * d.F;
    for (int64_t g = 0; g < d.G; ++g)
      for (int64_t c = 0; c < d.Cg; ++c) {
        const float xv = xp[g * d.Cg + c];
        const float* __restrict k = kt + c * d.F + g * d.Fg;
        float* __restrict yg = yp + g * d.Fg;
        for (int64_t f = 0; f < d.Fg; ++f) yg[f] += xv * k[f];
      }
  }
}

// The most taps the depthwise loops take (7x7); larger windows take the
// other groupings' loops.
constexpr int64_t kMaxTaps = 49;

// Sums over the taps listed (offsets into the image and the kernel, in
// (ky, kx) order) for every channel of one pixel: a register of channels at
// a time (lanes.h: 16 with AVX-512, 8 with AVX2), summed over the taps in
// the register and stored once.
void depthwise_pixel(const float* image, const float* k, const int64_t* image_at, const int64_t* kernel_at,
                     int64_t taps, int64_t C, float* out) {
  int64_t c0 = 0;
  for (; c0 + kLanes <= C; c0 += kLanes) {
    Vec acc{};
    for (int64_t t = 0; t < taps; ++t) acc += load_vec(image + image_at[t] + c0) * load_vec(k + kernel_at[t] + c0);
    store_vec(out + c0, acc);
  }
  for (int64_t c = c0; c < C; ++c) {  // the channels past the last whole register
    float acc = 0.0f;
    for (int64_t t = 0; t < taps; ++t) acc += image[image_at[t] + c] * k[kernel_at[t] + c];
    out[c] = acc;
  }
}

// One output row of a depthwise convolution with depth multiplier 1 (a
// pass over the row per tap would load and store every output kh*kw times).
void depthwise_row(const Window2D& win, const Dims& d, const float* x_image, const float* k, int64_t oy,
                   float* row) {
  int64_t image_at[kMaxTaps], kernel_at[kMaxTaps];
  const int64_t iy0 = oy * win.sh - win.pad_top;
  // The columns whose every tap lies inside the row share one list of taps
  // (the rows inside the image, each with all kw columns), offset by the
  // column: built once per row instead of once per pixel.
  int64_t inner_taps = 0;
  for (int64_t ky = 0; ky < win.kh; ++ky) {
    const int64_t iy = iy0 + ky * win.dh;
    if (iy < 0 || iy >= d.H) continue;
    for (int64_t kx = 0; kx < win.kw; ++kx) {
      image_at[inner_taps] = (iy * d.W + kx * win.dw) * d.C;
      kernel_at[inner_taps++] = (ky * win.kw + kx) * d.C;
    }
  }
  int64_t inner_lo, inner_hi;  // ox * sw - pl >= 0 and ox * sw - pl + dw (kw - 1) < W
  valid_columns(-win.pad_left, win.sw, d.W - win.dw * (win.kw - 1), d.Wo, &inner_lo, &inner_hi);
  for (int64_t ox = inner_lo; ox < inner_hi; ++ox)
    depthwise_pixel(x_image + (ox * win.sw - win.pad_left) * d.C, k, image_at, kernel_at, inner_taps, d.C,
                    row + ox * d.C);
  for (int64_t ox = 0; ox < d.Wo; ++ox) {
    if (ox == inner_lo && inner_hi > inner_lo) ox = inner_hi;
    if (ox >= d.Wo) break;
    const int64_t ix0 = ox * win.sw - win.pad_left;
    int64_t taps = 0;
    for (int64_t ky = 0; ky < win.kh; ++ky) {
      const int64_t iy = iy0 + ky * win.dh;
      if (iy < 0 || iy >= d.H) continue;
      for (int64_t kx = 0; kx < win.kw; ++kx) {
        const int64_t ix = ix0 + kx * win.dw;
        if (ix < 0 || ix >= d.W) continue;
        image_at[taps] = (iy * d.W + ix) * d.C;
        kernel_at[taps++] = (ky * win.kw + kx) * d.C;
      }
    }
    depthwise_pixel(x_image, k, image_at, kernel_at, taps, d.C, row + ox * d.C);
  }
}

// One input row of a depthwise convolution's input gradient (depth
// multiplier 1), gathered: each input pixel's channels summed over the taps
// that reach it, in (ky, kx) order.
void depthwise_input_row(const Window2D& win, const Dims& d, const float* g_image, const float* k, int64_t iy,
                         float* row) {
  int64_t image_at[kMaxTaps], kernel_at[kMaxTaps];
  for (int64_t ix = 0; ix < d.W; ++ix) {
    int64_t taps = 0;
    for (int64_t ky = 0; ky < win.kh; ++ky) {
      const int64_t t = iy + win.pad_top - ky * win.dh;
      if (t < 0 || t % win.sh != 0 || t / win.sh >= d.Ho) continue;
      for (int64_t kx = 0; kx < win.kw; ++kx) {
        const int64_t u = ix + win.pad_left - kx * win.dw;
        if (u < 0 || u % win.sw != 0 || u / win.sw >= d.Wo) continue;
        image_at[taps] = ((t / win.sh) * d.Wo + u / win.sw) * d.C;
        kernel_at[taps++] = (ky * win.kw + kx) * d.C;
      }
    }
    depthwise_pixel(g_image, k, image_at, kernel_at, taps, d.C, row + ix * d.C);
  }
}

// One tap's share of a depthwise filter gradient (depth multiplier 1) over
// one output row: a[c] += the sum over ox in [lo, hi) of x[ox sw][c] g[ox][c],
// a register of channels summed over the row in the register, then added
// once (x is the tap's input row, shifted by the tap's offset).
void depthwise_filter_row(const float* x, const float* g, int64_t lo, int64_t hi, int64_t sw, int64_t C, float* a) {
  int64_t c0 = 0;
  for (; c0 + kLanes <= C; c0 += kLanes) {
    Vec acc{};
    for (int64_t ox = lo; ox < hi; ++ox) acc += load_vec(x + ox * sw * C + c0) * load_vec(g + ox * C + c0);
    store_vec(a + c0, load_vec(a + c0) + acc);
  }
  for (int64_t c = c0; c < C; ++c) {
    float acc = 0.0f;
    for (int64_t ox = lo; ox < hi; ++ox) acc += x[ox * sw * C + c] * g[ox * C + c];
    a[c] += acc;
  }
}

bool Dims::depthwise_fast(const Window2D& w) const { return depthwise() && w.kh * w.kw <= kMaxTaps; }

// One output row of the other groupings: a pass over the row per tap (the
// row, in cache, taking each tap's products), the filters of a group
// innermost.
void grouped_row(const Window2D& win, const Dims& d, const float* px, const float* pk, int64_t b, int64_t oy,
                 float* row) {
  for (int64_t ky = 0; ky < win.kh; ++ky) {
    const int64_t iy = oy * win.sh - win.pad_top + ky * win.dh;
    if (iy < 0 || iy >= d.H) continue;
    const float* xr = px + (b * d.H + iy) * d.W * d.C;
    for (int64_t kx = 0; kx < win.kw; ++kx) {
      const int64_t offset = kx * win.dw - win.pad_left;
      int64_t lo, hi;
      valid_columns(offset, win.sw, d.W, d.Wo, &lo, &hi);
      forward_tap(d, xr, pk + (ky * win.kw + kx) * d.Cg * d.F, lo, hi, win.sw, offset, row);
    }
  }
}

// One input row of the other groupings' input gradient, gathered: per tap,
// each input pixel's channels take the dot product of the output pixel's
// group of gradients with the tap's filters.
void grouped_input_row(const Window2D& win, const Dims& d, const float* pg, const float* pk, int64_t b, int64_t iy,
                       float* dr) {
  for (int64_t ky = 0; ky < win.kh; ++ky) {
    const int64_t t = iy + win.pad_top - ky * win.dh;
    if (t < 0 || t % win.sh != 0 || t / win.sh >= d.Ho) continue;
    const float* gr = pg + (b * d.Ho + t / win.sh) * d.Wo * d.F;
    for (int64_t kx = 0; kx < win.kw; ++kx) {
      const float* kt = pk + (ky * win.kw + kx) * d.Cg * d.F;
      for (int64_t ix = 0; ix < d.W; ++ix) {
        const int64_t u = ix + win.pad_left - kx * win.dw;
        if (u < 0 || u % win.sw != 0 || u / win.sw >= d.Wo) continue;
        const float* gp = gr + (u / win.sw) * d.F;
        float* dp = dr + ix * d.C;
        for (int64_t gi = 0; gi < d.G; ++gi)
          for (int64_t c = 0; c < d.Cg; ++c) {
            const float* k = kt + c * d.F + gi * d.Fg;
            const float* gg = gp + gi * d.Fg;
            float s = 0.0f;
            for (int64_t f = 0; f < d.Fg; ++f) s += gg[f] * k[f];
            dp[gi * d.Cg + c] += s;
          }
      }
    }
  }
}

}  // namespace

void grouped_conv2d(const Window2D& win, const TensorRef& x, const TensorRef& kernel, const TensorRef& y,
                    const KernelContext& ctx, const float* bias, bool relu, float* stats) {
  const Dims d = dims_of(win, x.shape, y.shape);
  const float* px = x.f();
  const float* pk = kernel.f();
  float* py = y.f();
  parallel_for(ctx.pool, size_t(d.B * d.Ho), 1, [&](size_t r0, size_t r1) {
    for (size_t r = r0; r < r1; ++r) {
      const int64_t b = int64_t(r) / d.Ho, oy = int64_t(r) % d.Ho;
      float* row = py + int64_t(r) * d.Wo * d.F;
      if (d.depthwise_fast(win)) {
        depthwise_row(win, d, px + b * d.H * d.W * d.C, pk, oy, row);
      } else {
        std::fill(row, row + d.Wo * d.F, 0.0f);
        grouped_row(win, d, px, pk, b, oy, row);
      }
      // The bias after the taps and the ReLU after it: the bits of the
      // separate Add and Relu kernels.
      if (bias)
        for (int64_t ox = 0; ox < d.Wo; ++ox)
          for (int64_t f = 0; f < d.F; ++f) row[ox * d.F + f] += bias[f];
      if (relu)
        for (int64_t i = 0; i < d.Wo * d.F; ++i) row[i] = relu_value(row[i]);
    }
  });
  if (!stats) return;
  // BatchNormStats' sums: image by image, then in order (the same bits).
  thread_local std::vector<double> image_sums;  // the caller's; image b's at 2 F b
  image_sums.assign(size_t(d.B * 2 * d.F), 0.0);
  double* sums = image_sums.data();  // named in the task, `image_sums` would be the worker's own
  parallel_for(ctx.pool, size_t(d.B), 1, [&](size_t b0, size_t b1) {
    for (size_t b = b0; b < b1; ++b)
      image_stats_sums(py + int64_t(b) * d.Ho * d.Wo * d.F, d.Ho * d.Wo, d.F, sums + int64_t(b) * 2 * d.F);
  });
  stats_from_image_sums(sums, d.B, d.B * d.Ho * d.Wo, d.F, stats);
}

void grouped_conv2d_backward_input(const Window2D& win, const TensorRef& g, const TensorRef& kernel,
                                   const TensorRef& dx, const KernelContext& ctx, const float* addend,
                                   const float* mask) {
  const Dims d = dims_of(win, dx.shape, g.shape);
  const float* pg = g.f();
  const float* pk = kernel.f();
  float* pdx = dx.f();
  // Gathered per input row (no two tasks write one element): dx[iy, ix]
  // sums g[oy, ox] k[ky, kx] over the taps that reach it.
  parallel_for(ctx.pool, size_t(d.B * d.H), 1, [&](size_t r0, size_t r1) {
    for (size_t r = r0; r < r1; ++r) {
      const int64_t b = int64_t(r) / d.H, iy = int64_t(r) % d.H;
      float* dr = pdx + int64_t(r) * d.W * d.C;
      if (d.depthwise_fast(win)) {
        depthwise_input_row(win, d, pg + b * d.Ho * d.Wo * d.F, pk, iy, dr);
      } else {
        std::fill(dr, dr + d.W * d.C, 0.0f);
        grouped_input_row(win, d, pg, pk, b, iy, dr);
      }
      // The Add and the ReLU's backward folded in: their kernels' bits.
      const int64_t n = d.W * d.C, at = int64_t(r) * n;
      if (addend)
        for (int64_t i = 0; i < n; ++i) dr[i] += addend[at + i];
      if (mask)
        for (int64_t i = 0; i < n; ++i) dr[i] = relu_pass(mask[at + i], dr[i]);
    }
  });
}

void grouped_conv2d_backward_filter(const Window2D& win, const TensorRef& x, const TensorRef& g,
                                    const TensorRef& dkernel, const KernelContext& ctx) {
  const Dims d = dims_of(win, x.shape, g.shape);
  const int64_t n = win.kh * win.kw * d.Cg * d.F;
  const float* px = x.f();
  const float* pg = g.f();
  // One accumulator per fixed slice of the batch, added in order at the end
  // (the slices depend on the shapes, not the threads), as conv2d_backward_filter.
  constexpr int64_t kMaxSlices = 16;
  const int64_t slices = std::min(d.B, kMaxSlices);
  if (slices == 0) {
    std::fill(dkernel.f(), dkernel.f() + n, 0.0f);
    return;
  }
  thread_local std::vector<float> partial;  // the caller's; each task writes its own slice
  partial.assign(size_t((slices - 1) * n), 0.0f);
  float* parts = partial.data();  // named in the task, `partial` would be the worker's own
  float* out = dkernel.f();
  parallel_for(ctx.pool, size_t(slices), 1, [&](size_t s0, size_t s1) {
    for (size_t s = s0; s < s1; ++s) {
      float* acc = s == 0 ? out : parts + (int64_t(s) - 1) * n;
      if (s == 0) std::fill(acc, acc + n, 0.0f);
      const int64_t first = d.B * int64_t(s) / slices, last = d.B * (int64_t(s) + 1) / slices;
      for (int64_t b = first; b < last; ++b)
        for (int64_t oy = 0; oy < d.Ho; ++oy) {
          const float* gr = pg + (b * d.Ho + oy) * d.Wo * d.F;
          for (int64_t ky = 0; ky < win.kh; ++ky) {
            const int64_t iy = oy * win.sh - win.pad_top + ky * win.dh;
            if (iy < 0 || iy >= d.H) continue;
            const float* xr = px + (b * d.H + iy) * d.W * d.C;
            for (int64_t kx = 0; kx < win.kw; ++kx) {
              const int64_t offset = kx * win.dw - win.pad_left;
              int64_t lo, hi;
              valid_columns(offset, win.sw, d.W, d.Wo, &lo, &hi);
              float* at = acc + (ky * win.kw + kx) * d.Cg * d.F;
              if (d.depthwise()) {
                depthwise_filter_row(xr + offset * d.C, gr, lo, hi, win.sw, d.C, at);
                continue;
              }
              for (int64_t ox = lo; ox < hi; ++ox) {
                const float* __restrict xp = xr + (ox * win.sw + offset) * d.C;
                const float* __restrict gp = gr + ox * d.F;
                for (int64_t gi = 0; gi < d.G; ++gi)
                  for (int64_t c = 0; c < d.Cg; ++c) {
                    const float xv = xp[gi * d.Cg + c];
                    float* __restrict a = at + c * d.F + gi * d.Fg;
                    const float* __restrict gg = gp + gi * d.Fg;
                    for (int64_t f = 0; f < d.Fg; ++f) a[f] += xv * gg[f];
                  }
              }
            }
          }
        }
    }
  });
  for (int64_t s = 1; s < slices; ++s) {
    const float* p = parts + (s - 1) * n;
    for (int64_t i = 0; i < n; ++i) out[i] += p[i];
  }
}

}  // namespace tensorgrad::kernels
