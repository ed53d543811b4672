#version 450
#include "common.glsl"
#include "attention.glsl"
// Attention forward, one invocation per query row (n, i), two passes over
// its keys: the largest score, then the weights' sum and the weighted sum of
// values, written into the row; the row is divided by the sum at the end
// and its log-sum-exp written last. Keys in a fixed order: the same bits
// every run.
void main() {
  const uint64_t key = dropout_key();
  const float neg_inf = uintBitsToFloat(0xff800000u);
  FOR_EACH(row, p.n * p.lq) {
    const uint b = row / p.lq, i = row % p.lq, end = key_end(i);
    const uint qi = row * p.d, yi = row * (p.dv + 1u), kv = b / p.group;
    float m = neg_inf;
    for (uint j = 0u; j < end; ++j) m = nan_max(m, score(b, i, j, dot_rows(p.q, qi, p.k, (kv * p.lk + j) * p.d, p.d)));
    for (uint e = 0u; e < p.dv; ++e) p.y.v[yi + e] = 0.0;
    float l = 0.0;
    if (m != neg_inf) {
      for (uint j = 0u; j < end; ++j) {
        const float s = score(b, i, j, dot_rows(p.q, qi, p.k, (kv * p.lk + j) * p.d, p.d));
        const float w = exp(s - m);
        l += w;
        const float wz = w * keep(key, b, i, j);
        const uint vj = (kv * p.lk + j) * p.dv;
        for (uint e = 0u; e < p.dv; ++e) p.y.v[yi + e] += wz * p.v.v[vj + e];
      }
      for (uint e = 0u; e < p.dv; ++e) p.y.v[yi + e] /= l;
    }
    p.y.v[yi + p.dv] = l == 0.0 ? neg_inf : m + log(l);
  }
}
