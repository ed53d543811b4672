// Direct convolution over channels-last images x{B, H, W, C} with a kernel
// {kh, kw, C, F}, one image per task. Output row (b, oy) is one libxsmm
// batch-reduce GEMM: the sum over the kh*kw taps of {Wo, C} rows of the
// zero-padded image times the tap's {C, F} slice, accumulated in registers.
// Against im2col and one large GEMM (the previous design) this never writes
// the kh*kw-times larger patch matrix, which does not fit in cache for a
// batch of 28x28 images; the patch matrix is still used per image (in
// cache) where a batch-reduce form has no unit stride (the filter gradient
// of convolutions strided along the width, the input gradient of strided
// ones).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/batch_reduce_gemm.h"
#include "kernels/bfloat16.h"
#include "kernels/kernels.h"
#include "kernels/lanes.h"

namespace tensorgrad::kernels {

namespace {
// The forward pass over the images, each output row one batch-reduce GEMM
// over the taps: `taps_data` holds the kernel's {cp, F} slice of each tap
// (float32, cp = C; or bfloat16 in VNNI pairs of channels, cp = C rounded
// up to even).
template <class T>
void conv2d_rows(const Window2D& win, const TensorRef& x, const T* taps_data, int64_t cp,
                 const BatchReduceGemm<T>& gemm_rows, const TensorRef& y, const KernelContext& ctx, const float* bias,
                 bool relu, double* image_sums) {
  const int64_t B = x.shape[0], H = x.shape[1], W = x.shape[2], C = x.shape[3];
  const int64_t Ho = y.shape[1], Wo = y.shape[2], F = y.shape[3], taps = win.kh * win.kw;
  const int64_t hp = H + win.pad_top + win.pad_bottom, wp = W + win.pad_left + win.pad_right;
  const float* px = x.f();
  float* py = y.f();
  thread_local SlotBuffers<T> images_tl;  // the caller's: a padded image per worker slot
  thread_local SlotBuffers<const T*> tap_rows_tl;  // and the taps' rows
  thread_local std::vector<const T*> w;  // the caller's; the workers only read it
  const auto images = images_tl.prepare(ctx.pool, size_t(hp * wp * cp));
  const auto tap_rows = tap_rows_tl.prepare(ctx.pool, size_t(taps));
  w.resize(size_t(taps));
  for (int64_t t = 0; t < taps; ++t) w[size_t(t)] = taps_data + t * cp * F;
  const T* const* const tap_weights = w.data();  // named in the task, `w` would be the worker's own
  parallel_for(ctx.pool, size_t(B), 1, [&](size_t b0, size_t b1) {
    T* const buffer = images.mine();
    const T** const a = tap_rows.mine();
    for (size_t b = b0; b < b1; ++b) {
      const T* img = padded<T>(px + int64_t(b) * H * W * C, H, W, C, hp, wp, win.pad_top, win.pad_left, cp, buffer);
      for (int64_t oy = 0; oy < Ho; ++oy) {
        for (int64_t ky = 0; ky < win.kh; ++ky)
          for (int64_t kx = 0; kx < win.kw; ++kx)
            a[size_t(ky * win.kw + kx)] = img + ((oy * win.sh + ky * win.dh) * wp + kx * win.dw) * cp;
        float* row = py + ((int64_t(b) * Ho + oy) * Wo) * F;
        gemm_rows.run(Wo, a, tap_weights, taps, row, win.sw * cp);
        if (bias)
          for (int64_t p = 0; p < Wo; ++p)
            for (int64_t f = 0; f < F; ++f) row[p * F + f] += bias[f];
        if (relu)
          for (int64_t i = 0; i < Wo * F; ++i) row[i] = relu_value(row[i]);
      }
      if (image_sums)
        image_stats_sums(py + int64_t(b) * Ho * Wo * F, Ho * Wo, F, image_sums + int64_t(b) * 2 * F);
    }
  });
}

// Whether the one-channel kernels below take a convolution: one channel,
// whole registers of filters (with fewer filters than a register, as the
// 8 of the CNN workload's stem on AVX-512, the batch-reduce products are
// faster) and at most kOneChannelMaxTaps taps.
constexpr int64_t kOneChannelMaxTaps = 25;
bool one_channel_kernel_applies(const Window2D& win, int64_t channels, int64_t filters) {
  return channels == 1 && filters % kLanes == 0 && win.kh * win.kw <= kOneChannelMaxTaps;
}

// The forward pass over one-channel images (a network's first layer on grey
// images): each output pixel's filters are the sum over the taps of a
// broadcast input value times the tap's row of filters, a register of
// filters at a time, kPixels pixels at once so that their sums do not wait
// on each other's multiply-add latency. libxsmm's batch-reduce products over
// the taps of one channel (K = 1) ran at about 40 GFLOP/s here; a first
// form of this kernel with one pixel's sum at a time was slower still.
// F a multiple of kLanes (one_channel_kernel_applies).
void conv2d_one_channel(const Window2D& win, const TensorRef& x, const float* k, const TensorRef& y,
                        const KernelContext& ctx, const float* bias, bool relu, double* image_sums) {
  constexpr int64_t kPixels = 8;
  const int64_t B = x.shape[0], H = x.shape[1], W = x.shape[2];
  const int64_t Ho = y.shape[1], Wo = y.shape[2], F = y.shape[3];
  const int64_t hp = H + win.pad_top + win.pad_bottom, wp = W + win.pad_left + win.pad_right;
  const float* px = x.f();
  float* py = y.f();
  thread_local SlotBuffers<float> images_tl;  // the caller's: a padded image per worker slot
  const auto images = images_tl.prepare(ctx.pool, size_t(hp * wp));
  parallel_for(ctx.pool, size_t(B), 1, [&](size_t b0, size_t b1) {
    float* const buffer = images.mine();
    for (size_t b = b0; b < b1; ++b) {
      const float* img = padded<float>(px + int64_t(b) * H * W, H, W, 1, hp, wp, win.pad_top, win.pad_left, 1, buffer);
      float* out = py + int64_t(b) * Ho * Wo * F;
      for (int64_t oy = 0; oy < Ho; ++oy) {
        float* row = out + oy * Wo * F;
        for (int64_t ox0 = 0; ox0 < Wo; ox0 += kPixels) {
          const int64_t n = std::min(kPixels, Wo - ox0);
          for (int64_t f0 = 0; f0 < F; f0 += kLanes) {
            Vec acc[kPixels];
            for (int64_t j = 0; j < kPixels; ++j) acc[j] = Vec{};
            for (int64_t ky = 0; ky < win.kh; ++ky) {
              const float* line = img + (oy * win.sh + ky * win.dh) * wp + ox0 * win.sw;
              for (int64_t kx = 0; kx < win.kw; ++kx) {
                const Vec w = load_vec(k + (ky * win.kw + kx) * F + f0);
                const float* at = line + kx * win.dw;
                if (n == kPixels) {  // a constant count: unrolled, the sums in registers
                  for (int64_t j = 0; j < kPixels; ++j) acc[j] += broadcast_vec(at + j * win.sw) * w;
                } else {
                  for (int64_t j = 0; j < n; ++j) acc[j] += broadcast_vec(at + j * win.sw) * w;
                }
              }
            }
            for (int64_t j = 0; j < n; ++j) {
              Vec v = acc[j];
              if (bias) v += load_vec(bias + f0);  // after the sum, as the other kernels add it
              if (relu) v = v <= Vec{} ? Vec{} : v;  // NaN kept, as relu_value
              store_vec(row + (ox0 + j) * F + f0, v);
            }
          }
        }
      }
      if (image_sums) image_stats_sums(out, Ho * Wo, F, image_sums + int64_t(b) * 2 * F);
    }
  });
}

// The input gradient's row of n floats, while it is in cache: + addend (the
// Add that set_add_folding folded in), then zero where mask <= 0 (the
// ReluBackward folded in, kMaskNonPositive); either may be null. The same
// bits as the Add and ReluBackward kernels.
void finish_row(float* dx, const float* addend, const float* mask, int64_t n) {
  if (addend)
    for (int64_t i = 0; i < n; ++i) dx[i] += addend[i];
  if (mask)
    for (int64_t i = 0; i < n; ++i) dx[i] = relu_pass(mask[i], dx[i]);
}

// The input gradient of a unit-stride convolution: dx[iy, ix] = sum over
// taps of g[iy + pad_top - ky*dh, ix + pad_left - kx*dw] kernel[ky, kx]^T,
// the forward form over g padded by the kernel's reach. `taps_t` holds each
// tap's slice transposed, {fp, C} (float32, fp = F; or bfloat16 in VNNI
// pairs of filters, fp = F rounded up to even).
template <class T>
void conv2d_input_rows(const Window2D& win, const TensorRef& g, const T* taps_t, int64_t fp,
                       const BatchReduceGemm<T>& gemm_rows, const TensorRef& dx, const KernelContext& ctx,
                       const float* addend, const float* mask) {
  const int64_t B = dx.shape[0], H = dx.shape[1], W = dx.shape[2], C = dx.shape[3];
  const int64_t Ho = g.shape[1], Wo = g.shape[2], F = g.shape[3], taps = win.kh * win.kw;
  const int64_t reach_h = (win.kh - 1) * win.dh, reach_w = (win.kw - 1) * win.dw;
  const int64_t hq = std::max(H + win.pad_top + reach_h, reach_h + Ho);
  const int64_t wq = std::max(W + win.pad_left + reach_w, reach_w + Wo);
  const float* pg = g.f();
  float* pdx = dx.f();
  thread_local SlotBuffers<T> images_tl;  // the caller's: a padded gradient image per worker slot
  thread_local SlotBuffers<const T*> tap_rows_tl, tap_weights_tl;  // and the taps' rows and weights
  const auto images = images_tl.prepare(ctx.pool, size_t(hq * wq * fp));
  const auto tap_rows = tap_rows_tl.prepare(ctx.pool, size_t(taps));
  const auto tap_weights = tap_weights_tl.prepare(ctx.pool, size_t(taps));
  parallel_for(ctx.pool, size_t(B), 1, [&](size_t b0, size_t b1) {
    T* const buffer = images.mine();
    const T** const a = tap_rows.mine();
    const T** const w = tap_weights.mine();
    for (size_t b = b0; b < b1; ++b) {
      const T* gp = padded<T>(pg + int64_t(b) * Ho * Wo * F, Ho, Wo, F, hq, wq, reach_h, reach_w, fp, buffer);
      for (int64_t iy = 0; iy < H; ++iy) {
        int64_t n = 0;
        for (int64_t ky = 0; ky < win.kh; ++ky)
          for (int64_t kx = 0; kx < win.kw; ++kx) {
            const int64_t r = iy + win.pad_top + reach_h - ky * win.dh, s = win.pad_left + reach_w - kx * win.dw;
            a[size_t(n)] = gp + (r * wq + s) * fp;
            w[size_t(n)] = taps_t + (ky * win.kw + kx) * fp * C;
            ++n;
          }
        float* row = pdx + ((int64_t(b) * H + iy) * W) * C;
        gemm_rows.run(W, a, w, taps, row, fp);
        const int64_t at = ((int64_t(b) * H + iy) * W) * C;
        finish_row(row, addend ? addend + at : nullptr, mask ? mask + at : nullptr, W * C);
      }
    }
  });
}

// x / d rounded toward minus infinity (d > 0).
inline int64_t floor_div(int64_t x, int64_t d) { return (x >= 0 ? x : x - d + 1) / d; }

// The input gradient of a strided convolution, by the strides' phases: dx
// pixel (iy, ix) takes tap (ky, kx) where iy + pad_top - ky dh = sh oy and
// ix + pad_left - kx dw = sw ox, so the pixels of a row whose columns agree
// mod sw take the same taps at consecutive ox: one batch-reduce GEMM over
// those taps per row and phase, written every sw pixels. The same products
// as the forward form at unit stride, no patch matrix nor col2im (which
// zeroed the image and scattered the patch matrix's sums back into it).
// taps_t holds each tap's slice transposed, {F, C}.
void conv2d_input_phases(const Window2D& win, const TensorRef& g, const float* taps_t, const TensorRef& dx,
                         const KernelContext& ctx, const float* addend, const float* mask) {
  const int64_t B = dx.shape[0], H = dx.shape[1], W = dx.shape[2], C = dx.shape[3];
  const int64_t Ho = g.shape[1], Wo = g.shape[2], F = g.shape[3];
  const int64_t phases = std::min(win.sw, W);
  // Per column phase r: its pixels (r, r + sw, ...), and its taps kx with
  // their first ox (which may fall left of g; g is padded to cover every
  // phase), at [r kw, r kw + taps[r]). The caller's, kept between calls so
  // that a training step allocates nothing.
  thread_local std::vector<int64_t> pixels, taps, tap_kx, tap_ox;
  thread_local std::vector<BatchReduceGemm<float>> gemms;
  pixels.assign(size_t(phases), 0);
  taps.assign(size_t(phases), 0);
  tap_kx.resize(size_t(phases * win.kw));
  tap_ox.resize(size_t(phases * win.kw));
  gemms.clear();
  int64_t left = 0, right = 0;
  for (int64_t r = 0; r < phases; ++r) {
    const size_t p = size_t(r);
    pixels[p] = (W - r + win.sw - 1) / win.sw;
    for (int64_t kx = 0; kx < win.kw; ++kx) {
      const int64_t at = r + win.pad_left - kx * win.dw;
      if (at - floor_div(at, win.sw) * win.sw != 0) continue;
      const int64_t ox = at / win.sw;
      if (ox + pixels[p] <= 0 || ox >= Wo) continue;  // every pixel of the phase outside g
      tap_kx[size_t(r * win.kw + taps[p])] = kx;
      tap_ox[size_t(r * win.kw + taps[p])] = ox;
      ++taps[p];
      left = std::max(left, -ox);
      right = std::max(right, ox + pixels[p] - Wo);
    }
    gemms.emplace_back(pixels[p], C, F, F, C, win.sw * C);
  }
  const int64_t wq = Wo + left + right;
  // Named in the task, the thread_locals would be each worker's own.
  const int64_t *phase_pixels = pixels.data(), *phase_taps = taps.data(), *kx_of = tap_kx.data(),
                *ox_of = tap_ox.data();
  const BatchReduceGemm<float>* phase_gemm = gemms.data();
  const float* pg = g.f();
  float* pdx = dx.f();
  thread_local SlotBuffers<float> images_tl;  // a padded gradient image per worker slot
  thread_local SlotBuffers<const float*> tap_rows_tl, tap_weights_tl;  // and the taps' rows and weights
  const auto images = images_tl.prepare(ctx.pool, size_t(Ho * wq * F));
  const auto tap_rows = tap_rows_tl.prepare(ctx.pool, size_t(win.kh * win.kw));
  const auto tap_weights = tap_weights_tl.prepare(ctx.pool, size_t(win.kh * win.kw));
  parallel_for(ctx.pool, size_t(B), 1, [&](size_t b0, size_t b1) {
    float* const buffer = images.mine();
    const float** const a = tap_rows.mine();
    const float** const w = tap_weights.mine();
    for (size_t b = b0; b < b1; ++b) {
      const float* gp = padded<float>(pg + int64_t(b) * Ho * Wo * F, Ho, Wo, F, Ho, wq, 0, left, F, buffer);
      for (int64_t iy = 0; iy < H; ++iy) {
        float* row = pdx + ((int64_t(b) * H + iy) * W) * C;
        for (int64_t r = 0; r < phases; ++r) {
          int64_t n = 0;
          for (int64_t ky = 0; ky < win.kh; ++ky) {
            const int64_t at = iy + win.pad_top - ky * win.dh;
            if (at < 0 || at % win.sh != 0 || at / win.sh >= Ho) continue;
            for (int64_t t = r * win.kw; t < r * win.kw + phase_taps[r]; ++t) {
              a[size_t(n)] = gp + ((at / win.sh) * wq + ox_of[t] + left) * F;
              w[size_t(n)] = taps_t + (ky * win.kw + kx_of[t]) * F * C;
              ++n;
            }
          }
          const int64_t m = phase_pixels[r];
          if (n > 0) {
            phase_gemm[r].run(m, a, w, n, row + r * C, F);
          } else {
            for (int64_t j = 0; j < m; ++j) std::fill_n(row + (r + j * win.sw) * C, C, 0.0f);
          }
        }
        const int64_t at = ((int64_t(b) * H + iy) * W) * C;
        finish_row(row, addend ? addend + at : nullptr, mask ? mask + at : nullptr, W * C);
      }
    }
  });
}

// The filter gradient of a convolution of one-channel images into dK
// (slice 0) and `parts` (slices 1..), as conv2d_one_channel's adjoint: for
// each output pixel, its register of filter gradients times each tap's
// broadcast input value, into one register a tap, so that the taps' sums
// do not wait on each other. libxsmm's products over the pixels of a row
// (K = 1 per tap) ran at about 40 GFLOP/s here.
// F a multiple of kLanes and at most kOneChannelMaxTaps taps (one_channel_kernel_applies).
void filter_gradient_one_channel(const Window2D& win, const TensorRef& x, const TensorRef& g, float* dkernel,
                                 float* parts, int64_t slices, const KernelContext& ctx) {
  const int64_t B = x.shape[0], H = x.shape[1], W = x.shape[2];
  const int64_t Ho = g.shape[1], Wo = g.shape[2], F = g.shape[3], taps = win.kh * win.kw;
  const int64_t hp = H + win.pad_top + win.pad_bottom, wp = W + win.pad_left + win.pad_right;
  const float* px = x.f();
  const float* pg = g.f();
  int64_t offset[kOneChannelMaxTaps];  // tap t's input value, from the window's corner
  for (int64_t t = 0; t < taps; ++t) offset[t] = (t / win.kw) * win.dh * wp + (t % win.kw) * win.dw;
  thread_local SlotBuffers<float> images_tl;  // the caller's: a padded image per worker slot
  const auto images = images_tl.prepare(ctx.pool, size_t(hp * wp));
  parallel_for(ctx.pool, size_t(slices), 1, [&](size_t s0, size_t s1) {
    float* const buffer = images.mine();
    for (size_t s = s0; s < s1; ++s) {
      float* acc_out = s == 0 ? dkernel : parts + (int64_t(s) - 1) * taps * F;
      const int64_t first = B * int64_t(s) / slices, last = B * (int64_t(s) + 1) / slices;
      // With the tap count a constant (3x3) the sums stay in registers.
      auto run = [&](auto taps_c, int64_t f0) {
        constexpr int64_t kTaps = decltype(taps_c)::value;
        const int64_t n = kTaps ? kTaps : taps;
        Vec acc[kTaps ? kTaps : kOneChannelMaxTaps];
        for (int64_t t = 0; t < n; ++t) acc[t] = Vec{};
        for (int64_t b = first; b < last; ++b) {
          const float* img = padded<float>(px + b * H * W, H, W, 1, hp, wp, win.pad_top, win.pad_left, 1, buffer);
          for (int64_t oy = 0; oy < Ho; ++oy)
            for (int64_t ox = 0; ox < Wo; ++ox) {
              const Vec gv = load_vec(pg + ((b * Ho + oy) * Wo + ox) * F + f0);
              const float* at = img + oy * win.sh * wp + ox * win.sw;
              for (int64_t t = 0; t < n; ++t) acc[t] += broadcast_vec(at + offset[t]) * gv;
            }
        }
        for (int64_t t = 0; t < n; ++t) store_vec(acc_out + t * F + f0, acc[t]);
      };
      for (int64_t f0 = 0; f0 < F; f0 += kLanes) {
        if (taps == 9) run(std::integral_constant<int64_t, 9>{}, f0);
        else run(std::integral_constant<int64_t, 0>{}, f0);
      }
    }
  });
}

// Below this many channels the unit-stride filter gradient copies the taps'
// windows out as rows (see filter_gradient_rows).
constexpr int64_t kFewChannels = 8;

// The filter gradient of a width-unit-stride convolution into dK (slice 0)
// and the partial sums `parts` (slices 1..): per image and tap, dK_tap{C, F}
// += sum over output rows oy of X{C, wo} g_oy{wo, F}, one batch-reduce GEMM
// over the rows, where X is the tap's window of the image transposed to
// channels first (row c of X is wo consecutive pixels of channel c). Against
// im2col and a transposed GEMM this writes no kh*kw-times larger patch
// matrix: the transposed image is the size of the image. For bfloat16 the
// inner size wo is Wo rounded up to even: g's rows are packed in VNNI pairs
// of pixels with a zero pad, and the planes carry a zero column past each
// row, so the pad pixel reads a zero. False, with nothing written, when
// libxsmm has no bfloat16 kernel for the shape.
template <class T>
bool filter_gradient_rows(const Window2D& win, const TensorRef& x, const TensorRef& g, float* dkernel, float* parts,
                          int64_t slices, const KernelContext& ctx) {
  const int64_t B = x.shape[0], H = x.shape[1], W = x.shape[2], C = x.shape[3];
  const int64_t Ho = g.shape[1], Wo = g.shape[2], F = g.shape[3], K = win.kh * win.kw * C;
  constexpr bool kBf16 = std::is_same_v<T, bf16>;
  const int64_t wo = kBf16 ? even_k(Wo) : Wo;
  const int64_t hp = H + win.pad_top + win.pad_bottom, wp = W + win.pad_left + win.pad_right + (kBf16 ? 1 : 0);
  const int64_t plane = hp * wp;
  const bool few = C < kFewChannels;
  const float* px = x.f();
  const float* pg = g.f();
  // Rows of the A operands: the taps' windows (few channels), else channels of the transposed image.
  const BatchReduceGemm<T> gemm_rows(few ? K : C, F, wo, few ? Ho * wo : plane, F, F, 1.0f);
  if (kBf16 && !gemm_rows.complete(few ? K : C)) return false;
  // The caller's: per worker slot the image's planes, the taps' windows (few
  // channels), g's rows in pairs (bfloat16) and the rows' pointers.
  thread_local SlotBuffers<T> plane_slots_tl, window_slots_tl, pair_slots_tl;
  thread_local SlotBuffers<const T*> a_slots_tl, b_slots_tl;
  const auto plane_slots = plane_slots_tl.prepare(ctx.pool, size_t(C * plane));
  const auto window_slots = window_slots_tl.prepare(ctx.pool, size_t(few ? K * Ho * wo : 0));
  const auto pair_slots = pair_slots_tl.prepare(ctx.pool, size_t(kBf16 ? Ho * wo * F : 0));
  const auto a_slots = a_slots_tl.prepare(ctx.pool, size_t(Ho));
  const auto b_slots = b_slots_tl.prepare(ctx.pool, size_t(Ho));
  parallel_for(ctx.pool, size_t(slices), 1, [&](size_t s0, size_t s1) {
    T* const planes = plane_slots.mine();
    T* const window_rows = few ? window_slots.mine() : nullptr;
    T* const g_pairs = kBf16 ? pair_slots.mine() : nullptr;
    const T** const a = a_slots.mine();
    const T** const b_rows = b_slots.mine();
    for (size_t s = s0; s < s1; ++s) {
      float* acc = s == 0 ? dkernel : parts + (int64_t(s) - 1) * K * F;
      std::fill(acc, acc + K * F, 0.0f);
      const int64_t first = B * int64_t(s) / slices, last = B * (int64_t(s) + 1) / slices;
      for (int64_t b = first; b < last; ++b) {
        std::fill(planes, planes + C * plane, T(0));
        const float* img = px + b * H * W * C;
        for (int64_t y = 0; y < H; ++y)
          for (int64_t x0 = 0; x0 < W; ++x0) {
            const float* pixel = img + (y * W + x0) * C;
            T* dst = planes + (y + win.pad_top) * wp + x0 + win.pad_left;
            for (int64_t c = 0; c < C; ++c) {
              if constexpr (kBf16) dst[c * plane] = to_bf16(pixel[c]);
              else dst[c * plane] = pixel[c];
            }
          }
        const float* gb = pg + b * Ho * Wo * F;
        for (int64_t oy = 0; oy < Ho; ++oy) {
          if constexpr (kBf16) {
            pack_vnni_bf16(gb + oy * Wo * F, F, false, Wo, F, g_pairs + oy * wo * F);
            b_rows[size_t(oy)] = g_pairs + oy * wo * F;
          } else {
            b_rows[size_t(oy)] = gb + oy * Wo * F;
          }
        }
        if (few) {
          // Few channels: a GEMM of C rows is mostly overhead, so the taps'
          // windows are copied out as the rows of one matrix {K, Ho*wo}
          // (the patch matrix transposed, small here) and one batch-reduce
          // GEMM over the output rows gives all of dK.
          for (int64_t ky = 0; ky < win.kh; ++ky)
            for (int64_t kx = 0; kx < win.kw; ++kx)
              for (int64_t c = 0; c < C; ++c) {
                T* row = window_rows + ((ky * win.kw + kx) * C + c) * Ho * wo;
                for (int64_t oy = 0; oy < Ho; ++oy)
                  std::memcpy(row + oy * wo, planes + c * plane + (oy * win.sh + ky * win.dh) * wp + kx * win.dw,
                              size_t(wo) * sizeof(T));
              }
          for (int64_t oy = 0; oy < Ho; ++oy) a[size_t(oy)] = window_rows + oy * wo;
          gemm_rows.run(K, a, b_rows, Ho, acc, Ho * wo);
          continue;
        }
        for (int64_t ky = 0; ky < win.kh; ++ky)
          for (int64_t kx = 0; kx < win.kw; ++kx) {
            for (int64_t oy = 0; oy < Ho; ++oy)
              a[size_t(oy)] = planes + (oy * win.sh + ky * win.dh) * wp + kx * win.dw;
            gemm_rows.run(C, a, b_rows, Ho, acc + (ky * win.kw + kx) * C * F, plane);
          }
      }
    }
  });
  return true;
}
}  // namespace

namespace {
// conv2d's paths; image_sums (null: none) as winograd_conv2d's.
void conv2d_any(const Window2D& win, const TensorRef& x, const TensorRef& kernel, const TensorRef& y,
                const KernelContext& ctx, const float* bias, bool relu, double* image_sums) {
  const int64_t C = x.shape[3], Wo = y.shape[2], F = y.shape[3], taps = win.kh * win.kw;
  if (ctx.bf16 && bf16_convolutions()) {
    const int64_t cp = even_k(C);
    const BatchReduceGemm<bf16> gemm_rows(Wo, F, cp, win.sw * cp, F, F);
    if (gemm_rows.complete(Wo)) {
      thread_local std::vector<bf16> packed;  // the caller's; the workers only read it
      packed.resize(size_t(taps * cp * F));
      for (int64_t t = 0; t < taps; ++t)
        pack_vnni_bf16(kernel.f() + t * C * F, F, false, C, F, packed.data() + t * cp * F);
      return conv2d_rows<bf16>(win, x, packed.data(), cp, gemm_rows, y, ctx, bias, relu, image_sums);
    }
  }
  if (winograd_applies(win, C, F)) return winograd_conv2d(win, x, kernel, y, ctx, bias, relu, image_sums);
  if (one_channel_kernel_applies(win, C, F))
    return conv2d_one_channel(win, x, kernel.f(), y, ctx, bias, relu, image_sums);
  const BatchReduceGemm<float> gemm_rows(Wo, F, C, win.sw * C, F, F);
  conv2d_rows<float>(win, x, kernel.f(), C, gemm_rows, y, ctx, bias, relu, image_sums);
}
}  // namespace

void conv2d(const Window2D& win, const TensorRef& x, const TensorRef& kernel, const TensorRef& y,
            const KernelContext& ctx, const float* bias, bool relu, float* stats) {
  if (win.groups != 1) return grouped_conv2d(win, x, kernel, y, ctx, bias, relu, stats);
  if (!stats) return conv2d_any(win, x, kernel, y, ctx, bias, relu, nullptr);
  const int64_t B = y.shape[0], pixels = y.shape[1] * y.shape[2], F = y.shape[3];
  thread_local std::vector<double> image_sums;  // the caller's; image b's at 2 F b
  image_sums.assign(size_t(B * 2 * F), 0.0);
  conv2d_any(win, x, kernel, y, ctx, bias, relu, image_sums.data());
  stats_from_image_sums(image_sums.data(), B, B * pixels, F, stats);
}

void conv2d_backward_input(const Window2D& win, const TensorRef& g, const TensorRef& kernel, const TensorRef& dx,
                           const KernelContext& ctx, const float* addend, const float* mask) {
  if (win.groups != 1) return grouped_conv2d_backward_input(win, g, kernel, dx, ctx, addend, mask);
  const int64_t W = dx.shape[2], C = dx.shape[3], F = g.shape[3], taps = win.kh * win.kw;
  const float* pk = kernel.f();
  if (win.sh == 1 && win.sw == 1) {
    if (ctx.bf16 && bf16_convolutions()) {
      const int64_t fp = even_k(F);
      const BatchReduceGemm<bf16> gemm_rows(W, C, fp, fp, C, C);
      if (gemm_rows.complete(W)) {
        thread_local std::vector<bf16> packed;  // the caller's; the workers only read it
        packed.resize(size_t(taps * fp * C));
        for (int64_t t = 0; t < taps; ++t) pack_vnni_bf16(pk + t * C * F, F, true, F, C, packed.data() + t * fp * C);
        return conv2d_input_rows<bf16>(win, g, packed.data(), fp, gemm_rows, dx, ctx, addend, mask);
      }
    }
    if (winograd_applies(win, C, F)) return winograd_conv2d_backward_input(win, g, kernel, dx, ctx, addend, mask);
  }
  thread_local std::vector<float> kernel_t;  // the caller's; the workers only read it
  kernel_t.resize(size_t(taps * C * F));
  for (int64_t t = 0; t < taps; ++t)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t f = 0; f < F; ++f) kernel_t[size_t((t * F + f) * C + c)] = pk[(t * C + c) * F + f];
  if (win.sh == 1 && win.sw == 1) {
    const BatchReduceGemm<float> gemm_rows(W, C, F, F, C, C);
    return conv2d_input_rows<float>(win, g, kernel_t.data(), F, gemm_rows, dx, ctx, addend, mask);
  }
  // Strided: float32 under both policies.
  conv2d_input_phases(win, g, kernel_t.data(), dx, ctx, addend, mask);
}

