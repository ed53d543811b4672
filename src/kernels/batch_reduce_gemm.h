#pragma once
// The batch-reduce GEMM that the convolution kernels (conv.cpp,
// winograd.cpp) run their products through, and the zero-padded image copy
// the direct kernels read (winograd.cpp reads zeros outside the image
// instead). Internal to the kernels.
#include <immintrin.h>
#include <libxsmm.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/bfloat16.h"
#include "kernels/kernels.h"

namespace tensorgrad::kernels {

// Output pixels per batch-reduce call: bounds the JIT kernel's size.
constexpr int64_t kPixelBlock = 64;

// libxsmm's batch-reduce kernels for float32 operands, and for bfloat16 ones
// (the mixed_bfloat16 policy: the first libxsmm operand, our B_i, in VNNI
// pairs along k; float32 accumulation).
template <class T>
struct BrgemmKernel;
template <>
struct BrgemmKernel<float> {
  using Fn = libxsmm_smmfunction_reducebatch_addr;
  static Fn dispatch(libxsmm_blasint m, libxsmm_blasint n, libxsmm_blasint k, const libxsmm_blasint* lda,
                     const libxsmm_blasint* ldb, const libxsmm_blasint* ldc, const float* alpha, const float* beta) {
    const int flags = 0;
    return libxsmm_smmdispatch_reducebatch_addr(m, n, k, lda, ldb, ldc, alpha, beta, &flags, nullptr);
  }
};
template <>
struct BrgemmKernel<bf16> {
  using Fn = libxsmm_bsmmfunction_reducebatch_addr;
  static Fn dispatch(libxsmm_blasint m, libxsmm_blasint n, libxsmm_blasint k, const libxsmm_blasint* lda,
                     const libxsmm_blasint* ldb, const libxsmm_blasint* ldc, const float* alpha, const float* beta) {
    const int flags = LIBXSMM_GEMM_FLAG_VNNI_A;
    return libxsmm_bsmmdispatch_reducebatch_addr(m, n, k, lda, ldb, ldc, alpha, beta, &flags, nullptr);
  }
};

// rows16 serves AVX2 machines only: with AVX-512, libxsmm's kernels hold a
// row of 16 in one register and keep enough accumulators (on a Xeon with
// AVX-512 the resnet epoch took 29.0 s with rows16, 26.0 s without).
#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
#define TENSORGRAD_ROWS16 1
#else
#define TENSORGRAD_ROWS16 0
#endif

#if TENSORGRAD_ROWS16
// C{m, 16} (row stride ldc) = sum_i A_i{m, k} B_i{k, 16} [+ C with
// accumulate], A_i's rows at stride lda, B_i's rows contiguous: the
// sixteen-wide products of the convolutions with 16 filters or channels.
// libxsmm 1.17's AVX2 kernels for 16 columns keep at most six accumulators
// (55 GFLOP/s a thread on the resnet's rows against 70-74 for 32 columns,
// FMA latency-bound); this keeps twelve, six rows of two vectors. Per
// output element the sum runs over i, then k, in order, one FMA each.
template <int kRows>
inline void rows16_block(const float* const* a, const float* const* b, int64_t count, int64_t k, int64_t lda,
                         int64_t row0, float* c, int64_t ldc, bool accumulate) {
  // Row p's two vectors are lo[p] and hi[p]; separate arrays, which GCC 12
  // keeps in registers (a two-dimensional array of vectors was stored back
  // to the stack at every step).
  __m256 lo[kRows], hi[kRows];
  float* c0 = c + row0 * ldc;
#pragma GCC unroll 8
  for (int p = 0; p < kRows; ++p) {
    lo[p] = accumulate ? _mm256_loadu_ps(c0 + p * ldc) : _mm256_setzero_ps();
    hi[p] = accumulate ? _mm256_loadu_ps(c0 + p * ldc + 8) : _mm256_setzero_ps();
  }
  for (int64_t i = 0; i < count; ++i) {
    const float* ai = a[i] + row0 * lda;
    const float* bi = b[i];
    for (int64_t kk = 0; kk < k; ++kk) {
      const __m256 b0 = _mm256_loadu_ps(bi + kk * 16), b1 = _mm256_loadu_ps(bi + kk * 16 + 8);
#pragma GCC unroll 8
      for (int p = 0; p < kRows; ++p) {
        const __m256 av = _mm256_broadcast_ss(ai + p * lda + kk);
        lo[p] = _mm256_fmadd_ps(av, b0, lo[p]);
        hi[p] = _mm256_fmadd_ps(av, b1, hi[p]);
      }
    }
  }
#pragma GCC unroll 8
  for (int p = 0; p < kRows; ++p) {
    _mm256_storeu_ps(c0 + p * ldc, lo[p]);
    _mm256_storeu_ps(c0 + p * ldc + 8, hi[p]);
  }
}

inline void rows16(const float* const* a, const float* const* b, int64_t count, int64_t m, int64_t k, int64_t lda,
                   float* c, int64_t ldc, bool accumulate) {
  int64_t r = 0;
  for (; r + 6 <= m; r += 6) rows16_block<6>(a, b, count, k, lda, r, c, ldc, accumulate);
  switch (m - r) {
    case 0: break;
    case 1: rows16_block<1>(a, b, count, k, lda, r, c, ldc, accumulate); break;
    case 2: rows16_block<2>(a, b, count, k, lda, r, c, ldc, accumulate); break;
    case 3: rows16_block<3>(a, b, count, k, lda, r, c, ldc, accumulate); break;
    case 4: rows16_block<4>(a, b, count, k, lda, r, c, ldc, accumulate); break;
    case 5: rows16_block<5>(a, b, count, k, lda, r, c, ldc, accumulate); break;
  }
}
#endif

// Row-major C{m,n} = sum_i A_i{m,k} B_i{k,n} (lda: A's row stride, which is
// the pixel stride times the channels), C float32, A and B float32 or (T =
// bf16) bfloat16 with B_i packed by pack_vnni_bf16; dispatched once per shape.
template <class T>
struct BatchReduceGemm {
  typename BrgemmKernel<T>::Fn full = nullptr, tail = nullptr;
  int64_t m_full = 0, m_tail = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;

