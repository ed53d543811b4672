// Uniform and prioritized experience replay (stable-baselines3's ReplayBuffer; Schaul et al. 2016).
#include "tensorgrad/rl/replay_buffer.h"

#include <algorithm>
#include <array>
#include <span>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "tensorgrad/core/error.h"
#include "tensorgrad/core/random.h"

namespace tensorgrad::rl {

namespace {

// {rows, item...}, built without allocating (add and sample check shapes with it).
Shape with_rows(int64_t rows, const Shape& item) {
  std::array<int64_t, Shape::kMaxRank + 1> dims{rows};
  for (int i = 0; i < item.rank(); ++i) dims[size_t(i + 1)] = item[i];
  return Shape(std::span<const int64_t>(dims.data(), size_t(item.rank() + 1)));
}

// A stored item's tensor: `shape` itself, or {1, shape...} (one row of a batch, as a policy sees it).
void check_item(const Tensor& t, const Shape& shape, DType dtype, const char* call, const char* what) {
  if (!t.defined())
    throw ValueError(std::string(call) + ": " + what + " is an undefined tensor; pass one of shape " + shape.str());
  if (t.device() != Device::CPU)
    throw ValueError(std::string(call) + ": " + what + " is on " + t.device().str() +
                     "; a replay buffer stores host tensors: pass " + what + ".to(Device::CPU)");
  if (t.dtype() != dtype)
    throw TypeError(std::string(call) + ": " + what + " must be " + dtype_name(dtype) + " (the buffer's dtype); got " +
                    dtype_name(t.dtype()));
  if (t.shape() != shape && t.shape() != with_rows(1, shape))
    throw ShapeError(std::string(call) + ": " + what + " must have the buffer's shape " + shape.str() + " (or " +
                     with_rows(1, shape).str() + "); got " + t.shape().str());
}

// A float32 item's first NaN or infinite element, as ValueError (a stored NaN would poison every
// batch that draws it, and every agent's later training).
void check_finite(const void* data, int64_t numel, DType dtype, const Shape& shape, const char* call,
                  const char* what) {
  if (dtype != DType::Float32) return;
  const float* p = static_cast<const float*>(data);
  for (int64_t i = 0; i < numel; ++i)
    if (!std::isfinite(p[i]))
      throw ValueError(std::string(call) + ": " + what + "'s element " + std::to_string(i) + " (of " + shape.str() +
                       ") is " + (std::isnan(p[i]) ? "nan" : p[i] > 0 ? "inf" : "-inf") +
                       "; a replay buffer stores finite values only (nothing was stored): check what produced it");
}

void check_batch_tensor(const Tensor& t, const Shape& shape, DType dtype, const char* name) {
  if (!t.defined() || t.device() != Device::CPU || t.dtype() != dtype || t.shape() != shape)
    throw ShapeError(std::string("ReplayBuffer::sample: the batch's ") + name + " must be a host " +
                     dtype_name(dtype) + " tensor " + shape.str() + "; got " +
                     (t.defined() ? std::string(dtype_name(t.dtype())) + " " + t.shape().str() : "an undefined one") +
                     ". Make the batch with this buffer's make_batch()");
}

// Copies one stored item (a multiple of 4 bytes: float32 or int32 elements). Small items, as a
// CartPole observation's 16 bytes, go word by word inline: a memcpy call per item was most of
// the sampling's time.
inline void copy_item(void* dst, const void* src, size_t bytes) {
  if (bytes > 64) {
    std::memcpy(dst, src, bytes);
    return;
  }
  uint32_t* d = static_cast<uint32_t*>(dst);
  const uint32_t* from = static_cast<const uint32_t*>(src);
  for (size_t i = 0; i < bytes / 4; ++i) d[i] = from[i];
}

const Tensor* find_tensor(const nn::CallbackState& s, const std::string& name) {
  for (const auto& [n, t] : s.tensors)
    if (n == name) return &t;
  return nullptr;
}

double value_of(const nn::CallbackState& s, const std::string& type, const std::string& key, double lo, double hi) {
  const auto it = s.values.find(key);
  if (it == s.values.end())
    throw ValueError(type + "::set_state: the state has no '" + key + "'; pass a state from get_state()");
  const double v = it->second;
  if (!(v >= lo && v <= hi) || v != std::floor(v))
    throw ValueError(type + "::set_state: '" + key + "' must be an integer in [" + std::to_string(int64_t(lo)) + ", " +
                     std::to_string(int64_t(hi)) + "]; got " + std::to_string(v));
  return v;
}

// The state's tensor `name`, checked to be `shape` and `dtype`.
const Tensor& state_tensor(const nn::CallbackState& s, const std::string& type, const std::string& name,
                           const Shape& shape, DType dtype) {
  const Tensor* t = find_tensor(s, name);
  if (!t) throw ValueError(type + "::set_state: the state has no tensor '" + name + "'; pass a state from get_state()");
  if (t->dtype() != dtype || t->shape() != shape)
    throw ValueError(type + "::set_state: the state's '" + name + "' is " + dtype_name(t->dtype()) + " " +
                     t->shape().str() + "; this buffer keeps " + dtype_name(dtype) + " " + shape.str() +
                     " (a state of a buffer with other options?)");
  return *t;
}

}  // namespace

ReplayBuffer::ReplayBuffer(const ReplayBufferOptions& options) : options_(options) {
  const ReplayBufferOptions& o = options_;
  if (o.capacity < 1) throw ValueError("ReplayBuffer: capacity must be at least 1; got " + std::to_string(o.capacity));
  if (o.n_step < 1) throw ValueError("ReplayBuffer: n_step must be at least 1; got " + std::to_string(o.n_step));
  if (!(o.gamma >= 0.0f && o.gamma <= 1.0f))
    throw ValueError("ReplayBuffer: gamma must be in [0, 1]; got " + std::to_string(o.gamma));
  if (o.observation_dtype == DType::Int64 || o.action_dtype == DType::Int64)
    throw ValueError("ReplayBuffer: observations are Float32 or Int32, actions Int32 or Float32; got " +
                     std::string(dtype_name(o.observation_dtype)) + " observations and " +
                     dtype_name(o.action_dtype) + " actions");
  if (o.observation_shape.rank() > Shape::kMaxRank - 1 || o.action_shape.rank() > Shape::kMaxRank - 1)
    throw ValueError("ReplayBuffer: observation and action shapes hold at most " +
                     std::to_string(Shape::kMaxRank - 1) + " dimensions (one more is the buffer's); got " +
                     o.observation_shape.str() + " and " + o.action_shape.str());
  observation_numel_ = o.observation_shape.numel();
  action_numel_ = o.action_shape.numel();
  if (observation_numel_ < 1 || action_numel_ < 1)
    throw ValueError("ReplayBuffer: observations and actions need at least one element; got shapes " +
                     o.observation_shape.str() + " and " + o.action_shape.str());
  // The storage is capacity x (2 observations + an action) elements; refuse what no memory holds.
  if (double(o.capacity) * double(2 * observation_numel_ + action_numel_) > 1e15)
    throw ValueError("ReplayBuffer: capacity " + std::to_string(o.capacity) + " of observations " +
                     o.observation_shape.str() + " needs more than 1e15 elements; lower the capacity");
  observations_ = Tensor::zeros(with_rows(o.capacity, o.observation_shape), o.observation_dtype);
  next_observations_ = Tensor::zeros(with_rows(o.capacity, o.observation_shape), o.observation_dtype);
  actions_ = Tensor::zeros(with_rows(o.capacity, o.action_shape), o.action_dtype);
  rewards_ = Tensor::zeros(Shape{o.capacity});
  terminated_.assign(size_t(o.capacity), 0);
  truncated_.assign(size_t(o.capacity), 0);
}

void ReplayBuffer::add(const Tensor& observation, const Tensor& action, float reward, const Tensor& next_observation,
                       bool terminated, bool truncated) {
  check_item(action, options_.action_shape, options_.action_dtype, "ReplayBuffer::add", "action");
  check_finite(action.raw(), action_numel_, options_.action_dtype, options_.action_shape, "ReplayBuffer::add",
               "action");
  store(observation, action.raw(), reward, next_observation, terminated, truncated);
}

void ReplayBuffer::add(const Tensor& observation, int64_t action, float reward, const Tensor& next_observation,
                       bool terminated, bool truncated) {
  if (options_.action_dtype != DType::Int32 || options_.action_shape.rank() != 0)
    throw ValueError("ReplayBuffer::add: an integer action needs a buffer of discrete actions (Int32, shape {}); "
                     "this one stores " + std::string(dtype_name(options_.action_dtype)) + " " +
                     options_.action_shape.str() + " actions: pass the action as a tensor");
  if (action < std::numeric_limits<int32_t>::min() || action > std::numeric_limits<int32_t>::max())
    throw ValueError("ReplayBuffer::add: the action " + std::to_string(action) + " does not fit an Int32");
  const int32_t a = int32_t(action);
  store(observation, &a, reward, next_observation, terminated, truncated);
}

void ReplayBuffer::store(const Tensor& observation, const void* action, float reward, const Tensor& next_observation,
                         bool terminated, bool truncated) {
  const char* call = "ReplayBuffer::add";
  check_item(observation, options_.observation_shape, options_.observation_dtype, call, "observation");
  check_item(next_observation, options_.observation_shape, options_.observation_dtype, call, "next_observation");
  if (!std::isfinite(reward))
    throw ValueError(std::string(call) + ": the reward must be finite; got " + std::to_string(reward));
  check_finite(observation.raw(), observation_numel_, options_.observation_dtype, options_.observation_shape, call,
               "observation");
  check_finite(next_observation.raw(), observation_numel_, options_.observation_dtype, options_.observation_shape,
               call, "next_observation");
  const size_t ob = size_t(observation_numel_) * dtype_size(options_.observation_dtype);
  const size_t ab = size_t(action_numel_) * dtype_size(options_.action_dtype);
  const size_t slot = size_t(pos_);
  copy_item(static_cast<char*>(observations_.raw()) + slot * ob, observation.raw(), ob);
  copy_item(static_cast<char*>(next_observations_.raw()) + slot * ob, next_observation.raw(), ob);
  copy_item(static_cast<char*>(actions_.raw()) + slot * ab, action, ab);
  rewards_.data<float>()[slot] = reward;
  terminated_[slot] = terminated ? 1 : 0;
  truncated_[slot] = truncated ? 1 : 0;
  on_add(pos_);
  pos_ = (pos_ + 1) % options_.capacity;
  size_ = std::min(size_ + 1, options_.capacity);
}

ReplayBatch ReplayBuffer::make_batch(int64_t batch_size) const {
  if (batch_size < 1)
    throw ValueError("ReplayBuffer::make_batch: batch_size must be at least 1; got " + std::to_string(batch_size));
  ReplayBatch b;
  b.observations = Tensor::zeros(with_rows(batch_size, options_.observation_shape), options_.observation_dtype);
  b.next_observations = Tensor::zeros(with_rows(batch_size, options_.observation_shape), options_.observation_dtype);
  b.actions = Tensor::zeros(with_rows(batch_size, options_.action_shape), options_.action_dtype);
  b.rewards = Tensor::zeros(Shape{batch_size});
  b.dones = Tensor::zeros(Shape{batch_size});
  b.discounts = Tensor::zeros(Shape{batch_size});
  b.indices = Tensor::zeros(Shape{batch_size}, DType::Int64);
  b.weights = Tensor::full(Shape{batch_size}, 1.0f);
  return b;
}

void ReplayBuffer::check_batch(const ReplayBatch& b) const {
  const int64_t n = b.size();
  if (n > size_)
    throw ValueError("ReplayBuffer::sample: the batch asks for " + std::to_string(n) + " transitions but the buffer " +
                     "holds " + std::to_string(size_) + "; add more before sampling (an agent's learning_starts) " +
                     "or sample a smaller batch");
  if (n < 1) throw ShapeError("ReplayBuffer::sample: the batch is empty; make it with make_batch(batch_size)");
  check_batch_tensor(b.observations, with_rows(n, options_.observation_shape), options_.observation_dtype,
                     "observations");
  check_batch_tensor(b.next_observations, with_rows(n, options_.observation_shape), options_.observation_dtype,
                     "next_observations");
  check_batch_tensor(b.actions, with_rows(n, options_.action_shape), options_.action_dtype, "actions");
  check_batch_tensor(b.rewards, Shape{n}, DType::Float32, "rewards");
  check_batch_tensor(b.dones, Shape{n}, DType::Float32, "dones");
  check_batch_tensor(b.discounts, Shape{n}, DType::Float32, "discounts");
  check_batch_tensor(b.indices, Shape{n}, DType::Int64, "indices");
  check_batch_tensor(b.weights, Shape{n}, DType::Float32, "weights");
}

uint64_t ReplayBuffer::next_random() { return hash_random(options_.seed, stream_++); }

int64_t ReplayBuffer::random_index(int64_t n) {
  return int64_t((unsigned __int128)next_random() * (unsigned __int128)uint64_t(n) >> 64);
}

void ReplayBuffer::gather(int64_t slot, ReplayBatch& b, int64_t row) const {
  const size_t ob = size_t(observation_numel_) * dtype_size(options_.observation_dtype);
  const size_t ab = size_t(action_numel_) * dtype_size(options_.action_dtype);
  copy_item(static_cast<char*>(b.observations.raw()) + size_t(row) * ob,
              static_cast<const char*>(observations_.raw()) + size_t(slot) * ob, ob);
  copy_item(static_cast<char*>(b.actions.raw()) + size_t(row) * ab,
              static_cast<const char*>(actions_.raw()) + size_t(slot) * ab, ab);
  // The n-step sum runs forward in time: slots follow each other except at the write position,
  // where the newest transition is followed by the oldest.
  // raw(), not data<>(): check_batch and the constructor checked host and dtype once, and a per-row
  // check was a fifth of the sampling's time.
  const float* r = static_cast<const float*>(rewards_.raw());
  double sum = 0.0, discount = 1.0;
  int64_t s = slot;
  for (int k = 0;; ++k) {
    sum += discount * double(r[s]);
    discount *= double(options_.gamma);
    const int64_t next = (s + 1) % options_.capacity;
    if (terminated_[size_t(s)] || truncated_[size_t(s)] || k + 1 == options_.n_step || next == pos_) break;
    s = next;
  }
  copy_item(static_cast<char*>(b.next_observations.raw()) + size_t(row) * ob,
              static_cast<const char*>(next_observations_.raw()) + size_t(s) * ob, ob);
  const bool done = terminated_[size_t(s)] || (!options_.handle_timeout_termination && truncated_[size_t(s)]);
  static_cast<float*>(b.rewards.raw())[row] = float(sum);
  static_cast<float*>(b.discounts.raw())[row] = float(discount);
  static_cast<float*>(b.dones.raw())[row] = done ? 1.0f : 0.0f;
}

void ReplayBuffer::prefetch(int64_t slot) const {
  const size_t ob = size_t(observation_numel_) * dtype_size(options_.observation_dtype);
  const size_t ab = size_t(action_numel_) * dtype_size(options_.action_dtype);
  __builtin_prefetch(static_cast<const char*>(observations_.raw()) + size_t(slot) * ob);
  __builtin_prefetch(static_cast<const char*>(next_observations_.raw()) + size_t(slot) * ob);
  __builtin_prefetch(static_cast<const char*>(actions_.raw()) + size_t(slot) * ab);
  __builtin_prefetch(static_cast<const float*>(rewards_.raw()) + slot);
  __builtin_prefetch(terminated_.data() + slot);
  __builtin_prefetch(truncated_.data() + slot);
}

void ReplayBuffer::sample(ReplayBatch& batch) {
  check_batch(batch);
  // The slots first, their memory requested as they are drawn, then the copies: a large buffer's
  // random rows are cache misses, which overlap this way instead of following one another.
  int64_t* slots = static_cast<int64_t*>(batch.indices.raw());
  float* w = static_cast<float*>(batch.weights.raw());
  const int64_t n = batch.size();
  for (int64_t i = 0; i < n; ++i) {
    slots[i] = random_index(size_);
    prefetch(slots[i]);
  }
  for (int64_t i = 0; i < n; ++i) {
    gather(slots[i], batch, i);
    w[i] = 1.0f;
  }
}

nn::CallbackState ReplayBuffer::get_state() const {
  nn::CallbackState s;
  s.values["capacity"] = double(options_.capacity);
  s.values["size"] = double(size_);
  s.values["position"] = double(pos_);
  s.values["stream"] = double(stream_);
  if (size_ == 0) return s;
  Tensor flags = Tensor::empty(Shape{size_}, DType::Int32);
  for (int64_t i = 0; i < size_; ++i)
    flags.data<int32_t>()[i] = terminated_[size_t(i)] | (truncated_[size_t(i)] << 1);
  // Copies, not views: a checkpoint's load takes the old state first to put it back on error.
  // Flattened to {size, elements}: GGUF keeps at most 4 dimensions, observations may have more.
  const Shape obs{size_, observation_numel_}, act{size_, action_numel_};
  s.tensors = {{"observations", observations_.rows(0, size_).clone().reshape(obs)},
               {"actions", actions_.rows(0, size_).clone().reshape(act)},
               {"rewards", rewards_.rows(0, size_).clone()},
               {"next_observations", next_observations_.rows(0, size_).clone().reshape(obs)},
               {"flags", flags}};
  return s;
}

void ReplayBuffer::set_state(const nn::CallbackState& s) {
  const std::string type = this->type();
  const int64_t cap = options_.capacity;
  if (int64_t(value_of(s, type, "capacity", 1, 9e15)) != cap)
    throw ValueError(type + "::set_state: the state is of a buffer of capacity " +
                     std::to_string(int64_t(s.values.at("capacity"))) + "; this one holds " + std::to_string(cap));
  const int64_t size = int64_t(value_of(s, type, "size", 0, double(cap)));
  const int64_t pos = int64_t(value_of(s, type, "position", 0, double(cap - 1)));
  const auto stream = uint64_t(value_of(s, type, "stream", 0, 9007199254740992.0));
  if (size < cap && pos != size)
    throw ValueError(type + "::set_state: a buffer not yet full writes after its last transition (position " +
                     std::to_string(size) + "); the state says position " + std::to_string(pos));
  const Tensor *obs = nullptr, *next = nullptr, *act = nullptr, *rew = nullptr, *flags = nullptr;
  if (size > 0) {
    obs = &state_tensor(s, type, "observations", Shape{size, observation_numel_}, options_.observation_dtype);
    next = &state_tensor(s, type, "next_observations", Shape{size, observation_numel_}, options_.observation_dtype);
    act = &state_tensor(s, type, "actions", Shape{size, action_numel_}, options_.action_dtype);
    rew = &state_tensor(s, type, "rewards", Shape{size}, DType::Float32);
    flags = &state_tensor(s, type, "flags", Shape{size}, DType::Int32);
    for (int64_t i = 0; i < size; ++i) {
      const int32_t f = flags->data<int32_t>()[i];
      if (f < 0 || f > 3)
        throw ValueError(type + "::set_state: flags[" + std::to_string(i) + "] is " + std::to_string(f) +
                         "; expected 0 to 3 (bit 0 terminated, bit 1 truncated)");
    }
    observations_.rows(0, size).copy_from(obs->reshape(with_rows(size, options_.observation_shape)));
    next_observations_.rows(0, size).copy_from(next->reshape(with_rows(size, options_.observation_shape)));
    actions_.rows(0, size).copy_from(act->reshape(with_rows(size, options_.action_shape)));
    rewards_.rows(0, size).copy_from(*rew);
    for (int64_t i = 0; i < size; ++i) {
      const int32_t f = flags->data<int32_t>()[i];
      terminated_[size_t(i)] = uint8_t(f & 1), truncated_[size_t(i)] = uint8_t(f >> 1);
    }
  }
  size_ = size, pos_ = pos, stream_ = stream;
}

// ---- prioritized ----

PrioritizedReplayBuffer::PrioritizedReplayBuffer(const ReplayBufferOptions& options,
                                                 const PrioritizedReplayOptions& priorities)
    : ReplayBuffer(options), priorities_(priorities) {
  if (!(priorities.alpha >= 0.0) || !std::isfinite(priorities.alpha))
    throw ValueError("PrioritizedReplayBuffer: alpha must be finite and >= 0 (0: uniform); got " +
                     std::to_string(priorities.alpha));
  if (!(priorities.epsilon > 0.0) || !std::isfinite(priorities.epsilon))
    throw ValueError("PrioritizedReplayBuffer: epsilon must be finite and > 0; got " +
                     std::to_string(priorities.epsilon));
  priorities.beta.check("PrioritizedReplayBuffer: beta");
  if (!(priorities.beta.start >= 0.0 && priorities.beta.start <= 1.0 && priorities.beta.end >= 0.0 &&
        priorities.beta.end <= 1.0))
    throw ValueError("PrioritizedReplayBuffer: beta's start and end must be in [0, 1]; got " +
                     std::to_string(priorities.beta.start) + " -> " + std::to_string(priorities.beta.end));
  while (leaves_ < options.capacity) leaves_ *= 2;
  sum_.assign(size_t(2 * leaves_), 0.0);
  min_.assign(size_t(2 * leaves_), std::numeric_limits<double>::infinity());
}

void PrioritizedReplayBuffer::set_leaf(int64_t slot, float value) {
  // A priority that rounds to 0 or overflows float would make the weights inf or NaN (and the state
  // unloadable): the leaves stay within float's normal range.
  value = std::clamp(value, std::numeric_limits<float>::min(), std::numeric_limits<float>::max());
  int64_t i = leaves_ + slot;
  sum_[size_t(i)] = min_[size_t(i)] = double(value);
  for (i /= 2; i >= 1; i /= 2) {
    sum_[size_t(i)] = sum_[size_t(2 * i)] + sum_[size_t(2 * i + 1)];
    min_[size_t(i)] = std::min(min_[size_t(2 * i)], min_[size_t(2 * i + 1)]);
  }
}

void PrioritizedReplayBuffer::rebuild() {
  for (int64_t i = leaves_ - 1; i >= 1; --i) {
    sum_[size_t(i)] = sum_[size_t(2 * i)] + sum_[size_t(2 * i + 1)];
    min_[size_t(i)] = std::min(min_[size_t(2 * i)], min_[size_t(2 * i + 1)]);
  }
}

void PrioritizedReplayBuffer::on_add(int64_t slot) {
  set_leaf(slot, float(std::pow(max_priority_, priorities_.alpha)));
}

// The slot whose prefix-sum interval holds `mass` in [0, total); a subtree of sum 0 (nothing stored)
// is never entered, so rounding at the top end cannot land on an empty slot.
int64_t PrioritizedReplayBuffer::find(double mass) const {
  int64_t i = 1;
  while (i < leaves_) {
    const double left = sum_[size_t(2 * i)];
    if (mass < left || sum_[size_t(2 * i + 1)] <= 0.0) {
      i = 2 * i;
    } else {
      mass -= left;
      i = 2 * i + 1;
    }
  }
  return i - leaves_;
}

double PrioritizedReplayBuffer::beta() const { return priorities_.beta.value(samples_); }

double PrioritizedReplayBuffer::priority(int64_t slot) const {
  if (slot < 0 || slot >= size())
    throw IndexError("PrioritizedReplayBuffer::priority: slot " + std::to_string(slot) + " is not stored (0 to " +
                     std::to_string(size() - 1) + ")");
  return sum_[size_t(leaves_ + slot)];
}

void PrioritizedReplayBuffer::sample(ReplayBatch& batch) {
  check_batch(batch);
  const double total = sum_[1], beta = this->beta(), n = double(size());
  // w_i = (N P(i))^-beta / max_j w_j, the largest weight being the least likely slot's.
  const double max_weight = std::pow(n * min_[1] / total, -beta);
  int64_t* slots = static_cast<int64_t*>(batch.indices.raw());
  float* w = static_cast<float*>(batch.weights.raw());
  const int64_t rows = batch.size();
  for (int64_t i = 0; i < rows; ++i) {
    const double u = double(next_random() >> 11) * (1.0 / 9007199254740992.0);
    slots[i] = find(u * total);
    prefetch(slots[i]);
    w[i] = float(std::pow(n * sum_[size_t(leaves_ + slots[i])] / total, -beta) / max_weight);
  }
  for (int64_t i = 0; i < rows; ++i) gather(slots[i], batch, i);
  ++samples_;
}

void PrioritizedReplayBuffer::update_priorities(const Tensor& indices, const Tensor& td_errors) {
  const char* call = "PrioritizedReplayBuffer::update_priorities";
  if (!indices.defined() || indices.dtype() != DType::Int64 || indices.shape().rank() != 1)
    throw TypeError(std::string(call) + ": indices must be an Int64 tensor {B} (a batch's indices); got " +
                    (indices.defined() ? std::string(dtype_name(indices.dtype())) + " " + indices.shape().str()
                                       : "an undefined tensor"));
  if (!td_errors.defined() || td_errors.dtype() != DType::Float32 || td_errors.shape() != indices.shape())
    throw ShapeError(std::string(call) + ": td_errors must be a Float32 tensor of the indices' shape " +
                     indices.shape().str() + "; got " +
                     (td_errors.defined() ? std::string(dtype_name(td_errors.dtype())) + " " + td_errors.shape().str()
                                          : "an undefined tensor"));
  const int64_t n = indices.shape()[0];
  const int64_t* idx = indices.data<int64_t>();
  const float* td = td_errors.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    if (idx[i] < 0 || idx[i] >= size())
      throw IndexError(std::string(call) + ": indices[" + std::to_string(i) + "] = " + std::to_string(idx[i]) +
                       " is not a stored slot (0 to " + std::to_string(size() - 1) + ")");
    if (!std::isfinite(td[i]))
      throw ValueError(std::string(call) + ": td_errors[" + std::to_string(i) + "] is " + std::to_string(td[i]) +
                       "; a priority needs a finite TD error (a NaN loss upstream?)");
  }
  for (int64_t i = 0; i < n; ++i) {
    const double p = std::abs(double(td[i])) + priorities_.epsilon;
    set_leaf(idx[i], float(std::pow(p, priorities_.alpha)));
    max_priority_ = std::max(max_priority_, p);
  }
}

