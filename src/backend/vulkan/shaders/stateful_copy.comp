#version 450
#include "common.glsl"
// dst = src, 4-byte words (Assign: every dtype is 4 or 8 bytes wide); ints,
// so that no float conversion touches NaN payloads or integer bits.
layout(push_constant) uniform Push { I32 dst; I32 src; Status status; uint n; } p;
void main() {
  if (skip_update(p.status)) return;
  FOR_EACH(i, p.n) p.dst.v[i] = p.src.v[i];
}
