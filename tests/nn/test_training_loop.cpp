// The public layers of the training loop (nn/training_loop.h), each on its
// own: the batch sources, train_on_batch / test_on_batch, EpochLogs,
// train_epoch, test_epoch and fit_loop; and fit being exactly these.
#include <gtest/gtest.h>

#include "test_support.h"

#include <atomic>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "tensorgrad/tensorgrad.h"

using namespace tensorgrad;
using namespace tensorgrad::nn;
using test_support::throws;
using test_support::uniform;

namespace {
// 12 rows of y = x1 - 2 x2 + 0.5 with distinct random x, so a batch's values
// name its rows (rows_in).
struct Data : test_support::LinearData {
  Data() : LinearData(7) {}
};

Sequential linear_model(float lr = 0.1f) { return test_support::linear_model(11, lr); }

// Which rows of `all` a batch's x holds (rows are matched by value).
std::vector<int64_t> rows_in(const Tensor& batch_x, const Tensor& all) {
  std::vector<int64_t> out;
  const int64_t w = all.shape()[1];
  for (int64_t r = 0; r < batch_x.shape()[0]; ++r)
    for (int64_t k = 0; k < all.shape()[0]; ++k)
      if (std::equal(batch_x.data<float>() + r * w, batch_x.data<float>() + (r + 1) * w, all.data<float>() + k * w)) {
        out.push_back(k);
        break;
      }
  return out;
}

// Hooks in the order they ran, as "name:index".
struct Recorder : Callback {
  std::vector<std::string> calls;
  int stop_at_batch = -1;
  void on_train_batch_begin(int64_t b, Logs&) override {
    calls.push_back("begin:" + std::to_string(b));
    if (b == stop_at_batch) model().set_stop_training(true);
  }
  void on_train_batch_end(int64_t b, Logs& logs) override {
    calls.push_back("end:" + std::to_string(b) + " loss " + std::to_string(logs.at("loss")));
  }
};

// A source of its own: `n` batches of 4 rows from the data, in order.
class ThreeBatches : public BatchSource {
 public:
  ThreeBatches(const Data& d, int n = 3) : d_(d), n_(n) {}
  void start_epoch(int, int64_t) override { i_ = 0; }
  const Batch* next() override {
    if (i_ >= n_) return nullptr;
    b_ = Batch{{d_.x.rows(4 * i_, 4 * i_ + 4)}, {d_.y.rows(4 * i_, 4 * i_ + 4)}, {}};
    ++i_;
    return &b_;
  }
  int64_t batches_per_epoch() const override { return n_; }
  int64_t batch_size() const override { return 4; }
  const std::string& label() const override { return label_; }

 private:
  const Data& d_;
  int n_, i_ = 0;
  Batch b_;
  std::string label_ = "custom batch";
};
}  // namespace

// In order: batch_size rows at a time, the last one short, views of the rows;
// `limit` bounds the epoch; start_epoch starts over.
TEST(TensorSource, InOrderBatchesAndLimit) {
  const Data d;
  TensorSource s({d.x}, {d.y}, {}, 5);
  EXPECT_EQ(s.batches_per_epoch(), 3);
  s.start_epoch(0, 0);
  std::vector<int64_t> sizes, first_rows;
  while (const Batch* b = s.next()) {
    sizes.push_back(b->x[0].shape()[0]);
    first_rows.push_back(rows_in(b->x[0], d.x)[0]);
    EXPECT_EQ(b->y[0].to_vector(), d.y.rows(first_rows.back(), first_rows.back() + sizes.back()).to_vector());
  }
  EXPECT_EQ(sizes, (std::vector<int64_t>{5, 5, 2}));
  EXPECT_EQ(first_rows, (std::vector<int64_t>{0, 5, 10}));
  s.start_epoch(1, 2);
  int n = 0;
  while (s.next()) ++n;
  EXPECT_EQ(n, 2);
}

