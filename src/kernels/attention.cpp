// Scaled dot-product attention, forward and backward, in tiles of queries
// and keys with an online softmax (FlashAttention, Dao et al. 2022;
// FlashAttention-2's loop order for the backward pass): no {Lq, Lk} matrix
// is ever stored, only a {kQueryTile, kKeyTile} tile per thread. Each
// (n, query tile) is a task forward; each n one task backward, so that its
// dk and dv are summed by one thread in a fixed order (the same bits for
// any thread count). Grouped-query attention: query row b reads key-value
// row b / group; backward, one task per key-value row sums the gradients of
// its group's query rows into its dk and dv.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/vector_math.h"
#include "tensorgrad/core/random.h"

namespace tensorgrad::kernels {

namespace {

constexpr int64_t kQueryTile = 64, kKeyTile = 64;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The op's inputs and attributes, read once.
struct Problem {
  const float *q, *k, *v, *mask = nullptr;
  int64_t n, lq, lk, d, dv;
  int64_t nkv, group;  // key-value rows, and the query rows that read each (n / nkv)
  int64_t mask_n = 0, mask_q = 0;  // the mask's first two dimensions (1 or N, 1 or Lq)
  float scale, rate;
  bool causal;
  uint64_t key = 0;  // the dropout stream's key for this run

  // The mask and the counter follow q, k, v (and y, g in the backward op).
  Problem(const KernelCall& c, bool backward) {
    q = c.in[0].f(), k = c.in[1].f(), v = c.in[2].f();
    n = c.in[0].shape[0], lq = c.in[0].shape[1], d = c.in[0].shape[2];
    lk = c.in[1].shape[1], dv = c.in[2].shape[2];
    nkv = c.in[1].shape[0], group = n / nkv;
    scale = c.at.factor, rate = c.at.rate, causal = (c.at.flags & kCausal) != 0;
    size_t next = backward ? 5 : 3;
    if (c.at.flags & kAttentionMask) {
      mask = c.in[next].f();
      mask_n = c.in[next].shape[0], mask_q = c.in[next].shape[1];
      ++next;
    }
    if (rate > 0.0f) key = hash_random(c.at.seed, uint64_t(*static_cast<const int64_t*>(c.in[next].data)));
  }

