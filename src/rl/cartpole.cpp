// CartPole-v1 with Gymnasium's dynamics (gymnasium/envs/classic_control/cartpole.py).
#include <cmath>
#include <limits>
#include <string>

#include "tensorgrad/core/error.h"
#include "tensorgrad/core/random.h"
#include "tensorgrad/rl/env.h"

namespace tensorgrad::rl {

Tensor CartPole::reset(std::optional<uint64_t> seed) {
  if (seed) seed_ = *seed, draws_ = 0;
  for (double& s : state_) s = -0.05 + 0.1 * (double(hash_random(seed_, draws_++) >> 11) * (1.0 / 9007199254740992.0));
  steps_ = 0;
  done_ = false;
  return observation();
}

EnvStep CartPole::step(int64_t action) {
  if (action != 0 && action != 1)
    throw ValueError("CartPole::step: the action must be 0 (push left) or 1 (push right); got " +
                     std::to_string(action));
  if (done_) throw StateError("CartPole::step: no episode is running (it ended, or never began); call reset() first");
  auto [x, x_dot, theta, theta_dot] = state_;
  const double force = action == 1 ? kForceMag : -kForceMag;
  const double costheta = std::cos(theta), sintheta = std::sin(theta);
  const double temp = (force + kPoleMassLength * theta_dot * theta_dot * sintheta) / kTotalMass;
  const double thetaacc =
      (kGravity * sintheta - costheta * temp) / (kLength * (4.0 / 3.0 - kMassPole * costheta * costheta / kTotalMass));
  const double xacc = temp - kPoleMassLength * thetaacc * costheta / kTotalMass;
  x += kTau * x_dot;
  x_dot += kTau * xacc;
  theta += kTau * theta_dot;
  theta_dot += kTau * thetaacc;
  state_ = {x, x_dot, theta, theta_dot};
  ++steps_;
  EnvStep s;
  s.observation = observation();
  s.reward = 1.0f;
  s.terminated = x < -kXThreshold || x > kXThreshold || theta < -kThetaThresholdRadians || theta > kThetaThresholdRadians;
  s.truncated = steps_ >= kMaxEpisodeSteps;  // Gymnasium's TimeLimit: whether or not the step terminated
  done_ = s.terminated || s.truncated;
  return s;
}

void CartPole::set_state(const std::array<double, 4>& state) {
  state_ = state;
  steps_ = 0;
  done_ = false;
}

Tensor CartPole::observation() const {
  Tensor t = Tensor::empty(Shape{4});
  float* p = t.data<float>();
  for (int i = 0; i < 4; ++i) p[i] = float(state_[size_t(i)]);
  return t;
}

nn::CallbackState CartPole::get_state() const {
  nn::CallbackState s;
  const char* names[4] = {"x", "x_dot", "theta", "theta_dot"};
  for (int i = 0; i < 4; ++i) s.values[names[i]] = state_[size_t(i)];
  s.values["steps"] = steps_;
  s.values["done"] = done_ ? 1.0 : 0.0;
  // The seed as two 32-bit halves: a double holds 53 bits.
  s.values["seed_high"] = double(seed_ >> 32);
  s.values["seed_low"] = double(seed_ & 0xffffffffu);
  s.values["draws"] = double(draws_);
  return s;
}

void CartPole::set_state(const nn::CallbackState& s) {
  auto get = [&](const char* key, double lo, double hi, bool integer) {
    const auto it = s.values.find(key);
    if (it == s.values.end())
      throw ValueError(std::string("CartPole::set_state: the state has no '") + key + "'; pass one from get_state()");
    const double v = it->second;
    if (!(v >= lo && v <= hi) || (integer && v != std::floor(v)))
      throw ValueError(std::string("CartPole::set_state: '") + key + "' is " + std::to_string(v) + "; expected " +
                       (integer ? "an integer" : "a number") + " in [" + std::to_string(lo) + ", " +
                       std::to_string(hi) + "]");
    return v;
  };
  const double inf = std::numeric_limits<double>::infinity();
  const std::array<double, 4> state{get("x", -inf, inf, false), get("x_dot", -inf, inf, false),
                                    get("theta", -inf, inf, false), get("theta_dot", -inf, inf, false)};
  const int steps = int(get("steps", 0, 1e9, true));
  const bool done = get("done", 0, 1, true) != 0.0;
  const uint64_t seed = uint64_t(get("seed_high", 0, 4294967295.0, true)) << 32 |
                        uint64_t(get("seed_low", 0, 4294967295.0, true));
  const uint64_t draws = uint64_t(get("draws", 0, 9007199254740992.0, true));
  state_ = state, steps_ = steps, done_ = done, seed_ = seed, draws_ = draws;
}

}  // namespace tensorgrad::rl
