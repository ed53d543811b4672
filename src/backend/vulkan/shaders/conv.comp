#version 450
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
// The three convolutions (kernels/conv.cpp) as implicit GEMMs C{M,N} = A{M,K} B{K,N}, A gathered from
// the image or the gradient on the fly (no patch matrix: the kernels have no scratch memory), MODE:
//  0 Conv2D:              M = B Ho Wo pixels, N = F, K = kh kw C taps;  A = x's patches, B = kernel,
//                         then + bias (FLAG_BIAS), then ReLU (FLAG_RELU);
//  1 Conv2DBackwardInput: M = B H W pixels,   N = C, K = kh kw F;       A = g at the output pixel each tap
//                         of each input pixel reaches (0 where none: padding, or off the stride's grid),
//                         B = the kernel's taps transposed; then + addend (FLAG_ADDEND), then zero where
//                         y <= 0 (FLAG_MASK);
//  2 Conv2DBackwardFilter: M = kh kw C,       N = F, K = B Ho Wo;       A = x's patches transposed, B = g.
// The tiling is matmul.comp's: TM x TN tiles, TK-deep slices of A and B staged in shared memory as
// vec4s, RM x RN blocks per invocation. Every element's sum runs over k in order 0, 1, ..., K-1 as one
// chain of fma from 0, whatever the tiles, so the bits do not depend on the tiling or the device (the
// filter gradient's long sum over the batch's pixels included: one workgroup owns each element).
// Zero padding takes part in the sums as the CPU's zero-padded images do (0 * inf is NaN on both).
layout(constant_id = 1) const uint TM = 64;
layout(constant_id = 2) const uint TN = 64;
layout(constant_id = 3) const uint TK = 16;
layout(constant_id = 4) const uint RM = 8;
layout(constant_id = 5) const uint RN = 8;
layout(constant_id = 6) const uint MODE = 0;
layout(constant_id = 7) const uint UNIT_STRIDE = 0;  // 1: sh = sw = 1 (mode 1 then divides by no stride)

// kernels/conv.cpp's flag bits.
const uint FLAG_BIAS = 1u, FLAG_RELU = 2u, FLAG_ADDEND = 4u, FLAG_MASK = 8u;

layout(push_constant) uniform Push {
  F32 a;      // x (modes 0, 2) or g (mode 1)
  F32 b;      // the kernel (modes 0, 1) or g (mode 2)
  F32 c;      // the result
  F32 extra;  // the bias (mode 0) or the addend (mode 1)
  F32 mask;   // the ReLU output that masks dx (mode 1)
  uint m;
  uint n;
  uint k;
  int h;       // the image's (x's, dx's) height, width and channels
  int w;
  int ch;
  int f;       // filters
  int ho;      // the output's (g's) height and width
  int wo;
  int kw;
  int sh;
  int sw;
  int dh;
  int dw;
  int pt;
  int pl;
  uint flags;
} p;

const uint TM4 = TM / 4, TN4 = TN / 4, RM4 = RM / 4, RN4 = RN / 4;
const uint WG = (TM / RM) * (TN / RN);
// Whether A's rows (not its columns) are the taps (mode 2); the staging loop then walks rows fastest,
// the direction in which the image's channels are contiguous.
const bool ROWS_FAST = MODE == 2;
const int kOff = -(1 << 29);  // a coordinate no tap brings back into the image

shared vec4 sa[TK * TM4];
shared vec4 sb[TK * TN4];
// Per row of the tile: its pixel (modes 0, 1) or tap (mode 2), as below. Per k of the staged slice (two
// slices: the next one is filled while the current one is multiplied): its tap (modes 0, 1) or pixel
// (mode 2), and in w the offset of B's row k (mode 1; the kernel's taps are read transposed). The tables
// pay the divisions that split an index once per row and per k rather than once per staged value: CPU
// implementations have no vector integer division.
shared ivec3 rows[TM];
shared ivec4 ks[2 * TK];

