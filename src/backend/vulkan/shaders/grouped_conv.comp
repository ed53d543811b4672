#version 450
#include "common.glsl"
// The grouped convolutions (Window2D::groups > 1, depthwise included) as
// the CPU's kernels/grouped_conv.cpp computes them: one invocation per
// element of the result, each a sum over the taps in (ky, kx) order and,
// inside a tap, over the group's channels or filters in order; taps in the
// padding (or off the stride's grid) are skipped, as on the CPU. MODE:
//  0 Conv2D:               y{B,Ho,Wo,F}[f] = sum over taps, c < Cg of x[g Cg + c] k[tap, c, f], g = f / Fg;
//                          then + bias (FLAG_BIAS), then ReLU (FLAG_RELU);
//  1 Conv2DBackwardInput:  dx{B,H,W,C}[c] = sum over the taps reaching it, f < Fg of g[g Fg + f] k[tap, c', ...];
//                          then + addend (FLAG_ADDEND), then zero where y <= 0 (FLAG_MASK);
//  2 Conv2DBackwardFilter: dk{kh,kw,Cg,F} = sum over b, oy, ox of x g.
// A depthwise convolution is memory-bound: neighbouring invocations take
// neighbouring channels, so their reads are contiguous.
layout(constant_id = 1) const uint MODE = 0;

const uint FLAG_BIAS = 1u, FLAG_RELU = 2u, FLAG_ADDEND = 4u, FLAG_MASK = 8u;

layout(push_constant) uniform Push {
  F32 a;      // x (modes 0, 2) or g (mode 1)
  F32 b;      // the kernel (modes 0, 1) or g (mode 2)
  F32 c;      // the result
  F32 extra;  // the bias (mode 0) or the addend (mode 1)
  F32 mask;   // the ReLU output that masks dx (mode 1)
  uint n;     // the result's elements
  uint flags;
  int B, H, W, C, Ho, Wo, F, G;
  int kh, kw, sh, sw, dh, dw, pt, pl;
} p;

void main() {
  const int Cg = p.C / p.G, Fg = p.F / p.G;
  FOR_EACH(i, p.n) {
    precise float acc = 0.0;
    if (MODE == 0) {
      const int f = int(i % uint(p.F)), pix = int(i / uint(p.F));
      const int ox = pix % p.Wo, oy = (pix / p.Wo) % p.Ho, b = pix / (p.Wo * p.Ho), g = f / Fg;
      for (int ky = 0; ky < p.kh; ++ky) {
        const int iy = oy * p.sh - p.pt + ky * p.dh;
        if (iy < 0 || iy >= p.H) continue;
        for (int kx = 0; kx < p.kw; ++kx) {
          const int ix = ox * p.sw - p.pl + kx * p.dw;
          if (ix < 0 || ix >= p.W) continue;
          const int xi = ((b * p.H + iy) * p.W + ix) * p.C + g * Cg, ki = (ky * p.kw + kx) * Cg * p.F + f;
          for (int c = 0; c < Cg; ++c) acc = fma(p.a.v[xi + c], p.b.v[ki + c * p.F], acc);
        }
      }
      if ((p.flags & FLAG_BIAS) != 0u) acc += p.extra.v[f];
      if ((p.flags & FLAG_RELU) != 0u) acc = acc <= 0.0 ? 0.0 : acc;
    } else if (MODE == 1) {
      const int c = int(i % uint(p.C)), pix = int(i / uint(p.C));
      const int ix = pix % p.W, iy = (pix / p.W) % p.H, b = pix / (p.W * p.H);
      const int g = c / Cg, cg = c - g * Cg;
      for (int ky = 0; ky < p.kh; ++ky) {
        const int t = iy + p.pt - ky * p.dh;
        if (t < 0 || t % p.sh != 0 || t / p.sh >= p.Ho) continue;
        for (int kx = 0; kx < p.kw; ++kx) {
          const int u = ix + p.pl - kx * p.dw;
          if (u < 0 || u % p.sw != 0 || u / p.sw >= p.Wo) continue;
          const int gi = ((b * p.Ho + t / p.sh) * p.Wo + u / p.sw) * p.F + g * Fg;
          const int ki = ((ky * p.kw + kx) * Cg + cg) * p.F + g * Fg;
          // The CPU sums a tap's filters apart, then adds the sum.
          precise float s = 0.0;
          for (int f = 0; f < Fg; ++f) s = fma(p.a.v[gi + f], p.b.v[ki + f], s);
          acc += s;
        }
      }
      if ((p.flags & FLAG_ADDEND) != 0u) acc += p.extra.v[i];
      if ((p.flags & FLAG_MASK) != 0u && p.mask.v[i] <= 0.0) acc = 0.0;
    } else {
      const int f = int(i % uint(p.F)), rest = int(i / uint(p.F));
      const int cg = rest % Cg, tap = rest / Cg, kx = tap % p.kw, ky = tap / p.kw, g = f / Fg;
      for (int b = 0; b < p.B; ++b)
        for (int oy = 0; oy < p.Ho; ++oy) {
          const int iy = oy * p.sh - p.pt + ky * p.dh;
          if (iy < 0 || iy >= p.H) continue;
          for (int ox = 0; ox < p.Wo; ++ox) {
            const int ix = ox * p.sw - p.pl + kx * p.dw;
            if (ix < 0 || ix >= p.W) continue;
            acc = fma(p.a.v[((b * p.H + iy) * p.W + ix) * p.C + g * Cg + cg],
                      p.b.v[((b * p.Ho + oy) * p.Wo + ox) * p.F + f], acc);
          }
        }
    }
    p.c.v[i] = acc;
  }
}
