#version 450
#include "common.glsl"
#include "batch_norm.glsl"
// The element-wise passes of the family over x {rows, C}, each element's
// channel coefficients recomputed from the {C}-sized inputs (cached reads;
// the kernels have no scratch memory to hold them). OP 0 BatchNorm: y = x a
// + b [+ residual], then ReLU with RELU. OP 1 BatchNormBackward: dx = x a +
// g k + b (the CPU's batch_norm_backward coefficients, a = b = 0 unless
// OWN_STATS), g masked by the forward's ReLU with RELU.
layout(constant_id = 1) const uint OP = 0;

const uint RELU = 1, RESIDUAL = 2, OWN_STATS = 4;  // flags

layout(push_constant) uniform Push {
  F32 x;
  F32 stats;
  F32 gamma;
  F32 beta;
  F32 g;     // forward: the residual; backward: the output's gradient
  F32 sums;  // backward: BatchNormParamGrad's [sum(g xhat); sum(g)]
  F32 y;
  uint n;
  uint C;
  uint flags;
  float eps;
  float inv_n;  // backward: 1 / rows, rounded as the CPU's
} p;

float forward(uint i, uint c) {
  float a, b;
  coefficients(p.stats, p.gamma, p.beta, p.C, c, p.eps, a, b);
  float v = affine(p.x.v[i], a, b);
  if ((p.flags & RESIDUAL) != 0) v += p.g.v[i];
  return (p.flags & RELU) != 0 ? relu_value(v) : v;
}

float backward(uint i, uint c) {
  const float inv = inverse_std(p.stats, p.C, c, p.eps);
  const float k = p.gamma.v[c] * inv;
  float a = 0.0, b = 0.0;
  if ((p.flags & OWN_STATS) != 0) {
    const float mean_g = p.sums.v[p.C + c] * p.inv_n, mean_gxhat = p.sums.v[c] * p.inv_n;
    a = -k * inv * mean_gxhat;
    b = -k * mean_g - a * p.stats.v[c];
  }
  const float x = p.x.v[i];
  float g = p.g.v[i];
  if ((p.flags & RELU) != 0) {
    float fa, fb;
    coefficients(p.stats, p.gamma, p.beta, p.C, c, p.eps, fa, fb);
    g = relu_pass(affine(x, fa, fb), g);
  }
  return x * a + g * k + b;
}

void main() {
  FOR_EACH(i, p.n) {
    const uint c = i % p.C;
    p.y.v[i] = OP == 0 ? forward(i, c) : backward(i, c);
  }
}
