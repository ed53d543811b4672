// Bad input throws the DESIGN.md error type (never aborts), with a message
// naming the problem; and the model still works after the throw.
#include <gtest/gtest.h>

#include "test_support.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <typeinfo>
#include <vector>

#include "tensorgrad/tensorgrad.h"

using namespace tensorgrad;
using tensorgrad::nn::Dense;
using tensorgrad::nn::Dropout;
using tensorgrad::nn::FitOptions;
using tensorgrad::nn::Sequential;

namespace {

using test_support::throws;

constexpr int64_t kIn = 20, kClasses = 3, kRows = 40;

Tensor random_x(int64_t rows, int64_t features, uint32_t seed = 1) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(rows * features));
  for (float& f : v) f = d(gen);
  return Tensor::from_vector(v, Shape{rows, features});
}

Tensor int_ids(int64_t rows, int64_t classes, uint32_t seed = 2) {
  std::vector<int32_t> v(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) v[size_t(i)] = int32_t((i * 7 + seed) % classes);
  return Tensor::from_vector(v, Shape{rows});
}

Tensor float_ids(int64_t rows, int64_t classes) {
  std::vector<float> v(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) v[size_t(i)] = float((i * 7 + 2) % classes);
  return Tensor::from_vector(v, Shape{rows});
}

Tensor one_hot(int64_t rows, int64_t classes) {
  std::vector<float> v(size_t(rows * classes), 0.0f);
  for (int64_t i = 0; i < rows; ++i) v[size_t(i * classes + (i * 7 + 2) % classes)] = 1.0f;
  return Tensor::from_vector(v, Shape{rows, classes});
}

// A 20-16-classes MLP; softmax output for the cross-entropy losses.
Sequential make_model(const std::string& loss, int64_t classes = kClasses, bool compile = true,
                      std::vector<std::string> metrics = {}) {
  manual_seed(123);
  Sequential m(Shape{kIn});
  m.add(Dense(16, "relu"));
  m.add(Dense(classes, loss == "mse" ? "linear" : "softmax"));
  if (compile) m.compile(OptimizerSpec::adam(1e-2f), loss, metrics);
  return m;
}

FitOptions quiet(int64_t batch_size = 16, int epochs = 1) {
  FitOptions o;
  o.epochs = epochs;
  o.batch_size = batch_size;
  o.verbose = 0;
  return o;
}

std::vector<std::vector<float>> snapshot(const Sequential& m) {
  std::vector<std::vector<float>> out;
  for (const auto& w : m.weights()) out.push_back(w.value.to_vector());
  return out;
}

bool all_finite(const Tensor& t) {
  for (float v : t.to_vector())
    if (!std::isfinite(v)) return false;
  return true;
}

// After a throwing call: the weights are what they were before it, and a
// valid fit and predict still work (and fit changes the weights).
void expect_still_works(Sequential& m, const std::vector<std::vector<float>>& before, const Tensor& x,
                        const Tensor& y) {
  EXPECT_EQ(snapshot(m), before) << "a throwing call changed the weights";
  nn::History h;
  ASSERT_NO_THROW(h = m.fit(x, y, quiet()));
  ASSERT_EQ(h["loss"].size(), 1u);
  EXPECT_TRUE(std::isfinite(h["loss"][0]));
  EXPECT_NE(snapshot(m), before) << "a valid fit after the error did not train";
  Tensor p;
  ASSERT_NO_THROW(p = m.predict(x));
  EXPECT_EQ(p.shape(), (Shape{x.shape()[0], m.output_shape()[0]}));
  EXPECT_TRUE(all_finite(p));
}

}  // namespace