// A pixel of the output grid (modes 0, 2): its window's corner (iy0, ix0) in the image and the offset of
// that corner's channel 0 in x (negative in the padding). Mode 1: an input pixel (iy + pt, ix + pl) and
// the offset of its image in g; at unit stride, of g's pixel (iy + pt, ix + pl) (off g's grid), so that
// a tap's value is at a fixed offset from it as in mode 0.
ivec3 pixel(uint i) {
  if (MODE == 1) {
    const uint hw = uint(p.h * p.w), r = i % hw;
    const int y = int(r / uint(p.w)) + p.pt, x = int(r % uint(p.w)) + p.pl;
    const int image = int(i / hw) * p.ho * p.wo * p.f;
    return ivec3(y, x, UNIT_STRIDE != 0 ? image + (y * p.wo + x) * p.f : image);
  }
  const uint hw = uint(p.ho * p.wo), r = i % hw;
  const int iy0 = int(r / uint(p.wo)) * p.sh - p.pt, ix0 = int(r % uint(p.wo)) * p.sw - p.pl;
  return ivec3(iy0, ix0, ((int(i / hw) * p.h + iy0) * p.w + ix0) * p.ch);
}

// A tap (modes 0, 2: ky, kx, c; mode 1: ky, kx, f): its offset from the window's corner and the offset
// of its value from the corner's channel 0 (mode 1: f; at unit stride, from g at the input pixel).
ivec3 tap(uint k) {
  const uint inner = MODE == 1 ? uint(p.f) : uint(p.ch);
  const uint t = k / inner, e = k % inner;
  const int dy = int(t / uint(p.kw)) * p.dh, dx = int(t % uint(p.kw)) * p.dw;
  if (MODE == 1) return ivec3(dy, dx, UNIT_STRIDE != 0 ? int(e) - (dy * p.wo + dx) * p.f : int(e));
  return ivec3(dy, dx, (dy * p.w + dx) * p.ch + int(e));
}

float gather(ivec3 px, ivec3 tp) {
  if (MODE == 1) {
    const int ty = px.x - tp.x, tx = px.y - tp.y;
    if (UNIT_STRIDE != 0) return uint(ty) >= uint(p.ho) || uint(tx) >= uint(p.wo) ? 0.0 : p.a.v[px.z + tp.z];
    if (ty < 0 || tx < 0) return 0.0;
    const int oy = ty / p.sh, ox = tx / p.sw;
    if (oy * p.sh != ty || ox * p.sw != tx || oy >= p.ho || ox >= p.wo) return 0.0;
    return p.a.v[px.z + (oy * p.wo + ox) * p.f + tp.z];
  }
  const int iy = px.x + tp.x, ix = px.y + tp.y;
  if (uint(iy) >= uint(p.h) || uint(ix) >= uint(p.w)) return 0.0;
  return p.a.v[px.z + tp.z];
}

// k's entry of the table `ks`.
ivec4 k_info(uint k) {
  if (MODE == 2) return ivec4(pixel(k), 0);
  const ivec3 t = tap(k);
  return ivec4(t, MODE == 1 ? int(k / uint(p.f)) * p.ch * p.f + int(k % uint(p.f)) : 0);
}

// A(row0 + 4 i4 .. + 3, k): k's table entry kt, the rows' from `rows`.
vec4 load_a4(uint i4, uint k, ivec4 kt) {
  if (k >= p.k) return vec4(0.0);
  const uint i = 4 * i4;
  if (MODE == 2) {
    const ivec3 px = kt.xyz;
    return vec4(gather(px, rows[i]), gather(px, rows[i + 1]), gather(px, rows[i + 2]), gather(px, rows[i + 3]));
  }
  const ivec3 tp = kt.xyz;
  return vec4(gather(rows[i], tp), gather(rows[i + 1], tp), gather(rows[i + 2], tp), gather(rows[i + 3], tp));
}

// B(k, j .. j + 3); kt is k's table entry.
vec4 load_b4(uint k, uint j, ivec4 kt) {
  vec4 v = vec4(0.0);
  if (k >= p.k) return v;
  if (MODE == 1) {  // the kernel {kh kw, C, F}: tap t's {C, F} slice read as {F, C}
    const uint base = uint(kt.w);
    [[unroll]] for (uint q = 0; q < 4; ++q)
      if (j + q < p.n) v[q] = p.b.v[base + (j + q) * uint(p.f)];
    return v;
  }
  [[unroll]] for (uint q = 0; q < 4; ++q)
    if (j + q < p.n) v[q] = p.b.v[k * p.n + j + q];
  return v;
}

