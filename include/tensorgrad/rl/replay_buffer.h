#pragma once
// Experience replay for off-policy agents: a uniform ring buffer
// (stable-baselines3's ReplayBuffer, with its n-step returns and
// handle_timeout_termination) and a prioritized one (Schaul et al. 2016,
// "Prioritized Experience Replay", the proportional variant). Both save their
// whole state into a Trainer's checkpoint (io::save_checkpoint with `states`),
// so an agent resumes exactly, buffer included.
#include <cstdint>
#include <vector>

#include "tensorgrad/core/dtype.h"
#include "tensorgrad/core/shape.h"
#include "tensorgrad/core/tensor.h"
#include "tensorgrad/nn/callback.h"
#include "tensorgrad/rl/schedule.h"

namespace tensorgrad::rl {

/// What a replay buffer stores and how it samples.
struct ReplayBufferOptions {
  /// Transitions kept; once full, each add() overwrites the oldest.
  int64_t capacity = 100000;
  /// The shape of one observation ({4}, {84, 84}, {steps}).
  Shape observation_shape{};
  /// Float32 or Int32 (token ids, cell indices).
  DType observation_dtype = DType::Float32;
  /// The shape of one action: {} for one discrete action, {n} for a vector.
  Shape action_shape{};
  /// Int32 (discrete actions) or Float32 (continuous ones).
  DType action_dtype = DType::Int32;
  /// Rewards summed per sample: 1 is the one-step transition; n > 1 sums
  /// gamma^k r_{t+k} for k < n, stopping early at the end of an episode or
  /// at the newest transition stored (stable-baselines3's n_steps).
  int n_step = 1;
  /// The discount of the n-step sum; 0 <= gamma <= 1.
  float gamma = 0.99f;
  /// true (stable-baselines3's default): a truncated episode's last
  /// transition is not terminal, its target bootstraps; false: truncation
  /// counts as termination.
  bool handle_timeout_termination = true;
  /// The seed of the buffer's own random stream (sampling).
  uint64_t seed = 0;
};

/// A sampled minibatch, allocated once by make_batch() and filled in place
/// by sample(). B is the batch size; a TD target is
/// rewards + discounts (1 - dones) V(next_observations).
struct ReplayBatch {
  Tensor observations;       ///< {B, observation...} of the observation dtype
  Tensor actions;            ///< {B, action...} of the action dtype
  Tensor rewards;            ///< {B} float32: the n-step discounted reward sums
  Tensor next_observations;  ///< {B, observation...}: the observation after the last summed step
  Tensor dones;              ///< {B} float32: 1 where that step terminated the episode (no bootstrap), else 0
  Tensor discounts;          ///< {B} float32: gamma^m, m the steps summed (1 <= m <= n_step)
  Tensor indices;            ///< {B} int64: the slots sampled (PrioritizedReplayBuffer::update_priorities)
  Tensor weights;            ///< {B} float32: importance-sampling weights (all 1 for uniform sampling)
  /// B.
  int64_t size() const { return rewards.defined() ? rewards.shape()[0] : 0; }
};

/// A fixed-capacity ring buffer of transitions (observation, action, reward,
/// next observation, terminated, truncated), sampled uniformly with
/// replacement from a random stream of its own (a counter-based hash of its
/// seed: the same samples on every platform and for any thread count).
/// add() and sample() allocate nothing. Saves and restores its whole state
/// (get_state / set_state, through io::save_checkpoint and
/// io::load_checkpoint with a Trainer): a restored buffer samples what the
/// saved one would have.
class ReplayBuffer : public nn::Stateful {
 public:
  /// Allocates the storage for `options.capacity` transitions. Throws
  /// ValueError for a capacity below 1, an n_step below 1, a gamma outside
  /// [0, 1], an observation dtype other than Float32 or Int32, an action
  /// dtype other than Int32 or Float32, an observation or action shape of
  /// more than 5 dimensions or no element, or a capacity no memory holds.
  explicit ReplayBuffer(const ReplayBufferOptions& options);

  /// Stores one transition, overwriting the oldest when full. `observation`
  /// and `next_observation` must be host tensors of the observation shape
  /// and dtype (a leading 1 is accepted: {1, 4} for {4}); `action` one of
  /// the action shape and dtype. Throws ShapeError or TypeError naming the
  /// argument otherwise, ValueError for an undefined tensor, one on another
  /// device, a NaN or infinite reward, or a NaN or infinite element of a
  /// float32 observation, next_observation or action (naming the argument
  /// and the element); nothing is stored then.
  void add(const Tensor& observation, const Tensor& action, float reward, const Tensor& next_observation,
           bool terminated, bool truncated);
  /// The same with a discrete action (Int32 actions of shape {}); throws
  /// ValueError when the buffer's actions are not discrete.
  void add(const Tensor& observation, int64_t action, float reward, const Tensor& next_observation, bool terminated,
           bool truncated);

  /// A batch of `batch_size` rows of this buffer's shapes and dtypes, for
  /// sample() to fill (its weights all 1). Throws ValueError for a
  /// batch_size below 1.
  ReplayBatch make_batch(int64_t batch_size) const;
  /// Fills `batch` (from make_batch(), any batch size) with transitions drawn
  /// uniformly with replacement (virtual: PrioritizedReplayBuffer draws by
  /// priority). Throws ValueError when the batch is larger than size()
  /// (an empty buffer included), ShapeError for a batch not made for this
  /// buffer.
  virtual void sample(ReplayBatch& batch);

  /// Transitions stored (at most capacity()).
  int64_t size() const { return size_; }
  /// The options' capacity.
  int64_t capacity() const { return options_.capacity; }
  /// The options it was made with.
  const ReplayBufferOptions& options() const { return options_; }