TEST(Errors, FitRowMismatchIsShapeError) {
  Sequential m = make_model("sparse_categorical_crossentropy");
  const Tensor x = random_x(kRows, kIn), y = int_ids(kRows, kClasses);
  const auto before = snapshot(m);
  EXPECT_TRUE(throws<ShapeError>([&] { m.fit(x, int_ids(kRows - 1, kClasses), quiet()); }, {"40", "39", "rows"}));
  EXPECT_TRUE(throws<ShapeError>([&] { m.fit(random_x(kRows + 5, kIn), y, quiet()); }, {"45", "40", "rows"}));
  EXPECT_TRUE(throws<ShapeError>([&] { m.evaluate(x, int_ids(kRows - 1, kClasses)); }, {"rows"}));
  expect_still_works(m, before, x, y);
}

TEST(Errors, ClassIdOutOfRangeInt32IsIndexError) {
  Sequential m = make_model("sparse_categorical_crossentropy");
  const Tensor x = random_x(kRows, kIn), y = int_ids(kRows, kClasses);
  const auto before = snapshot(m);
  for (int32_t bad : {3, 7, -1}) {
    Tensor yb = y.clone();
    yb.data<int32_t>()[5] = bad;
    EXPECT_TRUE(throws<IndexError>([&] { m.fit(x, yb, quiet()); },
                                   {"class id " + std::to_string(bad), "row 5", "3 classes"}))
        << "id " << bad;
    EXPECT_TRUE(throws<IndexError>([&] { m.evaluate(x, yb); }, {"class id " + std::to_string(bad), "3 classes"}));
  }
  expect_still_works(m, before, x, y);
}

TEST(Errors, ClassIdOutOfRangeFloatIsIndexError) {
  Sequential m = make_model("sparse_categorical_crossentropy");
  const Tensor x = random_x(kRows, kIn), y = float_ids(kRows, kClasses);
  const auto before = snapshot(m);
  for (float bad : {3.0f, 12.0f, -2.0f, 3e9f}) {
    Tensor yb = y.clone();
    yb.data<float>()[9] = bad;
    EXPECT_TRUE(throws<IndexError>([&] { m.fit(x, yb, quiet()); },
                                   {"class id " + std::to_string(int64_t(bad)), "row 9", "3 classes"}))
        << "id " << bad;
  }
  // Also through the optimizer context's step directly.
  OptimizerContext& ctx = m.optimizer_context(kRows);
  Tensor yb = y.clone();
  yb.data<float>()[0] = 3.0f;
  EXPECT_TRUE(throws<IndexError>([&] { ctx.step(x, yb); }, {"class id 3", "3 classes"}));
  expect_still_works(m, before, x, y);
}

TEST(Errors, FractionalFloatClassIdIsValueError) {
  Sequential m = make_model("sparse_categorical_crossentropy");
  const Tensor x = random_x(kRows, kIn), y = float_ids(kRows, kClasses);
  const auto before = snapshot(m);
  Tensor yb = y.clone();
  yb.data<float>()[4] = 1.5f;
  EXPECT_TRUE(throws<ValueError>([&] { m.fit(x, yb, quiet()); }, {"whole numbers", "row 4", "1.5"}));
  EXPECT_TRUE(throws<ValueError>([&] { m.evaluate(x, yb); }, {"whole numbers", "row 4"}));
  expect_still_works(m, before, x, y);
}

TEST(Errors, OneHotLabelsToSparseLossIsShapeError) {
  Sequential m = make_model("sparse_categorical_crossentropy", 10);
  const Tensor x = random_x(kRows, kIn), y = int_ids(kRows, 10);
  const auto before = snapshot(m);
  // "sparse_categorical_crossentropy" itself contains "categorical_crossentropy":
  // look for the advice to use the other loss.
  EXPECT_TRUE(throws<ShapeError>([&] { m.fit(x, one_hot(kRows, 10), quiet()); },
                                 {"use categorical_crossentropy", "{40, 10}"}));
  expect_still_works(m, before, x, y);
}

