#version 450
#include "common.glsl"
#include "loss.glsl"
// Softmax and its kin along the last axis, one team per row; constant 1
// (kernels/loss.cpp's Rows codes): 0 softmax, 1 log_softmax: y = f(x);
// 2 softmax_backward (x = y, g): y = x (g - sum(g x));
// 3 log_softmax_backward (x = y, g): y = g - exp(x) sum(g).
layout(constant_id = 1) const uint OP = 0;
layout(push_constant) uniform Push { F32 x; F32 g; F32 y; uint rows; uint cols; } p;

void main() {
  const uint l = lane();
  FOR_EACH_ROW_BLOCK(first, p.rows) {
    const uint row = first + team();
    const uint n = row < p.rows ? p.cols : 0, at = row < p.rows ? row * p.cols : 0;
    if (OP <= 1) {
      const RowStats st = row_stats(p.x, at, n);
      if (OP == 0) {
        // As the CPU: exp(z - m) / s rather than exp(z - lse), whose rounded lse loses digits at large |m|.
        const float inv = 1.0 / st.s;
        for (uint j = l; j < n; j += T) p.y.v[at + j] = st.bad ? nan_value() : exp(p.x.v[at + j] - st.m) * inv;
      } else {
        const float log_s = log(st.s);
        for (uint j = l; j < n; j += T) p.y.v[at + j] = st.bad ? nan_value() : (p.x.v[at + j] - st.m) - log_s;
      }
    } else {
      float s = 0.0;
      for (uint j = l; j < n; j += T) s += OP == 2 ? p.g.v[at + j] * p.x.v[at + j] : p.g.v[at + j];
      s = team_sum(s);
      for (uint j = l; j < n; j += T) {
        const float y = p.x.v[at + j], g = p.g.v[at + j];
        p.y.v[at + j] = OP == 2 ? y * (g - s) : g - exp(y) * s;
      }
    }
  }
}
