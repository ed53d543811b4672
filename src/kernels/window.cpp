// Sliding-window kernels over channels-last images x{B, H, W, C}: the
// im2col patch matrix that turns a convolution into one GEMM, its adjoint,
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

// cols{B*Ho*Wo, kh*kw*C}: row (b, oy, ox), column (ky, kx, c). With
// dilation 1 the kw taps of one kernel row are kw*C contiguous floats of x,
// copied as one run; only the taps that fall in padding are zeroed.
void im2col(const Window2D& win, const TensorRef& x, const TensorRef& cols, const KernelContext& ctx) {
  const Geometry g = geometry(win, x.shape);
  const int64_t row_len = win.kh * win.kw * g.c;
  const float* px = x.f();
  float* pc = cols.f();
  parallel_for(ctx.pool, size_t(g.b * g.ho), 16, [&](size_t rb, size_t re) {
    for (size_t r = rb; r < re; ++r) {
      const int64_t b = int64_t(r) / g.ho, oy = int64_t(r) % g.ho;
      for (int64_t ox = 0; ox < g.wo; ++ox) {
        float* dst = pc + (int64_t(r) * g.wo + ox) * row_len;
        const int64_t ix0 = ox * win.sw - win.pad_left;
        for (int64_t ky = 0; ky < win.kh; ++ky) {
          const int64_t iy = oy * win.sh - win.pad_top + ky * win.dh;
          const bool row_in = iy >= 0 && iy < g.h;
          const float* src_row = px + (b * g.h + (row_in ? iy : 0)) * g.w * g.c;
          for (int64_t kx = 0; kx < win.kw; ++kx, dst += g.c) {
            const int64_t ix = ix0 + kx * win.dw;
            if (!row_in || ix < 0 || ix >= g.w) {
              for (int64_t c = 0; c < g.c; ++c) dst[c] = 0.0f;
            } else {
              const float* src = src_row + ix * g.c;
              for (int64_t c = 0; c < g.c; ++c) dst[c] = src[c];
            }
          }
        }
      }
    }
  });
}

// The adjoint of im2col: every column entry is added back to the pixel it
// was copied from. One image per task, so no two tasks write the same pixel.
void col2im(const Window2D& win, const TensorRef& cols, const TensorRef& x, const KernelContext& ctx) {
  const Geometry g = geometry(win, x.shape);
  const int64_t row_len = win.kh * win.kw * g.c;
  const float* pc = cols.f();
  float* px = x.f();
  parallel_for(ctx.pool, size_t(g.b), 1, [&](size_t bb, size_t be) {
    for (size_t b = bb; b < be; ++b) {
      float* img = px + int64_t(b) * g.h * g.w * g.c;
      std::memset(img, 0, size_t(g.h * g.w * g.c) * sizeof(float));
      for (int64_t oy = 0; oy < g.ho; ++oy)
        for (int64_t ox = 0; ox < g.wo; ++ox) {
          const float* src = pc + ((int64_t(b) * g.ho + oy) * g.wo + ox) * row_len;
          for (int64_t ky = 0; ky < win.kh; ++ky) {
            const int64_t iy = oy * win.sh - win.pad_top + ky * win.dh;
            for (int64_t kx = 0; kx < win.kw; ++kx, src += g.c) {
              const int64_t ix = ox * win.sw - win.pad_left + kx * win.dw;
              if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
              float* dst = img + (iy * g.w + ix) * g.c;
              for (int64_t c = 0; c < g.c; ++c) dst[c] += src[c];
            }
          }
        }
    }
  });
}

// Runs f(b, oy, ox, iy0, ix0) for every output pixel, one image per task.
template <class F>
void for_each_output(const Geometry& g, const Window2D& win, const KernelContext& ctx, F f) {
  parallel_for(ctx.pool, size_t(g.b), 1, [&](size_t bb, size_t be) {
    for (size_t b = bb; b < be; ++b)
      for (int64_t oy = 0; oy < g.ho; ++oy)
        for (int64_t ox = 0; ox < g.wo; ++ox) f(int64_t(b), oy, ox, oy * win.sh - win.pad_top, ox * win.sw - win.pad_left);
  });
}

