// rl::PPO on CartPole and rl::compute_gae: GAE against a hand computation,
// a short run that repeats bit for bit and learns, evaluation snapshots that
// further training leaves alone, and bad options refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tensorgrad/tensorgrad.h"
#include "test_support.h"

namespace {
namespace tg = tensorgrad;
using test_support::ThreadsGuard;

tg::rl::PPOOptions zoo_options(uint64_t seed) {
  tg::rl::PPOOptions o = tg::rl::cartpole_ppo_options();
  o.seed = seed;
  return o;
}
}  // namespace

TEST(RlGae, MatchesTheRecursionByHand) {
  // Three steps, the episode ending at step 1: step 1 does not bootstrap, step 2 bootstraps from last_value.
  const std::vector<float> r{1.0f, 2.0f, 0.5f}, v{0.3f, -0.2f, 0.7f};
  const std::vector<uint8_t> done{0, 1, 0};
  const float g = 0.9f, l = 0.8f, last = 1.5f;
  std::vector<float> adv(3), ret(3);
  tg::rl::compute_gae(r, v, done, last, g, l, adv, ret);
  const double d2 = 0.5 + 0.9 * 1.5 - 0.7;  // delta_2
  const double a2 = d2;
  const double d1 = 2.0 - (-0.2);  // no bootstrap past the end of the episode
  const double a1 = d1;            // and no advantage carried back across it
  const double d0 = 1.0 + 0.9 * -0.2 - 0.3;
  const double a0 = d0 + 0.9 * 0.8 * a1;
  EXPECT_NEAR(adv[0], a0, 1e-6);
  EXPECT_NEAR(adv[1], a1, 1e-6);
  EXPECT_NEAR(adv[2], a2, 1e-6);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(ret[size_t(i)], adv[size_t(i)] + v[size_t(i)], 1e-6);
  std::vector<float> short_adv(2);
  EXPECT_TRUE(test_support::throws<tg::ShapeError>([&] { tg::rl::compute_gae(r, v, done, last, g, l, short_adv, ret); },
                                                   {"must have one length; got 3, 3, 3, 2, 3"}));
}

TEST(PPO, ShortRunRepeatsBitForBitAndLearns) {
  ThreadsGuard guard;
  tg::set_num_threads(1);
  auto run = [](uint64_t seed, std::vector<double>& losses) {
    tg::rl::CartPole env, eval_env;
    tg::rl::PPO agent(env, zoo_options(seed));
    tg::rl::EvalCallback eval(eval_env, {.eval_freq = 5000, .n_eval_episodes = 5, .seed = 42});
    agent.learn(15000, &eval, [&](const tg::rl::Progress& p) { losses.push_back(p.loss); }, 2560);
    std::vector<float> probe;
    for (float x : {0.0f, 0.05f, -0.05f})
      probe.push_back(float(agent.predict(tg::Tensor::from_vector(std::vector<float>{x, 0.0f, x, -x}, tg::Shape{4}))));
    return std::make_pair(eval.best_mean_reward(), probe);
  };
  std::vector<double> la, lb, lc;
  const auto a = run(3, la), b = run(3, lb);
  EXPECT_EQ(la, lb);
  EXPECT_EQ(a, b);
  for (double l : la) EXPECT_TRUE(std::isfinite(l));
  // A random policy balances about 22 steps; PPO passes 150 well within 15,000 steps (rl-baselines3-zoo's settings).
  EXPECT_GT(a.first, 150.0);
  run(4, lc);
  EXPECT_NE(la, lc);
}

TEST(PPO, SnapshotsKeepTheirWeights) {
  ThreadsGuard guard;
  tg::set_num_threads(1);
  tg::rl::CartPole env, eval_env;
  tg::rl::PPO agent(env, zoo_options(0));
  agent.learn(2048);
  const tg::rl::Policy before = agent.snapshot_policy();
  const tg::rl::Evaluation first = tg::rl::evaluate(before, eval_env, 5, 9);
  agent.learn(8192);
  const tg::rl::Evaluation again = tg::rl::evaluate(before, eval_env, 5, 9);
  EXPECT_EQ(first.returns, again.returns) << "the snapshot did not change with training";
  const tg::rl::Evaluation now = tg::rl::evaluate(agent.snapshot_policy(), eval_env, 5, 9);
  EXPECT_NE(now.returns, first.returns) << "the agent itself did";
}

TEST(PPO, RefusesBadOptions) {
  using test_support::throws;
  tg::rl::CartPole env;
  tg::rl::PPOOptions o;
  o.batch_size = 0;
  EXPECT_TRUE(throws<tg::ValueError>([&] { tg::rl::PPO(env, o); }, {"batch_size and n_epochs must be at least 1"}));
  o = {};
  o.gae_lambda = 1.5f;
  EXPECT_TRUE(throws<tg::ValueError>([&] { tg::rl::PPO(env, o); }, {"gamma and gae_lambda must be in [0, 1]"}));
  o = {};
  o.activation = "gelu";
  EXPECT_TRUE(throws<tg::ValueError>([&] { tg::rl::PPO(env, o); }, {"activation must be \"tanh\" or \"relu\""}));
  o = {};
  o.net_arch = {};
  EXPECT_TRUE(throws<tg::ValueError>([&] { tg::rl::PPO(env, o); }, {"net_arch needs at least one hidden layer"}));
  o = {};
  o.clip_range = 0.0f;
  EXPECT_TRUE(throws<tg::ValueError>([&] { tg::rl::PPO(env, o); }, {"clip_range must be > 0"}));
  tg::rl::PPO agent(env);
  EXPECT_TRUE(throws<tg::ShapeError>([&] { agent.predict(tg::Tensor::zeros(tg::Shape{5})); },
                                     {"float32 with 4 elements", "{5}"}));
  EXPECT_TRUE(throws<tg::ValueError>([&] { agent.learn(-5); }, {"timesteps must be >= 0"}));
}
