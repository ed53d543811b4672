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
// its channel axes swapped). The filter gradient is the same bilinear form
// read the other way, dk = G^T [sum over tiles (A g A^T) . (B^T d B)] G,
// the sum over tiles an outer product per point; by F(4x4) for images of 16
// or more outputs a side (a quarter faster than the direct kernel on the
// resnet's 28x28 layers). Smaller images keep the direct kernel (conv.cpp):
// there it was as fast or faster, by F(2x2) and F(4x4) alike (BENCHMARKS.md).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <immintrin.h>
#include <cstring>
#include <vector>

#include "kernels/batch_reduce_gemm.h"
#include "kernels/kernels.h"
#include "kernels/lanes.h"
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
// time (lanes.h): 16 with AVX-512 (one channel block of the resnet per
// step), 8 with AVX (two 16-float vectors need 32 of AVX2's 16 registers for
// a tile's points and spill), else 4 (SSE).
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
  // The filter gradient's: A g (4 -> 6) and G^T h (6 -> 3).
  template <class V>
  static void gradient(const V g[4], V a[6]) {
    const V even = g[0] + g[2], odd = g[1] + g[3], even4 = g[0] + 4.0f * g[2], odd8 = 2.0f * g[1] + 8.0f * g[3];
    a[0] = g[0];
    a[1] = even + odd;
    a[2] = even - odd;
    a[3] = even4 + odd8;
    a[4] = even4 - odd8;
    a[5] = g[3];
  }
  static void filter(const float h[6], float k[3]) {
    const float sum12 = h[1] + h[2], diff12 = h[1] - h[2], sum34 = h[3] + h[4], diff34 = h[3] - h[4];
    k[0] = h[0] * 0.25f - sum12 * (1.0f / 6.0f) + sum34 * (1.0f / 24.0f);
    k[1] = -diff12 * (1.0f / 6.0f) + diff34 * (1.0f / 12.0f);
    k[2] = -sum12 * (1.0f / 6.0f) + sum34 * (1.0f / 6.0f) + h[5];
  }
};

// The two-dimensional transforms over one tile and the channels [ch, ch +
// n) (n = kLanes on V = Vec, 1 on V = float), the points at a stride. The
// tile's values come from get(i, j): a load, or zero outside the image.
template <int kM, class V, void (*Store)(float*, V)>
struct Transforms {
  static constexpr int kAlpha = kM + 2;
  // out[p * out_stride] = (B^T d B)[p], d[i][j] = get(i, j).
  template <class Get>
  static void input(Get get, float* out, int64_t out_stride) {
    V t[kAlpha][kAlpha];
    for (int j = 0; j < kAlpha; ++j) {
      V column[kAlpha], tc[kAlpha];
      for (int i = 0; i < kAlpha; ++i) column[i] = get(i, j);
      Minimal<kM>::input(column, tc);
      for (int i = 0; i < kAlpha; ++i) t[i][j] = tc[i];
    }
    for (int r = 0; r < kAlpha; ++r) {
      V o[kAlpha];
      Minimal<kM>::input(t[r], o);
      for (int j = 0; j < kAlpha; ++j) Store(out + (r * kAlpha + j) * out_stride, o[j]);
    }
  }
  // y[r][s] = (A^T m A)[r][s], m[p] = get(p / kAlpha, p % kAlpha).
  template <class Get>
  static void output(Get get, V y[kM][kM]) {
    V u[kM][kAlpha];
    for (int j = 0; j < kAlpha; ++j) {
      V column[kAlpha], uc[kM];
      for (int i = 0; i < kAlpha; ++i) column[i] = get(i, j);
      Minimal<kM>::output(column, uc);
      for (int r = 0; r < kM; ++r) u[r][j] = uc[r];
    }
    for (int r = 0; r < kM; ++r) Minimal<kM>::output(u[r], y[r]);
  }
  // out[p * out_stride] = (A g A^T)[p] of a kM x kM gradient block, g[i][j]
  // = get(i, j).
  template <class Get>
  static void gradient(Get get, float* out, int64_t out_stride) {
    V t[kAlpha][kM];
    for (int j = 0; j < kM; ++j) {
      V column[kM], tc[kAlpha];
      for (int i = 0; i < kM; ++i) column[i] = get(i, j);
      Minimal<kM>::gradient(column, tc);
      for (int i = 0; i < kAlpha; ++i) t[i][j] = tc[i];
    }
    for (int r = 0; r < kAlpha; ++r) {
      V o[kAlpha];
      Minimal<kM>::gradient(t[r], o);
      for (int j = 0; j < kAlpha; ++j) Store(out + (r * kAlpha + j) * out_stride, o[j]);
    }
  }
};

