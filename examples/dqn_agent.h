#pragma once
// A DQN agent (Mnih et al. 2015) for CartPole on tensorgrad's Trainer:
// experience replay, epsilon-greedy exploration, a target network, Double-DQN
// targets (van Hasselt et al. 2016), and greedy evaluation that keeps the best
// snapshot. Header-only and free of CLI11, so the tests can run it too
// (examples/dqn_cartpole.cpp is the command-line program around it).
//
// How the pieces map onto tensorgrad:
//   - Q-network: Sequential({4}) -> Dense(hidden, relu) x layers -> Dense(2),
//     compiled with "mse" and Adam.
//   - Trainer with loss_mask = 2: a step takes sample_weight = one-hot of the
//     action taken and y = the TD target in that slot (0 elsewhere), so only
//     Q(s, a) trains. The trainer's loss is sum(w * (q - y)^2) / (batch * 2),
//     i.e. half the mean squared TD error over the batch.
//   - Target network: trainer.snapshot(), refreshed by
//     trainer.update_target(target, 1) every `target_update_every` env steps
//     (hard update), or by update_target(target, tau) after every training
//     step when tau < 1 (soft Polyak update).
//   - Kept model: trainer.snapshot() at the evaluation with the highest mean
//     greedy return (the first one reaching it).
//
// Deterministic: the same config (seed included) and thread count give the
// same run, bit for bit. The seed drives tensorgrad::manual_seed (weights),
// the training environment and the agent's own generator (exploration and
// replay sampling); evaluation episodes use fixed environment seeds.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <stdexcept>
#include <vector>

#include <tensorgrad/tensorgrad.h>

#include "cartpole.h"

namespace dqn {

namespace tg = tensorgrad;

/// Hyper-parameters and budgets of a run.
struct Config {
  uint64_t seed = 0;
  /// Where the Q-network trains and acts ("cpu", "vulkan:0", ...).
  tg::Device device = tg::Device::CPU;
  /// Training environment steps (evaluation steps are not counted).
  int64_t steps = 100000;
  /// Greedy evaluation every this many training steps (and at the end).
  int64_t eval_every = 5000;
  /// Episodes per evaluation, on environment seeds eval_seed_base + 0, 1, ...
  int eval_episodes = 10;
  uint64_t eval_seed_base = 1000000;
  /// Held-out episodes for the kept snapshot, on seeds test_seed_base + 0, 1, ...
  /// (a range disjoint from the evaluation seeds).
  int test_episodes = 100;
  uint64_t test_seed_base = 2000000;

  int hidden = 128;  // units per hidden layer
  int layers = 2;    // hidden layers
  float lr = 5e-4f;  // learning rate
  /// "adam" or "rmsprop" (Keras' defaults besides the rate).
  std::string optimizer = "adam";
  /// "mse" or "huber" (delta 1: PyTorch's smooth-L1, the usual DQN loss).
  std::string loss = "mse";
  float gamma = 0.99f;
  int64_t batch_size = 64;
  int64_t buffer_capacity = 50000;
  /// Env steps of pure random play before training starts.
  int64_t learning_starts = 1000;
  /// One training step every this many env steps.
  int64_t train_every = 1;
  /// Hard target update every this many env steps (used when tau == 1).
  int64_t target_update_every = 500;
  /// < 1: soft update theta' <- tau theta + (1 - tau) theta' after every training step.
  float tau = 1.0f;
  float eps_start = 1.0f;
  float eps_end = 0.05f;
  /// Env steps over which epsilon falls linearly from eps_start to eps_end.
  int64_t eps_decay_steps = 25000;
  /// Double-DQN targets: the online network picks the next action, the target network values it.
  bool double_dqn = true;
  /// > 0: the TD error is clipped to [-td_clip, td_clip] by moving the target
  /// (the gradient of a Huber loss with delta td_clip, under an MSE loss).
  float td_clip = 0.0f;
};

/// A fixed-capacity ring buffer of transitions, sampled uniformly with replacement.
class ReplayBuffer {
 public:
  explicit ReplayBuffer(int64_t capacity) : capacity_(capacity) {
    if (capacity < 1) throw std::invalid_argument("ReplayBuffer: capacity must be at least 1");
    obs_.resize(size_t(capacity) * 4);
    next_obs_.resize(size_t(capacity) * 4);
    action_.resize(size_t(capacity));
    reward_.resize(size_t(capacity));
    terminated_.resize(size_t(capacity));
  }
  /// Stores one transition, overwriting the oldest once full.
  void add(const std::array<float, 4>& obs, int action, float reward, const std::array<float, 4>& next_obs,
           bool terminated) {
    const size_t i = size_t(next_);
    std::copy(obs.begin(), obs.end(), obs_.begin() + i * 4);
    std::copy(next_obs.begin(), next_obs.end(), next_obs_.begin() + i * 4);
    action_[i] = int32_t(action);
    reward_[i] = reward;
    terminated_[i] = terminated ? 1 : 0;
    next_ = (next_ + 1) % capacity_;
    size_ = std::min(size_ + 1, capacity_);
  }
  int64_t size() const { return size_; }
  int64_t capacity() const { return capacity_; }
  /// A uniform index in [0, size()) (Lemire's multiply-shift, the same on every platform).
  int64_t sample_index(std::mt19937_64& rng) const {
    return int64_t((unsigned __int128)rng() * (unsigned __int128)size_ >> 64);
  }
  const float* obs(int64_t i) const { return obs_.data() + i * 4; }
  const float* next_obs(int64_t i) const { return next_obs_.data() + i * 4; }
  int action(int64_t i) const { return action_[size_t(i)]; }
  float reward(int64_t i) const { return reward_[size_t(i)]; }
  bool terminated(int64_t i) const { return terminated_[size_t(i)] != 0; }

