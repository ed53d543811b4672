// Training from a generator, with the seed's contract (ggmlR's
// R/fit_generator.R and its documentation): one test per rule, named after
// what the rule requires (its number in the comment above it), each with
// prefetch off and on where the rule concerns the calls.
#include <gtest/gtest.h>

#include "test_support.h"

#include <atomic>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "tensorgrad/tensorgrad.h"

using namespace tensorgrad;
using namespace tensorgrad::nn;
using test_support::throws;
using test_support::uniform;

namespace {
// 12 rows of y = x1 - 2 x2 + 0.5.
struct Data : test_support::LinearData {
  Data() : LinearData(3) {}
};

Sequential linear_model(float lr = 0.1f) { return test_support::linear_model(5, lr); }

// Batches of `rows` over the data in order, then nothing (and a restart):
// the seed's batch_gen. Counts its calls.
struct Finite {
  const Data& d;
  int64_t rows;
  int64_t i = 0;
  std::atomic<int> calls{0};
  Generator generator() {
    return [this]() -> std::optional<Batch> {
      ++calls;
      if (i * rows >= 12) {
        i = 0;
        return std::nullopt;
      }
      const int64_t b = i * rows, e = std::min<int64_t>(12, b + rows);
      ++i;
      return Batch{{d.x.rows(b, e)}, {d.y.rows(b, e)}, {}};
    };
  }
};

GeneratorFitOptions quiet(int epochs, int prefetch) {
  GeneratorFitOptions o;
  o.epochs = epochs;
  o.prefetch = prefetch;
  o.verbose = 0;
  o.batch_size = 4;
  return o;
}

std::vector<std::string> capture_warnings(const std::function<void()>& f) {
  std::vector<std::string> warnings;
  set_log_handler([&](LogLevel l, const std::string& m) {
    if (l == LogLevel::Warning) warnings.push_back(m);
  });
  f();
  set_log_handler(nullptr);
  return warnings;
}
}  // namespace

// Rules 1 and 2: nothing ends the epoch; the finite generator restarts and is
// asked again next epoch. Training equals the in-memory fit on the same
// batches in the same order, bit for bit.
TEST(Generator, NothingEndsTheEpochAndTheNextEpochAsksAgain) {
  const Data d;
  for (int prefetch : {0, 2}) {
    SCOPED_TRACE("prefetch " + std::to_string(prefetch));
    Sequential m = linear_model();
    Finite f{d, 4};
    const History h = m.fit(f.generator(), quiet(3, prefetch));
    EXPECT_EQ(f.calls, 3 * 4);  // three batches and a nothing, per epoch
    EXPECT_EQ(h.epoch, (std::vector<int>{0, 1, 2}));
    Sequential ref = linear_model();
    FitOptions o;
    o.epochs = 3;
    o.batch_size = 4;
    o.shuffle = false;
    o.verbose = 0;
    const History hr = ref.fit(d.x, d.y, o);
    EXPECT_EQ(m.get_weights()[0].to_vector(), ref.get_weights()[0].to_vector());
    EXPECT_EQ(h["loss"], hr["loss"]);
  }
}

TEST(Generator, StepsPerEpochBoundsAnInfiniteGenerator) {
  const Data d;
  for (int prefetch : {0, 1, 3}) {
    SCOPED_TRACE("prefetch " + std::to_string(prefetch));
    Sequential m = linear_model();
    std::atomic<int> calls{0};
    Generator endless = [&]() -> std::optional<Batch> {
      const int64_t k = calls++ % 3;
      return Batch{{d.x.rows(4 * k, 4 * k + 4)}, {d.y.rows(4 * k, 4 * k + 4)}, {}};
    };
    GeneratorFitOptions o = quiet(2, prefetch);
    o.steps_per_epoch = 5;
    m.fit(endless, o);
    EXPECT_EQ(calls, 10);
  }
}

TEST(Generator, AShortEpochWarnsDOfS) {
  const Data d;
  Sequential m = linear_model();
  Finite f{d, 6};  // two batches, then nothing
  GeneratorFitOptions o = quiet(1, 2);
  o.batch_size = 6;
  o.steps_per_epoch = 5;
  History h;
  const std::vector<std::string> w = capture_warnings([&] { h = m.fit(f.generator(), o); });
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("2 of 5"), std::string::npos) << w[0];
  EXPECT_EQ(h.epoch.size(), 1u);
}

