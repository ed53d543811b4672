#include <cblas.h>
#include <libxsmm.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/bfloat16.h"
#include "kernels/kernels.h"

#if defined(__AVX__)
#include <immintrin.h>
#endif

namespace tensorgrad::kernels {

void init_xsmm() {
  static const bool initialised = [] {
    libxsmm_init();
    return true;
  }();
  (void)initialised;
}

namespace {
// At most this many rows of C per GEMM call, so that thin products (a
// convolution's {B*H*W, k*k*C} x {k*k*C, F}) run in blocks that stay in
// cache; smaller products are split evenly over the threads.
constexpr int64_t kRowBlock = 512;
// The rows of C per OpenBLAS call (see prefer_openblas).
constexpr int64_t kBlasRows = 64;

// libxsmm's JIT kernel for a row-major C{m,n} = op(A){m,k} B{k,n} block:
// as fast as OpenBLAS on square blocks, up to 4.5x faster on thin ones, and
// it never allocates (OpenBLAS 0.3.21's small-matrix path mallocs on every
// call for narrow outputs). libxsmm is column-major: row-major C = op(A) B is
// column-major C^T = B^T op(A)^T, so the operands swap. Null when libxsmm has
// no kernel for the shape.
// The last few kernels each thread asked for are kept beside it: libxsmm's
// dispatch (hashing the descriptor, a registry lookup) takes about 22 ns,
// a third of a one-row layer's whole product, and a small model asks for
// the same handful of shapes on every run.
libxsmm_smmfunction xsmm_kernel(int64_t m, int64_t n, int64_t k, bool trans_a, int64_t lda, int64_t ldb, int64_t ldc,
                                float beta = 0.0f) {
  struct Entry {
    int64_t m = -1, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
    bool trans_a = false;
    float beta = 0.0f;
    libxsmm_smmfunction f = nullptr;
  };
  constexpr size_t kEntries = 8;
  thread_local Entry cache[kEntries];
  thread_local size_t next = 0;
  for (const Entry& e : cache)
    if (e.m == m && e.n == n && e.k == k && e.lda == lda && e.ldb == ldb && e.ldc == ldc && e.trans_a == trans_a &&
        e.beta == beta)
      return e.f;
  init_xsmm();
  const float alpha = 1.0f;
  const int flags = trans_a ? LIBXSMM_GEMM_FLAG_TRANS_B : 0;
  const libxsmm_blasint xm = libxsmm_blasint(n), xn = libxsmm_blasint(m), xk = libxsmm_blasint(k);
  const libxsmm_blasint xlda = libxsmm_blasint(ldb), xldb = libxsmm_blasint(lda), xldc = libxsmm_blasint(ldc);
  const libxsmm_smmfunction f = libxsmm_smmdispatch(xm, xn, xk, &xlda, &xldb, &xldc, &alpha, &beta, &flags, nullptr);
  cache[next++ % kEntries] = Entry{m, n, k, lda, ldb, ldc, trans_a, beta, f};
  return f;
}

// Whether OpenBLAS runs C{m,n} = op(A) B rather than libxsmm. libxsmm's JIT
// kernels have no blocking over k and are slow on A^T with a long k, the
// weight gradients X^T dY of every Dense and recurrent layer (k = the batch's
// rows: 5.9 against 58 GFLOP/s for {128, 512} over k = 6400, 41 against 69
// for {392, 500} over k = 500, one thread on an AVX2 EPYC; bench notes in
// BENCHMARKS.md), and behind OpenBLAS on large products with a wide C (39
// against 52 GFLOP/s for {3200, 512} over k = 128). Thin outputs (a
// convolution's few filters) and small products stay on libxsmm, which is
// faster there and never allocates (OpenBLAS's small-matrix path does).
// Decided for the whole product, so the choice never depends on the threads.
bool prefer_openblas(int64_t m, int64_t n, int64_t k, bool trans_a) {
  const double work = double(m) * double(n) * double(k);
  if (trans_a) return work >= double(1 << 20) && n >= 8;
  return n >= 64 && work >= double(1 << 22);
}

}  // namespace

namespace {
#if defined(__AVX__)
// dst{8 columns of rows} = the 8x8 tile of src at (i0, j0), transposed in
// registers (unpack, shuffle, cross-lane permute): a {64, 64} weight turns
// around in 436 ns against 1,545 ns element by element (one EPYC thread).
void transpose_tile8(const float* src, int64_t cols, float* dst, int64_t rows) {
  __m256 r[8];
  for (int k = 0; k < 8; ++k) r[k] = _mm256_loadu_ps(src + k * cols);
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  const __m256 out[8] = {_mm256_permute2f128_ps(s0, s4, 0x20), _mm256_permute2f128_ps(s1, s5, 0x20),
                         _mm256_permute2f128_ps(s2, s6, 0x20), _mm256_permute2f128_ps(s3, s7, 0x20),
                         _mm256_permute2f128_ps(s0, s4, 0x31), _mm256_permute2f128_ps(s1, s5, 0x31),
                         _mm256_permute2f128_ps(s2, s6, 0x31), _mm256_permute2f128_ps(s3, s7, 0x31)};
  for (int k = 0; k < 8; ++k) _mm256_storeu_ps(dst + k * rows, out[k]);
}
#endif
}  // namespace

const float* transposed(const float* b, int64_t rows, int64_t cols) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < size_t(rows * cols)) buffer.resize(size_t(rows * cols));
  float* out = buffer.data();
  int64_t i0 = 0;
