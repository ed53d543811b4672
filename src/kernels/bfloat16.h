#pragma once
// bfloat16 operands for the mixed_bfloat16 policy (DTypePolicy, Keras'
// policy of that name): float32 values rounded to bfloat16, laid out as
// libxsmm's AVX512-BF16 GEMMs read them, products accumulated in float32.
// Only the kernels of MatMul, the product form of AccumulateGrad and the
// three convolution ops use these, and only when KernelContext::bf16 is set.
#include <libxsmm.h>

#include <cstdint>
#include <cstring>

namespace tensorgrad::kernels {

using bf16 = libxsmm_bfloat16;

/// Whether libxsmm generates AVX512-BF16 code on this CPU (its target is
/// Cooper Lake or later; AMD Zen 4 and 5 count) and TENSORGRAD_CPU does not
/// ask for less (cpu_path()). Decided once per process.
bool cpu_has_bf16();

/// Round to nearest even, as the CPU's vcvtneps2bf16; a NaN stays a NaN
/// (quiet), an infinity an infinity.
inline bf16 to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16((u >> 16) | 0x40u);
  return bf16((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
inline float from_bf16(bf16 b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
/// k rounded up to even: the inner size of a bf16 product, whose operands
/// pair consecutive k (the pad is zero in both).
inline int64_t even_k(int64_t k) { return (k + 1) & ~int64_t(1); }

/// Whether a GEMM of C{m, n} over k gains from bfloat16 operands: rounding
/// and packing cost about (m k + k n) element passes against 2 m n k flops,
/// and below 16 along any side they cost more than the kernel saves (the
/// CNN example's 784-to-10 Dense and its 8-channel filter gradients ran 4x
/// and 1.8x slower in bfloat16). Decided from the shape alone, so a run's
/// results never depend on the threads.
inline bool bf16_pays(int64_t m, int64_t n, int64_t k) { return m >= 16 && n >= 16 && k >= 16; }

/// dst{rows, kp} (bfloat16, row-major) = rows [row0, row0 + rows) of op(A),
/// op(A){m, k} being A{m, k} (row stride lda) or, with trans, A{k, m}
/// transposed; columns k..kp-1 zero.
void pack_rows_bf16(const float* a, int64_t lda, bool trans, int64_t row0, int64_t rows, int64_t k, int64_t kp,
                    bf16* dst);
/// dst{kp/2, n, 2} (libxsmm's VNNI layout: rows 2q and 2q+1 of op(B)
/// interleaved) from op(B){k, n}, op(B) being B{k, n} (row stride ldb) or,
/// with trans, B{n, k} transposed; the pad row (odd k) zero.
void pack_vnni_bf16(const float* b, int64_t ldb, bool trans, int64_t k, int64_t n, bf16* dst);
/// The same into dst{kp/2, np, 2}: kp >= even_k(k) and np >= n, the pairs
/// past k and the columns past n zero (AMX tiles read whole 32-pair,
/// 16-column blocks).
void pack_vnni_bf16(const float* b, int64_t ldb, bool trans, int64_t k, int64_t n, int64_t kp, int64_t np, bf16* dst);

/// libxsmm's kernel for row-major C{m, n} = beta C + A{m, kp} B{kp, n}, A
/// bfloat16 rows (row stride lda), B packed by pack_vnni_bf16 (row stride
/// n of its pairs), C float32 (row stride ldc); beta 0 or 1. Called as
/// f(b_packed, a, c). Null when libxsmm has none for the shape.
libxsmm_bsmmfunction bf16_gemm_kernel(int64_t m, int64_t n, int64_t kp, int64_t lda, int64_t ldc, float beta);

/// Whether this CPU has AMX-BF16 tiles (Sapphire Rapids and later),
/// TENSORGRAD_CPU does not ask for less (cpu_path()), and the
/// kernel grants this process their state (Linux's ARCH_REQ_XCOMP_PERM,
/// since 5.16), asked at the first call: only the mixed_bfloat16 policy and
/// bfloat16_convolutions_supported() call it, so a float32 program never
/// takes on the larger signal frames that the tile state brings. Decided
/// once per process. The bfloat16 MatMul then runs on
/// them: Intel's AVX512-BF16 dot product issues at half the rate of its
/// float32 FMAs' pair, so on these CPUs libxsmm's AVX512-BF16 kernels were
/// slower than float32 (the MLP epoch 0.62 s against 0.45 s).
bool cpu_has_amx_bf16();
/// Whether the convolutions compute in bfloat16 under the policy: where
/// the CPU has AVX512-BF16 and no AMX. On Intel's CPUs with AMX (the
/// convolutions' per-tap products, K = channels, are too thin for its
/// 32-deep tiles) the AVX512-BF16 kernels ran slower than float32 (the CNN
/// epoch 1.35 s against 1.05 s on a Sapphire Rapids VM), so they stay
/// float32 there; on AMD's Zen 4 and 5, whose bfloat16 dot products run at
/// the full rate, they were faster.
inline bool bf16_convolutions() { return cpu_has_bf16() && !cpu_has_amx_bf16(); }
/// The rounding up that amx_gemm_bf16's operands are padded to: k and the
/// rows and columns of C to multiples of 32.
inline int64_t amx_round(int64_t v) { return (v + 31) & ~int64_t(31); }
/// C{m, n} (row stride ldc) = (accumulate ? C : 0) + A B on AMX tiles, in
/// blocks of 32 x 32 of C (four 16 x 16 float32 tiles) over k in steps of
/// 32: A{amx_round(m), kp} bfloat16 rows (row stride kp, a multiple of 32;
/// the rows past m and the columns past k zero), B packed by pack_vnni_bf16
/// into {kp/2, np, 2} (np = amx_round(n)). Only where cpu_has_amx_bf16().
void amx_gemm_bf16(const bf16* a, const bf16* b, int64_t np, float* c, int64_t ldc, int64_t m, int64_t n, int64_t kp,
                   bool accumulate);

}  // namespace tensorgrad::kernels
