// Trainer (include/tensorgrad/nn/trainer.h): the seeds' ggml_trainer()
// (trainer.R), one GoogleTest per test_that block of its tests
// (test-trainer.R), then the behaviour the "Trainer" issue adds.
//
// The seed's tests on a functional model run on the functional model the
// seed builds (build_regression: Input(4) -> Dense(8, relu) -> Dense(3), MSE):
//   "a functional model trains through the trainer"        -> RegressionModelTrainsThroughTheTrainer
//   "a masked output does not train, whatever its target"  -> MaskedOutputDoesNotTrainWhateverItsTarget
//   "per-sample weights are accepted with loss_mask = 1"   -> PerSampleWeightsAcceptedWithLossMaskOne
//   "loss weights are refused where they cannot apply"     -> LossWeightsRefusedWhereTheyCannotApply
//   "ggml_fit refuses sample_weight on a functional model" -> FitRefusesPerOutputSampleWeight
//   "a predict between steps neither crashes nor disturbs training"
//                                                          -> PredictOnHandedOutModelBetweenStepsLeavesTraining
//   "$predict agrees with ggml_predict on the handed-out model" -> PredictAgreesWithTheHandedOutModel
//   "$predict takes fewer rows than a batch"               -> PredictTakesFewerRowsThanABatch
//   "$predict reads the current weights, not a snapshot"   -> PredictReadsTheCurrentWeights
//   "$predict between steps leaves training exactly as it was" -> PredictBetweenStepsLeavesTrainingExactly
//   "$predict leaves models handed out by $model() on their scheduler"
//                                                          -> HandedOutModelIsIndependentOfTheTrainer
//   "a snapshot starts equal to the trainer and stays put afterwards"
//                                                          -> SnapshotStartsEqualAndStaysPut
//   "update_target: tau = 1 copies, tau = 0 keeps, tau = 0.5 averages"
//                                                          -> UpdateTargetTauOneCopiesZeroKeepsHalfAverages
//   "update_target refuses a target that does not match"   -> UpdateTargetRefusesATargetThatDoesNotMatch
//   "taking and releasing a snapshot leaves the trainer's weights alone"
//                                                          -> SnapshotAndReleaseLeaveTheTrainersWeightsAlone
//   "a trainer on a loaded model predicts from the trained weights"
//                                                          -> OnALoadedModel
// The seed's sequential tests (4-8-2 softmax, categorical cross-entropy) keep
// their model (build_model).
#include <gtest/gtest.h>

#include "test_files.h"
#include "test_support.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>
#include <unistd.h>

#include "tensorgrad/tensorgrad.h"

using namespace tensorgrad;
using nn::BatchNormalization;
using nn::Dense;
using nn::Dropout;
using nn::Sequential;
using nn::Trainer;
using nn::TrainerOptions;

namespace {

using test_support::ThreadsGuard;

using test_support::message_of;

::testing::AssertionResult has_words(const std::string& message, std::initializer_list<const char*> words) {
  for (const char* w : words)
    if (message.find(w) == std::string::npos)
      return ::testing::AssertionFailure() << "\"" << w << "\" not in: " << message;
  return ::testing::AssertionSuccess();
}

struct Data {
  Tensor x, y;
};

// The seed's make_data: uniform features, one-hot class 0 when the row sums
// above nfeat / 2, else class 1.
Data make_data(int64_t n = 64, int64_t nfeat = 4, uint32_t seed = 1) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  Data d{Tensor::empty(Shape{n, nfeat}), Tensor::zeros(Shape{n, 2})};
  for (int64_t i = 0; i < n; ++i) {
    float s = 0;
    for (int64_t j = 0; j < nfeat; ++j) s += d.x.data<float>()[i * nfeat + j] = u(gen);
    d.y.data<float>()[i * 2 + (s > float(nfeat) / 2 ? 0 : 1)] = 1.0f;
  }
  return d;
}

// The seed's make_regression: y = (sum of x, x1 - x2, x3).
Data make_regression(int64_t n = 64, uint32_t seed = 1) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  Data d{Tensor::empty(Shape{n, 4}), Tensor::empty(Shape{n, 3})};
  float* x = d.x.data<float>();
  float* y = d.y.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < 4; ++j) x[i * 4 + j] = u(gen);
    y[i * 3 + 0] = x[i * 4] + x[i * 4 + 1] + x[i * 4 + 2] + x[i * 4 + 3];
    y[i * 3 + 1] = x[i * 4] - x[i * 4 + 1];
    y[i * 3 + 2] = x[i * 4 + 2];
  }
  return d;
}

// The seed's build_model: 4-8(relu)-2(softmax), categorical cross-entropy.
Sequential build_model(uint64_t seed = 1, const OptimizerSpec& optimizer = OptimizerSpec::adam()) {
  manual_seed(seed);  // weights are drawn as layers are added
  nn::clear_session();
  Sequential m({4});
  m.add(Dense(8, "relu"));
  m.add(Dense(2, "softmax"));
  m.compile(optimizer, "categorical_crossentropy");
  return m;
}

// The seed's build_functional: Input(4) -> Dense(8, relu) -> Dense(n_out), Adam.
nn::Model build_regression(uint64_t seed = 1, int64_t n_out = 3, const std::string& loss = "mse") {
  manual_seed(seed);
  nn::clear_session();
  const nn::SymbolicTensor inp = nn::Input({4});
  const nn::SymbolicTensor h = Dense(8, "relu")(inp);
  nn::Model m(inp, Dense(n_out, loss == "mse" ? "linear" : "softmax")(h));
  m.compile(OptimizerSpec::adam(), loss);
  return m;
}

// 4-8-BatchNormalization-relu-[Dropout]-3, MSE, Adam.
Sequential build_bn(uint64_t seed = 1, float dropout = 0.0f) {
  manual_seed(seed);
  nn::clear_session();
  Sequential m({4});
  m.add(Dense(8));
  m.add(BatchNormalization(0.9f));
  m.add(nn::ActivationLayer("relu"));
  if (dropout > 0) m.add(Dropout(dropout));
  m.add(Dense(3));
  m.compile(OptimizerSpec::adam(1e-2f), "mse");
  return m;
}

TrainerOptions batch(int64_t batch_size, int64_t loss_mask = 0) {
  TrainerOptions o;
  o.batch_size = batch_size;
  o.loss_mask = loss_mask;
  return o;
}

// The 16-row batch i (0-based, cycling over the 64 rows).
Tensor b16(const Tensor& t, int i) { return t.rows((i % 4) * 16, (i % 4) * 16 + 16); }

std::vector<std::vector<float>> weight_values(const nn::Model& m) {
  std::vector<std::vector<float>> out;
  for (const nn::Weight& w : m.weights()) out.push_back(w.value.to_vector());
  return out;
}

std::vector<float> flat(const Tensor& t) { return t.to_vector(); }

double mean(const std::vector<float>& v, size_t begin, size_t end) {
  double s = 0;
  for (size_t i = begin; i < end; ++i) s += v[i];
  return s / double(end - begin);
}

bool all_finite(const std::vector<float>& v) {
  for (float f : v)
    if (!std::isfinite(f)) return false;
  return true;
}

// max |a - b| / max |b| over one weight tensor (0 when b is all zeros and a == b).
double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(double(a[i]) - double(b[i])));
    norm = std::max(norm, std::fabs(double(b[i])));
  }
  if (norm == 0) return diff == 0 ? 0.0 : INFINITY;
  return diff / norm;
}

int process_threads() {
  int n = 0;
  if (!std::filesystem::exists("/proc/self/task")) return 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

}  // namespace

// ---- the seed's tests: sequential -------------------------------------------

TEST(Trainer, SteppingByHandTrainsTheModel) {
  ThreadsGuard threads;
  set_num_threads(2);
  const Data d = make_data();
  Sequential m = build_model();
  Trainer tr(m, batch(16));
  std::vector<float> losses;
  // Four passes over the same four batches: enough for the loss to move.
  for (int rep = 0; rep < 4; ++rep)
    for (int i = 0; i < 4; ++i) losses.push_back(tr.step(b16(d.x, i), b16(d.y, i)));
  ASSERT_EQ(losses.size(), 16u);
  EXPECT_TRUE(all_finite(losses));
  EXPECT_LT(mean(losses, 12, 16), mean(losses, 0, 4));
  EXPECT_EQ(tr.n_steps(), 16);
}