 private:
  int64_t capacity_, size_ = 0, next_ = 0;
  std::vector<float> obs_, next_obs_, reward_;
  std::vector<int32_t> action_;
  std::vector<uint8_t> terminated_;
};

/// What a progress report (one per evaluation) carries.
struct Progress {
  int64_t steps = 0;          // training env steps so far
  int64_t episodes = 0;       // finished training episodes
  double recent_return = 0;   // mean return of the last 20 training episodes
  double eval_return = 0;     // this evaluation's mean greedy return
  double best_eval = 0;       // the best so far (the kept snapshot's)
  double epsilon = 0;
  double loss = 0;            // mean trainer loss since the last report
  double steps_per_s = 0;     // training env steps per second (evaluation excluded)
};

/// The outcome of train().
struct Result {
  int64_t env_steps = 0;
  int64_t episodes = 0;
  int64_t train_steps = 0;
  double best_eval = -1;          // mean return of the kept snapshot at its evaluation
  int64_t best_eval_step = 0;     // the training step it was taken at
  double train_seconds = 0;       // training loop, evaluation excluded
  double eval_seconds = 0;
  std::vector<float> episode_returns;  // every finished training episode
  std::vector<float> losses;           // every training step's loss
};

/// Index of the larger Q-value (action 0 on ties).
inline int greedy_action(const float* q) { return q[1] > q[0] ? 1 : 0; }

/// Mean return of greedy episodes of `model`, one per environment seed
/// seed_base, seed_base + 1, ...; each episode's return into `returns` if given.
inline double evaluate(tg::nn::Model& model, uint64_t seed_base, int episodes,
                       std::vector<float>* returns = nullptr) {
  cartpole::CartPole env;
  tg::Tensor x = tg::Tensor::empty(tg::Shape{1, 4});
  tg::Tensor q = tg::Tensor::empty(tg::Shape{1, 2});
  double total = 0;
  for (int e = 0; e < episodes; ++e) {
    std::array<float, 4> obs = env.reset(seed_base + uint64_t(e));
    float ret = 0;
    for (;;) {
      std::copy(obs.begin(), obs.end(), x.data<float>());
      model.predict(x, q);
      const cartpole::Step s = env.step(greedy_action(q.data<float>()));
      ret += s.reward;
      obs = s.observation;
      if (s.terminated || s.truncated) break;
    }
    if (returns) returns->push_back(ret);
    total += ret;
  }
  return episodes > 0 ? total / episodes : 0.0;
}

/// The Q-network, uncompiled: {4} -> Dense(hidden, relu) x layers -> Dense(2).
inline tg::nn::Sequential make_q_network(const Config& c) {
  tg::nn::Sequential q({4});
  for (int i = 0; i < c.layers; ++i) q.add(tg::nn::Dense(c.hidden, "relu"));
  q.add(tg::nn::Dense(cartpole::CartPole::kActions));
  return q;
}

/// A DQN agent: construct (this calls tensorgrad::manual_seed(config.seed)),
/// then train().
class Agent {
 public:
  explicit Agent(const Config& config)
      : c_(validated(config)),
        trainer_(make_trainer(c_)),
        target_(trainer_.snapshot()),
        buffer_(c_.buffer_capacity),
        env_(tg::hash_random(c_.seed, 0xC0FFEE)),
        rng_(tg::hash_random(c_.seed, 0xD1CE)) {
    const tg::Shape batch4{c_.batch_size, 4}, batch2{c_.batch_size, 2};
    x_ = tg::Tensor::empty(batch4);
    next_x_ = tg::Tensor::empty(batch4);
    y_ = tg::Tensor::zeros(batch2);
    w_ = tg::Tensor::zeros(batch2);
    q_next_target_ = tg::Tensor::empty(batch2);
    q_next_online_ = tg::Tensor::empty(batch2);
    q_now_ = tg::Tensor::empty(batch2);
    act_x_ = tg::Tensor::empty(tg::Shape{1, 4});
    act_q_ = tg::Tensor::empty(tg::Shape{1, 2});
  }

