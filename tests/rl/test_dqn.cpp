// rl::DQN on CartPole: a short run repeats bit for bit and stays finite, the
// counts of gradient steps and target updates follow the options, save and
// load resume exactly (weights, optimizer, target, replay buffer, the
// environment's episode), and bad options are refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tensorgrad/tensorgrad.h"
#include "test_files.h"
#include "test_support.h"

namespace {
namespace tg = tensorgrad;
using test_support::ThreadsGuard;

tg::rl::DQNOptions short_options(bool prioritized = false) {
  tg::rl::DQNOptions o;
  o.seed = 5;
  o.learning_rate = 2e-3;
  o.train_freq = 1;  // a gradient step per environment step (the defaults train in rounds)
  o.gradient_steps = 1;
  o.n_step = 1;  // one-step targets, as these tests were written for (the default is 3)
  o.learning_starts = 500;
  o.buffer_size = 5000;
  o.target_update_interval = 500;
  o.exploration = {1.0, 0.05, 1500};
  o.prioritized_replay = prioritized;
  o.prioritized.beta.steps = 2000;
  return o;
}

tg::nn::Sequential q_network(uint64_t seed) {
  tg::nn::clear_session();  // the same layer names in every agent: a checkpoint loads by name
  tg::manual_seed(seed);
  tg::nn::Sequential q({4});
  q.add(tg::nn::Dense(64, "relu"));
  q.add(tg::nn::Dense(2));
  return q;
}

const tg::Tensor& probe() {
  static const tg::Tensor p = tg::Tensor::from_vector(
      std::vector<float>{0.0f, 0.0f, 0.0f, 0.0f, 0.1f, -0.2f, 0.05f, 0.3f, -1.0f, 0.5f, -0.1f, -0.4f}, tg::Shape{3, 4});
  return p;
}

struct Outcome {
  std::vector<double> losses, returns;
  std::vector<float> q, q_target;
  int64_t gradient_steps = 0;
  double best = 0;
};

Outcome run(const tg::rl::DQNOptions& o, int64_t steps) {
  tg::rl::CartPole env, eval_env;
  tg::rl::DQN agent(q_network(o.seed), env, o);
  tg::rl::EvalCallback eval(eval_env, {.eval_freq = 1000, .n_eval_episodes = 2, .seed = 77});
  Outcome r;
  agent.learn(steps, &eval, [&](const tg::rl::Progress& p) {
    r.losses.push_back(std::isnan(p.loss) ? -1.0 : p.loss);  // NaN (no training yet) as -1, so runs compare
    r.returns.push_back(p.recent_return);
  }, 250);
  r.q = agent.trainer().predict(probe()).to_vector();
  r.q_target = agent.target().predict(probe()).to_vector();
  r.gradient_steps = agent.gradient_steps();
  r.best = eval.best_mean_reward();
  return r;
}
}  // namespace

TEST(DQN, ShortRunIsDeterministicAndFinite) {
  ThreadsGuard guard;
  tg::set_num_threads(1);
  for (bool prioritized : {false, true}) {
    const tg::rl::DQNOptions o = short_options(prioritized);
    const Outcome a = run(o, 2000), b = run(o, 2000);
    EXPECT_EQ(a.gradient_steps, 2000 - 500 + 1);  // one per step from step 500 on
    ASSERT_EQ(a.losses.size(), 8u);
    for (size_t i = 1; i < a.losses.size(); ++i) EXPECT_GE(a.losses[i], 0.0) << "report " << i;
    EXPECT_EQ(a.losses[0], -1.0) << "no training before learning_starts";
    for (float q : a.q) EXPECT_TRUE(std::isfinite(q));
    EXPECT_EQ(a.losses, b.losses);
    EXPECT_EQ(a.returns, b.returns);
    EXPECT_EQ(a.q, b.q);
    EXPECT_EQ(a.best, b.best);
    EXPECT_EQ(a.q_target, a.q) << "the last hard target update (step 2000) follows the last gradient step";
    tg::rl::DQNOptions other = o;
    other.seed = 6;
    EXPECT_NE(run(other, 2000).q, a.q);
  }
}

TEST(DQN, SoftTargetUpdatesAndTrainingRoundsFollowTheOptions) {
  ThreadsGuard guard;
  tg::set_num_threads(1);
  tg::rl::DQNOptions o = short_options();
  o.train_freq = 4;
  o.gradient_steps = 3;
  o.tau = 0.01;
  const Outcome r = run(o, 1200);
  // Rounds at steps 500, 504, ..., 1200: 176 rounds of 3.
  EXPECT_EQ(r.gradient_steps, 176 * 3);
  EXPECT_NE(r.q_target, r.q) << "a Polyak target (tau 0.01 every 500 steps, as SB3) lags the online network";
}

