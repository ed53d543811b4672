// rl::CartPole against Gymnasium's CartPole-v1 (hand-computed steps, the
// termination thresholds, the 500-step truncation, seeded starts) and
// rl::evaluate against returns counted by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "tensorgrad/core/error.h"
#include "tensorgrad/rl/env.h"
#include "tensorgrad/rl/evaluate.h"
#include "test_support.h"

namespace {
namespace tg = tensorgrad;
using tg::rl::CartPole;
using tg::rl::EnvStep;

std::array<float, 4> values(const tg::Tensor& t) {
  EXPECT_EQ(t.shape(), tg::Shape{4});
  return {t.data<float>()[0], t.data<float>()[1], t.data<float>()[2], t.data<float>()[3]};
}
}  // namespace

TEST(CartPole, StepFromRestMatchesHandComputedValues) {
  // From rest, cos = 1 and sin = 0: temp = F / 1.1, theta_acc = -temp / (0.5 (4/3 - 0.1/1.1))
  // = -/+600/41, x_acc = +/-400/41; Euler moves only the velocities.
  for (int action : {0, 1}) {
    CartPole env;
    env.set_state({0.0, 0.0, 0.0, 0.0});
    const EnvStep s = env.step(action);
    const double sign = action == 1 ? 1.0 : -1.0;
    EXPECT_EQ(env.state()[0], 0.0);
    EXPECT_NEAR(env.state()[1], sign * 0.02 * 400.0 / 41.0, 1e-15);
    EXPECT_EQ(env.state()[2], 0.0);
    EXPECT_NEAR(env.state()[3], -sign * 0.02 * 600.0 / 41.0, 1e-15);
    EXPECT_EQ(s.reward, 1.0f);
    EXPECT_FALSE(s.terminated);
    EXPECT_FALSE(s.truncated);
    EXPECT_EQ(values(s.observation)[1], float(env.state()[1]));
  }
}

TEST(CartPole, StepFromAGeneralStateMatchesGymnasium) {
  // Gymnasium's cartpole.py step (euler) evaluated in double precision from
  // (x, x_dot, theta, theta_dot) = (0.1, 0.5, 0.05, -0.3).
  const double expected[2][4] = {{0.11, 0.30420234535603741, 0.044, 0.0080233136061514942},
                                 {0.11, 0.69437493421822027, 0.044, -0.57650414848147347}};
  for (int action : {0, 1}) {
    CartPole env;
    env.set_state({0.1, 0.5, 0.05, -0.3});
    env.step(action);
    for (int i = 0; i < 4; ++i)
      EXPECT_NEAR(env.state()[size_t(i)], expected[action][i], 1e-14) << "action " << action << " i " << i;
  }
}

TEST(CartPole, TerminatesStrictlyBeyondTheThresholds) {
  EXPECT_NEAR(CartPole::kThetaThresholdRadians, 0.20943951023931953, 1e-16);
  const double th = CartPole::kThetaThresholdRadians;
  struct Case {
    std::array<double, 4> state;
    bool terminated;
  };
  // Positions move by 0.02 * velocity; exactly on a threshold is not beyond it.
  const Case cases[] = {
      {{2.4, 0.0, 0.0, 0.0}, false},   {{2.4, 0.01, 0.0, 0.0}, true},   {{-2.4, 0.0, 0.0, 0.0}, false},
      {{-2.4, -0.01, 0.0, 0.0}, true}, {{0.0, 0.0, th, 0.0}, false},    {{0.0, 0.0, th, 0.01}, true},
      {{0.0, 0.0, -th, 0.0}, false},   {{0.0, 0.0, -th, -0.01}, true}, {{2.3, 0.0, 0.2, 0.0}, false},
  };
  for (const Case& c : cases) {
    CartPole env;
    env.set_state(c.state);
    const EnvStep s = env.step(0);
    EXPECT_EQ(s.terminated, c.terminated) << c.state[0] << " " << c.state[2];
    EXPECT_FALSE(s.truncated);
    if (s.terminated) EXPECT_TRUE(test_support::throws<tg::StateError>([&] { env.step(0); }, {"call reset() first"}));
  }
}