TEST(Generator, AnEmptyEpochWarnsAndStops) {
  const Data d;
  for (int prefetch : {0, 2}) {
    Sequential m = linear_model();
    int calls = 0;
    Generator once = [&]() -> std::optional<Batch> {  // three batches, then never again
      ++calls;
      if (calls > 3) return std::nullopt;
      return Batch{{d.x.rows(0, 4)}, {d.y.rows(0, 4)}, {}};
    };
    History h;
    const std::vector<std::string> w = capture_warnings([&] { h = m.fit(once, quiet(4, prefetch)); });
    ASSERT_EQ(w.size(), 1u);
    EXPECT_NE(w[0].find("trained 1 of 4 epochs"), std::string::npos) << w[0];
    EXPECT_EQ(h.epoch, (std::vector<int>{0}));
    EXPECT_EQ(calls, 5);  // 3 batches and a nothing, then the empty epoch's one call
  }
}

TEST(Generator, ValidationIsNaNWhenItsGeneratorGivesNothing) {
  const Data d;
  Sequential m = linear_model();
  Finite f{d, 4}, v{d, 6};
  GeneratorFitOptions o = quiet(2, 2);
  o.batch_size = 6;
  o.validation_generator = v.generator();
  o.validation_steps = 1;
  const History h = m.fit(f.generator(), o);
  // One validation batch of rows 0..5 an epoch; its loss equals evaluate on them.
  ASSERT_EQ(h["val_loss"].size(), 2u);
  EXPECT_TRUE(std::isfinite(h["val_loss"][1]));
  EXPECT_NEAR(h["val_loss"][1], m.evaluate(d.x.rows(6, 12), d.y.rows(6, 12), 6)["loss"], 1e-6);
  Sequential n = linear_model();
  Finite g{d, 4};
  GeneratorFitOptions e = quiet(1, 0);
  e.validation_generator = [] { return std::optional<Batch>(); };
  const History hn = n.fit(g.generator(), e);
  EXPECT_TRUE(std::isnan(hn["val_loss"][0]));
}

TEST(Generator, InitialEpochRunsTheRemainingEpochs) {
  const Data d;
  Sequential m = linear_model();
  Finite f{d, 4};
  std::vector<int> seen;
  auto cb = std::make_shared<LambdaCallback>();
  cb->on_epoch_begin_fn = [&](int e, Logs&) { seen.push_back(e); };
  GeneratorFitOptions o = quiet(5, 2);
  o.initial_epoch = 3;
  o.callbacks = {cb};
  const History h = m.fit(f.generator(), o);
  EXPECT_EQ(h.epoch, (std::vector<int>{3, 4}));
  EXPECT_EQ(seen, (std::vector<int>{3, 4}));
  EXPECT_EQ(f.calls, 2 * 4);
}

// Rule 8: the generator gives physical batches; the optimizer steps once per
// logical batch (here two of them), exactly as the in-memory fit does.
TEST(Generator, GradientAccumulationIsInvisibleToTheGenerator) {
  const Data d;
  Sequential m = linear_model();
  Finite f{d, 4};
  GeneratorFitOptions o = quiet(2, 2);
  o.nbatch_logical = 8;
  o.steps_per_epoch = 2;
  Generator endless = [&]() -> std::optional<Batch> {  // rows 0..7, over and over
    const int64_t k = f.calls++ % 2;
    return Batch{{d.x.rows(4 * k, 4 * k + 4)}, {d.y.rows(4 * k, 4 * k + 4)}, {}};
  };
  m.fit(endless, o);
  Sequential ref = linear_model();
  FitOptions r;
  r.epochs = 2;
  r.batch_size = 4;
  r.nbatch_logical = 8;
  r.shuffle = false;
  r.verbose = 0;
  ref.fit(d.x.rows(0, 8), d.y.rows(0, 8), r);
  EXPECT_EQ(m.get_weights()[0].to_vector(), ref.get_weights()[0].to_vector());
  EXPECT_EQ(f.calls, 4);
}

TEST(Generator, InvalidArgumentsAreRefused) {
  const Data d;
  Sequential m = linear_model();
  Finite f{d, 4};
  GeneratorFitOptions o = quiet(2, 0);
  o.steps_per_epoch = -1;
  EXPECT_TRUE(throws<ValueError>([&] { m.fit(f.generator(), o); }, {"steps_per_epoch", "-1"}));
  o = quiet(2, 0);
  o.validation_steps = -2;
  EXPECT_TRUE(throws<ValueError>([&] { m.fit(f.generator(), o); }, {"validation_steps", "-2"}));
  o = quiet(2, 0);
  o.initial_epoch = 2;
  EXPECT_TRUE(throws<ValueError>([&] { m.fit(f.generator(), o); }, {"initial_epoch", "[0, 2)", "got 2"}));
  o.initial_epoch = -1;
  EXPECT_TRUE(throws<ValueError>([&] { m.fit(f.generator(), o); }, {"initial_epoch", "got -1"}));
  EXPECT_TRUE(throws<ValueError>([&] { m.fit(Generator{}, quiet(1, 0)); }, {"generator is empty"}));
  EXPECT_EQ(f.calls, 0);
}

