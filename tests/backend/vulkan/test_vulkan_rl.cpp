// The reinforcement-learning kit's agents on a Vulkan device against the
// same agents on the CPU (the model tests' tolerances): a PPO rollout and its
// updates on the eager API, and DQN's gradient steps on the Trainer, with
// actions that do not depend on the device (the first rollout's policy is
// the initial one on both; DQN explores at random throughout).
#include <gtest/gtest.h>

#include <tensorgrad/tensorgrad.h>

#include "vulkan_support.h"

using namespace tensorgrad;
using test_support::close;

namespace {
constexpr double kRtol = 2e-4, kAtol = 1e-5;

std::vector<double> parameters(ag::nn::Module& m) {
  std::vector<double> out;
  for (const ag::Tensor& p : m.parameters())
    for (float v : p.to_vector()) out.push_back(v);
  return out;
}
}  // namespace

TEST(VulkanRl, PpoRolloutAndUpdatesAsOnTheCpu) {
  TG_VULKAN_OR_SKIP(vk);
  auto run = [](Device device) {
    rl::PPOOptions o;
    o.n_steps = 256;
    o.batch_size = 64;
    o.n_epochs = 2;
    o.seed = 4;
    o.device = device;
    rl::CartPole env;
    rl::PPO agent(env, o);
    EXPECT_EQ(agent.policy_net().parameters()[0].device(), device);
    agent.learn(256);
    return std::make_pair(parameters(agent.policy_net()), parameters(agent.value_net()));
  };
  const auto cpu = run(Device::CPU), gpu = run(vk->device());
  EXPECT_TRUE(close(gpu.first, cpu.first, kRtol, kAtol));
  EXPECT_TRUE(close(gpu.second, cpu.second, kRtol, kAtol));
}

TEST(VulkanRl, DqnGradientStepsAsOnTheCpu) {
  TG_VULKAN_OR_SKIP(vk);
  auto run = [](Device device) {
    rl::DQNOptions o;
    o.seed = 2;
    o.learning_rate = 2e-3;
    o.train_freq = 1;  // a gradient step per environment step
    o.gradient_steps = 1;
    o.learning_starts = 200;
    o.batch_size = 32;
    o.buffer_size = 1000;
    o.target_update_interval = 50;
    o.exploration = {1.0, 1.0, 0};  // random actions throughout: the same transitions on both devices
    o.device = device;
    nn::clear_session();
    manual_seed(2);
    nn::Sequential q({4});
    q.add(nn::Dense(32, "relu"));
    q.add(nn::Dense(2));
    rl::CartPole env;
    rl::DQN agent(std::move(q), env, o);
    EXPECT_EQ(agent.trainer().weights()[0].value.device(), device);
    agent.learn(300);
    return std::make_pair(test_support::all_weights(agent.trainer().model()),
                          test_support::all_weights(agent.target()));
  };
  const auto cpu = run(Device::CPU), gpu = run(vk->device());
  EXPECT_TRUE(close(gpu.first, cpu.first, kRtol, kAtol));
  EXPECT_TRUE(close(gpu.second, cpu.second, kRtol, kAtol));
}