void tile(uint row0, uint col0) {
  const uint lid = gl_LocalInvocationID.x;
  const uint tx = lid % (TN / RN), ty = lid / (TN / RN);
  const uint my_row = row0 + ty * RM, my_col = col0 + tx * RN;

  for (uint i = lid; i < TM; i += WG) {
    const uint r = row0 + i;
    if (r >= p.m) rows[i] = ivec3(kOff, kOff, 0);
    else rows[i] = MODE == 2 ? tap(r) : pixel(r);
  }
  for (uint i = lid; i < TK; i += WG) ks[i] = k_info(i);
  barrier();

  vec4 acc[RM][RN4];
  [[unroll]] for (uint r = 0; r < RM; ++r) {
    [[unroll]] for (uint q = 0; q < RN4; ++q) acc[r][q] = vec4(0.0);
  }

  for (uint k0 = 0, slot = 0; k0 < p.k; k0 += TK, slot ^= TK) {
    [[unroll]] for (uint s = 0; s < (TK * TM4 + WG - 1) / WG; ++s) {
      const uint e = lid + s * WG;
      if (e < TK * TM4) {
        const uint kk = ROWS_FAST ? e / TM4 : e % TK, i4 = ROWS_FAST ? e % TM4 : e / TK;
        sa[kk * TM4 + i4] = load_a4(i4, k0 + kk, ks[slot + kk]);
      }
    }
    [[unroll]] for (uint s = 0; s < (TK * TN4 + WG - 1) / WG; ++s) {
      const uint e = lid + s * WG;
      if (e < TK * TN4) {
        const uint kk = e / TN4, j4 = e % TN4;
        sb[kk * TN4 + j4] = load_b4(k0 + kk, col0 + 4 * j4, ks[slot + kk]);
      }
    }
    barrier();
    // The next slice's table, into the slot the loads above did not read.
    for (uint i = lid; i < TK; i += WG) ks[(slot ^ TK) + i] = k_info(k0 + TK + i);
    [[unroll]] for (uint kk = 0; kk < TK; ++kk) {
      vec4 av[RM4], bv[RN4];
      [[unroll]] for (uint q = 0; q < RM4; ++q) av[q] = sa[kk * TM4 + ty * RM4 + q];
      [[unroll]] for (uint q = 0; q < RN4; ++q) bv[q] = sb[kk * TN4 + tx * RN4 + q];
      [[unroll]] for (uint r = 0; r < RM; ++r) {
        [[unroll]] for (uint q = 0; q < RN4; ++q) acc[r][q] = fma(vec4(av[r / 4][r % 4]), bv[q], acc[r][q]);
      }
    }
    barrier();
  }

  [[unroll]] for (uint r = 0; r < RM; ++r) {
    const uint i = my_row + r;
    if (i < p.m) {
      [[unroll]] for (uint q = 0; q < RN4; ++q) {
        [[unroll]] for (uint e = 0; e < 4; ++e) {
          const uint j = my_col + q * 4 + e;
          if (j < p.n) {
            const uint at = i * p.n + j;
            float v = acc[r][q][e];
            // The CPU's order: the bias or the addend after the sum, then the ReLU or its mask.
            if ((p.flags & FLAG_BIAS) != 0) v += p.extra.v[j];
            if ((p.flags & FLAG_ADDEND) != 0) v += p.extra.v[at];
            if ((p.flags & FLAG_RELU) != 0) v = v <= 0.0 ? 0.0 : v;  // NaN passes, as relu_value
            if ((p.flags & FLAG_MASK) != 0 && p.mask.v[at] <= 0.0) v = 0.0;  // a NaN y passes g, as relu_pass
            p.c.v[at] = v;
          }
        }
      }
    }
  }
}

void main() {
  const uint tiles_m = (p.m + TM - 1) / TM, tiles_n = (p.n + TN - 1) / TN;
  for (uint ti = gl_WorkGroupID.y; ti < tiles_m; ti += gl_NumWorkGroups.y)
    for (uint tj = gl_WorkGroupID.x; tj < tiles_n; tj += gl_NumWorkGroups.x) tile(ti * TM, tj * TN);
}