TEST(Trainer, ContextSurvivesAcrossSteps) {
  // One weight w = 1, x = 1, y = 0, mse: loss w^2, gradient 2w. Adam (lr 0.1)
  // takes its first step of exactly lr; the second depends on the moments the
  // first left behind, so the values below hold only if weights and moments
  // both lived on between the calls.
  Sequential m({1});
  m.add(Dense(1, "linear", false));
  m.weights()[0].value.fill(1.0f);
  m.compile(OptimizerSpec::adam(0.1f), "mse");
  Trainer tr(m, batch(1));
  const Tensor x = Tensor::full(Shape{1, 1}, 1.0f), y = Tensor::zeros(Shape{1, 1});
  double w = 1.0, mom = 0.0, vel = 0.0;
  for (int t = 1; t <= 3; ++t) {
    const double g = 2.0 * w;
    EXPECT_NEAR(tr.step(x, y), w * w, 1e-5) << "step " << t;
    mom = 0.9 * mom + 0.1 * g;
    vel = 0.999 * vel + 0.001 * g * g;
    w -= 0.1 * (mom / (1 - std::pow(0.9, t))) / (std::sqrt(vel / (1 - std::pow(0.999, t))) + 1e-8);
    EXPECT_NEAR(tr.weights()[0].value.item(), w, 1e-5) << "step " << t;
  }
  // Fresh moments at every step would have given 1 - 3 * 0.1 = 0.7.
  EXPECT_GT(std::fabs(w - 0.7), 1e-3);
  EXPECT_EQ(tr.n_steps(), 3);
}

TEST(Trainer, EvalDoesNotTrain) {
  ThreadsGuard threads;
  set_num_threads(2);
  const Data d = make_data();
  Sequential m = build_model();
  Trainer tr(m, batch(16));
  const float e1 = tr.eval(b16(d.x, 0), b16(d.y, 0));
  const float e2 = tr.eval(b16(d.x, 0), b16(d.y, 0));
  EXPECT_EQ(e1, e2);  // weights untouched, so the loss repeats
  EXPECT_EQ(tr.n_steps(), 0);

  // Issue: eval between steps neither trains nor counts as a step.
  tr.step(b16(d.x, 1), b16(d.y, 1));
  const std::vector<float> p = flat(tr.predict(b16(d.x, 0)));
  const float e3 = tr.eval(b16(d.x, 0), b16(d.y, 0));
  EXPECT_EQ(tr.eval(b16(d.x, 0), b16(d.y, 0)), e3);
  EXPECT_EQ(flat(tr.predict(b16(d.x, 0))), p);
  EXPECT_EQ(tr.n_steps(), 1);
}

TEST(Trainer, ModelReturnsTheTrainedWeights) {
  ThreadsGuard threads;
  set_num_threads(2);
  const Data d = make_data();
  Sequential m = build_model();
  Trainer tr(m, batch(16));
  for (int i = 0; i < 4; ++i) tr.step(b16(d.x, i), b16(d.y, i));
  nn::Model trained = tr.model();
  const Tensor preds = trained.predict(b16(d.x, 0), 16);
  EXPECT_EQ(preds.shape(), (Shape{16, 2}));
  EXPECT_TRUE(all_finite(flat(preds)));
  // The trained weights, not the initial ones.
  EXPECT_EQ(flat(preds), flat(tr.predict(b16(d.x, 0))));
  EXPECT_NE(flat(preds), flat(m.predict(b16(d.x, 0), 16)));
}

// The Trainer's copy keeps the fusion options the model was compiled with,
// as clone() and to() do (its compile would otherwise reset them).
TEST(Trainer, KeepsTheModelsFusionOptions) {
  FusionOptions relu_only = FusionOptions::none();
  relu_only.relu = true;
  for (const FusionOptions& fusion : {FusionOptions::none(), relu_only}) {
    Sequential m = build_model();
    nn::CompileTarget target;
    target.fusion = fusion;
    m.compile(OptimizerSpec::adam(), "categorical_crossentropy", {}, target);
    EXPECT_EQ(m.clone().optimizer_context(16).options().fusion, fusion);
    Trainer tr(m, batch(16));
    EXPECT_EQ(tr.model().optimizer_context(16).options().fusion, fusion);
    EXPECT_EQ(const_cast<nn::Model&>(tr.training_model()).optimizer_context(16).options().fusion, fusion);
  }
}

TEST(Trainer, WrongBatchSizeIsRefused) {
  ThreadsGuard threads;
  set_num_threads(2);
  const Data d = make_data();
  Sequential m = build_model();
  Trainer tr(m, batch(16));
  EXPECT_TRUE(has_words(message_of<ShapeError>([&] { tr.step(d.x.rows(0, 5), d.y.rows(0, 5)); }), {"exactly 16"}));
  EXPECT_TRUE(has_words(message_of<ShapeError>([&] { tr.eval(d.x.rows(0, 5), d.y.rows(0, 5)); }), {"exactly 16"}));
  // C++ addition: bad options are refused at construction.
  TrainerOptions o = batch(0);
  EXPECT_TRUE(has_words(message_of<ValueError>([&] { Trainer t(m, o); }), {"batch_size"}));
  o = batch(16);
  o.nbatch_logical = 24;
  EXPECT_TRUE(has_words(message_of<ValueError>([&] { Trainer t(m, o); }), {"nbatch_logical", "multiple"}));
}

TEST(Trainer, FreeIsIdempotentAndMethodsRefuseAfterwards) {
  ThreadsGuard threads;
  set_num_threads(2);
  const Data d = make_data();
  Sequential m = build_model();
  Trainer tr(m, batch(16));
  tr.step(b16(d.x, 0), b16(d.y, 0));
  EXPECT_NO_THROW(tr.free());
  EXPECT_NO_THROW(tr.free());  // second call is a no-op, not a double free
  EXPECT_TRUE(tr.released());
  EXPECT_TRUE(has_words(message_of<StateError>([&] { tr.step(b16(d.x, 0), b16(d.y, 0)); }), {"has been freed"}));
  EXPECT_TRUE(has_words(message_of<StateError>([&] { tr.model(); }), {"has been freed"}));
  // And every other method.
  EXPECT_TRUE(has_words(message_of<StateError>([&] { tr.eval(b16(d.x, 0), b16(d.y, 0)); }), {"has been freed"}));
  EXPECT_TRUE(has_words(message_of<StateError>([&] { tr.predict(b16(d.x, 0)); }), {"has been freed"}));
  EXPECT_TRUE(has_words(message_of<StateError>([&] { tr.snapshot(); }), {"has been freed"}));
  EXPECT_TRUE(has_words(message_of<StateError>([&] { tr.set_learning_rate(0.1f); }), {"has been freed"}));
  EXPECT_TRUE(has_words(message_of<StateError>([&] { tr.calibrate_bn(b16(d.x, 0)); }), {"has been freed"}));
  Sequential other = build_model();
  EXPECT_TRUE(has_words(message_of<StateError>([&] { tr.update_target(other); }), {"has been freed"}));
}

TEST(Trainer, SetLrChangesTheStepSize) {
  ThreadsGuard threads;
  set_num_threads(2);
  const Data d = make_data();
  auto run_with_lr = [&](float lr) {
    Sequential m = build_model();
    Trainer tr(m, batch(16));
    tr.set_learning_rate(lr);
    EXPECT_EQ(tr.learning_rate(), lr);
    for (int i = 0; i < 4; ++i) tr.step(b16(d.x, i), b16(d.y, i));
    return tr.step(b16(d.x, 0), b16(d.y, 0));
  };
  // Same data and seed, so any difference is the learning rate.
  EXPECT_NE(run_with_lr(1e-4f), run_with_lr(1e-1f));

  // With SGD an update is -lr * gradient: from the same weights and batch,
  // doubling the rate doubles every weight's change, exactly up to rounding.
  Sequential sgd = build_model(1, OptimizerSpec::sgd(0.05f));
  const auto start = weight_values(sgd);
  auto change_with_lr = [&](float lr) {
    Trainer tr(sgd, batch(16));
    tr.set_learning_rate(lr);
    tr.step(b16(d.x, 0), b16(d.y, 0));
    std::vector<std::vector<float>> change;
    for (size_t i = 0; i < start.size(); ++i) {
      change.push_back(tr.weights()[i].value.to_vector());
      for (size_t j = 0; j < start[i].size(); ++j) change[i][j] -= start[i][j];
    }
    return change;
  };
  const auto small = change_with_lr(0.01f), large = change_with_lr(0.02f);
  double largest = 0;
  for (size_t i = 0; i < small.size(); ++i)
    for (size_t j = 0; j < small[i].size(); ++j) {
      EXPECT_NEAR(large[i][j], 2.0f * small[i][j], 1e-6f) << "weight " << i << ", element " << j;
      largest = std::max(largest, std::fabs(double(small[i][j])));
    }
  EXPECT_GT(largest, 1e-4);  // the step did move the weights

  Sequential m = build_model();
  Trainer tr(m, batch(16));
  EXPECT_TRUE(has_words(message_of<ValueError>([&] { tr.set_learning_rate(0.0f); }), {"learning rate"}));
  EXPECT_TRUE(has_words(message_of<ValueError>([&] { tr.set_learning_rate(std::nanf("")); }), {"learning rate"}));
}

