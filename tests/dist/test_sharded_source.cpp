// Data-parallel training's pieces that need no MPI: dist::Shard's rows, the
// ShardedSource over a source of global batches, and the training loop run
// through a LoopGroup of one member (the loop only asks the group; a group
// that decides nothing leaves training as it was, bit for bit).
#include <gtest/gtest.h>

#include "test_support.h"

#include <random>
#include <string>
#include <vector>

#include "tensorgrad/dist/sharding.h"
#include "tensorgrad/nn/data_parallel.h"
#include "tensorgrad/tensorgrad.h"

using namespace tensorgrad;
using namespace tensorgrad::nn;
using test_support::throws;

namespace {
// Row r of x holds r: a batch's values name its rows.
Tensor numbered(int64_t rows) {
  std::vector<float> v;
  for (int64_t r = 0; r < rows; ++r) v.push_back(float(r));
  return Tensor::from_vector(v, Shape{rows, 1});
}

std::vector<float> rows_of(const Batch& b) { return b.x.empty() ? std::vector<float>{} : b.x[0].to_vector(); }
}  // namespace

TEST(Shard, SplitsRowsIntoSharesThatDifferByAtMostOne) {
  for (int ranks = 1; ranks <= 4; ++ranks)
    for (int64_t rows = 0; rows <= 9; ++rows) {
      int64_t next = 0;
      for (int r = 0; r < ranks; ++r) {
        const dist::Shard s{r, ranks};
        EXPECT_EQ(s.begin(rows), next);
        EXPECT_LE(s.size(rows), rows / ranks + 1);
        EXPECT_GE(s.size(rows), rows / ranks);
        next += s.size(rows);
      }
      EXPECT_EQ(next, rows);
    }
  EXPECT_TRUE(throws<ValueError>([] { dist::Shard{3, 3}.check(); }, {"0 <= rank < ranks", "rank 3 of 3"}));
  EXPECT_TRUE(throws<ValueError>([] { dist::Shard{0, 0}.check(); }, {"rank 0 of 0"}));
}

// Every rank's shares, put together, are the global batches, shuffled or not.
TEST(ShardedSource, TheRanksSharesMakeUpEveryGlobalBatch) {
  const Tensor x = numbered(10), y = numbered(10);
  for (bool shuffle : {false, true}) {
    std::mt19937_64 global_rng(5);
    TensorSource global({x}, {y}, {}, 4, shuffle ? &global_rng : nullptr);
    std::vector<std::vector<float>> want;
    global.start_epoch(0, 0);
    while (const Batch* b = global.next()) want.push_back(rows_of(*b));
    ASSERT_EQ(want.size(), 3u);  // 4, 4 and 2 rows
    std::vector<std::vector<float>> got(want.size());
    for (int r = 0; r < 3; ++r) {
      std::mt19937_64 rng(5);  // every rank's stream in the same state
      TensorSource mine_global({x}, {y}, {}, 4, shuffle ? &rng : nullptr);
      ShardedSource mine(mine_global, {r, 3});
      EXPECT_EQ(mine.batch_size(), (dist::Shard{r, 3}.size(4)));
      EXPECT_EQ(mine.batches_per_epoch(), 3);
      mine.start_epoch(0, 0);
      for (size_t k = 0; k < want.size(); ++k) {
        const Batch* b = mine.next();
        ASSERT_NE(b, nullptr);
        if (k == 2 && r == 0) EXPECT_TRUE(b->x.empty() && b->y.empty());  // no row of the short batch: no tensors
        const std::vector<float> part = rows_of(*b);
        got[k].insert(got[k].end(), part.begin(), part.end());
        if (!b->y.empty()) EXPECT_EQ(b->y[0].to_vector(), part);
      }
      EXPECT_EQ(mine.next(), nullptr);
    }
    EXPECT_EQ(got, want) << (shuffle ? "shuffled" : "in order");
  }
  TensorSource global({x}, {y}, {}, 4);
  EXPECT_TRUE(throws<ValueError>([&] { ShardedSource(global, {2, 2}); }, {"rank 2 of 2"}));
}

namespace {
// A group of one member that counts what the loop asks of it.
struct CountingGroup final : LoopGroup {
  int runs = 0, starts = 0, agreements = 0, sums = 0, finishes = 0;
  History run(Model&, const BatchSource&, const BatchSource*, const LoopOptions&,
              const std::function<History()>& loop) override {
    ++runs;
    return loop();
  }
  void start(Model&, int&) override { ++starts; }
  void agree(bool&, bool&) override { ++agreements; }
  void add_up(std::span<double>) override { ++sums; }
  void finish() override { ++finishes; }
  int member() const override { return 0; }
  int members() const override { return 1; }
};

Sequential small_model() {
  manual_seed(4);
  Sequential m({1});
  m.add(Dense(1));
  m.compile(OptimizerSpec::sgd(0.1f), "mse");
  return m;
}
}  // namespace

// The loop asks the group at fixed points and decides nothing itself: a
// group of one changes no bit of training.
TEST(LoopGroup, AGroupOfOneTrainsAsNoGroup) {
  const Tensor x = numbered(10), y = numbered(10);
  LoopOptions o;
  o.epochs = 2;
  o.verbose = 0;
  Sequential alone = small_model(), grouped = small_model();
  TensorSource a({x}, {y}, {}, 4, &alone.random_stream()), b({x}, {y}, {}, 4, &grouped.random_stream());
  TensorSource va({x}, {y}, {}, 4), vb({x}, {y}, {}, 4);
  const History h1 = fit_loop(alone, a, &va, o);
  auto group = std::make_shared<CountingGroup>();
  o.group = group;
  const History h2 = fit_loop(grouped, b, &vb, o);
  EXPECT_EQ(h1["loss"], h2["loss"]);
  EXPECT_EQ(h1["val_loss"], h2["val_loss"]);
  EXPECT_EQ(alone.get_weights()[0].to_vector(), grouped.get_weights()[0].to_vector());
  EXPECT_EQ(group->runs, 1);
  EXPECT_EQ(group->starts, 1);
  EXPECT_EQ(group->finishes, 1);
  // Per epoch: one agreement before it, one per batch and one at its end
  // (no batch left); sums: per batch, the epoch's and the validation's.
  EXPECT_EQ(group->agreements, 2 * (1 + 3 + 1));
  EXPECT_EQ(group->sums, 2 * (3 + 1 + 1));
}
