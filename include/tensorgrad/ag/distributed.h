#pragma once
// Data-parallel training in hand-written eager loops: the gradients of every
// rank averaged, as PyTorch's DistributedDataParallel and Horovod's
// DistributedOptimizer do, on a dist::Communicator.
#include <cstddef>
#include <vector>

#include "tensorgrad/ag/tensor.h"
#include "tensorgrad/dist/communicator.h"
#include "tensorgrad/dist/gradient_buckets.h"

namespace tensorgrad::dist {

/// The former name of kDefaultGradientBucketBytes (25 MiB, PyTorch DDP's
/// bucket_cap_mb), which the graph models' hook stage uses too.
[[deprecated("use dist::kDefaultGradientBucketBytes")]] inline constexpr size_t kDefaultAllReduceBucketBytes =
    kDefaultGradientBucketBytes;

/// Replaces every parameter's gradient by the mean of that gradient over all
/// ranks, bit-identical on every rank: the gradients are packed in parameter
/// order into one flat float32 buffer, summed over the ranks bucket by
/// bucket (reduce_buckets: one Communicator::reduce_broadcast per
/// `bucket_bytes`, rounded down to whole elements, each element summed by
/// one rank and copied to the others), and divided by the number of ranks.
/// Call it after backward() and before the optimizer's step() on every
/// rank, with the same parameters (names, shapes and order) everywhere.
///
/// A parameter without a gradient on this rank counts as zeros and gets the
/// averaged gradient (so every rank sends the same messages). Throws
/// ValueError for an undefined parameter or a bucket below 4 bytes,
/// TypeError for a non-float32 parameter, and what the communicator throws;
/// MPI cannot detect ranks whose parameter sizes differ, so the total element
/// count is compared across ranks first (ValueError naming both counts).
void all_reduce_gradients(Communicator& comm, const std::vector<ag::Tensor>& parameters,
                          size_t bucket_bytes = kDefaultGradientBucketBytes);

}  // namespace tensorgrad::dist
