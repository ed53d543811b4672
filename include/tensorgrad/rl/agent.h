#pragma once
// What the kit's agents share: a greedy policy to evaluate, a count of the
// environment steps trained on, progress reports, and stable-baselines3's
// EvalCallback, which evaluates an agent as it trains and keeps the best
// snapshot.
#include <cstdint>
#include <functional>
#include <vector>

#include "tensorgrad/core/tensor.h"
#include "tensorgrad/rl/env.h"
#include "tensorgrad/rl/evaluate.h"

namespace tensorgrad::rl {

/// A training progress report (one every `report_every` environment steps
/// of an agent's learn()).
struct Progress {
  int64_t timesteps = 0;        ///< environment steps trained on so far
  int64_t episodes = 0;         ///< training episodes finished
  double recent_return = 0.0;   ///< the mean return of the last 20 of them (0 before any)
  double loss = 0.0;            ///< the mean training loss since the last report (NaN when none)
  double exploration_rate = 0;  ///< DQN's epsilon; 0 for PPO
  double steps_per_second = 0;  ///< environment steps per second of training (evaluations excluded)
};
/// Called with each progress report.
using ProgressFn = std::function<void(const Progress&)>;

/// What an agent counts as it trains, for its progress reports: finished
/// episodes, the return of the one running and of the last 20, the training
/// losses since the last report.
struct TrainingLog {
  int64_t episodes = 0;           ///< episodes finished
  double episode_return = 0.0;    ///< the running episode's return so far
  std::vector<float> recent;      ///< the last 20 finished episodes' returns, oldest first
  double loss_sum = 0.0;          ///< losses since the last report, summed
  int64_t loss_count = 0;         ///< and counted
  /// Adds a step's reward to the running episode.
  void reward(float r) { episode_return += double(r); }
  /// Ends the running episode.
  void end_episode();
  /// Counts a training loss.
  void loss(double value) { loss_sum += value, ++loss_count; }
  /// A report at `timesteps` (steps_per_second and exploration_rate as
  /// given); starts a new loss average.
  Progress report(int64_t timesteps, double steps_per_second, double exploration_rate = 0.0);
};

/// A reinforcement-learning agent over an environment with discrete actions.
class Agent {
 public:
  virtual ~Agent() = default;
  /// The greedy action for one observation (the environment's shape).
  virtual int64_t predict(const Tensor& observation) = 0;
  /// The greedy policy of the current weights, as a copy that further
  /// training does not change (for rl::evaluate and EvalCallback).
  virtual Policy snapshot_policy() const = 0;
  /// Environment steps trained on so far (stable-baselines3's num_timesteps).
  virtual int64_t num_timesteps() const = 0;
};

/// When and on what EvalCallback evaluates. (Named apart from
/// tensorgrad::EvalOptions, how a Trainer evaluates a batch.)
struct EvalCallbackOptions {
  /// Evaluate every this many environment steps of training (SB3's eval_freq).
  int64_t eval_freq = 5000;
  /// Episodes per evaluation (n_eval_episodes), on seeds seed, seed + 1, ...
  int n_eval_episodes = 10;
  /// The first evaluation episode's seed; keep the range apart from the
  /// seeds a final test uses.
  uint64_t seed = 1000000;
};

/// stable-baselines3's EvalCallback with deterministic (greedy) actions: an
/// agent's learn() calls on_step() after every environment step; every
/// eval_freq steps (and at the end of learn) the agent's greedy policy is
/// evaluated on the evaluation seeds, and a snapshot of it kept when its
/// mean return beats every earlier one (the first to reach the best is
/// kept).
class EvalCallback {
 public:
  /// Evaluates in `eval_env` (not the training environment: its episodes
  /// would be cut). Throws ValueError for eval_freq or n_eval_episodes below 1.
  EvalCallback(Env& eval_env, const EvalCallbackOptions& options = {});
  /// Evaluates when the agent's num_timesteps() is a multiple of eval_freq
  /// (or `force`); returns whether it did.
  bool on_step(const Agent& agent, bool force = false);
  /// Whether an evaluation has run.
  bool has_best() const { return static_cast<bool>(best_policy_); }
  /// The kept snapshot. Throws StateError before the first evaluation.
  const Policy& best_policy() const;
  /// The kept snapshot's mean return (-inf before the first evaluation).
  double best_mean_reward() const { return best_mean_; }
  /// The num_timesteps() at which it was taken.
  int64_t best_timestep() const { return best_step_; }
  /// The last evaluation's mean return.
  double last_mean_reward() const { return last_mean_; }
  /// Every evaluation so far, with the step it ran at.
  const std::vector<std::pair<int64_t, Evaluation>>& evaluations() const { return evaluations_; }
  /// Seconds spent evaluating.
  double seconds() const { return seconds_; }
  /// The options given.
  const EvalCallbackOptions& options() const { return options_; }

 private:
  Env& env_;
  EvalCallbackOptions options_;
  Policy best_policy_;
  double best_mean_, last_mean_ = 0.0, seconds_ = 0.0;
  int64_t best_step_ = 0, last_step_ = -1;
  std::vector<std::pair<int64_t, Evaluation>> evaluations_;
};

}  // namespace tensorgrad::rl