// a * b + c in one rounding, spelled out: the vector steps and the scalar
// tail (std::fma) then round alike whatever the compiler contracts.
inline Vec fmadd(Vec a, Vec b, Vec c) {
#if defined(__AVX512F__)
  return Vec(_mm512_fmadd_ps(__m512(a), __m512(b), __m512(c)));
#elif defined(__FMA__)
  return Vec(_mm256_fmadd_ps(__m256(a), __m256(b), __m256(c)));
#else
  return a * b + c;
#endif
}

// d{c, f} += sum over t < n of v[t]{c} (x) g[t]{f} (v's rows at stride c,
// g's at f): the filter gradient's sum over tiles for one point, each
// element's terms added in t order, one fused multiply-add each. kRows
// channels at a time, one register of filters each.
template <int kRows>
void outer_rows(const float* v, int64_t c, const float* g, int64_t f, int64_t n, float* d, int64_t c0, int64_t f0) {
  Vec acc[kRows];
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r) acc[r] = load_vec(d + (c0 + r) * f + f0);
  for (int64_t t = 0; t < n; ++t) {
    const Vec gv = load_vec(g + t * f + f0);
    const float* vt = v + t * c + c0;
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) acc[r] = fmadd(broadcast_vec(vt + r), gv, acc[r]);
  }
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r) store_vec(d + (c0 + r) * f + f0, acc[r]);
}

constexpr int kOuterRows = kLanes == 16 ? 16 : 8;  // accumulators, within the registers

void accumulate_outer(const float* v, int64_t c, const float* g, int64_t f, int64_t n, float* d) {
  const int64_t fv = f / kLanes * kLanes;
  for (int64_t f0 = 0; f0 < fv; f0 += kLanes) {
    int64_t c0 = 0;
    for (; c0 + kOuterRows <= c; c0 += kOuterRows) outer_rows<kOuterRows>(v, c, g, f, n, d, c0, f0);
    for (; c0 < c; ++c0) outer_rows<1>(v, c, g, f, n, d, c0, f0);
  }
  for (int64_t ch = 0; ch < c; ++ch)  // filters past the last whole register
    for (int64_t t = 0; t < n; ++t)
      for (int64_t k = fv; k < f; ++k) d[ch * f + k] = std::fma(v[t * c + ch], g[t * f + k], d[ch * f + k]);
}

