// DQN (Mnih et al. 2015) with double-Q targets (van Hasselt et al. 2016) on a Trainer whose sample
// weights select the taken action's value: the loop of stable-baselines3's DQN.learn.
#include "tensorgrad/rl/dqn.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "tensorgrad/core/error.h"
#include "tensorgrad/core/random.h"
#include "tensorgrad/io/saving.h"
#include "tensorgrad/opt/optimizer.h"
#include "rl/env_check.h"

namespace tensorgrad::rl {

namespace {

// Stream keys of the agent's draws, apart from the replay buffer's.
constexpr uint64_t kExplorationStream = 0xE7A1, kReplayStream = 0xD1CE;

const DQNOptions& validated(const DQNOptions& o) {
  auto fail = [](const std::string& what) { throw ValueError("DQN: " + what); };
  if (!(o.learning_rate > 0.0) || !std::isfinite(o.learning_rate))
    fail("learning_rate must be > 0; got " + std::to_string(o.learning_rate));
  if (o.batch_size < 1) fail("batch_size must be at least 1; got " + std::to_string(o.batch_size));
  if (o.buffer_size < o.batch_size)
    fail("buffer_size (" + std::to_string(o.buffer_size) + ") must hold at least one batch (" +
         std::to_string(o.batch_size) + ")");
  if (o.learning_starts < 0) fail("learning_starts must be >= 0; got " + std::to_string(o.learning_starts));
  if (!(o.tau > 0.0 && o.tau <= 1.0)) fail("tau must be in (0, 1]; got " + std::to_string(o.tau));
  if (!(o.gamma >= 0.0f && o.gamma <= 1.0f)) fail("gamma must be in [0, 1]; got " + std::to_string(o.gamma));
  if (o.train_freq < 1 || o.gradient_steps < 1 || o.target_update_interval < 1)
    fail("train_freq, gradient_steps and target_update_interval must be at least 1; got " +
         std::to_string(o.train_freq) + ", " + std::to_string(o.gradient_steps) + ", " +
         std::to_string(o.target_update_interval));
  o.exploration.check("DQN: exploration");
  if (o.exploration.start < 0 || o.exploration.start > 1 || o.exploration.end < 0 || o.exploration.end > 1)
    fail("exploration rates must be in [0, 1]; got " + std::to_string(o.exploration.start) + " -> " +
         std::to_string(o.exploration.end));
  if (o.loss != "huber" && o.loss != "mse") fail("loss must be \"huber\" or \"mse\"; got \"" + o.loss + "\"");
  if (!(o.max_grad_norm >= 0.0f)) fail("max_grad_norm must be >= 0 (0: no clipping); got " +
                                       std::to_string(o.max_grad_norm));
  if (o.n_step < 1) fail("n_step must be at least 1; got " + std::to_string(o.n_step));
  return o;
}

nn::Trainer make_trainer(nn::Model& q, const Env& env, const DQNOptions& o) {
  const Shape obs = env.observation_shape();
  if (q.input_shape() != obs)
    throw ValueError("DQN: the Q-network takes inputs of shape " + q.input_shape().str() +
                     " per row; the environment's observations are " + obs.str());
  if (q.output_shape() != Shape{env.action_count()})
    throw ValueError("DQN: the Q-network must give one value per action, {" + std::to_string(env.action_count()) +
                     "} per row; it gives " + q.output_shape().str());
  manual_seed(o.seed);
  OptimizerSpec spec = OptimizerSpec::adam(float(o.learning_rate));
  spec.global_clipnorm = o.max_grad_norm;
  q.compile(spec, o.loss, {}, o.device);
  nn::TrainerOptions t;
  t.batch_size = o.batch_size;
  t.loss_mask = env.action_count();  // one weight per output: the taken action's (see train_round)
  return nn::Trainer(q, t);
}

ReplayBufferOptions buffer_options(const Env& env, const DQNOptions& o) {
  ReplayBufferOptions b;
  b.capacity = o.buffer_size;
  b.observation_shape = env.observation_shape();
  b.observation_dtype = env.observation_dtype();
  b.n_step = o.n_step;
  b.gamma = o.gamma;
  b.seed = hash_random(o.seed, kReplayStream);
  return b;
}

Shape one_row(const Shape& item) {
  std::vector<int64_t> dims{1};
  for (int i = 0; i < item.rank(); ++i) dims.push_back(item[i]);
  return Shape(dims);
}

int64_t argmax(const float* q, int64_t n) {
  int64_t best = 0;
  for (int64_t a = 1; a < n; ++a)
    if (q[a] > q[best]) best = a;
  return best;
}

// Copies one observation ({obs...} or {1, obs...}) into the one-row input x.
void copy_row(const Tensor& observation, Tensor& x, const char* call) {
  if (!observation.defined() || observation.dtype() != x.dtype() || observation.numel() != x.numel())
    throw ShapeError(std::string(call) + ": the observation must be " + dtype_name(x.dtype()) + " with " +
                     std::to_string(x.numel()) + " elements (the environment's shape); got " +
                     (observation.defined() ? std::string(dtype_name(observation.dtype())) + " " +
                                                  observation.shape().str()
                                            : "an undefined tensor"));
  std::memcpy(x.raw(), observation.to(Device::CPU).raw(), x.nbytes());
}

}  // namespace

DQN::DQN(nn::Model q_network, Env& env, const DQNOptions& options)
    : options_(validated(options)),
      env_(env),
      trainer_(make_trainer(q_network, env, options_)),
      target_(trainer_.snapshot()),
      buffer_(options_.prioritized_replay
                  ? std::unique_ptr<ReplayBuffer>(
                        new PrioritizedReplayBuffer(buffer_options(env, options_), options_.prioritized))
                  : std::make_unique<ReplayBuffer>(buffer_options(env, options_))),
      batch_(buffer_->make_batch(options_.batch_size)),
      actions_(env.action_count()) {
  const int64_t b = options_.batch_size;
  act_x_ = Tensor::zeros(one_row(env.observation_shape()), env.observation_dtype());
  act_q_ = Tensor::zeros(Shape{1, actions_});
  y_ = Tensor::zeros(Shape{b, actions_});
  w_ = Tensor::zeros(Shape{b, actions_});
  q_next_target_ = Tensor::zeros(Shape{b, actions_});
  q_next_online_ = Tensor::zeros(Shape{b, actions_});
  q_now_ = Tensor::zeros(Shape{b, actions_});
  td_ = Tensor::zeros(Shape{b});
}

DQN::~DQN() = default;

double DQN::exploration_rate() const { return options_.exploration.value(timesteps_); }

int64_t DQN::greedy(const Tensor& observation) {
  copy_row(observation, act_x_, "DQN::predict");
  trainer_.predict(act_x_, act_q_);
  return argmax(act_q_.data<float>(), actions_);
}

int64_t DQN::predict(const Tensor& observation) { return greedy(observation); }

Policy DQN::snapshot_policy() const {
  struct Snapshot {
    nn::Model model;
    Tensor x, q;
    int64_t actions;
  };
  auto s = std::make_shared<Snapshot>(Snapshot{trainer_.snapshot(), Tensor::zeros(act_x_.shape(), act_x_.dtype()),
                                               Tensor::zeros(act_q_.shape()), actions_});
  return [s](const Tensor& observation) {
    copy_row(observation, s->x, "DQN policy");
    s->model.predict(s->x, s->q);
    return argmax(s->q.data<float>(), s->actions);
  };
}

void DQN::train_round() {
  ReplayBatch& b = batch_;
  buffer_->sample(b);
  target_.predict(b.next_observations, q_next_target_);
  if (options_.double_q) trainer_.predict(b.next_observations, q_next_online_);
  const bool prioritized = options_.prioritized_replay;
  if (prioritized) trainer_.predict(b.observations, q_now_);
  const int64_t n = b.size(), a_count = actions_;
  const float *qt = q_next_target_.data<float>(), *qo = q_next_online_.data<float>(), *qn = q_now_.data<float>();
  const float *r = b.rewards.data<float>(), *done = b.dones.data<float>(), *discount = b.discounts.data<float>();
  const float* importance = b.weights.data<float>();
  const int32_t* action = b.actions.data<int32_t>();
  float *y = y_.data<float>(), *w = w_.data<float>(), *td = td_.data<float>();
  std::fill(y, y + n * a_count, 0.0f);
  std::fill(w, w + n * a_count, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    float next = 0.0f;
    if (done[i] == 0.0f) {
      const int64_t pick = argmax((options_.double_q ? qo : qt) + i * a_count, a_count);
      next = qt[i * a_count + pick];
    }
    const float target = r[i] + discount[i] * next;
    y[i * a_count + action[i]] = target;
    // The Trainer's masked loss is sum(w l) / (B A): weight A makes it the batch mean of the taken
    // actions' losses, as SB3's, so max_grad_norm clips the same gradients.
    w[i * a_count + action[i]] = importance[i] * float(a_count);
    if (prioritized) td[i] = target - qn[i * a_count + action[i]];
  }
  log_.loss(double(trainer_.step(b.observations, y_, w_)));
  if (prioritized) static_cast<PrioritizedReplayBuffer&>(*buffer_).update_priorities(b.indices, td_);
}

void DQN::learn(int64_t timesteps, EvalCallback* eval, const ProgressFn& progress, int64_t report_every) {
  if (timesteps < 0) throw ValueError("DQN::learn: timesteps must be >= 0; got " + std::to_string(timesteps));
  if (report_every < 1) throw ValueError("DQN::learn: report_every must be at least 1; got " + std::to_string(report_every));
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  const double eval_before = eval ? eval->seconds() : 0.0;
  const uint64_t key = hash_random(options_.seed, kExplorationStream);
  auto where = [this] { return "step " + std::to_string(timesteps_ + 1) + " of training"; };
  // The first episode starts from the seed; after an environment's bad value the next one goes on.
  auto start_episode = [&] {
    observation_ = Tensor();
    log_.episode_return = 0.0;
    Tensor first = timesteps_ == 0 && draws_ == 0 ? env_.reset(options_.seed) : env_.reset();
    detail::check_env_observation(env_, first, "DQN::learn", "reset() before " + where(), "first observation");
    observation_ = std::move(first);
  };
  if (!observation_.defined()) start_episode();
  if (eval && timesteps == 0) eval->on_step(*this, true);  // no step: the evaluation at the end still runs
  for (int64_t k = 0; k < timesteps; ++k) {
    const int64_t t = timesteps_;
    const double u = double(hash_random(key, draws_++) >> 11) * (1.0 / 9007199254740992.0);
    int64_t action;
    if (t < options_.learning_starts || u < options_.exploration.value(t))
      action = int64_t((unsigned __int128)hash_random(key, draws_++) * (unsigned __int128)uint64_t(actions_) >> 64);
    else
      action = greedy(observation_);
    EnvStep s = env_.step(action);
    try {
      detail::check_env_step(env_, s, "DQN::learn", where());
    } catch (const Error&) {
      observation_ = Tensor();  // the episode cannot go on: the next learn() starts another
      log_.episode_return = 0.0;
      throw;
    }
    buffer_->add(observation_, action, s.reward, s.observation, s.terminated, s.truncated);
    log_.reward(s.reward);
    const bool ended = s.terminated || s.truncated;
    if (ended)
      log_.end_episode();
    else
      observation_ = std::move(s.observation);
    timesteps_ = t + 1;
    if (ended) start_episode();
    if (timesteps_ >= options_.learning_starts && timesteps_ % options_.train_freq == 0 &&
        buffer_->size() >= options_.batch_size)
      for (int64_t g = 0; g < options_.gradient_steps; ++g) train_round();
    if (timesteps_ % options_.target_update_interval == 0) trainer_.update_target(target_, float(options_.tau));
    const bool last_step = k + 1 == timesteps;
    if (eval) eval->on_step(*this, last_step);
    if (progress && (timesteps_ % report_every == 0 || last_step)) {
      // Training time: the evaluations measure their own.
      const double seconds = std::chrono::duration<double>(clock::now() - start).count() -
                             (eval ? eval->seconds() - eval_before : 0.0);
      progress(log_.report(timesteps_, seconds > 0 ? double(k + 1) / seconds : 0.0, exploration_rate()));
    }
  }
}

void DQN::save(const std::string& path) const {
  std::vector<nn::Stateful*> states{buffer_.get(), const_cast<DQN*>(this)};
  if (auto* env = dynamic_cast<nn::Stateful*>(&env_)) states.push_back(env);
  io::save_checkpoint(trainer_, path, states);
}

void DQN::load(const std::string& path) {
  std::vector<nn::Stateful*> states{buffer_.get(), this};
  if (auto* env = dynamic_cast<nn::Stateful*>(&env_)) states.push_back(env);
  io::load_checkpoint(trainer_, path, states);
}

nn::CallbackState DQN::get_state() const {
  nn::CallbackState s;
  s.values["timesteps"] = double(timesteps_);
  s.values["episodes"] = double(log_.episodes);
  s.values["draws"] = double(draws_);
  s.values["episode_return"] = log_.episode_return;
  if (observation_.defined()) s.tensors.emplace_back("observation", observation_.clone());
  if (!log_.recent.empty()) {  // GGUF stores no empty tensor
    Tensor recent = Tensor::empty(Shape{int64_t(log_.recent.size())});
    std::copy(log_.recent.begin(), log_.recent.end(), recent.data<float>());
    s.tensors.emplace_back("recent_returns", recent);
  }
  const std::vector<Tensor> target = target_.get_weights();
  for (size_t i = 0; i < target.size(); ++i) s.tensors.emplace_back("target/" + std::to_string(i), target[i]);
  return s;
}

void DQN::set_state(const nn::CallbackState& s) {
  auto count = [&](const char* key) {
    const auto it = s.values.find(key);
    if (it == s.values.end() || !(it->second >= 0) || it->second != std::floor(it->second) || it->second > 9e15)
      throw ValueError(std::string("DQN::set_state: '") + key + "' must be a count >= 0; pass a state from get_state()");
    return it->second;
  };
  const auto timesteps = int64_t(count("timesteps")), episodes = int64_t(count("episodes"));
  const auto draws = uint64_t(count("draws"));
  const auto ret = s.values.find("episode_return");
  if (ret == s.values.end() || !std::isfinite(ret->second))
    throw ValueError("DQN::set_state: 'episode_return' must be a finite number");
  Tensor observation;
  std::vector<float> recent;
  std::vector<Tensor> target;
  for (const auto& [name, t] : s.tensors) {
    if (name == "observation") {
      if (t.dtype() != act_x_.dtype() || t.numel() != act_x_.numel())
        throw ValueError("DQN::set_state: the saved observation is " + std::string(dtype_name(t.dtype())) + " " +
                         t.shape().str() + "; this agent's environment gives " + env_.observation_shape().str());
      observation = t.clone();
    } else if (name == "recent_returns") {
      if (t.dtype() != DType::Float32 || t.shape().rank() != 1 || t.numel() > 20)
        throw ValueError("DQN::set_state: 'recent_returns' must be float32 {n <= 20}; got " + t.shape().str());
      recent.assign(t.data<float>(), t.data<float>() + t.numel());
    } else if (name.rfind("target/", 0) == 0) {
      target.push_back(t);
    } else {
      throw ValueError("DQN::set_state: the state has an unknown tensor '" + name + "'");
    }
  }
  try {
    target_.set_weights(target);  // checks the count and shapes before changing any
  } catch (const Error& e) {
    throw ValueError(std::string("DQN::set_state: the target network's weights do not fit: ") + e.what());
  }
  timesteps_ = timesteps, draws_ = draws;
  log_.episodes = episodes, log_.episode_return = ret->second, log_.recent = std::move(recent);
  observation_ = observation;
}

}  // namespace tensorgrad::rl
