#include "core/thread_pool.h"

#include <tbb/blocked_range.h>
#include <tbb/global_control.h>
#include <tbb/info.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <exception>
#include <mutex>
#include <string>

#include "tensorgrad/core/error.h"
#include "tensorgrad/core/threads.h"

namespace tensorgrad {

struct ComputePool::Arena {
  explicit Arena(int threads) : arena(threads) {
    // oneTBB starts at most one worker fewer than the cores it sees; more
    // threads than that (set_num_threads(3) on two cores, or a process held
    // to fewer cores by taskset) are given as asked, as pthreads would be.
    // Only ever raised: a lower limit would also cap the program's own use
    // of oneTBB.
    if (threads > tbb::info::default_concurrency())
      limit = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, size_t(threads));
  }
  std::unique_ptr<tbb::global_control> limit;
  tbb::task_arena arena;
};

ComputePool::ComputePool(int threads) : threads_(threads) {
  try {
    arena_ = std::make_unique<Arena>(threads);
    arena_->arena.initialize();
  } catch (const std::exception& e) {
    throw Error("could not start a pool of " + std::to_string(threads) + " threads (" + e.what() +
                "); call set_num_threads with fewer");
  }
}

ComputePool::~ComputePool() = default;

int ComputePool::current_slot() {
  const int slot = tbb::this_task_arena::current_thread_index();
  return slot < 0 ? 0 : slot;  // tbb::task_arena::not_initialized outside an arena
}

int ComputePool::slots_here() { return std::max(1, tbb::this_task_arena::max_concurrency()); }

void ComputePool::parallelize(size_t n, size_t tile, void (*fn)(void*, size_t, size_t), void* ctx) {
  const size_t tiles = (n + tile - 1) / tile;
  // simple_partitioner with grain 1 splits down to single tiles, so the
  // bounds a task gets are the tiles themselves, whoever runs it.
  arena_->arena.execute([&] {
    tbb::parallel_for(
        tbb::blocked_range<size_t>(0, tiles, 1),
        [&](const tbb::blocked_range<size_t>& r) {
          for (size_t k = r.begin(); k < r.end(); ++k) {
            const size_t begin = k * tile;
            fn(ctx, begin, std::min(n, begin + tile) - begin);
          }
        },
        tbb::simple_partitioner());
  });
}

std::shared_ptr<ComputePool> compute_pool() {
  static std::mutex mu;
  static std::shared_ptr<ComputePool> pool;
  static uint64_t generation = 0;
  std::lock_guard<std::mutex> lock(mu);
  const int n = num_threads();  // may initialise the default count and bump nothing
  if (generation != threads_generation()) {
    generation = threads_generation();
    pool = nullptr;
    if (n > 1) pool = std::make_shared<ComputePool>(n);
  }
  return pool;
}

}  // namespace tensorgrad
