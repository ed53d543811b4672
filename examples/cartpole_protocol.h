#pragma once
// What examples/dqn_cartpole.cpp and examples/ppo_cartpole.cpp share: the
// evaluation protocol of stable-baselines3 and its zoo (a fixed budget of
// training steps, greedy evaluation on fixed seeds every so often keeping
// the best snapshot, then 100 greedy episodes on held-out seeds), its
// command-line options, and the final report.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <tensorgrad/tensorgrad.h>

namespace cartpole_protocol {

namespace tg = tensorgrad;

/// The protocol's settings.
struct Protocol {
  int64_t steps = 100000;       ///< training environment steps
  tg::rl::EvalCallbackOptions eval;     ///< periodic evaluation (seeds 1000000 on)
  int test_episodes = 100;      ///< held-out episodes for the kept snapshot
  uint64_t test_seed = 2000000; ///< the first held-out seed
  int threads = 1;
  bool quiet = false;
  std::string device = "cpu";
};

/// Adds the protocol's options (--steps, --threads, --eval-every,
/// --eval-episodes, --test-episodes, --quiet, --device) to `app`.
inline void add_options(CLI::App& app, Protocol& p, const std::string& steps_help) {
  app.add_option("--steps", p.steps, steps_help)->check(CLI::Range(int64_t(0), int64_t(100000000)))->capture_default_str();
  app.add_option("--threads", p.threads, "compute threads (0: one per core; the networks are small, 1 is fastest)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  app.add_option("--eval-every", p.eval.eval_freq, "greedy evaluation every this many training steps")
      ->check(CLI::Range(int64_t(1), int64_t(100000000)))
      ->capture_default_str();
  app.add_option("--eval-episodes", p.eval.n_eval_episodes, "episodes per evaluation")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  app.add_option("--test-episodes", p.test_episodes, "held-out greedy episodes for the kept snapshot")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_flag("--quiet", p.quiet, "print only the final summary");
  app.add_option("--device", p.device, "where the networks train and act, as PyTorch names devices (cpu, vulkan:0)")
      ->capture_default_str();
}

/// The device, refused before training when it is not available; sets the thread count.
inline tg::Device start(const Protocol& p) {
  const tg::Device device(p.device);
  (void)tg::backend(device);
  if (p.threads > 0) tg::set_num_threads(p.threads);
  return device;
}

/// Trains `agent` under `evaluator` with `learn` (a call of the agent's learn with the evaluator and
/// a progress printer), then scores the kept snapshot on the held-out seeds and prints the summary
/// ending in the `final:` line. `since` is when the program started.
template <class Learn>
void run(const Protocol& p, tg::rl::Agent& agent, tg::rl::EvalCallback& evaluator, Learn learn,
         std::chrono::steady_clock::time_point since, uint64_t seed) {
  using clock = std::chrono::steady_clock;
  const auto train_start = clock::now();
  learn();
  const double train_s = std::chrono::duration<double>(clock::now() - train_start).count() - evaluator.seconds();
  tg::rl::CartPole test_env;
  const auto t0 = clock::now();
  const tg::rl::Evaluation test = tg::rl::evaluate(evaluator.best_policy(), test_env, p.test_episodes, p.test_seed);
  const double test_s = std::chrono::duration<double>(clock::now() - t0).count();
  const double wall = std::chrono::duration<double>(clock::now() - since).count();
  const float lo = *std::min_element(test.returns.begin(), test.returns.end());
  const int full = int(std::count(test.returns.begin(), test.returns.end(), 500.0f));
  std::printf("seed %llu: %lld training env steps\n", (unsigned long long)seed, (long long)agent.num_timesteps());
  std::printf("best eval return %.1f (%d episodes, seeds %llu-%llu) at step %lld\n", evaluator.best_mean_reward(),
              p.eval.n_eval_episodes, (unsigned long long)p.eval.seed,
              (unsigned long long)(p.eval.seed + uint64_t(p.eval.n_eval_episodes) - 1),
              (long long)evaluator.best_timestep());
  std::printf("final: kept snapshot averages %.2f over %d greedy episodes on held-out seeds %llu-%llu "
              "(min %.0f, std %.1f, %d of %d reach 500)\n",
              test.mean_return, p.test_episodes, (unsigned long long)p.test_seed,
              (unsigned long long)(p.test_seed + uint64_t(p.test_episodes) - 1), double(lo), test.std_return, full,
              p.test_episodes);
  std::printf("wall time %.1f s (training %.1f s, evaluation %.1f s, held-out test %.1f s), %.0f env steps/s\n", wall,
              train_s, evaluator.seconds(), test_s, train_s > 0 ? double(agent.num_timesteps()) / train_s : 0.0);
}

}  // namespace cartpole_protocol
