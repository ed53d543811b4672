#pragma once
#include <cmath>
#include <cstdint>
#include <random>

namespace tensorgrad {

/// Seeds the global generator that weight initialisers, shuffling and dropout
/// streams draw from (as torch.manual_seed / keras.utils.set_random_seed).
/// The same seed and thread count give bit-identical training.
void manual_seed(uint64_t seed);
/// The value last given to manual_seed (default 0).
uint64_t initial_seed();
/// The global generator (a 64-bit Mersenne twister). One thread at a time.
std::mt19937_64& global_generator();

/// Counter-based random bits: a pure function of (key, counter), so that a
/// kernel gives the same numbers whatever the thread count (SplitMix64's
/// finaliser, Steele et al. 2014).
inline uint64_t hash_random(uint64_t key, uint64_t counter) {
  uint64_t z = key + 0x9E3779B97F4A7C15ull * (counter + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
/// Uniform float in [0, 1) from hash_random (24 random bits).
inline float hash_uniform(uint64_t key, uint64_t counter) {
  return float(hash_random(key, counter) >> 40) * (1.0f / 16777216.0f);
}
/// hash_uniform(key, counter) >= rate as an integer comparison (the 24 bits
/// against ceil(rate 2^24), exact), which vectorizes: keep_threshold(rate)
/// is the second operand of hash_keeps.
inline uint64_t keep_threshold(float rate) { return uint64_t(std::ceil(double(rate) * 16777216.0)); }
/// Whether a dropout with keep_threshold(rate) keeps element `counter`.
inline bool hash_keeps(uint64_t key, uint64_t counter, uint64_t threshold) {
  return (hash_random(key, counter) >> 40) >= threshold;
}

}  // namespace tensorgrad
