#version 450
#include "common.glsl"
// Strided copies: Transpose, Slice, SliceBackward, Concat, ToIndex. Element
// i of an index space of shape dims[0, RANK) (constant 2; row-major) goes
// from src[src_base + sum c_d ss[d]] to dst[dst_base + sum c_d sd[d]], c its
// coordinates; strides and bases count elements. MODE (constant 1): 0 copies
// 4-byte elements (float32, int32), 1 8-byte ones (int64), 2 converts float32
// to int32 (ToIndex: C++'s truncation, as int(x)).
layout(constant_id = 1) const uint MODE = 0;
layout(constant_id = 2) const int RANK = 6;
layout(push_constant) uniform Push {
  I32 src; I32 dst;
  uint n;
  uint src_base, dst_base;
  uint dims[6];
  uint ss[6];
  uint sd[6];
} p;

void main() {
  FOR_EACH(i, p.n) {
    uint is = p.src_base, id = p.dst_base, rem = i;
    for (int d = RANK - 1; d > 0; --d) {
      const uint c = rem % p.dims[d];
      rem /= p.dims[d];
      is += c * p.ss[d];
      id += c * p.sd[d];
    }
    is += rem * p.ss[0];
    id += rem * p.sd[0];
    if (MODE == 0) {
      p.dst.v[id] = p.src.v[is];
    } else if (MODE == 1) {
      I64(p.dst).v[id] = I64(p.src).v[is];
    } else {
      p.dst.v[id] = int(F32(p.src).v[is]);
    }
  }
}
