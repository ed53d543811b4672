// Per-update learning-rate schedules (issue 9), as Keras 3's
// keras.optimizers.schedules: the rate each update uses, computed in the
// update graph from the step counter before its increment (the first update
// uses step 0), against numbers worked out by hand in the comments.
//
// The harness trains one weight w = 1 (Dense(1) without bias, x = 1, y = 0,
// mae): the gradient is exactly 1 while w > 0, so plain SGD moves w by the
// rate itself. Each update's rate is read three ways: learning_rate() before
// the update (the host's formula, Keras' optimizer.learning_rate), the hyper
// tensor's kLr slot after it (what the update read), and the weight's change.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "test_support.h"

using namespace tensorgrad;
using nn::Dense;
using nn::Sequential;
using test_support::throws;

namespace {

Sequential one_weight(const OptimizerSpec& spec) {
  Sequential m({1});
  m.add(Dense(1, "linear", false));
  m.weights()[0].value.fill(1.0f);
  m.compile(spec, "mae");
  return m;
}

const Tensor& x1() {
  static const Tensor x = Tensor::full(Shape{1, 1}, 1.0f);
  return x;
}
const Tensor& y0() {
  static const Tensor y = Tensor::zeros(Shape{1, 1});
  return y;
}

// The rates of `n` plain-SGD updates under `schedule`, starting at step `start`.
std::vector<float> rates_used(const LearningRateSchedule& schedule, int n, int64_t start = 0) {
  Sequential m = one_weight(OptimizerSpec::sgd({.learning_rate_schedule = schedule}));
  OptimizerContext& ctx = m.optimizer_context(1);
  *ctx.state()->step.data<int64_t>() = start;
  std::vector<float> used;
  for (int k = 0; k < n; ++k) {
    const float announced = float(m.learning_rate());
    const float before = m.weights()[0].value.item();
    EXPECT_TRUE(ctx.step(x1(), y0()).updated);
    const float lr = ctx.state()->hyper.data<float>()[kLr];
    EXPECT_EQ(announced, lr) << "update " << k << ": learning_rate() before it differs from the rate it used";
    EXPECT_NEAR(before - m.weights()[0].value.item(), lr, 1e-6) << "update " << k;
    EXPECT_EQ(ctx.state()->iterations(), start + k + 1);
    used.push_back(lr);
  }
  return used;
}

void expect_rates(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_FLOAT_EQ(got[i], want[i]) << "update at step " << i;
}

}  // namespace

// boundaries {2, 4}, values {0.1, 0.05, 0.01}: step <= 2 -> 0.1; 2 < step <= 4 -> 0.05; step > 4 -> 0.01.
// Step 2 sits exactly on a boundary (still 0.1), step 3 is the one after it.
TEST(Schedules, PiecewiseConstantDecayAtAndAfterBoundaries) {
  expect_rates(rates_used(PiecewiseConstantDecay{{2, 4}, {0.1f, 0.05f, 0.01f}}, 7),
               {0.1f, 0.1f, 0.1f, 0.05f, 0.05f, 0.01f, 0.01f});
  // No boundaries: one value for every step (Keras allows it).
  expect_rates(rates_used(PiecewiseConstantDecay{{}, {0.03f}}, 2), {0.03f, 0.03f});
}

// 0.1 * 0.5^(step / 2):
//   step 0: 0.1;  1: 0.1 * 0.5^0.5 = 0.070710678;  2: 0.05;  3: 0.1 * 0.5^1.5 = 0.035355339;  4: 0.025.
// staircase floors the exponent: 0.1, 0.1, 0.05, 0.05, 0.025.
TEST(Schedules, ExponentialDecayAndStaircase) {
  expect_rates(rates_used(ExponentialDecay{.initial_learning_rate = 0.1f, .decay_steps = 2, .decay_rate = 0.5f}, 5),
               {0.1f, 0.070710678f, 0.05f, 0.035355339f, 0.025f});
  expect_rates(rates_used(ExponentialDecay{0.1f, 2, 0.5f, true}, 5), {0.1f, 0.1f, 0.05f, 0.05f, 0.025f});
}

// 0.1 * (0.9 * 0.5 (1 + cos(pi min(step, 4) / 4)) + 0.1), cos(pi/4) = 0.70710678:
//   step 0: 0.1
//   step 1: 0.1 * (0.9 * 0.85355339 + 0.1) = 0.086819805
//   step 2: 0.1 * (0.9 * 0.5 + 0.1)        = 0.055
//   step 3: 0.1 * (0.9 * 0.14644661 + 0.1) = 0.023180195
//   step 4 and after: 0.1 * alpha           = 0.01
TEST(Schedules, CosineDecayEndsAtAlpha) {
  expect_rates(rates_used(CosineDecay{.initial_learning_rate = 0.1f, .decay_steps = 4, .alpha = 0.1f}, 6),
               {0.1f, 0.086819805f, 0.055f, 0.023180195f, 0.01f, 0.01f});
}

