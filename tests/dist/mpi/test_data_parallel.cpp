// Data-parallel fit and Trainer (issue 14), run by CTest under mpiexec at 2
// and 3 ranks with the communicator tests (one program; main() is in
// test_communicator.cpp). Each test compares the distributed run with a
// one-process run of the same model on the global batches, made on every
// rank from the same seed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

#include "test_support.h"
#include "tensorgrad/core/random.h"
#include "tensorgrad/dist/communicator.h"
#include "tensorgrad/nn/callbacks.h"
#include "tensorgrad/nn/data_parallel.h"
#include "tensorgrad/nn/sequential.h"
#include "tensorgrad/nn/trainer.h"
#include "tensorgrad/tensorgrad.h"

using namespace tensorgrad;
using test_support::throws;

namespace {
// A classifier without batch norm or dropout (the rule's model): 4 -> 16 -> 3.
nn::Sequential classifier(uint64_t seed, int64_t hidden = 16) {
  manual_seed(seed);
  nn::Sequential m(Shape{4});
  m.add(nn::Dense(hidden, "relu"));
  m.add(nn::Dense(3, "softmax"));
  return m;
}

// Rows that depend only on (row, seed): the same on every rank.
std::pair<Tensor, Tensor> make_rows(int64_t rows, uint64_t seed) {
  std::vector<float> x(size_t(rows) * 4), y(static_cast<size_t>(rows));
  std::mt19937_64 g(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (int64_t r = 0; r < rows; ++r) {
    float s = 0;
    for (int j = 0; j < 4; ++j) s += (x[size_t(r * 4 + j)] = n(g)) * float(j + 1);
    y[size_t(r)] = s > 1.0f ? 2.0f : s > -1.0f ? 1.0f : 0.0f;
  }
  return {Tensor::from_vector(x, Shape{rows, 4}), Tensor::from_vector(y, Shape{rows})};
}

// Largest |a - b| / |b| over tensors, each relative to its tensor's norm.
double relative_difference(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double worst = 0.0;
  for (size_t t = 0; t < a.size(); ++t) {
    const std::vector<float> u = a[t].to_vector(), v = b[t].to_vector();
    double diff = 0.0, norm = 0.0;
    for (size_t i = 0; i < u.size(); ++i) diff += double(u[i] - v[i]) * (u[i] - v[i]), norm += double(v[i]) * v[i];
    worst = std::max(worst, std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30));
  }
  return worst;
}

// FNV-1a over every weight's bytes.
uint64_t weight_hash(const std::vector<Tensor>& weights) {
  uint64_t h = 1469598103934665603ull;
  for (const Tensor& t : weights) {
    const auto* p = static_cast<const unsigned char*>(t.raw());
    for (size_t i = 0; i < t.nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
  }
  return h;
}

// How many ranks hold weights whose bits differ from rank 0's.
int ranks_differing(dist::Communicator& c, const std::vector<Tensor>& weights) {
  uint64_t root = weight_hash(weights);
  c.broadcast_bytes(std::as_writable_bytes(std::span<uint64_t>(&root, 1)), 0);
  double differs = root == weight_hash(weights) ? 0.0 : 1.0;
  c.reduce_broadcast(std::span<double>(&differs, 1));
  return int(differs);
}

std::shared_ptr<dist::Communicator> communicator() { return std::make_shared<dist::Communicator>(); }
}  // namespace

// A ring all-reduce (spans of 64 elements a rank or more) of an odd length,
// values whose sums round differently in different orders.
TEST(ReduceBroadcast, TheRingSumsEveryElementOnceAndCopiesIt) {
  dist::Communicator c;
  const int R = c.size(), r = c.rank();
  std::vector<float> x(size_t(64 * R + 37));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(r + 1) * 0.1f + float(i) * 1e-3f + (r % 2 ? 1e4f : 0.0f);
  c.reduce_broadcast(x);
  for (size_t i = 0; i < x.size(); ++i) {
    double want = 0.0;
    for (int k = 0; k < R; ++k) want += double(float(k + 1) * 0.1f + float(i) * 1e-3f + (k % 2 ? 1e4f : 0.0f));
    ASSERT_NEAR(x[i], want, 1e-6 * std::abs(want) + 1e-3) << i;
  }
  std::vector<float> root = x;
  c.broadcast_bytes(std::as_writable_bytes(std::span<float>(root)), 0);
  EXPECT_EQ(std::memcmp(root.data(), x.data(), x.size() * sizeof(float)), 0);  // the same bits on every rank
}

TEST(ReduceBroadcast, EveryRankGetsRank0sSumBitForBit) {
  dist::Communicator c;
  std::vector<float> x{float(c.rank()) * 0.1f + 1e-3f, 1.0f};
  std::vector<double> d{double(c.rank()), 0.5};
  const int64_t before = c.collective_calls();
  c.reduce_broadcast(x);
  c.reduce_broadcast(d);
  EXPECT_EQ(c.collective_calls() - before, 2);  // one per reduce_broadcast
  EXPECT_EQ(x[1], float(c.size()));
  EXPECT_EQ(d[0], double(c.size() * (c.size() - 1) / 2));
  float root = x[0];
  c.broadcast_bytes(std::as_writable_bytes(std::span<float>(&root, 1)), 0);
  EXPECT_EQ(std::memcmp(&root, &x[0], sizeof root), 0);
}

// The rule: R ranks each taking B rows train as one process on R·B rows.
TEST(DataParallel, TrainerStepsEqualOneProcessOnTheGlobalBatch) {
  auto comm = communicator();
  const int R = comm->size(), r = comm->rank();
  const int64_t B = 8;
  nn::Sequential model = classifier(7, 64);  // 515 gradient elements: the ring path at 2 to 7 ranks
  model.compile(OptimizerSpec::adam(0.01f), "sparse_categorical_crossentropy");
  nn::Trainer one(model, {.batch_size = B * R});
  nn::Trainer mine(model, {.batch_size = B, .communicator = comm});
  for (int step = 0; step < 20; ++step) {
    const auto [x, y] = make_rows(B * R, 100 + uint64_t(step));
    one.step(x, y);
    mine.step(x.rows(B * r, B * (r + 1)), y.rows(B * r, B * (r + 1)));
    ASSERT_EQ(ranks_differing(*comm, mine.model().get_weights()), 0) << "step " << step;
  }
  EXPECT_LT(relative_difference(mine.model().get_weights(), one.model().get_weights()), 1e-5);
}

TEST(DataParallel, OneCollectivePerGradientBucket) {
  auto comm = communicator();
  nn::Sequential model = classifier(3);  // 4*16 + 16 + 16*3 + 3 = 131 gradient elements
  model.compile(OptimizerSpec::sgd(0.1f), "sparse_categorical_crossentropy");
  for (size_t bucket : {size_t(64), size_t(100), size_t(524), size_t(4) << 20}) {
    nn::Trainer t(model, {.batch_size = 4, .gradient_bucket_bytes = bucket, .communicator = comm});
    size_t buckets_seen = 0;
    t.add_gradient_bucket_hook([&](GradientBuffer& b) { buckets_seen = b.n_buckets(); });
    const auto [x, y] = make_rows(4, 9);
    t.step(x, y);  // the first step builds the graph; count the second
    const int64_t before = comm->collective_calls();
    t.step(x, y);
    const int64_t expected = int64_t((131 * 4 + bucket - 1) / bucket);
    EXPECT_EQ(comm->collective_calls() - before, expected) << "bucket " << bucket;
    EXPECT_EQ(int64_t(buckets_seen), expected);
  }
}

// fit on in-memory data: the same orders on every rank, rank slices, a
// short last global batch (one row: some ranks have none and join), and
// History's losses over all ranks.
TEST(DataParallel, FitEqualsOneProcessFitWithAShortLastBatch) {
  auto comm = communicator();
  const int64_t bs = 12, rows = 3 * bs + 1;
  const auto [x, y] = make_rows(rows, 5);
  const auto [xv, yv] = make_rows(10, 6);
  // Built and compiled alike from one seed: the same weights and random stream.
  auto build = [] {
    nn::Sequential m = classifier(11, 64);
    m.compile(OptimizerSpec::adam(0.01f), "sparse_categorical_crossentropy", {"accuracy"});
    return m;
  };
  nn::Sequential dp = build(), one = build();
  nn::FitOptions o{.epochs = 5, .batch_size = bs, .verbose = 0};
  o.validation_data = std::make_pair(xv, yv);
  const nn::History h1 = one.fit(x, y, o);
  o.communicator = comm;
  const nn::History hd = dp.fit(x, y, o);
  EXPECT_LT(relative_difference(dp.get_weights(), one.get_weights()), 1e-5);
  EXPECT_EQ(ranks_differing(*comm, dp.get_weights()), 0);
  ASSERT_EQ(hd.history.at("loss").size(), 5u);
  for (const char* key : {"loss", "accuracy", "val_loss", "val_accuracy"})
    for (size_t e = 0; e < 5; ++e)
      EXPECT_NEAR(hd.history.at(key)[e], h1.history.at(key)[e], 1e-5 * std::abs(h1.history.at(key)[e]) + 1e-7)
          << key << " epoch " << e;
  EXPECT_EQ(dp.communicator(), nullptr);  // set for the fit only
}

// Accumulation and clipping: the reduction comes before clipping, so a
// global norm clip sees the global gradient, as the one process's does.
TEST(DataParallel, FitWithAccumulationClipsTheReducedGradient) {
  auto comm = communicator();
  const int64_t bs = 6;
  const auto [x, y] = make_rows(4 * bs * 2 + 5, 8);
  auto build = [] {
    nn::Sequential m = classifier(12);
    m.compile(OptimizerSpec::sgd({.learning_rate = 0.5f, .momentum = 0.9f, .global_clipnorm = 0.05f}),
              "sparse_categorical_crossentropy");
    return m;
  };
  nn::Sequential dp = build(), one = build();
  nn::FitOptions o{.epochs = 3, .batch_size = bs, .nbatch_logical = 2 * bs, .verbose = 0};
  one.fit(x, y, o);
  o.communicator = comm;
  dp.fit(x, y, o);
  EXPECT_LT(relative_difference(dp.get_weights(), one.get_weights()), 1e-5);
  EXPECT_EQ(ranks_differing(*comm, dp.get_weights()), 0);
}

TEST(DataParallel, RanksWhoseModelsDifferAreRefusedTogether) {
  auto comm = communicator();
  nn::Sequential m = classifier(1, comm->rank() == 0 ? 16 : 17);
  m.compile(OptimizerSpec::adam(), "sparse_categorical_crossentropy");
  // Every rank refuses; the others name their first difference (the first
  // Dense layer's units, 17 against rank 0's 16).
  const std::string mine = comm->rank() == 0 ? "rank 0" : "units=17";
  EXPECT_TRUE(throws<ValueError>([&] { nn::Trainer t(m, {.batch_size = 4, .communicator = comm}); },
                                 {"models differ", "ranks differ from rank 0", mine}));
  const auto [x, y] = make_rows(8, 1);
  EXPECT_TRUE(throws<ValueError>([&] { m.fit(x, y, {.batch_size = 4, .verbose = 0, .communicator = comm}); },
                                 {"models differ", "ranks differ from rank 0", mine}));
  comm->barrier();  // every rank got here: nobody hangs
}

TEST(DataParallel, RanksWhoseFitsDifferAreRefusedTogether) {
  auto comm = communicator();
  nn::Sequential m = classifier(1);
  m.compile(OptimizerSpec::adam(), "sparse_categorical_crossentropy");
  // Odd ranks differ from rank 0 and name the difference; the others point to them.
  const bool odd = comm->rank() % 2 == 1;
  const std::string count = "1 of " + std::to_string(comm->size()) + " ranks differ";
  const auto [x, y] = make_rows(odd ? 40 : 24, 1);
  EXPECT_TRUE(throws<ValueError>([&] { m.fit(x, y, {.batch_size = 8, .verbose = 0, .communicator = comm}); },
                                 {"fits differ", count, odd ? "training rows" : "other ranks' messages",
                                  odd ? "'training rows: 40' here, 'training rows: 24' on rank 0" : "same data"}));
  const auto [x2, y2] = make_rows(24, 1);
  EXPECT_TRUE(throws<ValueError>(
      [&] { m.fit(x2, y2, {.epochs = odd ? 3 : 2, .batch_size = 8, .verbose = 0, .communicator = comm}); },
      {"fits differ", odd ? "'epochs: 3' here, 'epochs: 2' on rank 0" : "other ranks' messages"}));
  comm->barrier();
}

// What a rank could differ in without a different weight: the optimizer
// (its slots come at the first step), the bucket size, the period.
TEST(DataParallel, RanksWhoseSettingsDifferAreRefusedTogether) {
  auto comm = communicator();
  const bool odd = comm->rank() % 2 == 1;
  nn::Sequential m = classifier(1);
  m.compile(odd ? OptimizerSpec::sgd(0.01f) : OptimizerSpec::adam(0.01f), "sparse_categorical_crossentropy");
  EXPECT_TRUE(throws<ValueError>([&] { nn::Trainer t(m, {.batch_size = 4, .communicator = comm}); },
                                 {"models differ", odd ? "'optimizer: SGD" : "other ranks' messages"}));
  m.compile(OptimizerSpec::adam(0.01f), "sparse_categorical_crossentropy");
  EXPECT_TRUE(throws<ValueError>(
      [&] { nn::Trainer t(m, {.batch_size = 4, .gradient_bucket_bytes = odd ? 64 : 128, .communicator = comm}); },
      {"models differ", odd ? "'gradient bucket bytes: 64' here" : "other ranks' messages"}));
  EXPECT_TRUE(throws<ValueError>(
      [&] { nn::Trainer t(m, {.batch_size = 4, .nbatch_logical = odd ? 8 : 4, .communicator = comm}); },
      {"trainers differ", odd ? "accumulation period (nbatch_logical / batch_size): 2' here" : "other ranks'"}));
  const auto [x, y] = make_rows(24, 1);
  EXPECT_TRUE(throws<ValueError>(
      [&] { m.fit(x, y, {.batch_size = 4, .nbatch_logical = 6, .verbose = 0, .communicator = comm}); },
      {"nbatch_logical must be a positive multiple of batch_size 4", "global batch"}));
  comm->barrier();
}

TEST(DataParallel, StartsFromRank0sWeightsAndStream) {
  auto comm = communicator();
  nn::Sequential m = classifier(1000 + uint64_t(comm->rank()));  // different weights on every rank
  m.compile(OptimizerSpec::adam(), "sparse_categorical_crossentropy");
  m.random_stream().discard(uint64_t(comm->rank()));
  nn::broadcast_training_state(m, *comm);
  EXPECT_EQ(ranks_differing(*comm, m.get_weights()), 0);
  double draw = double(m.random_stream()() >> 11);
  double root = draw;
  comm->broadcast_bytes(std::as_writable_bytes(std::span<double>(&root, 1)), 0);
  EXPECT_EQ(draw, root);
}

// Generators: each rank its own, of different lengths; a rank whose
// generator ended joins the others' updates until all have ended.
TEST(DataParallel, GeneratorsOfDifferentLengthsJoinUntilAllEnd) {
  auto comm = communicator();
  const int R = comm->size(), r = comm->rank();
  const int64_t B = 5;
  auto batches_of = [&](int rank) { return 2 + rank; };  // rank k gives 2 + k batches an epoch
  auto batch = [&](int rank, int k) {
    const auto [x, y] = make_rows(B, 1000 + uint64_t(rank) * 100 + uint64_t(k));
    return nn::Batch{{x}, {y}, {}};
  };
  nn::Sequential dp = classifier(21), one = classifier(21);
  for (nn::Sequential* m : {&dp, &one}) m->compile(OptimizerSpec::sgd(0.2f), "sparse_categorical_crossentropy");
  int k = 0;
  nn::Generator gen = [&]() -> std::optional<nn::Batch> {
    if (k == batches_of(r)) {
      k = 0;
      return std::nullopt;
    }
    return batch(r, k++);
  };
  const nn::History h = dp.fit(gen, {.epochs = 2, .batch_size = B, .prefetch = 0, .verbose = 0, .communicator = comm});
  // One process: step k trains on the rows of every rank that has a batch k.
  for (int epoch = 0; epoch < 2; ++epoch)
    for (int step = 0; step < batches_of(R - 1); ++step) {
      std::vector<Tensor> xs, ys;
      for (int rank = 0; rank < R; ++rank)
        if (step < batches_of(rank)) {
          const nn::Batch b = batch(rank, step);
          xs.push_back(b.x[0]);
          ys.push_back(b.y[0]);
        }
      const int64_t rows = B * int64_t(xs.size());
      Tensor x = Tensor::empty(Shape{rows, 4}), y = Tensor::empty(Shape{rows});
      for (size_t i = 0; i < xs.size(); ++i) {
        x.rows(B * int64_t(i), B * int64_t(i + 1)).copy_from(xs[i]);
        y.rows(B * int64_t(i), B * int64_t(i + 1)).copy_from(ys[i]);
      }
      one.train_on_batch(nn::Batch{{x}, {y}, {}}, rows);
    }
  EXPECT_EQ(h.epoch.size(), 2u);
  EXPECT_LT(relative_difference(dp.get_weights(), one.get_weights()), 1e-5);
  EXPECT_EQ(ranks_differing(*comm, dp.get_weights()), 0);
}

TEST(DataParallel, OnlyRank0WritesFiles) {
  auto comm = communicator();
  // A folder of this job's (rank 0's process id): the 2- and 3-rank jobs run at once under ctest -j.
  int64_t job = int64_t(::getpid());
  comm->broadcast_bytes(std::as_writable_bytes(std::span<int64_t>(&job, 1)), 0);
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("tensorgrad_dp_files_" + std::to_string(job));
  const std::filesystem::path csv = dir / ("log_rank" + std::to_string(comm->rank()) + ".csv");
  if (comm->rank() == 0) std::filesystem::create_directories(dir);
  comm->barrier();
  std::filesystem::remove(csv);
  nn::Sequential m = classifier(2);
  m.compile(OptimizerSpec::adam(), "sparse_categorical_crossentropy");
  const auto [x, y] = make_rows(24, 3);
  nn::FitOptions o{.epochs = 2, .batch_size = 8, .verbose = 0, .communicator = comm};
  o.callbacks = {std::make_shared<nn::CSVLogger>(csv.string())};
  m.fit(x, y, o);
  EXPECT_EQ(std::filesystem::exists(csv), comm->rank() == 0);
  comm->barrier();
  if (comm->rank() == 0) std::filesystem::remove_all(dir);
}

TEST(DataParallel, JoinStepWithoutACommunicatorSaysWhatItIsFor) {
  nn::Sequential m = classifier(2);
  m.compile(OptimizerSpec::adam(), "sparse_categorical_crossentropy");
  nn::Trainer t(m, {.batch_size = 4});
  EXPECT_TRUE(throws<StateError>([&] { t.join_step(); }, {"no communicator", "data-parallel"}));
  const auto [x, y] = make_rows(4, 3);
  auto comm = communicator();
  EXPECT_TRUE(throws<ValueError>([&] { m.fit(x, y, {.batch_size = comm->size() - 1, .verbose = 0, .communicator = comm}); },
                                 {"batch_size", "ranks"}));
}

namespace {
// Vulkan's first device, or the reason there is none (every rank sees the
// same machine, so all ranks skip alike).
bool vulkan_or_reason(std::string& reason) {
  try {
    (void)backend(Device("vulkan"));
    return true;
  } catch (const StateError& e) {
    reason = e.what();
    return false;
  }
}

std::vector<Tensor> on_host(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(t.to(Device::CPU));
  return out;
}
}  // namespace

// A model on a Vulkan device: its gradients go to the host for the
// reduction and back; the ranks stay bit-identical and match one process
// on the global batch (the same device), as on the CPU.
TEST(DataParallel, TrainerStepsOnAVulkanDeviceEqualOneProcess) {
  std::string why;
  if (!vulkan_or_reason(why)) GTEST_SKIP() << "no Vulkan device: " << why;
  auto comm = communicator();
  const int R = comm->size(), r = comm->rank();
  const int64_t B = 8;
  nn::Sequential model = classifier(7, 64);
  model.compile(OptimizerSpec::adam(0.01f), "sparse_categorical_crossentropy", {}, Device("vulkan"));
  nn::Trainer one(model, {.batch_size = B * R});
  nn::Trainer mine(model, {.batch_size = B, .communicator = comm});
  for (int step = 0; step < 10; ++step) {
    const auto [x, y] = make_rows(B * R, 300 + uint64_t(step));
    one.step(x, y);
    mine.step(x.rows(B * r, B * (r + 1)), y.rows(B * r, B * (r + 1)));
    ASSERT_EQ(ranks_differing(*comm, on_host(mine.model().get_weights())), 0) << "step " << step;
  }
  EXPECT_LT(relative_difference(on_host(mine.model().get_weights()), on_host(one.model().get_weights())), 1e-5);
}

// The eager path: parameters on a Vulkan device, their mean gradient over
// the ranks back on the device, the same bits on every rank.
TEST(DataParallel, AllReduceGradientsOfVulkanParameters) {
  std::string why;
  if (!vulkan_or_reason(why)) GTEST_SKIP() << "no Vulkan device: " << why;
  dist::Communicator c;
  const int r = c.rank(), n = c.size();
  const Device vk("vulkan");
  ag::Tensor w = ag::full({3, 5}, 0.5f, {.requires_grad = true, .device = vk});
  ag::Tensor unused = ag::zeros({2}, {.requires_grad = true, .device = vk});
  std::vector<float> xv(15);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = float(r + 1) * 0.1f * float(i + 1);
  const ag::Tensor x = ag::tensor(std::span<const float>(xv), {3, 5}).to(vk);
  ag::sum(ag::mul(w, x)).backward();
  dist::all_reduce_gradients(c, {w, unused}, 16);
  EXPECT_EQ(w.grad().device(), vk);
  const std::vector<float> g = w.grad().to_vector();
  for (size_t i = 0; i < g.size(); ++i) {
    float sum = 0.0f;
    for (int k = 0; k < n; ++k) sum += float(k + 1) * 0.1f * float(i + 1);
    EXPECT_NEAR(g[i], sum / float(n), 1e-5f * std::abs(sum)) << i;
  }
  ASSERT_TRUE(unused.grad().defined());
  EXPECT_EQ(unused.grad().device(), vk);
  for (float v : unused.grad().to_vector()) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(ranks_differing(c, {w.grad().data().to(Device::CPU)}), 0);
  // Parameters on two devices: refused on every rank before any message.
  const int64_t sent = c.collective_calls();
  ag::Tensor on_cpu = ag::zeros({2}, {.requires_grad = true});
  try {
    dist::all_reduce_gradients(c, {w, on_cpu});
    ADD_FAILURE() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("parameter 0 is on vulkan:0 and parameter 1 on cpu"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(c.collective_calls(), sent);
}