  /// Epsilon after `step` env steps (linear decay, then constant).
  double epsilon(int64_t step) const {
    if (c_.eps_decay_steps <= 0 || step >= c_.eps_decay_steps) return c_.eps_end;
    return c_.eps_start + (c_.eps_end - c_.eps_start) * double(step) / double(c_.eps_decay_steps);
  }

  /// Runs config.steps training env steps, evaluating every eval_every steps
  /// and at the end; calls `on_progress` after each evaluation.
  Result train(const std::function<void(const Progress&)>& on_progress = {}) {
    using clock = std::chrono::steady_clock;
    Result r;
    std::array<float, 4> obs = env_.reset();
    float ep_return = 0;
    double loss_sum = 0;
    int64_t loss_count = 0;
    auto last = clock::now();
    // Greedy evaluation of the current weights; keeps them when they beat the best so far.
    auto evaluate_now = [&] {
      const auto t0 = clock::now();
      r.train_seconds += std::chrono::duration<double>(t0 - last).count();
      tg::nn::Model snap = trainer_.snapshot();
      const double ret = evaluate(snap, c_.eval_seed_base, c_.eval_episodes);
      if (!best_ || ret > r.best_eval) {
        best_.emplace(std::move(snap));
        r.best_eval = ret;
        r.best_eval_step = r.env_steps;
      }
      last = clock::now();
      r.eval_seconds += std::chrono::duration<double>(last - t0).count();
      if (on_progress) {
        Progress p;
        p.steps = r.env_steps;
        p.episodes = int64_t(r.episode_returns.size());
        const size_t n = std::min<size_t>(20, r.episode_returns.size());
        for (size_t i = r.episode_returns.size() - n; i < r.episode_returns.size(); ++i)
          p.recent_return += r.episode_returns[i];
        if (n) p.recent_return /= double(n);
        p.eval_return = ret;
        p.best_eval = r.best_eval;
        p.epsilon = epsilon(r.env_steps);
        p.loss = loss_count ? loss_sum / double(loss_count) : std::numeric_limits<double>::quiet_NaN();
        p.steps_per_s = r.train_seconds > 0 ? double(r.env_steps) / r.train_seconds : 0.0;
        on_progress(p);
      }
      loss_sum = 0;
      loss_count = 0;
    };
    for (int64_t t = 0; t < c_.steps; ++t) {
      // Act: random before learning starts and with probability epsilon.
      int action;
      const double u = double(rng_() >> 11) * (1.0 / 9007199254740992.0);
      if (t < c_.learning_starts || u < epsilon(t)) {
        action = int(rng_() >> 63);
      } else {
        std::copy(obs.begin(), obs.end(), act_x_.data<float>());
        trainer_.predict(act_x_, act_q_);
        action = greedy_action(act_q_.data<float>());
      }
      const cartpole::Step s = env_.step(action);
      // Truncation is stored as non-terminal: the target bootstraps from s'.
      buffer_.add(obs, action, s.reward, s.observation, s.terminated);
      ep_return += s.reward;
      obs = s.observation;
      if (s.terminated || s.truncated) {
        r.episode_returns.push_back(ep_return);
        ep_return = 0;
        obs = env_.reset();
      }
      r.env_steps = t + 1;

      // Learn.
      if (r.env_steps >= c_.learning_starts && buffer_.size() >= c_.batch_size && r.env_steps % c_.train_every == 0) {
        const float loss = train_step();
        r.losses.push_back(loss);
        loss_sum += loss;
        ++loss_count;
        ++r.train_steps;
        if (c_.tau < 1.0f) trainer_.update_target(target_, c_.tau);
      }
      if (c_.tau >= 1.0f && r.env_steps % c_.target_update_every == 0) trainer_.update_target(target_, 1.0f);

      if (r.env_steps % c_.eval_every == 0 || r.env_steps == c_.steps) evaluate_now();
    }
    if (!best_) evaluate_now();  // no training step at all (steps == 0): keep the initial network
    r.episodes = int64_t(r.episode_returns.size());
    return r;
  }

