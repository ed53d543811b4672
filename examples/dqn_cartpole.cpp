// DQN on CartPole-v1 with tensorgrad's reinforcement-learning kit (rl::DQN,
// rl::CartPole, rl::EvalCallback, rl::evaluate). Trains for --steps
// environment steps, evaluates greedily every --eval-every steps on fixed
// evaluation seeds keeping the best snapshot (stable-baselines3's
// EvalCallback), then reports that snapshot's mean return over
// --test-episodes greedy episodes on held-out seeds. Deterministic for a
// given --seed and --threads.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <tensorgrad/tensorgrad.h>

namespace tg = tensorgrad;

int main(int argc, char** argv) {
  CLI::App app{"Train a DQN agent on CartPole-v1 with tensorgrad"};
  tg::rl::DQNOptions o;
  int64_t steps = 100000;
  tg::rl::EvalOptions eval;
  int test_episodes = 100;
  uint64_t test_seed = 2000000;
  int threads = 1, hidden = 128, layers = 2;
  bool quiet = false, no_double = false, prioritized = false;
  std::string device = "cpu";
  app.add_option("--seed", o.seed, "training seed (weights, environment, exploration, replay)")->capture_default_str();
  app.add_option("--steps", steps, "training environment steps (evaluation not counted)")
      ->check(CLI::Range(int64_t(0), int64_t(100000000)))
      ->capture_default_str();
  app.add_option("--threads", threads, "compute threads (0: one per core; the network is small, 1 is fastest)")
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
  app.add_option("--hidden", hidden, "units per hidden layer")->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_option("--layers", layers, "hidden layers")->check(CLI::Range(1, 16))->capture_default_str();
  app.add_option("--lr", o.learning_rate, "Adam's learning rate")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--loss", o.loss, "huber or mse")->check(CLI::IsMember({"mse", "huber"}))->capture_default_str();
  app.add_option("--gamma", o.gamma, "discount")->check(CLI::Range(0.0f, 1.0f))->capture_default_str();
  app.add_option("--batch-size", o.batch_size, "replay minibatch")
      ->check(CLI::Range(int64_t(1), int64_t(65536)))
      ->capture_default_str();
  app.add_option("--buffer", o.buffer_size, "replay capacity (transitions)")
      ->check(CLI::Range(int64_t(1), int64_t(100000000)))
      ->capture_default_str();
  app.add_option("--learning-starts", o.learning_starts, "random steps before training")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--train-every", o.train_freq, "env steps per training round")
      ->check(CLI::Range(int64_t(1), int64_t(1000)))
      ->capture_default_str();
  app.add_option("--gradient-steps", o.gradient_steps, "gradient steps per training round")
      ->check(CLI::Range(int64_t(1), int64_t(1000)))
      ->capture_default_str();
  app.add_option("--target-update", o.target_update_interval, "target update every this many env steps")
      ->check(CLI::Range(int64_t(1), int64_t(100000000)))
      ->capture_default_str();
  app.add_option("--tau", o.tau, "the target update's tau (1: a copy; below 1: Polyak averaging)")
      ->check(CLI::Range(1e-6, 1.0))
      ->capture_default_str();
  app.add_option("--eps-start", o.exploration.start, "initial exploration rate")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--eps-end", o.exploration.end, "final exploration rate")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  app.add_option("--eps-decay-steps", o.exploration.steps, "env steps of linear epsilon decay")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--max-grad-norm", o.max_grad_norm, "clip the gradients' global norm (0: off)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--n-step", o.n_step, "n-step returns")->check(CLI::Range(1, 100))->capture_default_str();
  app.add_flag("--prioritized", prioritized, "prioritized replay (alpha 0.6, beta 0.4 -> 1)");
  app.add_flag("--no-double", no_double, "plain DQN targets instead of double-Q");
  app.add_option("--device", device, "where the Q-network trains and acts, as PyTorch names devices (cpu, vulkan:0)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  o.double_q = !no_double;
  o.prioritized_replay = prioritized;
  o.prioritized.beta.steps = steps;

  try {
    o.device = tg::Device(device);
    (void)tg::backend(o.device);  // an unavailable device is refused before training starts
    const auto start = std::chrono::steady_clock::now();
    if (threads > 0) tg::set_num_threads(threads);
    if (!quiet)
      std::printf("tensorgrad DQN on CartPole-v1: seed %llu, %lld steps, %d threads, on %s\n"
                  "Q-network 4-%dx%d-2 relu, Adam lr %g, %s loss, gamma %g, batch %lld, buffer %lld, learning "
                  "starts %lld, %s, target %s, epsilon %g -> %g over %lld steps%s\n",
                  (unsigned long long)o.seed, (long long)steps, tg::num_threads(), o.device.str().c_str(), hidden,
                  layers, o.learning_rate, o.loss.c_str(), double(o.gamma), (long long)o.batch_size,
                  (long long)o.buffer_size, (long long)o.learning_starts, o.double_q ? "double-Q" : "plain targets",
                  (o.tau < 1.0 ? "tau " + std::to_string(o.tau) + " every " : "copied every ")
                      .append(std::to_string(o.target_update_interval) + " steps")
                      .c_str(),
                  o.exploration.start, o.exploration.end, (long long)o.exploration.steps,
                  prioritized ? ", prioritized replay" : "");
    tg::rl::CartPole env, eval_env, test_env;
    tg::manual_seed(o.seed);
    tg::nn::Sequential q({4});
    for (int i = 0; i < layers; ++i) q.add(tg::nn::Dense(hidden, "relu"));
    q.add(tg::nn::Dense(env.action_count()));
    tg::rl::DQN agent(std::move(q), env, o);
    tg::rl::EvalCallback evaluator(eval_env, eval);
    const auto train_start = std::chrono::steady_clock::now();
    agent.learn(steps, &evaluator, [&](const tg::rl::Progress& p) {
      if (quiet) return;
      std::printf("steps %7lld  episodes %5lld  return(last 20) %6.1f  eval %6.1f  best %6.1f  eps %.3f  loss %8.4f  "
                  "%6.0f steps/s\n",
                  (long long)p.timesteps, (long long)p.episodes, p.recent_return, evaluator.last_mean_reward(),
                  evaluator.best_mean_reward(), p.exploration_rate, p.loss, p.steps_per_second);
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
    std::printf("seed %llu: %lld training env steps, %lld gradient steps\n", (unsigned long long)o.seed,
                (long long)agent.num_timesteps(), (long long)agent.gradient_steps());
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
