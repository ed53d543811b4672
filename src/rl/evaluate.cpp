// stable-baselines3's evaluate_policy: whole episodes from fixed seeds, mean and standard deviation of the return.
#include "tensorgrad/rl/evaluate.h"

#include <cmath>
#include <string>

#include "tensorgrad/core/error.h"
#include "rl/env_check.h"

namespace tensorgrad::rl {

Evaluation evaluate(const Policy& policy, Env& env, int episodes, uint64_t seed, int64_t max_steps) {
  if (episodes < 1) throw ValueError("rl::evaluate: episodes must be at least 1; got " + std::to_string(episodes));
  if (max_steps < 1) throw ValueError("rl::evaluate: max_steps must be at least 1; got " + std::to_string(max_steps));
  if (!policy) throw ValueError("rl::evaluate: the policy is empty; pass a function from observation to action");
  Evaluation r;
  for (int e = 0; e < episodes; ++e) {
    Tensor observation = env.reset(seed + uint64_t(e));
    auto where = [&](int64_t step) {
      return "step " + std::to_string(step) + " of evaluation episode " + std::to_string(e) + " (seed " +
             std::to_string(seed + uint64_t(e)) + ")";
    };
    detail::check_env_observation(env, observation, "rl::evaluate", "reset() before " + where(1), "first observation");
    double total = 0.0;
    int64_t steps = 0;
    for (;;) {
      if (steps == max_steps)
        throw ValueError("rl::evaluate: episode " + std::to_string(e) + " ran " + std::to_string(max_steps) +
                         " steps without ending; give the environment a time limit or raise max_steps");
      EnvStep s = env.step(policy(observation));
      detail::check_env_step(env, s, "rl::evaluate", where(steps + 1));
      total += double(s.reward);
      ++steps;
      if (s.terminated || s.truncated) break;
      observation = std::move(s.observation);
    }
    r.returns.push_back(float(total));
    r.lengths.push_back(steps);
  }
  double sum = 0.0;
  for (float v : r.returns) sum += double(v);
  r.mean_return = sum / double(episodes);
  double sq = 0.0;
  for (float v : r.returns) sq += (double(v) - r.mean_return) * (double(v) - r.mean_return);
  r.std_return = std::sqrt(sq / double(episodes));
  return r;
}

}  // namespace tensorgrad::rl
