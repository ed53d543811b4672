#version 450
#include "common.glsl"
// Rope (kernels/rope.cpp's rotation), one invocation per output element of
// x {B, T, H, D}: feature f < dims is one side of pair i, its partner the
// other; the angle p / scaling theta^(-2i / dims) in float32 (negated with
// kInverse). Features from dims on are copied.
layout(push_constant) uniform Push {
  F32 x;
  I32 pos;  // {T}
  F32 y;
  uint n, steps, heads, d, dims, flags;
  float theta, scaling;
} p;

const uint kAdjacent = 1u, kInverse = 2u;

void main() {
  FOR_EACH(e, p.n) {
    const uint f = e % p.d, row0 = e - f;
    if (f >= p.dims) {
      p.y.v[e] = p.x.v[e];
      continue;
    }
    const uint half_dims = p.dims / 2u;
    const bool adjacent = (p.flags & kAdjacent) != 0u;
    const uint i = adjacent ? f / 2u : f % half_dims;
    const bool first = adjacent ? f % 2u == 0u : f < half_dims;
    const uint ia = adjacent ? 2u * i : i, ib = adjacent ? 2u * i + 1u : i + half_dims;
    const uint t = (e / p.d / p.heads) % p.steps;
    const float freq = pow(p.theta, -float(2u * i) / float(p.dims)) / p.scaling;
    float angle = float(p.pos.v[t]) * freq;
    if ((p.flags & kInverse) != 0u) angle = -angle;
    const float c = cos(angle), s = sin(angle);
    const float a = p.x.v[row0 + ia], b = p.x.v[row0 + ib];
    p.y.v[e] = first ? a * c - b * s : a * s + b * c;
  }
}
