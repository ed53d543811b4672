#include "tensorgrad/core/random.h"

namespace tensorgrad {

namespace {
uint64_t g_seed = 0;
std::mt19937_64& generator() {
  static std::mt19937_64 gen(0);
  return gen;
}
}  // namespace

void manual_seed(uint64_t seed) {
  g_seed = seed;
  generator().seed(seed);
}
uint64_t initial_seed() { return g_seed; }
std::mt19937_64& global_generator() { return generator(); }

}  // namespace tensorgrad