#if defined(__AVX__)
  for (; i0 + 8 <= rows; i0 += 8) {
    int64_t j = 0;
    for (; j + 8 <= cols; j += 8) transpose_tile8(b + i0 * cols + j, cols, out + j * rows + i0, rows);
    for (; j < cols; ++j)
      for (int64_t i = i0; i < i0 + 8; ++i) out[j * rows + i] = b[i * cols + j];
  }
#endif
  for (int64_t i = i0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) out[j * rows + i] = b[i * cols + j];
  return out;
}

void gemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, bool trans_a, const float* b, int64_t ldb,
          float* c, int64_t ldc, float beta) {
  if (m == 0 || n == 0) return;
  if (libxsmm_smmfunction f = xsmm_kernel(m, n, k, trans_a, lda, ldb, ldc, beta)) {
    f(b, a, c);
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, CblasNoTrans, int(m), int(n), int(k), 1.0f, a,
              int(lda), b, int(ldb), beta, c, int(ldc));
}

namespace {
// The rows of C per libxsmm call, from m alone: libxsmm's AVX-512 kernels
// round differently for different row counts (a {64, 784} product over
// k = 10 in blocks of 16 rows against one call of 64: 294 of 50,176
// elements differ, Zen 5 EPYC), so a split that followed the threads would
// make results depend on them. Up to 64 rows, one call; above, blocks of a
// multiple of 16 rows, at least 4 (so that a block a descheduled worker
// holds is at most a quarter of the product: ComputePool), at most kRowBlock.
int64_t xsmm_block_rows(int64_t m) {
  if (m <= 64) return m;
  return std::min(kRowBlock, ((m + 3) / 4 + 15) / 16 * 16);
}

// A one-row product c{n} = init + a{k} B{k, n} (init: bias when given, else
// c when beta is 1, else 0), then max(c, 0) with relu: the one-row predict
// of an agent acting (issue 15). libxsmm's kernel for one row sums k in
// order, a chain of k dependent FMAs per vector of columns, so the 64-wide
// layer of the small RL model spends its time on FMA latency; here k is
// split into kParts interleaved partial sums (added pairwise at the end),
// enough independent FMAs to fill both FMA ports. The sum's order differs
// from the batched kernels', so a row predicted alone may differ from the
// same row in a batch by rounding, a few ulps of the sum of the terms'
// magnitudes (as in PyTorch, whose kernels also follow the batch size); it
// depends on nothing else (one thread, fixed order). False, with nothing
// written, on a CPU build without FMA vectors.
constexpr int64_t kParts = 4;  // the sums below add exactly four, pairwise

#if defined(__AVX512F__)
using RowVector = __m512;
constexpr int64_t kLanes = 16;
inline RowVector load_lanes(const float* p) { return _mm512_loadu_ps(p); }
inline void store_lanes(float* p, RowVector v) { _mm512_storeu_ps(p, v); }
inline RowVector fma_lanes(float a, RowVector b, RowVector c) { return _mm512_fmadd_ps(_mm512_set1_ps(a), b, c); }
inline RowVector add_lanes(RowVector a, RowVector b) { return _mm512_add_ps(a, b); }
// relu_value's lanes: a kept where !(a <= 0), NaN included (maxps would return the 0).
inline RowVector relu_lanes(RowVector a) {
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(a, _mm512_setzero_ps(), _CMP_NLE_UQ), a);
}
inline RowVector zero_lanes() { return _mm512_set1_ps(0.0f); }
#elif defined(__AVX2__) && defined(__FMA__)
using RowVector = __m256;
constexpr int64_t kLanes = 8;
inline RowVector load_lanes(const float* p) { return _mm256_loadu_ps(p); }
inline void store_lanes(float* p, RowVector v) { _mm256_storeu_ps(p, v); }
inline RowVector fma_lanes(float a, RowVector b, RowVector c) { return _mm256_fmadd_ps(_mm256_set1_ps(a), b, c); }
inline RowVector add_lanes(RowVector a, RowVector b) { return _mm256_add_ps(a, b); }
inline RowVector relu_lanes(RowVector a) { return _mm256_and_ps(a, _mm256_cmp_ps(a, _mm256_setzero_ps(), _CMP_NLE_UQ)); }
inline RowVector zero_lanes() { return _mm256_set1_ps(0.0f); }
#endif

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
// Columns [j, j + W * kLanes) of the one-row product.
template <int W>
void one_row_columns(const float* a, const float* b, int64_t ldb, float* c, int64_t j, int64_t k, const float* init,
                     bool relu) {
  RowVector acc[kParts][W];
  for (auto& part : acc)
    for (RowVector& v : part) v = zero_lanes();
  int64_t i = 0;
  for (; i + kParts <= k; i += kParts)
    for (int64_t p = 0; p < kParts; ++p)
      for (int w = 0; w < W; ++w)
        acc[p][w] = fma_lanes(a[i + p], load_lanes(b + (i + p) * ldb + j + w * kLanes), acc[p][w]);
  for (; i < k; ++i)
    for (int w = 0; w < W; ++w) acc[0][w] = fma_lanes(a[i], load_lanes(b + i * ldb + j + w * kLanes), acc[0][w]);
  for (int w = 0; w < W; ++w) {
    static_assert(kParts == 4);
    RowVector sum = add_lanes(add_lanes(acc[0][w], acc[1][w]), add_lanes(acc[2][w], acc[3][w]));
    if (init) sum = add_lanes(load_lanes(init + j + w * kLanes), sum);
    store_lanes(c + j + w * kLanes, relu ? relu_lanes(sum) : sum);
  }
}
#endif

