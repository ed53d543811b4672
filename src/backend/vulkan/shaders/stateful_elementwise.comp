#version 450
#include "common.glsl"
// The stateful family's element-wise updates, in place on a; constant 1
// picks the op (kernels/stateful.cpp's Elementwise codes). `precise`: two
// rounded products and a rounded sum on every driver, none fusing them.
layout(constant_id = 1) const uint OP = 0;
layout(push_constant) uniform Push { F32 a; F32 b; F32 c; Status status; uint n; float s; } p;
void main() {
  if (skip_update(p.status)) return;
  if (OP == 0) {  // clip_value: written so that NaN stays NaN, as the CPU's clamp_value
    const float c = p.s;
    FOR_EACH(i, p.n) {
      const float v = p.a.v[i];
      p.a.v[i] = v > c ? c : (v < -c ? -c : v);
    }
  } else if (OP == 1) {  // moving_average: a = m a + (1 - m) b
    const float m = p.s;
    precise const float keep = 1.0 - m;
    FOR_EACH(i, p.n) {
      precise float v = m * p.a.v[i] + keep * p.b.v[i];
      p.a.v[i] = v;
    }
  } else if (OP == 2) {  // polyak_update: a = tau b + (1 - tau) a; tau = 1 copies (NaN and inf included)
    const float tau = p.c.v[0];
    if (tau == 1.0) {
      FOR_EACH(i, p.n) p.a.v[i] = p.b.v[i];
    } else {
      precise const float keep = 1.0 - tau;
      FOR_EACH(i, p.n) {
        precise float v = tau * p.b.v[i] + keep * p.a.v[i];
        p.a.v[i] = v;
      }
    }
  }
}
