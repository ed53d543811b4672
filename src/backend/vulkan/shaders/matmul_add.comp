#version 450
#include "common.glsl"
// acc += g, in place: AccumulateGrad's (acc, g) form (kernels/matmul.cpp).
layout(push_constant) uniform Push { F32 acc; F32 g; Status status; uint n; } p;
void main() {
  if (skip_update(p.status)) return;
  FOR_EACH(i, p.n) p.acc.v[i] = p.acc.v[i] + p.g.v[i];
}
