// DQN on CartPole-v1 with tensorgrad's Trainer (examples/dqn_agent.h holds
// the agent, examples/cartpole.h the environment). Trains for at most
// --steps environment steps, evaluates greedily every --eval-every steps on
// fixed evaluation seeds keeping the best snapshot, then reports that
// snapshot's mean return over --test-episodes greedy episodes on held-out
// seeds. Deterministic for a given --seed and --threads.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "dqn_agent.h"

int main(int argc, char** argv) {
  CLI::App app{"Train a DQN agent on CartPole-v1 with tensorgrad"};
  dqn::Config c;
  int threads = 1;
  bool quiet = false;
  bool no_double = false;
  app.add_option("--seed", c.seed, "training seed (weights, environment, exploration, replay)")->capture_default_str();
  app.add_option("--steps", c.steps, "training environment steps (evaluation not counted)")
      ->check(CLI::Range(int64_t(0), int64_t(100000000)))
      ->capture_default_str();
  app.add_option("--threads", threads, "compute threads (0: one per core; the network is small, 1 is fastest)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  app.add_option("--eval-every", c.eval_every, "greedy evaluation every this many training steps")
      ->check(CLI::Range(int64_t(1), int64_t(100000000)))
      ->capture_default_str();
  app.add_option("--eval-episodes", c.eval_episodes, "episodes per evaluation")->check(CLI::Range(1, 10000))->capture_default_str();
  app.add_option("--test-episodes", c.test_episodes, "held-out greedy episodes for the kept snapshot")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  app.add_flag("--quiet", quiet, "print only the final summary");
  app.add_option("--hidden", c.hidden, "units per hidden layer")->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_option("--layers", c.layers, "hidden layers")->check(CLI::Range(1, 16))->capture_default_str();
  app.add_option("--lr", c.lr, "learning rate")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--optimizer", c.optimizer, "adam or rmsprop")->check(CLI::IsMember({"adam", "rmsprop"}))->capture_default_str();
  app.add_option("--loss", c.loss, "mse or huber")->check(CLI::IsMember({"mse", "huber"}))->capture_default_str();
  app.add_option("--gamma", c.gamma, "discount")->check(CLI::Range(0.0f, 1.0f))->capture_default_str();
  app.add_option("--batch-size", c.batch_size, "replay minibatch")->check(CLI::Range(int64_t(1), int64_t(65536)))->capture_default_str();
  app.add_option("--buffer", c.buffer_capacity, "replay capacity (transitions)")
      ->check(CLI::Range(int64_t(1), int64_t(100000000)))
      ->capture_default_str();
  app.add_option("--learning-starts", c.learning_starts, "random steps before training")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--train-every", c.train_every, "env steps per training step")
      ->check(CLI::Range(int64_t(1), int64_t(1000)))
      ->capture_default_str();
  app.add_option("--target-update", c.target_update_every, "hard target update every this many env steps (when --tau is 1)")
      ->check(CLI::Range(int64_t(1), int64_t(100000000)))
      ->capture_default_str();
  app.add_option("--tau", c.tau, "< 1: soft (Polyak) target update with this tau after every training step")
      ->check(CLI::Range(1e-6f, 1.0f))
      ->capture_default_str();
  app.add_option("--eps-start", c.eps_start, "initial exploration rate")->check(CLI::Range(0.0f, 1.0f))->capture_default_str();
  app.add_option("--eps-end", c.eps_end, "final exploration rate")->check(CLI::Range(0.0f, 1.0f))->capture_default_str();
  app.add_option("--eps-decay-steps", c.eps_decay_steps, "env steps of linear epsilon decay")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--td-clip", c.td_clip, "> 0: clip TD errors to this (Huber-like gradient)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_flag("--no-double", no_double, "plain DQN targets instead of Double-DQN");
  std::string device = "cpu";
  app.add_option("--device", device, "where the Q-network trains and acts, as PyTorch names devices (cpu, vulkan:0)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  c.double_dqn = !no_double;

  try {
    c.device = tensorgrad::Device(device);
    (void)tensorgrad::backend(c.device);  // an unavailable device is refused before training starts
    const auto start = std::chrono::steady_clock::now();
    if (threads > 0) tensorgrad::set_num_threads(threads);
    if (!quiet) {
      std::printf("tensorgrad DQN on CartPole-v1: seed %llu, %lld steps, %d threads, on %s\n", (unsigned long long)c.seed,
                  (long long)c.steps, tensorgrad::num_threads(), c.device.str().c_str());
      std::printf("Q-network 4");
      for (int i = 0; i < c.layers; ++i) std::printf("-%d", c.hidden);
      std::printf("-2 relu, %s lr %g, %s loss, gamma %g, batch %lld, buffer %lld, learning starts %lld, %s target %s, "
                  "epsilon %g -> %g over %lld steps%s\n",
                  c.optimizer == "rmsprop" ? "RMSprop" : "Adam", double(c.lr), c.loss.c_str(), double(c.gamma), (long long)c.batch_size, (long long)c.buffer_capacity,
                  (long long)c.learning_starts, c.double_dqn ? "Double-DQN," : "DQN,",
                  c.tau < 1.0f ? ("soft tau " + std::to_string(c.tau)).c_str()
                               : ("hard every " + std::to_string(c.target_update_every) + " steps").c_str(),
                  double(c.eps_start), double(c.eps_end), (long long)c.eps_decay_steps,
                  c.td_clip > 0 ? (", TD error clip " + std::to_string(c.td_clip)).c_str() : "");
    }
    dqn::Agent agent(c);
    dqn::Result r = agent.train([&](const dqn::Progress& p) {
      if (quiet) return;
      std::printf("steps %7lld  episodes %5lld  return(last 20) %6.1f  eval %6.1f  best %6.1f  eps %.3f  loss %8.4f  "
                  "%6.0f steps/s\n",
                  (long long)p.steps, (long long)p.episodes, p.recent_return, p.eval_return, p.best_eval, p.epsilon,
                  p.loss, p.steps_per_s);
      std::fflush(stdout);
    });

    std::vector<float> returns;
    const auto t0 = std::chrono::steady_clock::now();
    const double test = dqn::evaluate(agent.best(), c.test_seed_base, c.test_episodes, &returns);
    const double test_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const float lo = returns.empty() ? 0.0f : *std::min_element(returns.begin(), returns.end());
    const int full = int(std::count(returns.begin(), returns.end(), 500.0f));

    std::printf("seed %llu: %lld training env steps, %lld episodes, %lld training steps\n", (unsigned long long)c.seed,
                (long long)r.env_steps, (long long)r.episodes, (long long)r.train_steps);
    std::printf("best eval return %.1f (%d episodes, seeds %llu-%llu) at step %lld\n", r.best_eval, c.eval_episodes,
                (unsigned long long)c.eval_seed_base, (unsigned long long)(c.eval_seed_base + c.eval_episodes - 1),
                (long long)r.best_eval_step);
    std::printf("final: kept snapshot averages %.2f over %d greedy episodes on held-out seeds %llu-%llu "
                "(min %.0f, %d of %d reach 500)\n",
                test, c.test_episodes, (unsigned long long)c.test_seed_base,
                (unsigned long long)(c.test_seed_base + c.test_episodes - 1), double(lo), full, c.test_episodes);
    std::printf("wall time %.1f s (training %.1f s, evaluation %.1f s, held-out test %.1f s), %.0f env steps/s\n", wall,
                r.train_seconds, r.eval_seconds, test_s, r.train_seconds > 0 ? double(r.env_steps) / r.train_seconds : 0.0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