bool one_row_product(const float* a, const float* b, int64_t ldb, float* c, int64_t n, int64_t k, float beta,
                     const float* bias, bool relu) {
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
  const float* init = bias ? bias : beta != 0.0f ? c : nullptr;
  int64_t j = 0;
  for (; j + 2 * kLanes <= n; j += 2 * kLanes) one_row_columns<2>(a, b, ldb, c, j, k, init, relu);
  for (; j + kLanes <= n; j += kLanes) one_row_columns<1>(a, b, ldb, c, j, k, init, relu);
  for (; j < n; ++j) {  // the last n % kLanes columns, one at a time
    float acc[kParts] = {};
    int64_t i = 0;
    for (; i + kParts <= k; i += kParts)
      for (int64_t p = 0; p < kParts; ++p) acc[p] = std::fma(a[i + p], b[(i + p) * ldb + j], acc[p]);
    for (; i < k; ++i) acc[0] = std::fma(a[i], b[i * ldb + j], acc[0]);
    float sum = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    if (init) sum = init[j] + sum;
    c[j] = relu ? relu_value(sum) : sum;
  }
  return true;
#else
  (void)a, (void)b, (void)ldb, (void)c, (void)n, (void)k, (void)beta, (void)bias, (void)relu;
  return false;
#endif
}

