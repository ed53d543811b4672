#version 450
#include "common.glsl"
// y = op(a, b) with NumPy broadcasting, op chosen by constant 1
// (kernels/elementwise.cpp's Binary codes). Element i's coordinates in
// dims[0, RANK) (row-major; RANK is constant 2) give its offsets in a and b
// through their strides sa and sb, 0 along broadcast axes. The kernel drops
// size-1 axes and merges the ones it can, so two operands of the output's
// shape are one axis of stride 1, and no division.
layout(constant_id = 1) const uint OP = 0;
layout(constant_id = 2) const int RANK = 6;
layout(push_constant) uniform Push {
  F32 a; F32 b; F32 y;
  uint n;
  uint dims[6];
  uint sa[6];
  uint sb[6];
  float value;  // masked_fill's
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
  if (OP == 8) return b != 0.0 ? p.value : a;                          // masked_fill: b the mask
  return a;
}

void main() {
  FOR_EACH(i, p.n) {
    uint ia = 0, ib = 0, rem = i;
    for (int d = RANK - 1; d > 0; --d) {
      const uint c = rem % p.dims[d];
      rem /= p.dims[d];
      ia += c * p.sa[d];
      ib += c * p.sb[d];
    }
    ia += rem * p.sa[0];
    ib += rem * p.sb[0];
    p.y.v[i] = f(p.a.v[ia], p.b.v[ib]);
  }
}
