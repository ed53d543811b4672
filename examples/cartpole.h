#pragma once
// The cart-pole balancing task (Barto, Sutton & Anderson 1983, "Neuronlike
// adaptive elements that can solve difficult learning control problems"),
// with exactly the dynamics, constants and episode rules of Gym's
// CartPole-v1 (gym/envs/classic_control/cartpole.py with the default "euler"
// kinematics, wrapped in TimeLimit(max_episode_steps = 500)).
//
// Header-only and free of tensorgrad, so that tests and examples can both
// use it. Deterministic: the only randomness is the initial state, drawn from
// the environment's own seeded generator.
#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>

namespace cartpole {

/// What one step returns (Gym's (observation, reward, terminated, truncated)).
struct Step {
  /// The new state (x, x_dot, theta, theta_dot) as float32, as Gym returns it.
  std::array<float, 4> observation{};
  /// 1 for every step, the one that ends the episode included (Gym's default).
  float reward = 1.0f;
  /// The pole fell or the cart left the track: |x| > 2.4 or |theta| > 12 degrees.
  /// A terminal state: a value estimate bootstraps from nothing after it.
  bool terminated = false;
  /// The 500-step time limit was reached without termination. Not terminal:
  /// the episode is cut off, the state itself has a value, so a TD target
  /// still bootstraps from the next state.
  bool truncated = false;
};

/// CartPole-v1. State (x, x_dot, theta, theta_dot): cart position (m) and
/// velocity, pole angle from upright (rad, positive clockwise) and angular
/// velocity. Action 0 pushes the cart left with 10 N, action 1 right.
class CartPole {
 public:
  // Gym's constants, by Gym's names.
  static constexpr double kGravity = 9.8;
  static constexpr double kMassCart = 1.0;
  static constexpr double kMassPole = 0.1;
  static constexpr double kTotalMass = kMassPole + kMassCart;
  static constexpr double kLength = 0.5;  // half the pole's length
  static constexpr double kPoleMassLength = kMassPole * kLength;
  static constexpr double kForceMag = 10.0;
  static constexpr double kTau = 0.02;  // seconds between state updates
  /// 12 degrees, in radians (12 * 2 * pi / 360 = 0.20943951...).
  static constexpr double kThetaThresholdRadians = 12.0 * 2.0 * 3.14159265358979323846 / 360.0;
  static constexpr double kXThreshold = 2.4;
  static constexpr int kMaxEpisodeSteps = 500;
  static constexpr int kActions = 2;
  static constexpr int kObservationSize = 4;

  /// An environment whose generator is seeded with `seed`. Call reset() before step().
  explicit CartPole(uint64_t seed = 0) : rng_(seed) {}

  /// Reseeds the generator (Gym's reset(seed=...) without the reset).
  void seed(uint64_t seed) { rng_.seed(seed); }

  /// Starts an episode: each of the four state values uniform in
  /// [-0.05, 0.05) from the environment's generator (continuing its stream).
  std::array<float, 4> reset() {
    for (double& s : state_) s = -0.05 + 0.1 * uniform01();
    steps_ = 0;
    done_ = false;
    return observation();
  }
  /// Reseeds with `seed`, then reset(): the same seed gives the same episode start.
  std::array<float, 4> reset(uint64_t seed) {
    this->seed(seed);
    return reset();
  }

  /// Applies action 0 (left) or 1 (right) for one time step (explicit Euler,
  /// as Gym's "euler" kinematics: positions advance with the old velocities).
  /// Throws std::invalid_argument for another action and std::logic_error
  /// when the episode has ended (call reset()).
  Step step(int action) {
    if (action != 0 && action != 1)
      throw std::invalid_argument("CartPole::step: action must be 0 (left) or 1 (right); got " + std::to_string(action));
    if (done_) throw std::logic_error("CartPole::step: the episode has ended; call reset() first");
    auto [x, x_dot, theta, theta_dot] = state_;
    const double force = action == 1 ? kForceMag : -kForceMag;
    const double costheta = std::cos(theta);
    const double sintheta = std::sin(theta);
    // Florian 2007, "Correct equations for the dynamics of the cart-pole system", as Gym.
    const double temp = (force + kPoleMassLength * theta_dot * theta_dot * sintheta) / kTotalMass;
    const double thetaacc =
        (kGravity * sintheta - costheta * temp) / (kLength * (4.0 / 3.0 - kMassPole * costheta * costheta / kTotalMass));
    const double xacc = temp - kPoleMassLength * thetaacc * costheta / kTotalMass;
    x = x + kTau * x_dot;
    x_dot = x_dot + kTau * xacc;
    theta = theta + kTau * theta_dot;
    theta_dot = theta_dot + kTau * thetaacc;
    state_ = {x, x_dot, theta, theta_dot};
    ++steps_;

    Step s;
    s.observation = observation();
    s.reward = 1.0f;
    s.terminated = x < -kXThreshold || x > kXThreshold || theta < -kThetaThresholdRadians || theta > kThetaThresholdRadians;
    s.truncated = !s.terminated && steps_ >= kMaxEpisodeSteps;
    done_ = s.terminated || s.truncated;
    return s;
  }

  /// The exact (double) state.
  const std::array<double, 4>& state() const { return state_; }
  /// Sets the state and starts a fresh episode from it (tests, hand-made starts).
  void set_state(const std::array<double, 4>& state) {
    state_ = state;
    steps_ = 0;
    done_ = false;
  }
  /// Steps taken in this episode.
  int elapsed_steps() const { return steps_; }
  /// The state as the float32 observation Gym returns.
  std::array<float, 4> observation() const {
    return {float(state_[0]), float(state_[1]), float(state_[2]), float(state_[3])};
  }

 private:
  // A double in [0, 1) from the top 53 bits of the generator's output (the
  // same on every standard library, unlike std::uniform_real_distribution).
  double uniform01() { return double(rng_() >> 11) * (1.0 / 9007199254740992.0); }

  std::mt19937_64 rng_;
  std::array<double, 4> state_{};
  int steps_ = 0;
  bool done_ = true;
};

}  // namespace cartpole