// Warm-up from 0 to 0.2 over 4 steps, then the decay from 0.2 over 2 steps with alpha 0.5:
//   steps 0..3: 0.2 * step / 4 = 0, 0.05, 0.1, 0.15
//   step 4 (the first after the warm-up): 0.2 * (0.5 * 1 + 0.5)             = 0.2
//   step 5: 0.2 * (0.5 * 0.5 (1 + cos(pi/2)) + 0.5) = 0.2 * 0.75            = 0.15
//   step 6 and after: 0.2 * 0.5                                             = 0.1
TEST(Schedules, CosineDecayWarmupEdge) {
  expect_rates(rates_used(CosineDecay{.initial_learning_rate = 0.0f,
                                      .decay_steps = 2,
                                      .alpha = 0.5f,
                                      .warmup_target = 0.2f,
                                      .warmup_steps = 4},
                          8),
               {0.0f, 0.05f, 0.1f, 0.15f, 0.2f, 0.15f, 0.1f, 0.1f});
  // Without warmup_target, warmup_steps is unused (as Keras): the plain decay from initial.
  expect_rates(rates_used(CosineDecay{.initial_learning_rate = 0.1f, .decay_steps = 2, .warmup_steps = 4}, 3),
               {0.1f, 0.05f, 0.0f});
}

// first_decay_steps 2, t_mul 2, m_mul 0.5, alpha 0: periods [0, 2), [2, 6), [6, 14), amplitudes 0.1, 0.05, 0.025.
//   step 0: 0.1;  step 1: 0.1 * 0.5 (1 + cos(pi/2)) = 0.05
//   step 2 (first restart): 0.05;  3: 0.025 (1 + cos(pi/4)) = 0.042677670;  4: 0.025;  5: 0.025 (1 - cos(pi/4)) = 0.0073223305
//   step 6 (second restart): 0.025;  7: 0.0125 (1 + cos(pi/8)) = 0.0125 * 1.9238795 = 0.024048494
TEST(Schedules, CosineDecayRestartsWithTMulAndMMul) {
  expect_rates(rates_used(CosineDecayRestarts{.initial_learning_rate = 0.1f, .first_decay_steps = 2, .m_mul = 0.5f}, 8),
               {0.1f, 0.05f, 0.05f, 0.04267767f, 0.025f, 0.0073223305f, 0.025f, 0.024048494f});
  // t_mul 1 repeats the first period; alpha 0.2 is a floor under the cosine:
  //   step 0, 2: 0.1;  step 1, 3: 0.1 * (0.8 * 0.5 + 0.2) = 0.06.
  expect_rates(rates_used(CosineDecayRestarts{0.1f, 2, 1.0f, 1.0f, 0.2f}, 4), {0.1f, 0.06f, 0.1f, 0.06f});
}

// learning_rate_at reports the same numbers on the host, at any step.
TEST(Schedules, LearningRateAtOnTheHost) {
  EXPECT_DOUBLE_EQ(learning_rate_at(PiecewiseConstantDecay{{2, 4}, {0.5f, 0.25f, 0.125f}}, 4), 0.25);
  EXPECT_DOUBLE_EQ(learning_rate_at(PiecewiseConstantDecay{{2, 4}, {0.5f, 0.25f, 0.125f}}, 5), 0.125);
  EXPECT_DOUBLE_EQ(learning_rate_at(ExponentialDecay{0.5f, 10, 0.5f, true}, 29), 0.125);  // 0.5 * 0.5^2
  EXPECT_DOUBLE_EQ(learning_rate_at(CosineDecay{.initial_learning_rate = 0.5f, .decay_steps = 10}, 5), 0.25);
  // 14 is the third restart of {2, t_mul 2}: 2 + 4 + 8; m_mul^3 = 0.125 of 0.5.
  EXPECT_DOUBLE_EQ(learning_rate_at(CosineDecayRestarts{0.5f, 2, 2.0f, 0.5f, 0.0f}, 14), 0.0625);
  EXPECT_TRUE(throws<ValueError>([] { learning_rate_at(ExponentialDecay{0.5f, 10, 0.5f}, -1); }, {"step", ">= 0", "-1"}));
}

