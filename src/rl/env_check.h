// What the agents and rl::evaluate check of what an environment returns, at the step it returns it:
// a NaN or infinite observation or reward would otherwise reach the weights (PPO) or the replay
// buffer (DQN) and surface many steps later as an error that names neither the environment nor
// the step.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "tensorgrad/core/error.h"
#include "tensorgrad/core/tensor.h"
#include "tensorgrad/rl/env.h"

namespace tensorgrad::rl::detail {

// "nan", "inf" or "-inf".
inline std::string non_finite_text(double v) { return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf"); }

// `where` says when: "step 8 of training", "step 3 of evaluation episode 2".
inline std::string env_blame(const char* call, const std::string& where) {
  return std::string(call) + ": the environment's " + where;
}

// "a observation" reads wrong: the article of `what`.
inline std::string returned_a(const char* what) {
  return std::strchr("aeiou", what[0]) ? " returned an " : " returned a ";
}

// Throws ShapeError or TypeError for an observation that is not the environment's shape and dtype
// ({1, obs...} is accepted), ValueError for one with a NaN or infinite element, naming the element.
// `what` is "observation" or "first observation (reset())".
inline void check_env_observation(const Env& env, const Tensor& observation, const char* call,
                                  const std::string& where, const char* what) {
  const Shape shape = env.observation_shape();
  if (!observation.defined())
    throw ValueError(env_blame(call, where) + " returned an undefined " + what + "; an environment must return " +
                     std::string(dtype_name(env.observation_dtype())) + " " + shape.str() + " observations");
  if (observation.dtype() != env.observation_dtype())
    throw TypeError(env_blame(call, where) + " returned a " + dtype_name(observation.dtype()) + " " + what +
                    "; its observation_dtype() is " + dtype_name(env.observation_dtype()));
  if (observation.numel() != shape.numel())
    throw ShapeError(env_blame(call, where) + returned_a(what) + what + " of shape " + observation.shape().str() +
                     "; its observation_shape() is " + shape.str());
  if (observation.dtype() != DType::Float32) return;  // integer ids are always finite
  const Tensor host = observation.device() == Device::CPU ? observation : observation.to(Device::CPU);
  const float* p = host.data<float>();
  for (int64_t i = 0; i < host.numel(); ++i)
    if (!std::isfinite(p[i]))
      throw ValueError(env_blame(call, where) + returned_a(what) + what + " whose element " + std::to_string(i) +
                       " (of " + shape.str() + ") is " + non_finite_text(p[i]) +
                       "; an environment must return finite observations and rewards. Nothing of this step was "
                       "used or stored and no weight changed; fix the environment (or wrap it to replace the "
                       "value)");
}

// The same for a step's reward and observation.
inline void check_env_step(const Env& env, const EnvStep& s, const char* call, const std::string& where) {
  if (!std::isfinite(s.reward))
    throw ValueError(env_blame(call, where) + " returned the reward " + non_finite_text(s.reward) +
                     "; an environment must return finite observations and rewards. Nothing of this step was "
                     "used or stored and no weight changed; fix the environment (or wrap it to replace the value)");
  check_env_observation(env, s.observation, call, where, "observation");
}

}  // namespace tensorgrad::rl::detail
