#version 450
#include "common.glsl"
#include "recurrent.glsl"
// One step t of GruSequence (kernels/recurrent.cpp; reset_after): one
// invocation per (row b, unit j) computes its three columns of h_{t-1} U
// (the sum over H in order, from 0, as the CPU's GEMM with beta 0; h_{t-1}
// from step t - 1 of y, which the previous dispatch wrote, or h0), then z, r,
// hn, n and h, and writes its five entries [h | z | r | n | hn] of y's step t.
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
  FOR_EACH(idx, p.B * H) {
    const uint b = idx / H, j = idx - b * H;
    const uint row = (b * p.T + t) * K, x = (b * p.T + t) * G;
    float hu[3] = float[3](0.0, 0.0, 0.0);
    float h_prev = 0.0;
    if (has_prev) {  // h_{t-1}: y's step t - 1 or h0
      F32 hs = t > 0u ? p.y : p.h0;
      const uint hb = t > 0u ? row - K : b * H;
      for (uint m = 0u; m < H; ++m) {
        const float hm = hs.v[hb + m];
        for (uint k = 0u; k < 3u; ++k) hu[k] = fma(hm, p.u.v[m * G + k * H + j], hu[k]);
      }
      h_prev = hs.v[hb + j];
    }
    const float z = sigmoid_f(p.xw.v[x + j] + hu[0] + p.rb.v[j]);
    const float r = sigmoid_f(p.xw.v[x + H + j] + hu[1] + p.rb.v[H + j]);
    const float hn = hu[2] + p.rb.v[2u * H + j];
    const float n = tanh_f(p.xw.v[x + 2u * H + j] + r * hn);
    p.y.v[row + j] = n + z * (h_prev - n);
    p.y.v[row + H + j] = z;
    p.y.v[row + 2u * H + j] = r;
    p.y.v[row + 3u * H + j] = n;
    p.y.v[row + 4u * H + j] = hn;
  }
}