TEST(Errors, IntClassIdsToCategoricalLossIsTypeError) {
  Sequential m = make_model("categorical_crossentropy");
  const Tensor x = random_x(kRows, kIn), y = one_hot(kRows, kClasses);
  const auto before = snapshot(m);
  EXPECT_TRUE(throws<TypeError>([&] { m.fit(x, int_ids(kRows, kClasses), quiet()); },
                                {"int32", "sparse_categorical_crossentropy"}));
  // Float class ids {rows} (the right dtype, the wrong form) are a ShapeError
  // that also points to the sparse loss.
  EXPECT_TRUE(throws<ShapeError>([&] { m.fit(x, float_ids(kRows, kClasses), quiet()); }, {"sparse"}));
  expect_still_works(m, before, x, y);
}

TEST(Errors, WrongFeatureCountIsShapeError) {
  Sequential m = make_model("sparse_categorical_crossentropy");
  const Tensor x = random_x(kRows, kIn), y = int_ids(kRows, kClasses);
  const Tensor bad = random_x(kRows, kIn - 1);
  const auto before = snapshot(m);
  EXPECT_TRUE(throws<ShapeError>([&] { m.fit(bad, y, quiet()); }, {"input_shape {20}", "19"}));
  EXPECT_TRUE(throws<ShapeError>([&] { m.evaluate(bad, y); }, {"input_shape {20}", "19"}));
  EXPECT_TRUE(throws<ShapeError>([&] { m.predict(bad); }, {"input_shape {20}", "19"}));
  Tensor out = Tensor::empty(Shape{kRows, kClasses});
  EXPECT_TRUE(throws<ShapeError>([&] { m.predict(bad, out); }, {"input_shape {20}"}));
  EXPECT_TRUE(
      throws<ShapeError>([&] { m.optimizer_context(kRows).step(bad, y); }, {"input_shape {20}"}));
  expect_still_works(m, before, x, y);
}

TEST(Errors, FitBeforeCompileIsStateError) {
  Sequential m = make_model("sparse_categorical_crossentropy", kClasses, /*compile=*/false);
  const Tensor x = random_x(kRows, kIn), y = int_ids(kRows, kClasses);
  EXPECT_TRUE(throws<StateError>([&] { m.fit(x, y, quiet()); }, {"compile"}));
  EXPECT_TRUE(throws<StateError>([&] { m.evaluate(x, y); }, {"compile"}));
  EXPECT_TRUE(throws<StateError>([&] { m.optimizer_context(16); }, {"compile"}));
  // Predict needs no compile; then compiling makes fit work.
  EXPECT_NO_THROW(m.predict(x));
  m.compile(OptimizerSpec::adam(1e-2f), "sparse_categorical_crossentropy");
  expect_still_works(m, snapshot(m), x, y);
}

