// DQN on CartPole-v1 with tensorgrad's reinforcement-learning kit (rl::DQN,
// rl::CartPole, rl::EvalCallback, rl::evaluate), scored by the protocol of
// cartpole_protocol.h: --steps of training, greedy evaluation every
// --eval-every steps keeping the best snapshot, that snapshot's mean return
// over --test-episodes greedy episodes on held-out seeds. Deterministic for a
// given --seed and --threads.
#include "cartpole_protocol.h"

namespace tg = tensorgrad;

int main(int argc, char** argv) {
  CLI::App app{"Train a DQN agent on CartPole-v1 with tensorgrad"};
  tg::rl::DQNOptions o;
  cartpole_protocol::Protocol p;
  int hidden = 128, layers = 2;
  bool no_double = false, prioritized = false;
  app.add_option("--seed", o.seed, "training seed (weights, environment, exploration, replay)")->capture_default_str();
  cartpole_protocol::add_options(app, p, "training environment steps (evaluation not counted)");
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
  CLI11_PARSE(app, argc, argv);
  o.double_q = !no_double;
  o.prioritized_replay = prioritized;
  o.prioritized.beta.steps = p.steps;

  try {
    const auto since = std::chrono::steady_clock::now();
    o.device = cartpole_protocol::start(p);
    if (!p.quiet)
      std::printf("tensorgrad DQN on CartPole-v1: seed %llu, %lld steps, %d threads, on %s\n"
                  "Q-network 4-%dx%d-2 relu, Adam lr %g, %s loss, gamma %g, batch %lld, buffer %lld, learning "
                  "starts %lld, %s, target %s, epsilon %g -> %g over %lld steps%s\n",
                  (unsigned long long)o.seed, (long long)p.steps, tg::num_threads(), o.device.str().c_str(), hidden,
                  layers, o.learning_rate, o.loss.c_str(), double(o.gamma), (long long)o.batch_size,
                  (long long)o.buffer_size, (long long)o.learning_starts, o.double_q ? "double-Q" : "plain targets",
                  (o.tau < 1.0 ? "tau " + std::to_string(o.tau) + " every " : std::string("copied every "))
                      .append(std::to_string(o.target_update_interval) + " steps")
                      .c_str(),
                  o.exploration.start, o.exploration.end, (long long)o.exploration.steps,
                  prioritized ? ", prioritized replay" : "");
    tg::rl::CartPole env, eval_env;
    tg::manual_seed(o.seed);
    tg::nn::Sequential q({4});
    for (int i = 0; i < layers; ++i) q.add(tg::nn::Dense(hidden, "relu"));
    q.add(tg::nn::Dense(env.action_count()));
    tg::rl::DQN agent(std::move(q), env, o);
    tg::rl::EvalCallback evaluator(eval_env, p.eval);
    cartpole_protocol::run(p, agent, evaluator, [&] {
      agent.learn(p.steps, &evaluator, [&](const tg::rl::Progress& r) {
        if (p.quiet) return;
        std::printf("steps %7lld  episodes %5lld  return(last 20) %6.1f  eval %6.1f  best %6.1f  eps %.3f  "
                    "loss %8.4f  %6.0f steps/s\n",
                    (long long)r.timesteps, (long long)r.episodes, r.recent_return, evaluator.last_mean_reward(),
                    evaluator.best_mean_reward(), r.exploration_rate, r.loss, r.steps_per_second);
        std::fflush(stdout);
      }, p.eval.eval_freq);
    }, since, o.seed);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