// The mixed_bfloat16 form of matmul_2d: op(B) rounded to bfloat16 and packed
// once (libxsmm's VNNI pairs), each block's rows of op(A) rounded by the
// worker that runs it, libxsmm's AVX512-BF16 kernel accumulating in float32.
// False, with nothing written, when libxsmm has no kernel for the shape.
template <class Finish>
bool matmul_2d_bf16(const OpAttrs& at, const float* a_data, int64_t lda, const float* b_data, int64_t ldb,
                    float* c_data, int64_t m, int64_t n, int64_t k, ComputePool* pool, float beta, const float* bias,
                    const Finish& finish_rows) {
  const int64_t rows = xsmm_block_rows(m), first_rows = std::min(rows, m);
  if (cpu_has_amx_bf16()) {
    // The same blocks of rows on AMX tiles, every operand padded to 32s.
    const int64_t kp = amx_round(k), np = amx_round(n);
    // Rows of 64-byte lines: a tile row that straddles two lines loads at half the rate.
    auto line_aligned = [](std::vector<bf16>& v, size_t count) {
      v.resize(count + 32);
      return reinterpret_cast<bf16*>((reinterpret_cast<uintptr_t>(v.data()) + 63) & ~uintptr_t(63));
    };
    thread_local std::vector<bf16> packed_b;  // the caller's; the workers only read it
    bf16* const pb = line_aligned(packed_b, size_t(kp * np));
    pack_vnni_bf16(b_data, ldb, at.trans_b, k, n, kp, np, pb);
    thread_local SlotBuffers<bf16> a_slots_tl;  // the caller's: A's packed rows per worker slot
    const auto a_slots = a_slots_tl.prepare(pool, size_t(amx_round(first_rows) * kp));
    parallel_for(pool, size_t((m + rows - 1) / rows), 1, [&](size_t b0, size_t b1) {
      bf16* const pa = a_slots.mine();
      for (size_t bi = b0; bi < b1; ++bi) {
        const int64_t i0 = int64_t(bi) * rows, i1 = std::min(m, i0 + rows);
        if (bias)
          for (int64_t i = i0; i < i1; ++i) std::copy(bias, bias + n, c_data + i * n);
        pack_rows_bf16(a_data, lda, at.trans_a, i0, i1 - i0, k, kp, pa);
        std::fill(pa + (i1 - i0) * kp, pa + amx_round(i1 - i0) * kp, bf16(0));
        amx_gemm_bf16(pa, pb, np, c_data + i0 * n, n, i1 - i0, n, kp, beta != 0.0f);
        finish_rows(i0, i1);
      }
    });
    return true;
  }
  const int64_t kp = even_k(k);
  const libxsmm_bsmmfunction full = bf16_gemm_kernel(first_rows, n, kp, kp, n, beta);
  const libxsmm_bsmmfunction tail = m > rows && m % rows ? bf16_gemm_kernel(m % rows, n, kp, kp, n, beta) : full;
  if (!full || !tail) return false;
  thread_local std::vector<bf16> packed_b;  // the caller's; the workers only read it
  packed_b.resize(size_t(kp * n));
  pack_vnni_bf16(b_data, ldb, at.trans_b, k, n, packed_b.data());
  const bf16* pb = packed_b.data();
  const size_t blocks = size_t((m + rows - 1) / rows);
  thread_local SlotBuffers<bf16> a_slots_tl;  // the caller's: A's packed rows per worker slot
  const auto a_slots = a_slots_tl.prepare(pool, size_t(first_rows * kp));
  parallel_for(pool, blocks, 1, [&](size_t b0, size_t b1) {
    bf16* const packed_a = a_slots.mine();
    for (size_t bi = b0; bi < b1; ++bi) {
      const int64_t i0 = int64_t(bi) * rows, i1 = std::min(m, i0 + rows);
      if (bias)
        for (int64_t i = i0; i < i1; ++i) std::copy(bias, bias + n, c_data + i * n);
      pack_rows_bf16(a_data, lda, at.trans_a, i0, i1 - i0, k, kp, packed_a);
      (i1 - i0 == first_rows ? full : tail)(pb, packed_a, c_data + i0 * n);
      finish_rows(i0, i1);
    }
  });
  return true;
}

