// ag::DataLoader (ag/data.h): every row once per epoch, batches of
// consecutive rows, shuffling reproducible from the seed and new each
// epoch, drop_last, int32 targets, and the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tensorgrad/ag/data.h"
#include "tensorgrad/core/error.h"
#include "test_support.h"

using namespace tensorgrad;
namespace ag = tensorgrad::ag;

namespace {

// x {n, 2} with row i = {i, 10 i}; y {n} int32 with y[i] = i.
ag::Tensor rows_x(int n) {
  std::vector<float> v;
  for (int i = 0; i < n; ++i) v.insert(v.end(), {float(i), float(10 * i)});
  return ag::tensor(v, Shape{n, 2});
}
ag::Tensor rows_y(int n) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(i);
  return ag::tensor(std::span<const int32_t>(v), Shape{n});
}

// The row ids of one epoch, batch by batch; checks x and y stay paired.
std::vector<std::vector<int>> epoch(ag::DataLoader& loader) {
  std::vector<std::vector<int>> out;
  for (const ag::Batch& b : loader) {
    std::vector<int> ids;
    const std::vector<float> x = b.x.to_vector(), y = b.y.to_vector();
    EXPECT_EQ(b.y.dtype(), DType::Int32);
    EXPECT_EQ(b.x.size(0), b.y.size(0));
    for (int64_t r = 0; r < b.x.size(0); ++r) {
      EXPECT_EQ(x[size_t(2 * r + 1)], 10 * x[size_t(2 * r)]);
      EXPECT_EQ(y[size_t(r)], x[size_t(2 * r)]);
      ids.push_back(int(y[size_t(r)]));
    }
    out.push_back(ids);
  }
  return out;
}

std::vector<int> flat(const std::vector<std::vector<int>>& batches) {
  std::vector<int> all;
  for (const auto& b : batches) all.insert(all.end(), b.begin(), b.end());
  return all;
}

}  // namespace