void conv2d_backward_filter(const Window2D& win, const TensorRef& x, const TensorRef& g, const TensorRef& dkernel,
                            const KernelContext& ctx) {
  if (win.groups != 1) return grouped_conv2d_backward_filter(win, x, g, dkernel, ctx);
  const int64_t B = x.shape[0], H = x.shape[1], W = x.shape[2], C = x.shape[3];
  const int64_t Ho = g.shape[1], Wo = g.shape[2], F = g.shape[3], K = win.kh * win.kw * C;
  const float* px = x.f();
  const float* pg = g.f();
  // One accumulator per slice of the batch, summed at the end in order. The
  // slices depend on the shapes only, not the threads, so the gradient is
  // the same at any thread count, and a slice a descheduled worker holds is
  // a small part of the work (ComputePool): up to 16, fewer when their
  // accumulators would pass 4M floats.
  constexpr int64_t kMaxSlices = 16, kPartialFloats = int64_t(1) << 22;
  const int64_t slices = std::min({B, kMaxSlices, std::max<int64_t>(1, kPartialFloats / std::max<int64_t>(1, K * F))});
  if (slices == 0) {
    std::fill(dkernel.f(), dkernel.f() + dkernel.numel(), 0.0f);
    return;
  }
  thread_local std::vector<float> partial;  // the caller's; each worker writes its own slice
  partial.resize(size_t(std::max<int64_t>(slices - 1, 0) * K * F));
  float* parts = partial.data();  // named in the task, `partial` would be each worker's own
  // Under mixed_bfloat16 the bfloat16 rows run where they pay and libxsmm
  // has their kernel; every other case takes the float32 backend's path
  // (Winograd included), so the policy's float32 fallback gives the float32
  // backend's bits.
  const bool one_channel = one_channel_kernel_applies(win, C, F);
  const bool in_bf16 = ctx.bf16 && bf16_convolutions() && win.sw == 1 && !one_channel &&
                       bf16_pays(C < kFewChannels ? K : C, F, Wo) &&
                       filter_gradient_rows<bf16>(win, x, g, dkernel.f(), parts, slices, ctx);
  if (!in_bf16 && winograd_filter_applies(win, C, F, Ho, Wo))
    return winograd_conv2d_backward_filter(win, x, g, dkernel, ctx);
  if (in_bf16) {
    // the bfloat16 rows are done
  } else if (one_channel) {
    // float32 under both policies
    filter_gradient_one_channel(win, x, g, dkernel.f(), parts, slices, ctx);
  } else if (win.sw == 1) {
    // Per tap a GEMM of {C, F} over the row's pixels (few channels: {K, F}).
    filter_gradient_rows<float>(win, x, g, dkernel.f(), parts, slices, ctx);
  } else {
    // Strided along the width: im2col per image and a transposed GEMM
    // (float32 under both policies).
    thread_local SlotBuffers<float> col_slots_tl;  // the caller's: a patch matrix per worker slot
    const auto col_slots = col_slots_tl.prepare(ctx.pool, size_t(Ho * Wo * K));
    parallel_for(ctx.pool, size_t(slices), 1, [&](size_t s0, size_t s1) {
      float* const cols = col_slots.mine();
      for (size_t s = s0; s < s1; ++s) {
        float* acc = s == 0 ? dkernel.f() : parts + (int64_t(s) - 1) * K * F;
        const int64_t first = B * int64_t(s) / slices, last = B * (int64_t(s) + 1) / slices;
        for (int64_t b = first; b < last; ++b) {
          const TensorRef image{const_cast<float*>(px) + b * H * W * C, Shape{1, H, W, C}};
          const TensorRef col_ref{cols, Shape{Ho * Wo, K}};
          im2col(win, image, col_ref, KernelContext{});
          gemm(K, F, Ho * Wo, cols, K, true, pg + b * Ho * Wo * F, F, acc, F, b == first ? 0.0f : 1.0f);
        }
      }
    });
  }
  float* out = dkernel.f();
  for (int64_t s = 1; s < slices; ++s) {
    const float* p = partial.data() + (s - 1) * K * F;
    for (int64_t i = 0; i < K * F; ++i) out[i] += p[i];
  }
}

}  // namespace tensorgrad::kernels
