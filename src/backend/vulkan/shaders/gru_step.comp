#version 450
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "recurrent.glsl"
// One step t of GruSequence (kernels/recurrent.cpp; reset_after). Per (row
// b, unit j): its three columns of h_{t-1} U (h_{t-1} from step t - 1 of y,
// which the previous dispatch wrote, or h0; the sum over H in order from 0,
// as the CPU's GEMM with beta 0), then z, r, hn, n and h, written as its
// five entries [h | z | r | n | hn] of y's step t.
layout(push_constant) uniform Push {
  F32 xw;  // {B,T,3H}
  F32 u;   // {H,3H}
  F32 rb;  // {3H}
  F32 h0;  // {B,H}, with has_h0
  F32 y;   // {B,T,5H}
  uint B;
  uint T;
  uint H;
  uint t;
  uint has_h0;
} p;

void main() {
  const uint H = p.H, G = 3u * H, K = 5u * H, t = p.t;
  const bool has_prev = t > 0u || p.has_h0 != 0u;
  F32 hs = t > 0u ? p.y : p.h0;  // h_{t-1}: y's step t - 1 or h0
  FOR_EACH_BLOCK(b0, j0, p.B, H) {
    uint bs[RB], js[UB], hb[RB];
    [[unroll]] for (uint r = 0u; r < RB; ++r) {
      bs[r] = min(b0 + r, p.B - 1u);
      hb[r] = t > 0u ? (bs[r] * p.T + t - 1u) * K : bs[r] * H;
    }
    [[unroll]] for (uint q = 0u; q < UB; ++q) js[q] = min(j0 + q, H - 1u);
    float hu[RB * UB * 3u];
    [[unroll]] for (uint e = 0u; e < RB * UB * 3u; ++e) hu[e] = 0.0;
    if (has_prev) {
      for (uint m = 0u; m < H; ++m) {
        float hm[RB], um[UB * 3u];
        [[unroll]] for (uint r = 0u; r < RB; ++r) hm[r] = hs.v[hb[r] + m];
        [[unroll]] for (uint q = 0u; q < UB; ++q)
          [[unroll]] for (uint k = 0u; k < 3u; ++k) um[q * 3u + k] = p.u.v[m * G + k * H + js[q]];
        [[unroll]] for (uint r = 0u; r < RB; ++r)
          [[unroll]] for (uint q = 0u; q < UB * 3u; ++q) hu[r * UB * 3u + q] = fma(hm[r], um[q], hu[r * UB * 3u + q]);
      }
    }
    [[unroll]] for (uint r = 0u; r < RB; ++r)
      [[unroll]] for (uint q = 0u; q < UB; ++q) {
        const uint b = b0 + r, j = j0 + q;
        if (b >= p.B || j >= H) continue;
        const uint row = (b * p.T + t) * K, x = (b * p.T + t) * G, e = (r * UB + q) * 3u;
        const float h_prev = has_prev ? hs.v[hb[r] + j] : 0.0;
        const float z = sigmoid_f(p.xw.v[x + j] + hu[e] + p.rb.v[j]);
        const float rr = sigmoid_f(p.xw.v[x + H + j] + hu[e + 1u] + p.rb.v[H + j]);
        const float hn = hu[e + 2u] + p.rb.v[2u * H + j];
        const float n = tanh_f(p.xw.v[x + 2u * H + j] + rr * hn);
        p.y.v[row + j] = n + z * (h_prev - n);
        p.y.v[row + H + j] = z;
        p.y.v[row + 2u * H + j] = rr;
        p.y.v[row + 3u * H + j] = n;
        p.y.v[row + 4u * H + j] = hn;
      }
  }
}