// C{m,n} = beta C + op(A) op(B) for one pair of row-major matrices, A
// {a_rows, lda} and B {b_rows, b_cols} (k the inner size), beta 0 or 1, in
// blocks of rows of C run on `pool` (null: the calling thread); with bf16,
// on bfloat16 operands (matmul_2d_bf16) where libxsmm has the kernel; with
// relu, each block's rows then max(C, 0).
void matmul_2d(const OpAttrs& at, const float* a_data, int64_t lda, const float* b_data, int64_t b_rows,
               int64_t b_cols, float* c_data, int64_t m, int64_t n, int64_t k, ComputePool* pool, float beta,
               const float* bias, bool bf16, bool relu) {
  if (m == 0 || n == 0) return;
  // With a bias, each block's rows of C start as the bias and the GEMM adds.
  auto set_bias_rows = [=](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) std::copy(bias, bias + n, c_data + i * n);
  };
  auto finish_rows = [=](int64_t i0, int64_t i1) {
    if (!relu) return;
    float* p = c_data + i0 * n;
    for (int64_t i = 0; i < (i1 - i0) * n; ++i) p[i] = relu_value(p[i]);
  };
  if (k == 0) {
    if (bias) set_bias_rows(0, m);
    else if (beta == 0.0f) std::fill(c_data, c_data + m * n, 0.0f);
    finish_rows(0, m);
    return;
  }
  if (bias) beta = 1.0f;
  if (bf16 && bf16_pays(m, n, k) &&
      matmul_2d_bf16(at, a_data, lda, b_data, b_cols, c_data, m, n, k, pool, beta, bias, finish_rows))
    return;
  // A transposed B is turned around once (it is the small operand of every
  // backward product), so every block runs libxsmm's B-not-transposed kernel.
  const bool flip_b = at.trans_b && b_rows * b_cols <= (int64_t(1) << 20);
  const float* pb = flip_b ? transposed(b_data, b_rows, b_cols) : b_data;
  const bool trans_b = at.trans_b && !flip_b;
  const int64_t ldb = flip_b ? n : b_cols;
  if (m == 1 && !at.trans_a && !trans_b && one_row_product(a_data, pb, ldb, c_data, n, k, beta, bias, relu)) return;
  const bool blas = trans_b || prefer_openblas(m, n, k, at.trans_a);
  auto gemm = [&](int64_t i0, int64_t i1) {
    if (bias) set_bias_rows(i0, i1);
    const float* pa = a_data + (at.trans_a ? i0 : i0 * lda);
    float* pc = c_data + i0 * n;
    if (!blas)
      if (libxsmm_smmfunction f = xsmm_kernel(i1 - i0, n, k, at.trans_a, lda, ldb, n, beta)) {
        f(pb, pa, pc);
        finish_rows(i0, i1);
        return;
      }
    cblas_sgemm(CblasRowMajor, at.trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                int(i1 - i0), int(n), int(k), 1.0f, pa, int(lda), pb, int(ldb), beta, pc, int(n));
    finish_rows(i0, i1);
  };
  // OpenBLAS's results depend on the rows of the call, so its blocks are a
  // fixed kBlasRows whatever the threads (as fast as larger ones from 64
  // rows: 76 against 72 GFLOP/s for {64 | 392, 500} over k = 500).
  const int64_t rows = blas ? kBlasRows : xsmm_block_rows(m);
  const size_t blocks = size_t((m + rows - 1) / rows);
  parallel_for(pool, blocks, 1, [&](size_t b0, size_t b1) {
    for (size_t bi = b0; bi < b1; ++bi) gemm(int64_t(bi) * rows, std::min(m, int64_t(bi + 1) * rows));
  });
}
}  // namespace

// C{M,N} = beta C + op(A) op(B), row-major, in blocks of rows of C run on the pool;
// batched {B,M,N}: one such product per batch entry, the entries spread over
// the threads when there are at least as many as threads (each then on one
// thread), else run in turn with their rows spread. The BLAS runs
// single-threaded (see core/threads.cpp): one pool, ours, owns every thread,
// so BLAS threads and kernel threads never spin against each other on the same cores.
void matmul(const OpAttrs& at, const TensorRef& a, const TensorRef& b, const TensorRef& c, const KernelContext& ctx,
            float beta, const float* bias, bool relu) {
  const int r = c.shape.rank();
  const int64_t m = c.shape[r - 2], n = c.shape[r - 1];
  const int64_t a_rows = a.shape[r - 2], lda = a.shape[r - 1], b_rows = b.shape[r - 2], b_cols = b.shape[r - 1];
  const int64_t k = at.trans_a ? a_rows : lda;
  if (r == 2)
    return matmul_2d(at, a.f(), lda, b.f(), b_rows, b_cols, c.f(), m, n, k, ctx.pool, beta, bias, ctx.bf16, relu);
  const int64_t batch = c.shape[0];
  auto one = [&](int64_t i, ComputePool* pool) {
    matmul_2d(at, a.f() + i * a_rows * lda, lda, b.f() + i * b_rows * b_cols, b_rows, b_cols, c.f() + i * m * n, m, n,
              k, pool, beta, nullptr, ctx.bf16, relu);
  };
  const int64_t threads = pool_threads(ctx.pool);
  if (threads > 1 && batch >= threads) {
    parallel_for(ctx.pool, size_t(batch), 1, [&](size_t i0, size_t i1) {
      for (size_t i = i0; i < i1; ++i) one(int64_t(i), nullptr);
    });
  } else {
    for (int64_t i = 0; i < batch; ++i) one(i, ctx.pool);
  }
}

}  // namespace tensorgrad::kernels