  float beta = 0.0f;  // 1: the sum is added to C (accumulation over calls)
  bool sixteen_wide = false;  // float32, 16 columns: rows16, not libxsmm

  BatchReduceGemm(int64_t m, int64_t n_, int64_t k_, int64_t lda_, int64_t ldb_, int64_t ldc_, float beta_ = 0.0f)
      : m_full(std::min(m, kPixelBlock)),
        m_tail(m % kPixelBlock),
        n(n_),
        k(k_),
        lda(lda_),
        ldb(ldb_),
        ldc(ldc_),
        beta(beta_) {
#if TENSORGRAD_ROWS16
    sixteen_wide = std::is_same_v<T, float> && n == 16 && ldb == 16;
    if (sixteen_wide) return;  // rows16 serves every block: no libxsmm kernel to look up
#endif
    init_xsmm();
    full = dispatch(m_full);
    if (m > kPixelBlock && m_tail) tail = dispatch(m_tail);
  }
  // Whether libxsmm has kernels for every block (float32 runs without them,
  // one GEMM per tap; bfloat16 has no such fallback).
  bool complete(int64_t m) const { return full && (m <= kPixelBlock || !m_tail || tail); }
  // libxsmm is column-major: row-major C = A B is column-major C^T = B^T A^T,
  // so its first operand is B.
  typename BrgemmKernel<T>::Fn dispatch(int64_t m) const {
    const float alpha = 1.0f;
    const libxsmm_blasint xlda = libxsmm_blasint(ldb), xldb = libxsmm_blasint(lda), xldc = libxsmm_blasint(ldc);
    return BrgemmKernel<T>::dispatch(libxsmm_blasint(n), libxsmm_blasint(m), libxsmm_blasint(k), &xlda, &xldb, &xldc,
                                     &alpha, &beta);
  }
  // C{m, n} = sum_i A_i B_i where A_i's row r is at a[i] + r * pixel_step.
  // The kernel advances the pointer arrays it is given (libxsmm 1.17), so
  // each block gets fresh copies.
  void run(int64_t m, const T* const* a, const T* const* b, int64_t count, float* c, int64_t pixel_step) const {
#if TENSORGRAD_ROWS16
    if constexpr (std::is_same_v<T, float>)
      if (sixteen_wide) return rows16(a, b, count, m, k, pixel_step, c, ldc, beta != 0.0f);
#endif
    // On the stack: run() is called by pool workers, and a worker's first
    // call must not allocate in a training step (a thread_local vector would,
    // and so would even passing one's declaration, which registers its
    // destructor, on whichever worker first meets the kernel, at any step).
    // Windows of more taps than that (a 12x12 kernel) take the heap once per
    // thread.
    constexpr int64_t kStackTaps = 128;
    const T* ab_stack[kStackTaps];
    const T* bb_stack[kStackTaps];
    const T** ab = ab_stack;
    const T** bb = bb_stack;
    if (count > kStackTaps) {
      thread_local std::vector<const T*> ab_heap, bb_heap;
      ab_heap.resize(size_t(count));
      bb_heap.resize(size_t(count));
      ab = ab_heap.data();
      bb = bb_heap.data();
    }
    for (int64_t r0 = 0; r0 < m; r0 += kPixelBlock) {
      const int64_t rows = std::min(kPixelBlock, m - r0);
      for (int64_t i = 0; i < count; ++i) {
        ab[i] = a[i] + r0 * pixel_step;
        bb[i] = b[i];
      }
      const auto f = rows == m_full ? full : tail;
      if (f) {
        const unsigned long long n_taps = (unsigned long long)count;
        f(bb, ab, c + r0 * ldc, &n_taps);
      } else if constexpr (std::is_same_v<T, float>) {  // no JIT kernel: the same sum, one GEMM per tap
        for (int64_t i = 0; i < count; ++i)
          gemm(rows, n, k, ab[i], lda, false, bb[i], ldb, c + r0 * ldc, ldc, i ? 1.0f : beta);
      }
    }
  }
};

// Image {h, w, c} in the middle of a zeroed {hp, wp, cp} buffer at (top,
// left), channels c..cp-1 zero: as float32 (cp = c; the image itself when
// there is nothing to pad) or rounded to bfloat16. base: hp wp cp elements
// (a SlotBuffers slot), 64-byte aligned: vector stores that straddle two
// cache lines cost twice.
template <class T>
inline const T* padded(const float* img, int64_t h, int64_t w, int64_t c, int64_t hp, int64_t wp, int64_t top,
                       int64_t left, int64_t cp, T* base) {
  if constexpr (std::is_same_v<T, float>)
    if (hp == h && wp == w) return img;
  // Only the frame is zeroed: the image's pixels are written once.
  const int64_t row = wp * cp;
  std::fill(base, base + top * row, T(0));
  std::fill(base + (top + h) * row, base + hp * row, T(0));
  for (int64_t y = 0; y < h; ++y) {
    T* line = base + (y + top) * row;
    std::fill(line, line + left * cp, T(0));
    std::fill(line + (left + w) * cp, line + row, T(0));
    T* dst = line + left * cp;
    const float* src = img + y * w * c;
    if constexpr (std::is_same_v<T, float>) {
      if (cp == c) {
        std::memcpy(dst, src, size_t(w * c) * sizeof(float));
        continue;
      }
    }
    for (int64_t x = 0; x < w; ++x) {
      for (int64_t ch = 0; ch < c; ++ch) {
        if constexpr (std::is_same_v<T, float>) dst[x * cp + ch] = src[x * c + ch];
        else dst[x * cp + ch] = to_bf16(src[x * c + ch]);
      }
      std::fill(dst + x * cp + c, dst + (x + 1) * cp, T(0));
    }
  }
  return base;
}

}  // namespace tensorgrad::kernels
