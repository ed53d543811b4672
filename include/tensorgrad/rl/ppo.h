#pragma once
// Proximal policy optimization (Schulman et al. 2017, the clipped
// surrogate) with generalized advantage estimation (Schulman et al. 2016),
// written on the eager API, with stable-baselines3's PPO arguments and
// defaults.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tensorgrad/ag/nn/modules.h"
#include "tensorgrad/core/device.h"
#include "tensorgrad/ag/optim.h"
#include "tensorgrad/rl/agent.h"
#include "tensorgrad/rl/env.h"

namespace tensorgrad::rl {

/// PPO's hyper-parameters, by stable-baselines3's names and with its
/// defaults.
struct PPOOptions {
  double learning_rate = 3e-4;  ///< Adam's step size (eps 1e-5, as SB3)
  /// Anneal the learning rate linearly to 0 over the timesteps of learn()
  /// (SB3's linear schedule, as its zoo sets for CartPole).
  bool anneal_learning_rate = false;
  int64_t n_steps = 2048;     ///< environment steps per rollout
  int64_t batch_size = 64;    ///< minibatch size of the updates
  int n_epochs = 10;          ///< passes over each rollout
  float gamma = 0.99f;        ///< the discount
  float gae_lambda = 0.95f;   ///< GAE's lambda
  float clip_range = 0.2f;    ///< the surrogate's clip on the probability ratio
  bool anneal_clip_range = false;  ///< anneal clip_range linearly to 0 as the learning rate
  float ent_coef = 0.0f;      ///< the entropy bonus's weight
  float vf_coef = 0.5f;       ///< the value loss's weight
  float max_grad_norm = 0.5f; ///< clip the gradients' global norm to this (0: off)
  bool normalize_advantage = true;  ///< per minibatch, as SB3
  /// Hidden layer sizes of the policy and of the value network (separate,
  /// as SB3's MlpPolicy).
  std::vector<int64_t> net_arch{64, 64};
  /// The hidden layers' activation: "tanh" (SB3's default) or "relu".
  std::string activation = "tanh";
  /// Seeds the weights, action sampling, minibatch order and the training
  /// environment's first episode.
  uint64_t seed = 0;
  /// Where the networks live and train ("cpu", "vulkan:0", ...), as
  /// PyTorch's module.to(device); rollouts copy each observation there.
  Device device = Device::CPU;
};

/// rl-baselines3-zoo's PPO hyper-parameters for CartPole-v1, its 8
/// environments of 32 steps a rollout as one environment's 256: minibatch
/// 256, 20 epochs, gamma 0.98, GAE lambda 0.8, learning rate 1e-3 and clip
/// range 0.2 both annealed linearly to 0, the rest SB3's defaults.
PPOOptions cartpole_ppo_options();

/// Generalized advantage estimation (Schulman et al. 2016) over one rollout,
/// as stable-baselines3's RolloutBuffer.compute_returns_and_advantage: with
/// live_t = 0 where the episode ended at step t (dones[t] != 0), else 1, and
/// V_{n} = last_value, delta_t = r_t + gamma V_{t+1} live_t - V_t, A_t =
/// delta_t + gamma lambda live_t A_{t+1}, returns_t = A_t + V_t. All spans
/// have the rollout's length n (advantages and returns are written). Throws
/// ShapeError for spans of other lengths, ValueError for a gamma or
/// gae_lambda outside [0, 1] (nothing written then).
void compute_gae(std::span<const float> rewards, std::span<const float> values, std::span<const uint8_t> dones,
                 float last_value, float gamma, float gae_lambda, std::span<float> advantages,
                 std::span<float> returns);

/// A PPO agent for an environment with discrete actions and float32
/// observations: a policy network (observation -> action logits) and a value
/// network (observation -> value), both MLPs of the eager API initialised as
/// PyTorch's Linear with the policy's last layer scaled by 0.01 (SB3 scales
/// its orthogonal initialisation so), trained by Adam on the clipped
/// surrogate, the value loss and the entropy bonus over minibatches of each
/// rollout. Truncated episodes bootstrap (the reward of the cut step gains
/// gamma V(last observation), as SB3). Deterministic for the same options
/// and thread count.
class PPO final : public Agent {
 public:
  /// Builds the networks for `env` (which must outlive the agent) on
  /// options.device. Throws ValueError for an invalid option (naming it) or
  /// an environment whose observations are not float32, StateError for a
  /// device that is not available.
  PPO(Env& env, const PPOOptions& options = {});
  ~PPO() override;

  /// Runs `timesteps` environment steps in rollouts of n_steps, each
  /// followed by n_epochs of minibatch updates (the last rollout may be
  /// shorter); `eval` may evaluate after every environment step, `progress`
  /// is called every `report_every` steps. The annealed rates go to 0 over
  /// these `timesteps`. Each observation (reset()'s included) and reward the
  /// environment returns is checked at the step it comes: a NaN or infinite
  /// element is a ValueError naming the training step and the element
  /// (ShapeError or TypeError for an observation of another shape or
  /// dtype), thrown before anything of that step is used: the rollout in
  /// progress is dropped, no weight changes, and the next learn() starts a
  /// new episode. Throws what the environment or the networks throw.
  void learn(int64_t timesteps, EvalCallback* eval = nullptr, const ProgressFn& progress = {},
             int64_t report_every = 10000);

  /// The most probable action.
  int64_t predict(const Tensor& observation) override;
  /// A copy of the policy network acting greedily.
  Policy snapshot_policy() const override;
  /// Environment steps trained on.
  int64_t num_timesteps() const override { return timesteps_; }
  /// The policy network: observations {B, obs} -> logits {B, actions}.
  ag::nn::Sequential& policy_net() { return *actor_; }
  /// The value network: observations {B, obs} -> values {B, 1}.
  ag::nn::Sequential& value_net() { return *critic_; }
  /// The options given.
  const PPOOptions& options() const { return options_; }

 private:
  struct Rollout;
  void start_episode();
  void collect(int64_t steps, EvalCallback* eval);
  void update(double progress_remaining);

  PPOOptions options_;
  Env& env_;
  int64_t obs_size_ = 0, actions_ = 0, timesteps_ = 0;
  std::shared_ptr<ag::nn::Sequential> actor_, critic_;
  std::unique_ptr<ag::optim::Adam> optimizer_;
  std::unique_ptr<Rollout> rollout_;
  Tensor observation_;
  TrainingLog log_;
  uint64_t draws_ = 0;
};

}  // namespace tensorgrad::rl