// Shuffled: each epoch is the permutation std::shuffle draws from the given
// stream, gathered with the weights kept to their rows.
TEST(TensorSource, ShuffledEpochsFollowTheStream) {
  const Data d;
  std::vector<float> wv(12);
  std::iota(wv.begin(), wv.end(), 1.0f);
  const Tensor w = Tensor::from_vector(wv, {12});
  std::mt19937_64 rng(42), reference(42);
  TensorSource s({d.x}, {d.y}, w, 5, &rng);
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<int64_t> want(12);
    std::iota(want.begin(), want.end(), int64_t(0));
    std::shuffle(want.begin(), want.end(), reference);
    s.start_epoch(epoch, 0);
    std::vector<int64_t> got;
    while (const Batch* b = s.next()) {
      const std::vector<int64_t> r = rows_in(b->x[0], d.x);
      for (size_t i = 0; i < r.size(); ++i) EXPECT_EQ(b->sample_weight.data<float>()[i], float(r[i] + 1));
      got.insert(got.end(), r.begin(), r.end());
    }
    EXPECT_EQ(got, want) << "epoch " << epoch;
  }
}

TEST(TensorSource, RefusesMismatchedRowsAndBadBatchSize) {
  const Data d;
  EXPECT_TRUE(throws<ShapeError>([&] { TensorSource({d.x}, {d.y.rows(0, 11)}, {}, 4); }, {"12 rows", "y 0", "11"}));
  EXPECT_TRUE(throws<ShapeError>([&] { TensorSource({d.x}, {d.y}, Tensor::zeros(Shape{3}), 4); },
                                 {"sample_weight", "3"}));
  EXPECT_TRUE(throws<ValueError>([&] { TensorSource({d.x}, {d.y}, {}, 0); }, {"batch_size", "got 0"}));
  EXPECT_TRUE(throws<ValueError>([&] { TensorSource({}, {d.y}, {}, 4); }, {"no x"}));
}

// The generator is called in place, `limit` calls at most, with and without
// prefetch; nothing after the epoch's end.
TEST(GeneratorSource, LimitAndCallsWithAndWithoutPrefetch) {
  const Data d;
  for (int prefetch : {0, 2}) {
    std::atomic<int> calls{0};
    Generator g = [&]() -> std::optional<Batch> {
      ++calls;
      return Batch{{d.x.rows(0, 4)}, {d.y.rows(0, 4)}, {}};
    };
    GeneratorSource s(g, 4, prefetch);
    s.start_epoch(0, 3);
    int n = 0;
    while (s.next()) ++n;
    EXPECT_EQ(n, 3);
    s.stop();
    EXPECT_EQ(calls, 3) << "prefetch " << prefetch;
  }
  Generator none;
  EXPECT_TRUE(throws<ValueError>([&] { GeneratorSource s(none, 4); }, {"generator is empty"}));
  Generator g = [] { return std::optional<Batch>(); };
  EXPECT_TRUE(throws<ValueError>([&] { GeneratorSource s(g, 4, -1); }, {"prefetch", "got -1"}));
}

// One SGD step of an MSE line fit, against the gradient worked out in double:
// dL/dW = 2/n sum (p - y) x, dL/db = 2/n sum (p - y).
TEST(TrainOnBatch, OneStepIsTheSgdUpdateOfTheBatch) {
  const Data d;
  Sequential m = linear_model(0.1f);
  const std::vector<Tensor> w0 = m.get_weights();
  const float* W = w0[0].data<float>();
  const double b = w0[1].data<float>()[0];
  double loss = 0, g0 = 0, g1 = 0, gb = 0;
  for (int64_t r = 0; r < 4; ++r) {
    const double x0 = d.x.data<float>()[2 * r], x1 = d.x.data<float>()[2 * r + 1];
    const double e = x0 * W[0] + x1 * W[1] + b - d.y.data<float>()[r];
    loss += e * e / 4;
    g0 += 2 * e * x0 / 4;
    g1 += 2 * e * x1 / 4;
    gb += 2 * e / 4;
  }
  const StepResult r = m.train_on_batch(Batch{{d.x.rows(0, 4)}, {d.y.rows(0, 4)}, {}});
  EXPECT_NEAR(r.loss, loss, 1e-6);
  EXPECT_EQ(r.rows, 4);
  EXPECT_TRUE(r.updated);
  const std::vector<Tensor> w1 = m.get_weights();
  EXPECT_NEAR(w1[0].data<float>()[0], W[0] - 0.1 * g0, 1e-6);
  EXPECT_NEAR(w1[0].data<float>()[1], W[1] - 0.1 * g1, 1e-6);
  EXPECT_NEAR(w1[1].data<float>()[0], b - 0.1 * gb, 1e-6);
  // test_on_batch measures the same loss on the new weights and trains nothing.
  const StepResult t = m.test_on_batch(Batch{{d.x.rows(0, 4)}, {d.y.rows(0, 4)}, {}});
  EXPECT_NEAR(t.loss, m.evaluate(d.x.rows(0, 4), d.y.rows(0, 4))["loss"], 1e-6);
  EXPECT_EQ(m.get_weights()[0].to_vector(), w1[0].to_vector());
}

