#include "tensorgrad/core/threads.h"

#include <atomic>
#include <string>
#include <thread>

#include "tensorgrad/core/error.h"

extern "C" void openblas_set_num_threads(int);

namespace tensorgrad {

namespace {
// OpenBLAS is kept single-threaded: tensorgrad's pool splits large products
// into blocks and calls sgemm once per block on its own threads. Two pools of
// spinning threads on the same cores made 2 threads 2.6x slower than 1.
[[maybe_unused]] const bool g_blas_single = [] {
  openblas_set_num_threads(1);
  return true;
}();

constexpr int kMaxThreads = 1024;

int default_threads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : int(n);
}
std::atomic<int> g_threads{0};
std::atomic<uint64_t> g_generation{1};
}  // namespace

void set_num_threads(int n) {
  if (n < 1) throw ValueError("set_num_threads: expected at least 1 thread; got " + std::to_string(n));
  if (n > kMaxThreads)
    throw ValueError("set_num_threads: at most " + std::to_string(kMaxThreads) + " threads; got " + std::to_string(n) +
                     " (this machine has " + std::to_string(default_threads()) + " cores)");
  g_threads = n;
  ++g_generation;
}

int num_threads() {
  int n = g_threads.load();
  if (n == 0) {
    n = default_threads();
    g_threads = n;
  }
  return n;
}

uint64_t threads_generation() { return g_generation.load(); }

bool num_threads_set() { return g_generation.load() > 1; }

}  // namespace tensorgrad
