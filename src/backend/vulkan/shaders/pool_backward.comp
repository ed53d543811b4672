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
// Windows that tile the image exactly (stride = size, no padding or
// dilation, sizes dividing the image: the pooling layers' default and global
// pooling): one invocation per window instead, which finds its first
// maximum or its share once and writes all its taps (each dx element is in
// one window; per element, a global window would be scanned H W times).
layout(constant_id = 4) const bool TILED = false;

// The maximum of window t (b, c) as the CPU's fold (a NaN tap makes it NaN).
float window_max(Taps t, int b, int c) {
  float best = p.a.v[pixel(b, t.iy0 + t.ky0 * p.dh, t.ix0 + t.kx0 * p.dw, c)];
  for (int y = t.ky0; y < t.ky1; ++y)
    for (int x = t.kx0; x < t.kx1; ++x) {
      const float v = p.a.v[pixel(b, t.iy0 + y * p.dh, t.ix0 + x * p.dw, c)];
      if (v > best || isnan(v)) best = v;
    }
  return best;
}

// Whether tap (ky, kx) of window t (b, c), value v, is its first maximum,
// the tap the CPU's second pass hands g: with v NaN, no NaN before it;
// else no NaN, nothing >= v before it and nothing > v after it. The scan
// stops at the first tap that rules it out (most taps are not maxima).
bool is_first_max(Taps t, int b, int c, int ky, int kx, float v) {
  const bool v_nan = isnan(v);
  for (int y = t.ky0; y < t.ky1; ++y)
    for (int x = t.kx0; x < t.kx1; ++x) {
      if (y == ky && x == kx) continue;
      const float u = p.a.v[pixel(b, t.iy0 + y * p.dh, t.ix0 + x * p.dw, c)];
      const bool before = y < ky || (y == ky && x < kx);
      if (v_nan ? before && isnan(u) : isnan(u) || (before ? u >= v : u > v)) return false;
    }
  return true;
}

// What window (oy, ox) hands its tap (ky, kx), element (b, c) of dx, value v.
float share(int b, int c, int oy, int ox, int ky, int kx, float v) {
  const Taps t = taps_of(oy, ox);
  const uint at = uint(((b * p.Ho + oy) * p.Wo + ox) * p.C + c);
  if (OP == 0) {  // v is then the window's maximum: the mask's test
    if (!is_first_max(t, b, c, ky, kx, v)) return 0.0;
    return MASK && v <= 0.0 ? 0.0 : p.b.v[at];
  }
  precise float s = p.a.v[at] * reciprocal((t.ky1 - t.ky0) * (t.kx1 - t.kx0));
  return s;
}

void tiled() {
  FOR_EACH(i, uint(p.B * p.Ho * p.Wo * p.C)) {
    const uvec3 g_at = grid_at(i, p.Ho, p.Wo * p.C);
    const int b = int(g_at.x), oy = int(g_at.y), ox = int(udiv(g_at.z, p.div_c)), c = int(g_at.z) - ox * p.C;
    const Taps t = taps_of(oy, ox);
    if (OP == 1) {  // 0 + g / count, the CPU's sum of one share
      precise float s = p.a.v[i] * reciprocal(p.kh * p.kw);
      for (int ky = 0; ky < p.kh; ++ky)
        for (int kx = 0; kx < p.kw; ++kx) {
          const uint at = pixel(b, t.iy0 + ky, t.ix0 + kx, c);
          p.c.v[at] = MASK && p.b.v[at] <= 0.0 ? 0.0 : s;
        }
      continue;
    }
    const float best = window_max(t, b, c);
    // The taps again: g to the first one equal to the maximum (the first NaN), 0 to the others.
    float pending = MASK && best <= 0.0 ? 0.0 : p.b.v[i];
    for (int ky = 0; ky < p.kh; ++ky)
      for (int kx = 0; kx < p.kw; ++kx) {
        const uint at = pixel(b, t.iy0 + ky, t.ix0 + kx, c);
        const float v = p.a.v[at];
        const bool hit = v == best || (isnan(v) && isnan(best));
        p.c.v[at] = hit ? pending : 0.0;
        if (hit) pending = 0.0;
      }
  }
}

void main() {
  if (TILED) {
    tiled();
    return;
  }
  FOR_EACH(i, uint(p.B * p.H * p.W * p.C)) {
    const uvec3 g_at = grid_at(i, p.H, p.W * p.C);
    const int b = int(g_at.x), iy = int(g_at.y), ix = int(udiv(g_at.z, p.div_c)), c = int(g_at.z) - ix * p.C;
    const int ty = iy + p.pt, tx = ix + p.pl;
    const float v = OP == 0 ? p.a.v[i] : 0.0;
    precise float acc = 0.0;
    if (!DILATED) {
      // The windows oy with oy sh in [ty - kh + 1, ty], tap ky = ty - oy sh.
      const int oy0 = ty >= p.kh ? int(udiv(uint(ty - p.kh + p.sh), p.div_sh)) : 0;
      const int oy1 = min(int(udiv(uint(ty), p.div_sh)), p.Ho - 1);
      const int ox0 = tx >= p.kw ? int(udiv(uint(tx - p.kw + p.sw), p.div_sw)) : 0;
      const int ox1 = min(int(udiv(uint(tx), p.div_sw)), p.Wo - 1);
      for (int oy = oy0; oy <= oy1; ++oy)
        for (int ox = ox0; ox <= ox1; ++ox) acc += share(b, c, oy, ox, ty - oy * p.sh, tx - ox * p.sw, v);
    } else {
      // oy = (ty - ky dh) / sh grows as ky falls: the windows in (oy, ox) order.
      for (int ky = p.kh - 1; ky >= 0; --ky) {
        const int ry = ty - ky * p.dh;
        if (ry < 0 || ry % p.sh != 0) continue;
        const int oy = ry / p.sh;
        if (oy >= p.Ho) break;
        for (int kx = p.kw - 1; kx >= 0; --kx) {
          const int rx = tx - kx * p.dw;
          if (rx < 0 || rx % p.sw != 0) continue;
          const int ox = rx / p.sw;
          if (ox >= p.Wo) break;
          acc += share(b, c, oy, ox, ky, kx, v);
        }
      }
    }
    if (OP == 1 && MASK && p.b.v[i] <= 0.0) acc = 0.0;
    p.c.v[i] = acc;
  }
}
