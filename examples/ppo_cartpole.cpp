// PPO on CartPole-v1 with tensorgrad's reinforcement-learning kit (rl::PPO on
// the eager API, rl::CartPole, rl::EvalCallback, rl::evaluate). Trains for
// --steps environment steps, evaluates greedily every --eval-every steps on
// fixed evaluation seeds keeping the best snapshot (stable-baselines3's
// EvalCallback), then reports that snapshot's mean return over
// --test-episodes greedy episodes on held-out seeds. The defaults are
// rl-baselines3-zoo's for CartPole-v1 (its 8 environments' 8 x 32 steps a
// rollout as one environment's 256). Deterministic for a given --seed and
// --threads.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <tensorgrad/tensorgrad.h>

namespace tg = tensorgrad;

int main(int argc, char** argv) {
  CLI::App app{"Train a PPO agent on CartPole-v1 with tensorgrad"};
  tg::rl::PPOOptions o;
  o.n_steps = 256;
  o.batch_size = 256;
  o.n_epochs = 20;
  o.gamma = 0.98f;
  o.gae_lambda = 0.8f;
  o.learning_rate = 1e-3;
  o.anneal_learning_rate = true;
  o.clip_range = 0.2f;
  o.anneal_clip_range = true;
  int64_t steps = 100000;
  tg::rl::EvalOptions eval;
  int test_episodes = 100;
  uint64_t test_seed = 2000000;
  int threads = 1;
  bool quiet = false, constant = false;
  std::string device = "cpu";
  app.add_option("--seed", o.seed, "training seed (weights, environment, sampling, minibatches)")->capture_default_str();
  app.add_option("--steps", steps, "training environment steps (at most 200,000 for the held-out protocol)")
      ->check(CLI::Range(int64_t(0), int64_t(100000000)))
      ->capture_default_str();
  app.add_option("--threads", threads, "compute threads (0: one per core; the networks are small, 1 is fastest)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  app.add_option("--eval-every", eval.eval_freq, "greedy evaluation every this many training steps")
      ->check(CLI::Range(int64_t(1), int64_t(100000000)))
      ->capture_default_str();
  app.add_option("--eval-episodes", eval.n_eval_episodes, "episodes per evaluation")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  app.add_option("--test-episodes", test_episodes, "held-out greedy episodes for the kept snapshot")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_flag("--quiet", quiet, "print only the final summary");
  app.add_option("--n-steps", o.n_steps, "environment steps per rollout")
      ->check(CLI::Range(int64_t(1), int64_t(1000000)))
      ->capture_default_str();
  app.add_option("--batch-size", o.batch_size, "minibatch size")
      ->check(CLI::Range(int64_t(1), int64_t(1000000)))
      ->capture_default_str();
  app.add_option("--epochs", o.n_epochs, "passes over each rollout")->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_option("--lr", o.learning_rate, "Adam's learning rate")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_flag("--constant", constant, "constant learning rate and clip range (no linear annealing)");
  app.add_option("--gamma", o.gamma, "discount")->check(CLI::Range(0.0f, 1.0f))->capture_default_str();
  app.add_option("--gae-lambda", o.gae_lambda, "GAE's lambda")->check(CLI::Range(0.0f, 1.0f))->capture_default_str();
  app.add_option("--clip-range", o.clip_range, "the surrogate's clip")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--ent-coef", o.ent_coef, "entropy bonus")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--device", device, "where the networks train and act, as PyTorch names devices (cpu, vulkan:0)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  o.anneal_learning_rate = o.anneal_clip_range = !constant;

  try {
    o.device = tg::Device(device);
    (void)tg::backend(o.device);  // an unavailable device is refused before training starts
    const auto start = std::chrono::steady_clock::now();
    if (threads > 0) tg::set_num_threads(threads);
    if (!quiet)
      std::printf("tensorgrad PPO on CartPole-v1: seed %llu, %lld steps, %d threads, on %s\n"
                  "policy and value 4-64-64 tanh, Adam lr %g%s, rollouts of %lld steps, minibatch %lld, %d epochs, "
                  "gamma %g, GAE lambda %g, clip %g%s\n",
                  (unsigned long long)o.seed, (long long)steps, tg::num_threads(), o.device.str().c_str(), o.learning_rate,
                  constant ? "" : " -> 0", (long long)o.n_steps, (long long)o.batch_size, o.n_epochs,
                  double(o.gamma), double(o.gae_lambda), double(o.clip_range), constant ? "" : " -> 0");
    tg::rl::CartPole env, eval_env, test_env;
    tg::rl::PPO agent(env, o);
    tg::rl::EvalCallback evaluator(eval_env, eval);
    const auto train_start = std::chrono::steady_clock::now();
    agent.learn(steps, &evaluator, [&](const tg::rl::Progress& p) {
      if (quiet) return;
      std::printf("steps %7lld  episodes %5lld  return(last 20) %6.1f  eval %6.1f  best %6.1f  loss %8.4f  "
                  "%6.0f steps/s\n",
                  (long long)p.timesteps, (long long)p.episodes, p.recent_return, evaluator.last_mean_reward(),
                  evaluator.best_mean_reward(), p.loss, p.steps_per_second);
      std::fflush(stdout);
    }, eval.eval_freq);
    const double learn_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - train_start).count();
    const double train_s = learn_s - evaluator.seconds();

    const auto t0 = std::chrono::steady_clock::now();
    const tg::rl::Evaluation test = tg::rl::evaluate(evaluator.best_policy(), test_env, test_episodes, test_seed);
    const double test_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const float lo = *std::min_element(test.returns.begin(), test.returns.end());
    const int full = int(std::count(test.returns.begin(), test.returns.end(), 500.0f));
    std::printf("seed %llu: %lld training env steps\n", (unsigned long long)o.seed, (long long)agent.num_timesteps());
    std::printf("best eval return %.1f (%d episodes, seeds %llu-%llu) at step %lld\n", evaluator.best_mean_reward(),
                eval.n_eval_episodes, (unsigned long long)eval.seed,
                (unsigned long long)(eval.seed + uint64_t(eval.n_eval_episodes) - 1), (long long)evaluator.best_timestep());
    std::printf("final: kept snapshot averages %.2f over %d greedy episodes on held-out seeds %llu-%llu "
                "(min %.0f, std %.1f, %d of %d reach 500)\n",
                test.mean_return, test_episodes, (unsigned long long)test_seed,
                (unsigned long long)(test_seed + uint64_t(test_episodes) - 1), double(lo), test.std_return, full,
                test_episodes);
    std::printf("wall time %.1f s (training %.1f s, evaluation %.1f s, held-out test %.1f s), %.0f env steps/s\n", wall,
                train_s, evaluator.seconds(), test_s, train_s > 0 ? double(agent.num_timesteps()) / train_s : 0.0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
