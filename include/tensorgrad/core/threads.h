#pragma once
#include <cstdint>

namespace tensorgrad {

/// Sets the number of compute threads tensorgrad's kernels run on (the BLAS
/// library stays on one thread inside each of them). Applies from the next
/// run of a graph. Default: the number of cores. Throws ValueError when
/// n < 1 or n > 1024. The threads are oneTBB's workers: started on first
/// use, they spin briefly after a step, then sleep, so they leave the cores
/// to other work between steps; a step never waits for a worker the system
/// has not scheduled (the caller takes its share of the work).
void set_num_threads(int n);
/// The current thread count.
int num_threads();
/// Whether the program has called set_num_threads (else num_threads() is
/// the default, one per core).
bool num_threads_set();
/// Incremented by every set_num_threads; backends compare it to rebuild pools.
uint64_t threads_generation();

}  // namespace tensorgrad
