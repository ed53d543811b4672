#pragma once
// One register of floats as a GCC vector, for kernels that step over
// channels or filters a register at a time (the Winograd transforms, the
// one-channel convolution): 16 lanes with AVX-512, 8 with AVX, else 4 (SSE).
#include <cstring>
#include <immintrin.h>

namespace tensorgrad::kernels {

#if defined(__AVX512F__)
inline constexpr int kLanes = 16;
#elif defined(__AVX__)
inline constexpr int kLanes = 8;
#else
inline constexpr int kLanes = 4;
#endif
typedef float Vec __attribute__((vector_size(kLanes * sizeof(float))));

inline Vec load_vec(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store_vec(float* p, Vec v) { std::memcpy(p, &v, sizeof v); }
// *p in every lane, as one load: GCC keeps Vec{} + *p as an add (it must
// turn -0 into +0) and a register shuffle, which shares AVX-512's second
// multiply-add port (the Winograd filter gradient's products ran at half speed).
inline Vec broadcast_vec(const float* p) {
#if defined(__AVX512F__)
  return Vec(_mm512_set1_ps(*p));
#elif defined(__AVX__)
  return Vec(_mm256_broadcast_ss(p));
#else
  return Vec(_mm_set1_ps(*p));
#endif
}

}  // namespace tensorgrad::kernels
