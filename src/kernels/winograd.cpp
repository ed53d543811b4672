// 3x3 convolutions with unit stride and no dilation by Winograd's minimal
// filtering F(m x m, 3x3) (Lavin and Gray, "Fast Algorithms for
// Convolutional Neural Networks", 2016): each m x m block of outputs (a
// tile) is A^T [(G k G^T) . (B^T d B)] A over the (m + 2) x (m + 2) input
// patch d around it, so the products are (m + 2)^2 per tile and channel
// pair where the direct sum needs 9 m^2: 16 for 36 with m = 2, 36 for 144
// with m = 4. The elementwise products over the channels are one GEMM per
// point of the transform, over a chunk of tiles. F(4x4) serves images of 8
// or more outputs a side, F(2x2) smaller ones (whose tiles of 4 would be
// mostly padding). The transforms' coefficients are small (0, +-1, +-2, +-4,
// +-5, +-8 and 1/2, 1/4, 1/6, 1/12, 1/24), so the result differs from the
// direct sum by a few roundings (tests bound it).
//
// One routine serves the forward pass and the input gradient (the forward
// form over the output gradient with the kernel turned by 180 degrees and
// its channel axes swapped). The filter gradient stays direct (conv.cpp):
// written as dk = G^T [sum over tiles (A g A^T) . (B^T d B)] G with F(2x2)
// it was no faster on the resnet's shapes (its two transforms and two
// padded copies cost what the fewer products save; BENCHMARKS.md).
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
constexpr int64_t kTileChunk = 128;   // tiles per chunk (32 and 64 measured no faster at m = 2)

// Floats between the starts of consecutive points' matrices {chunk, n}: one
// cache line past the matrix, so that the points of a tile, written or read
// together, fall in different cache sets (at a power-of-two distance, as
// 128 tiles of 16 channels are, they shared one set of the L1 and ran at
// half the speed).
int64_t point_stride(int64_t chunk, int64_t n) { return chunk * n + 16; }

// The transforms' steps run over the channels, one register of floats at a
// time: 16 with AVX-512 (one channel block of the resnet per step), 8 with
// AVX (two 16-float vectors need 32 of AVX2's 16 registers for a tile's
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
inline float load1(const float* p) { return *p; }
inline void store1(float* p, float v) { *p = v; }

// The one-dimensional transforms of F(m, 3), m = kM: the kernel's
// u = G g (3 -> kM + 2 values), the input's t = B^T d (kM + 2 -> kM + 2)
// and the output's y = A^T m (kM + 2 -> kM). V is a register of channels
// or one float.
template <int kM>
struct Minimal;
template <>
struct Minimal<2> {
  // G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]
  static void kernel(const float g[3], float u[4]) {
    u[0] = g[0];
    u[1] = (g[0] + g[1] + g[2]) * 0.5f;
    u[2] = (g[0] - g[1] + g[2]) * 0.5f;
    u[3] = g[2];
  }
  // B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]
  template <class V>
  static void input(const V d[4], V t[4]) {
    t[0] = d[0] - d[2];
    t[1] = d[1] + d[2];
    t[2] = d[2] - d[1];
    t[3] = d[1] - d[3];
  }
  // A^T = [1 1 1 0; 0 1 -1 -1]
  template <class V>
  static void output(const V m[4], V y[2]) {
    y[0] = m[0] + m[1] + m[2];
    y[1] = m[1] - m[2] - m[3];
  }
};
template <>
struct Minimal<4> {
  // G = [1/4 0 0; -1/6 -1/6 -1/6; -1/6 1/6 -1/6; 1/24 1/12 1/6;
  //      1/24 -1/12 1/6; 0 0 1]
  static void kernel(const float g[3], float u[6]) {
    u[0] = g[0] * 0.25f;
    u[1] = (g[0] + g[1] + g[2]) * (-1.0f / 6.0f);
    u[2] = (g[0] - g[1] + g[2]) * (-1.0f / 6.0f);
    u[3] = g[0] * (1.0f / 24.0f) + g[1] * (1.0f / 12.0f) + g[2] * (1.0f / 6.0f);
    u[4] = g[0] * (1.0f / 24.0f) - g[1] * (1.0f / 12.0f) + g[2] * (1.0f / 6.0f);
    u[5] = g[2];
  }
  // B^T = [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0; 0 -2 -1 2 1 0;
  //        0 2 -1 -2 1 0; 0 4 0 -5 0 1]
  template <class V>
  static void input(const V d[6], V t[6]) {
    const V d4_minus_4d2 = d[4] - 4.0f * d[2], d3_minus_4d1 = d[3] - 4.0f * d[1];
    const V d4_minus_d2 = d[4] - d[2], twice_d3_minus_d1 = 2.0f * (d[3] - d[1]);
    t[0] = 4.0f * d[0] - 5.0f * d[2] + d[4];
    t[1] = d4_minus_4d2 + d3_minus_4d1;
    t[2] = d4_minus_4d2 - d3_minus_4d1;
    t[3] = d4_minus_d2 + twice_d3_minus_d1;
    t[4] = d4_minus_d2 - twice_d3_minus_d1;
    t[5] = 4.0f * d[1] - 5.0f * d[3] + d[5];
  }
  // A^T = [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1]
  template <class V>
  static void output(const V m[6], V y[4]) {
    const V sum12 = m[1] + m[2], diff12 = m[1] - m[2], sum34 = m[3] + m[4], diff34 = m[3] - m[4];
    y[0] = m[0] + sum12 + sum34;
    y[1] = diff12 + 2.0f * diff34;
    y[2] = sum12 + 4.0f * sum34;
    y[3] = diff12 + 8.0f * diff34 + m[5];
  }
};