// The tiles of one image: th x tw tiles of kM x kM outputs.
template <int kM>
struct Tiling {
  int64_t th = 0, tw = 0;
  Tiling(int64_t out_h, int64_t out_w) : th((out_h + kM - 1) / kM), tw((out_w + kM - 1) / kM) {}
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

// out[p]{chunk, c} = a tile's 2D transform at point p, for the tiles t0 ..
// t0 + chunk - 1 of the image src {h, w, c}: B^T d B of the input's
// (kM + 2)-wide windows, or with kGradient A g A^T of the output gradient's
// kM-wide blocks. Tile t's window starts at (kM (t / tiles_wide) - top,
// kM (t % tiles_wide) - left); the pixels outside the image are zero (the
// padding, and whole tiles past the gradient's edge), read as zeros rather
// than from a padded copy of the image.
template <int kM, bool kGradient>
void transform_tiles(const float* src, int64_t h, int64_t w, int64_t c, int64_t top, int64_t left,
                     int64_t tiles_wide, int64_t t0, int64_t chunk, float* out, int64_t stride) {
  using Vector = Transforms<kM, Vec, store_vec>;
  using Scalar = Transforms<kM, float, store1>;
  constexpr int kSide = kGradient ? kM : kM + 2;
  const int64_t row = w * c, cv = c / kLanes * kLanes;
  for (int64_t i = 0; i < chunk; ++i) {
    const int64_t t = t0 + i, oy = (t / tiles_wide) * kM - top, ox = (t % tiles_wide) * kM - left;
    float* o = out + i * c;
    const int64_t i0 = std::max<int64_t>(0, -oy), i1 = std::min<int64_t>(kSide, h - oy);
    const int64_t j0 = std::max<int64_t>(0, -ox), j1 = std::min<int64_t>(kSide, w - ox);
    const bool inside = i0 == 0 && j0 == 0 && i1 == kSide && j1 == kSide;
    const auto run = [&](auto transforms, auto load, int64_t ch) {
      // The offset is formed only for pixels inside the image.
      const auto at = [&](int a, int b) { return src + (oy + a) * row + (ox + b) * c + ch; };
      const auto loaded = [&](int a, int b) { return load(at(a, b)); };
      const auto clipped = [&](int a, int b) {
        return a >= i0 && a < i1 && b >= j0 && b < j1 ? load(at(a, b)) : decltype(load(src)){};
      };
      if constexpr (kGradient) {
        if (inside) transforms.gradient(loaded, o + ch, stride);
        else transforms.gradient(clipped, o + ch, stride);
      } else {
        if (inside) transforms.input(loaded, o + ch, stride);
        else transforms.input(clipped, o + ch, stride);
      }
    };
    int64_t ch = 0;
    // Lambdas, not the functions' addresses, so that the loads inline.
    for (; ch < cv; ch += kLanes) run(Vector{}, [](const float* p) { return load_vec(p); }, ch);
    for (; ch < c; ++ch) run(Scalar{}, [](const float* p) { return *p; }, ch);
  }
}

// y's kM x kM blocks of the tiles t0 .. t0 + chunk - 1 (clipped at y's
// edge) = A^T m[p] A, then + bias, relu, + addend, zero where mask <= 0
// (each optional; the order of the direct kernels).
template <int kM, class T>
void write_block(T (&block)[kM][kM], int64_t rows, int64_t cols, int64_t ch, int64_t f, int64_t out_w, float* y,
                 const float* bias, bool relu, const float* addend, const float* mask, T (*load)(const float*),
                 void (*store)(float*, T)) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t s = 0; s < cols; ++s) {
      float* dst = y + (r * out_w + s) * f + ch;
      T value = block[r][s];
      if (bias) value += load(bias + ch);
      if (relu) value = value <= T{} ? T{} : value;  // NaN kept, as relu_value
      if (addend) value += load(addend + (dst - y));
      if (mask) value = load(mask + (dst - y)) <= T{} ? T{} : value;  // as relu_pass
      store(dst, value);
    }
}