  /// The kept snapshot (best evaluation); throws std::logic_error before train().
  tg::nn::Model& best() {
    if (!best_) throw std::logic_error("dqn::Agent::best: no evaluation has run yet; call train() first");
    return *best_;
  }
  tg::nn::Trainer& trainer() { return trainer_; }
  tg::nn::Model& target() { return target_; }
  const Config& config() const { return c_; }

 private:
  static Config validated(Config c) {
    if (c.steps < 0 || c.eval_every < 1 || c.eval_episodes < 1 || c.test_episodes < 0 || c.hidden < 1 ||
        c.layers < 1 || !(c.gamma >= 0 && c.gamma <= 1) || c.batch_size < 1 || c.buffer_capacity < c.batch_size ||
        c.learning_starts < 0 || c.train_every < 1 || c.target_update_every < 1 || !(c.tau > 0 && c.tau <= 1) ||
        !(c.td_clip >= 0))
      throw std::invalid_argument(
          "dqn::Config: need steps >= 0, eval_every/eval_episodes/hidden/layers/batch_size/train_every/"
          "target_update_every >= 1, buffer_capacity >= batch_size, gamma in [0, 1], tau in (0, 1], td_clip >= 0");
    if ((c.optimizer != "adam" && c.optimizer != "rmsprop") || (c.loss != "mse" && c.loss != "huber"))
      throw tg::ValueError("dqn::Config: optimizer must be \"adam\" or \"rmsprop\" and loss \"mse\" or \"huber\"; got \"" +
                           c.optimizer + "\" and \"" + c.loss + "\"");
    return c;
  }

  static tg::nn::Trainer make_trainer(const Config& c) {
    tg::manual_seed(c.seed);
    tg::nn::Sequential q = make_q_network(c);
    const tg::OptimizerSpec spec = c.optimizer == "rmsprop" ? tg::OptimizerSpec::rmsprop({.learning_rate = c.lr})
                                                             : tg::OptimizerSpec::adam(c.lr);
    q.compile(spec, c.loss, {}, c.device);
    tg::nn::TrainerOptions opts;
    opts.batch_size = c.batch_size;
    opts.loss_mask = cartpole::CartPole::kActions;  // one weight per output: the one-hot of the action
    return tg::nn::Trainer(q, opts);
  }

  // One gradient step on a uniform minibatch; returns the trainer's loss.
  float train_step() {
    const int64_t B = c_.batch_size;
    float* x = x_.data<float>();
    float* nx = next_x_.data<float>();
    idx_.resize(size_t(B));
    for (int64_t i = 0; i < B; ++i) {
      const int64_t j = buffer_.sample_index(rng_);
      idx_[size_t(i)] = j;
      std::copy(buffer_.obs(j), buffer_.obs(j) + 4, x + i * 4);
      std::copy(buffer_.next_obs(j), buffer_.next_obs(j) + 4, nx + i * 4);
    }
    target_.predict(next_x_, q_next_target_);
    if (c_.double_dqn) trainer_.predict(next_x_, q_next_online_);
    if (c_.td_clip > 0) trainer_.predict(x_, q_now_);
    const float* qt = q_next_target_.data<float>();
    const float* qo = q_next_online_.data<float>();
    const float* qn = q_now_.data<float>();
    float* y = y_.data<float>();
    float* w = w_.data<float>();
    for (int64_t i = 0; i < B; ++i) {
      const int64_t j = idx_[size_t(i)];
      const int a = buffer_.action(j);
      float next_value = 0.0f;
      if (!buffer_.terminated(j)) {
        const int a_next = c_.double_dqn ? greedy_action(qo + i * 2) : greedy_action(qt + i * 2);
        next_value = qt[i * 2 + a_next];
      }
      float target = buffer_.reward(j) + c_.gamma * next_value;
      if (c_.td_clip > 0) {
        const float q = qn[i * 2 + a];
        target = q + std::clamp(target - q, -c_.td_clip, c_.td_clip);
      }
      y[i * 2 + 0] = y[i * 2 + 1] = 0.0f;
      w[i * 2 + 0] = w[i * 2 + 1] = 0.0f;
      y[i * 2 + a] = target;
      w[i * 2 + a] = 1.0f;
    }
    return trainer_.step(x_, y_, w_);
  }

  Config c_;
  tg::nn::Trainer trainer_;
  tg::nn::Model target_;
  std::optional<tg::nn::Model> best_;
  ReplayBuffer buffer_;
  cartpole::CartPole env_;
  std::mt19937_64 rng_;
  std::vector<int64_t> idx_;
  tg::Tensor x_, next_x_, y_, w_, q_next_target_, q_next_online_, q_now_, act_x_, act_q_;
};

}  // namespace dqn