TEST(TrainOnBatch, RefusesWhatDoesNotFit) {
  const Data d;
  Sequential m = linear_model();
  const Batch five{{d.x.rows(0, 5)}, {d.y.rows(0, 5)}, {}};
  EXPECT_TRUE(throws<ShapeError>([&] { m.train_on_batch(five, 4); }, {"5 rows", "more than batch_size 4"}));
  EXPECT_TRUE(throws<ShapeError>([&] { m.train_on_batch(Batch{{d.x}, {}, {}}); }, {"1 output", "0 target"}));
  EXPECT_TRUE(throws<ShapeError>([&] { m.test_on_batch(Batch{{d.x}, {d.y}, Tensor::full(Shape{4}, 1.0f)}); },
                                 {"sample_weight", "12"}));
  Sequential raw({2});
  raw.add(Dense(1));
  EXPECT_TRUE(throws<StateError>([&] { raw.train_on_batch(five); }, {"compile"}));
}

// Means weighted by rows; NaN before any batch; several outputs' keys.
TEST(EpochLogs, RowWeightedMeansAndNaNWhenEmpty) {
  Sequential m = linear_model();
  EpochLogs logs(m);
  EXPECT_TRUE(std::isnan(logs.logs().at("loss")));
  StepResult a, b;
  a.loss = 1.0f;
  a.rows = 4;
  b.loss = 4.0f;
  b.rows = 2;
  logs.add(a);
  logs.add(b);
  EXPECT_DOUBLE_EQ(logs.logs().at("loss"), (1.0 * 4 + 4.0 * 2) / 6);
  EXPECT_EQ(logs.batches(), 2);
  EXPECT_EQ(logs.rows(), 6);
}

// A source of one's own through train_epoch: the batch hooks in order with
// running means, `steps` bounding the epoch, stop_training after a hook.
TEST(TrainEpoch, RunsACustomSourceWithTheBatchHooks) {
  const Data d;
  Sequential m = linear_model();
  Sequential ref = linear_model();
  ThreeBatches source(d);
  auto rec = std::make_shared<Recorder>();
  CallbackList callbacks(m, {rec}, 0, 1, 3);
  const EpochLogs logs = train_epoch(m, source, 0, callbacks);
  EXPECT_EQ(logs.batches(), 3);
  // The same three steps by hand give the same weights and mean loss.
  double sum = 0;
  for (int i = 0; i < 3; ++i)
    sum += 4.0 * ref.train_on_batch(Batch{{d.x.rows(4 * i, 4 * i + 4)}, {d.y.rows(4 * i, 4 * i + 4)}, {}}).loss;
  EXPECT_EQ(m.get_weights()[0].to_vector(), ref.get_weights()[0].to_vector());
  EXPECT_NEAR(logs.logs().at("loss"), sum / 12, 1e-6);
  ASSERT_EQ(rec->calls.size(), 6u);
  EXPECT_EQ(rec->calls[0], "begin:0");
  EXPECT_EQ(rec->calls[5].rfind("end:2 loss ", 0), 0u);
  EXPECT_EQ(rec->calls[5], "end:2 loss " + std::to_string(sum / 12));

  Sequential bounded = linear_model();
  CallbackList quiet(bounded, {}, 0, 1, 3);
  EXPECT_EQ(train_epoch(bounded, source, 0, quiet, {.steps = 2}).batches(), 2);

  Sequential stopped = linear_model();
  auto stopper = std::make_shared<Recorder>();
  stopper->stop_at_batch = 1;
  CallbackList with_stop(stopped, {stopper}, 0, 1, 3);
  EXPECT_EQ(train_epoch(stopped, source, 0, with_stop).batches(), 1);
  Sequential one = linear_model();
  one.train_on_batch(Batch{{d.x.rows(0, 4)}, {d.y.rows(0, 4)}, {}});
  EXPECT_EQ(stopped.get_weights()[0].to_vector(), one.get_weights()[0].to_vector());
}

