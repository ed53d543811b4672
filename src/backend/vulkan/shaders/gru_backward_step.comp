#version 450
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "recurrent.glsl"
// One step t of GruSequenceBackward (kernels/recurrent.cpp), run for
// t = T - 1 down to 0, then (with h0) once more as t = T. Per (row b, unit j):
//  - what step t + 1 sent back to h_t: dh_{t+1} z_{t+1} + [dz | dr]_{t+1}
//    U_zr^T + d hn_{t+1} U_n^T, summed in that order, each sum over its
//    columns in order (the CPU's two GEMMs with beta 1). The first term was
//    left by step t + 1 in d[t][j], a slot of this step's output that this
//    step overwrites (no scratch memory); this step leaves its own in
//    d[t - 1][j], or at t = 0 in step T's dh0 slot;
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

void main() {
  const uint H = p.H, G = 3u * H, D = 4u * H, K = 5u * H, T = p.T, TD = T + p.has_h0, t = p.t;
  const bool later = t + 1u < T;
  // The step whose d this one needs: t + 1, or 0 for dh0; where the carry is.
  const uint src = t == T ? 0u : t + 1u;
  FOR_EACH_BLOCK(b0, j0, p.B, H) {
    uint bs[RB], js[UB];
    [[unroll]] for (uint r = 0u; r < RB; ++r) bs[r] = min(b0 + r, p.B - 1u);
    [[unroll]] for (uint q = 0u; q < UB; ++q) js[q] = min(j0 + q, H - 1u);
    float dh_next[RB * UB];
    if (later || t == T) {
      [[unroll]] for (uint r = 0u; r < RB; ++r)
        [[unroll]] for (uint q = 0u; q < UB; ++q) dh_next[r * UB + q] = p.d.v[(bs[r] * TD + t) * D + js[q]];
      // Columns [dz | dr] of d against U's z and r columns, then d hn against U's n columns.
      for (uint k = 0u; k < 3u * H; ++k) {
        const uint dk_at = k < 2u * H ? k : k + H;
        float dk[RB], uk[UB];
        [[unroll]] for (uint r = 0u; r < RB; ++r) dk[r] = p.d.v[(bs[r] * TD + src) * D + dk_at];
        [[unroll]] for (uint q = 0u; q < UB; ++q) uk[q] = p.u.v[js[q] * G + k];
        [[unroll]] for (uint r = 0u; r < RB; ++r)
          [[unroll]] for (uint q = 0u; q < UB; ++q) dh_next[r * UB + q] = fma(dk[r], uk[q], dh_next[r * UB + q]);
      }
    }
    [[unroll]] for (uint r = 0u; r < RB; ++r)
      [[unroll]] for (uint q = 0u; q < UB; ++q) {
        const uint b = b0 + r, j = j0 + q;
        if (b >= p.B || j >= H) continue;
        if (t == T) {
          const uint o = (b * TD + T) * D;
          p.d.v[o + j] = dh_next[r * UB + q];
          p.d.v[o + H + j] = 0.0;
          p.d.v[o + 2u * H + j] = 0.0;
          p.d.v[o + 3u * H + j] = 0.0;
          continue;
        }
        const uint row = (b * T + t) * K, dr = (b * TD + t) * D;
        const float dh = p.g.v[row + j] + (later ? dh_next[r * UB + q] : 0.0);
        const float z = p.y.v[row + H + j], rr = p.y.v[row + 2u * H + j], n = p.y.v[row + 3u * H + j];
        const float hn = p.y.v[row + 4u * H + j];
        float h_prev = 0.0;
        if (t > 0u) h_prev = p.y.v[row - K + j];
        else if (p.has_h0 != 0u) h_prev = p.h0.v[b * H + j];
        const float dz = dh * (h_prev - n) + p.g.v[row + H + j];
        const float dn = (dh * (1.0 - z) + p.g.v[row + 3u * H + j]) * (1.0 - n * n);
        const float dr_ = dn * hn + p.g.v[row + 2u * H + j];
        p.d.v[dr + j] = dz * z * (1.0 - z);
        p.d.v[dr + H + j] = dr_ * rr * (1.0 - rr);
        p.d.v[dr + 2u * H + j] = dn;
        p.d.v[dr + 3u * H + j] = dn * rr + p.g.v[row + 4u * H + j];
        if (t > 0u) p.d.v[dr - D + j] = dh * z;
        else if (p.has_h0 != 0u) p.d.v[(b * TD + T) * D + j] = dh * z;
      }
  }
}
