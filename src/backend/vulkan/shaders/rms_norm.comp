#version 450
#include "common.glsl"
// RmsNorm (MODE 0) and RmsNormBackward (MODE 1), one invocation per row of
// D features (kernels/rms_norm.cpp's formulas): r = 1 / sqrt(sum(x^2) / D +
// eps); forward y = x r [w]; backward, with h = g [w], dx = r h - x r^3
// sum(h x) / D. Each row summed in order by one invocation: the same bits
// every run.
layout(constant_id = 1) const uint MODE = 0;

layout(push_constant) uniform Push {
  F32 x;
  F32 g;  // backward only
  F32 w;  // with has_weight
  F32 y;  // forward: y; backward: dx
  uint rows, d, has_weight;
  float eps;
} p;

float weight(uint j) { return p.has_weight != 0u ? p.w.v[j] : 1.0; }

void main() {
  FOR_EACH(row, p.rows) {
    const uint at = row * p.d;
    float ss = 0.0;
    for (uint j = 0u; j < p.d; ++j) ss += p.x.v[at + j] * p.x.v[at + j];
    const float r = 1.0 / sqrt(ss / float(p.d) + p.eps);
    if (MODE == 0u) {
      for (uint j = 0u; j < p.d; ++j) p.y.v[at + j] = p.x.v[at + j] * r * weight(j);
    } else {
      float hx = 0.0;
      for (uint j = 0u; j < p.d; ++j) hx += p.g.v[at + j] * weight(j) * p.x.v[at + j];
      const float k = hx / float(p.d) * r * r * r;
      for (uint j = 0u; j < p.d; ++j) p.y.v[at + j] = r * (p.g.v[at + j] * weight(j)) - k * p.x.v[at + j];
    }
  }
}
