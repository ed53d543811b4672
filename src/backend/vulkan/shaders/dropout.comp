#version 450
#include "common.glsl"
#include "stateful.glsl"
// Inverted dropout: y = x / (1 - rate) where hash_uniform(hash_random(seed,
// counter), i) >= rate, else 0 (kernels/elementwise.cpp's dropout_forward).
// The counter is read here, not when recording: a recorded graph replays
// with the value AdvanceCounter left.
layout(push_constant) uniform Push { F32 x; F32 y; I64 counter; uint64_t seed; uint n; float rate; float scale; } p;
void main() {
  const uint64_t key = hash_random(p.seed, uint64_t(p.counter.v[0]));
  FOR_EACH(i, p.n) p.y.v[i] = hash_uniform(key, uint64_t(i)) >= p.rate ? p.x.v[i] * p.scale : 0.0;
}
