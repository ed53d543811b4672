#version 450
#include "common.glsl"
// BroadcastTo (kernels/reduction.cpp): y[i] = x at i's offset, y's axes
// merged into at most 6 groups (size, stride in x: 0 along a broadcast axis;
// group 0 outermost).
layout(push_constant) uniform Push {
  F32 x;
  F32 y;
  uint n;
  uint rank;
  uint size[6];
  uint stride[6];
} p;
void main() {
  FOR_EACH(i, p.n) {
    uint rem = i, off = 0;
    for (int d = int(p.rank) - 1; d >= 0; --d) {
      off += (rem % p.size[d]) * p.stride[d];
      rem /= p.size[d];
    }
    p.y.v[i] = p.x.v[off];
  }
}
