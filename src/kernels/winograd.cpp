// 3x3 convolutions with unit stride and no dilation by Winograd's minimal
// filtering F(2x2, 3x3) (Lavin and Gray, "Fast Algorithms for Convolutional
// Neural Networks", 2016): each 2x2 block of outputs (a tile) is
// A^T [(G k G^T) . (B^T d B)] A over the 4x4 input patch d around it, so the
// products are 16 per tile and channel pair where the direct sum needs 36.
// The 16 elementwise products over the channels are 16 GEMMs, one per point
// of the 4x4 transform, over a chunk of tiles. The transforms' coefficients
// are 0, +-1 and 1/2, so they round like a handful of additions; the result
// differs from the direct sum in the last bits only (tests bound it).
//
// One routine serves the forward pass and the input gradient (the forward
// form over the output gradient with the kernel turned by 180 degrees and
// its channel axes swapped). The filter gradient stays direct (conv.cpp):
// written as dk = G^T [sum over tiles (A g A^T) . (B^T d B)] G it was no
// faster on the resnet's shapes (its two transforms and two padded copies
// cost what the fewer products save; BENCHMARKS.md).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "kernels/batch_reduce_gemm.h"
#include "kernels/kernels.h"
#include "tensorgrad/backend/backend.h"

namespace tensorgrad {
namespace {
std::atomic<bool> winograd_on{true};
}
void set_winograd_convolutions(bool enabled) { winograd_on.store(enabled, std::memory_order_relaxed); }
bool winograd_convolutions() { return winograd_on.load(std::memory_order_relaxed); }
}  // namespace tensorgrad