TEST(TrainEpoch, NamesTheBatchARefusedOneCameFrom) {
  const Data d;
  Sequential m = linear_model();
  TensorSource source({d.x}, {d.y}, {}, 4, nullptr, "my batch");
  TensorSource bad({d.x}, {Tensor::full(Shape{12, 1}, std::nanf(""))}, {}, 4, nullptr, "my batch");
  CallbackList callbacks(m, {}, 0, 1, 3);
  EXPECT_TRUE(throws<ValueError>([&] { train_epoch(m, bad, 2, callbacks); }, {"my batch 1 of epoch 3", "NaN"}));
  EXPECT_TRUE(throws<ValueError>([&] { train_epoch(m, source, 0, callbacks, {.steps = -1}); }, {"steps", "-1"}));
}

// test_epoch is evaluate over a source: the same numbers, NaN for nothing.
TEST(TestEpoch, IsEvaluateOverASource) {
  const Data d;
  Sequential m = linear_model();
  TensorSource source({d.x}, {d.y}, {}, 5);
  EXPECT_NEAR(test_epoch(m, source).at("loss"), m.evaluate(d.x, d.y, 5).at("loss"), 1e-9);
  ThreeBatches empty(d, 0);
  EXPECT_TRUE(std::isnan(test_epoch(m, empty).at("loss")));
  ThreeBatches two(d, 3);
  EXPECT_NEAR(test_epoch(m, two, 2).at("loss"), m.evaluate(d.x.rows(0, 8), d.y.rows(0, 8), 4).at("loss"), 1e-6);
}

// fit_loop over the same sources as fit is fit, bit for bit; initial_epoch
// numbers the epochs; validation enters the logs with "val_".
TEST(FitLoop, IsFitAndNumbersEpochsFromInitialEpoch) {
  const Data d;
  Sequential a = linear_model(), b = linear_model();
  FitOptions o;
  o.epochs = 4;
  o.initial_epoch = 1;
  o.batch_size = 5;
  o.verbose = 0;
  o.validation_x = {d.x.rows(8, 12)};
  o.validation_y = {d.y.rows(8, 12)};
  const History h = a.fit(d.x.rows(0, 8), d.y.rows(0, 8), o);
  EXPECT_EQ(h.epoch, (std::vector<int>{1, 2, 3}));

  TensorSource train({d.x.rows(0, 8)}, {d.y.rows(0, 8)}, {}, 5, &b.random_stream());
  TensorSource validation({d.x.rows(8, 12)}, {d.y.rows(8, 12)}, {}, 5);
  LoopOptions l;
  l.epochs = 4;
  l.initial_epoch = 1;
  l.verbose = 0;
  const History g = fit_loop(b, train, &validation, l);
  EXPECT_EQ(a.get_weights()[0].to_vector(), b.get_weights()[0].to_vector());
  EXPECT_EQ(h["loss"], g["loss"]);
  EXPECT_EQ(h["val_loss"], g["val_loss"]);
  EXPECT_NEAR(g["val_loss"].back(), b.evaluate(d.x.rows(8, 12), d.y.rows(8, 12)).at("loss"), 1e-6);

  LoopOptions bad = l;
  bad.initial_epoch = 4;
  EXPECT_TRUE(throws<ValueError>([&] { fit_loop(b, train, nullptr, bad); }, {"initial_epoch", "got 4"}));
  bad = l;
  bad.validation_steps = -1;
  EXPECT_TRUE(throws<ValueError>([&] { fit_loop(b, train, nullptr, bad); }, {"validation_steps"}));
  FitOptions bad_fit = o;
  bad_fit.initial_epoch = 4;
  EXPECT_TRUE(throws<ValueError>([&] { a.fit(d.x, d.y, bad_fit); }, {"initial_epoch", "[0, 4)"}));
}