TEST(DQN, SaveAndLoadResumeBitForBit) {
  ThreadsGuard guard;
  tg::set_num_threads(1);
  const test_support::TempDir dir;
  for (bool prioritized : {false, true}) {
    const tg::rl::DQNOptions o = short_options(prioritized);
    const std::string path = dir / (prioritized ? "dqn_per.gguf" : "dqn.gguf");
    std::vector<float> straight, resumed;
    int64_t straight_steps = 0;
    {
      tg::rl::CartPole env;
      tg::rl::DQN a(q_network(o.seed), env, o);
      a.learn(1300);  // mid-episode, mid-way between target updates
      a.save(path);
      a.learn(700);
      straight = a.trainer().predict(probe()).to_vector();
      const std::vector<float> t = a.target().predict(probe()).to_vector();
      straight.insert(straight.end(), t.begin(), t.end());
      straight_steps = a.gradient_steps();
    }
    tg::rl::CartPole env;
    tg::rl::DQN b(q_network(o.seed + 100), env, o);  // other initial weights: the load replaces them
    b.load(path);
    EXPECT_EQ(b.num_timesteps(), 1300);
    EXPECT_EQ(b.replay_buffer().size(), 1300);
    b.learn(700);
    resumed = b.trainer().predict(probe()).to_vector();
    const std::vector<float> t = b.target().predict(probe()).to_vector();
    resumed.insert(resumed.end(), t.begin(), t.end());
    EXPECT_EQ(resumed, straight) << (prioritized ? "prioritized" : "uniform");
    EXPECT_EQ(b.gradient_steps(), straight_steps);
  }
}

TEST(DQN, SavesBeforeAnyEpisodeHasEnded) {
  ThreadsGuard guard;
  tg::set_num_threads(1);
  const test_support::TempDir dir;
  for (int64_t steps : {0, 5}) {
    tg::rl::CartPole env;
    tg::rl::DQN a(q_network(1), env, short_options());
    a.learn(steps);
    a.save(dir / "early.gguf");
    tg::rl::CartPole env2;
    tg::rl::DQN b(q_network(2), env2, short_options());
    b.load(dir / "early.gguf");
    EXPECT_EQ(b.num_timesteps(), steps);
    EXPECT_EQ(b.replay_buffer().size(), steps);
    a.learn(600);
    b.learn(600);
    EXPECT_EQ(a.trainer().predict(probe()).to_vector(), b.trainer().predict(probe()).to_vector()) << steps;
  }
}

TEST(DQN, RefusesBadOptionsAndMismatchedNetworks) {
  using test_support::throws;
  tg::rl::CartPole env;
  auto make = [&](const tg::rl::DQNOptions& o) { tg::rl::DQN(q_network(0), env, o); };
  tg::rl::DQNOptions o;
  o.tau = 0.0;
  EXPECT_TRUE(throws<tg::ValueError>([&] { make(o); }, {"tau must be in (0, 1]"}));
  o = {};
  o.buffer_size = 10;
  EXPECT_TRUE(throws<tg::ValueError>([&] { make(o); }, {"buffer_size (10) must hold at least one batch (64)"}));
  o = {};
  o.loss = "l1";
  EXPECT_TRUE(throws<tg::ValueError>([&] { make(o); }, {"loss must be \"huber\" or \"mse\"; got \"l1\""}));
  o = {};
  o.exploration = {1.5, 0.05, 100};
  EXPECT_TRUE(throws<tg::ValueError>([&] { make(o); }, {"exploration rates must be in [0, 1]"}));
  o = {};
  o.learning_rate = NAN;
  EXPECT_TRUE(throws<tg::ValueError>([&] { make(o); }, {"learning_rate must be > 0"}));
  tg::nn::Sequential three({4});
  three.add(tg::nn::Dense(3));
  EXPECT_TRUE(throws<tg::ValueError>([&] { tg::rl::DQN(std::move(three), env); }, {"one value per action, {2} per row", "{3}"}));
  tg::nn::Sequential wide({5});
  wide.add(tg::nn::Dense(2));
  EXPECT_TRUE(throws<tg::ValueError>([&] { tg::rl::DQN(std::move(wide), env); }, {"inputs of shape {5}", "observations are {4}"}));
  tg::rl::DQN agent(q_network(0), env, short_options());
  EXPECT_TRUE(throws<tg::ShapeError>([&] { agent.predict(tg::Tensor::zeros(tg::Shape{3})); },
                                     {"the observation must be float32 with 4 elements", "got float32 {3}"}));
  EXPECT_TRUE(throws<tg::ValueError>([&] { agent.learn(-1); }, {"timesteps must be >= 0"}));
}

TEST(DQN, NoStepsStillEvaluatesTheInitialNetwork) {
  // --steps 0: the evaluation at the end of learn() runs, so a best snapshot exists (the initial one).
  tg::rl::CartPole env, eval_env;
  tg::rl::DQN dqn(q_network(0), env, short_options());
  tg::rl::EvalCallback eval(eval_env, {.eval_freq = 1000, .n_eval_episodes = 2, .seed = 5});
  dqn.learn(0, &eval);
  ASSERT_TRUE(eval.has_best());
  EXPECT_EQ(eval.best_timestep(), 0);
  EXPECT_EQ(eval.evaluations().size(), 1u);
  tg::rl::PPO ppo(env);
  tg::rl::EvalCallback ppo_eval(eval_env, {.eval_freq = 1000, .n_eval_episodes = 2, .seed = 5});
  ppo.learn(0, &ppo_eval);
  EXPECT_TRUE(ppo_eval.has_best());
}