nn::CallbackState PrioritizedReplayBuffer::get_state() const {
  nn::CallbackState s = ReplayBuffer::get_state();
  s.values["max_priority"] = max_priority_;
  s.values["samples"] = double(samples_);
  if (size() > 0) {
    Tensor p = Tensor::empty(Shape{size()});
    for (int64_t i = 0; i < size(); ++i) p.data<float>()[i] = float(sum_[size_t(leaves_ + i)]);
    s.tensors.emplace_back("priorities", p);
  }
  return s;
}

void PrioritizedReplayBuffer::set_state(const nn::CallbackState& s) {
  const std::string type = this->type();
  const auto it = s.values.find("max_priority");
  if (it == s.values.end() || !(it->second > 0.0) || !std::isfinite(it->second))
    throw ValueError(type + "::set_state: the state needs a finite 'max_priority' > 0; pass a state from get_state()");
  const auto samples = int64_t(value_of(s, type, "samples", 0, 9e15));
  const int64_t size = int64_t(value_of(s, type, "size", 0, double(capacity())));
  std::vector<double> leaves(static_cast<size_t>(size));
  if (size > 0) {
    const Tensor& p = state_tensor(s, type, "priorities", Shape{size}, DType::Float32);
    for (int64_t i = 0; i < size; ++i) {
      const float v = p.data<float>()[i];
      if (!(v > 0.0f) || !std::isfinite(v))
        throw ValueError(type + "::set_state: priorities[" + std::to_string(i) + "] is " + std::to_string(v) +
                         "; priorities are finite and > 0");
      leaves[size_t(i)] = double(v);
    }
  }
  ReplayBuffer::set_state(s);  // checks the rest; throws before anything of this class changes
  std::fill(sum_.begin(), sum_.end(), 0.0);
  std::fill(min_.begin(), min_.end(), std::numeric_limits<double>::infinity());
  for (int64_t i = 0; i < size; ++i) sum_[size_t(leaves_ + i)] = min_[size_t(leaves_ + i)] = leaves[size_t(i)];
  rebuild();
  max_priority_ = it->second;
  samples_ = samples;
}

}  // namespace tensorgrad::rl