template <int kM>
void transform_output(const float* m, int64_t stride, const Tiling<kM>& tl, int64_t f, int64_t t0, int64_t chunk,
                      int64_t out_h, int64_t out_w, float* y, const float* bias, bool relu, const float* addend,
                      const float* mask) {
  using Vector = Transforms<kM, Vec, store_vec>;
  using Scalar = Transforms<kM, float, store1>;
  constexpr int kAlpha = kM + 2;
  const int64_t fv = f / kLanes * kLanes;
  for (int64_t i = 0; i < chunk; ++i) {
    const int64_t t = t0 + i, oy = (t / tl.tw) * kM, ox = (t % tl.tw) * kM;
    const int64_t rows = std::min<int64_t>(kM, out_h - oy), cols = std::min<int64_t>(kM, out_w - ox);
    float* corner = y + (oy * out_w + ox) * f;
    const float* add = addend ? addend + (oy * out_w + ox) * f : nullptr;
    const float* keep = mask ? mask + (oy * out_w + ox) * f : nullptr;
    int64_t ch = 0;
    for (; ch < fv; ch += kLanes) {
      Vec block[kM][kM];
      const float* mi = m + i * f + ch;
      Vector::output([&](int a, int b) { return load_vec(mi + (a * kAlpha + b) * stride); }, block);
      write_block<kM>(block, rows, cols, ch, f, out_w, corner, bias, relu, add, keep, load_vec, store_vec);
    }
    for (; ch < f; ++ch) {
      float block[kM][kM];
      const float* mi = m + i * f + ch;
      Scalar::output([&](int a, int b) { return load1(mi + (a * kAlpha + b) * stride); }, block);
      write_block<kM>(block, rows, cols, ch, f, out_w, corner, bias, relu, add, keep, load1, store1);
    }
  }
}

// out{B, out_h, out_w, co} = the correlation of in{B, h, w, ci} (zero outside,
// placed at (pad_top, pad_left)) with the 3x3 kernel k{3, 3, ci, co}, one
// image per task.
template <int kM>
void winograd_correlate(const TensorRef& in, int64_t pad_top, int64_t pad_left, const float* k, const TensorRef& out,
                        const KernelContext& ctx, const float* bias, bool relu, const float* addend,
                        const float* mask, double* image_sums) {
  constexpr int64_t kPoints = (kM + 2) * (kM + 2);
  const int64_t B = in.shape[0], h = in.shape[1], w = in.shape[2], ci = in.shape[3];
  const int64_t out_h = out.shape[1], out_w = out.shape[2], co = out.shape[3];
  thread_local std::vector<float> u_buffer;  // the caller's; the workers only read it
  u_buffer.resize(size_t(kPoints * ci * co));
  const float* u = u_buffer.data();
  transform_kernel<kM>(k, ci, co, u_buffer.data());
  const Tiling<kM> tl(out_h, out_w);
  const int64_t tiles = tl.tiles(), chunk_max = std::min(tiles, kTileChunk);
  if (tiles == 0) return;  // an empty output (an input gradient of an image with no rows)
  const BatchReduceGemm<float> gemm_full(chunk_max, co, ci, ci, co, co);
  const BatchReduceGemm<float> gemm_last(tiles % chunk_max ? tiles % chunk_max : chunk_max, co, ci, ci, co, co);
  const float* pin = in.f();
  float* pout = out.f();
  thread_local SlotBuffers<float> v_slots_tl, m_slots_tl;  // the caller's: per worker slot a chunk's V and M
  const auto v_slots = v_slots_tl.prepare(ctx.pool, size_t(kPoints * point_stride(chunk_max, ci)));
  const auto m_slots = m_slots_tl.prepare(ctx.pool, size_t(kPoints * point_stride(chunk_max, co)));
  parallel_for(ctx.pool, size_t(B), 1, [&](size_t b0, size_t b1) {
    float* const v = v_slots.mine();
    float* const m = m_slots.mine();
    for (size_t b = b0; b < b1; ++b) {
      const float* img = pin + int64_t(b) * h * w * ci;
      float* y = pout + int64_t(b) * out_h * out_w * co;
      const float* add = addend ? addend + int64_t(b) * out_h * out_w * co : nullptr;
      const float* keep = mask ? mask + int64_t(b) * out_h * out_w * co : nullptr;
      for (int64_t t0 = 0; t0 < tiles; t0 += kTileChunk) {
        const int64_t chunk = std::min(kTileChunk, tiles - t0);
        const int64_t v_stride = point_stride(chunk, ci), m_stride = point_stride(chunk, co);
        transform_tiles<kM, false>(img, h, w, ci, pad_top, pad_left, tl.tw, t0, chunk, v, v_stride);
        for (int64_t p = 0; p < kPoints; ++p) {
          const float* a = v + p * v_stride;
          const float* kp = u + p * ci * co;
          (chunk == chunk_max ? gemm_full : gemm_last).run(chunk, &a, &kp, 1, m + p * m_stride, ci);
        }
        transform_output<kM>(m, m_stride, tl, co, t0, chunk, out_h, out_w, y, bias, relu, add, keep);
      }
      if (image_sums) image_stats_sums(y, out_h * out_w, co, image_sums + int64_t(b) * 2 * co);
    }
  });
}

