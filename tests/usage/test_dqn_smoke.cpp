// Smoke test of the DQN example (examples/cartpole.h, examples/dqn_agent.h):
// CartPole-v1 physics against hand-computed steps, the termination thresholds
// and the 500-step truncation, then a short DQN run that must repeat bit for
// bit with the same seed and keep a finite loss.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

#include "../../examples/dqn_agent.h"
#include "test_support.h"

namespace {
using cartpole::CartPole;
namespace tg = tensorgrad;
using test_support::ThreadsGuard;
}  // namespace

TEST(DqnSmoke, CartPoleStepFromRestMatchesHandComputedValues) {
  // From rest, cos = 1 and sin = 0: temp = F / 1.1, theta_acc = -temp / (0.5 (4/3 - 0.1/1.1))
  // = -/+600/41, x_acc = +/-400/41; Euler moves only the velocities.
  for (int action : {0, 1}) {
    CartPole env;
    env.set_state({0.0, 0.0, 0.0, 0.0});
    const cartpole::Step s = env.step(action);
    const double sign = action == 1 ? 1.0 : -1.0;
    EXPECT_EQ(env.state()[0], 0.0);
    EXPECT_NEAR(env.state()[1], sign * 0.02 * 400.0 / 41.0, 1e-15);
    EXPECT_EQ(env.state()[2], 0.0);
    EXPECT_NEAR(env.state()[3], -sign * 0.02 * 600.0 / 41.0, 1e-15);
    EXPECT_EQ(s.reward, 1.0f);
    EXPECT_FALSE(s.terminated);
    EXPECT_FALSE(s.truncated);
    EXPECT_EQ(s.observation[1], float(env.state()[1]));
  }
}

TEST(DqnSmoke, CartPoleStepFromAGeneralStateMatchesGym) {
  // Gym's cartpole.py step (euler) evaluated in double precision from
  // (x, x_dot, theta, theta_dot) = (0.1, 0.5, 0.05, -0.3).
  const double expected[2][4] = {{0.11, 0.30420234535603741, 0.044, 0.0080233136061514942},
                                 {0.11, 0.69437493421822027, 0.044, -0.57650414848147347}};
  for (int action : {0, 1}) {
    CartPole env;
    env.set_state({0.1, 0.5, 0.05, -0.3});
    env.step(action);
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(env.state()[i], expected[action][i], 1e-14) << "action " << action << " i " << i;
  }
}

TEST(DqnSmoke, CartPoleTerminatesStrictlyBeyondTheThresholds) {
  EXPECT_NEAR(CartPole::kThetaThresholdRadians, 0.20943951023931953, 1e-16);
  const double th = CartPole::kThetaThresholdRadians;
  struct Case {
    std::array<double, 4> state;
    bool terminated;
  };
  // Positions move by 0.02 * velocity; exactly on a threshold is not beyond it.
  const Case cases[] = {
      {{2.4, 0.0, 0.0, 0.0}, false},  {{2.4, 0.01, 0.0, 0.0}, true},  {{-2.4, 0.0, 0.0, 0.0}, false},
      {{-2.4, -0.01, 0.0, 0.0}, true}, {{0.0, 0.0, th, 0.0}, false},  {{0.0, 0.0, th, 0.01}, true},
      {{0.0, 0.0, -th, 0.0}, false},   {{0.0, 0.0, -th, -0.01}, true}, {{2.3, 0.0, 0.2, 0.0}, false},
  };
  for (const Case& c : cases) {
    CartPole env;
    env.set_state(c.state);
    const cartpole::Step s = env.step(0);
    EXPECT_EQ(s.terminated, c.terminated) << c.state[0] << " " << c.state[2];
    EXPECT_FALSE(s.truncated);
    EXPECT_EQ(s.reward, 1.0f);
    if (s.terminated) {
      EXPECT_THROW(env.step(0), std::logic_error);
    }
  }
  CartPole env;
  env.reset();
  EXPECT_THROW(env.step(2), std::invalid_argument);
}

