#pragma once
// Scoring a policy by its return over whole episodes (stable-baselines3's
// evaluate_policy).
#include <cstdint>
#include <functional>
#include <vector>

#include "tensorgrad/core/tensor.h"
#include "tensorgrad/rl/env.h"

namespace tensorgrad::rl {

/// A policy: the action to take for one observation (of the environment's
/// observation_shape()).
using Policy = std::function<int64_t(const Tensor& observation)>;

/// What evaluate() measured.
struct Evaluation {
  double mean_return = 0.0;   ///< the mean of the episodes' returns
  double std_return = 0.0;    ///< their standard deviation (population, as NumPy's std)
  std::vector<float> returns; ///< each episode's undiscounted return, in order
  std::vector<int64_t> lengths; ///< each episode's steps
};

/// Runs `episodes` whole episodes of `policy` in `env`, episode e starting
/// from env.reset(seed + e), so that the same seed scores on the same starts
/// (stable-baselines3's evaluate_policy with deterministic actions when the
/// policy is greedy). An episode ends when a step terminates or truncates.
/// Throws ValueError for episodes or max_steps below 1, a null policy, or an episode
/// longer than `max_steps` (an environment without a time limit), or a NaN
/// or infinite observation element or reward from the environment (naming
/// the episode, its step and the element; ShapeError or TypeError for an
/// observation of another shape or dtype); whatever the policy or the
/// environment throws passes through.
Evaluation evaluate(const Policy& policy, Env& env, int episodes, uint64_t seed, int64_t max_steps = 1000000);

}  // namespace tensorgrad::rl
