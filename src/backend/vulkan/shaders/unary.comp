#version 450
#include "common.glsl"
#include "elementwise.glsl"
// y = f(x), f chosen by constant 1 (kernels/elementwise.cpp's Unary codes),
// each the CPU kernel's formula (kernels/elementwise.cpp); a and b are the
// op's attributes (factor, alpha, slope, exponent, the clamp bounds).
layout(constant_id = 1) const uint OP = 0;
layout(push_constant) uniform Push { F32 x; F32 y; uint n; float a; float b; } p;

// GELU's tanh form: x / (1 + e^(x (A + B x^2))), A = -2 sqrt(2 / pi), B = 0.044715 A.
const float kGeluTanhA = -1.5957691216057308, kGeluTanhB = -0.07135481627260025;

float f(float x) {
  if (OP == 0) return x * p.a;                                   // scale
  if (OP == 1) return x > 0.0 ? x : (isnan(x) ? x : 0.0);        // relu
  if (OP == 2) return 1.0 / (1.0 + exp_f(-x));                   // sigmoid: 0 where e^-x overflows
  if (OP == 3) return tanh_f(x);                                 // tanh
  if (OP == 4) return 0.5 * x * erfc_f(-x * 0.707106781);        // gelu: no cancellation for x < 0
  if (OP == 5) return x / (1.0 + exp_f(x * (kGeluTanhA + kGeluTanhB * x * x)));  // gelu_tanh
  if (OP == 6) return x / (1.0 + exp_f(-x));                     // silu
  if (OP == 7) return x > 0.0 ? x : p.a * expm1_f(x);            // elu
  if (OP == 8) return x > 0.0 ? x : p.a * x;                     // leaky_relu
  if (OP == 9) {                                                 // softplus: log(1 + e^x) without overflow
    const float m = isnan(x) ? x : max(x, 0.0);
    return log1p_f(exp_f(-abs(x))) + m;
  }
  if (OP == 10) return exp_f(x);
  if (OP == 11) return log_f(x);
  if (OP == 12) return sqrt_f(x);
  if (OP == 13) {                                                // rsqrt: 1 / sqrt(x), so -inf at -0
    if (isnan(x) || x < 0.0) return kNaN;
    if (x == 0.0) return floatBitsToUint(x) != 0u ? -kInf : kInf;
    if (isinf(x)) return 0.0;
    return inversesqrt(x);
  }
  if (OP == 14) return erf_f(x);
  if (OP == 15) return pow_f(x, p.a);
  if (OP == 16) return x > p.b ? p.b : (x < p.a ? p.a : x);      // clamp: NaN fails both tests
  return x;
}

void main() {
  FOR_EACH(i, p.n) p.y.v[i] = f(p.x.v[i]);
}