// One schedule on every optimizer: ExponentialDecay{0.1, 1, 0.5} gives 0.1, 0.05, 0.025 to the three
// updates; w = 1 and the gradient g = 1 (mae) throughout.
TEST(Schedules, EveryOptimizerReadsTheScheduledRate) {
  const LearningRateSchedule halving = ExponentialDecay{0.1f, 1, 0.5f};
  struct Want {
    const char* name;
    OptimizerSpec spec;
    double w[3];
  };
  OptimizerSpec adamw = OptimizerSpec::adamw(halving, 0.1f);
  const Want wants[] = {
      // w -= lr: 0.9, 0.85, 0.825
      {"SGD", OptimizerSpec::sgd({.learning_rate_schedule = halving}), {0.9, 0.85, 0.825}},
      // PyTorch's buffer b = 0.5 b + g: b = 1, 1.5, 1.75; w -= lr b: 0.9, 0.9 - 0.075 = 0.825, 0.825 - 0.04375 = 0.78125
      {"SGD momentum", OptimizerSpec::sgd({.learning_rate_schedule = halving, .momentum = 0.5f}), {0.9, 0.825, 0.78125}},
      // Bias-corrected moments of a constant g = 1 are 1: w -= lr / (1 + 1e-8), decayed first by (1 - lr 0.1):
      //   1 * 0.99 - 0.1 = 0.89;  0.89 * 0.995 - 0.05 = 0.83555;  0.83555 * 0.9975 - 0.025 = 0.808461125
      {"AdamW", adamw, {0.89, 0.83555, 0.808461125}},
      // Keras' RMSprop (rho 0.9, eps 1e-7 inside the root): v = 0.1, 0.19, 0.271;
      //   w = 1 - 0.1 / sqrt(0.1000001) = 1 - 0.31622761 = 0.68377239
      //   w -= 0.05 / sqrt(0.1900001) = 0.11470784 -> 0.56906456
      //   w -= 0.025 / sqrt(0.2710001) = 0.04802366 -> 0.52104089
      {"RMSprop", OptimizerSpec::rmsprop({.learning_rate_schedule = halving}), {0.68377239, 0.56906456, 0.52104089}},
      // Keras' Adagrad (sums from 0.1, eps 1e-7 inside): s = 1.1, 2.1, 3.1;
      //   w = 1 - 0.1 / sqrt(1.1000001) = 1 - 0.09534625 = 0.90465375
      //   w -= 0.05 / sqrt(2.1000001) = 0.03450328 -> 0.87015047
      //   w -= 0.025 / sqrt(3.1000001) = 0.01419905 -> 0.85595142
      {"Adagrad", OptimizerSpec::adagrad({.learning_rate_schedule = halving}), {0.90465375, 0.87015047, 0.85595142}},
  };
  for (const Want& want : wants) {
    SCOPED_TRACE(want.name);
    Sequential m = one_weight(want.spec);
    OptimizerContext& ctx = m.optimizer_context(1);
    for (int k = 0; k < 3; ++k) {
      ctx.step(x1(), y0());
      EXPECT_NEAR(m.weights()[0].value.item(), want.w[k], 2e-7) << "update " << k + 1;
    }
    EXPECT_FLOAT_EQ(ctx.state()->hyper.data<float>()[kLr], 0.025f);
    EXPECT_FLOAT_EQ(float(m.learning_rate()), 0.0125f);  // the next update's, step 3: 0.1 * 0.5^3
  }
}

// With gradient accumulation a step is an update, not a micro-batch:
// PiecewiseConstantDecay{{1}, {0.1, 0.05}} gives 0.1 to the first two updates
// (steps 0 and 1) and 0.05 to the third, whatever the period.
TEST(Schedules, StepsCountUpdatesUnderAccumulation) {
  Sequential m = one_weight(OptimizerSpec::sgd({.learning_rate_schedule = PiecewiseConstantDecay{{1}, {0.1f, 0.05f}}}));
  OptimizerContext& ctx = m.optimizer_context(1, 2);
  const float want[] = {0.9f, 0.8f, 0.75f};  // w -= 0.1, 0.1, 0.05
  for (int k = 0; k < 3; ++k) {
    EXPECT_FALSE(ctx.step(x1(), y0()).updated);
    EXPECT_TRUE(ctx.step(x1(), y0()).updated);
    EXPECT_NEAR(m.weights()[0].value.item(), want[k], 1e-6) << "update " << k + 1;
  }
  EXPECT_EQ(ctx.state()->iterations(), 3);
}

