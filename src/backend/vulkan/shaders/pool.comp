#version 450
#include "common.glsl"
#include "pool.glsl"
// MaxPool2D and AvgPool2D over x{B,H,W,C} -> y{B,Ho,Wo,C}: one invocation
// per output, c fastest (neighbouring invocations read neighbouring
// channels). The taps in (ky, kx) order, as the CPU, so the same bits: the
// maximum as its nan_max (a NaN tap wins), the mean as the sum times
// 1 / count; an empty window (all padding) gives -inf or 0, as the CPU.
layout(constant_id = 1) const uint OP = 0;  // 0 max, 1 average

void main() {
  FOR_EACH(i, uint(p.B * p.Ho * p.Wo * p.C)) {
    const uvec3 at = grid_at(i, p.Ho, p.Wo * p.C);
    const int b = int(at.x), oy = int(at.y), ox = int(udiv(at.z, p.div_c)), c = int(at.z) - ox * p.C;
    const Taps t = taps_of(oy, ox);
    precise float acc = OP == 0 ? -kPoolInf : 0.0;
    for (int ky = t.ky0; ky < t.ky1; ++ky)
      for (int kx = t.kx0; kx < t.kx1; ++kx) {
        const float v = p.a.v[pixel(b, t.iy0 + ky * p.dh, t.ix0 + kx * p.dw, c)];
        if (OP == 0) acc = v > acc || isnan(v) ? v : acc;
        else acc += v;
      }
    const int count = (t.ky1 - t.ky0) * (t.kx1 - t.kx0);
    if (OP == 1 && count > 0) acc *= reciprocal(count);
    p.b.v[i] = acc;
  }
}
