// Helpers of the attention shaders (kernels/attention.cpp): the push block,
// a (query, key) pair's scaled and masked score, and its dropout factor, as
// kernels/attention.cpp's Problem computes them.
#include "stateful.glsl"

layout(push_constant) uniform Push {
  F32 q;  // {N, Lq, D}
  F32 k;  // {N / group, Lk, D}
  F32 v;  // {N / group, Lk, Dv}
  F32 y;  // {N, Lq, Dv + 1}: the forward's output (backward: its input)
  F32 g;  // {N, Lq, Dv + 1}: the output's gradient (backward only)
  F32 mask;  // {mask_n, mask_q, Lk}, added to the scaled scores (with kMask)
  I64 counter;  // the random stream's counter (when rate > 0)
  F32 dx;  // backward: {N / group, group Lq D + Lk D + Lk Dv}
  uint n, lq, lk, d, dv, mask_n, mask_q, flags;
  uint group;  // query rows per key-value row: query row b reads key-value row b / group
  float scale, rate;
  uint64_t seed;
} p;

const uint kCausal = 1u, kMask = 2u;

float score(uint b, uint i, uint j, float dot) {
  if ((p.flags & kCausal) != 0u && j + p.lq > i + p.lk) return uintBitsToFloat(0xff800000u);  // -inf
  float s = dot * p.scale;
  if ((p.flags & kMask) != 0u) s += p.mask.v[((p.mask_n == 1u ? 0u : b) * p.mask_q + (p.mask_q == 1u ? 0u : i)) * p.lk + j];
  return s;
}

float keep(uint64_t key, uint b, uint i, uint j) {
  if (p.rate <= 0.0) return 1.0;
  return hash_uniform(key, (uint64_t(b) * p.lq + i) * p.lk + j) >= p.rate ? 1.0 / (1.0 - p.rate) : 0.0;
}

uint64_t dropout_key() { return p.rate > 0.0 ? hash_random(p.seed, uint64_t(p.counter.v[0])) : 0ul; }

// The keys query i sees: [0, key_end(i)).
uint key_end(uint i) {
  if ((p.flags & kCausal) == 0u) return p.lk;
  return i + 1u + p.lk <= p.lq ? 0u : min(p.lk, i + 1u + p.lk - p.lq);
}

float dot_rows(F32 a, uint a0, F32 b, uint b0, uint len) {
  float s = 0.0;
  for (uint e = 0u; e < len; ++e) s += a.v[a0 + e] * b.v[b0 + e];
  return s;
}