  /// "ReplayBuffer": the name checkpoints record its state by.
  const char* type() const override { return "ReplayBuffer"; }
  /// The stored transitions (the first size() slots of each array), the
  /// write position, the size and the random stream's position.
  nn::CallbackState get_state() const override;
  /// Restores a state from get_state() of a buffer with the same options.
  /// Throws ValueError for a state of other shapes, dtypes or capacity, or
  /// with missing or out-of-range values; nothing changes then.
  void set_state(const nn::CallbackState& state) override;

 protected:
  /// The next number of the buffer's random stream (uniform 64 bits).
  uint64_t next_random();
  /// A uniform index in [0, n) from next_random() (Lemire's multiply-shift).
  int64_t random_index(int64_t n);
  /// Copies transition `slot` (n-step summed) into row `row` of `batch`;
  /// the row's index and weight are the sampler's to write.
  void gather(int64_t slot, ReplayBatch& batch, int64_t row) const;
  /// Throws unless `batch` was made for this buffer.
  void check_batch(const ReplayBatch& batch) const;
  /// Asks for slot `slot`'s memory ahead of gather().
  void prefetch(int64_t slot) const;
  /// The slot add() wrote last is (position() - 1) mod capacity().
  int64_t position() const { return pos_; }
  /// Called by add() with the slot written, before the position advances.
  virtual void on_add(int64_t slot) { (void)slot; }

 private:
  void store(const Tensor& observation, const void* action, float reward, const Tensor& next_observation,
             bool terminated, bool truncated);

  ReplayBufferOptions options_;
  int64_t observation_numel_ = 0, action_numel_ = 0;
  Tensor observations_, next_observations_, actions_, rewards_;
  std::vector<uint8_t> terminated_, truncated_;
  int64_t size_ = 0, pos_ = 0;
  uint64_t stream_ = 0;  // draws so far
};

/// Options of a PrioritizedReplayBuffer beyond the uniform buffer's.
struct PrioritizedReplayOptions {
  /// How much prioritization is used: P(i) = p_i^alpha / sum_k p_k^alpha
  /// (0: uniform). Schaul et al.'s proportional variant used 0.6.
  double alpha = 0.6;
  /// The importance-sampling exponent, annealed over sample() calls from
  /// beta0 to 1 (Schaul et al.: 0.4 to 1 over training).
  LinearSchedule beta{0.4, 1.0, 100000};
  /// Added to |td_error| so that no transition's priority is 0.
  double epsilon = 1e-6;
};

/// Proportional prioritized replay (Schaul et al. 2016): transition i is
/// drawn with probability P(i) = p_i^alpha / sum_k p_k^alpha, p_i = |delta_i|
/// + epsilon from update_priorities (a new transition gets the largest
/// priority seen so far, so it is replayed at least once), each draw
/// independent, in time logarithmic in the capacity (a sum tree); the batch's
/// weights are the importance-sampling corrections w_i = (N P(i))^-beta /
/// max_j w_j (N the transitions stored, the max over all of them), to
/// multiply the per-sample loss with (a Trainer's sample weights).
class PrioritizedReplayBuffer final : public ReplayBuffer {
 public:
  /// Throws as ReplayBuffer, and ValueError for an alpha below 0, a beta
  /// schedule outside [0, 1] or an epsilon not above 0. Priorities p^alpha
  /// are kept within float32's normal range.
  PrioritizedReplayBuffer(const ReplayBufferOptions& options, const PrioritizedReplayOptions& priorities = {});

  /// Fills `batch` with draws by priority and its weights with their
  /// importance-sampling corrections at beta(t), t the sample() calls before
  /// this one. Throws as ReplayBuffer::sample.
  void sample(ReplayBatch& batch) override;
  /// Sets the priorities of the slots `indices` (int64 {B}, from a batch) to
  /// (|td_errors| + epsilon)^alpha (td_errors float32 {B}). Throws ShapeError
  /// or TypeError for other shapes or dtypes, IndexError for a slot not
  /// stored, ValueError for a NaN or infinite TD error; nothing changes then.
  void update_priorities(const Tensor& indices, const Tensor& td_errors);

  /// beta at the next sample().
  double beta() const;
  /// The priority p_i^alpha of slot i (IndexError when i is not stored).
  double priority(int64_t slot) const;
  /// The options given.
  const PrioritizedReplayOptions& priority_options() const { return priorities_; }

  /// "PrioritizedReplayBuffer".
  const char* type() const override { return "PrioritizedReplayBuffer"; }
  /// The uniform buffer's state, the priorities, the largest priority and
  /// the sample() calls so far.
  nn::CallbackState get_state() const override;
  /// Restores it; throws as ReplayBuffer::set_state.
  void set_state(const nn::CallbackState& state) override;

 private:
  void on_add(int64_t slot) override;
  void set_leaf(int64_t slot, float value);
  void rebuild();
  int64_t find(double mass) const;

  PrioritizedReplayOptions priorities_;
  int64_t leaves_ = 1;        // a power of two >= capacity
  // The sum tree: node k's children are 2k and 2k + 1, slot i's leaf is leaves_ + i. Leaves hold
  // p^alpha rounded to float, so that a saved state (float32) rebuilds the same sums exactly.
  std::vector<double> sum_;
  std::vector<double> min_;    // the min tree alike (+inf where nothing is stored)
  double max_priority_ = 1.0;  // the largest |td_error| + epsilon given so far (1 before any)
  int64_t samples_ = 0;        // sample() calls
};

}  // namespace tensorgrad::rl