// dk{3, 3, C, F} = G^T [sum over images and tiles (A g A^T) . (B^T d B)] G,
// the sum over images in up to 16 fixed slices of the batch, each with its
// own partial sums, added in order (the same bits at any thread count).
template <int kM>
void winograd_filter_gradient(const Window2D& win, const TensorRef& x, const TensorRef& g, const TensorRef& dkernel,
                              const KernelContext& ctx) {
  // Up to 16 slices, fewer when their partial sums would pass 4M floats (as
  // the direct kernel's).
  constexpr int64_t kPoints = (kM + 2) * (kM + 2), kMaxSlices = 16, kPartialFloats = int64_t(1) << 22;
  const int64_t B = x.shape[0], H = x.shape[1], W = x.shape[2], C = x.shape[3];
  const int64_t Ho = g.shape[1], Wo = g.shape[2], F = g.shape[3];
  const Tiling<kM> tl(Ho, Wo);
  const int64_t tiles = tl.tiles(), hat = kPoints * C * F;
  const int64_t slices = std::min({B, kMaxSlices, std::max<int64_t>(1, kPartialFloats / hat)});
  float* dk = dkernel.f();
  if (slices == 0) return std::fill(dk, dk + dkernel.numel(), 0.0f);
  thread_local std::vector<float> partial;  // the caller's; each worker writes its own slices
  partial.resize(size_t(slices * hat));
  float* parts = partial.data();
  const float* px = x.f();
  const float* pg = g.f();
  // The tiles of consecutive images fill one chunk before its products are
  // summed: a 14x14 image has 16 tiles of 4x4, too few to pay for loading
  // and storing the sums.
  const int64_t v_stride = point_stride(kTileChunk, C), g_stride = point_stride(kTileChunk, F);
  thread_local SlotBuffers<float> v_slots_tl, gt_slots_tl;  // the caller's: per worker slot a chunk's V and G^T
  const auto v_slots = v_slots_tl.prepare(ctx.pool, size_t(kPoints * v_stride));
  const auto gt_slots = gt_slots_tl.prepare(ctx.pool, size_t(kPoints * g_stride));
  parallel_for(ctx.pool, size_t(slices), 1, [&](size_t s0, size_t s1) {
    float* const v = v_slots.mine();
    float* const gt = gt_slots.mine();
    for (size_t s = s0; s < s1; ++s) {
      float* acc = parts + int64_t(s) * hat;
      std::fill(acc, acc + hat, 0.0f);
      int64_t filled = 0;
      const auto flush = [&] {
        for (int64_t p = 0; p < kPoints; ++p)
          accumulate_outer(v + p * v_stride, C, gt + p * g_stride, F, filled, acc + p * C * F);
        filled = 0;
      };
      const int64_t first = B * int64_t(s) / slices, last = B * (int64_t(s) + 1) / slices;
      for (int64_t b = first; b < last; ++b) {
        const float* img = px + b * H * W * C;
        const float* gb = pg + b * Ho * Wo * F;
        for (int64_t t0 = 0; t0 < tiles;) {
          const int64_t chunk = std::min(kTileChunk - filled, tiles - t0);
          transform_tiles<kM, false>(img, H, W, C, win.pad_top, win.pad_left, tl.tw, t0, chunk, v + filled * C,
                                     v_stride);
          transform_tiles<kM, true>(gb, Ho, Wo, F, 0, 0, tl.tw, t0, chunk, gt + filled * F, g_stride);
          filled += chunk;
          t0 += chunk;
          if (filled == kTileChunk) flush();
        }
      }
      if (filled) flush();
    }
  });
  for (int64_t s = 1; s < slices; ++s)
    for (int64_t i = 0; i < hat; ++i) parts[i] += parts[s * hat + i];
  constexpr int kAlpha = kM + 2;
  const int64_t n = C * F;
  for (int64_t e = 0; e < n; ++e) {
    float r[3][kAlpha];
    for (int j = 0; j < kAlpha; ++j) {
      float column[kAlpha], rc[3];
      for (int i = 0; i < kAlpha; ++i) column[i] = parts[(i * kAlpha + j) * n + e];
      Minimal<kM>::filter(column, rc);
      for (int i = 0; i < 3; ++i) r[i][j] = rc[i];
    }
    for (int i = 0; i < 3; ++i) {
      float k[3];
      Minimal<kM>::filter(r[i], k);
      for (int j = 0; j < 3; ++j) dk[(i * 3 + j) * n + e] = k[j];
    }
  }
}