// Batches smaller than batch_size run (the graphs are planned for it as a
// maximum); a larger one, or a malformed one, is refused naming its number.
TEST(Generator, BatchSizesAndMalformedBatches) {
  const Data d;
  Sequential m = linear_model();
  int calls = 0;
  Generator sizes = [&]() -> std::optional<Batch> {
    const int64_t rows[] = {4, 3, 5};
    if (calls == 3) return std::nullopt;
    const int64_t r = rows[calls++];
    return Batch{{d.x.rows(0, r)}, {d.y.rows(0, r)}, {}};
  };
  EXPECT_TRUE(throws<ShapeError>([&] { m.fit(sizes, quiet(1, 2)); },
                                 {"generator batch 3 of epoch 1", "5 rows", "more than batch_size 4"}));
  Generator two_inputs = [&]() -> std::optional<Batch> { return Batch{{d.x, d.x}, {d.y}, {}}; };
  EXPECT_TRUE(throws<ShapeError>([&] { m.fit(two_inputs, quiet(1, 0)); }, {"generator batch 1", "1 input", "got 2"}));
  Generator short_y = [&]() -> std::optional<Batch> { return Batch{{d.x.rows(0, 4)}, {d.y.rows(0, 3)}, {}}; };
  EXPECT_TRUE(throws<ShapeError>([&] { m.fit(short_y, quiet(1, 0)); }, {"generator batch 1", "4 rows", "has 3"}));
  Generator nan_x = [&]() -> std::optional<Batch> {
    Tensor x = d.x.rows(0, 4).clone();
    x.data<float>()[3] = std::nanf("");
    return Batch{{x}, {d.y.rows(0, 4)}, {}};
  };
  EXPECT_TRUE(throws<ValueError>([&] { m.fit(nan_x, quiet(1, 0)); }, {"generator batch 1", "NaN"}));
  Generator nan_y = [&]() -> std::optional<Batch> {
    Tensor y = d.y.rows(0, 4).clone();
    y.data<float>()[2] = std::nanf("");
    return Batch{{d.x.rows(0, 4)}, {y}, {}};
  };
  EXPECT_TRUE(throws<ValueError>([&] { m.fit(nan_y, quiet(1, 2)); }, {"generator batch 1 of epoch 1", "NaN"}));
  Generator int_x = [&]() -> std::optional<Batch> {
    return Batch{{Tensor::zeros(Shape{4, 2}, DType::Int32)}, {d.y.rows(0, 4)}, {}};
  };
  EXPECT_TRUE(throws<TypeError>([&] { m.fit(int_x, quiet(1, 0)); }, {"generator batch 1", "float32", "int32"}));
  Generator wide_x = [&]() -> std::optional<Batch> {
    return Batch{{Tensor::zeros(Shape{4, 3})}, {d.y.rows(0, 4)}, {}};
  };
  EXPECT_TRUE(throws<ShapeError>([&] { m.fit(wide_x, quiet(1, 0)); }, {"generator batch 1", "{4, 3}"}));
}

namespace {
struct Tracked : std::runtime_error {
  const void* origin;
  Tracked() : std::runtime_error("source failed"), origin(this) {}
  Tracked(const Tracked& o) : std::runtime_error(o), origin(o.origin) {}
};
}  // namespace

// An exception inside the generator reaches fit's caller as the same object,
// after a warning naming the batch; the generator is not called again.
TEST(Generator, AnExceptionInTheGeneratorIsRethrownAsTheSameObject) {
  const Data d;
  for (int prefetch : {0, 2}) {
    SCOPED_TRACE("prefetch " + std::to_string(prefetch));
    Sequential m = linear_model();
    std::atomic<int> calls{0};
    Generator failing = [&]() -> std::optional<Batch> {
      if (++calls == 3) throw Tracked();
      return Batch{{d.x.rows(0, 4)}, {d.y.rows(0, 4)}, {}};
    };
    bool caught = false;
    const std::vector<std::string> w = capture_warnings([&] {
      try {
        m.fit(failing, quiet(1, prefetch));
      } catch (const Tracked& e) {
        caught = true;
        EXPECT_EQ(static_cast<const void*>(&e), e.origin);
      }
    });
    EXPECT_TRUE(caught);
    ASSERT_EQ(w.size(), 1u);
    EXPECT_NE(w[0].find("batch 3 of epoch 1"), std::string::npos) << w[0];
    EXPECT_EQ(calls, 3);
  }
}

