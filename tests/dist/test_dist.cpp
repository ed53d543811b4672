// The dist layer without mpiexec: the communicator in a program that does not
// link tensorgrad::mpi (this one; the MPI tests link it and run under
// mpiexec: tests/dist/mpi/, CTest's dist.np2 and np3), and the gradient
// bucket cut.
#include <gtest/gtest.h>

#include <algorithm>

#include "test_support.h"
#include "tensorgrad/dist/communicator.h"
#include "tensorgrad/dist/gradient_buckets.h"
#include "tensorgrad/opt/hook_stage.h"

using namespace tensorgrad;
using test_support::throws;

TEST(Dist, WithoutMpiACommunicatorSaysHowToGetOne) {
  // MPI is not imposed: this binary links tensorgrad alone, whatever the build found.
  EXPECT_FALSE(dist::built_with_mpi());
  EXPECT_TRUE(throws<StateError>([] { dist::Communicator c; }, {"linked without", "tensorgrad::mpi", "libopenmpi-dev"}));
}

// The bucket cut every data-parallel reduction and GradientBuffer share:
// contiguous ranges of whole float32 elements covering the buffer once, a
// bucket size that is not a multiple of 4 rounded down, the last bucket
// short; a bucket below one element and a bucket past the end refused.
TEST(Dist, BucketsCutAFlatBufferIntoWholeElementRanges) {
  for (size_t bytes : {size_t(4), size_t(6), size_t(12), size_t(40), size_t(524), size_t(1000)}) {
    SCOPED_TRACE("bucket bytes " + std::to_string(bytes));
    const size_t n = 131, per = bytes / 4;
    EXPECT_EQ(dist::bucket_elements(bytes), per);
    EXPECT_EQ(dist::bucket_count(n, bytes), (n + per - 1) / per);
    size_t next = 0;
    for (size_t k = 0; k < dist::bucket_count(n, bytes); ++k) {
      const auto [begin, end] = dist::bucket_range(n, bytes, k);
      EXPECT_EQ(begin, next);
      EXPECT_EQ(end, std::min(begin + per, n));
      next = end;
    }
    EXPECT_EQ(next, n);
    const size_t past = dist::bucket_count(n, bytes);
    EXPECT_TRUE(throws<IndexError>([&] { dist::bucket_range(n, bytes, past); },
                                   {"bucket " + std::to_string(past), "out of range"}));
  }
  EXPECT_EQ(dist::bucket_count(0, 64), 0u);
  EXPECT_EQ(dist::kDefaultGradientBucketBytes, size_t(25) << 20);
  EXPECT_EQ(kDefaultGradientBucketBytes, dist::kDefaultGradientBucketBytes);  // the hook stage's, the same constant
  EXPECT_TRUE(throws<ValueError>([] { dist::bucket_elements(3, "gradient_bucket_bytes"); },
                                 {"gradient_bucket_bytes", "at least 4", "got 3"}));
  EXPECT_TRUE(throws<ValueError>([] { dist::bucket_count(10, 0); }, {"at least 4", "got 0"}));
}
