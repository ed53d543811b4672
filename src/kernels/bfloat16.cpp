#include "kernels/bfloat16.h"

#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu_features.h"
#include "kernels/kernels.h"

namespace tensorgrad::kernels {

bool cpu_has_bf16() { return int(cpu_path()) >= int(CpuPath::kAvx512Bf16); }

namespace {
// Transposing packs go in square tiles so that both the strided reads and
// the writes stay in cache.
constexpr int64_t kTile = 32;

// The packs run only where cpu_has_bf16(), so sixteen floats at a time go
// through vcvtneps2bf16 (round to nearest even, as to_bf16; it also reads a
// float32 denormal, under 1.2e-38, as zero, where to_bf16 keeps its sign
// and top bits) and the rest through to_bf16.
#define TG_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

TG_AVX512_BF16 void round_row(const float* src, int64_t n, bf16* dst) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + j), __m256i(_mm512_cvtneps_pbh(_mm512_loadu_ps(src + j))));
  for (; j < n; ++j) dst[j] = to_bf16(src[j]);
}

// out[2j] = r0[j], out[2j + 1] = r1[j] (0 without r1), j < n, rounded.
TG_AVX512_BF16 void interleave_rows(const float* r0, const float* r1, int64_t n, bf16* out) {
  alignas(64) static const uint16_t kPairs[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                  8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i pairs = _mm512_load_si512(kPairs);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 second = r1 ? _mm512_loadu_ps(r1 + j) : _mm512_set1_ps(0.0f);
    // Words 0-15 hold r0's sixteen, 16-31 r1's; the permutation pairs them.
    const __m512i both = __m512i(_mm512_cvtne2ps_pbh(second, _mm512_loadu_ps(r0 + j)));
    _mm512_storeu_si512(out + 2 * j, _mm512_permutexvar_epi16(pairs, both));
  }
  for (; j < n; ++j) {
    out[2 * j] = to_bf16(r0[j]);
    out[2 * j + 1] = r1 ? to_bf16(r1[j]) : bf16(0);
  }
}
#undef TG_AVX512_BF16
}  // namespace

void pack_rows_bf16(const float* a, int64_t lda, bool trans, int64_t row0, int64_t rows, int64_t k, int64_t kp,
                    bf16* dst) {
  if (!trans) {
    for (int64_t i = 0; i < rows; ++i) {
      const float* src = a + (row0 + i) * lda;
      bf16* out = dst + i * kp;
      round_row(src, k, out);
      std::fill(out + k, out + kp, bf16(0));
    }
    return;
  }
  // op(A) row i is column row0 + i of A{k, m}.
  for (int64_t p0 = 0; p0 < k; p0 += kTile)
    for (int64_t i0 = 0; i0 < rows; i0 += kTile) {
      const int64_t p1 = std::min(k, p0 + kTile), i1 = std::min(rows, i0 + kTile);
      for (int64_t p = p0; p < p1; ++p) {
        const float* src = a + p * lda + row0;
        for (int64_t i = i0; i < i1; ++i) dst[i * kp + p] = to_bf16(src[i]);
      }
    }
  for (int64_t i = 0; i < rows; ++i) std::fill(dst + i * kp + k, dst + (i + 1) * kp, bf16(0));
}

void pack_vnni_bf16(const float* b, int64_t ldb, bool trans, int64_t k, int64_t n, bf16* dst) {
  pack_vnni_bf16(b, ldb, trans, k, n, even_k(k), n, dst);
}

void pack_vnni_bf16(const float* b, int64_t ldb, bool trans, int64_t k, int64_t n, int64_t kp, int64_t np, bf16* dst) {
  // Only the padding is zeroed: the pairs' columns past n, and the pair rows past k.
  const int64_t pairs = even_k(k) / 2;
  if (np > n)
    for (int64_t q = 0; q < pairs; ++q) std::fill(dst + q * 2 * np + 2 * n, dst + (q + 1) * 2 * np, bf16(0));
  std::fill(dst + pairs * 2 * np, dst + kp * np, bf16(0));
  if (!trans) {
    for (int64_t q = 0; q < pairs; ++q) {
      const float* r0 = b + 2 * q * ldb;
      const float* r1 = 2 * q + 1 < k ? r0 + ldb : nullptr;
      interleave_rows(r0, r1, n, dst + q * 2 * np);
    }
    return;
  }
  // op(B)[p][j] = B[j][p]: row j of B gives the pairs of column j.
  for (int64_t j0 = 0; j0 < n; j0 += kTile)
    for (int64_t q0 = 0; q0 < pairs; q0 += kTile) {
      const int64_t j1 = std::min(n, j0 + kTile), q1 = std::min(pairs, q0 + kTile);
      for (int64_t j = j0; j < j1; ++j) {
        const float* src = b + j * ldb;
        for (int64_t q = q0; q < q1; ++q) {
          bf16* out = dst + q * 2 * np + 2 * j;
          out[0] = to_bf16(src[2 * q]);
          out[1] = 2 * q + 1 < k ? to_bf16(src[2 * q + 1]) : bf16(0);
        }
      }
    }
}

libxsmm_bsmmfunction bf16_gemm_kernel(int64_t m, int64_t n, int64_t kp, int64_t lda, int64_t ldc, float beta) {
  init_xsmm();
  // Column-major, as libxsmm: C^T{n, m} = B^T{n, kp} A^T{kp, m}, so the
  // packed B is its first (VNNI) operand.
  const float alpha = 1.0f;
  const int flags = LIBXSMM_GEMM_FLAG_VNNI_A;
  const libxsmm_blasint xlda = libxsmm_blasint(n), xldb = libxsmm_blasint(lda), xldc = libxsmm_blasint(ldc);
  return libxsmm_bsmmdispatch(libxsmm_blasint(n), libxsmm_blasint(m), libxsmm_blasint(kp), &xlda, &xldb, &xldc,
                              &alpha, &beta, &flags, nullptr);
}

}  // namespace tensorgrad::kernels
