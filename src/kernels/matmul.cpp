#include <cblas.h>

#include "kernels/kernels.h"

namespace tensorgrad::kernels {

// C{M,N} = op(A) op(B), row-major; OpenBLAS threads itself (set_num_threads
// sets its count), so the pool is not used here.
void matmul(const OpAttrs& at, const TensorRef& a, const TensorRef& b, const TensorRef& c, const KernelContext&) {
  const int m = int(c.shape[0]), n = int(c.shape[1]);
  const int k = int(at.trans_a ? a.shape[0] : a.shape[1]);
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < c.numel(); ++i) c.f()[i] = 0.0f;
    return;
  }
  cblas_sgemm(CblasRowMajor, at.trans_a ? CblasTrans : CblasNoTrans, at.trans_b ? CblasTrans : CblasNoTrans, m, n, k,
              1.0f, a.f(), int(a.shape[1]), b.f(), int(b.shape[1]), 0.0f, c.f(), n);
}

}  // namespace tensorgrad::kernels
