#version 450
#include "common.glsl"
#include "recurrent.glsl"
// One step t of LstmSequence (kernels/recurrent.cpp): one invocation per
// (row b, unit j) computes its four gates' pre-activations xw_t + h_{t-1} U
// (h_{t-1} from step t - 1 of y, which the previous dispatch wrote, or h0),
// the gates, c and h, and writes its six entries [h | c | i | f | g | o] of
// y's step t. The sum over H runs in order from xw, as the CPU's GEMM with
// beta 1 accumulates.
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
  FOR_EACH(idx, p.B * H) {
    const uint b = idx / H, j = idx - b * H;
    const uint row = (b * p.T + t) * K, x = (b * p.T + t) * G;
    float z[4];
    for (uint k = 0u; k < 4u; ++k) z[k] = p.xw.v[x + k * H + j];
    // h_{t-1} and c_{t-1}: y's step t - 1, or the initial states.
    F32 hs = t > 0u ? p.y : p.h0, cs = t > 0u ? p.y : p.c0;
    const uint hb = t > 0u ? row - K : b * H, cb = t > 0u ? row - K + H : b * H;
    if (t > 0u || p.has_state != 0u) {
      for (uint m = 0u; m < H; ++m) {
        const float hm = hs.v[hb + m];
        for (uint k = 0u; k < 4u; ++k) z[k] = fma(hm, p.u.v[m * G + k * H + j], z[k]);
      }
    }
    const float i = sigmoid_f(z[0]), f = sigmoid_f(z[1]), g = tanh_f(z[2]), o = sigmoid_f(z[3]);
    float c;
    if (t > 0u || p.has_state != 0u) {
      const float c_prev = cs.v[cb + j];
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
