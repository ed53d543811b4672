// The pooling shaders' push block and window geometry (kernels/window.cpp),
// as the CPU's (src/kernels/window.cpp): output pixel (oy, ox) reads input
// rows iy = oy*sh - pt + ky*dh and columns ix = ox*sw - pl + kx*dw; taps
// outside the image are padding, skipped (never counted in averages).
// The divisions by the channels, the strides and the grid's sizes are
// multiplications by the host's magic numbers (udiv): lavapipe has no
// vector integer division (each would be 8 scalar ones) and GPUs emulate it.
layout(push_constant) uniform Push {
  F32 a;  // pool: x; max backward: x; average backward: g
  F32 b;  // pool: y; max backward: g; average backward: the ReLU output that masks dx (kMaskNonPositive)
  F32 c;  // the backward ops' dx
  int B, H, W, C, Ho, Wo;
  int kh, kw, sh, sw, dh, dw, pt, pl;
  uvec2 div_c, div_sh, div_sw;  // udiv's (m, l) for C, sh, sw
  uvec2 div_rows, div_len;      // and for the grid's rows per image and elements per row
} p;

// n / d for n < 2^31, given d's (m, l): l = ceil(log2 d), m = ceil(2^(31 + l) / d)
// (Granlund and Montgomery: exact for 31-bit n).
uint udiv(uint n, uvec2 d) { return uint((uint64_t(n) * uint64_t(d.x)) >> (31u + d.y)); }

// dh == dw == 1: the taps' bounds without divisions.
layout(constant_id = 3) const bool DILATED = false;

#define kPoolInf uintBitsToFloat(0x7f800000u)

// The first and one past the last tap inside the image along one axis, for a
// window starting at i0 (the CPU's first_tap and end_tap).
int first_tap(int i0, int d) {
  if (!DILATED) return max(-i0, 0);
  return i0 >= 0 ? 0 : (-i0 + d - 1) / d;
}
int end_tap(int i0, int d, int k, int n) {
  if (!DILATED) return max(min(k, n - i0), 0);
  if (i0 + (k - 1) * d < n) return k;
  return i0 >= n ? 0 : min(k, (n - 1 - i0) / d + 1);
}

// An output pixel's taps inside the image: ky in [ky0, ky1), kx in [kx0, kx1).
struct Taps {
  int iy0, ix0, ky0, ky1, kx0, kx1;
};
Taps taps_of(int oy, int ox) {
  Taps t;
  t.iy0 = oy * p.sh - p.pt;
  t.ix0 = ox * p.sw - p.pl;
  t.ky0 = first_tap(t.iy0, p.dh);
  t.ky1 = end_tap(t.iy0, p.dh, p.kh, p.H);
  t.kx0 = first_tap(t.ix0, p.dw);
  t.kx1 = end_tap(t.ix0, p.dw, p.kw, p.W);
  return t;
}

// x's element (b, iy, ix, c).
uint pixel(int b, int iy, int ix, int c) { return uint(((b * p.H + iy) * p.W + ix) * p.C + c); }

// 1 / n correctly rounded, as the CPU's 1.0f / float(n): Vulkan's division
// is promised to 2.5 ulp only; one Newton step on the fused residual fixes it.
float reciprocal(int n) {
  const float fn = float(n);
  precise float r = 1.0 / fn;
  precise float e = fma(-fn, r, 1.0);
  precise float q = fma(r, e, r);
  return q;
}

// The grid: rows (b, y) of an image of `rows` rows, row_len elements each
// (x = the column and channel pairs), walked as one index i; grid_at gives
// element i's b, y and x.
uvec3 grid_at(uint i, uint rows, uint row_len) {
  const uint row = udiv(i, p.div_len), b = udiv(row, p.div_rows);
  return uvec3(b, row - b * rows, i - row * row_len);
}
