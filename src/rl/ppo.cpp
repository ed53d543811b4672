// PPO with the clipped surrogate (Schulman et al. 2017) and GAE (Schulman et al. 2016) on the eager API:
// the loop of stable-baselines3's PPO.learn (collect_rollouts, compute_returns_and_advantage, train).
#include "tensorgrad/rl/ppo.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>

#include "tensorgrad/ag/functional.h"
#include "tensorgrad/core/error.h"
#include "tensorgrad/core/random.h"
#include "rl/env_check.h"

namespace tensorgrad::rl {

namespace {

constexpr uint64_t kActionStream = 0xAC71, kShuffleStream = 0x5F1E;

const PPOOptions& validated(const PPOOptions& o) {
  auto fail = [](const std::string& what) { throw ValueError("PPO: " + what); };
  if (!(o.learning_rate > 0.0) || !std::isfinite(o.learning_rate))
    fail("learning_rate must be > 0; got " + std::to_string(o.learning_rate));
  if (o.n_steps < 1 || o.batch_size < 1 || o.n_epochs < 1)
    fail("n_steps, batch_size and n_epochs must be at least 1; got " + std::to_string(o.n_steps) + ", " +
         std::to_string(o.batch_size) + ", " + std::to_string(o.n_epochs));
  if (!(o.gamma >= 0.0f && o.gamma <= 1.0f) || !(o.gae_lambda >= 0.0f && o.gae_lambda <= 1.0f))
    fail("gamma and gae_lambda must be in [0, 1]; got " + std::to_string(o.gamma) + " and " +
         std::to_string(o.gae_lambda));
  if (!(o.clip_range > 0.0f) || !std::isfinite(o.clip_range))
    fail("clip_range must be > 0; got " + std::to_string(o.clip_range));
  if (!(o.ent_coef >= 0.0f) || !(o.vf_coef >= 0.0f) || !(o.max_grad_norm >= 0.0f))
    fail("ent_coef, vf_coef and max_grad_norm must be >= 0");
  if (o.net_arch.empty()) fail("net_arch needs at least one hidden layer");
  for (int64_t n : o.net_arch)
    if (n < 1) fail("net_arch's layer sizes must be at least 1; got " + std::to_string(n));
  if (o.activation != "tanh" && o.activation != "relu")
    fail("activation must be \"tanh\" or \"relu\"; got \"" + o.activation + "\"");
  return o;
}

std::shared_ptr<ag::nn::Sequential> mlp(int64_t in, const PPOOptions& o, int64_t out) {
  auto net = std::make_shared<ag::nn::Sequential>();
  for (int64_t width : o.net_arch) {
    net->push_back(std::make_shared<ag::nn::Linear>(in, width));
    if (o.activation == "tanh")
      net->push_back(std::make_shared<ag::nn::Tanh>());
    else
      net->push_back(std::make_shared<ag::nn::ReLU>());
    in = width;
  }
  net->push_back(std::make_shared<ag::nn::Linear>(in, out));
  return net;
}

// A network of the same shape holding a copy of `net`'s weights; the default generator's state is
// put back after the new layers drew their (replaced) initial weights.
std::shared_ptr<ag::nn::Sequential> copy_of(const ag::nn::Sequential& net, int64_t in, const PPOOptions& o,
                                            int64_t out) {
  ag::Generator& g = ag::default_generator();
  const std::mt19937_64 engine = g.engine();
  const uint64_t counter = g.dropout_counter();
  auto copy = mlp(in, o, out);
  g.engine() = engine;
  g.set_dropout_counter(counter);
  copy->to(o.device);
  copy->load_state_dict(net.state_dict());
  return copy;
}

// One observation as the {1, size} input row on `device`.
ag::Tensor row(const Tensor& observation, int64_t size, Device device) {
  return ag::Tensor(observation.clone().reshape(Shape{1, size})).to(device);
}

int64_t argmax(const std::vector<float>& v) { return int64_t(std::max_element(v.begin(), v.end()) - v.begin()); }

double uniform(uint64_t key, uint64_t& draws) {
  return double(hash_random(key, draws++) >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace

PPOOptions cartpole_ppo_options() {
  PPOOptions o;
  o.n_steps = 256;
  o.batch_size = 256;
  o.n_epochs = 20;
  o.gamma = 0.98f;
  o.gae_lambda = 0.8f;
  o.learning_rate = 1e-3;
  o.anneal_learning_rate = o.anneal_clip_range = true;
  return o;
}

void compute_gae(std::span<const float> rewards, std::span<const float> values, std::span<const uint8_t> dones,
                 float last_value, float gamma, float gae_lambda, std::span<float> advantages,
                 std::span<float> returns) {
  const size_t n = rewards.size();
  if (values.size() != n || dones.size() != n || advantages.size() != n || returns.size() != n)
    throw ShapeError("compute_gae: rewards, values, dones, advantages and returns must have one length; got " +
                     std::to_string(n) + ", " + std::to_string(values.size()) + ", " + std::to_string(dones.size()) +
                     ", " + std::to_string(advantages.size()) + ", " + std::to_string(returns.size()));
  if (!(gamma >= 0.0f && gamma <= 1.0f) || !(gae_lambda >= 0.0f && gae_lambda <= 1.0f))
    throw ValueError("compute_gae: gamma and gae_lambda must be in [0, 1] (as PPOOptions and the replay buffer "
                     "require); got " + std::to_string(gamma) + " and " + std::to_string(gae_lambda));
  float next_value = last_value, last = 0.0f;
  for (size_t k = n; k-- > 0;) {
    const float live = dones[k] ? 0.0f : 1.0f;
    const float delta = rewards[k] + gamma * next_value * live - values[k];
    last = delta + gamma * gae_lambda * live * last;
    advantages[k] = last;
    returns[k] = last + values[k];
    next_value = values[k];
  }
}

struct PPO::Rollout {
  int64_t n = 0;  // steps stored
  std::vector<float> obs, rewards, values, log_probs, advantages, returns;
  std::vector<int32_t> actions;
  std::vector<uint8_t> dones;  // the episode ended at this step
};

PPO::PPO(Env& env, const PPOOptions& options) : options_(validated(options)), env_(env) {
  if (env.observation_dtype() != DType::Float32)
    throw ValueError(std::string("PPO: the environment's observations must be float32; they are ") +
                     dtype_name(env.observation_dtype()));
  obs_size_ = env.observation_shape().numel();
  actions_ = env.action_count();
  if (actions_ < 2) throw ValueError("PPO: the environment needs at least 2 actions; it has " + std::to_string(actions_));
  ag::manual_seed(options_.seed);
  actor_ = mlp(obs_size_, options_, actions_);
  critic_ = mlp(obs_size_, options_, 1);
  {
    ag::NoGradGuard no_grad;
    auto& head = static_cast<ag::nn::Linear&>(*(*actor_)[actor_->size() - 1]);
    head.weight.mul_(0.01f);
    head.bias.zero_();
  }
  actor_->to(options_.device);  // before the optimizer, which then keeps its state there too
  critic_->to(options_.device);
  std::vector<ag::Tensor> params;
  for (const ag::Tensor& p : actor_->parameters()) params.push_back(p);
  for (const ag::Tensor& p : critic_->parameters()) params.push_back(p);
  optimizer_ = std::make_unique<ag::optim::Adam>(params, options_.learning_rate, std::array<double, 2>{0.9, 0.999}, 1e-5);
  rollout_ = std::make_unique<Rollout>();
}

PPO::~PPO() = default;

int64_t PPO::predict(const Tensor& observation) {
  if (!observation.defined() || observation.dtype() != DType::Float32 || observation.numel() != obs_size_)
    throw ShapeError("PPO::predict: the observation must be float32 with " + std::to_string(obs_size_) +
                     " elements (the environment's shape); got " +
                     (observation.defined() ? observation.shape().str() : std::string("an undefined tensor")));
  ag::NoGradGuard no_grad;
  return argmax(actor_->forward(row(observation, obs_size_, options_.device)).to_vector());
}

Policy PPO::snapshot_policy() const {
  std::shared_ptr<ag::nn::Sequential> copy = copy_of(*actor_, obs_size_, options_, actions_);
  const int64_t size = obs_size_;
  const Device device = options_.device;
  return [copy, size, device](const Tensor& observation) {
    if (!observation.defined() || observation.dtype() != DType::Float32 || observation.numel() != size)
      throw ShapeError("PPO policy: the observation must be float32 with " + std::to_string(size) + " elements");
    ag::NoGradGuard no_grad;
    return argmax(copy->forward(row(observation, size, device)).to_vector());
  };
}

void PPO::start_episode() {
  // The first episode starts from the seed; after an environment's bad value the next one goes on.
  Tensor first = timesteps_ == 0 && draws_ == 0 ? env_.reset(options_.seed) : env_.reset();
  detail::check_env_observation(env_, first, "PPO::learn",
                                "reset() before step " + std::to_string(timesteps_ + 1) + " of training",
                                "first observation");
  observation_ = std::move(first);
  log_.episode_return = 0.0;
}

void PPO::collect(int64_t steps, EvalCallback* eval) {
  Rollout& r = *rollout_;
  r.n = steps;
  r.obs.resize(size_t(steps * obs_size_));
  for (auto* v : {&r.rewards, &r.values, &r.log_probs, &r.advantages, &r.returns}) v->resize(size_t(steps));
  r.actions.resize(size_t(steps));
  r.dones.resize(size_t(steps));
  const uint64_t key = hash_random(options_.seed, kActionStream);
  ag::NoGradGuard no_grad;
  auto value_of = [&](const Tensor& observation) {
    return critic_->forward(row(observation, obs_size_, options_.device)).item();
  };
  for (int64_t t = 0; t < steps; ++t) {
    const ag::Tensor x = row(observation_, obs_size_, options_.device);
    const std::vector<float> logp = ag::log_softmax(actor_->forward(x), 1).to_vector();
    // Inverse-CDF draw from the policy's categorical distribution.
    const double u = uniform(key, draws_);
    int64_t a = actions_ - 1;
    double cdf = 0.0;
    for (int64_t k = 0; k < actions_; ++k) {
      cdf += std::exp(double(logp[size_t(k)]));
      if (u < cdf) {
        a = k;
        break;
      }
    }
    std::memcpy(r.obs.data() + t * obs_size_, observation_.data<float>(), size_t(obs_size_) * sizeof(float));
    r.values[size_t(t)] = critic_->forward(x).item();
    r.log_probs[size_t(t)] = logp[size_t(a)];
    r.actions[size_t(t)] = int32_t(a);
    EnvStep s = env_.step(a);
    try {
      detail::check_env_step(env_, s, "PPO::learn", "step " + std::to_string(timesteps_ + 1) + " of training");
    } catch (const Error&) {
      // The rollout is dropped before any update; the next learn() starts another episode.
      observation_ = Tensor();
      log_.episode_return = 0.0;
      throw;
    }
    float reward = s.reward;
    // A cut episode's last state still has a value: bootstrap it into the reward (SB3).
    if (s.truncated && !s.terminated) reward += options_.gamma * value_of(s.observation);
    r.rewards[size_t(t)] = reward;
    r.dones[size_t(t)] = (s.terminated || s.truncated) ? 1 : 0;
    log_.reward(s.reward);
    if (s.terminated || s.truncated) {
      log_.end_episode();
      observation_ = Tensor();
    } else {
      observation_ = std::move(s.observation);
    }
    ++timesteps_;
    if (!observation_.defined()) start_episode();
    if (eval) eval->on_step(*this);
  }
  // GAE over the rollout, bootstrapping from the value of the observation it stopped at.
  compute_gae(r.rewards, r.values, r.dones, value_of(observation_), options_.gamma, options_.gae_lambda, r.advantages,
              r.returns);
}

void PPO::update(double progress_remaining) {
  Rollout& r = *rollout_;
  const double lr = options_.learning_rate * (options_.anneal_learning_rate ? progress_remaining : 1.0);
  const float clip = options_.clip_range * float(options_.anneal_clip_range ? progress_remaining : 1.0);
  for (ag::optim::ParamGroup& g : optimizer_->param_groups()) g.lr = lr;
  std::vector<ag::Tensor> params;
  for (const ag::optim::ParamGroup& g : optimizer_->param_groups())
    params.insert(params.end(), g.params.begin(), g.params.end());
  std::vector<int64_t> order(size_t(r.n));
  const uint64_t key = hash_random(options_.seed, kShuffleStream);
  for (int epoch = 0; epoch < options_.n_epochs; ++epoch) {
    std::iota(order.begin(), order.end(), int64_t(0));
    for (int64_t i = r.n - 1; i > 0; --i)  // Fisher-Yates from the agent's own stream
      std::swap(order[size_t(i)], order[size_t(int64_t(uniform(key, draws_) * double(i + 1)))]);
    for (int64_t start = 0; start < r.n; start += options_.batch_size) {
      const int64_t b = std::min(options_.batch_size, r.n - start);
      Tensor x = Tensor::empty(Shape{b, obs_size_}), onehot = Tensor::zeros(Shape{b, actions_});
      Tensor old_logp = Tensor::empty(Shape{b}), adv = Tensor::empty(Shape{b}), ret = Tensor::empty(Shape{b});
      double mean = 0.0, sq = 0.0;
      for (int64_t i = 0; i < b; ++i) {
        const size_t j = size_t(order[size_t(start + i)]);
        std::memcpy(x.data<float>() + i * obs_size_, r.obs.data() + j * size_t(obs_size_),
                    size_t(obs_size_) * sizeof(float));
        onehot.data<float>()[i * actions_ + r.actions[j]] = 1.0f;
        old_logp.data<float>()[i] = r.log_probs[j];
        adv.data<float>()[i] = r.advantages[j];
        ret.data<float>()[i] = r.returns[j];
        mean += r.advantages[j];
      }
      mean /= double(b);
      for (int64_t i = 0; i < b; ++i) sq += (adv.data<float>()[i] - mean) * (adv.data<float>()[i] - mean);
      if (options_.normalize_advantage && b > 1) {
        const double sd = std::sqrt(sq / double(b - 1));  // torch.std: the unbiased estimate
        for (int64_t i = 0; i < b; ++i) adv.data<float>()[i] = float((adv.data<float>()[i] - mean) / (sd + 1e-8));
      }
      const Device d = options_.device;
      const ag::Tensor ax = ag::Tensor(x).to(d), aadv = ag::Tensor(adv).to(d);
      const ag::Tensor logits = actor_->forward(ax);
      const ag::Tensor logp_all = ag::log_softmax(logits, 1);
      const ag::Tensor logp = ag::sum(logp_all * ag::Tensor(onehot).to(d), 1);
      const ag::Tensor ratio = ag::exp(logp - ag::Tensor(old_logp).to(d));
      const ag::Tensor surrogate =
          ag::minimum(ratio * aadv, ag::clamp(ratio, 1.0f - clip, 1.0f + clip) * aadv);
      ag::Tensor loss = -ag::mean(surrogate);
      const ag::Tensor values = ag::reshape(critic_->forward(ax), Shape{b});
      loss = loss + options_.vf_coef * ag::mse_loss(values, ag::Tensor(ret).to(d));
      if (options_.ent_coef > 0.0f) {
        const ag::Tensor entropy = -ag::mean(ag::sum(ag::softmax(logits, 1) * logp_all, 1));
        loss = loss - options_.ent_coef * entropy;
      }
      optimizer_->zero_grad();
      loss.backward();
      if (options_.max_grad_norm > 0.0f) ag::optim::clip_grad_norm_(params, options_.max_grad_norm);
      optimizer_->step();
      log_.loss(double(loss.item()));
    }
  }
}

void PPO::learn(int64_t timesteps, EvalCallback* eval, const ProgressFn& progress, int64_t report_every) {
  if (timesteps < 0) throw ValueError("PPO::learn: timesteps must be >= 0; got " + std::to_string(timesteps));
  if (report_every < 1) throw ValueError("PPO::learn: report_every must be at least 1; got " + std::to_string(report_every));
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  const double eval_before = eval ? eval->seconds() : 0.0;
  if (!observation_.defined()) start_episode();
  int64_t done = 0, next_report = report_every;
  while (done < timesteps) {
    const int64_t steps = std::min(options_.n_steps, timesteps - done);
    const double remaining = 1.0 - double(done) / double(timesteps);  // SB3's progress_remaining
    collect(steps, eval);
    done += steps;
    update(remaining);
    if (progress && (done >= next_report || done == timesteps)) {
      while (next_report <= done) next_report += report_every;
      const double seconds = std::chrono::duration<double>(clock::now() - start).count() -
                             (eval ? eval->seconds() - eval_before : 0.0);
      progress(log_.report(timesteps_, seconds > 0 ? double(done) / seconds : 0.0));
    }
  }
  if (eval) eval->on_step(*this, true);
}

}  // namespace tensorgrad::rl
