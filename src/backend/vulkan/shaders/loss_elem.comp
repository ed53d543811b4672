#version 450
#include "common.glsl"
#include "loss.glsl"
// The element-wise losses of pred p{B,N} against targets t{B,N} with
// optional weights w (wmode 0 none, 1 {B} per row, 2 {B,N} per element):
// one workgroup, each invocation summing its strided elements in order, then
// a tree; out[0] = sum_k w_k e_k / n (kernels/losses.cpp). Constant 1:
// 0 mse (p - t)^2; 1 mae |p - t|; 2 huber (a = attribute delta);
// 3 binary cross-entropy from logits; 4 binary_accuracy: the count of
// (p > a) == (t > 0.5), a = attribute threshold, unweighted.
// float32 throughout where the CPU sums in double: an mse difference beyond
// 1.8e19 overflows its square here, where the CPU's mean may stay finite.
layout(constant_id = 1) const uint OP = 0;
layout(push_constant) uniform Push {
  F32 pred;
  F32 t;
  F32 w;
  F32 res;
  uint n;
  uint cols;
  uint wmode;
  float a;
} p;

// log(1 + x) for x in [0, 1] as 2 atanh(s), s = x / (2 + x) <= 1/3, by its
// series: accurate in float32 on every device, where log(1 + x) would lose
// small x and GLSL's log promises only an absolute error near 1.
float log1p_01(float x) {
  const float s = x / (2.0 + x), s2 = s * s;
  float r = 1.0 / 17.0;
  for (int k = 7; k >= 0; --k) r = r * s2 + 1.0 / float(2 * k + 1);
  return 2.0 * s * r;
}

float element(float pk, float tk) {
  const float d = pk - tk;
  if (OP == 0) return d * d;
  if (OP == 1) return abs(d);
  if (OP == 2) {
    const float r = abs(d);
    return r <= p.a ? 0.5 * d * d : p.a * (r - 0.5 * p.a);
  }
  // max(z, 0) - z y + log(1 + e^-|z|), which never overflows. max(z, 0) - z y as z (1 - y) for z >= 0,
  // exact to rounding where it would cancel (z of 1e30, y near 1: 1 - y is exact), as the CPU's double;
  // infinite z as the CPU's formula (inf - inf y is NaN for y >= 0), NaN explicitly.
  if (isnan(pk)) return pk;
  const float lin = isinf(pk) ? max(pk, 0.0) - pk * tk : pk >= 0.0 ? pk * (1.0 - tk) : -pk * tk;
  return lin + log1p_01(exp(-abs(pk)));
}

void main() {
  const uint i = gl_LocalInvocationID.x;
  if (OP == 4) {
    uint count = 0;
    for (uint k = i; k < p.n; k += gl_WorkGroupSize.x) count += (p.pred.v[k] > p.a) == (p.t.v[k] > 0.5) ? 1 : 0;
    const uint total = group_sum_u(count);
    if (i == 0) p.res.v[0] = float(total);
    return;
  }
  float acc = 0.0;
  for (uint k = i; k < p.n; k += gl_WorkGroupSize.x) {
    const float wk = p.wmode == 0 ? 1.0 : p.wmode == 1 ? p.w.v[k / p.cols] : p.w.v[k];
    acc += wk * element(p.pred.v[k], p.t.v[k]);
  }
  const float total = group_sum(acc);
  if (i == 0) p.res.v[0] = p.n > 0 ? total / float(p.n) : 0.0;
}
