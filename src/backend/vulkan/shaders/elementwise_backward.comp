#version 450
#include "common.glsl"
#include "elementwise.glsl"
// dx = f(v, g), f chosen by constant 1 (kernels/elementwise.cpp's Backward
// codes), each the CPU kernel's formula; v is the forward's output y for
// ReLU, sigmoid, tanh and rsqrt, its input x for the others. a and b are
// the op's attributes (alpha, slope, the clamp bounds).
layout(constant_id = 1) const uint OP = 0;
layout(push_constant) uniform Push { F32 v; F32 g; F32 dx; uint n; float a; float b; } p;

const float kGeluTanhA = -1.5957691216057308, kGeluTanhB = -0.07135481627260025;

float f(float v, float g) {
  if (OP == 0) return v <= 0.0 ? 0.0 : g;                        // relu (a NaN y passes g)
  if (OP == 1) return g * v * (1.0 - v);                         // sigmoid, from y
  if (OP == 2) return g * (1.0 - v * v);                         // tanh, from y
  if (OP == 3) return -0.5 * g * v * v * v;                      // rsqrt, from y
  if (OP == 4) {                                                 // gelu: Phi(x) + x phi(x)
    const float cdf = 0.5 * (1.0 + erf_f(v * 0.707106781));
    const float pdf = exp_f(-0.5 * v * v) * 0.3989422804014327;
    return g * (cdf + v * pdf);
  }
  if (OP == 5) {                                                 // gelu_tanh: kernels/elementwise.cpp's form
    const float v2 = v * v, t = -v * (kGeluTanhA + kGeluTanhB * v2);
    const float e = exp_f(-abs(t)), r = 1.0 / (1.0 + e), s = t >= 0.0 ? r : e * r;
    if (e == 0.0) return g * s;
    return g * (s - v * e * r * r * (kGeluTanhA + 3.0 * kGeluTanhB * v2));
  }
  if (OP == 6) {                                                 // silu
    const float s = 1.0 / (1.0 + exp_f(-v));
    return g * s * (1.0 + v * (1.0 - s));
  }
  if (OP == 7) return v > 0.0 ? g : g * p.a * exp_f(v);          // elu
  if (OP == 8) return v > 0.0 ? g : g * p.a;                     // leaky_relu
  if (OP == 9) return g / (1.0 + exp_f(-v));                     // softplus
  if (OP == 10) return g * 1.1283791670955126 * exp_f(-v * v);   // erf: 2 / sqrt(pi) e^(-x^2)
  if (OP == 11) return v >= p.a && v <= p.b ? g : 0.0;           // clamp: a NaN x passes nothing
  return g;
}

void main() {
  FOR_EACH(i, p.n) p.dx.v[i] = f(p.v.v[i], p.g.v[i]);
}