// Steps past 2^24, where a float32 counter no longer tells 2^24 + 1 from 2^24 + 2:
// boundary 2^24 + 1 = 16777217; steps 16777216 and 16777217 get 0.1, step 16777218 gets 0.05.
TEST(Schedules, StepsPastTwoToThe24) {
  expect_rates(rates_used(PiecewiseConstantDecay{{16777217}, {0.1f, 0.05f}}, 3, int64_t(1) << 24), {0.1f, 0.1f, 0.05f});
  // Staircase ExponentialDecay every 2^24 steps at 3 * 2^24 - 1 and 3 * 2^24: 0.8 * 0.5^2 = 0.2, then 0.8 * 0.5^3 = 0.1.
  expect_rates(rates_used(ExponentialDecay{0.8f, int64_t(1) << 24, 0.5f, true}, 2, 3 * (int64_t(1) << 24) - 1),
               {0.2f, 0.1f});
  // 2^40 steps into a 4-step CosineDecay: the floor alpha * initial = 0.25 * 0.4 = 0.1.
  expect_rates(rates_used(CosineDecay{.initial_learning_rate = 0.4f, .decay_steps = 4, .alpha = 0.25f}, 1,
                          int64_t(1) << 40),
               {0.1f});
}

// The Trainer steps the same graph and reports the same rate.
TEST(Schedules, TrainerFollowsTheSchedule) {
  nn::TrainerOptions o;
  o.batch_size = 1;
  nn::Trainer tr(one_weight(OptimizerSpec::sgd({.learning_rate_schedule = ExponentialDecay{0.1f, 1, 0.5f}})), o);
  EXPECT_FLOAT_EQ(tr.learning_rate(), 0.1f);
  tr.step(x1(), y0());
  EXPECT_FLOAT_EQ(tr.learning_rate(), 0.05f);
  EXPECT_NEAR(tr.weights()[0].value.item(), 0.9f, 1e-6f);
  EXPECT_TRUE(throws<TypeError>([&] { tr.set_learning_rate(0.5f); }, {"LearningRateSchedule", "not settable"}));
}