TEST(Trainer, GradientAccumulationDelaysTheWeightUpdate) {
  ThreadsGuard threads;
  set_num_threads(2);
  const Data d = make_data();
  Sequential m = build_model();
  // nbatch_logical = 2 * batch_size: the optimizer steps every second call,
  // so the first two losses come from identical weights.
  TrainerOptions o = batch(16);
  o.nbatch_logical = 32;
  Trainer tr(m, o);
  const float l1 = tr.step(b16(d.x, 0), b16(d.y, 0));
  const float l2 = tr.step(b16(d.x, 0), b16(d.y, 0));
  const float l3 = tr.step(b16(d.x, 0), b16(d.y, 0));
  EXPECT_EQ(l1, l2);  // no update between these two
  EXPECT_NE(l2, l3);  // update landed before the third
  EXPECT_EQ(tr.n_steps(), 3);  // calls of step, not updates
}

// The seed's "non-sequential input" half is moot in C++: the constructor takes
// a Sequential, and the type system refuses a list. The uncompiled half stays;
// a released model is refused too.
TEST(Trainer, UncompiledOrReleasedModelIsRefused) {
  Sequential m({4});
  m.add(Dense(4, "relu"));
  EXPECT_TRUE(has_words(message_of<StateError>([&] { Trainer tr(m, batch(8)); }), {"compiled"}));
  Sequential f = build_model();
  f.free();
  EXPECT_TRUE(has_words(message_of<StateError>([&] { Trainer tr(f, batch(8)); }), {"freed"}));
}

// Adam moments carry over between steps (regression in the seed): rebuilding
// a trainer from model() after every step restarts the optimizer. After one
// step the two runs agree (both took a first Adam step from the same weights,
// which also shows model() carries the weights over and is usable after its
// trainer is gone, with fresh optimizer state); after three they must not.
TEST(Trainer, AdamMomentsCarryOverBetweenSteps) {
  ThreadsGuard threads;
  set_num_threads(1);
  const Data d = make_data();
  const Tensor x = b16(d.x, 0), y = b16(d.y, 0);
  auto live_after = [&](int k) {
    Sequential m = build_model();
    Trainer tr(m, batch(16));
    for (int i = 0; i < k; ++i) tr.step(x, y);
    return tr.eval(x, y);
  };
  auto reset_after = [&](int k) {
    nn::Model cur = build_model();
    for (int i = 0; i < k; ++i) {
      Trainer tr(cur, batch(16));
      tr.step(x, y);
      cur = tr.model();
    }  // the trainer is destroyed here; cur stays valid
    Trainer tr(cur, batch(16));
    return tr.eval(x, y);
  };
  EXPECT_EQ(live_after(1), reset_after(1));
  EXPECT_NE(live_after(3), reset_after(3));
}

// ---- the seed's tests on a functional model, here Sequential 4-8-3 MSE ----

TEST(Trainer, RegressionModelTrainsThroughTheTrainer) {
  ThreadsGuard threads;
  set_num_threads(2);
  const Data d = make_regression();
  nn::Model m = build_regression();
  manual_seed(1);
  Trainer tr(m, batch(16));
  std::vector<float> losses;
  for (int rep = 0; rep < 4; ++rep)
    for (int i = 0; i < 4; ++i) losses.push_back(tr.step(b16(d.x, i), b16(d.y, i)));
  EXPECT_TRUE(all_finite(losses));
  EXPECT_LT(mean(losses, 12, 16), mean(losses, 0, 4));
  nn::Model trained = tr.model();
  const Tensor preds = trained.predict(b16(d.x, 0), 16);
  EXPECT_EQ(preds.shape(), (Shape{16, 3}));
  EXPECT_TRUE(all_finite(flat(preds)));
}

TEST(Trainer, MaskedOutputDoesNotTrainWhateverItsTarget) {
  // Targets that differ by 100 on every masked cell and nowhere else end with
  // identical weights: a zero weight removes the term and its gradient
  // exactly. The unmasked control shows the test can tell.
  ThreadsGuard threads;
  set_num_threads(1);
  const Data d = make_regression();
  Tensor mask = Tensor::empty(d.y.shape());
  Tensor y_far = d.y.clone();
  std::mt19937 gen(2);
  std::bernoulli_distribution keep(0.4);
  for (int64_t i = 0; i < mask.numel(); ++i) {
    mask.data<float>()[i] = keep(gen) ? 1.0f : 0.0f;
    y_far.data<float>()[i] += 100.0f * (1.0f - mask.data<float>()[i]);
  }
  auto final_preds = [&](const Tensor& y, int64_t loss_mask, const Tensor& w) {
    nn::Model m = build_regression();
    manual_seed(1);
    Trainer tr(m, batch(16, loss_mask));
    for (int i = 0; i < 4; ++i) tr.step(b16(d.x, i), b16(y, i), w.defined() ? b16(w, i) : Tensor{});
    return flat(tr.model().predict(b16(d.x, 0), 16));
  };
  EXPECT_EQ(final_preds(d.y, 3, mask), final_preds(y_far, 3, mask));
  EXPECT_NE(final_preds(d.y, 0, Tensor{}), final_preds(y_far, 0, Tensor{}));
}

TEST(Trainer, PerSampleWeightsAcceptedWithLossMaskOne) {
  ThreadsGuard threads;
  set_num_threads(2);
  const Data d = make_regression();
  nn::Model m = build_regression();
  Trainer tr(m, batch(16, 1));
  std::vector<float> w(16);
  for (int i = 0; i < 16; ++i) w[size_t(i)] = i % 2 ? 0.5f : 1.0f;
  // A vector of length batch.
  const float l = tr.step(b16(d.x, 0), b16(d.y, 0), Tensor::from_vector(w, Shape{16}));
  EXPECT_TRUE(std::isfinite(l));
  // A weight of zero everywhere leaves nothing to fit.
  EXPECT_EQ(tr.eval(b16(d.x, 0), b16(d.y, 0), Tensor::zeros(Shape{16})), 0.0f);
  // {batch, 1} too.
  EXPECT_TRUE(std::isfinite(tr.step(b16(d.x, 1), b16(d.y, 1), Tensor::from_vector(w, Shape{16, 1}))));
}

TEST(Trainer, LossWeightsRefusedWhereTheyCannotApply) {
  ThreadsGuard threads;
  set_num_threads(2);
  const Data d = make_regression();
  const Tensor x = b16(d.x, 0), y = b16(d.y, 0);
  nn::Model m = build_regression();
  // A width that is neither 1 nor the number of outputs.
  EXPECT_TRUE(has_words(message_of<ValueError>([&] { Trainer tr(m, batch(16, 2)); }),
                        {"loss_mask", "one weight per output"}));
  {  // weights handed to a trainer built without them
    Trainer tr(m, batch(16));
    EXPECT_TRUE(has_words(message_of<ValueError>([&] { tr.step(x, y, Tensor::full(Shape{16, 3}, 1.0f)); }),
                          {"without loss_mask"}));
  }
  {  // weights of the wrong shape
    Trainer tr(m, batch(16, 3));
    EXPECT_TRUE(has_words(message_of<ShapeError>([&] { tr.step(x, y, Tensor::full(Shape{16, 2}, 1.0f)); }),
                          {"{16, 3}"}));
  }
  // Only mean squared error takes weights.
  nn::Model mc = build_regression(1, 3, "categorical_crossentropy");
  EXPECT_TRUE(has_words(message_of<ValueError>([&] { Trainer tr(mc, batch(16, 3)); }), {"mse"}));
}

// The seed's "ggml_fit refuses sample_weight on a functional model" is moot
// (there is no functional model, and fit had swallowed the argument in R's
// `...`). The C++ equivalent: Sequential::fit takes one weight per row, and a
// per-output matrix {rows, outputs} is refused, pointing at the Trainer's
// loss_mask.
TEST(Trainer, FitRefusesPerOutputSampleWeight) {
  const Data d = make_regression();
  nn::Model m = build_regression();
  nn::FitOptions f;
  f.batch_size = 16;
  f.verbose = 0;
  f.sample_weight = Tensor::full(Shape{64, 3}, 1.0f);
  EXPECT_TRUE(has_words(message_of<ValueError>([&] { m.fit(d.x, d.y, f); }), {"loss_mask"}));
}

