#version 450
#include "common.glsl"
// Gather (embedding lookup): y{N, D} = table{V, D}[ids{N}], one invocation
// per output element. The CPU throws IndexError for an id outside [0, V); a
// shader cannot throw, so it reports the id in the status words (the host
// throws the CPU's error after the submit, and the step's update kernels do
// nothing), writes NaN for that row and never reads outside the table.
layout(push_constant) uniform Push {
  F32 table;
  I32 ids;
  F32 y;
  Status status;
  uint n;  // output elements, N D
  uint d;
  uint vocab;
} p;

void main() {
  FOR_EACH(i, p.n) {
    const int id = p.ids.v[i / p.d];
    if (id >= 0 && uint(id) < p.vocab) {
      p.y.v[i] = p.table.v[uint(id) * p.d + i % p.d];
    } else {
      p.y.v[i] = uintBitsToFloat(0x7fc00000u);
      if (i % p.d == 0u) report(p.status, kStatusGatherId, id, i / p.d, p.vocab);
    }
  }
}
