// The optimizer's step counter (defects issue, item 4): a 64-bit integer in a
// persistent state tensor, with Adam's bias corrections computed in double,
// so training goes on past 2^24 steps where a float32 counter stops.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "tensorgrad/tensorgrad.h"

using namespace tensorgrad;
using nn::Dense;
using nn::Sequential;

namespace {
// One weight w, x = 1, y = 0, mse: the gradient is 2w.
Sequential one_weight(const OptimizerSpec& spec, float w) {
  Sequential m({1});
  m.add(Dense(1, "linear", false));
  m.weights()[0].value.fill(w);
  m.compile(spec, "mse");
  return m;
}
}  // namespace

TEST(OptimizerState, StepCounterIsInt64AndCountsUpdates) {
  Sequential m = one_weight(OptimizerSpec::adam(0.1f), 1.0f);
  OptimizerContext& ctx = m.optimizer_context(1, 2);  // an update every second step
  EXPECT_EQ(ctx.state()->step.dtype(), DType::Int64);
  const Tensor x = Tensor::full(Shape{1, 1}, 1.0f), y = Tensor::zeros(Shape{1, 1});
  for (int i = 0; i < 5; ++i) ctx.step(x, y);
  EXPECT_EQ(ctx.state()->iterations(), 2);
  EXPECT_EQ(ctx.n_steps(), 5);
}

TEST(OptimizerState, AdamKeepsCountingAndCorrectingPastTwoToThe24) {
  // beta_2 = 1 - 2^-24, the largest float below 1: at t near 2^24 its bias
  // correction 1 / (1 - beta_2^t) is about 1 / (1 - e^-1), far from 1.
  OptimizerSpec spec = OptimizerSpec::adam(0.01f);
  spec.beta_2 = 1.0f - 1.0f / 16777216.0f;
  Sequential m = one_weight(spec, 1.0f);
  OptimizerContext& ctx = m.optimizer_context(1);
  const int64_t start = int64_t(1) << 24;
  *ctx.state()->step.data<int64_t>() = start;
  const Tensor x = Tensor::full(Shape{1, 1}, 1.0f), y = Tensor::zeros(Shape{1, 1});
  const double b1 = spec.beta_1, b2 = double(spec.beta_2), lr = spec.learning_rate;
  double w = 1.0, mom = 0.0, vel = 0.0;
  for (int k = 1; k <= 3; ++k) {
    const float before = m.weights()[0].value.item();
    ctx.step(x, y);
    // Fresh moments with t this large take a step of lr * 0.1 / sqrt(2^-24 * 1.58), about 326 lr.
    EXPECT_GT(std::fabs(m.weights()[0].value.item() - before), 0.01f) << "step " << k;
    EXPECT_EQ(ctx.state()->iterations(), start + k);  // a float32 counter stays at 2^24
    const double t = double(start + k), g = 2.0 * w;
    mom = b1 * mom + (1 - b1) * g;
    vel = b2 * vel + (1 - b2) * g * g;
    w -= lr * (mom / (1 - std::pow(b1, t))) / (std::sqrt(vel / (1 - std::pow(b2, t))) + double(spec.epsilon));
    EXPECT_NEAR(m.weights()[0].value.item(), w, 1e-6) << "step " << k;
  }

  // Far beyond float range for a counter, corrections tend to 1 and stay finite.
  *ctx.state()->step.data<int64_t>() = int64_t(1) << 50;
  ctx.step(x, y);
  EXPECT_EQ(ctx.state()->iterations(), (int64_t(1) << 50) + 1);
  EXPECT_TRUE(std::isfinite(m.weights()[0].value.item()));
}
