// The MPI communicator, run by CTest under `mpiexec -np 2` and `-np 3`
// (tests/CMakeLists.txt). Every rank runs every test; a failure on any rank
// fails the job. main() initialises MPI itself, so the tests also show that a
// communicator leaves a caller's MPI alone.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "test_support.h"
#include "tensorgrad/ag/distributed.h"
#include "tensorgrad/ag/functional.h"
#include "tensorgrad/dist/communicator.h"
#include "tensorgrad/dist/gradient_buckets.h"

using namespace tensorgrad;
using test_support::throws;

namespace {
int expected_size() {
  const char* s = std::getenv("OMPI_COMM_WORLD_SIZE");
  return s ? std::atoi(s) : 1;
}
}  // namespace

TEST(Communicator, RanksAreDistinctAndCoverTheJob) {
  EXPECT_TRUE(dist::built_with_mpi());  // tensorgrad::mpi's definitions replaced the library's
  dist::Communicator c;
  EXPECT_EQ(c.size(), expected_size());
  ASSERT_GE(c.rank(), 0);
  ASSERT_LT(c.rank(), c.size());
  EXPECT_GE(c.local_size(), 1);
  EXPECT_EQ(c.local_size(), c.size());  // one machine here
  std::vector<float> onehot(size_t(c.size()), 0.0f);
  onehot[size_t(c.rank())] = 1.0f;
  c.all_reduce(onehot);
  for (float v : onehot) EXPECT_EQ(v, 1.0f);  // each rank counted once
}

TEST(Communicator, AllReduceSumsAndAverages) {
  dist::Communicator c;
  const int r = c.rank(), n = c.size();
  std::vector<float> x(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(r + 1) * float(i % 7);
  c.all_reduce(x);
  const float ranks_sum = float(n * (n + 1) / 2);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], ranks_sum * float(i % 7)) << i;
  Tensor t = Tensor::full(Shape{3, 2}, float(r));
  c.all_reduce(t, dist::ReduceOp::Average);
  const float mean = float(n - 1) / 2.0f;
  for (float v : t.to_vector()) EXPECT_FLOAT_EQ(v, mean);
  std::vector<float> empty;
  const int64_t before = c.collective_calls();
  c.all_reduce(empty);
  EXPECT_EQ(c.collective_calls(), before);  // nothing to send: no message
}

TEST(Communicator, ReduceReachesOnlyTheRoot) {
  dist::Communicator c;
  const int root = c.size() - 1;
  std::vector<float> x{float(c.rank()), 1.0f};
  c.reduce(x, root);
  if (c.rank() == root) {
    EXPECT_EQ(x[0], float(c.size() * (c.size() - 1) / 2));
    EXPECT_EQ(x[1], float(c.size()));
  } else {
    EXPECT_EQ(x[0], float(c.rank()));  // left as it was
    EXPECT_EQ(x[1], 1.0f);
  }
}

TEST(Communicator, BroadcastCopiesTheRootsBytesOfAnyDtype) {
  dist::Communicator c;
  Tensor counter = Tensor::zeros(Shape{1}, DType::Int64);
  if (c.rank() == 0) counter.data<int64_t>()[0] = (int64_t(1) << 50) + 3;
  c.broadcast(counter);
  EXPECT_EQ(counter.data<int64_t>()[0], (int64_t(1) << 50) + 3);
  Tensor w = Tensor::full(Shape{4}, float(c.rank()) + 0.5f);
  c.broadcast(w, c.size() - 1);
  for (float v : w.to_vector()) EXPECT_EQ(v, float(c.size() - 1) + 0.5f);
  Tensor rows = Tensor::full(Shape{4, 2}, float(c.rank()));
  Tensor second = rows.rows(2, 4);  // a view: only its bytes move
  c.broadcast(second, 0);
  EXPECT_EQ(rows.item(0), float(c.rank()));
  EXPECT_EQ(rows.item(7), 0.0f);
}

TEST(Communicator, CountsItsCollectives) {
  dist::Communicator c;
  EXPECT_EQ(c.collective_calls(), 0);
  std::vector<float> x(10, 1.0f);
  c.all_reduce(x);
  c.barrier();
  Tensor t = Tensor::zeros(Shape{2});
  c.broadcast(t);
  c.reduce(x);
  EXPECT_EQ(c.collective_calls(), 4);
}

TEST(Communicator, BadInputThrowsBeforeAnyMessage) {
  dist::Communicator c;
  Tensor ids = Tensor::zeros(Shape{2}, DType::Int32);
  Tensor undefined;
  std::vector<float> x(2, 0.0f);
  EXPECT_TRUE(throws<TypeError>([&] { c.all_reduce(ids); }, {"all_reduce", "float32", "int32"}));
  EXPECT_TRUE(throws<StateError>([&] { c.all_reduce(undefined); }, {"undefined"}));
  EXPECT_TRUE(throws<IndexError>([&] { c.broadcast(ids, c.size()); }, {"root", "outside"}));
  EXPECT_TRUE(throws<IndexError>([&] { c.reduce(x, -1); }, {"root -1"}));
  EXPECT_EQ(c.collective_calls(), 0);
}

TEST(Communicator, LeavesTheCallersMpiRunning) {
  { dist::Communicator a, b; }
  int finalized = 1;
  MPI_Finalized(&finalized);
  EXPECT_EQ(finalized, 0);  // main() initialised MPI: no communicator finalises it
  dist::Communicator again;  // and another can still be made
  again.barrier();
}

