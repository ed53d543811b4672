#include "backend/thread_pool.h"

#include <mutex>
#include <string>

#include "tensorgrad/core/error.h"

#include "tensorgrad/core/threads.h"

namespace tensorgrad {

std::shared_ptr<pthreadpool> compute_pool() {
  static std::mutex mu;
  static std::shared_ptr<pthreadpool> pool;
  static uint64_t generation = 0;
  std::lock_guard<std::mutex> lock(mu);
  const int n = num_threads();  // may initialise the default count and bump nothing
  if (generation != threads_generation()) {
    generation = threads_generation();
    pool = nullptr;
    if (n > 1) {
      pthreadpool_t p = pthreadpool_create(size_t(n));
      if (!p) throw Error("could not start a pool of " + std::to_string(n) + " threads; call set_num_threads with fewer");
      pool = std::shared_ptr<pthreadpool>(p, pthreadpool_destroy);
    }
  }
  return pool;
}

}  // namespace tensorgrad