namespace tensorgrad::kernels {

namespace {
constexpr int64_t kPoints = 16;       // the 4x4 transform's points
constexpr int64_t kTileChunk = 128;   // tiles per chunk (32 and 64 measured no faster)

// Floats between the starts of consecutive points' matrices {chunk, n}: one
// cache line past the matrix, so that the 16 points of a tile, written or
// read together, fall in different cache sets (at a power-of-two distance,
// as 128 tiles of 16 channels are, they shared one set of the L1 and ran at
// half the speed).
int64_t point_stride(int64_t chunk, int64_t n) { return chunk * n + 16; }

// u[p]{ci, co} = (G k G^T)[p] for k{3, 3, ci, co}, with G = [1 0 0; 1/2 1/2
// 1/2; 1/2 -1/2 1/2; 0 0 1].
void transform_kernel(const float* k, int64_t ci, int64_t co, float* u) {
  const int64_t n = ci * co;
  for (int64_t e = 0; e < n; ++e) {
    float g[3][3], t[4][3];
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) g[i][j] = k[(i * 3 + j) * n + e];
    for (int j = 0; j < 3; ++j) {
      t[0][j] = g[0][j];
      t[1][j] = (g[0][j] + g[1][j] + g[2][j]) * 0.5f;
      t[2][j] = (g[0][j] - g[1][j] + g[2][j]) * 0.5f;
      t[3][j] = g[2][j];
    }
    for (int i = 0; i < 4; ++i) {
      u[(i * 4 + 0) * n + e] = t[i][0];
      u[(i * 4 + 1) * n + e] = (t[i][0] + t[i][1] + t[i][2]) * 0.5f;
      u[(i * 4 + 2) * n + e] = (t[i][0] - t[i][1] + t[i][2]) * 0.5f;
      u[(i * 4 + 3) * n + e] = t[i][2];
    }
  }
}

// The tiles of one image: th x tw tiles of 2x2 outputs, read from a
// zero-padded copy {2 th + 2, 2 tw + 2, c} of the input with the image at
// (pad_top, pad_left).
struct Tiling {
  int64_t th = 0, tw = 0, hp = 0, wp = 0;
  Tiling(int64_t out_h, int64_t out_w) : th((out_h + 1) / 2), tw((out_w + 1) / 2), hp(th * 2 + 2), wp(tw * 2 + 2) {}
  int64_t tiles() const { return th * tw; }
};

// The transforms' steps run over the channels, one register of floats at a
// time: 16 with AVX-512 (one channel block of the resnet per step), 8 with
// AVX (two 16-float vectors need 32 of AVX2's 16 registers for a tile's 16
// points and spill), else 4 (SSE).
#if defined(__AVX512F__)
constexpr int kLanes = 16;
#elif defined(__AVX__)
constexpr int kLanes = 8;
#else
constexpr int kLanes = 4;
#endif
typedef float Vec __attribute__((vector_size(kLanes * sizeof(float))));
inline Vec load_vec(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store_vec(float* p, Vec v) { std::memcpy(p, &v, sizeof v); }

// The 2D transforms, over one tile and channels [ch, ch + n) (n = kLanes on Vec,
// 1 on float), reading or writing the 16 points at a stride: one template
// for the vector steps and the scalar tail.
template <class V, V (*Load)(const float*), void (*Store)(float*, V)>
struct Transforms {
  // out[p * out_stride] = (B^T d B)[p], B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0;
  // 0 1 0 -1], d[i][j] at d + i * row + j * step.
  static void input(const float* d, int64_t row, int64_t step, float* out, int64_t out_stride) {
    V t[4][4];
    for (int j = 0; j < 4; ++j) {
      const V d0 = Load(d + j * step), d1 = Load(d + row + j * step), d2 = Load(d + 2 * row + j * step),
              d3 = Load(d + 3 * row + j * step);
      t[0][j] = d0 - d2;
      t[1][j] = d1 + d2;
      t[2][j] = d2 - d1;
      t[3][j] = d1 - d3;
    }
    for (int r = 0; r < 4; ++r) {
      Store(out + (r * 4 + 0) * out_stride, t[r][0] - t[r][2]);
      Store(out + (r * 4 + 1) * out_stride, t[r][1] + t[r][2]);
      Store(out + (r * 4 + 2) * out_stride, t[r][2] - t[r][1]);
      Store(out + (r * 4 + 3) * out_stride, t[r][1] - t[r][3]);
    }
  }
  // y[r][s] = (A^T m A)[r][s], A^T = [1 1 1 0; 0 1 -1 -1], m[p] at m + p * stride.
  static void output(const float* m, int64_t stride, V y[2][2]) {
    V u[2][4];
    for (int j = 0; j < 4; ++j) {
      const V m0 = Load(m + j * stride), m1 = Load(m + (4 + j) * stride), m2 = Load(m + (8 + j) * stride),
              m3 = Load(m + (12 + j) * stride);
      u[0][j] = m0 + m1 + m2;
      u[1][j] = m1 - m2 - m3;
    }
    for (int r = 0; r < 2; ++r) {
      y[r][0] = u[r][0] + u[r][1] + u[r][2];
      y[r][1] = u[r][1] - u[r][2] - u[r][3];
    }
  }
};
inline float load1(const float* p) { return *p; }
inline void store1(float* p, float v) { *p = v; }
using Vector = Transforms<Vec, load_vec, store_vec>;
using Scalar = Transforms<float, load1, store1>;

// v[p]{chunk, c} = (B^T d B)[p] for the tiles t0 .. t0 + chunk - 1 of the
// padded image (zeros for tiles past the last).
void transform_input(const float* padded_img, const Tiling& tl, int64_t c, int64_t t0, int64_t chunk, float* v,
                     int64_t stride) {
  const int64_t row = tl.wp * c, cv = c / kLanes * kLanes;
  for (int64_t i = 0; i < chunk; ++i) {
    const int64_t t = t0 + i;
    float* out = v + i * c;
    if (t >= tl.tiles()) {
      for (int64_t p = 0; p < kPoints; ++p) std::fill(out + p * stride, out + p * stride + c, 0.0f);
      continue;
    }
    const float* d = padded_img + ((t / tl.tw) * 2 * tl.wp + (t % tl.tw) * 2) * c;
    int64_t ch = 0;
    for (; ch < cv; ch += kLanes) Vector::input(d + ch, row, c, out + ch, stride);
    for (; ch < c; ++ch) Scalar::input(d + ch, row, c, out + ch, stride);
  }
}

// y's 2x2 blocks of the tiles t0 .. t0 + chunk - 1 (clipped at y's edge) =
// A^T m[p] A, then + bias, relu, + addend (each optional; the order of the
// direct kernels).
template <class T>
void write_block(T (&block)[2][2], int64_t rows, int64_t cols, int64_t ch, int64_t f, int64_t out_w, float* y,
                 const float* bias, bool relu, const float* addend, T (*load)(const float*),
                 void (*store)(float*, T)) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t s = 0; s < cols; ++s) {
      float* dst = y + (r * out_w + s) * f + ch;
      T value = block[r][s];
      if (bias) value += load(bias + ch);
      if (relu) value = value > T{} ? value : T{};
      if (addend) value += load(addend + (dst - y));
      store(dst, value);
    }
}

void transform_output(const float* m, int64_t stride, const Tiling& tl, int64_t f, int64_t t0, int64_t chunk,
                      int64_t out_h, int64_t out_w, float* y, const float* bias, bool relu, const float* addend) {
  const int64_t fv = f / kLanes * kLanes;
  for (int64_t i = 0; i < chunk && t0 + i < tl.tiles(); ++i) {
    const int64_t t = t0 + i, oy = (t / tl.tw) * 2, ox = (t % tl.tw) * 2;
    const int64_t rows = std::min<int64_t>(2, out_h - oy), cols = std::min<int64_t>(2, out_w - ox);
    float* corner = y + (oy * out_w + ox) * f;
    const float* add = addend ? addend + (oy * out_w + ox) * f : nullptr;
    int64_t ch = 0;
    for (; ch < fv; ch += kLanes) {
      Vec block[2][2];
      Vector::output(m + i * f + ch, stride, block);
      write_block(block, rows, cols, ch, f, out_w, corner, bias, relu, add, load_vec, store_vec);
    }
    for (; ch < f; ++ch) {
      float block[2][2];
      Scalar::output(m + i * f + ch, stride, block);
      write_block(block, rows, cols, ch, f, out_w, corner, bias, relu, add, load1, store1);
    }
  }
}