TEST(Errors, ValidationSplitOutOfRangeIsValueError) {
  Sequential m = make_model("sparse_categorical_crossentropy");
  const Tensor x = random_x(kRows, kIn), y = int_ids(kRows, kClasses);
  const auto before = snapshot(m);
  for (double split : {-0.1, 1.0, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
    FitOptions o = quiet();
    o.validation_split = split;
    EXPECT_TRUE(throws<ValueError>([&] { m.fit(x, y, o); }, {"validation_split", "[0, 1)"})) << split;
  }
  expect_still_works(m, before, x, y);
  FitOptions o = quiet();
  o.validation_split = 0.25;
  nn::History h = m.fit(x, y, o);
  EXPECT_TRUE(h.has("val_loss"));
}

TEST(Errors, NonFiniteXIsValueError) {
  Sequential m = make_model("sparse_categorical_crossentropy");
  const Tensor x = random_x(kRows, kIn), y = int_ids(kRows, kClasses);
  const auto before = snapshot(m);
  Tensor xn = x.clone();
  xn.data<float>()[5 * kIn + 2] = std::numeric_limits<float>::quiet_NaN();
  Tensor xi = x.clone();
  xi.data<float>()[7 * kIn + 0] = -std::numeric_limits<float>::infinity();
  EXPECT_TRUE(throws<ValueError>([&] { m.fit(xn, y, quiet()); }, {"NaN", "row 5", "column 2"}));
  EXPECT_TRUE(throws<ValueError>([&] { m.fit(xi, y, quiet()); }, {"infinity", "row 7"}));
  EXPECT_TRUE(throws<ValueError>([&] { m.evaluate(xn, y); }, {"NaN", "row 5"}));
  EXPECT_TRUE(throws<ValueError>([&] { m.predict(xi); }, {"infinity", "row 7"}));
  EXPECT_TRUE(throws<ValueError>([&] { m.optimizer_context(kRows).step(xn, y); }, {"NaN", "row 5"}));
  expect_still_works(m, before, x, y);
}

TEST(Errors, NonFiniteYIsValueError) {
  Sequential m = make_model("mse");
  const Tensor x = random_x(kRows, kIn), y = random_x(kRows, kClasses, 9);
  const auto before = snapshot(m);
  Tensor yn = y.clone();
  yn.data<float>()[3 * kClasses + 1] = std::numeric_limits<float>::quiet_NaN();
  Tensor yi = y.clone();
  yi.data<float>()[11 * kClasses + 2] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(throws<ValueError>([&] { m.fit(x, yn, quiet()); }, {"NaN", "row 3"}));
  EXPECT_TRUE(throws<ValueError>([&] { m.fit(x, yi, quiet()); }, {"infinity", "row 11"}));
  EXPECT_TRUE(throws<ValueError>([&] { m.evaluate(x, yi); }, {"infinity", "row 11"}));
  expect_still_works(m, before, x, y);

  // Float class ids for the sparse loss: NaN is not a whole number.
  Sequential s = make_model("sparse_categorical_crossentropy");
  const Tensor ys = float_ids(kRows, kClasses);
  Tensor ysn = ys.clone();
  ysn.data<float>()[6] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(throws<ValueError>([&] { s.fit(x, ysn, quiet()); }, {"row 6"}));
}

TEST(Errors, NbatchLogicalNotMultipleIsValueError) {
  Sequential m = make_model("sparse_categorical_crossentropy");
  const Tensor x = random_x(kRows, kIn), y = int_ids(kRows, kClasses);
  const auto before = snapshot(m);
  for (int64_t nl : {24, 8, -16}) {
    FitOptions o = quiet(16);
    o.nbatch_logical = nl;
    EXPECT_TRUE(throws<ValueError>([&] { m.fit(x, y, o); }, {"nbatch_logical", "16"})) << nl;
    EXPECT_TRUE(throws<ValueError>([&] { m.optimizer_context(16, nl); }, {"nbatch_logical"})) << nl;
  }
  // Directly through OptimizerContextOptions.
  OptimizerContextOptions co;
  co.batch_size = 16;
  co.nbatch_logical = 40;
  co.losses = {Loss("sparse_categorical_crossentropy")};
  EXPECT_TRUE(throws<ValueError>([&] { OptimizerContext ctx(m.model_function(), co); },
                                 {"nbatch_logical", "16", "40"}));
  expect_still_works(m, before, x, y);
  // A valid accumulation still works after the errors.
  FitOptions o = quiet(8);
  o.nbatch_logical = 16;
  EXPECT_NO_THROW(m.fit(x, y, o));
}

TEST(Errors, SampleWeightMatrixIsValueError) {
  Sequential m = make_model("mse");
  const Tensor x = random_x(kRows, kIn), y = random_x(kRows, kClasses, 9);
  const auto before = snapshot(m);
  FitOptions o = quiet();
  o.sample_weight = Tensor::full(Shape{kRows, kClasses}, 1.0f);
  EXPECT_TRUE(throws<ValueError>([&] { m.fit(x, y, o); }, {"sample_weight", "loss_mask"}));
  expect_still_works(m, before, x, y);
  // One weight per row is accepted, {rows} and {rows, 1}.
  o.sample_weight = Tensor::full(Shape{kRows, 1}, 0.5f);
  EXPECT_NO_THROW(m.fit(x, y, o));
  o.sample_weight = Tensor::full(Shape{kRows}, 0.5f);
  EXPECT_NO_THROW(m.fit(x, y, o));
}

TEST(Errors, StepWrongRowCountIsShapeError) {
  Sequential m = make_model("sparse_categorical_crossentropy");
  const Tensor x = random_x(kRows, kIn), y = int_ids(kRows, kClasses);
  const auto before = snapshot(m);
  OptimizerContext& ctx = m.optimizer_context(16);
  EXPECT_TRUE(throws<ShapeError>([&] { ctx.step(x.rows(0, 15), y.rows(0, 15)); }, {"exactly 16", "15"}));
  EXPECT_TRUE(throws<ShapeError>([&] { ctx.step(x.rows(0, 17), y.rows(0, 17)); }, {"exactly 16", "17"}));
  EXPECT_TRUE(throws<ShapeError>([&] { ctx.step(x.rows(0, 16), y.rows(0, 15)); }, {"exactly 16"}));
  EXPECT_TRUE(throws<ShapeError>([&] { ctx.evaluate(x.rows(0, 15), y.rows(0, 15)); }, {"exactly 16"}));
  EXPECT_EQ(ctx.n_steps(), 0);
  EXPECT_EQ(snapshot(m), before);
  StepResult r = ctx.step(x.rows(0, 16), y.rows(0, 16));
  EXPECT_TRUE(r.updated);
  EXPECT_EQ(r.rows, 16);
  EXPECT_TRUE(std::isfinite(r.loss));
  expect_still_works(m, snapshot(m), x, y);
}

TEST(Errors, UnknownLossIsValueError) {
  Sequential m = make_model("mse", kClasses, /*compile=*/false);
  EXPECT_TRUE(throws<ValueError>([&] { m.compile(OptimizerSpec::adam(), "hinge"); },
                                 {"hinge", "mse", "sparse_categorical_crossentropy"}));
  EXPECT_FALSE(m.compiled());
  EXPECT_TRUE(throws<ValueError>([&] { loss_from_name("crossentropy"); }, {"crossentropy"}));
  m.compile(OptimizerSpec::adam(1e-2f), "mse");
  const Tensor x = random_x(kRows, kIn), y = random_x(kRows, kClasses, 9);
  expect_still_works(m, snapshot(m), x, y);
}

TEST(Errors, UnknownActivationIsValueError) {
  EXPECT_TRUE(throws<ValueError>([&] { Dense d(4, "gelu2"); }, {"gelu2", "relu"}));
  EXPECT_TRUE(throws<ValueError>([&] { nn::activation_from_name("Relu"); }, {"Relu"}));
  Sequential m = make_model("mse", kClasses, /*compile=*/false);
  EXPECT_TRUE(throws<ValueError>([&] { m.add(Dense(4, "swishy")); }, {"swishy"}));
  EXPECT_EQ(m.layers().size(), 2u);
  m.compile(OptimizerSpec::adam(1e-2f), "mse");
  const Tensor x = random_x(kRows, kIn), y = random_x(kRows, kClasses, 9);
  expect_still_works(m, snapshot(m), x, y);
}

TEST(Errors, UnknownMetricIsValueError) {
  Sequential m = make_model("sparse_categorical_crossentropy", kClasses, /*compile=*/false);
  EXPECT_TRUE(throws<ValueError>(
      [&] { m.compile(OptimizerSpec::adam(), "sparse_categorical_crossentropy", {"precision"}); }, {"precision"}));
  EXPECT_FALSE(m.compiled());
  Sequential r = make_model("mse", kClasses, /*compile=*/false);
  EXPECT_TRUE(throws<ValueError>([&] { r.compile(OptimizerSpec::adam(), "mse", {"accuracy"}); }, {"accuracy", "mse"}));
  m.compile(OptimizerSpec::adam(1e-2f), "sparse_categorical_crossentropy", {"accuracy"});
  const Tensor x = random_x(kRows, kIn), y = int_ids(kRows, kClasses);
  expect_still_works(m, snapshot(m), x, y);
}

// Regression test (fixed bug): a compile() that throws for an unknown metric has already replaced the
// model's loss and dropped its accuracy metric (Sequential::compile assigns
// loss_ and accuracy_metric_ before checking the metrics), while the model
// stays compiled with its old optimizer contexts cached. The model is left in
// a mixed state: batch sizes with a cached context train with the old loss,
// new batch sizes build contexts with the new one, and "accuracy" disappears
// from History. Expected: a throwing compile leaves the model as it was.
TEST(Errors, FailedCompileLeavesModelAsItWas) {
  Sequential m = make_model("mse");
  const Tensor x = random_x(kRows, kIn), y = random_x(kRows, kClasses, 9);
  ASSERT_NO_THROW(m.fit(x, y, quiet(16)));
  EXPECT_TRUE(throws<ValueError>(
      [&] { m.compile(OptimizerSpec::adam(), "sparse_categorical_crossentropy", {"precision"}); }, {"precision"}));
  ASSERT_TRUE(m.compiled());
  // Still an MSE model: float targets {rows, 3} at a batch size never used before.
  EXPECT_NO_THROW(m.evaluate(x, y, 7));
  EXPECT_NO_THROW(m.fit(x, y, quiet(5)));

  Sequential a = make_model("sparse_categorical_crossentropy", kClasses, true, {"accuracy"});
  const Tensor ids = int_ids(kRows, kClasses);
  EXPECT_TRUE(a.fit(x, ids, quiet()).has("accuracy"));
  EXPECT_THROW(a.compile(OptimizerSpec::adam(), "sparse_categorical_crossentropy", {"auc"}), ValueError);
  ASSERT_TRUE(a.compiled());
  EXPECT_TRUE(a.fit(x, ids, quiet()).has("accuracy")) << "the failed compile dropped the accuracy metric";
}

// Regression test (fixed bug): a float32 class id too large for int64 (1e30) is converted with
// int64_t(v), which is undefined behaviour; on x86 the IndexError then names
// the id -9223372036854775808 instead of the id that was given.
// Expected: IndexError (or ValueError) naming the given id (1e30 / 1e+30),
// never a made-up one.
TEST(Errors, HugeFloatClassIdIsNamedAsGiven) {
  Sequential m = make_model("sparse_categorical_crossentropy");
  const Tensor x = random_x(kRows, kIn), y = float_ids(kRows, kClasses);
  const auto before = snapshot(m);
  Tensor yb = y.clone();
  yb.data<float>()[3] = 1e30f;
  bool threw = false;
  try {
    m.fit(x, yb, quiet());
  } catch (const Error& e) {
    threw = true;
    const std::string msg = e.what();
    EXPECT_TRUE(dynamic_cast<const IndexError*>(&e) || dynamic_cast<const ValueError*>(&e)) << msg;
    EXPECT_NE(msg.find("row 3"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("-9223372036854775808"), std::string::npos) << msg;
    EXPECT_TRUE(msg.find("1e+30") != std::string::npos || msg.find("1000000015") != std::string::npos) << msg;
  }
  EXPECT_TRUE(threw);
  expect_still_works(m, before, x, y);
}

TEST(Errors, BadLayerArgumentsAreValueError) {
  EXPECT_TRUE(throws<ValueError>([&] { Dense d(0); }, {"units", "0"}));
  EXPECT_TRUE(throws<ValueError>([&] { Dense d(-3, "relu"); }, {"units", "-3"}));
  EXPECT_TRUE(throws<ValueError>([&] { Dropout d(1.0f); }, {"rate", "[0, 1)"}));
  EXPECT_TRUE(throws<ValueError>([&] { Dropout d(-0.1f); }, {"rate"}));
  EXPECT_TRUE(throws<ValueError>([&] { Dropout d(std::numeric_limits<float>::quiet_NaN()); }, {"rate"}));
  // A model can still be built, compiled and trained afterwards.
  Sequential m(Shape{kIn});
  m.add(Dense(8, "relu"));
  m.add(Dropout(0.0f));
  m.add(Dense(kClasses));
  m.compile(OptimizerSpec::adam(1e-2f), "mse");
  const Tensor x = random_x(kRows, kIn), y = random_x(kRows, kClasses, 9);
  expect_still_works(m, snapshot(m), x, y);
}

TEST(Errors, SetNumThreadsZeroIsValueError) {
  const int before = num_threads();
  EXPECT_TRUE(throws<ValueError>([&] { set_num_threads(0); }, {"at least 1", "0"}));
  EXPECT_TRUE(throws<ValueError>([&] { set_num_threads(-4); }, {"-4"}));
  EXPECT_EQ(num_threads(), before);
  Sequential m = make_model("mse");
  const Tensor x = random_x(kRows, kIn), y = random_x(kRows, kClasses, 9);
  expect_still_works(m, snapshot(m), x, y);
}

TEST(Errors, FromVectorWrongCountIsShapeError) {
  const std::vector<float> f(5, 1.0f);
  const std::vector<int32_t> i(7, 1);
  EXPECT_TRUE(throws<ShapeError>([&] { Tensor::from_vector(f, Shape{2, 3}); }, {"{2, 3}", "6", "5"}));
  EXPECT_TRUE(throws<ShapeError>([&] { Tensor::from_vector(i, Shape{2, 3}); }, {"{2, 3}", "6", "7"}));
  Tensor t = Tensor::from_vector(std::vector<float>(6, 2.0f), Shape{2, 3});
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.item(5), 2.0f);
}

// x of another rank with the right element count is not silently reshaped:
// only {rows, input_shape...} or the flattened {rows, product} are taken.
TEST(Errors, InputOfTheWrongRankIsShapeError) {
  Sequential m({4});
  m.add(Dense(2));
  m.compile(OptimizerSpec::sgd(), "mse");
  const Tensor wrong = Tensor::zeros(Shape{10, 2, 2}), y = Tensor::zeros(Shape{10, 2});
  for (const auto& call : std::vector<std::function<void()>>{
           [&] { m.fit(wrong, y, quiet()); }, [&] { m.evaluate(wrong, y); }, [&] { m.predict(wrong); },
           [&] { m.optimizer_context(10).step(wrong, y); },
           [&] {
             nn::TrainerOptions o;
             o.batch_size = 10;
             nn::Trainer(m, o).step(wrong, y);
           }})
    EXPECT_TRUE(throws<ShapeError>(call, {"{10, 2, 2}", "{10, 4}", "input_shape {4}"}));
  EXPECT_NO_THROW(m.fit(Tensor::zeros(Shape{10, 4}), y, quiet()));

  // An image model takes {rows, 2, 2, 1} or the flattened {rows, 4}, nothing else.
  Sequential img({2, 2, 1});
  img.add(nn::Flatten());
  img.add(Dense(2));
  img.compile(OptimizerSpec::sgd(), "mse");
  EXPECT_TRUE(throws<ShapeError>([&] { img.predict(wrong); }, {"{10, 2, 2, 1}", "flattened form {10, 4}", "{10, 2, 2}"}));
  EXPECT_TRUE(throws<ShapeError>([&] { img.predict(Tensor::zeros(Shape{10, 1, 4})); }, {"{10, 1, 4}"}));
  EXPECT_EQ(img.predict(Tensor::zeros(Shape{10, 4})).shape(), (Shape{10, 2}));
  EXPECT_EQ(img.predict(Tensor::zeros(Shape{10, 2, 2, 1})).shape(), (Shape{10, 2}));
}

// One sample without its batch dimension is named as such (it used to read
// as "x must be {5, 5}": the 5 features taken for 5 rows).
TEST(Errors, OneSampleWithoutABatchDimensionIsNamed) {
  Sequential m({5});
  m.add(Dense(2));
  m.compile(OptimizerSpec::sgd(), "mse");
  Tensor out = Tensor::empty(Shape{1, 2});
  for (const auto& call : std::vector<std::function<void()>>{[&] { m.predict(Tensor::zeros(Shape{5})); },
                                                             [&] { m.predict(Tensor::zeros(Shape{5}), out); }})
    EXPECT_TRUE(throws<ShapeError>(call, {"one sample, {5}", "no batch dimension", "pass it as {1, 5}"}));
  Sequential img({2, 2, 1});
  img.add(nn::Flatten());
  img.add(Dense(2));
  img.compile(OptimizerSpec::sgd(), "mse");
  EXPECT_TRUE(throws<ShapeError>([&] { img.predict(Tensor::zeros(Shape{2, 2, 1})); }, {"one sample, {2, 2, 1}", "{1, 2, 2, 1}"}));
  // {1, k} on a {1, k} model is one row of its flattened form, not a sample without a batch.
  Sequential row({1, 3});
  row.add(nn::Flatten());
  row.add(Dense(2));
  row.compile(OptimizerSpec::sgd(), "mse");
  EXPECT_EQ(row.predict(Tensor::zeros(Shape{1, 3})).shape(), (Shape{1, 2}));
  nn::TrainerOptions o;
  o.batch_size = 1;
  nn::Trainer tr(m, o);
  EXPECT_TRUE(throws<ShapeError>([&] { tr.step(Tensor::zeros(Shape{2, 5}), Tensor::zeros(Shape{2, 2})); },
                                 {"exactly 1 row (the batch size)", "got 2"}));
}

TEST(Errors, EvaluateNamesBothRowCounts) {
  Sequential m({4});
  m.add(Dense(2));
  m.compile(OptimizerSpec::sgd(), "mse");
  EXPECT_TRUE(throws<ShapeError>([&] { m.evaluate(Tensor::zeros(Shape{100, 4}), Tensor::zeros(Shape{99, 2})); },
                                 {"x has 100 rows", "y has 99"}));
}

// Targets and weights that make the loss meaningless are refused before any
// step: binary cross-entropy targets outside [0, 1], negative sample weights.
// Nothing trains.
TEST(Errors, OutOfRangeTargetsAndNegativeWeightsAreValueError) {
  Sequential m({2});
  m.add(Dense(1, "sigmoid"));
  m.compile(OptimizerSpec::sgd(0.1f), "binary_crossentropy");
  const std::vector<float> before = m.weights()[0].value.to_vector();
  FitOptions o;
  o.verbose = 0;
  const Tensor x = Tensor::full(Shape{4, 2}, 0.5f);
  EXPECT_TRUE(throws<ValueError>([&] { m.fit(x, Tensor::from_vector(std::vector<float>{0, 1, 1.5f, 0}, {4, 1}), o); },
                                 {"binary_crossentropy", "[0, 1]", "element 2", "1.5"}));
  o.sample_weight = Tensor::from_vector(std::vector<float>{1, -1, 1, 1}, {4});
  EXPECT_TRUE(throws<ValueError>([&] { m.fit(x, Tensor::zeros(Shape{4, 1}), o); },
                                 {"sample_weight", ">= 0", "element 1", "-1"}));
  EXPECT_EQ(m.weights()[0].value.to_vector(), before);
}

// A fit whose loss becomes NaN says so once, naming the epoch (Keras goes on
// silently; TerminateOnNaN is a callback there).
TEST(Errors, DivergedFitWarnsOnce) {
  Sequential m({1});
  m.add(Dense(1));
  m.compile(OptimizerSpec::sgd(1e30f), "mse");
  std::vector<std::string> warnings;
  set_log_handler([&](LogLevel, const std::string& s) { warnings.push_back(s); });
  FitOptions o;
  o.verbose = 0;
  o.epochs = 4;
  o.shuffle = false;
  m.fit(Tensor::from_vector(std::vector<float>{1e10f, -1e10f}, {2, 1}), Tensor::from_vector(std::vector<float>{1e10f, 1e10f}, {2, 1}), o);
  set_log_handler(nullptr);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("training diverged"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("in epoch"), std::string::npos) << warnings[0];
}
