#version 450
#include "common.glsl"
// y = op(a, b) with NumPy broadcasting, op chosen by constant 1
// (kernels/elementwise.cpp's Binary codes). With constant 2 (FLAT) both
// operands have the output's shape; otherwise element i's offsets come from
// its coordinates in dims (the output's shape, rank dims padded with leading
// 1s to 6) and each operand's strides, 0 along its broadcast axes.
layout(constant_id = 1) const uint OP = 0;
layout(constant_id = 2) const bool FLAT = false;
layout(push_constant) uniform Push {
  F32 a; F32 b; F32 y;
  uint n;
  uint dims[6];
  uint sa[6];
  uint sb[6];
} p;

float f(float a, float b) {
  if (OP == 0) return a + b;
  if (OP == 1) { const float s = a + b; return s <= 0.0 ? 0.0 : s; }  // add with kReluOutput (NaN stays)
  if (OP == 2) return a - b;
  if (OP == 3) return a * b;
  if (OP == 4) return a / b;
  if (OP == 5) return a >= b || isnan(a) ? a : b;                      // maximum: a NaN b fails a >= b
  if (OP == 6) return a <= b || isnan(a) ? a : b;                      // minimum
  if (OP == 7) return a >= b ? 1.0 : 0.0;                              // greater_equal
  return a;
}

void main() {
  FOR_EACH(i, p.n) {
    uint ia = i, ib = i;
    if (!FLAT) {
      ia = 0;
      ib = 0;
      uint rem = i;
      for (int d = 5; d >= 0; --d) {
        const uint c = rem % p.dims[d];
        rem /= p.dims[d];
        ia += c * p.sa[d];
        ib += c * p.sb[d];
      }
    }
    p.y.v[i] = f(p.a.v[ia], p.b.v[ib]);
  }
}