  // The scores of query i of head b against keys [j0, j0 + cols), from the raw products, in place:
  // scaled, the mask added, -inf past the causal edge. Loops without branches, so that they vectorize.
  void score_row(int64_t b, int64_t i, int64_t j0, int64_t cols, float* s) const {
    for (int64_t j = 0; j < cols; ++j) s[j] *= scale;
    if (mask) {
      const float* mr = mask + ((mask_n == 1 ? 0 : b) * mask_q + (mask_q == 1 ? 0 : i)) * lk + j0;
      for (int64_t j = 0; j < cols; ++j) s[j] += mr[j];
    }
    if (causal)  // hidden whatever the mask holds there
      for (int64_t j = std::max<int64_t>(i + lk - lq - j0 + 1, 0); j < cols; ++j) s[j] = kNegInf;
  }
  // The dropout factors of weights (b, i, j0 .. j0 + cols) into z: 0, or 1 / (1 - rate).
  void keep_row(int64_t b, int64_t i, int64_t j0, int64_t cols, float* z) const {
    const uint64_t k0 = key, t = keep_threshold(rate), first = uint64_t((b * lq + i) * lk + j0);
    const float s = 1.0f / (1.0f - rate);
    for (int64_t j = 0; j < cols; ++j) z[j] = hash_keeps(k0, first + uint64_t(j), t) ? s : 0.0f;
  }
  // The keys a tile of queries [i0, i1) sees: [0, end).
  int64_t key_end(int64_t i1) const { return causal ? std::clamp<int64_t>(i1 + lk - lq, 0, lk) : lk; }
};

// x{rows, cols} transposed into `out` {cols, rows}.
void transpose_into(const float* x, int64_t rows, int64_t cols, std::vector<float>& out) {
  out.resize(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[size_t(c * rows + r)] = x[r * cols + c];
}

}  // namespace

// out {N, Lq, Dv + 1}: per query row, softmax(scores) v and the scores' log-sum-exp.
void attention_forward(const KernelCall& c) {
  const Problem p(c, false);
  float* out = c.out.f();
  const int64_t row = p.dv + 1, tiles = (p.lq + kQueryTile - 1) / kQueryTile;
  parallel_for(c.ctx.pool, size_t(p.n * tiles), 1, [&](size_t begin, size_t end) {
    std::vector<float> kt, acc, s(static_cast<size_t>(kQueryTile * kKeyTile)), m(static_cast<size_t>(kQueryTile)),
        l(static_cast<size_t>(kQueryTile)), z(static_cast<size_t>(kKeyTile));
    int64_t kt_of = -1;
    for (size_t task = begin; task < end; ++task) {
      const int64_t b = int64_t(task) / tiles, i0 = int64_t(task) % tiles * kQueryTile;
      const int64_t rows = std::min(kQueryTile, p.lq - i0);
      const float* q = p.q + (b * p.lq + i0) * p.d;
      const int64_t kv = b / p.group;
      if (kt_of != kv) transpose_into(p.k + kv * p.lk * p.d, p.lk, p.d, kt), kt_of = kv;  // {D, Lk}
      acc.assign(size_t(rows * p.dv), 0.0f);
      std::fill(m.begin(), m.end(), kNegInf);
      std::fill(l.begin(), l.end(), 0.0f);
      const int64_t keys = p.key_end(i0 + rows);
      for (int64_t j0 = 0; j0 < keys; j0 += kKeyTile) {
        const int64_t cols = std::min(kKeyTile, keys - j0);
        gemm(rows, cols, p.d, q, p.d, false, kt.data() + j0, p.lk, s.data(), cols, 0.0f);
        for (int64_t r = 0; r < rows; ++r) {
          float* sr = s.data() + r * cols;
          p.score_row(b, i0 + r, j0, cols, sr);
          float top = m[size_t(r)];
          bool nan = std::isnan(top);
          for (int64_t j = 0; j < cols; ++j) {
            top = sr[j] > top ? sr[j] : top;
            nan |= sr[j] != sr[j];
          }
          if (nan) top = std::numeric_limits<float>::quiet_NaN();  // a NaN score makes the row NaN
          if (top == kNegInf) {                                    // nothing visible yet: weights 0
            std::fill(sr, sr + cols, 0.0f);
            continue;
          }
          // Rescale what was summed under the old maximum (0 when there was none).
          const float alpha = m[size_t(r)] == kNegInf ? 0.0f : std::exp(m[size_t(r)] - top);
          for (int64_t j = 0; j < cols; ++j) sr[j] -= top;
          exp_n(sr, sr, cols);
          float sum = 0.0f;
          for (int64_t j = 0; j < cols; ++j) sum += sr[j];
          if (p.rate > 0.0f) {
            p.keep_row(b, i0 + r, j0, cols, z.data());
            for (int64_t j = 0; j < cols; ++j) sr[j] *= z[size_t(j)];
          }
          l[size_t(r)] = l[size_t(r)] * alpha + sum;
          m[size_t(r)] = top;
          float* ar = acc.data() + r * p.dv;
          for (int64_t e = 0; e < p.dv; ++e) ar[e] *= alpha;
        }
        gemm(rows, p.dv, cols, s.data(), cols, false, p.v + (kv * p.lk + j0) * p.dv, p.dv, acc.data(), p.dv, 1.0f);
      }
      for (int64_t r = 0; r < rows; ++r) {
        float* o = out + (b * p.lq + i0 + r) * row;
        // l is 0 only when every key is hidden (then 0 and -inf); a NaN score makes l NaN, and the row NaN.
        const float lr = l[size_t(r)];
        for (int64_t e = 0; e < p.dv; ++e) o[e] = lr == 0.0f ? 0.0f : acc[size_t(r * p.dv + e)] / lr;
        o[p.dv] = lr == 0.0f ? kNegInf : m[size_t(r)] + std::log(lr);
      }
    }
  });
}

// in: q, k, v, y, g [, mask] [, counter]; out {Nkv, G Lq D + Lk D + Lk Dv}: [dq of the G query rows | dk | dv]
// per key-value row. With P the
// weights (recomputed from y's log-sum-exp), Z the dropout factors and dO = g's first Dv columns:
// dv = (P Z)^T dO, dP = (dO v^T) Z, dS = P (dP - rowsum(dO y) + g_lse), dq = scale dS k, dk = scale dS^T q.
void attention_backward(const KernelCall& c) {
  const Problem p(c, true);
  const float *y = c.in[3].f(), *g = c.in[4].f();
  float* out = c.out.f();
  const int64_t row = p.dv + 1, per_kv = p.group * p.lq * p.d + p.lk * p.d + p.lk * p.dv;
  parallel_for(c.ctx.pool, size_t(p.nkv), 1, [&](size_t begin, size_t end) {
    std::vector<float> kt, vt, s(static_cast<size_t>(kQueryTile * kKeyTile)),
        dp(static_cast<size_t>(kQueryTile * kKeyTile)), di(static_cast<size_t>(kQueryTile)),
        z(static_cast<size_t>(kKeyTile));
    for (size_t kvb = begin; kvb < end; ++kvb) {
      const int64_t kv = int64_t(kvb);
      float* const dq0 = out + kv * per_kv;
      float* dk = dq0 + p.group * p.lq * p.d;
      float* dv = dk + p.lk * p.d;
      std::fill(dq0, dq0 + per_kv, 0.0f);
      transpose_into(p.k + kv * p.lk * p.d, p.lk, p.d, kt);
      transpose_into(p.v + kv * p.lk * p.dv, p.lk, p.dv, vt);
      for (int64_t b = kv * p.group; b < (kv + 1) * p.group; ++b) {  // the query rows of the group, in order
        float* dq = dq0 + (b - kv * p.group) * p.lq * p.d;
        for (int64_t i0 = 0; i0 < p.lq; i0 += kQueryTile) {
          const int64_t rows = std::min(kQueryTile, p.lq - i0);
          const float* q = p.q + (b * p.lq + i0) * p.d;
          const float* yr = y + (b * p.lq + i0) * row;
          const float* gr = g + (b * p.lq + i0) * row;
          for (int64_t r = 0; r < rows; ++r) {
            float sum = 0.0f;
            for (int64_t e = 0; e < p.dv; ++e) sum += gr[r * row + e] * yr[r * row + e];
            di[size_t(r)] = sum - gr[r * row + p.dv];  // the log-sum-exp's gradient enters with the opposite sign
          }
          const int64_t keys = p.key_end(i0 + rows);
          for (int64_t j0 = 0; j0 < keys; j0 += kKeyTile) {
            const int64_t cols = std::min(kKeyTile, keys - j0);
            gemm(rows, cols, p.d, q, p.d, false, kt.data() + j0, p.lk, s.data(), cols, 0.0f);
            gemm(rows, cols, p.dv, gr, row, false, vt.data() + j0, p.lk, dp.data(), cols, 0.0f);
            for (int64_t r = 0; r < rows; ++r) {
              const float lse = yr[r * row + p.dv], dr_i = di[size_t(r)];
              float* sr = s.data() + r * cols;
              float* dr = dp.data() + r * cols;
              if (lse == kNegInf) {  // the query saw no key: no weights, no gradient
                std::fill(sr, sr + cols, 0.0f);
                std::fill(dr, dr + cols, 0.0f);
                continue;
              }
              p.score_row(b, i0 + r, j0, cols, sr);
              for (int64_t j = 0; j < cols; ++j) sr[j] -= lse;
              exp_n(sr, sr, cols);  // the weights w (0 for hidden keys)
              if (p.rate > 0.0f) {
                p.keep_row(b, i0 + r, j0, cols, z.data());
                for (int64_t j = 0; j < cols; ++j) {
                  dr[j] = sr[j] * (dr[j] * z[size_t(j)] - dr_i);  // dS
                  sr[j] *= z[size_t(j)];                          // the dropped weights, for dv
                }
              } else {
                for (int64_t j = 0; j < cols; ++j) dr[j] = sr[j] * (dr[j] - dr_i);
              }
            }
            gemm(cols, p.dv, rows, s.data(), cols, true, gr, row, dv + j0 * p.dv, p.dv, 1.0f);
            gemm(rows, p.d, cols, dp.data(), cols, false, p.k + (kv * p.lk + j0) * p.d, p.d, dq + i0 * p.d, p.d, 1.0f);
            gemm(cols, p.d, rows, dp.data(), cols, true, q, p.d, dk + j0 * p.d, p.d, 1.0f);
          }
        }
      }
      for (int64_t i = 0; i < (p.group * p.lq + p.lk) * p.d; ++i) dq0[i] *= p.scale;  // dq and dk, contiguous
    }
  });
}

}  // namespace tensorgrad::kernels