// The seed's regression: a predict with a model handed out by model() must
// neither crash nor change the losses and final weights of the run.
TEST(Trainer, PredictOnHandedOutModelBetweenStepsLeavesTraining) {
  ThreadsGuard threads;
  set_num_threads(1);
  const Data d = make_regression();
  auto run = [&](bool with_predict, std::vector<float>& losses) {
    nn::Model m = build_regression();
    manual_seed(1);
    Trainer tr(m, batch(16));
    for (int k = 0; k < 8; ++k) {
      losses.push_back(tr.step(b16(d.x, k), b16(d.y, k)));
      if (with_predict && k % 2 == 1) tr.model().predict(b16(d.x, 0), 16);
    }
    return flat(tr.model().predict(b16(d.x, 0), 16));
  };
  std::vector<float> plain_losses, mixed_losses;
  const std::vector<float> plain = run(false, plain_losses);
  const std::vector<float> mixed = run(true, mixed_losses);
  EXPECT_EQ(mixed_losses, plain_losses);
  EXPECT_EQ(mixed, plain);
}

TEST(Trainer, PredictAgreesWithTheHandedOutModel) {
  // Forty rows against a batch of sixteen: the last batch is padded and trimmed.
  ThreadsGuard threads;
  set_num_threads(1);
  const Data d = make_regression();
  nn::Model m = build_regression();
  Trainer tr(m, batch(16));
  for (int i = 0; i < 4; ++i) tr.step(b16(d.x, i), b16(d.y, i));
  const Tensor x40 = d.x.rows(0, 40);
  const Tensor p = tr.predict(x40);
  EXPECT_EQ(p.shape(), (Shape{40, 3}));
  EXPECT_EQ(flat(p), flat(tr.model().predict(x40, 16)));
}

TEST(Trainer, PredictTakesFewerRowsThanABatch) {
  const Data d = make_regression();
  nn::Model m = build_regression();
  Trainer tr(m, batch(16));
  tr.step(b16(d.x, 0), b16(d.y, 0));
  const Tensor x5 = d.x.rows(0, 5);
  const Tensor p = tr.predict(x5);
  EXPECT_EQ(p.shape(), (Shape{5, 3}));
  EXPECT_EQ(flat(p), flat(tr.model().predict(x5, 5)));
  EXPECT_EQ(tr.predict(d.x.rows(0, 1)).shape(), (Shape{1, 3}));
  // C++: the caller-memory form, all rows in one batch.
  Tensor out = Tensor::empty(Shape{5, 3});
  tr.predict(x5, out);
  EXPECT_EQ(flat(out), flat(p));
}

TEST(Trainer, PredictReadsTheCurrentWeights) {
  ThreadsGuard threads;
  set_num_threads(1);
  const Data d = make_regression();
  nn::Model m = build_regression();
  Trainer tr(m, batch(16));
  const Tensor x = b16(d.x, 0), y = b16(d.y, 0);
  const std::vector<float> p0 = flat(tr.predict(x));
  tr.step(x, y);
  const std::vector<float> p1 = flat(tr.predict(x));
  tr.step(x, y);
  const std::vector<float> p2 = flat(tr.predict(x));
  EXPECT_NE(p0, p1);
  EXPECT_NE(p1, p2);
}

TEST(Trainer, PredictBetweenStepsLeavesTrainingExactly) {
  // Losses at every step and the final weights (read through predictions)
  // match a run without predicts.
  ThreadsGuard threads;
  set_num_threads(1);
  const Data d = make_regression();
  auto run = [&](bool with_predict, std::vector<float>& losses) {
    nn::Model m = build_regression();
    manual_seed(1);
    Trainer tr(m, batch(16, 3));
    for (int k = 0; k < 8; ++k) {
      losses.push_back(tr.step(b16(d.x, k), b16(d.y, k)));
      if (with_predict) tr.predict(d.x.rows(0, 40));
    }
    return flat(tr.predict(b16(d.x, 0)));
  };
  std::vector<float> plain_losses, mixed_losses;
  const std::vector<float> plain = run(false, plain_losses);
  const std::vector<float> mixed = run(true, mixed_losses);
  EXPECT_EQ(mixed_losses, plain_losses);
  EXPECT_EQ(mixed, plain);
}

// The seed's "$predict leaves models handed out by $model() on their
// scheduler" is moot: there is no scheduler object, and model() hands out an
// independent copy rather than a view of the live weights. The C++
// equivalent: a handed-out model and the trainer's predict do not affect each
// other, the handed-out model stays at the weights it was given, and predict
// after free() is refused as in the seed.
TEST(Trainer, HandedOutModelIsIndependentOfTheTrainer) {
  ThreadsGuard threads;
  set_num_threads(1);
  const Data d = make_regression();
  const Tensor x = b16(d.x, 0);
  nn::Model m = build_regression();
  Trainer tr(m, batch(16));
  nn::Model handed = tr.model();
  const std::vector<float> p_handed = flat(handed.predict(x, 16));
  EXPECT_EQ(flat(tr.predict(x)), p_handed);
  tr.step(x, b16(d.y, 0));
  tr.step(x, b16(d.y, 0));
  EXPECT_EQ(flat(handed.predict(x, 16)), p_handed);  // a copy: later steps do not move it
  EXPECT_NE(flat(tr.predict(x)), p_handed);
  // Training the handed-out model does not move the trainer.
  const std::vector<float> p_tr = flat(tr.predict(x));
  handed.optimizer_context(16).step(x, b16(d.y, 0));
  EXPECT_EQ(flat(tr.predict(x)), p_tr);
  tr.free();
  EXPECT_TRUE(has_words(message_of<StateError>([&] { tr.predict(x); }), {"has been freed"}));
  EXPECT_NO_THROW(handed.predict(x, 16));
}

TEST(Trainer, PredictWorksForASequentialModel) {
  ThreadsGuard threads;
  set_num_threads(1);
  const Data d = make_data();
  Sequential m = build_model();
  Trainer tr(m, batch(16));
  tr.step(b16(d.x, 0), b16(d.y, 0));
  EXPECT_EQ(flat(tr.predict(d.x.rows(0, 40))), flat(tr.model().predict(d.x.rows(0, 40), 16)));
}

TEST(Trainer, SnapshotStartsEqualAndStaysPut) {
  ThreadsGuard threads;
  set_num_threads(1);
  const Data d = make_regression();
  const Tensor x = b16(d.x, 0);
  nn::Model m = build_regression();
  nn::Model target = Sequential({4});
  std::vector<float> p_snap;
  {
    Trainer tr(m, batch(16));
    for (int i = 0; i < 2; ++i) tr.step(b16(d.x, i), b16(d.y, i));
    target = tr.snapshot();
    p_snap = flat(target.predict(x, 16));
    EXPECT_EQ(p_snap, flat(tr.predict(x)));
    for (int i = 2; i < 5; ++i) tr.step(b16(d.x, i), b16(d.y, i));
    EXPECT_EQ(flat(target.predict(x, 16)), p_snap);
    EXPECT_NE(flat(tr.predict(x)), p_snap);
    tr.free();
    // It outlives free() ...
    EXPECT_EQ(flat(target.predict(x, 16)), p_snap);
  }
  // ... and the trainer's destruction.
  EXPECT_EQ(flat(target.predict(x, 16)), p_snap);
  target.free();
  EXPECT_NO_THROW(target.free());  // second call is a no-op
  EXPECT_TRUE(has_words(message_of<StateError>([&] { target.predict(x, 16); }), {"has been freed"}));
}

TEST(Trainer, UpdateTargetTauOneCopiesZeroKeepsHalfAverages) {
  ThreadsGuard threads;
  set_num_threads(1);
  const Data d = make_regression();
  const Tensor x = b16(d.x, 0);
  nn::Model m = build_regression();
  Trainer tr(m, batch(16));
  nn::Model target = tr.snapshot();
  for (int i = 0; i < 3; ++i) tr.step(b16(d.x, i), b16(d.y, i));
  const auto old = weight_values(target);
  const auto live = weight_values(tr.model());
  ASSERT_NE(old, live);

  tr.update_target(target, 0.0f);
  EXPECT_EQ(weight_values(target), old);

  tr.update_target(target, 0.5f);
  const auto mid = weight_values(target);
  for (size_t k = 0; k < mid.size(); ++k)
    for (size_t i = 0; i < mid[k].size(); ++i)  // exact: halving is exact in floating point
      ASSERT_EQ(mid[k][i], 0.5f * old[k][i] + 0.5f * live[k][i]) << "weight " << k << " element " << i;

  tr.update_target(target, 1.0f);
  EXPECT_EQ(weight_values(target), live);
  EXPECT_EQ(flat(target.predict(x, 16)), flat(tr.predict(x)));
}