TEST(CartPole, RefusesBadActionsAndStepsWithoutAnEpisode) {
  CartPole env;
  EXPECT_TRUE(test_support::throws<tg::StateError>([&] { env.step(0); }, {"no episode is running"}));
  env.reset(1);
  EXPECT_TRUE(test_support::throws<tg::ValueError>([&] { env.step(2); }, {"must be 0 (push left) or 1 (push right); got 2"}));
  EXPECT_TRUE(test_support::throws<tg::ValueError>([&] { env.step(-1); }, {"got -1"}));
}

TEST(CartPole, TruncatesAt500StepsWithoutTerminating) {
  CartPole env(7);
  env.reset();
  for (int t = 1; t <= CartPole::kMaxEpisodeSteps; ++t) {
    const auto& s = env.state();
    const EnvStep r = env.step(s[2] + 0.5 * s[3] > 0 ? 1 : 0);  // a balancing controller
    ASSERT_FALSE(r.terminated) << "step " << t;
    EXPECT_EQ(r.truncated, t == CartPole::kMaxEpisodeSteps) << "step " << t;
  }
  EXPECT_EQ(env.elapsed_steps(), 500);
  EXPECT_THROW(env.step(0), tg::StateError);
}

TEST(CartPole, ResetIsSeededAndSmall) {
  CartPole a, b;
  const auto first = values(a.reset(42)), again = values(b.reset(42)), other = values(b.reset(43));
  EXPECT_EQ(first, again);
  EXPECT_NE(first, other);
  for (int e = 0; e < 100; ++e)
    for (float v : values(a.reset())) {
      EXPECT_GE(v, -0.05f);
      EXPECT_LT(v, 0.05f);
    }
}

TEST(RlEvaluate, CountsReturnsAndLengthsPerSeed) {
  // Always pushing right topples the pole in a number of steps that depends on the start; the
  // returns are those lengths (reward 1 a step), episode e from seed + e.
  CartPole env;
  const tg::rl::Evaluation r = tg::rl::evaluate([](const tg::Tensor&) { return int64_t(1); }, env, 5, 100);
  ASSERT_EQ(r.returns.size(), 5u);
  double sum = 0.0, sq = 0.0;
  for (int e = 0; e < 5; ++e) {
    CartPole replay;
    replay.reset(100 + uint64_t(e));
    int steps = 0;
    for (bool done = false; !done; ++steps) {
      const EnvStep s = replay.step(1);
      done = s.terminated || s.truncated;
    }
    EXPECT_EQ(r.returns[size_t(e)], float(steps));
    EXPECT_EQ(r.lengths[size_t(e)], steps);
    sum += steps;
  }
  const double mean = sum / 5.0;
  for (float v : r.returns) sq += (v - mean) * (v - mean);
  EXPECT_DOUBLE_EQ(r.mean_return, mean);
  EXPECT_NEAR(r.std_return, std::sqrt(sq / 5.0), 1e-12);
  EXPECT_GT(r.std_return, 0.0);  // the starts differ, so do the lengths
}

TEST(RlEvaluate, RefusesBadArguments) {
  CartPole env;
  const tg::rl::Policy right = [](const tg::Tensor&) { return int64_t(1); };
  EXPECT_TRUE(test_support::throws<tg::ValueError>([&] { tg::rl::evaluate(right, env, 0, 0); }, {"episodes must be at least 1; got 0"}));
  EXPECT_TRUE(test_support::throws<tg::ValueError>([&] { tg::rl::evaluate(nullptr, env, 1, 0); }, {"the policy is empty"}));
  EXPECT_TRUE(test_support::throws<tg::ValueError>(
      [&] { tg::rl::evaluate([](const tg::Tensor& o) { return int64_t(o.data<float>()[2] > 0); }, env, 1, 0, 20); }, {"ran 20 steps without ending"}));
  EXPECT_TRUE(test_support::throws<tg::ValueError>([&] { tg::rl::evaluate([](const tg::Tensor&) { return int64_t(3); }, env, 1, 0); }, {"got 3"}));
}