// predict over a generator's batches gives the rows of predict(x), in order.
TEST(Generator, PredictConcatenatesTheBatches) {
  const Data d;
  Sequential m = linear_model();
  Finite f{d, 5};  // batches of 5, 5, 2
  const std::vector<Tensor> got = m.predict(f.generator());
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].shape(), (Shape{12, 1}));
  EXPECT_EQ(got[0].to_vector(), m.predict(d.x).to_vector());
  Finite g{d, 5};
  EXPECT_EQ(m.predict(g.generator(), 2)[0].shape(), (Shape{10, 1}));
  EXPECT_TRUE(throws<ValueError>([&] { m.predict([] { return std::optional<Batch>(); }); }, {"no batch"}));
}

// Two inputs and two outputs through a generator (beyond the seed's one).
TEST(Generator, SeveralInputsAndOutputs) {
  const Data d;
  manual_seed(2);
  const SymbolicTensor a = Input({2}, DType::Float32, "a"), b = Input({2}, DType::Float32, "b");
  const SymbolicTensor h = Dense(3, "tanh")(Concatenate()({a, b}));
  Model m({a, b}, {Dense(1)(h), Dense(1)(h)});
  m.compile(OptimizerSpec::sgd(0.05f), "mse");
  int calls = 0;
  Generator g = [&]() -> std::optional<Batch> {
    if (calls++ == 3) {
      calls = 0;
      return std::nullopt;
    }
    const int64_t k = calls - 1;
    return Batch{{d.x.rows(4 * k, 4 * k + 4), d.x.rows(4 * k, 4 * k + 4)}, {d.y.rows(4 * k, 4 * k + 4), d.y.rows(4 * k, 4 * k + 4)}, {}};
  };
  const History hist = m.fit(g, quiet(2, 2));
  EXPECT_EQ(hist["loss"].size(), 2u);
  EXPECT_TRUE(hist.has(m.output_names()[0] + "_loss"));
  const auto ev = m.evaluate(g);
  const auto ref = m.evaluate(std::vector<Tensor>{d.x, d.x}, std::vector<Tensor>{d.y, d.y}, 4);
  EXPECT_NEAR(ev.at("loss"), ref.at("loss"), 1e-6);
}

// A departure from the seed: with accumulation, a batch of fewer rows than
// batch_size is a short micro-batch. It counts as one of the period's
// batches and each of its rows weighs 1 / nbatch_logical of the update, as
// every other row: after batches of 4 and 2 rows with nbatch_logical 8, one
// SGD update with the summed per-row MSE gradients, 2 e x, over 8.
TEST(Generator, ShortMicroBatchesUnderAccumulationWeighEveryRowAlike) {
  const Data d;
  Sequential m = linear_model(0.1f);
  const std::vector<Tensor> w0 = m.get_weights();
  const float* W = w0[0].data<float>();
  const double b = w0[1].data<float>()[0];
  double g0 = 0, g1 = 0, gb = 0;
  for (int64_t r = 0; r < 6; ++r) {
    const double x0 = d.x.data<float>()[2 * r], x1 = d.x.data<float>()[2 * r + 1];
    const double e = x0 * W[0] + x1 * W[1] + b - d.y.data<float>()[r];
    g0 += 2 * e * x0 / 8;
    g1 += 2 * e * x1 / 8;
    gb += 2 * e / 8;
  }
  int calls = 0;
  Generator four_then_two = [&]() -> std::optional<Batch> {
    const int c = calls++ % 3;
    if (c == 2) return std::nullopt;
    return c == 0 ? Batch{{d.x.rows(0, 4)}, {d.y.rows(0, 4)}, {}} : Batch{{d.x.rows(4, 6)}, {d.y.rows(4, 6)}, {}};
  };
  GeneratorFitOptions o = quiet(1, 2);
  o.nbatch_logical = 8;
  m.fit(four_then_two, o);
  const std::vector<Tensor> w1 = m.get_weights();
  EXPECT_NEAR(w1[0].data<float>()[0], W[0] - 0.1 * g0, 1e-6);
  EXPECT_NEAR(w1[0].data<float>()[1], W[1] - 0.1 * g1, 1e-6);
  EXPECT_NEAR(w1[1].data<float>()[0], b - 0.1 * gb, 1e-6);
  EXPECT_EQ(m.optimizer_context(4, 8).state()->iterations(), 1);
  // A context cannot join the period of a smaller micro-batch.
  EXPECT_TRUE(throws<ValueError>([&] { m.optimizer_context(4, 8, LossWeights::None, 2); },
                                 {"micro_batch 2", "less than batch_size 4"}));
}

