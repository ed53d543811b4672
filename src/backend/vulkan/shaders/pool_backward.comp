#version 450
#include "common.glsl"
#include "pool.glsl"
// MaxPool2DBackward and AvgPool2DBackward: one invocation per element of dx
// {B,H,W,C}, which loops over the windows that hold it in (oy, ox) order and
// adds their shares to 0, the CPU's order of additions (it walks the windows
// in that order, adding into a zeroed dx): the same bits, and no atomics
// where windows overlap.
//  - max: a window's g goes to its first maximum in (ky, kx) order (as
//    PyTorch; with a NaN tap, to the first NaN), masked to 0 where the
//    maximum is <= 0 with MASK (x a ReLU's output).
//  - average: g / count of the window's taps inside the image; with MASK,
//    dx is then 0 where the mask input is <= 0.
layout(constant_id = 1) const uint OP = 0;  // 0 max, 1 average
layout(constant_id = 2) const bool MASK = false;

// Whether tap (ky, kx) is the first maximum of window t (b, c): one pass
// keeps the maximum and where it first appeared (a larger value or a first
// NaN moves it; equal values and later NaNs do not), the same tap as the
// CPU's two passes.
bool is_first_max(Taps t, int b, int c, int ky, int kx, out float best) {
  best = p.a.v[pixel(b, t.iy0 + t.ky0 * p.dh, t.ix0 + t.kx0 * p.dw, c)];
  int at_y = t.ky0, at_x = t.kx0;
  for (int y = t.ky0; y < t.ky1; ++y)
    for (int x = t.kx0; x < t.kx1; ++x) {
      const float v = p.a.v[pixel(b, t.iy0 + y * p.dh, t.ix0 + x * p.dw, c)];
      if (isnan(best)) continue;
      if (v > best || isnan(v)) {
        best = v;
        at_y = y;
        at_x = x;
      }
    }
  return at_y == ky && at_x == kx;
}

void main() {
  FOR_EACH(i, p.n) {
    const int c = int(i % uint(p.C));
    uint r = i / uint(p.C);
    const int ix = int(r % uint(p.W));
    r /= uint(p.W);
    const int iy = int(r % uint(p.H)), b = int(r / uint(p.H));
    F32 grad = OP == 0 ? p.b : p.a;
    precise float acc = 0.0;
    // oy = (iy + pt - ky dh) / sh grows as ky falls: the windows in (oy, ox) order.
    for (int ky = p.kh - 1; ky >= 0; --ky) {
      const int ty = iy + p.pt - ky * p.dh;
      if (ty < 0 || ty % p.sh != 0) continue;
      const int oy = ty / p.sh;
      if (oy >= p.Ho) break;
      for (int kx = p.kw - 1; kx >= 0; --kx) {
        const int tx = ix + p.pl - kx * p.dw;
        if (tx < 0 || tx % p.sw != 0) continue;
        const int ox = tx / p.sw;
        if (ox >= p.Wo) break;
        const Taps t = taps_of(oy, ox);
        const float g = grad.v[uint(((b * p.Ho + oy) * p.Wo + ox) * p.C + c)];
        if (OP == 0) {
          float best;
          if (is_first_max(t, b, c, ky, kx, best)) acc += MASK && best <= 0.0 ? 0.0 : g;
        } else {
          acc += g * reciprocal((t.ky1 - t.ky0) * (t.kx1 - t.kx0));
        }
      }
    }
    if (OP == 1 && MASK && p.b.v[i] <= 0.0) acc = 0.0;
    p.c.v[i] = acc;
  }
}
