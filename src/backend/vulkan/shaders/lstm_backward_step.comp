#version 450
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "recurrent.glsl"
// One step t of LstmSequenceBackward (kernels/recurrent.cpp), run for
// t = T - 1 down to 0, then (with c0) once more as t = T. Per (row b, unit j):
//  - dh = g_h + dz_{t+1} U^T (the sum over 4H in order from 0, as the CPU's
//    GEMM with beta 0), dz_{t+1} being step t + 1 of d, written by the
//    previous dispatch;
//  - the cell gradient carried from step t + 1 (dc_{t+1} f_{t+1}) was left by
//    that step in the slot of dz_t that this step overwrites last
//    (d[t][H + j]), so no scratch memory is needed; this step leaves its
//    carry in d[t - 1][H + j], or at t = 0 in step T's dc0 slot;
//  - the gates' gradients through their activations' derivatives.
// At t = T (initial states given): step T's [dh0 | dc0 | 0 | 0], dh0 = dz_0
// U^T, dc0 already in place.
layout(push_constant) uniform Push {
  F32 y;   // {B,T,6H}
  F32 u;   // {H,4H}
  F32 g;   // {B,T,6H}
  F32 c0;  // {B,H}, with has_c0
  F32 d;   // {B,TD,4H}, TD = T + has_c0
  uint B;
  uint T;
  uint H;
  uint t;
  uint has_c0;
} p;

void main() {
  const uint H = p.H, G = 4u * H, K = 6u * H, T = p.T, TD = T + p.has_c0, t = p.t;
  const bool later = t + 1u < T;
  // The step whose dz U^T this one needs: t + 1, or 0 for dh0.
  const uint src = t == T ? 0u : t + 1u;
  FOR_EACH_BLOCK(b0, j0, p.B, H) {
    uint bs[RB], js[UB];
    [[unroll]] for (uint r = 0u; r < RB; ++r) bs[r] = min(b0 + r, p.B - 1u);
    [[unroll]] for (uint q = 0u; q < UB; ++q) js[q] = min(j0 + q, H - 1u);
    float dh_rec[RB * UB];
    [[unroll]] for (uint e = 0u; e < RB * UB; ++e) dh_rec[e] = 0.0;
    if (later || t == T) {
      for (uint k = 0u; k < G; ++k) {
        float dk[RB], uk[UB];
        [[unroll]] for (uint r = 0u; r < RB; ++r) dk[r] = p.d.v[(bs[r] * TD + src) * G + k];
        [[unroll]] for (uint q = 0u; q < UB; ++q) uk[q] = p.u.v[js[q] * G + k];
        [[unroll]] for (uint r = 0u; r < RB; ++r)
          [[unroll]] for (uint q = 0u; q < UB; ++q) dh_rec[r * UB + q] = fma(dk[r], uk[q], dh_rec[r * UB + q]);
      }
    }
    [[unroll]] for (uint r = 0u; r < RB; ++r)
      [[unroll]] for (uint q = 0u; q < UB; ++q) {
        const uint b = b0 + r, j = j0 + q;
        if (b >= p.B || j >= H) continue;
        if (t == T) {
          const uint o = (b * TD + T) * G;
          p.d.v[o + j] = dh_rec[r * UB + q];
          p.d.v[o + 2u * H + j] = 0.0;
          p.d.v[o + 3u * H + j] = 0.0;
          continue;
        }
        const uint row = (b * T + t) * K, dr = (b * TD + t) * G;
        const float dh = p.g.v[row + j] + (later ? dh_rec[r * UB + q] : 0.0);
        const float dc_next = later ? p.d.v[dr + H + j] : 0.0;
        const float c = p.y.v[row + H + j], i = p.y.v[row + 2u * H + j], f = p.y.v[row + 3u * H + j];
        const float gg = p.y.v[row + 4u * H + j], o = p.y.v[row + 5u * H + j];
        const float tc = tanh_f(c);
        const float dc = dc_next + p.g.v[row + H + j] + dh * o * (1.0 - tc * tc);
        const float di = dc * gg + p.g.v[row + 2u * H + j];
        float df = p.g.v[row + 3u * H + j];
        if (t > 0u) df = dc * p.y.v[row - K + H + j] + df;
        else if (p.has_c0 != 0u) df = dc * p.c0.v[b * H + j] + df;
        const float dg = dc * i + p.g.v[row + 4u * H + j];
        const float dout = dh * tc + p.g.v[row + 5u * H + j];
        p.d.v[dr + j] = di * i * (1.0 - i);
        p.d.v[dr + H + j] = df * f * (1.0 - f);
        p.d.v[dr + 2u * H + j] = dg * (1.0 - gg * gg);
        p.d.v[dr + 3u * H + j] = dout * o * (1.0 - o);
        if (t > 0u) p.d.v[dr - G + H + j] = dc * f;
        else if (p.has_c0 != 0u) p.d.v[(b * TD + T) * G + H + j] = dc * f;
      }
  }
}