TEST(Trainer, UpdateTargetRefusesATargetThatDoesNotMatch) {
  ThreadsGuard threads;
  set_num_threads(1);
  nn::Model m1 = build_regression(1, 3);
  nn::Model m2 = build_regression(1, 2);  // same names, other shapes
  Trainer tr1(m1, batch(16));
  Trainer tr2(m2, batch(16));
  nn::Model other = tr2.snapshot();
  EXPECT_TRUE(has_words(message_of<ValueError>([&] { tr1.update_target(other); }), {"same weights"}));
  // The same refusal at every tau: tau = 0 returned before the check.
  for (float tau : {0.0f, 0.5f, 1.0f}) {
    SCOPED_TRACE(tau);
    nn::Model fresh = tr2.snapshot();  // a target the trainer has not seen
    const std::string message = message_of<ValueError>([&] { tr1.update_target(fresh, tau); });
    EXPECT_TRUE(has_words(message, {"update_target: the target must have the same weights as the trainer",
                                    "Make it with snapshot()"}))
        << message;
  }
  // The seed refuses a model from $model() ("live snapshot"): moot in C++,
  // where model() and snapshot() both return an independent Sequential with
  // the same weights, so either is a valid target.
  nn::Model handed = tr1.model();
  EXPECT_NO_THROW(tr1.update_target(handed));
  nn::Model own = tr1.snapshot();
  EXPECT_TRUE(has_words(message_of<ValueError>([&] { tr1.update_target(own, 2.0f); }), {"[0, 1]"}));
  EXPECT_TRUE(has_words(message_of<ValueError>([&] { tr1.update_target(own, -0.5f); }), {"[0, 1]"}));
  EXPECT_TRUE(has_words(message_of<ValueError>([&] { tr1.update_target(own, std::nanf("")); }), {"[0, 1]"}));
  own.free();
  EXPECT_TRUE(has_words(message_of<StateError>([&] { tr1.update_target(own); }), {"freed"}));
  other.free();
}

TEST(Trainer, SequentialModelSnapshotsAndUpdatesToo) {
  ThreadsGuard threads;
  set_num_threads(1);
  const Data d = make_data();
  const Tensor x = b16(d.x, 0);
  Sequential m = build_model();
  Trainer tr(m, batch(16));
  nn::Model target = tr.snapshot();
  const std::vector<float> p0 = flat(target.predict(x, 16));
  tr.step(x, b16(d.y, 0));
  EXPECT_EQ(flat(target.predict(x, 16)), p0);
  tr.update_target(target);
  EXPECT_EQ(flat(target.predict(x, 16)), flat(tr.predict(x)));
}

TEST(Trainer, SnapshotAndReleaseLeaveTheTrainersWeightsAlone) {
  ThreadsGuard threads;
  set_num_threads(1);
  const Data d = make_regression();
  const Tensor x = b16(d.x, 0);
  nn::Model m = build_regression();
  Trainer tr(m, batch(16));
  for (int i = 0; i < 2; ++i) tr.step(b16(d.x, i), b16(d.y, i));
  const std::vector<nn::Weight> own = tr.weights();  // the trainer's own tensors
  std::vector<std::vector<float>> before;
  for (const nn::Weight& w : own) before.push_back(w.value.to_vector());
  nn::Model target = tr.snapshot();
  // The copy is equal in value but distinct in memory from the trainer's weights.
  EXPECT_EQ(weight_values(target), before);
  const std::vector<nn::Weight> copied = target.weights();
  ASSERT_EQ(copied.size(), own.size());
  for (size_t i = 0; i < own.size(); ++i) {
    EXPECT_EQ(copied[i].name, own[i].name);
    EXPECT_NE(copied[i].value.raw(), own[i].value.raw()) << own[i].name;
  }
  EXPECT_EQ(tr.weights()[0].value.raw(), own[0].value.raw());  // weights() is a view, not a copy
  // Writing to the snapshot leaves the trainer alone.
  Tensor(copied[0].value).fill(123.0f);
  EXPECT_EQ(own[0].value.to_vector(), before[0]);
  target.free();
  for (size_t i = 0; i < own.size(); ++i) EXPECT_EQ(own[i].value.to_vector(), before[i]) << own[i].name;
  EXPECT_TRUE(has_words(message_of<StateError>([&] { target.predict(x, 16); }), {"released"}));
  // And training goes on as if nothing happened.
  EXPECT_TRUE(std::isfinite(tr.step(x, b16(d.y, 0))));
}

// The seed's "a trainer on a loaded model predicts from the trained weights",
// every path out of the trainer included (predict, snapshot, model(), and a
// second save and load).
TEST(Trainer, OnALoadedModel) {
  ThreadsGuard threads;
  set_num_threads(1);
  const Data d = make_regression();
  const Tensor x = b16(d.x, 0);
  const test_support::TempDir dir("tg_loaded");
  const std::string f0 = dir / "m0.gguf", f1 = dir / "m1.gguf";

  nn::Model m0 = build_regression();
  {
    Trainer tr0(m0, batch(16));
    for (int i = 0; i < 3; ++i) tr0.step(b16(d.x, i), b16(d.y, i));
    io::save_model(tr0.model(), f0);
  }
  nn::Model loaded = io::load_model(f0);
  const Tensor p_saved = loaded.predict(x, 16);

  Trainer tr(loaded, batch(16));
  EXPECT_EQ(flat(tr.predict(x)), flat(p_saved));  // starts from the loaded weights
  for (int i = 0; i < 5; ++i) tr.step(b16(d.x, i), b16(d.y, i));
  const Tensor p_live = tr.predict(x);
  // Predictions that differ after training mean the steps were seen.
  EXPECT_NE(flat(p_live), flat(p_saved));

  // All three paths out of the trainer agree with the live weights.
  nn::Model target = tr.snapshot();
  EXPECT_EQ(flat(target.predict(x, 16)), flat(p_live));
  target.free();
  nn::Model trained = tr.model();
  EXPECT_EQ(flat(trained.predict(x, 16)), flat(p_live));

  // Saved and loaded again, it is the trained net that comes back.
  io::save_model(trained, f1);
  nn::Model reloaded = io::load_model(f1);
  EXPECT_EQ(flat(reloaded.predict(x, 16)), flat(p_live));
}

// ---- what the issue adds ------------------------------------------------------

// Two accumulated steps of 16 rows give the update of one step of 32 rows.
TEST(Trainer, AccumulatedStepsMatchOneLargeStep) {
  ThreadsGuard threads;
  set_num_threads(1);
  const Data d = make_regression();
  nn::Model m = build_regression();
  const auto initial = weight_values(m);
  TrainerOptions o = batch(16);
  o.nbatch_logical = 32;
  Trainer accumulated(m, o);
  Trainer full(m, batch(32));  // identical starting weights: both copy m
  accumulated.step(d.x.rows(0, 16), d.y.rows(0, 16));
  EXPECT_EQ(weight_values(accumulated.model()), initial);  // nothing applied yet
  accumulated.step(d.x.rows(16, 32), d.y.rows(16, 32));
  full.step(d.x.rows(0, 32), d.y.rows(0, 32));
  const auto a = weight_values(accumulated.model()), b = weight_values(full.model());
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_LE(rel_error(a[k], b[k]), 1e-5) << "weight " << k;
    EXPECT_NE(a[k], initial[k]) << "weight " << k;
  }
  EXPECT_EQ(accumulated.n_steps(), 2);  // calls of step, not updates
  EXPECT_EQ(full.n_steps(), 1);
}

TEST(Trainer, ModelPassedInIsUnchangedByTraining) {
  ThreadsGuard threads;
  set_num_threads(1);
  const Data d = make_regression();
  Sequential m = build_bn();  // moving statistics would move too if shared
  const auto before = weight_values(m);
  const std::vector<float> p_before = flat(m.predict(b16(d.x, 0), 16));
  {
    Trainer tr(m, batch(16));
    for (int i = 0; i < 4; ++i) tr.step(b16(d.x, i), b16(d.y, i));
    tr.calibrate_bn(d.x);
    EXPECT_NE(weight_values(tr.model()), before);
    EXPECT_EQ(weight_values(m), before);
  }
  EXPECT_EQ(weight_values(m), before);
  EXPECT_EQ(flat(m.predict(b16(d.x, 0), 16)), p_before);
}

