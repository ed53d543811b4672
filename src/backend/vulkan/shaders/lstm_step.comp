#version 450
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "recurrent.glsl"
// One step t of LstmSequence (kernels/recurrent.cpp). Per (row b, unit j):
// its four gates' pre-activations xw_t + h_{t-1} U (h_{t-1} from step t - 1
// of y, which the previous dispatch wrote, or h0; the sum over H in order
// from xw, as the CPU's GEMM with beta 1 accumulates), the gates, c and h,
// written as its six entries [h | c | i | f | g | o] of y's step t.
layout(push_constant) uniform Push {
  F32 xw;  // {B,T,4H}
  F32 u;   // {H,4H}
  F32 y;   // {B,T,6H}
  F32 h0;  // {B,H}, with has_state
  F32 c0;
  uint B;
  uint T;
  uint H;
  uint t;
  uint has_state;
} p;

void main() {
  const uint H = p.H, G = 4u * H, K = 6u * H, t = p.t;
  const bool has_prev = t > 0u || p.has_state != 0u;
  // h_{t-1} and c_{t-1}: y's step t - 1, or the initial states.
  F32 hs = t > 0u ? p.y : p.h0, cs = t > 0u ? p.y : p.c0;
  FOR_EACH_BLOCK(b0, j0, p.B, H) {
    uint bs[RB], js[UB];
    [[unroll]] for (uint r = 0u; r < RB; ++r) bs[r] = min(b0 + r, p.B - 1u);
    [[unroll]] for (uint q = 0u; q < UB; ++q) js[q] = min(j0 + q, H - 1u);
    float z[RB * UB * 4u];
    [[unroll]] for (uint r = 0u; r < RB; ++r)
      [[unroll]] for (uint q = 0u; q < UB; ++q)
        [[unroll]] for (uint k = 0u; k < 4u; ++k)
          z[(r * UB + q) * 4u + k] = p.xw.v[(bs[r] * p.T + t) * G + k * H + js[q]];
    if (has_prev) {
      uint hb[RB];
      [[unroll]] for (uint r = 0u; r < RB; ++r) hb[r] = t > 0u ? (bs[r] * p.T + t - 1u) * K : bs[r] * H;
      for (uint m = 0u; m < H; ++m) {
        float hm[RB], um[UB * 4u];
        [[unroll]] for (uint r = 0u; r < RB; ++r) hm[r] = hs.v[hb[r] + m];
        [[unroll]] for (uint q = 0u; q < UB; ++q)
          [[unroll]] for (uint k = 0u; k < 4u; ++k) um[q * 4u + k] = p.u.v[m * G + k * H + js[q]];
        [[unroll]] for (uint r = 0u; r < RB; ++r)
          [[unroll]] for (uint q = 0u; q < UB * 4u; ++q) z[r * UB * 4u + q] = fma(hm[r], um[q], z[r * UB * 4u + q]);
      }
    }
    [[unroll]] for (uint r = 0u; r < RB; ++r)
      [[unroll]] for (uint q = 0u; q < UB; ++q) {
        const uint b = b0 + r, j = j0 + q;
        if (b >= p.B || j >= H) continue;
        const uint row = (b * p.T + t) * K, e = (r * UB + q) * 4u;
        const float i = sigmoid_f(z[e]), f = sigmoid_f(z[e + 1u]), g = tanh_f(z[e + 2u]), o = sigmoid_f(z[e + 3u]);
        float c;
        if (has_prev) {
          const float c_prev = cs.v[(t > 0u ? row - K + H : b * H) + j];
          precise float fc = f * c_prev;
          precise float ig = i * g;
          c = fc + ig;
        } else {
          c = i * g;
        }
        p.y.v[row + j] = tanh_f(c) * o;
        p.y.v[row + H + j] = c;
        p.y.v[row + 2u * H + j] = i;
        p.y.v[row + 3u * H + j] = f;
        p.y.v[row + 4u * H + j] = g;
        p.y.v[row + 5u * H + j] = o;
      }
  }
}
