#include "backend/thread_pool.h"

#include <mutex>

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
    pool = n > 1 ? std::shared_ptr<pthreadpool>(pthreadpool_create(size_t(n)), pthreadpool_destroy) : nullptr;
  }
  return pool;
}

}  // namespace tensorgrad