// model() is valid after the trainer is destroyed, carries its weights and
// starts with fresh optimizer state (its first step is a first Adam step).
TEST(Trainer, ModelOutlivesTheTrainerWithFreshOptimizerState) {
  ThreadsGuard threads;
  set_num_threads(1);
  const Data d = make_regression();
  const Tensor x = b16(d.x, 0), y = b16(d.y, 0);
  nn::Model m = build_regression();
  nn::Model handed = Sequential({4});
  std::vector<float> p_trained;
  {
    Trainer tr(m, batch(16));
    for (int i = 0; i < 3; ++i) tr.step(b16(d.x, i), b16(d.y, i));
    handed = tr.model();
    p_trained = flat(tr.predict(x));
  }
  ASSERT_TRUE(handed.compiled());
  EXPECT_EQ(flat(handed.predict(x, 16)), p_trained);
  // Fresh state: a step on the handed-out model equals a step from a clone of
  // it (a new optimizer), bit for bit.
  nn::Model twin = handed.clone();
  const float l1 = handed.optimizer_context(16).step(x, y).loss;
  const float l2 = twin.optimizer_context(16).step(x, y).loss;
  EXPECT_EQ(l1, l2);
  EXPECT_EQ(weight_values(handed), weight_values(twin));
}

// Batch-norm moving statistics are copied whole by update_target, even with
// tau 0.5, while the other weights are averaged.
TEST(Trainer, UpdateTargetCopiesMovingStatisticsWhole) {
  ThreadsGuard threads;
  set_num_threads(1);
  const Data d = make_regression();
  Sequential m = build_bn();
  Trainer tr(m, batch(16));
  nn::Model target = tr.snapshot();
  for (int i = 0; i < 3; ++i) tr.step(b16(d.x, i), b16(d.y, i));
  const std::vector<nn::Weight> ws = target.weights();
  const auto old = weight_values(target);
  const auto live = weight_values(tr.model());
  tr.update_target(target, 0.5f);
  const auto mid = weight_values(target);
  int moving = 0;
  for (size_t k = 0; k < mid.size(); ++k) {
    const bool stat = ws[k].name.find("moving_") != std::string::npos;
    EXPECT_EQ(stat, !ws[k].averaged) << ws[k].name;
    ASSERT_NE(old[k], live[k]) << ws[k].name;  // the test can tell copied from averaged
    if (stat) {
      ++moving;
      EXPECT_EQ(mid[k], live[k]) << ws[k].name;
    } else {
      for (size_t i = 0; i < mid[k].size(); ++i)
        ASSERT_EQ(mid[k][i], 0.5f * old[k][i] + 0.5f * live[k][i]) << ws[k].name << " element " << i;
    }
  }
  EXPECT_EQ(moving, 2);
  tr.update_target(target, 1.0f);
  EXPECT_EQ(weight_values(target), live);
}

// Regression test (fixed bug): with tau = 0 the seed's update_target returns at once and
// leaves the whole target as it was ("tau = 0 keeps"); tensorgrad copies the
// batch-norm moving statistics even then (Trainer::update_target copies every
// non-averaged weight whatever tau is), so tau = 0 changes the target.
TEST(Trainer, UpdateTargetTauZeroKeepsMovingStatistics) {
  ThreadsGuard threads;
  set_num_threads(1);
  const Data d = make_regression();
  Sequential m = build_bn();
  Trainer tr(m, batch(16));
  nn::Model target = tr.snapshot();
  for (int i = 0; i < 3; ++i) tr.step(b16(d.x, i), b16(d.y, i));
  const auto old = weight_values(target);
  tr.update_target(target, 0.0f);
  EXPECT_EQ(weight_values(target), old);
}

TEST(Trainer, UpdateTargetRefusesOtherNamesShapesAndFreedTargets) {
  ThreadsGuard threads;
  set_num_threads(1);
  nn::Model m = build_regression();
  Trainer tr(m, batch(16));
  // Same shapes, other names.
  Sequential renamed({4});
  {
    Dense a(8, "relu"), b(3);
    a.set_name("other");
    b.set_name("other_1");
    renamed.add(a);
    renamed.add(b);
  }
  EXPECT_TRUE(has_words(message_of<ValueError>([&] { tr.update_target(renamed); }), {"same weights", "other"}));
  // Same names, other shapes.
  nn::Model wider = build_regression(1, 4);
  EXPECT_TRUE(has_words(message_of<ValueError>([&] { tr.update_target(wider); }), {"same weights"}));
  // Fewer weights.
  nn::clear_session();
  Sequential shorter({4});
  shorter.add(Dense(8, "relu"));
  EXPECT_TRUE(has_words(message_of<ValueError>([&] { tr.update_target(shorter); }), {"same weights"}));
  // A freed target, after a successful update with it (cached pairs).
  nn::Model target = tr.snapshot();
  tr.update_target(target, 0.5f);
  target.free();
  EXPECT_TRUE(has_words(message_of<StateError>([&] { tr.update_target(target, 0.5f); }), {"freed"}));
  // A new snapshot in the same variable is a new target.
  const Data d = make_regression();
  tr.step(b16(d.x, 0), b16(d.y, 0));
  target = tr.snapshot();
  tr.step(b16(d.x, 1), b16(d.y, 1));
  tr.update_target(target, 1.0f);
  EXPECT_EQ(weight_values(target), weight_values(tr.model()));
}

// predict (both forms), model() and snapshot() between steps never disturb
// training: losses and predictions bit-identical to a run without them, on a
// model with batch normalization and dropout (the state a careless predict
// could disturb).
TEST(Trainer, PredictModelAndSnapshotBetweenStepsNeverDisturbTraining) {
  ThreadsGuard threads;
  set_num_threads(1);
  const Data d = make_regression();
  auto run = [&](bool disturb, std::vector<float>& losses) {
    Sequential m = build_bn(3, 0.25f);
    manual_seed(5);
    Trainer tr(m, batch(16));
    Tensor one = Tensor::empty(Shape{1, 3});
    for (int k = 0; k < 8; ++k) {
      losses.push_back(tr.step(b16(d.x, k), b16(d.y, k)));
      if (disturb) {
        tr.predict(d.x.rows(0, 40));
        tr.predict(d.x.rows(3, 4), one);
        nn::Model handed = tr.model();
        handed.predict(d.x, 32);
        nn::Model snap = tr.snapshot();
        snap.predict(d.x.rows(0, 5), 5);
        tr.eval(b16(d.x, 2), b16(d.y, 2));
      }
    }
    return flat(tr.predict(b16(d.x, 0)));
  };
  std::vector<float> plain_losses, mixed_losses;
  const std::vector<float> plain = run(false, plain_losses);
  const std::vector<float> mixed = run(true, mixed_losses);
  EXPECT_EQ(mixed_losses, plain_losses);
  EXPECT_EQ(mixed, plain);
}

// Batch-norm moving statistics move during trainer steps (the seeds' ggml
// steps never update them): after one step, moving = momentum * initial +
// (1 - momentum) * the batch's statistics of the Dense output, by hand.
TEST(Trainer, BatchNormMovingStatisticsMoveDuringSteps) {
  ThreadsGuard threads;
  set_num_threads(1);
  const Data d = make_regression();
  Sequential m = build_bn();  // Dense(8) -> BatchNormalization(momentum 0.9) -> ...
  const std::vector<nn::Weight> w0 = m.weights();
  ASSERT_EQ(w0[0].name, "dense/kernel");
  ASSERT_EQ(w0[4].name, "batch_normalization/moving_mean");
  ASSERT_EQ(w0[5].name, "batch_normalization/moving_variance");
  const float* kernel = w0[0].value.data<float>();
  const float* bias = w0[1].value.data<float>();
  Trainer tr(m, batch(16));
  const Tensor x = b16(d.x, 0);
  tr.step(x, b16(d.y, 0));
  const auto after = weight_values(tr.model());
  for (int c = 0; c < 8; ++c) {
    double s = 0, s2 = 0;
    for (int r = 0; r < 16; ++r) {
      double h = bias[c];
      for (int j = 0; j < 4; ++j) h += double(x.data<float>()[r * 4 + j]) * kernel[j * 8 + c];
      s += h;
      s2 += h * h;
    }
    const double mu = s / 16, var = s2 / 16 - mu * mu;  // biased, as the layer normalizes with
    EXPECT_NEAR(after[4][size_t(c)], 0.9 * 0.0 + 0.1 * mu, 1e-5) << "moving_mean " << c;
    EXPECT_NEAR(after[5][size_t(c)], 0.9 * 1.0 + 0.1 * var, 1e-5) << "moving_variance " << c;
  }
  // And they keep moving.
  tr.step(b16(d.x, 1), b16(d.y, 1));
  const auto later = weight_values(tr.model());
  EXPECT_NE(later[4], after[4]);
  EXPECT_NE(later[5], after[5]);
}

