#version 450
#include "common.glsl"
#include "attention.glsl"
// Attention backward (kernels/attention.cpp's formulas), the weights
// recomputed from the output's log-sum-exp. MODE 0: one invocation per
// query row (n, i) writes dq's row; MODE 1: one per key (kv, j) of a
// key-value row writes dk's and dv's rows, walking the queries that see it
// in every query row of its group (grouped-query attention; group 1: n). Each row is summed by one
// invocation in a fixed order: no atomics, the same bits every run.
layout(constant_id = 1) const uint MODE = 0;

// dO_i . y_i - g_lse_i: the row's term of dS.
float row_term(uint row) {
  const uint yi = row * (p.dv + 1u);
  return dot_rows(p.g, yi, p.y, yi, p.dv) - p.g.v[yi + p.dv];
}

// dS of pair (i, j) of head b, and through `wz` the dropped weight.
float ds(uint64_t key, uint b, uint i, uint j, out float wz) {
  const float neg_inf = uintBitsToFloat(0xff800000u);
  const uint row = b * p.lq + i, yi = row * (p.dv + 1u);
  const float lse = p.y.v[yi + p.dv];
  const uint kv = b / p.group;
  const float s = score(b, i, j, dot_rows(p.q, row * p.d, p.k, (kv * p.lk + j) * p.d, p.d));
  const float w = lse == neg_inf || s == neg_inf ? 0.0 : exp(s - lse);
  const float z = keep(key, b, i, j);
  wz = w * z;
  return w * (dot_rows(p.g, yi, p.v, (kv * p.lk + j) * p.dv, p.dv) * z - row_term(row));
}

void main() {
  const uint64_t key = dropout_key();
  const uint per_kv = p.group * p.lq * p.d + p.lk * p.d + p.lk * p.dv;
  if (MODE == 0u) {
    FOR_EACH(row, p.n * p.lq) {
      const uint b = row / p.lq, i = row % p.lq, out0 = b / p.group * per_kv + (b % p.group * p.lq + i) * p.d;
      for (uint e = 0u; e < p.d; ++e) p.dx.v[out0 + e] = 0.0;
      for (uint j = 0u; j < key_end(i); ++j) {
        float wz;
        const float d = ds(key, b, i, j, wz);
        const uint kj = (b / p.group * p.lk + j) * p.d;
        for (uint e = 0u; e < p.d; ++e) p.dx.v[out0 + e] += d * p.k.v[kj + e];
      }
      for (uint e = 0u; e < p.d; ++e) p.dx.v[out0 + e] *= p.scale;
    }
  } else {
    FOR_EACH(col, p.n / p.group * p.lk) {
      const uint kv = col / p.lk, j = col % p.lk;
      const uint dk0 = kv * per_kv + p.group * p.lq * p.d + j * p.d, dv0 = dk0 - j * p.d + p.lk * p.d + j * p.dv;
      for (uint e = 0u; e < p.d; ++e) p.dx.v[dk0 + e] = 0.0;
      for (uint e = 0u; e < p.dv; ++e) p.dx.v[dv0 + e] = 0.0;
      // The queries that see key j: all, or with kCausal those with j <= i + Lk - Lq.
      const uint first = (p.flags & kCausal) != 0u && j + p.lq > p.lk ? j + p.lq - p.lk : 0u;
      for (uint b = kv * p.group; b < (kv + 1u) * p.group; ++b)
        for (uint i = first; i < p.lq; ++i) {
          float wz;
          const float d = ds(key, b, i, j, wz);
          const uint row = b * p.lq + i;
          for (uint e = 0u; e < p.d; ++e) p.dx.v[dk0 + e] += d * p.q.v[row * p.d + e];
          for (uint e = 0u; e < p.dv; ++e) p.dx.v[dv0 + e] += wz * p.g.v[row * (p.dv + 1u) + e];
        }
      for (uint e = 0u; e < p.d; ++e) p.dx.v[dk0 + e] *= p.scale;
    }
  }
}
