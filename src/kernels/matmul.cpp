#include <cblas.h>
#include <libxsmm.h>

#include <algorithm>

#include "kernels/kernels.h"

namespace tensorgrad::kernels {

namespace {
// Below this many multiply-adds one thread is faster than splitting.
constexpr double kSplitWork = 2e6;

// libxsmm's JIT kernels for products whose second operand is not transposed:
// as fast as OpenBLAS on square blocks and up to 4.5x faster on thin ones
// (500x500 by 500x10), and they never allocate, whereas OpenBLAS 0.3.21's
// small-matrix path mallocs on every call for narrow outputs (measured;
// notes in BENCHMARKS.md). libxsmm 1.17 cannot JIT a transposed B (returns
// null), which goes to OpenBLAS. Returns null when no kernel is available.
libxsmm_smmfunction xsmm_kernel(int64_t m, int64_t n, int64_t k, bool trans_a, int64_t lda, int64_t ldb, int64_t ldc) {
  static const bool initialised = [] {
    libxsmm_init();
    return true;
  }();
  (void)initialised;
  // libxsmm is column-major: row-major C = op(A) op(B) is column-major
  // C^T = op(B)^T op(A)^T, so the operands swap and so do their flags.
  const float alpha = 1.0f, beta = 0.0f;
  const int flags = trans_a ? LIBXSMM_GEMM_FLAG_TRANS_B : 0;
  const libxsmm_blasint xm = libxsmm_blasint(n), xn = libxsmm_blasint(m), xk = libxsmm_blasint(k);
  const libxsmm_blasint xlda = libxsmm_blasint(ldb), xldb = libxsmm_blasint(lda), xldc = libxsmm_blasint(ldc);
  return libxsmm_smmdispatch(xm, xn, xk, &xlda, &xldb, &xldc, &alpha, &beta, &flags, nullptr);
}
}  // namespace

// C{M,N} = op(A) op(B), row-major. The BLAS runs single-threaded (see
// core/threads.cpp): one pool, ours, owns every thread, so BLAS threads and
// kernel threads never spin against each other on the same cores. Large
// products are split into row or column blocks of C, one GEMM per block.
void matmul(const OpAttrs& at, const TensorRef& a, const TensorRef& b, const TensorRef& c, const KernelContext& ctx) {
  const int64_t m = c.shape[0], n = c.shape[1];
  const int64_t k = at.trans_a ? a.shape[0] : a.shape[1];
  if (m == 0 || n == 0) return;
  if (k == 0) {
    std::fill(c.f(), c.f() + c.numel(), 0.0f);
    return;
  }
  const int64_t lda = a.shape[1], ldb = b.shape[1];
  auto gemm = [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    // Block C[i0:i1, j0:j1]: rows i of op(A), columns j of op(B).
    const float* pa = a.f() + (at.trans_a ? i0 : i0 * lda);
    const float* pb = b.f() + (at.trans_b ? j0 * ldb : j0);
    float* pc = c.f() + i0 * n + j0;
    if (!at.trans_b) {
      if (libxsmm_smmfunction f = xsmm_kernel(i1 - i0, j1 - j0, k, at.trans_a, lda, ldb, n)) {
        f(pb, pa, pc);
        return;
      }
    }
    cblas_sgemm(CblasRowMajor, at.trans_a ? CblasTrans : CblasNoTrans, at.trans_b ? CblasTrans : CblasNoTrans,
                int(i1 - i0), int(j1 - j0), int(k), 1.0f, pa, int(lda), pb, int(ldb), 0.0f, pc, int(n));
  };
  const size_t threads = ctx.pool ? pthreadpool_get_threads_count(ctx.pool) : 1;
  if (threads <= 1 || double(m) * double(n) * double(k) < kSplitWork) {
    gemm(0, m, 0, n);
    return;
  }
  // Split the longer side of C into one block per thread, in multiples of 16.
  const bool split_rows = m >= n;
  const int64_t len = split_rows ? m : n;
  const int64_t block = std::max<int64_t>(16, (len / int64_t(threads) + 15) / 16 * 16);
  const size_t blocks = size_t((len + block - 1) / block);
  parallel_for(ctx.pool, blocks, 1, [&](size_t b0, size_t b1) {
    for (size_t bi = b0; bi < b1; ++bi) {
      const int64_t s = int64_t(bi) * block, e = std::min(len, s + block);
      if (split_rows) gemm(s, e, 0, n);
      else gemm(0, m, s, e);
    }
  });
}

}  // namespace tensorgrad::kernels
