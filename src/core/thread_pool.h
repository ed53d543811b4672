#pragma once
#include <cstddef>
#include <memory>

namespace tensorgrad {

/// The compute threads the kernels split their work over: a oneTBB task
/// arena of `threads` slots (the calling thread takes one). Work is split
/// into tiles whose bounds depend only on the problem size, each tile a task
/// that any thread may take, so a caller never waits for a worker that has
/// not started (one descheduled by the system runs nothing; the others take
/// its tiles) and results do not depend on which thread ran what. Workers
/// are oneTBB's: they spin a little after the last task, then sleep.
/// Issue 15 ("a thread pool that does not wait for a descheduled worker"):
/// beside a process spinning on one of two cores, pthreadpool (which waits
/// for every worker at every op) made the MLP epoch 2 threads slower than
/// 1; see BENCHMARKS.md.
class ComputePool {
 public:
  /// Throws tensorgrad::Error when the arena cannot be started.
  explicit ComputePool(int threads);
  ~ComputePool();
  ComputePool(const ComputePool&) = delete;
  ComputePool& operator=(const ComputePool&) = delete;

  /// The slots asked for (set_num_threads). oneTBB runs at most as many
  /// threads at once as the process has cores.
  int threads() const { return threads_; }

  /// Runs fn(ctx, begin, length) once for each tile [k tile, min(n, (k+1) tile))
  /// of [0, n), on the calling thread and the workers, and returns when all
  /// have run. fn must not throw. Allocates nothing after the first calls.
  void parallelize(size_t n, size_t tile, void (*fn)(void*, size_t, size_t), void* ctx);
  /// The calling thread's slot while it runs one of parallelize's tiles:
  /// 0 .. threads() - 1, never the same for two threads running tiles of
  /// one pool at once; 0 on a thread outside every pool (the inline path).
  static int current_slot();
  /// The slots current_slot() may return on the calling thread when a
  /// kernel runs there without a pool (it may sit in another oneTBB arena).
  static int slots_here();

 private:
  struct Arena;
  int threads_;
  std::unique_ptr<Arena> arena_;
};

/// The process-wide compute pool, sized by set_num_threads (rebuilt on the
/// first use after a change). Holding the returned pointer keeps that pool
/// alive even if another thread rebuilds it. Null when one thread is set.
std::shared_ptr<ComputePool> compute_pool();

}  // namespace tensorgrad