void pool2d(OpKind op, const Window2D& win, const TensorRef& x, const TensorRef& y, const KernelContext& ctx) {
  const Geometry g = geometry(win, x.shape);
  const float* px = x.f();
  float* py = y.f();
  const bool is_max = op == OpKind::MaxPool2D;
  for_each_output(g, win, ctx, [&](int64_t b, int64_t oy, int64_t ox, int64_t iy0, int64_t ix0) {
    float* out = py + ((b * g.ho + oy) * g.wo + ox) * g.c;
    for (int64_t c = 0; c < g.c; ++c) out[c] = is_max ? -std::numeric_limits<float>::infinity() : 0.0f;
    int64_t count = 0;
    for (int64_t ky = 0; ky < win.kh; ++ky) {
      const int64_t iy = iy0 + ky * win.dh;
      if (iy < 0 || iy >= g.h) continue;
      for (int64_t kx = 0; kx < win.kw; ++kx) {
        const int64_t ix = ix0 + kx * win.dw;
        if (ix < 0 || ix >= g.w) continue;
        const float* in = px + ((b * g.h + iy) * g.w + ix) * g.c;
        ++count;
        if (is_max)
          for (int64_t c = 0; c < g.c; ++c) out[c] = in[c] > out[c] ? in[c] : out[c];
        else
          for (int64_t c = 0; c < g.c; ++c) out[c] += in[c];
      }
    }
    if (!is_max && count > 0)  // padding is not counted, as Keras' "same" average pooling
      for (int64_t c = 0; c < g.c; ++c) out[c] /= float(count);
  });
}

// Each window's gradient goes to its first maximum in (ky, kx) order, as
// PyTorch. Channels are the inner loop (contiguous), tracked in blocks.
void max_pool2d_backward(const Window2D& win, const TensorRef& x, const TensorRef& gr, const TensorRef& dx,
                         const KernelContext& ctx) {
  const Geometry g = geometry(win, x.shape);
  const float *px = x.f(), *pg = gr.f();
  float* pd = dx.f();
  std::memset(pd, 0, size_t(dx.numel()) * sizeof(float));
  constexpr int64_t kBlock = 64;
  for_each_output(g, win, ctx, [&](int64_t b, int64_t oy, int64_t ox, int64_t iy0, int64_t ix0) {
    const float* grad = pg + ((b * g.ho + oy) * g.wo + ox) * g.c;
    for (int64_t c0 = 0; c0 < g.c; c0 += kBlock) {
      const int64_t n = std::min(kBlock, g.c - c0);
      float best_v[kBlock];
      int64_t best_at[kBlock];
      bool found = false;
      for (int64_t ky = 0; ky < win.kh; ++ky) {
        const int64_t iy = iy0 + ky * win.dh;
        if (iy < 0 || iy >= g.h) continue;
        for (int64_t kx = 0; kx < win.kw; ++kx) {
          const int64_t ix = ix0 + kx * win.dw;
          if (ix < 0 || ix >= g.w) continue;
          const int64_t base = ((b * g.h + iy) * g.w + ix) * g.c + c0;
          const float* in = px + base;
          if (!found) {
            for (int64_t c = 0; c < n; ++c) {
              best_v[c] = in[c];
              best_at[c] = base + c;
            }
            found = true;
            continue;
          }
          for (int64_t c = 0; c < n; ++c) {
            const bool better = in[c] > best_v[c];  // strict: ties keep the first
            best_v[c] = better ? in[c] : best_v[c];
            best_at[c] = better ? base + c : best_at[c];
          }
        }
      }
      if (found)
        for (int64_t c = 0; c < n; ++c) pd[best_at[c]] += grad[c0 + c];
    }
  });
}

void avg_pool2d_backward(const Window2D& win, const TensorRef& gr, const TensorRef& dx, const KernelContext& ctx) {
  const Geometry g = geometry(win, dx.shape);
  const float* pg = gr.f();
  float* pd = dx.f();
  std::memset(pd, 0, size_t(dx.numel()) * sizeof(float));
  for_each_output(g, win, ctx, [&](int64_t b, int64_t oy, int64_t ox, int64_t iy0, int64_t ix0) {
    int64_t count = 0;
    for (int64_t ky = 0; ky < win.kh; ++ky)
      for (int64_t kx = 0; kx < win.kw; ++kx) {
        const int64_t iy = iy0 + ky * win.dh, ix = ix0 + kx * win.dw;
        count += iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
      }
    if (count == 0) return;
    const float* grad = pg + ((b * g.ho + oy) * g.wo + ox) * g.c;
    const float inv = 1.0f / float(count);
    for (int64_t ky = 0; ky < win.kh; ++ky)
      for (int64_t kx = 0; kx < win.kw; ++kx) {
        const int64_t iy = iy0 + ky * win.dh, ix = ix0 + kx * win.dw;
        if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
        float* d = pd + ((b * g.h + iy) * g.w + ix) * g.c;
        for (int64_t c = 0; c < g.c; ++c) d[c] += grad[c] * inv;
      }
  });
}

}  // namespace tensorgrad::kernels
