#version 450
#include "common.glsl"
#include "recurrent.glsl"
// One step t of GruSequenceBackward (kernels/recurrent.cpp), run for
// t = T - 1 down to 0, then (with h0) once more as t = T. One invocation per
// (row b, unit j):
//  - what step t + 1 sent back to h_t: dh_{t+1} z_{t+1} + [dz | dr]_{t+1}
//    U_zr^T + d hn_{t+1} U_n^T, summed in that order, each sum over its
//    columns in order (the CPU's two GEMMs with beta 1). The first term was
//    left by step t + 1's invocation for the same (b, j) in d[t][j], the slot
//    of this step's output that this one overwrites (no scratch memory); this
//    step leaves its own in d[t - 1][j], or at t = 0 in step T's dh0 slot;
//  - the gates' gradients through their activations' derivatives.
// At t = T (initial state given): step T's [dh0 | 0 | 0 | 0], dh0 completed
// from step 0's d in place.
layout(push_constant) uniform Push {
  F32 y;   // {B,T,5H}
  F32 u;   // {H,3H}
  F32 g;   // {B,T,5H}
  F32 h0;  // {B,H}, with has_h0
  F32 d;   // {B,TD,4H}, TD = T + has_h0
  uint B;
  uint T;
  uint H;
  uint t;
  uint has_h0;
} p;

// acc + [dz | dr] U_zr^T + d hn U_n^T, unit j, for the d row at `base`.
float dh_rec(float acc, uint base, uint j, uint H) {
  const uint G = 3u * H;
  for (uint k = 0u; k < 2u * H; ++k) acc = fma(p.d.v[base + k], p.u.v[j * G + k], acc);
  for (uint k = 0u; k < H; ++k) acc = fma(p.d.v[base + 3u * H + k], p.u.v[j * G + 2u * H + k], acc);
  return acc;
}

void main() {
  const uint H = p.H, D = 4u * H, K = 5u * H, T = p.T, TD = T + p.has_h0, t = p.t;
  FOR_EACH(idx, p.B * H) {
    const uint b = idx / H, j = idx - b * H;
    if (t == T) {
      const uint o = (b * TD + T) * D;
      p.d.v[o + j] = dh_rec(p.d.v[o + j], b * TD * D, j, H);
      p.d.v[o + H + j] = 0.0;
      p.d.v[o + 2u * H + j] = 0.0;
      p.d.v[o + 3u * H + j] = 0.0;
      continue;
    }
    const bool later = t + 1u < T;
    const uint row = (b * T + t) * K, dr = (b * TD + t) * D;
    const float dh = p.g.v[row + j] + (later ? dh_rec(p.d.v[dr + j], dr + D, j, H) : 0.0);
    const float z = p.y.v[row + H + j], r = p.y.v[row + 2u * H + j], n = p.y.v[row + 3u * H + j];
    const float hn = p.y.v[row + 4u * H + j];
    float h_prev = 0.0;
    if (t > 0u) h_prev = p.y.v[row - K + j];
    else if (p.has_h0 != 0u) h_prev = p.h0.v[b * H + j];
    const float dz = dh * (h_prev - n) + p.g.v[row + H + j];
    const float dn = (dh * (1.0 - z) + p.g.v[row + 3u * H + j]) * (1.0 - n * n);
    const float dr_ = dn * hn + p.g.v[row + 2u * H + j];
    p.d.v[dr + j] = dz * z * (1.0 - z);
    p.d.v[dr + H + j] = dr_ * r * (1.0 - r);
    p.d.v[dr + 2u * H + j] = dn;
    p.d.v[dr + 3u * H + j] = dn * r + p.g.v[row + 4u * H + j];
    if (t > 0u) p.d.v[dr - D + j] = dh * z;
    else if (p.has_h0 != 0u) p.d.v[(b * TD + T) * D + j] = dh * z;
  }
}