// The two-dimensional transforms over one tile and the channels [ch, ch +
// n) (n = kLanes on Vec, 1 on float), the points at a stride.
template <int kM, class V, V (*Load)(const float*), void (*Store)(float*, V)>
struct Transforms {
  static constexpr int kAlpha = kM + 2;
  // out[p * out_stride] = (B^T d B)[p], d[i][j] at d + i * row + j * step.
  static void input(const float* d, int64_t row, int64_t step, float* out, int64_t out_stride) {
    V t[kAlpha][kAlpha];
    for (int j = 0; j < kAlpha; ++j) {
      V column[kAlpha], tc[kAlpha];
      for (int i = 0; i < kAlpha; ++i) column[i] = Load(d + i * row + j * step);
      Minimal<kM>::input(column, tc);
      for (int i = 0; i < kAlpha; ++i) t[i][j] = tc[i];
    }
    for (int r = 0; r < kAlpha; ++r) {
      V o[kAlpha];
      Minimal<kM>::input(t[r], o);
      for (int j = 0; j < kAlpha; ++j) Store(out + (r * kAlpha + j) * out_stride, o[j]);
    }
  }
  // y[r][s] = (A^T m A)[r][s], m[p] at m + p * stride.
  static void output(const float* m, int64_t stride, V y[kM][kM]) {
    V u[kM][kAlpha];
    for (int j = 0; j < kAlpha; ++j) {
      V column[kAlpha], uc[kM];
      for (int i = 0; i < kAlpha; ++i) column[i] = Load(m + (i * kAlpha + j) * stride);
      Minimal<kM>::output(column, uc);
      for (int r = 0; r < kM; ++r) u[r][j] = uc[r];
    }
    for (int r = 0; r < kM; ++r) Minimal<kM>::output(u[r], y[r]);
  }
};

// The tiles of one image: th x tw tiles of kM x kM outputs, read from a
// zero-padded copy {kM th + 2, kM tw + 2, c} of the input with the image at
// (pad_top, pad_left).
template <int kM>
struct Tiling {
  int64_t th = 0, tw = 0, hp = 0, wp = 0;
  Tiling(int64_t out_h, int64_t out_w)
      : th((out_h + kM - 1) / kM), tw((out_w + kM - 1) / kM), hp(th * kM + 2), wp(tw * kM + 2) {}
  int64_t tiles() const { return th * tw; }
};

// u[p]{ci, co} = (G k G^T)[p] for k{3, 3, ci, co}.
template <int kM>
void transform_kernel(const float* k, int64_t ci, int64_t co, float* u) {
  constexpr int kAlpha = kM + 2;
  const int64_t n = ci * co;
  for (int64_t e = 0; e < n; ++e) {
    float t[kAlpha][3];
    for (int j = 0; j < 3; ++j) {
      const float column[3] = {k[j * n + e], k[(3 + j) * n + e], k[(6 + j) * n + e]};
      float tc[kAlpha];
      Minimal<kM>::kernel(column, tc);
      for (int i = 0; i < kAlpha; ++i) t[i][j] = tc[i];
    }
    for (int i = 0; i < kAlpha; ++i) {
      float row[kAlpha];
      Minimal<kM>::kernel(t[i], row);
      for (int j = 0; j < kAlpha; ++j) u[(i * kAlpha + j) * n + e] = row[j];
    }
  }
}

// v[p]{chunk, c} = (B^T d B)[p] for the tiles t0 .. t0 + chunk - 1 of the
// padded image.
template <int kM>
void transform_input(const float* padded_img, const Tiling<kM>& tl, int64_t c, int64_t t0, int64_t chunk, float* v,
                     int64_t stride) {
  using Vector = Transforms<kM, Vec, load_vec, store_vec>;
  using Scalar = Transforms<kM, float, load1, store1>;
  const int64_t row = tl.wp * c, cv = c / kLanes * kLanes;
  for (int64_t i = 0; i < chunk; ++i) {
    const int64_t t = t0 + i;
    float* out = v + i * c;
    const float* d = padded_img + ((t / tl.tw) * kM * tl.wp + (t % tl.tw) * kM) * c;
    int64_t ch = 0;
    for (; ch < cv; ch += kLanes) Vector::input(d + ch, row, c, out + ch, stride);
    for (; ch < c; ++ch) Scalar::input(d + ch, row, c, out + ch, stride);
  }
}