TEST(DqnSmoke, CartPoleTruncatesAt500StepsWithoutTerminating) {
  CartPole env(7);
  env.reset();
  for (int t = 1; t <= CartPole::kMaxEpisodeSteps; ++t) {
    const auto& s = env.state();
    const cartpole::Step r = env.step(s[2] + 0.5 * s[3] > 0 ? 1 : 0);  // a balancing controller
    ASSERT_FALSE(r.terminated) << "step " << t;
    EXPECT_EQ(r.truncated, t == CartPole::kMaxEpisodeSteps) << "step " << t;
  }
  EXPECT_EQ(env.elapsed_steps(), 500);
  EXPECT_THROW(env.step(0), std::logic_error);
}

TEST(DqnSmoke, CartPoleResetIsSeededAndSmall) {
  CartPole a, b;
  const auto first = a.reset(42), again = b.reset(42), other = b.reset(43);
  EXPECT_EQ(first, again);
  EXPECT_NE(first, other);
  for (int e = 0; e < 100; ++e)
    for (float v : a.reset()) {
      EXPECT_GE(v, -0.05f);
      EXPECT_LE(v, 0.05f);
    }
}

TEST(DqnSmoke, ReplayBufferIsARing) {
  dqn::ReplayBuffer buf(3);
  for (int i = 0; i < 5; ++i) buf.add({float(i), 0, 0, 0}, i % 2, float(i), {float(i + 1), 0, 0, 0}, i == 4);
  EXPECT_EQ(buf.size(), 3);
  // Slots 0 and 1 were overwritten by transitions 3 and 4; slot 2 holds transition 2.
  EXPECT_EQ(buf.obs(0)[0], 3.0f);
  EXPECT_EQ(buf.obs(1)[0], 4.0f);
  EXPECT_EQ(buf.obs(2)[0], 2.0f);
  EXPECT_EQ(buf.next_obs(1)[0], 5.0f);
  EXPECT_TRUE(buf.terminated(1));
  EXPECT_FALSE(buf.terminated(0));
  std::mt19937_64 rng(1);
  for (int i = 0; i < 1000; ++i) {
    const int64_t j = buf.sample_index(rng);
    EXPECT_GE(j, 0);
    EXPECT_LT(j, 3);
  }
}

TEST(DqnSmoke, ShortRunIsDeterministicAndFinite) {
  ThreadsGuard guard;
  tg::set_num_threads(1);
  dqn::Config c;
  c.seed = 5;
  c.steps = 2000;
  c.learning_starts = 500;
  c.eval_every = 1000;
  c.eval_episodes = 2;
  c.hidden = 64;
  c.target_update_every = 500;
  c.eps_decay_steps = 1500;

  const tg::Tensor probe = tg::Tensor::from_vector(
      std::vector<float>{0.0f, 0.0f, 0.0f, 0.0f, 0.1f, -0.2f, 0.05f, 0.3f, -1.0f, 0.5f, -0.1f, -0.4f}, tg::Shape{3, 4});
  struct Run {
    dqn::Result result;
    std::vector<float> q, q_target, q_best;
  };
  auto run = [&] {
    dqn::Agent agent(c);
    Run r;
    r.result = agent.train();
    r.q = agent.trainer().predict(probe).to_vector();
    r.q_target = agent.target().predict(probe).to_vector();
    r.q_best = agent.best().predict(probe).to_vector();
    return r;
  };
  const Run a = run(), b = run();

  EXPECT_EQ(a.result.env_steps, 2000);
  EXPECT_EQ(a.result.train_steps, 2000 - 500 + 1);
  ASSERT_EQ(a.result.losses.size(), size_t(a.result.train_steps));
  for (float l : a.result.losses) ASSERT_TRUE(std::isfinite(l));
  for (float q : a.q) EXPECT_TRUE(std::isfinite(q));
  EXPECT_GT(a.result.episodes, 10);

  // Bit-identical repeat.
  EXPECT_EQ(a.result.episode_returns, b.result.episode_returns);
  EXPECT_EQ(a.result.losses, b.result.losses);
  EXPECT_EQ(a.result.best_eval, b.result.best_eval);
  EXPECT_EQ(a.result.best_eval_step, b.result.best_eval_step);
  EXPECT_EQ(a.q, b.q);
  EXPECT_EQ(a.q_best, b.q_best);

  // The last hard target update ran after the last training step (step 2000).
  EXPECT_EQ(a.q_target, a.q);

  // Another seed gives another run.
  c.seed = 6;
  const Run other = run();
  EXPECT_NE(other.result.losses, a.result.losses);
}
