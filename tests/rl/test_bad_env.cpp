// What the kit does with an environment that returns a NaN or infinite
// observation or reward: a ValueError at the step it comes, naming the step
// and the element, with nothing stored and no weight changed, and the agent
// able to go on. The replay buffer refuses non-finite values itself, and the
// kit's names are apart from the Trainer's (EnvStep, EvalCallbackOptions).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "tensorgrad/tensorgrad.h"
#include "test_support.h"

namespace {
namespace tg = tensorgrad;
using test_support::throws;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// CartPole whose `bad_step`-th step (counted from 1 over its life) returns `value` at observation
// element 1 (or as the reward); every other step is CartPole's.
class Faulty final : public tg::rl::Env {
 public:
  Faulty(int64_t bad_step, float value, bool in_reward = false)
      : bad_step_(bad_step), value_(value), in_reward_(in_reward) {}
  tg::Shape observation_shape() const override { return inner_.observation_shape(); }
  int64_t action_count() const override { return inner_.action_count(); }
  tg::Tensor reset(std::optional<uint64_t> seed = std::nullopt) override { return inner_.reset(seed); }
  tg::rl::EnvStep step(int64_t action) override {
    tg::rl::EnvStep s = inner_.step(action);
    if (++steps_ == bad_step_) {
      if (in_reward_)
        s.reward = value_;
      else
        s.observation.data<float>()[1] = value_;
    }
    return s;
  }
  int64_t steps() const { return steps_; }

