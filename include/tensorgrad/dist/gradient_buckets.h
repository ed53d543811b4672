#pragma once
// Gradient buckets of data-parallel training: every gradient packed into one
// flat float32 buffer, cut into byte ranges of a fixed size, and summed over
// the ranks one bucket per message (PyTorch DDP's buckets and bucket_cap_mb,
// Horovod's tensor fusion). The graph models' hook stage and the eager API's
// all_reduce_gradients both reduce through reduce_buckets, so a buffer cut
// at the same size sends the same messages either way.
#include <cstddef>
#include <span>
#include <utility>

#include "tensorgrad/dist/communicator.h"

namespace tensorgrad::dist {

/// The default bucket size in bytes: 25 MiB, PyTorch DDP's bucket_cap_mb.
inline constexpr size_t kDefaultGradientBucketBytes = size_t(25) << 20;

/// Whole float32 elements in a bucket of `bucket_bytes`: bucket_bytes / 4,
/// rounded down. Throws ValueError, naming `where` (the caller or option),
/// for a bucket below 4 bytes, which holds no element.
size_t bucket_elements(size_t bucket_bytes, const char* where = "bucket_bytes");

/// The buckets of `bucket_bytes` that a flat buffer of `n` float32 elements
/// is cut into: ceil(n / bucket_elements(bucket_bytes)); 0 for n = 0. Throws
/// as bucket_elements.
size_t bucket_count(size_t n, size_t bucket_bytes);

/// Bucket k's elements [begin, end) in a flat buffer of `n`: begin = k *
/// bucket_elements(bucket_bytes), end = min(begin + bucket_elements, n).
/// Buckets are contiguous, in order, and cover the buffer once; they ignore
/// tensor boundaries. Throws IndexError unless k < bucket_count(n,
/// bucket_bytes), and as bucket_elements.
std::pair<size_t, size_t> bucket_range(size_t n, size_t bucket_bytes, size_t k);

/// Sums `data` over every rank of `comm`, in place, one
/// Communicator::reduce_broadcast per bucket of `bucket_bytes`, so every
/// rank ends with the same bits. The buckets cut the first data.size() -
/// `trailing` elements (the gradients); the last `trailing` elements (what
/// the ranks must add up alongside them, such as the rows each rank's
/// gradients stand for) ride in the last bucket's message and cost no
/// message of their own. Sends ceil((data.size() - trailing) /
/// bucket_elements) messages (one when only trailing elements are given,
/// none for an empty span). Every rank must call it with the same sizes
/// (MPI's rule for collectives). Throws ValueError for trailing >
/// data.size(), as bucket_elements, and what the communicator throws.
void reduce_buckets(Communicator& comm, std::span<float> data, size_t bucket_bytes, size_t trailing = 0);

}  // namespace tensorgrad::dist
