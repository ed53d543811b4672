#version 450
#include "common.glsl"
#include "batch_norm.glsl"
// The element-wise passes of the family over x {rows, C}. OP 0 BatchNorm:
// y = x a + b [+ residual], then ReLU with RELU. OP 1 BatchNormBackward: dx
// = x a + g k + b (the CPU's batch_norm_backward coefficients, a = b = 0
// unless OWN_STATS), g masked by the forward's ReLU with RELU. Each
// invocation keeps one channel and strides over rows, so its coefficients
// (a square root and divisions) are computed once, not per element, and no
// element divides its index by C; adjacent invocations take adjacent
// channels, so a row is read together.
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
  uint rows;
  uint C;
  uint flags;
  float eps;
  float inv_n;  // backward: 1 / rows, rounded as the CPU's
} p;

void forward(uint c, uint r0, uint lanes) {
  float a, b;
  coefficients(p.stats, p.gamma, p.beta, p.C, c, p.eps, a, b);
  for (uint r = r0; r < p.rows; r += lanes) {
    const uint i = r * p.C + c;
    float v = affine(p.x.v[i], a, b);
    if ((p.flags & RESIDUAL) != 0) v += p.g.v[i];
    p.y.v[i] = (p.flags & RELU) != 0 ? relu_value(v) : v;
  }
}

void backward(uint c, uint r0, uint lanes) {
  const float inv = inverse_std(p.stats, p.C, c, p.eps);
  const float k = p.gamma.v[c] * inv;
  float a = 0.0, b = 0.0;
  if ((p.flags & OWN_STATS) != 0) {
    const float mean_g = p.sums.v[p.C + c] * p.inv_n, mean_gxhat = p.sums.v[c] * p.inv_n;
    a = -k * inv * mean_gxhat;
    b = -k * mean_g - a * p.stats.v[c];
  }
  float fa = 0.0, fb = 0.0;
  if ((p.flags & RELU) != 0) coefficients(p.stats, p.gamma, p.beta, p.C, c, p.eps, fa, fb);
  for (uint r = r0; r < p.rows; r += lanes) {
    const uint i = r * p.C + c;
    const float x = p.x.v[i];
    float g = p.g.v[i];
    if ((p.flags & RELU) != 0) g = relu_pass(affine(x, fa, fb), g);
    p.y.v[i] = x * a + g * k + b;
  }
}

void main() {
  const uint t = gl_GlobalInvocationID.x, n = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  // n / C row lanes per channel; with fewer invocations than channels, one
  // lane, each invocation taking channels t, t + n, ...
  const uint lanes = max(n / p.C, 1u);
  if (t >= lanes * p.C) return;  // the invocations beyond the whole lanes
  const uint step = n >= p.C ? p.C : n;
  for (uint c = t % p.C; c < p.C; c += step) {
    const uint r0 = t / p.C;
    if (OP == 0) forward(c, r0, lanes);
    else backward(c, r0, lanes);
  }
}
