#version 450
#include "common.glsl"
// y = f(x), f chosen by constant 1 (kernels/elementwise.cpp's Unary codes).
layout(constant_id = 1) const uint OP = 0;
layout(push_constant) uniform Push { F32 x; F32 y; uint n; float a; } p;
void main() {
  FOR_EACH(i, p.n) {
    const float x = p.x.v[i];
    float y;
    if (OP == 0) y = x * p.a;                  // scale
    else if (OP == 1) y = x > 0.0 ? x : (isnan(x) ? x : 0.0);  // relu
    p.y.v[i] = y;
  }
}
