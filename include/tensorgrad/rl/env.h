#pragma once
// Environments for the reinforcement-learning kit: the small interface its
// agents and rl::evaluate take (Gymnasium's reset / step), and CartPole-v1
// built in.
#include <array>
#include <cstdint>
#include <optional>

#include "tensorgrad/core/shape.h"
#include "tensorgrad/core/tensor.h"
#include "tensorgrad/nn/callback.h"

namespace tensorgrad::rl {

/// What Env::step returns: Gymnasium's (observation, reward, terminated,
/// truncated). (Named apart from tensorgrad::StepResult, what a Trainer's
/// step measured.)
struct EnvStep {
  /// The observation after the step, of the environment's
  /// observation_shape() and observation_dtype(), in memory of its own.
  Tensor observation;
  /// The reward for the step.
  float reward = 0.0f;
  /// The episode reached a terminal state: the value after it is 0, a TD
  /// target does not bootstrap.
  bool terminated = false;
  /// The episode was cut off (a time limit) in a state that is not terminal:
  /// a TD target still bootstraps from the observation (stable-baselines3's
  /// handle_timeout_termination).
  bool truncated = false;
};

/// An environment with discrete actions, as Gymnasium's Env with a Discrete
/// action space. reset() starts an episode, step() advances it; after a step
/// that terminated or truncated, reset() must be called before the next
/// step(). Implementations throw ValueError for an action outside
/// [0, action_count()) and StateError for a step without a running episode.
class Env {
 public:
  virtual ~Env() = default;
  /// The shape of one observation ({4} for CartPole).
  virtual Shape observation_shape() const = 0;
  /// The dtype of observations: Float32 (measurements, images) or Int32
  /// (token ids, cell indices).
  virtual DType observation_dtype() const { return DType::Float32; }
  /// The number of actions; actions are 0 .. action_count() - 1.
  virtual int64_t action_count() const = 0;
  /// Starts an episode and returns its first observation. With a seed the
  /// environment's generator is reseeded first, so the same seed gives the
  /// same episode (Gymnasium's reset(seed=...)); without one the generator
  /// goes on from where it was.
  virtual Tensor reset(std::optional<uint64_t> seed = std::nullopt) = 0;
  /// Applies `action` for one time step.
  virtual EnvStep step(int64_t action) = 0;
};

/// CartPole-v1 (Barto, Sutton & Anderson 1983) with exactly Gymnasium's
/// dynamics, constants and episode rules (cartpole.py's default "euler"
/// kinematics, Florian 2007's equations, TimeLimit of 500 steps): the state
/// (x, x_dot, theta, theta_dot) is the cart's position (m) and velocity and
/// the pole's angle from upright (rad) and angular velocity; action 0 pushes
/// the cart left with 10 N, action 1 right; every step rewards 1; the episode
/// terminates when |x| > 2.4 or |theta| > 12 degrees and is truncated after
/// 500 steps. Observations are float32 {4}. Deterministic: the only
/// randomness is the start state, each value uniform in [-0.05, 0.05) from
/// the environment's own counter-based stream (hash_random of the seed and a
/// counter: the same on every platform). Its whole state (the physical
/// state, the step count, the stream's position) saves and restores
/// (nn::Stateful), so an agent's checkpoint can resume the episode in
/// progress.
class CartPole final : public Env, public nn::Stateful {
 public:
  /// Gymnasium's constants, by Gymnasium's names.
  ///@{
  static constexpr double kGravity = 9.8;
  static constexpr double kMassCart = 1.0;
  static constexpr double kMassPole = 0.1;
  static constexpr double kTotalMass = kMassPole + kMassCart;
  static constexpr double kLength = 0.5;  ///< half the pole's length
  static constexpr double kPoleMassLength = kMassPole * kLength;
  static constexpr double kForceMag = 10.0;
  static constexpr double kTau = 0.02;  ///< seconds between state updates
  static constexpr double kThetaThresholdRadians = 12.0 * 2.0 * 3.14159265358979323846 / 360.0;
  static constexpr double kXThreshold = 2.4;
  static constexpr int kMaxEpisodeSteps = 500;
  ///@}

  /// An environment whose generator is seeded with `seed`. Call reset()
  /// before step().
  explicit CartPole(uint64_t seed = 0) : seed_(seed) {}

  /// {4}.
  Shape observation_shape() const override { return Shape{4}; }
  /// 2: left and right.
  int64_t action_count() const override { return 2; }
  /// Draws a start state (reseeding first when `seed` is given).
  Tensor reset(std::optional<uint64_t> seed = std::nullopt) override;
  /// One explicit Euler step of 0.02 s (positions advance with the old
  /// velocities, as Gymnasium's "euler"). Throws ValueError for an action
  /// other than 0 or 1, StateError when no episode is running (call reset()).
  EnvStep step(int64_t action) override;

  /// The exact (double) state.
  const std::array<double, 4>& state() const { return state_; }
  /// Sets the state and starts an episode from it (hand-made starts, tests).
  void set_state(const std::array<double, 4>& state);
  /// Steps taken in this episode.
  int elapsed_steps() const { return steps_; }
  /// The state as the float32 observation {4}.
  Tensor observation() const;

  /// "CartPole".
  const char* type() const override { return "CartPole"; }
  /// The state, step count, whether an episode runs, the seed and the stream's position.
  nn::CallbackState get_state() const override;
  /// Restores a state from get_state(); ValueError for a malformed one (nothing changes then).
  void set_state(const nn::CallbackState& state) override;

 private:
  uint64_t seed_ = 0, draws_ = 0;
  std::array<double, 4> state_{};
  int steps_ = 0;
  bool done_ = true;
};

}  // namespace tensorgrad::rl