// out{B, out_h, out_w, co} = the correlation of in{B, h, w, ci} (zero outside,
// placed at (pad_top, pad_left)) with the kernel whose transform is u, one
// image per task.
void winograd_correlate(const TensorRef& in, int64_t pad_top, int64_t pad_left, const float* u, const TensorRef& out,
                        const KernelContext& ctx, const float* bias, bool relu, const float* addend) {
  const int64_t B = in.shape[0], h = in.shape[1], w = in.shape[2], ci = in.shape[3];
  const int64_t out_h = out.shape[1], out_w = out.shape[2], co = out.shape[3];
  const Tiling tl(out_h, out_w);
  const int64_t tiles = tl.tiles(), chunk_max = std::min(tiles, kTileChunk);
  const BatchReduceGemm<float> gemm_full(chunk_max, co, ci, ci, co, co);
  const BatchReduceGemm<float> gemm_last(tiles % chunk_max ? tiles % chunk_max : chunk_max, co, ci, ci, co, co);
  const float* pin = in.f();
  float* pout = out.f();
  parallel_for(ctx.pool, size_t(B), 1, [&](size_t b0, size_t b1) {
    thread_local std::vector<float> buffer, v_buffer, m_buffer;
    float* v = aligned64(v_buffer, size_t(kPoints * point_stride(chunk_max, ci)));
    float* m = aligned64(m_buffer, size_t(kPoints * point_stride(chunk_max, co)));
    for (size_t b = b0; b < b1; ++b) {
      const float* img = padded<float>(pin + int64_t(b) * h * w * ci, h, w, ci, tl.hp, tl.wp, pad_top, pad_left, ci,
                                       buffer);
      float* y = pout + int64_t(b) * out_h * out_w * co;
      const float* add = addend ? addend + int64_t(b) * out_h * out_w * co : nullptr;
      for (int64_t t0 = 0; t0 < tiles; t0 += kTileChunk) {
        const int64_t chunk = std::min(kTileChunk, tiles - t0);
        const int64_t v_stride = point_stride(chunk, ci), m_stride = point_stride(chunk, co);
        transform_input(img, tl, ci, t0, chunk, v, v_stride);
        for (int64_t p = 0; p < kPoints; ++p) {
          const float* a = v + p * v_stride;
          const float* k = u + p * ci * co;
          (chunk == chunk_max ? gemm_full : gemm_last).run(chunk, &a, &k, 1, m + p * m_stride, ci);
        }
        transform_output(m, m_stride, tl, co, t0, chunk, out_h, out_w, y, bias, relu, add);
      }
    }
  });
}
}  // namespace

bool winograd_applies(const Window2D& win, int64_t channels, int64_t filters) {
  const bool pads_small = win.pad_top >= 0 && win.pad_top <= 2 && win.pad_left >= 0 && win.pad_left <= 2 &&
                          win.pad_bottom >= 0 && win.pad_bottom <= 2 && win.pad_right >= 0 && win.pad_right <= 2;
  return win.kh == 3 && win.kw == 3 && win.sh == 1 && win.sw == 1 && win.dh == 1 && win.dw == 1 && pads_small &&
         channels >= kWinogradMinChannels && filters >= kWinogradMinChannels && winograd_convolutions();
}

void winograd_conv2d(const Window2D& win, const TensorRef& x, const TensorRef& kernel, const TensorRef& y,
                     const KernelContext& ctx, const float* bias, bool relu) {
  const int64_t C = x.shape[3], F = y.shape[3];
  thread_local std::vector<float> u;  // the caller's; the workers only read it
  u.resize(size_t(kPoints * C * F));
  transform_kernel(kernel.f(), C, F, u.data());
  winograd_correlate(x, win.pad_top, win.pad_left, u.data(), y, ctx, bias, relu, nullptr);
}

void winograd_conv2d_backward_input(const Window2D& win, const TensorRef& g, const TensorRef& kernel,
                                    const TensorRef& dx, const KernelContext& ctx, const float* addend) {
  const int64_t C = dx.shape[3], F = g.shape[3];
  thread_local std::vector<float> turned, u;  // the caller's; the workers only read u
  turned.resize(size_t(9 * F * C));
  const float* pk = kernel.f();
  for (int64_t t = 0; t < 9; ++t)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t f = 0; f < F; ++f) turned[size_t(((8 - t) * F + f) * C + c)] = pk[(t * C + c) * F + f];
  u.resize(size_t(kPoints * F * C));
  transform_kernel(turned.data(), F, C, u.data());
  winograd_correlate(g, 2 - win.pad_top, 2 - win.pad_left, u.data(), dx, ctx, nullptr, false, addend);
}

}  // namespace tensorgrad::kernels
