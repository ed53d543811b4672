#pragma once
#include <cstdint>

namespace tensorgrad {

/// Sets the number of compute threads every pool uses: tensorgrad's kernels
/// and the BLAS library's. Applies from the next run of a graph. Default: the
/// number of cores. Throws ValueError when n < 1 or n > 1024. Idle pool
/// threads wait in the kernel, not spinning, so they leave the cores to other
/// work between steps.
void set_num_threads(int n);
/// The current thread count.
int num_threads();
/// Whether the program has called set_num_threads (else num_threads() is
/// the default, one per core).
bool num_threads_set();
/// Incremented by every set_num_threads; backends compare it to rebuild pools.
uint64_t threads_generation();

}  // namespace tensorgrad
