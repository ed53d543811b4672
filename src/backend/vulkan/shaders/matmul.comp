#version 450
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
// C{M,N} = init + op(A){M,K} op(B){K,N} per batch entry (kernels/matmul.cpp): init is the bias
// row (FLAG_BIAS), C itself (FLAG_ACCUMULATE) or 0; then ReLU with FLAG_RELU.
//
// Each workgroup computes TM x TN tiles of C, staging TK-deep slices of A and B in shared memory;
// each invocation keeps an RM x RN block of C in registers. Every element's sum runs over k in
// order 0, 1, ..., K-1 as one chain of fma starting from init, whatever the tile sizes, so the
// result does not depend on the tiling, the device's limits or the workgroup scheduling.
// Tiles and batch entries beyond the grid are reached by looping over the grid (x: tile columns,
// y: tile rows, z: batch entries), all three loops uniform over the workgroup (barriers inside).
//
// The shared slices hold vec4s of 4 rows (A) or 4 columns (B) at one k, so that the inner loop
// reads RM / 4 + RN / 4 vectors per k for RM * RN fmas: on lavapipe every shared or global access
// is a loop over the SIMD lanes, which a vec4 pays once for 4 values.
layout(constant_id = 1) const uint TM = 64;  // tile rows (multiple of RM, of 4)
layout(constant_id = 2) const uint TN = 64;  // tile columns (multiple of RN, of 4)
layout(constant_id = 3) const uint TK = 16;  // the depth of a staged slice
layout(constant_id = 4) const uint RM = 8;   // rows per invocation (multiple of 4)
layout(constant_id = 5) const uint RN = 8;   // columns per invocation (multiple of 4)
layout(constant_id = 6) const uint TRANS_A = 0;  // A stored {K,M}
layout(constant_id = 7) const uint TRANS_B = 0;  // B stored {N,K}

// kernels/matmul.cpp's kBias, kRelu, kAccumulate.
const uint FLAG_BIAS = 1u, FLAG_RELU = 2u, FLAG_ACCUMULATE = 4u;

layout(push_constant) uniform Push {
  F32 a;
  F32 b;
  F32 c;
  F32 bias;
  Status status;  // read with FLAG_ACCUMULATE only: an accumulation is an update
  uint m;
  uint n;
  uint k;
  uint batch;
  uint flags;
} p;

const uint TM4 = TM / 4, TN4 = TN / 4, RM4 = RM / 4, RN4 = RN / 4;
const uint WG = (TM / RM) * (TN / RN);  // the invocations (constant 0 is set to this)
// The staged slices: sa[kk * SA + i4] = A(row0 + 4 i4 .. + 3, k0 + kk), sb likewise B's columns. The
// rows are one vec4 longer than the tile so that stores along k spread over a GPU's shared memory banks.
const uint SA = TM4 + 1, SB = TN4 + 1;
shared vec4 sa[TK * SA];
shared vec4 sb[TK * SB];

// A(i, k) of batch entry base (zero outside the matrix: the edge tiles' padding adds 0 * 0).
float load_a(uint base, uint i, uint k) {
  if (i >= p.m || k >= p.k) return 0.0;
  return p.a.v[base + (TRANS_A != 0 ? k * p.m + i : i * p.k + k)];
}
float load_b(uint base, uint k, uint j) {
  if (k >= p.k || j >= p.n) return 0.0;
  return p.b.v[base + (TRANS_B != 0 ? j * p.k + k : k * p.n + j)];
}

void tile(uint z, uint row0, uint col0) {
  const uint lid = gl_LocalInvocationID.x;
  const uint tx = lid % (TN / RN), ty = lid / (TN / RN);
  const uint my_row = row0 + ty * RM, my_col = col0 + tx * RN;
  const uint a_base = z * p.m * p.k, b_base = z * p.k * p.n, c_base = z * p.m * p.n;

  vec4 acc[RM][RN4];
  [[unroll]] for (uint r = 0; r < RM; ++r) {
    [[unroll]] for (uint q = 0; q < RN4; ++q) {
      vec4 v = vec4(0.0);
      const uint i = my_row + r;
      if ((p.flags & (FLAG_BIAS | FLAG_ACCUMULATE)) != 0 && i < p.m) {
        [[unroll]] for (uint e = 0; e < 4; ++e) {
          const uint j = my_col + q * 4 + e;
          if (j < p.n) v[e] = (p.flags & FLAG_BIAS) != 0 ? p.bias.v[j] : p.c.v[c_base + i * p.n + j];
        }
      }
      acc[r][q] = v;
    }
  }

  for (uint k0 = 0; k0 < p.k; k0 += TK) {
    // Neighbouring invocations take neighbouring addresses of the operand's memory (coalesced).
    [[unroll]] for (uint s = 0; s < (TK * TM4 + WG - 1) / WG; ++s) {
      const uint e = lid + s * WG;
      if (e < TK * TM4) {
        const uint kk = TRANS_A != 0 ? e / TM4 : e % TK, i4 = TRANS_A != 0 ? e % TM4 : e / TK;
        const uint i = row0 + 4 * i4, k = k0 + kk;
        sa[kk * SA + i4] =
            vec4(load_a(a_base, i, k), load_a(a_base, i + 1, k), load_a(a_base, i + 2, k), load_a(a_base, i + 3, k));
      }
    }
    [[unroll]] for (uint s = 0; s < (TK * TN4 + WG - 1) / WG; ++s) {
      const uint e = lid + s * WG;
      if (e < TK * TN4) {
        const uint kk = TRANS_B != 0 ? e % TK : e / TN4, j4 = TRANS_B != 0 ? e / TK : e % TN4;
        const uint j = col0 + 4 * j4, k = k0 + kk;
        sb[kk * SB + j4] =
            vec4(load_b(b_base, k, j), load_b(b_base, k, j + 1), load_b(b_base, k, j + 2), load_b(b_base, k, j + 3));
      }
    }
    barrier();
    for (uint kk = 0; kk < TK; ++kk) {
      vec4 av[RM4], bv[RN4];
      [[unroll]] for (uint q = 0; q < RM4; ++q) av[q] = sa[kk * SA + ty * RM4 + q];
      [[unroll]] for (uint q = 0; q < RN4; ++q) bv[q] = sb[kk * SB + tx * RN4 + q];
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
            float v = acc[r][q][e];
            if ((p.flags & FLAG_RELU) != 0) v = v <= 0.0 ? 0.0 : v;  // NaN passes, as relu_value
            p.c.v[c_base + i * p.n + j] = v;
          }
        }
      }
    }
  }
}

void main() {
  if ((p.flags & FLAG_ACCUMULATE) != 0u && skip_update(p.status)) return;
  const uint tiles_m = (p.m + TM - 1) / TM, tiles_n = (p.n + TN - 1) / TN;
  for (uint z = gl_WorkGroupID.z; z < p.batch; z += gl_NumWorkGroups.z)
    for (uint ti = gl_WorkGroupID.y; ti < tiles_m; ti += gl_NumWorkGroups.y)
      for (uint tj = gl_WorkGroupID.x; tj < tiles_n; tj += gl_NumWorkGroups.x) tile(z, ti * TM, tj * TN);
}