// An epoch whose batches leave the last accumulation period incomplete
// (4, 4 and 2 rows with nbatch_logical 8) applies it at the epoch's end:
// two SGD updates per epoch, the second with the last two rows' gradients
// over 8, and nothing carried into the next epoch.
TEST(Generator, AnIncompletePeriodIsAppliedAtTheEpochsEnd) {
  const Data d;
  Sequential m = linear_model(0.1f);
  std::vector<double> w{m.get_weights()[0].data<float>()[0], m.get_weights()[0].data<float>()[1],
                        m.get_weights()[1].data<float>()[0]};
  // One SGD update from rows [begin, end), each row's MSE gradient 2 e x over 8.
  auto update = [&](int64_t begin, int64_t end) {
    double g0 = 0, g1 = 0, gb = 0;
    for (int64_t r = begin; r < end; ++r) {
      const double x0 = d.x.data<float>()[2 * r], x1 = d.x.data<float>()[2 * r + 1];
      const double e = x0 * w[0] + x1 * w[1] + w[2] - d.y.data<float>()[r];
      g0 += 2 * e * x0 / 8;
      g1 += 2 * e * x1 / 8;
      gb += 2 * e / 8;
    }
    w[0] -= 0.1 * g0;
    w[1] -= 0.1 * g1;
    w[2] -= 0.1 * gb;
  };
  int calls = 0;
  Generator ten_rows = [&]() -> std::optional<Batch> {  // 4, 4, 2 rows, then nothing
    const int c = calls++ % 4;
    if (c == 3) return std::nullopt;
    const int64_t b = 4 * c, e = std::min<int64_t>(10, b + 4);
    return Batch{{d.x.rows(b, e)}, {d.y.rows(b, e)}, {}};
  };
  GeneratorFitOptions o = quiet(2, 2);
  o.nbatch_logical = 8;
  m.fit(ten_rows, o);
  for (int epoch = 0; epoch < 2; ++epoch) {
    update(0, 8);
    update(8, 10);
  }
  EXPECT_EQ(m.optimizer_context(4, 8).state()->iterations(), 4);
  const std::vector<Tensor> got = m.get_weights();
  EXPECT_NEAR(got[0].data<float>()[0], w[0], 1e-5);
  EXPECT_NEAR(got[0].data<float>()[1], w[1], 1e-5);
  EXPECT_NEAR(got[1].data<float>()[0], w[2], 1e-5);
  EXPECT_FALSE(m.optimizer_context(4, 8).apply_pending_update());  // nothing pending after fit
}

// A validation generator that ends before validation_steps is warned of, once
// per fit (as a short training epoch is), naming it the validation generator.
TEST(Generator, AShortValidationEpochWarnsOncePerFit) {
  const Data d;
  Sequential m = linear_model();
  Finite f{d, 4}, v{d, 6};  // validation: two batches, then nothing (and a restart)
  GeneratorFitOptions o = quiet(3, 0);
  o.batch_size = 6;
  o.validation_generator = v.generator();
  o.validation_steps = 5;
  History h;
  const std::vector<std::string> w = capture_warnings([&] { h = m.fit(f.generator(), o); });
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].rfind("epoch 1: the validation generator returned nothing after 2 of 5 requested batches", 0), 0u)
      << w[0];
  EXPECT_EQ(h["val_loss"].size(), 3u);
}

// Nothing is decided by the words of a label: a training generator labelled
// "validation batch" is still "the generator", and an in-memory source
// labelled "generator batch" is still "the batch source".
TEST(Generator, LabelsDecideNothing) {
  const Data d;
  Generator failing = []() -> std::optional<Batch> { throw std::runtime_error("boom"); };
  GeneratorSource s(failing, 4, 0, "validation batch");
  const std::vector<std::string> w = capture_warnings([&] {
    s.start_epoch(0, 0);
    EXPECT_THROW(s.next(), std::runtime_error);
  });
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].rfind("the generator threw at batch 1 of epoch 1", 0), 0u) << w[0];

  Sequential m = linear_model();
  TensorSource t({d.x}, {d.y}, Tensor(), 6, nullptr, "generator batch");
  LoopOptions lo;
  lo.steps_per_epoch = 5;
  lo.verbose = 0;
  const std::vector<std::string> w2 = capture_warnings([&] { fit_loop(m, t, nullptr, lo); });
  ASSERT_EQ(w2.size(), 1u);
  EXPECT_NE(w2[0].find("the batch source returned nothing after 2 of 5"), std::string::npos) << w2[0];
}