 private:
  tg::rl::CartPole inner_;
  int64_t bad_step_, steps_ = 0;
  float value_;
  bool in_reward_;
};

std::vector<float> flat(const std::vector<tg::Tensor>& ts) {
  std::vector<float> v;
  for (const tg::Tensor& t : ts) {
    const std::vector<float> x = t.to_vector();
    v.insert(v.end(), x.begin(), x.end());
  }
  return v;
}

std::vector<float> dqn_weights(tg::rl::DQN& agent) {
  std::vector<tg::Tensor> ts;
  for (const auto& w : agent.trainer().weights()) ts.push_back(w.value);
  return flat(ts);
}

std::vector<float> ppo_weights(tg::rl::PPO& agent) {
  std::vector<tg::Tensor> ts;
  for (const auto& p : agent.policy_net().parameters()) ts.push_back(p.data());
  for (const auto& p : agent.value_net().parameters()) ts.push_back(p.data());
  return flat(ts);
}

bool all_finite(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

tg::rl::DQNOptions small_dqn() {
  tg::rl::DQNOptions o;
  o.learning_starts = 16;
  o.train_freq = 1;
  o.gradient_steps = 1;
  o.n_step = 1;  // a transition is stored at its own step
  o.batch_size = 8;
  o.buffer_size = 1000;
  o.target_update_interval = 50;
  return o;
}

tg::nn::Sequential q_network() {
  tg::manual_seed(0);
  tg::nn::Sequential q({4});
  q.add(tg::nn::Dense(16, "relu"));
  q.add(tg::nn::Dense(2));
  return q;
}

}  // namespace

// Before, the NaN went into the buffer and a gradient step several steps later threw "x contains
// NaN at row 4, column 1"; every later learn() threw again from the poisoned buffer.
TEST(RlBadEnv, DqnRefusesANanObservationAtItsStepAndGoesOn) {
  Faulty env(30, kNaN);
  tg::rl::DQN agent(q_network(), env, small_dqn());
  agent.learn(29);
  const std::vector<float> before = dqn_weights(agent);
  const int64_t size = agent.replay_buffer().size(), steps = agent.gradient_steps();
  ASSERT_GT(steps, 0);
  EXPECT_TRUE(throws<tg::ValueError>([&] { agent.learn(10); },
                                     {"DQN::learn", "environment", "step 30 of training", "element 1", "nan"}));
  EXPECT_EQ(agent.replay_buffer().size(), size);  // nothing stored
  EXPECT_EQ(agent.gradient_steps(), steps);
  EXPECT_EQ(dqn_weights(agent), before);
  EXPECT_EQ(agent.num_timesteps(), 29);
  // The next learn() starts a new episode and trains on finite transitions only.
  agent.learn(100);
  EXPECT_EQ(agent.num_timesteps(), 129);
  EXPECT_GT(agent.gradient_steps(), steps);
  EXPECT_TRUE(all_finite(dqn_weights(agent)));
}

TEST(RlBadEnv, DqnRefusesANonFiniteReward) {
  Faulty env(5, -kInf, /*in_reward=*/true);
  tg::rl::DQN agent(q_network(), env, small_dqn());
  EXPECT_TRUE(throws<tg::ValueError>([&] { agent.learn(10); }, {"DQN::learn", "step 5 of training", "reward -inf"}));
  EXPECT_EQ(agent.replay_buffer().size(), 4);
}

// Before, PPO trained on the NaN without a word and every weight became NaN.
TEST(RlBadEnv, PpoRefusesANanObservationBeforeAnyUpdate) {
  Faulty env(300, kNaN);
  tg::rl::PPOOptions o = tg::rl::cartpole_ppo_options();
  o.n_steps = 256;
  tg::rl::PPO agent(env, o);
  agent.learn(256);  // one rollout and its update
  const std::vector<float> before = ppo_weights(agent);
  EXPECT_TRUE(throws<tg::ValueError>([&] { agent.learn(256); },
                                     {"PPO::learn", "environment", "step 300 of training", "element 1", "nan"}));
  EXPECT_EQ(ppo_weights(agent), before);  // the rollout with the NaN never reached an update
  agent.learn(256);
  EXPECT_TRUE(all_finite(ppo_weights(agent)));
  EXPECT_NE(ppo_weights(agent), before);
}

TEST(RlBadEnv, PpoRefusesAnInfiniteObservationAndANanReward) {
  {
    Faulty env(3, kInf);
    tg::rl::PPO agent(env);
    const std::vector<float> before = ppo_weights(agent);
    EXPECT_TRUE(throws<tg::ValueError>([&] { agent.learn(64); }, {"step 3 of training", "element 1", "inf"}));
    EXPECT_EQ(ppo_weights(agent), before);
  }
  {
    Faulty env(2, kNaN, /*in_reward=*/true);
    tg::rl::PPO agent(env);
    EXPECT_TRUE(throws<tg::ValueError>([&] { agent.learn(64); }, {"step 2 of training", "reward nan"}));
  }
}

TEST(RlBadEnv, EvaluateNamesTheEpisodeAndTheStep) {
  Faulty env(4, kNaN);
  EXPECT_TRUE(throws<tg::ValueError>([&] { tg::rl::evaluate([](const tg::Tensor&) { return int64_t(0); }, env, 2, 9); },
                                     {"rl::evaluate", "step 4 of evaluation episode 0", "seed 9", "element 1", "nan"}));
}

TEST(RlBadEnv, ReplayBufferRefusesNonFiniteObservationsAndActions) {
  tg::rl::ReplayBufferOptions o;
  o.capacity = 8;
  o.observation_shape = tg::Shape{3};
  tg::rl::ReplayBuffer buffer(o);
  const tg::Tensor good = tg::Tensor::from_vector(std::vector<float>{1, 2, 3}, tg::Shape{3});
  const tg::Tensor nan = tg::Tensor::from_vector(std::vector<float>{1, kNaN, 3}, tg::Shape{3});
  const tg::Tensor inf = tg::Tensor::from_vector(std::vector<float>{1, 2, -kInf}, tg::Shape{3});
  EXPECT_TRUE(throws<tg::ValueError>([&] { buffer.add(nan, 0, 1.0f, good, false, false); },
                                     {"ReplayBuffer::add", "observation's element 1", "nan", "nothing was stored"}));
  EXPECT_TRUE(throws<tg::ValueError>([&] { buffer.add(good, 0, 1.0f, inf, false, false); },
                                     {"ReplayBuffer::add", "next_observation's element 2", "-inf"}));
  EXPECT_EQ(buffer.size(), 0);
  tg::rl::ReplayBufferOptions c = o;
  c.action_shape = tg::Shape{2};
  c.action_dtype = tg::DType::Float32;
  tg::rl::ReplayBuffer continuous(c);
  const tg::Tensor bad_action = tg::Tensor::from_vector(std::vector<float>{0.5f, kNaN}, tg::Shape{2});
  EXPECT_TRUE(throws<tg::ValueError>([&] { continuous.add(good, bad_action, 1.0f, good, false, false); },
                                     {"ReplayBuffer::add", "action's element 1", "nan"}));
  EXPECT_EQ(continuous.size(), 0);
  buffer.add(good, 1, 1.0f, good, false, false);
  EXPECT_EQ(buffer.size(), 1);
}

TEST(RlBadEnv, ComputeGaeRefusesAGammaOrLambdaOutsideZeroOne) {
  const std::vector<float> r{1.0f}, v{0.5f};
  const std::vector<uint8_t> done{0};
  std::vector<float> adv{7.0f}, ret{7.0f};
  EXPECT_TRUE(throws<tg::ValueError>([&] { tg::rl::compute_gae(r, v, done, 0.0f, -0.5f, 0.9f, adv, ret); },
                                     {"compute_gae", "gamma", "[0, 1]", "-0.5"}));
  EXPECT_TRUE(throws<tg::ValueError>([&] { tg::rl::compute_gae(r, v, done, 0.0f, 0.9f, 1.5f, adv, ret); },
                                     {"compute_gae", "gae_lambda", "1.5"}));
  EXPECT_TRUE(throws<tg::ValueError>([&] { tg::rl::compute_gae(r, v, done, 0.0f, kNaN, 0.9f, adv, ret); },
                                     {"compute_gae"}));
  EXPECT_EQ(adv[0], 7.0f);  // nothing written
}

// The umbrella header brings in both the Trainer's names and the kit's: one name, one meaning.
TEST(RlNames, TheKitsStepAndEvaluationOptionsAreNamedApartFromTheTrainers) {
  static_assert(!std::is_same_v<tg::rl::EnvStep, tg::StepResult>);
  static_assert(!std::is_same_v<tg::rl::EvalCallbackOptions, tg::EvalOptions>);
  const tg::rl::EvalCallbackOptions o;
  EXPECT_EQ(o.eval_freq, 5000);
  tg::rl::CartPole env;
  env.reset(0);
  const tg::rl::EnvStep s = env.step(1);
  EXPECT_EQ(s.reward, 1.0f);
  EXPECT_EQ(s.observation.shape(), tg::Shape{4});
}