// Callbacks that log "learning_rate" log the scheduled rate at the epoch's end
// (Keras' optimizer.learning_rate): one update per epoch of ExponentialDecay{0.1, 1, 0.5}
// leaves iterations 1, 2, 3, where the rate is 0.05, 0.025, 0.0125.
TEST(Schedules, CallbacksLogTheScheduledRate) {
  Sequential m = one_weight(OptimizerSpec::sgd({.learning_rate_schedule = ExponentialDecay{0.1f, 1, 0.5f}}));
  nn::FitOptions fit;
  fit.epochs = 3;
  fit.batch_size = 1;
  fit.verbose = 0;
  fit.callbacks = {std::make_shared<nn::ReduceLROnPlateau>("loss", 0.5, 100)};
  const nn::History h = m.fit(x1(), y0(), fit);
  ASSERT_TRUE(h.has("learning_rate"));
  const std::vector<double>& logged = h["learning_rate"];
  ASSERT_EQ(logged.size(), 3u);
  const float want[] = {0.05f, 0.025f, 0.0125f};
  for (size_t i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(float(logged[i]), want[i]) << "epoch " << i;
}

// A schedule's rate is not settable (Keras' TypeError), from every entry
// point; a LearningRateScheduler callback on a scheduled model fails fit.
TEST(Schedules, SettingTheRateUnderAScheduleIsATypeError) {
  Sequential m = one_weight(OptimizerSpec::adam(CosineDecay{.initial_learning_rate = 0.1f, .decay_steps = 10}));
  const std::initializer_list<std::string> words = {"LearningRateSchedule", "CosineDecay", "not settable",
                                                    "Remove the learning_rate_schedule", "LearningRateScheduler"};
  EXPECT_TRUE(throws<TypeError>([&] { m.set_learning_rate(0.01); }, words));
  EXPECT_TRUE(throws<TypeError>([&] { m.optimizer_context(1).set_learning_rate(0.01f); }, words));
  EXPECT_FLOAT_EQ(float(m.learning_rate()), 0.1f);  // untouched

  nn::FitOptions fit;
  fit.epochs = 2;
  fit.batch_size = 1;
  fit.verbose = 0;
  fit.callbacks = {std::make_shared<nn::LearningRateScheduler>([](int, double lr) { return lr / 2; })};
  EXPECT_TRUE(throws<TypeError>([&] { m.fit(x1(), y0(), fit); }, {"LearningRateSchedule", "not settable"}));
}

// Invalid fields are ValueErrors naming the schedule, the field, the value
// and the accepted range, from validate() and compile().
TEST(Schedules, InvalidFieldsAreValueErrors) {
  auto bad = [](const LearningRateSchedule& s, std::initializer_list<std::string> words) {
    return throws<ValueError>([&] { OptimizerSpec::sgd({.learning_rate_schedule = s}).validate(); }, words);
  };
  EXPECT_TRUE(bad(ExponentialDecay{0.1f, 0, 0.5f}, {"ExponentialDecay", "decay_steps", ">= 1", "got 0"}));
  EXPECT_TRUE(bad(ExponentialDecay{0.1f, 10, 0.0f}, {"decay_rate", "positive finite", "got 0"}));
  EXPECT_TRUE(bad(ExponentialDecay{NAN, 10, 0.5f}, {"initial_learning_rate", "got nan"}));
  EXPECT_TRUE(bad(ExponentialDecay{-0.1f, 10, 0.5f}, {"initial_learning_rate", "positive", "got -0.1"}));
  EXPECT_TRUE(bad(PiecewiseConstantDecay{{10, 20}, {0.1f, 0.01f}},
                  {"PiecewiseConstantDecay", "values", "one more than the boundaries (3)", "2 values for 2 boundaries"}));
  EXPECT_TRUE(bad(PiecewiseConstantDecay{{10, 10}, {0.1f, 0.01f, 0.001f}},
                  {"boundaries", "strictly increasing", "boundaries[0] = 10 then boundaries[1] = 10"}));
  EXPECT_TRUE(bad(PiecewiseConstantDecay{{10}, {0.1f, INFINITY}}, {"values", ">= 0", "got inf"}));
  EXPECT_TRUE(bad(CosineDecay{.initial_learning_rate = 0.1f, .decay_steps = 10, .alpha = 1.5f},
                  {"CosineDecay", "alpha", "[0, 1]", "got 1.5"}));
  EXPECT_TRUE(bad(CosineDecay{.initial_learning_rate = 0.1f, .decay_steps = -3}, {"decay_steps", ">= 1", "got -3"}));
  EXPECT_TRUE(bad(CosineDecay{.initial_learning_rate = 0.0f, .decay_steps = 10, .warmup_target = 0.1f, .warmup_steps = -1},
                  {"warmup_steps", ">= 0", "got -1"}));
  EXPECT_TRUE(bad(CosineDecay{.initial_learning_rate = 0.0f, .decay_steps = 10},
                  {"initial_learning_rate", "positive", "got 0"}));  // 0 only as a warm-up's start
  EXPECT_TRUE(bad(CosineDecay{.initial_learning_rate = 0.0f, .decay_steps = 10, .warmup_target = -1.0f},
                  {"warmup_target", "positive", "got -1"}));
  EXPECT_TRUE(bad(CosineDecayRestarts{0.1f, 0}, {"CosineDecayRestarts", "first_decay_steps", ">= 1", "got 0"}));
  EXPECT_TRUE(bad(CosineDecayRestarts{0.1f, 10, 0.5f}, {"t_mul", ">= 1", "got 0.5"}));
  EXPECT_TRUE(bad(CosineDecayRestarts{0.1f, 10, 2.0f, 0.0f}, {"m_mul", "positive", "got 0"}));
  EXPECT_TRUE(bad(CosineDecayRestarts{0.1f, 10, 2.0f, 1.0f, -0.5f}, {"alpha", "[0, 1]", "got -0.5"}));
  // The factories and compile() refuse them too.
  EXPECT_TRUE(throws<ValueError>([] { OptimizerSpec::adam(ExponentialDecay{0.1f, 0, 0.5f}); }, {"decay_steps"}));
  Sequential m({1});
  m.add(Dense(1));
  EXPECT_TRUE(throws<ValueError>(
      [&] { m.compile(OptimizerSpec::rmsprop({.learning_rate_schedule = ExponentialDecay{0.1f, 0, 0.5f}}), "mse"); },
      {"decay_steps"}));
  EXPECT_FALSE(m.compiled());
}

TEST(Schedules, Names) {
  EXPECT_STREQ(schedule_name(PiecewiseConstantDecay{}), "PiecewiseConstantDecay");
  EXPECT_STREQ(schedule_name(ExponentialDecay{}), "ExponentialDecay");
  EXPECT_STREQ(schedule_name(CosineDecay{}), "CosineDecay");
  EXPECT_STREQ(schedule_name(CosineDecayRestarts{}), "CosineDecayRestarts");
}