// Dropout masks differ between steps; they come from the layers' seeds
// (drawn when the layers were made) and the step alone, so a trainer made
// after another manual_seed reproduces the same losses, and a model built
// after another seed (the same weights) trains with other masks.
TEST(Trainer, DropoutMasksDifferBetweenStepsAndSeedReproduces) {
  ThreadsGuard threads;
  set_num_threads(1);
  const Data d = make_regression();
  manual_seed(9);
  nn::clear_session();
  Sequential m({4});
  m.add(Dense(32, "relu"));
  m.add(Dropout(0.5f));
  m.add(Dense(3));
  m.compile(OptimizerSpec::adam(), "mse");
  {
    // Accumulation: the first two steps run on identical weights, so their
    // losses differ only through the dropout masks.
    TrainerOptions o = batch(16);
    o.nbatch_logical = 32;
    Trainer tr(m, o);
    const float l1 = tr.step(b16(d.x, 0), b16(d.y, 0));
    const float l2 = tr.step(b16(d.x, 0), b16(d.y, 0));
    EXPECT_NE(l1, l2);
  }
  auto losses_after_seed = [&](uint64_t seed) {
    manual_seed(seed);
    Trainer tr(m, batch(16));
    std::vector<float> out;
    for (int i = 0; i < 6; ++i) out.push_back(tr.step(b16(d.x, i), b16(d.y, i)));
    return out;
  };
  const std::vector<float> a = losses_after_seed(21);
  EXPECT_EQ(losses_after_seed(21), a);
  EXPECT_EQ(losses_after_seed(22), a);
  manual_seed(10);
  Sequential other({4});
  other.add(Dense(32, "relu"));
  other.add(Dropout(0.5f));
  other.add(Dense(3));
  other.compile(OptimizerSpec::adam(), "mse");
  other.set_weights(m.get_weights());
  Trainer tr(other, batch(16));
  std::vector<float> b;
  for (int i = 0; i < 6; ++i) b.push_back(tr.step(b16(d.x, i), b16(d.y, i)));
  EXPECT_NE(b, a);
}

// eval() is in inference mode by default; EvalOptions::training runs the
// step's forward pass (dropout, batch statistics) and changes nothing: the
// weights, the moving statistics, the optimizer and the dropout stream are as
// before, so the next step reports the same loss (same masks) and training
// goes on exactly as in a trainer never evaluated in training mode.
TEST(Trainer, EvalInTrainingModeIsTheStepsForwardAndChangesNothing) {
  ThreadsGuard threads;
  set_num_threads(1);
  const Data d = make_regression();
  const EvalOptions training{.training = true};
  for (float rate : {0.0f, 0.5f}) {  // batch statistics alone, then with dropout
    SCOPED_TRACE(rate);
    const Sequential m = build_bn(1, rate);  // Dense(8) -> BatchNormalization -> relu -> [Dropout] -> Dense(3)
    auto make = [&] {
      manual_seed(5);  // (the masks come from the layers' seeds and the step, not from this)
      return Trainer(m, batch(16));
    };
    Trainer tr = make();
    const Tensor x = b16(d.x, 0), y = b16(d.y, 0);
    const auto before = weight_values(tr.model());  // moving statistics included
    const float inference = tr.eval(x, y);
    EXPECT_NEAR(inference, tr.snapshot().evaluate(x, y, 16).at("loss"), 1e-6);  // the default: inference
    const float forward = tr.eval(x, y, {}, training);
    EXPECT_NE(forward, inference);
    EXPECT_EQ(tr.eval(x, y, {}, training), forward);  // the dropout stream did not move
    EXPECT_EQ(tr.eval(x, y), inference);
    EXPECT_EQ(weight_values(tr.model()), before);
    EXPECT_EQ(tr.n_steps(), 0);
    EXPECT_EQ(tr.step(x, y), forward);  // the training graph's forward on the same weights and masks
    Trainer reference = make();
    EXPECT_EQ(reference.step(x, y), forward);
    for (int i = 1; i < 4; ++i) {
      tr.eval(b16(d.x, i), b16(d.y, i), {}, training);
      EXPECT_EQ(tr.step(b16(d.x, i), b16(d.y, i)), reference.step(b16(d.x, i), b16(d.y, i))) << i;
    }
    EXPECT_EQ(weight_values(tr.model()), weight_values(reference.model()));
  }
}

// Training-mode eval by hand: an identity Dense, then Dropout(0.5), MSE
// against zeros on rows of ones: each kept element is 2 (scaled by 1 / (1 -
// rate)), each dropped one 0, so the loss is 4 * (kept elements) / 64; in
// inference mode it is 1.
TEST(Trainer, EvalInTrainingModeDropsAndScalesByHand) {
  manual_seed(3);
  nn::clear_session();
  Sequential m({4});
  m.add(Dense(4, "linear", false));
  m.add(Dropout(0.5f));
  m.compile(OptimizerSpec::sgd(0.1f), "mse");
  std::vector<float> identity(16, 0.0f);
  for (int i = 0; i < 4; ++i) identity[size_t(i * 5)] = 1.0f;
  m.set_weights({Tensor::from_vector(identity, Shape{4, 4})});
  Trainer tr(m, batch(16));
  const Tensor x = Tensor::full(Shape{16, 4}, 1.0f), y = Tensor::zeros(Shape{16, 4});
  EXPECT_EQ(tr.eval(x, y), 1.0f);
  const float loss = tr.eval(x, y, {}, EvalOptions{.training = true});
  const float kept = loss * 64.0f / 4.0f;
  EXPECT_EQ(kept, std::round(kept)) << loss;
  EXPECT_GT(kept, 10.0f) << loss;  // about half of 64 (the chance of 10 or fewer is below 1e-6)
  EXPECT_LT(kept, 54.0f) << loss;
}

// A thread count set after construction applies from the next step (the
// pool's workers start: counted in /proc/self/task), and the step still
// computes what it computes on one thread.
TEST(Trainer, ThreadCountChangedAfterConstructionAppliesFromTheNextStep) {
  ThreadsGuard threads;
  Tensor x = Tensor::empty(Shape{64, 64});
  Tensor y = Tensor::empty(Shape{64, 8});
  {
    std::mt19937 gen(4);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = u(gen);
    for (int64_t i = 0; i < y.numel(); ++i) y.data<float>()[i] = u(gen);
  }
  auto build = [] {
    manual_seed(4);
    nn::clear_session();
    Sequential m({64});  // big enough for the pool (over a million flops per step)
    m.add(Dense(256, "relu"));
    m.add(Dense(256, "relu"));
    m.add(Dense(8));
    m.compile(OptimizerSpec::adam(), "mse");
    return m;
  };
  Sequential m = build();
  set_num_threads(1);
  std::vector<float> reference;
  {
    Trainer tr(m, batch(64));
    for (int i = 0; i < 3; ++i) reference.push_back(tr.step(x, y));
  }
  Trainer tr(m, batch(64));
  const float l1 = tr.step(x, y);
  const int t1 = process_threads();
  set_num_threads(3);
  const float l3 = tr.step(x, y);
  const int t3 = process_threads();
  set_num_threads(2);
  const float l2 = tr.step(x, y);
  // Linux: one entry per thread of the process. The workers are oneTBB's,
  // started on first use and kept (sleeping) after a pool shrinks, so only
  // their start is asserted, in a process that ran no test before this one
  // (as under ctest, one test a process).
  const bool alone = ::testing::UnitTest::GetInstance()->test_to_run_count() == 1;
  if (std::filesystem::exists("/proc/self/task") && alone)
    EXPECT_GE(t3 - t1, 2) << "threads: " << t1 << " at 1, " << t3 << " at 3";
  EXPECT_EQ(l1, reference[0]);
  EXPECT_NEAR(l3, reference[1], 1e-5 * std::fabs(reference[1]));
  EXPECT_NEAR(l2, reference[2], 1e-4 * std::fabs(reference[2]));
}