TEST(AllReduceGradients, EveryRankHoldsTheMeanGradientBitForBit) {
  dist::Communicator c;
  const int r = c.rank(), n = c.size();
  // Each rank's gradient of sum(w * x) is its own x: different on every rank.
  ag::Tensor w = ag::Tensor(Tensor::full(Shape{3, 5}, 0.5f), true);
  ag::Tensor b = ag::Tensor(Tensor::zeros(Shape{5}), true);
  ag::Tensor unused = ag::Tensor(Tensor::zeros(Shape{2}), true);  // no gradient on any rank
  std::vector<float> xv(15);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = float(r + 1) * 0.1f * float(i + 1);
  const ag::Tensor x(Tensor::from_vector(xv, Shape{3, 5}));
  ag::sum(w * x + b).backward();
  const int64_t before = c.collective_calls();
  dist::all_reduce_gradients(c, {w, b, unused}, 16);  // 4 floats a bucket: 22 elements, 6 buckets
  EXPECT_EQ(c.collective_calls() - before, 2 + 6);  // the size check, then one reduce_broadcast per bucket
  const std::vector<float> g = w.grad().data().to_vector();
  for (size_t i = 0; i < g.size(); ++i) {
    float sum = 0.0f;
    for (int k = 0; k < n; ++k) sum += float(k + 1) * 0.1f * float(i + 1);
    EXPECT_NEAR(g[i], sum / float(n), 1e-5f * std::abs(sum)) << i;
  }
  for (float v : b.grad().data().to_vector()) EXPECT_EQ(v, 3.0f);  // the same on every rank: 3 rows
  ASSERT_TRUE(unused.grad().defined());
  for (float v : unused.grad().data().to_vector()) EXPECT_EQ(v, 0.0f);
  // Bit-identical: every rank's bytes equal rank 0's.
  Tensor mine = w.grad().data().clone(), root = w.grad().data().clone();
  c.broadcast(root, 0);
  EXPECT_EQ(std::memcmp(mine.raw(), root.raw(), mine.nbytes()), 0);
}

// The one bucketed reduction both training paths use (the hook stage's
// reduction over ranks and all_reduce_gradients): for buckets of one element
// up to larger than the buffer, with and without a trailing row count, every
// element is summed once, in one message per bucket, to the sum a single
// message over the whole buffer gives. The values are quarters of small
// whole numbers, whose sums float32 holds exactly in any order, so the ring
// (64 elements a rank and more) and the root path agree bit for bit.
TEST(ReduceBuckets, EveryBucketSizeGivesTheSumsOfOneMessage) {
  dist::Communicator c;
  const int r = c.rank(), ranks = c.size();
  const size_t n = 131;  // gradient elements: not a multiple of any bucket below
  auto value = [](int rank, size_t i) { return float(int((i * 7 + size_t(rank) * 13) % 29) - 14) * 0.25f; };
  for (size_t trailing : {size_t(0), size_t(1)}) {
    std::vector<float> whole(n + trailing);
    for (size_t i = 0; i < whole.size(); ++i) whole[i] = value(r, i);
    c.reduce_broadcast(whole);
    for (size_t i = 0; i < whole.size(); ++i) {
      float sum = 0.0f;
      for (int k = 0; k < ranks; ++k) sum += value(k, i);
      ASSERT_EQ(whole[i], sum) << "element " << i;
    }
    for (size_t bucket : {size_t(4), size_t(12), size_t(64), size_t(100), size_t(256), size_t(524), size_t(1000),
                          dist::kDefaultGradientBucketBytes}) {
      SCOPED_TRACE("bucket " + std::to_string(bucket) + " bytes, " + std::to_string(trailing) + " trailing");
      std::vector<float> data(n + trailing);
      for (size_t i = 0; i < data.size(); ++i) data[i] = value(r, i);
      const int64_t before = c.collective_calls();
      dist::reduce_buckets(c, data, bucket, trailing);
      EXPECT_EQ(c.collective_calls() - before, int64_t((n * 4 + bucket - 1) / bucket));
      EXPECT_EQ(std::memcmp(data.data(), whole.data(), data.size() * sizeof(float)), 0);
    }
  }
  std::vector<float> rows{float(r + 1)};  // only a trailing element: one message
  const int64_t before = c.collective_calls();
  dist::reduce_buckets(c, rows, 64, 1);
  EXPECT_EQ(c.collective_calls() - before, 1);
  EXPECT_EQ(rows[0], float(ranks * (ranks + 1) / 2));
  std::vector<float> none;
  dist::reduce_buckets(c, none, 64);  // nothing to send
  EXPECT_EQ(c.collective_calls() - before, 1);
}

TEST(AllReduceGradients, RanksWithDifferentParametersAreRefusedTogether) {
  dist::Communicator c;
  ag::Tensor w = ag::Tensor(Tensor::zeros(Shape{c.rank() == 0 ? 4 : 5}), true);
  EXPECT_TRUE(throws<ValueError>([&] { dist::all_reduce_gradients(c, {w}); }, {"parameters differ", "rank 0 has 4"}));
  EXPECT_TRUE(throws<ValueError>([&] { dist::all_reduce_gradients(c, {w}, 2); }, {"bucket_bytes", "at least 4"}));
  c.barrier();  // every rank got here: nobody hangs in a collective
}

namespace {
// A rank other than 0 prints only what failed, named by rank and test, so
// that a failure on any rank shows in the job's output.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestStart(const ::testing::TestInfo& test) override {
    test_ = std::string(test.test_suite_name()) + "." + test.name();
  }
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] FAILED %s at %s:%d\n%s\n", rank_, test_.c_str(),
                 result.file_name() ? result.file_name() : "?", result.line_number(), result.message());
    std::fflush(stderr);
  }

 private:
  int rank_;
  std::string test_;
};
}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {  // rank 0 prints everything, the others only their failures
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(rank));
  }
  int failed = RUN_ALL_TESTS();
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return failed;
}