// An epoch of a source that gives nothing ends fit_loop with the seed's
// warning, for any source.
TEST(FitLoop, AnEmptySourceEndsTrainingWithAWarning) {
  const Data d;
  Sequential m = linear_model();
  ThreeBatches empty(d, 0);
  std::vector<std::string> warnings;
  set_log_handler([&](LogLevel l, const std::string& msg) {
    if (l == LogLevel::Warning) warnings.push_back(msg);
  });
  LoopOptions l;
  l.epochs = 3;
  l.verbose = 0;
  const History h = fit_loop(m, empty, nullptr, l);
  set_log_handler(nullptr);
  EXPECT_TRUE(h.epoch.empty());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("batch source returned nothing at its first call; trained 0 of 3 epochs"),
            std::string::npos)
      << warnings[0];
}

// A loop that starts a new epoch before the last one ended gets exactly the
// new epoch's batches, none fetched ahead for the old one.
TEST(GeneratorSource, AnEpochLeftEarlyDoesNotLeakIntoTheNext) {
  const Data d;
  for (int prefetch : {0, 2}) {
    std::atomic<int> calls{0};
    Generator tagged = [&]() -> std::optional<Batch> {
      const float tag = float(++calls);
      return Batch{{Tensor::full(Shape{1, 2}, tag)}, {d.y.rows(0, 1)}, {}};
    };
    GeneratorSource s(tagged, 4, prefetch);
    s.start_epoch(0, 5);
    const float first = s.next()->x[0].data<float>()[0];
    EXPECT_EQ(first, 1.0f);
    s.start_epoch(1, 5);
    std::vector<float> tags;
    while (const Batch* b = s.next()) tags.push_back(b->x[0].data<float>()[0]);
    ASSERT_EQ(tags.size(), 5u) << "prefetch " << prefetch;
    for (size_t i = 1; i < tags.size(); ++i) EXPECT_EQ(tags[i], tags[i - 1] + 1.0f);  // consecutive fresh calls
    s.stop();
  }
}

TEST(EpochLogs, RefusesAModelNotCompiled) {
  Sequential raw({2});
  raw.add(Dense(1));
  EXPECT_TRUE(throws<StateError>([&] { EpochLogs logs(raw); }, {"not compiled", "compile()"}));
  const Data d;
  Sequential m = linear_model();
  EXPECT_TRUE(throws<ValueError>([&] { m.train_on_batch(Batch{{d.x}, {d.y}, {}}, -5); }, {"batch_size", "-5"}));
}

// Sources used out of order refuse instead of handing out wrong rows or hanging.
TEST(BatchSources, RefuseUseOutOfOrder) {
  const Data d;
  std::mt19937_64 rng(1);
  TensorSource shuffled({d.x}, {d.y}, {}, 4, &rng);
  EXPECT_TRUE(throws<StateError>([&] { shuffled.next(); }, {"start_epoch() first"}));
  EXPECT_TRUE(throws<ValueError>([&] { shuffled.start_epoch(0, -3); }, {"limit", "-3"}));
  Generator g = [&]() -> std::optional<Batch> { return Batch{{d.x.rows(0, 4)}, {d.y.rows(0, 4)}, {}}; };
  GeneratorSource s(g, 4, 2);
  EXPECT_TRUE(throws<StateError>([&] { s.next(); }, {"start_epoch() first"}));
  s.start_epoch(0, 2);
  EXPECT_NE(s.next(), nullptr);
  s.stop();
  EXPECT_EQ(s.next(), nullptr);
  EXPECT_TRUE(throws<StateError>([&] { s.start_epoch(1, 2); }, {"stopped", "make a new one"}));
}