// y's kM x kM blocks of the tiles t0 .. t0 + chunk - 1 (clipped at y's
// edge) = A^T m[p] A, then + bias, relu, + addend (each optional; the order
// of the direct kernels).
template <int kM, class T>
void write_block(T (&block)[kM][kM], int64_t rows, int64_t cols, int64_t ch, int64_t f, int64_t out_w, float* y,
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

template <int kM>
void transform_output(const float* m, int64_t stride, const Tiling<kM>& tl, int64_t f, int64_t t0, int64_t chunk,
                      int64_t out_h, int64_t out_w, float* y, const float* bias, bool relu, const float* addend) {
  using Vector = Transforms<kM, Vec, load_vec, store_vec>;
  using Scalar = Transforms<kM, float, load1, store1>;
  const int64_t fv = f / kLanes * kLanes;
  for (int64_t i = 0; i < chunk; ++i) {
    const int64_t t = t0 + i, oy = (t / tl.tw) * kM, ox = (t % tl.tw) * kM;
    const int64_t rows = std::min<int64_t>(kM, out_h - oy), cols = std::min<int64_t>(kM, out_w - ox);
    float* corner = y + (oy * out_w + ox) * f;
    const float* add = addend ? addend + (oy * out_w + ox) * f : nullptr;
    int64_t ch = 0;
    for (; ch < fv; ch += kLanes) {
      Vec block[kM][kM];
      Vector::output(m + i * f + ch, stride, block);
      write_block<kM>(block, rows, cols, ch, f, out_w, corner, bias, relu, add, load_vec, store_vec);
    }
    for (; ch < f; ++ch) {
      float block[kM][kM];
      Scalar::output(m + i * f + ch, stride, block);
      write_block<kM>(block, rows, cols, ch, f, out_w, corner, bias, relu, add, load1, store1);
    }
  }
}

// out{B, out_h, out_w, co} = the correlation of in{B, h, w, ci} (zero outside,
// placed at (pad_top, pad_left)) with the 3x3 kernel k{3, 3, ci, co}, one
// image per task.
template <int kM>
void winograd_correlate(const TensorRef& in, int64_t pad_top, int64_t pad_left, const float* k, const TensorRef& out,
                        const KernelContext& ctx, const float* bias, bool relu, const float* addend) {
  constexpr int64_t kPoints = (kM + 2) * (kM + 2);
  const int64_t B = in.shape[0], h = in.shape[1], w = in.shape[2], ci = in.shape[3];
  const int64_t out_h = out.shape[1], out_w = out.shape[2], co = out.shape[3];
  thread_local std::vector<float> u_buffer;  // the caller's; the workers only read it
  u_buffer.resize(size_t(kPoints * ci * co));
  const float* u = u_buffer.data();
  transform_kernel<kM>(k, ci, co, u_buffer.data());
  const Tiling<kM> tl(out_h, out_w);
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
        transform_input<kM>(img, tl, ci, t0, chunk, v, v_stride);
        for (int64_t p = 0; p < kPoints; ++p) {
          const float* a = v + p * v_stride;
          const float* kp = u + p * ci * co;
          (chunk == chunk_max ? gemm_full : gemm_last).run(chunk, &a, &kp, 1, m + p * m_stride, ci);
        }
        transform_output<kM>(m, m_stride, tl, co, t0, chunk, out_h, out_w, y, bias, relu, add);
      }
    }
  });
}

// F(4x4) where the image has 8 or more outputs a side, else F(2x2).
void correlate(const TensorRef& in, int64_t pad_top, int64_t pad_left, const float* k, const TensorRef& out,
               const KernelContext& ctx, const float* bias, bool relu, const float* addend) {
  if (out.shape[1] >= 8 && out.shape[2] >= 8)
    winograd_correlate<4>(in, pad_top, pad_left, k, out, ctx, bias, relu, addend);
  else
    winograd_correlate<2>(in, pad_top, pad_left, k, out, ctx, bias, relu, addend);
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
  correlate(x, win.pad_top, win.pad_left, kernel.f(), y, ctx, bias, relu, nullptr);
}

void winograd_conv2d_backward_input(const Window2D& win, const TensorRef& g, const TensorRef& kernel,
                                    const TensorRef& dx, const KernelContext& ctx, const float* addend) {
  const int64_t C = dx.shape[3], F = g.shape[3];
  thread_local std::vector<float> turned;  // the caller's; the workers never read it
  turned.resize(size_t(9 * F * C));
  const float* pk = kernel.f();
  for (int64_t t = 0; t < 9; ++t)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t f = 0; f < F; ++f) turned[size_t(((8 - t) * F + f) * C + c)] = pk[(t * C + c) * F + f];
  correlate(g, 2 - win.pad_top, 2 - win.pad_left, turned.data(), dx, ctx, nullptr, false, addend);
}

}  // namespace tensorgrad::kernels
