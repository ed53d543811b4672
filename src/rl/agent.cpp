// stable-baselines3's EvalCallback (deterministic evaluation, best snapshot kept).
#include "tensorgrad/rl/agent.h"

#include <chrono>
#include <limits>
#include <string>

#include "tensorgrad/core/error.h"

namespace tensorgrad::rl {

EvalCallback::EvalCallback(Env& eval_env, const EvalCallbackOptions& options)
    : env_(eval_env), options_(options), best_mean_(-std::numeric_limits<double>::infinity()) {
  if (options.eval_freq < 1 || options.n_eval_episodes < 1)
    throw ValueError("EvalCallback: eval_freq and n_eval_episodes must be at least 1; got " +
                     std::to_string(options.eval_freq) + " and " + std::to_string(options.n_eval_episodes));
}

bool EvalCallback::on_step(const Agent& agent, bool force) {
  const int64_t t = agent.num_timesteps();
  if (t == last_step_ || (!force && t % options_.eval_freq != 0)) return false;
  const auto t0 = std::chrono::steady_clock::now();
  Policy policy = agent.snapshot_policy();
  Evaluation e = evaluate(policy, env_, options_.n_eval_episodes, options_.seed);
  last_mean_ = e.mean_return;
  last_step_ = t;
  if (!best_policy_ || e.mean_return > best_mean_) {
    best_policy_ = std::move(policy);
    best_mean_ = e.mean_return;
    best_step_ = t;
  }
  evaluations_.emplace_back(t, std::move(e));
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return true;
}

const Policy& EvalCallback::best_policy() const {
  if (!best_policy_)
    throw StateError("EvalCallback::best_policy: no evaluation has run yet; pass the callback to an agent's learn()");
  return best_policy_;
}

void TrainingLog::end_episode() {
  recent.push_back(float(episode_return));
  if (recent.size() > 20) recent.erase(recent.begin());
  ++episodes;
  episode_return = 0.0;
}

Progress TrainingLog::report(int64_t timesteps, double steps_per_second, double exploration_rate) {
  Progress p;
  p.timesteps = timesteps;
  p.episodes = episodes;
  for (float v : recent) p.recent_return += double(v);
  if (!recent.empty()) p.recent_return /= double(recent.size());
  p.loss = loss_count ? loss_sum / double(loss_count) : std::numeric_limits<double>::quiet_NaN();
  p.exploration_rate = exploration_rate;
  p.steps_per_second = steps_per_second;
  loss_sum = 0.0, loss_count = 0;
  return p;
}

}  // namespace tensorgrad::rl
