// PPO on CartPole-v1 with tensorgrad's reinforcement-learning kit (rl::PPO on
// the eager API, rl::CartPole, rl::EvalCallback, rl::evaluate), scored by the
// protocol of cartpole_protocol.h. The defaults are rl-baselines3-zoo's for
// CartPole-v1 (rl::cartpole_ppo_options). Deterministic for a given --seed
// and --threads.
#include "cartpole_protocol.h"

namespace tg = tensorgrad;

int main(int argc, char** argv) {
  CLI::App app{"Train a PPO agent on CartPole-v1 with tensorgrad"};
  tg::rl::PPOOptions o = tg::rl::cartpole_ppo_options();
  cartpole_protocol::Protocol p;
  bool constant = false;
  app.add_option("--seed", o.seed, "training seed (weights, environment, sampling, minibatches)")->capture_default_str();
  cartpole_protocol::add_options(app, p, "training environment steps (at most 200,000 for the held-out protocol)");
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
  CLI11_PARSE(app, argc, argv);
  o.anneal_learning_rate = o.anneal_clip_range = !constant;

  try {
    const auto since = std::chrono::steady_clock::now();
    o.device = cartpole_protocol::start(p);
    if (!p.quiet)
      std::printf("tensorgrad PPO on CartPole-v1: seed %llu, %lld steps, %d threads, on %s\n"
                  "policy and value 4-64-64 tanh, Adam lr %g%s, rollouts of %lld steps, minibatch %lld, %d epochs, "
                  "gamma %g, GAE lambda %g, clip %g%s\n",
                  (unsigned long long)o.seed, (long long)p.steps, tg::num_threads(), o.device.str().c_str(),
                  o.learning_rate, constant ? "" : " -> 0", (long long)o.n_steps, (long long)o.batch_size, o.n_epochs,
                  double(o.gamma), double(o.gae_lambda), double(o.clip_range), constant ? "" : " -> 0");
    tg::rl::CartPole env, eval_env;
    tg::rl::PPO agent(env, o);
    tg::rl::EvalCallback evaluator(eval_env, p.eval);
    cartpole_protocol::run(p, agent, evaluator, [&] {
      agent.learn(p.steps, &evaluator, [&](const tg::rl::Progress& r) {
        if (p.quiet) return;
        std::printf("steps %7lld  episodes %5lld  return(last 20) %6.1f  eval %6.1f  best %6.1f  loss %8.4f  "
                    "%6.0f steps/s\n",
                    (long long)r.timesteps, (long long)r.episodes, r.recent_return, evaluator.last_mean_reward(),
                    evaluator.best_mean_reward(), r.loss, r.steps_per_second);
        std::fflush(stdout);
      }, p.eval.eval_freq);
    }, since, o.seed);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