// The logging hook receives the warning a non-finite loss produces (SGD with
// lr 1e30 makes the loss overflow), once; the default handler is restored.
TEST(Trainer, NonFiniteLossIsLoggedThroughTheHandler) {
  struct HandlerGuard {
    ~HandlerGuard() { set_log_handler(nullptr); }
  } guard;
  std::vector<std::pair<LogLevel, std::string>> logged;
  set_log_handler([&](LogLevel level, const std::string& message) { logged.emplace_back(level, message); });
  const Data d = make_regression();
  manual_seed(1);
  nn::clear_session();
  Sequential m({4});
  m.add(Dense(8, "relu"));
  m.add(Dense(3));
  m.compile(OptimizerSpec::sgd(1e30f), "mse");
  Trainer tr(m, batch(16));
  std::vector<float> losses;
  for (int i = 0; i < 4; ++i) losses.push_back(tr.step(b16(d.x, i), b16(d.y, i)));
  EXPECT_TRUE(std::isfinite(losses[0]));
  EXPECT_FALSE(all_finite(losses));
  ASSERT_EQ(logged.size(), 1u);
  EXPECT_EQ(logged[0].first, LogLevel::Warning);
  EXPECT_TRUE(has_words(logged[0].second, {"loss"}));
}

// Weighted MSE is sum(w * (pred - y)^2) / (batch * outputs), by hand, for
// loss_mask = outputs and loss_mask = 1.
TEST(Trainer, WeightedMseMatchesTheFormula) {
  ThreadsGuard threads;
  set_num_threads(1);
  const Data d = make_regression();
  const Tensor x = b16(d.x, 0), y = b16(d.y, 0);
  nn::Model m = build_regression();
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> u(0.0f, 2.0f);
  Tensor w_out = Tensor::empty(Shape{16, 3}), w_row = Tensor::empty(Shape{16});
  for (int64_t i = 0; i < w_out.numel(); ++i) w_out.data<float>()[i] = u(gen);
  for (int64_t i = 0; i < w_row.numel(); ++i) w_row.data<float>()[i] = u(gen);
  for (int64_t mask : {int64_t(3), int64_t(1)}) {
    Trainer tr(m, batch(16, mask));
    const Tensor& w = mask == 3 ? w_out : w_row;
    const std::vector<float> p = flat(tr.predict(x));
    double sum = 0;
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 3; ++c) {
        const double e = double(p[size_t(r * 3 + c)]) - double(y.data<float>()[r * 3 + c]);
        sum += double(mask == 3 ? w.data<float>()[r * 3 + c] : w.data<float>()[r]) * e * e;
      }
    const double want = sum / (16.0 * 3.0);
    EXPECT_NEAR(tr.eval(x, y, w), want, 1e-5 * want) << "loss_mask " << mask;
    // No weights means all ones: plain MSE.
    EXPECT_EQ(tr.eval(x, y), Trainer(m, batch(16)).eval(x, y)) << "loss_mask " << mask;
    EXPECT_NEAR(tr.step(x, y, w), want, 1e-5 * want) << "loss_mask " << mask;  // the loss before the update
  }
}

// weight_decay in TrainerOptions overrides the compiled one: one SGD step on a
// linear 4-3 model, p <- p * (1 - lr * decay) - lr * grad, by hand.
TEST(Trainer, WeightDecayOptionOverridesTheCompiledOne) {
  ThreadsGuard threads;
  set_num_threads(1);
  const Data d = make_regression();
  const Tensor x = b16(d.x, 0), y = b16(d.y, 0);
  manual_seed(6);
  nn::clear_session();
  Sequential m({4});
  m.add(Dense(3));
  const float lr = 0.1f;
  m.compile(OptimizerSpec::sgd(lr, 0.5f), "mse");
  const std::vector<nn::Weight> w0 = m.weights();
  const float* k0 = w0[0].value.data<float>();  // {4, 3}
  const float* b0 = w0[1].value.data<float>();  // {3}
  // dL/dpred = 2 (pred - y) / (batch * outputs)
  double gk[4][3] = {}, gb[3] = {};
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 3; ++c) {
      double pred = b0[c];
      for (int j = 0; j < 4; ++j) pred += double(x.data<float>()[r * 4 + j]) * k0[j * 3 + c];
      const double g = 2.0 * (pred - y.data<float>()[r * 3 + c]) / 48.0;
      gb[c] += g;
      for (int j = 0; j < 4; ++j) gk[j][c] += double(x.data<float>()[r * 4 + j]) * g;
    }
  for (std::optional<float> decay : {std::optional<float>{}, std::optional<float>{0.2f}, std::optional<float>{0.0f}}) {
    TrainerOptions o = batch(16);
    o.weight_decay = decay;
    Trainer tr(m, o);
    tr.step(x, y);
    const auto after = weight_values(tr.model());
    const double keep = 1.0 - double(lr) * double(decay.value_or(0.5f));
    for (int j = 0; j < 4; ++j)
      for (int c = 0; c < 3; ++c)
        EXPECT_NEAR(after[0][size_t(j * 3 + c)], k0[j * 3 + c] * keep - lr * gk[j][c], 1e-6)
            << "decay " << decay.value_or(-1) << " kernel " << j << "," << c;
    for (int c = 0; c < 3; ++c)
      EXPECT_NEAR(after[1][size_t(c)], b0[c] * keep - lr * gb[c], 1e-6) << "decay " << decay.value_or(-1);
  }
  TrainerOptions bad = batch(16);
  bad.weight_decay = 1.5f;
  EXPECT_TRUE(has_words(message_of<ValueError>([&] { Trainer tr(m, bad); }), {"weight_decay", "[0, 1]"}));
  bad.weight_decay = -0.1f;
  EXPECT_TRUE(has_words(message_of<ValueError>([&] { Trainer tr(m, bad); }), {"weight_decay", "[0, 1]"}));
}

TEST(Trainer, FrozenWeightsAreNotDecayed) {
  ThreadsGuard threads;
  set_num_threads(1);
  const Data d = make_regression();
  manual_seed(7);
  nn::clear_session();
  Sequential m({4});
  m.add(Dense(8, "relu"));
  m.add(Dense(3));
  m.layers()[0]->trainable = false;  // takes effect at compile
  m.compile(OptimizerSpec::sgd(0.1f, 0.5f), "mse");
  const auto before = weight_values(m);
  TrainerOptions o = batch(16);
  o.weight_decay = 0.9f;
  Trainer tr(m, o);
  tr.step(b16(d.x, 0), b16(d.y, 0));
  const auto after = weight_values(tr.model());
  EXPECT_EQ(after[0], before[0]);  // dense/kernel: frozen, not decayed
  EXPECT_EQ(after[1], before[1]);  // dense/bias
  EXPECT_NE(after[2], before[2]);  // dense_1/kernel: trained and decayed
}

// Regression test (fixed bug): a moved-from Trainer keeps its context pointer and is not
// marked freed, so a call on it runs on the trainer it was moved into
// (silently stepping that one; a use-after-free once that one is destroyed).
// Expected: a moved-from trainer refuses every call with StateError, as a
// freed one does (DESIGN.md: use after release throws).
TEST(Trainer, MovedFromTrainerRefusesCalls) {
  const Data d = make_regression();
  nn::Model m = build_regression();
  Trainer a(m, batch(16));
  Trainer b(std::move(a));
  EXPECT_TRUE(has_words(message_of<StateError>([&] { a.step(b16(d.x, 0), b16(d.y, 0)); }), {"freed"}));
  EXPECT_EQ(b.n_steps(), 0);
}

// loss_mask with the Huber loss (delta 1), the usual DQN loss: the masked
// elements add nothing; the value is sum(w * huber(pred - y)) / (batch * outputs).
TEST(Trainer, LossMaskWithHuber) {
  nn::clear_session();
  const nn::SymbolicTensor in = nn::Input({2});
  auto d = std::make_shared<Dense>(2, "linear", false);
  nn::Model m(in, (*d)(in));
  d->weights()[0].value.copy_from(Tensor::from_vector(std::vector<float>{1, 0, 0, 1}, Shape{2, 2}));
  m.compile(OptimizerSpec::sgd(0.1f), "huber");
  Trainer tr(m, batch(2, 2));
  const Tensor x = Tensor::from_vector(std::vector<float>{3, 0.5f, -1, 2}, Shape{2, 2});
  const Tensor y = Tensor::zeros(Shape{2, 2});
  const Tensor mask = Tensor::from_vector(std::vector<float>{1, 0, 0, 1}, Shape{2, 2});
  // Kept: pred - y = 3 (huber 3 - 0.5 = 2.5) and 2 (huber 1.5); masked: 0.5 and -1.
  EXPECT_FLOAT_EQ(tr.eval(x, y, mask), (2.5f + 1.5f) / 4);
}