TEST(AgData, InOrderBatchesAreConsecutiveRows) {
  ag::DataLoader loader(rows_x(10), rows_y(10), {.batch_size = 4});
  EXPECT_EQ(loader.size(), 3u);
  EXPECT_EQ(loader.num_samples(), 10);
  const auto batches = epoch(loader);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0], (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(batches[1], (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(batches[2], (std::vector<int>{8, 9}));
  // Shapes keep the trailing dimensions.
  ag::Batch first = *loader.begin();
  EXPECT_EQ(first.x.shape(), (Shape{4, 2}));
  EXPECT_EQ(first.y.shape(), (Shape{4}));
  EXPECT_FALSE(first.x.requires_grad());
  // Two epochs without shuffle are the same.
  EXPECT_EQ(epoch(loader), batches);
}

TEST(AgData, DropLastDropsTheIncompleteBatch) {
  ag::DataLoader loader(rows_x(10), rows_y(10), {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(loader.size(), 2u);
  EXPECT_EQ(flat(epoch(loader)), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  ag::DataLoader exact(rows_x(8), rows_y(8), {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(exact.size(), 2u);
  ag::DataLoader shuffled(rows_x(10), rows_y(10), {.batch_size = 3, .shuffle = true, .drop_last = true, .seed = 3});
  const auto b = epoch(shuffled);
  ASSERT_EQ(b.size(), 3u);
  for (const auto& batch : b) EXPECT_EQ(batch.size(), 3u);
  ag::DataLoader big(rows_x(3), rows_y(3), {.batch_size = 5, .drop_last = true});
  EXPECT_EQ(big.size(), 0u);
  EXPECT_TRUE(big.begin() == big.end());
}

TEST(AgData, ShuffleCoversEveryRowOnceAndDiffersBetweenEpochs) {
  ag::DataLoader loader(rows_x(37), rows_y(37), {.batch_size = 5, .shuffle = true, .seed = 42});
  EXPECT_EQ(loader.size(), 8u);
  std::vector<std::vector<int>> orders;
  for (int e = 0; e < 3; ++e) {
    const auto batches = epoch(loader);
    ASSERT_EQ(batches.size(), 8u);
    EXPECT_EQ(batches.back().size(), 2u);
    std::vector<int> all = flat(batches), sorted = all;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int> want(37);
    for (int i = 0; i < 37; ++i) want[size_t(i)] = i;
    EXPECT_EQ(sorted, want) << "epoch " << e;
    orders.push_back(all);
  }
  EXPECT_NE(orders[0], orders[1]);
  EXPECT_NE(orders[1], orders[2]);
  std::vector<int> identity(37);
  for (int i = 0; i < 37; ++i) identity[size_t(i)] = i;
  EXPECT_NE(orders[0], identity);

  // The same seed replays the same epochs; another seed does not.
  ag::DataLoader again(rows_x(37), rows_y(37), {.batch_size = 5, .shuffle = true, .seed = 42});
  for (int e = 0; e < 3; ++e) EXPECT_EQ(flat(epoch(again)), orders[size_t(e)]) << "epoch " << e;
  ag::DataLoader other(rows_x(37), rows_y(37), {.batch_size = 5, .shuffle = true, .seed = 43});
  EXPECT_NE(flat(epoch(other)), orders[0]);
  // Reseeding the loader's generator restarts the sequence.
  loader.generator().manual_seed(42);
  EXPECT_EQ(flat(epoch(loader)), orders[0]);
}

TEST(AgData, ShuffleLeavesTheDefaultGeneratorAlone) {
  ag::manual_seed(7);
  const float want = ag::rand(Shape{1}).item();
  ag::manual_seed(7);
  ag::DataLoader loader(rows_x(20), rows_y(20), {.batch_size = 4, .shuffle = true, .seed = 1});
  epoch(loader);
  EXPECT_EQ(ag::rand(Shape{1}).item(), want);
}

TEST(AgData, AnEpochInProgressKeepsItsOrder) {
  ag::DataLoader loader(rows_x(12), rows_y(12), {.batch_size = 4, .shuffle = true, .seed = 5});
  auto it = loader.begin();
  const ag::Batch a = *it;
  loader.begin();  // a second epoch starts: `it` keeps its permutation
  const ag::Batch again = *it;
  EXPECT_EQ(a.y.to_vector(), again.y.to_vector());
}

TEST(AgData, InputsOnlyAndIntegerInputs) {
  ag::DataLoader loader(rows_x(5), {.batch_size = 2});
  size_t n = 0;
  for (const ag::Batch& b : loader) {
    EXPECT_TRUE(b.x.defined());
    EXPECT_FALSE(b.y.defined());
    ++n;
  }
  EXPECT_EQ(n, 3u);
  // int32 inputs (token ids) with float targets, shuffled: rows stay paired.
  std::vector<int32_t> ids;
  for (int i = 0; i < 6; ++i) ids.insert(ids.end(), {i, i + 100, i + 200});
  ag::Tensor x = ag::tensor(std::span<const int32_t>(ids), Shape{6, 3});
  ag::Tensor y = ag::arange(6.0);
  ag::DataLoader tokens(x, y, {.batch_size = 4, .shuffle = true, .seed = 9});
  size_t rows = 0;
  for (const ag::Batch& b : tokens) {
    EXPECT_EQ(b.x.dtype(), DType::Int32);
    EXPECT_EQ(b.y.dtype(), DType::Float32);
    const std::vector<float> xv = b.x.to_vector(), yv = b.y.to_vector();
    for (int64_t r = 0; r < b.x.size(0); ++r) {
      EXPECT_EQ(xv[size_t(3 * r)], yv[size_t(r)]);
      EXPECT_EQ(xv[size_t(3 * r + 2)], yv[size_t(r)] + 200);
    }
    rows += size_t(b.x.size(0));
  }
  EXPECT_EQ(rows, 6u);
}

TEST(AgData, Errors) {
  EXPECT_TRUE(test_support::throws<ValueError>([] { ag::DataLoader l(rows_x(4), rows_y(4), {.batch_size = 0}); },
                                               {"batch_size", ">= 1", "0"}));
  EXPECT_TRUE(test_support::throws<ShapeError>([] { ag::DataLoader l(rows_x(4), rows_y(5), {.batch_size = 2}); },
                                               {"x", "y", "{4, 2}", "{5}", "rows"}));
  EXPECT_TRUE(test_support::throws<ShapeError>([] { ag::DataLoader l{ag::ones(Shape{})}; }, {"x", "row"}));
  EXPECT_TRUE(test_support::throws<ValueError>([] { ag::DataLoader l{ag::Tensor()}; }, {"undefined"}));
  ag::DataLoader loader(rows_x(4), rows_y(4), {.batch_size = 2});
  EXPECT_TRUE(test_support::throws<IndexError>([&] { *loader.end(); }, {"past the end"}));
}