// F(4x4) where the image has 8 or more outputs a side, else F(2x2).
void correlate(const TensorRef& in, int64_t pad_top, int64_t pad_left, const float* k, const TensorRef& out,
               const KernelContext& ctx, const float* bias, bool relu, const float* addend, const float* mask,
               double* image_sums) {
  if (out.shape[1] >= 8 && out.shape[2] >= 8)
    winograd_correlate<4>(in, pad_top, pad_left, k, out, ctx, bias, relu, addend, mask, image_sums);
  else
    winograd_correlate<2>(in, pad_top, pad_left, k, out, ctx, bias, relu, addend, mask, image_sums);
}
}  // namespace

void winograd_conv2d_backward_filter(const Window2D& win, const TensorRef& x, const TensorRef& g,
                                     const TensorRef& dkernel, const KernelContext& ctx) {
  winograd_filter_gradient<4>(win, x, g, dkernel, ctx);
}

bool winograd_applies(const Window2D& win, int64_t channels, int64_t filters) {
  const bool pads_small = win.pad_top >= 0 && win.pad_top <= 2 && win.pad_left >= 0 && win.pad_left <= 2 &&
                          win.pad_bottom >= 0 && win.pad_bottom <= 2 && win.pad_right >= 0 && win.pad_right <= 2;
  return win.kh == 3 && win.kw == 3 && win.sh == 1 && win.sw == 1 && win.dh == 1 && win.dw == 1 && pads_small &&
         channels >= kWinogradMinChannels && filters >= kWinogradMinChannels && winograd_convolutions();
}

bool winograd_filter_applies(const Window2D& win, int64_t channels, int64_t filters, int64_t out_h, int64_t out_w) {
  return winograd_applies(win, channels, filters) && out_h >= kWinogradFilterMinSide && out_w >= kWinogradFilterMinSide;
}

void winograd_conv2d(const Window2D& win, const TensorRef& x, const TensorRef& kernel, const TensorRef& y,
                     const KernelContext& ctx, const float* bias, bool relu, double* image_sums) {
  correlate(x, win.pad_top, win.pad_left, kernel.f(), y, ctx, bias, relu, nullptr, nullptr, image_sums);
}

void winograd_conv2d_backward_input(const Window2D& win, const TensorRef& g, const TensorRef& kernel,
                                    const TensorRef& dx, const KernelContext& ctx, const float* addend,
                                    const float* mask) {
  const int64_t C = dx.shape[3], F = g.shape[3];
  thread_local std::vector<float> turned;  // the caller's; the workers never read it
  turned.resize(size_t(9 * F * C));
  const float* pk = kernel.f();
  for (int64_t t = 0; t < 9; ++t)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t f = 0; f < F; ++f) turned[size_t(((8 - t) * F + f) * C + c)] = pk[(t * C + c) * F + f];
  correlate(g, 2 - win.pad_top, 2 - win.pad_left, turned.data(), dx, ctx, nullptr, false, addend, mask, nullptr);
}

}  // namespace tensorgrad::kernels
