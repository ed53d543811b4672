// Sliding-window kernels over channels-last images x{B, H, W, C}: the
// im2col patch matrix (the strided filter gradient's GEMM operand, conv.cpp)
// and pooling. Output pixel (oy, ox) reads input rows iy = oy*sh - pad_top +
// ky*dh and columns ix = ox*sw - pad_left + kx*dw; positions outside the
// image are padding (zeros for patches, skipped for pooling).
#include <algorithm>
#include <cstring>
#include <limits>

#include "kernels/kernels.h"

namespace tensorgrad::kernels {

namespace {
struct Geometry {
  int64_t b, h, w, c, ho, wo;
};
Geometry geometry(const Window2D& win, const Shape& x) {
  return {x[0], x[1], x[2], x[3], win.out_h(x[1]), win.out_w(x[2])};
}
}  // namespace

// Eight channels at a time: GCC vector extensions, so pooling over C = 8, 16,
// ... (every CNN here) costs a few instructions per tap instead of a loop.
typedef float v8f __attribute__((vector_size(32)));
inline v8f load8(const float* p) {
  v8f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store8(float* p, v8f v) { std::memcpy(p, &v, sizeof v); }

// cols{B*Ho*Wo, kh*kw*C}: row (b, oy, ox), column (ky, kx, c). Filled one
// tap (ky, kx) at a time across a whole output row, so the loop overhead is
// paid per tap and row, not per pixel (conv1 of the MNIST CNN has C = 1).
void im2col(const Window2D& win, const TensorRef& x, const TensorRef& cols, const KernelContext& ctx) {
  const Geometry g = geometry(win, x.shape);
  const int64_t row_len = win.kh * win.kw * g.c, C = g.c;
  const float* px = x.f();
  float* pc = cols.f();
  parallel_for(ctx.pool, size_t(g.b * g.ho), 16, [&](size_t rb, size_t re) {
    for (size_t r = rb; r < re; ++r) {
      const int64_t b = int64_t(r) / g.ho, oy = int64_t(r) % g.ho;
      float* rows = pc + int64_t(r) * g.wo * row_len;  // the Wo rows of this output row
      for (int64_t ky = 0; ky < win.kh; ++ky) {
        const int64_t iy = oy * win.sh - win.pad_top + ky * win.dh;
        const bool row_in = iy >= 0 && iy < g.h;
        const float* src_row = px + (b * g.h + (row_in ? iy : 0)) * g.w * C;
        for (int64_t kx = 0; kx < win.kw; ++kx) {
          const int64_t col = (ky * win.kw + kx) * C, shift = kx * win.dw - win.pad_left;
          // Output columns whose tap lands inside the image: 0 <= ox*sw + shift < W.
          int64_t lo = 0, hi = 0;
          if (row_in) {
            lo = shift >= 0 ? 0 : (-shift + win.sw - 1) / win.sw;
            hi = g.w - 1 - shift < 0 ? 0 : std::min(g.wo, (g.w - 1 - shift) / win.sw + 1);
            lo = std::min(lo, hi);
          }
          for (int64_t ox = 0; ox < lo; ++ox)
            for (int64_t c = 0; c < C; ++c) rows[ox * row_len + col + c] = 0.0f;
          if (C == 1) {
            for (int64_t ox = lo; ox < hi; ++ox) rows[ox * row_len + col] = src_row[ox * win.sw + shift];
          } else {
            for (int64_t ox = lo; ox < hi; ++ox) {
              const float* src = src_row + (ox * win.sw + shift) * C;
              float* dst = rows + ox * row_len + col;
              for (int64_t c = 0; c < C; ++c) dst[c] = src[c];
            }
          }
          for (int64_t ox = hi; ox < g.wo; ++ox)
            for (int64_t c = 0; c < C; ++c) rows[ox * row_len + col + c] = 0.0f;
        }
      }
    }
  });
}

// The window taps of output pixel (oy, ox) that fall inside the image:
// ky in [ky0, ky1), kx in [kx0, kx1); no padding test is left in the loops.
struct Taps {
  int64_t iy0, ix0, ky0, ky1, kx0, kx1;
};
inline int64_t first_tap(int64_t i0, int64_t d) {
  if (i0 >= 0) return 0;
  return d == 1 ? -i0 : (-i0 + d - 1) / d;
}
inline int64_t end_tap(int64_t i0, int64_t d, int64_t k, int64_t n) {
  if (i0 + (k - 1) * d < n) return k;  // the usual case: no division
  return std::min(k, i0 >= n ? 0 : (n - 1 - i0) / d + 1);
}

// Runs f(b, oy, ox, taps) for every output pixel, one image per task,
// between begin_image(b) and end_image(b).
template <class F, class Begin, class End>
void for_each_output(const Geometry& g, const Window2D& win, const KernelContext& ctx, F f, Begin begin_image,
                     End end_image) {
  parallel_for(ctx.pool, size_t(g.b), 1, [&](size_t bb, size_t be) {
    for (size_t b = bb; b < be; ++b) {
      begin_image(int64_t(b));
      for (int64_t oy = 0; oy < g.ho; ++oy) {
        const int64_t iy0 = oy * win.sh - win.pad_top;
        const int64_t ky0 = first_tap(iy0, win.dh), ky1 = end_tap(iy0, win.dh, win.kh, g.h);
        for (int64_t ox = 0; ox < g.wo; ++ox) {
          const int64_t ix0 = ox * win.sw - win.pad_left;
          f(int64_t(b), oy, ox,
            Taps{iy0, ix0, ky0, ky1, first_tap(ix0, win.dw), end_tap(ix0, win.dw, win.kw, g.w)});
        }
      }
      end_image(int64_t(b));
    }
  });
}
template <class F>
void for_each_output(const Geometry& g, const Window2D& win, const KernelContext& ctx, F f) {
  for_each_output(g, win, ctx, f, [](int64_t) {}, [](int64_t) {});
}

// The backward kernels' begin_image: the image's gradient zeroed in its own
// task, while it is in that core's cache (one pass fewer over memory than a
// memset of the whole tensor first).
auto zero_image(const Geometry& g, float* dx) {
  return [=](int64_t b) {
    const int64_t n = g.h * g.w * g.c;
    std::fill(dx + b * n, dx + (b + 1) * n, 0.0f);
  };
}

template <bool kMax>
void pool2d_impl(const Window2D& win, const TensorRef& x, const TensorRef& y, const KernelContext& ctx) {
  const Geometry g = geometry(win, x.shape);
  const float* px = x.f();
  float* py = y.f();
  const int64_t C = g.c, C8 = C % 8 == 0 ? C : 0;
  for_each_output(g, win, ctx, [=](int64_t b, int64_t oy, int64_t ox, Taps t) {
    float* out = py + ((b * g.ho + oy) * g.wo + ox) * C;
    const float init = kMax ? -std::numeric_limits<float>::infinity() : 0.0f;
    auto tap = [&](int64_t ky, int64_t kx) { return px + ((b * g.h + t.iy0 + ky * win.dh) * g.w + t.ix0 + kx * win.dw) * C; };
    for (int64_t c = 0; c < C8; c += 8) {  // the accumulator stays in a register across the taps
      v8f acc = {init, init, init, init, init, init, init, init};
      for (int64_t ky = t.ky0; ky < t.ky1; ++ky)
        for (int64_t kx = t.kx0; kx < t.kx1; ++kx) {
          const v8f v = load8(tap(ky, kx) + c);
          if constexpr (kMax) acc = (v > acc) | (v != v) ? v : acc;  // as nan_max
          else acc += v;
        }
      store8(out + c, acc);
    }
    for (int64_t c = C8; c < C; ++c) {
      float acc = init;
      for (int64_t ky = t.ky0; ky < t.ky1; ++ky)
        for (int64_t kx = t.kx0; kx < t.kx1; ++kx) acc = kMax ? nan_max(acc, tap(ky, kx)[c]) : acc + tap(ky, kx)[c];
      out[c] = acc;
    }
    if constexpr (!kMax) {  // padding is not counted, as Keras' "same" average pooling
      const int64_t count = (t.ky1 - t.ky0) * (t.kx1 - t.kx0);
      if (count > 0) {
        const float inv = 1.0f / float(count);
        for (int64_t c = 0; c < C; ++c) out[c] *= inv;
      }
    }
  });
}

// Windows that tile the image exactly (stride = size, no padding, no
// dilation, sizes dividing the image; MaxPooling2D's default) with C a
// multiple of 8: every input pixel is in one window, so a task takes whole
// output rows and reads its kh input rows straight through, with none of
// the general loop's bounds per pixel.
bool tiles_exactly(const Window2D& win, const Geometry& g) {
  return win.sh == win.kh && win.sw == win.kw && win.dh == 1 && win.dw == 1 && win.pad_top == 0 &&
         win.pad_left == 0 && win.pad_bottom == 0 && win.pad_right == 0 && g.h == g.ho * win.kh &&
         g.w == g.wo * win.kw && g.c % 8 == 0;
}

// The tiled max-pool: the same taps in the same (ky, kx) order and the same
// comparison as pool2d_impl, so the same bits (the first NaN tap wins there too).
template <int64_t KH, int64_t KW>  // the window's size when known at compile time (2x2), else 0: win's
void max_pool2d_tiled(const Window2D& win, const Geometry& g, const float* px, float* py, const KernelContext& ctx) {
  const int64_t C = g.c, kh = KH ? KH : win.kh, kw = KW ? KW : win.kw;
  const float inf = std::numeric_limits<float>::infinity();
  const v8f lowest = {-inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf};
  parallel_for(ctx.pool, size_t(g.b * g.ho), 8, [=](size_t rb, size_t re) {
    for (size_t r = rb; r < re; ++r) {
      const int64_t b = int64_t(r) / g.ho, oy = int64_t(r) % g.ho;
      const float* in = px + (b * g.h + oy * kh) * g.w * C;
      float* out = py + int64_t(r) * g.wo * C;
      for (int64_t ox = 0; ox < g.wo; ++ox)
        for (int64_t c = 0; c < C; c += 8) {
          v8f acc = lowest;
          for (int64_t ky = 0; ky < kh; ++ky)
            for (int64_t kx = 0; kx < kw; ++kx) {
              const v8f v = load8(in + (ky * g.w + ox * kw + kx) * C + c);
              acc = (v > acc) | (v != v) ? v : acc;  // as nan_max
            }
          store8(out + ox * C + c, acc);
        }
    }
  });
}

// An exact tiling (MaxPooling2D's default) takes the tiled kernel: the same
// bits as the general one, without its bounds per pixel.
void max_pool2d_forward(const KernelCall& k) {
  const Window2D& win = k.at.window;
  const Geometry g = geometry(win, k.in[0].shape);
  if (tiles_exactly(win, g))
    return win.kh == 2 && win.kw == 2 ? max_pool2d_tiled<2, 2>(win, g, k.in[0].f(), k.out.f(), k.ctx)
                                      : max_pool2d_tiled<0, 0>(win, g, k.in[0].f(), k.out.f(), k.ctx);
  pool2d_impl<true>(win, k.in[0], k.out, k.ctx);
}

// Each window's gradient goes to its first maximum in (ky, kx) order, as
// PyTorch: one pass finds the maxima, a second hands the gradient to the
// first tap equal to them (later equal taps see it already handed out).
// Windows that tile the image exactly (stride = size, no padding, no
// dilation, sizes dividing the image; MaxPooling2D's default): every input
// pixel belongs to one window, so each dx element is written once, without
// clearing dx first or adding into it.
template <int64_t KH, int64_t KW>  // the window's size when known at compile time (2x2), else 0: win's
void max_pool2d_backward_tiled(const Window2D& win, const Geometry& g, const float* px, const float* pg, float* pd,
                               bool mask, const KernelContext& ctx) {
  const int64_t C = g.c, kh = KH ? KH : win.kh, kw = KW ? KW : win.kw;
  const v8f zero = {0, 0, 0, 0, 0, 0, 0, 0};
  parallel_for(ctx.pool, size_t(g.b * g.ho), 8, [=](size_t rb, size_t re) {
    for (size_t r = rb; r < re; ++r) {
      const int64_t b = int64_t(r) / g.ho, oy = int64_t(r) % g.ho;
      for (int64_t ox = 0; ox < g.wo; ++ox) {
        const float* grad = pg + ((b * g.ho + oy) * g.wo + ox) * C;
        auto tap = [&](int64_t ky, int64_t kx) { return ((b * g.h + oy * kh + ky) * g.w + ox * kw + kx) * C; };
        for (int64_t c = 0; c < C; c += 8) {
          v8f best = load8(px + tap(0, 0) + c);
          for (int64_t ky = 0; ky < kh; ++ky)
            for (int64_t kx = 0; kx < kw; ++kx) {
              const v8f v = load8(px + tap(ky, kx) + c);
              best = (v > best) | (v != v) ? v : best;  // as nan_max
            }
          v8f pending = load8(grad + c);
          if (mask) pending = best <= zero ? zero : pending;  // as relu_pass
          for (int64_t ky = 0; ky < kh; ++ky)
            for (int64_t kx = 0; kx < kw; ++kx) {
              const int64_t at = tap(ky, kx) + c;
              const v8f v = load8(px + at);
              const auto hit = (v == best) | ((v != v) & (best != best));  // a NaN maximum routes to the first NaN
              store8(pd + at, hit ? pending : zero);
              pending = hit ? zero : pending;
            }
        }
      }
    }
  });
}

// in: x, g. With kMaskNonPositive, x is a ReLU's output and dx is what that
// ReLU's backward would pass on, so a window whose maximum is not positive
// sends nothing.
void max_pool2d_backward(const KernelCall& k) {
  const Window2D& win = k.at.window;
  const bool mask = (k.at.flags & kMaskNonPositive) != 0;
  const KernelContext& ctx = k.ctx;
  const Geometry g = geometry(win, k.in[0].shape);
  const float *px = k.in[0].f(), *pg = k.in[1].f();
  float* pd = k.out.f();
  if (tiles_exactly(win, g))
    return win.kh == 2 && win.kw == 2 ? max_pool2d_backward_tiled<2, 2>(win, g, px, pg, pd, mask, ctx)
                                      : max_pool2d_backward_tiled<0, 0>(win, g, px, pg, pd, mask, ctx);
  const int64_t C = g.c, C8 = C % 8 == 0 ? C : 0;
  for_each_output(g, win, ctx, [=](int64_t b, int64_t oy, int64_t ox, Taps t) {
    if (t.ky0 >= t.ky1 || t.kx0 >= t.kx1) return;
    const float* grad = pg + ((b * g.ho + oy) * g.wo + ox) * C;
    auto tap = [&](int64_t ky, int64_t kx) { return ((b * g.h + t.iy0 + ky * win.dh) * g.w + t.ix0 + kx * win.dw) * C; };
    for (int64_t c = 0; c < C8; c += 8) {
      v8f best = load8(px + tap(t.ky0, t.kx0) + c);
      for (int64_t ky = t.ky0; ky < t.ky1; ++ky)
        for (int64_t kx = t.kx0; kx < t.kx1; ++kx) {
          const v8f v = load8(px + tap(ky, kx) + c);
          best = (v > best) | (v != v) ? v : best;  // as nan_max
        }
      const v8f zero = {0, 0, 0, 0, 0, 0, 0, 0};
      v8f pending = load8(grad + c);
      if (mask) pending = best <= zero ? zero : pending;  // as relu_pass
      for (int64_t ky = t.ky0; ky < t.ky1; ++ky)
        for (int64_t kx = t.kx0; kx < t.kx1; ++kx) {
          const int64_t at = tap(ky, kx) + c;
          const v8f v = load8(px + at);
          const auto hit = (v == best) | ((v != v) & (best != best));  // a NaN maximum routes to the first NaN
          store8(pd + at, load8(pd + at) + (hit ? pending : zero));
          pending = hit ? zero : pending;
        }
    }
    for (int64_t c = C8; c < C; ++c) {
      float best = px[tap(t.ky0, t.kx0) + c];
      for (int64_t ky = t.ky0; ky < t.ky1; ++ky)
        for (int64_t kx = t.kx0; kx < t.kx1; ++kx) best = nan_max(best, px[tap(ky, kx) + c]);
      float pending = mask ? relu_pass(best, grad[c]) : grad[c];
      for (int64_t ky = t.ky0; ky < t.ky1; ++ky)
        for (int64_t kx = t.kx0; kx < t.kx1; ++kx) {
          const int64_t at = tap(ky, kx) + c;
          if (px[at] == best || (px[at] != px[at] && best != best)) {  // a NaN maximum: the first NaN
            pd[at] += pending;
            pending = 0.0f;
          }
        }
    }
  }, zero_image(g, pd), [](int64_t) {});
}

// The mean of each window's taps inside the image (pool2d_impl).
void avg_pool2d_forward(const KernelCall& k) { pool2d_impl<false>(k.at.window, k.in[0], k.out, k.ctx); }
// in: g [, mask]. With kMaskNonPositive, dx is then zero where mask <= 0, as
// ReluBackward's after this kernel, on the image still in cache.
void avg_pool2d_backward(const KernelCall& k) {
  const Window2D& win = k.at.window;
  const KernelContext& ctx = k.ctx;
  const float* mask = (k.at.flags & kMaskNonPositive) ? k.in[1].f() : nullptr;
  const Geometry g = geometry(win, k.out.shape);
  const float* pg = k.in[0].f();
  float* pd = k.out.f();
  const int64_t C = g.c;
  for_each_output(g, win, ctx, [=](int64_t b, int64_t oy, int64_t ox, Taps t) {
    const int64_t count = (t.ky1 - t.ky0) * (t.kx1 - t.kx0);
    if (count <= 0) return;
    const float* grad = pg + ((b * g.ho + oy) * g.wo + ox) * C;
    const float inv = 1.0f / float(count);
    for (int64_t ky = t.ky0; ky < t.ky1; ++ky)
      for (int64_t kx = t.kx0; kx < t.kx1; ++kx) {
        float* d = pd + ((b * g.h + t.iy0 + ky * win.dh) * g.w + t.ix0 + kx * win.dw) * C;
        for (int64_t c = 0; c < C; ++c) d[c] += grad[c] * inv;
      }
  }, zero_image(g, pd), [=](int64_t b) {
    if (!mask) return;
    const int64_t n = g.h * g.w * g.c;
    for (int64_t i = b * n; i < (b + 1) * n; ++i) pd[i] = relu_pass(mask[i], pd[i]);
  });
}

}  // namespace tensorgrad::kernels
