#version 450
#include "common.glsl"
// Gather (embedding lookup): y{N, D} = table{V, D}[ids{N}], one invocation
// per output element. The CPU throws for an id outside [0, V) before it
// copies a row; a shader cannot throw, so such an id's row is NaN here (the
// host checks ids before a training step in most paths), and no read ever
// leaves the table.
layout(push_constant) uniform Push {
  F32 table;
  I32 ids;
  F32 y;
  uint n;  // output elements, N D
  uint d;
  uint vocab;
} p;

void main() {
  FOR_EACH(i, p.n) {
    const int id = p.ids.v[i / p.d];
    p.y.v[i] = id >= 0 && uint(id) < p.vocab ? p.table.v[uint(id) * p.d + i % p.d] : uintBitsToFloat(0x7fc00000u);
  }
}
