#pragma once
// A training context you step yourself (as ggml's ggml_opt_context is): it
// outlives any single call, so a loop written by the user (reinforcement
// learning above all: a replay buffer still being filled, rollout and
// optimisation at different rates, a target network refreshed now and then)
// takes one optimizer step at a time while weights, Adam moments and the
// planned graphs persist.
#include <memory>
#include <optional>
#include <vector>

#include "tensorgrad/nn/model.h"

namespace tensorgrad::nn {

/// Options of a Trainer; an aggregate, so
/// `Trainer(model, {.batch_size = 64, .nbatch_logical = 256})` names what it
/// sets. Designated initializers must keep the order of the fields:
/// batch_size, nbatch_logical, loss_mask, weight_decay,
/// gradient_bucket_bytes, communicator.
struct TrainerOptions {
  /// Rows of every step() and eval(); exactly this many, else ShapeError.
  int64_t batch_size = 32;
  /// Rows per optimizer update (gradient accumulation); 0 = batch_size, else
  /// an exact multiple of it (ValueError otherwise).
  int64_t nbatch_logical = 0;
  /// Loss weights, for "mse", "huber" (the usual DQN loss) or "mae": 0
  /// none; 1 one weight per sample ({batch} or {batch, 1}); the number of
  /// outputs: one weight per output element ({batch, outputs}), e.g. a 0/1
  /// mask training only the action a Q-network took. The loss is
  /// sum(w * l(pred - y)) / (batch * outputs), not renormalised. Anything
  /// else throws ValueError.
  int64_t loss_mask = 0;
  /// Decoupled weight decay in [0, 1]; unset = the compiled optimizer's.
  /// Frozen weights are not decayed.
  std::optional<float> weight_decay = std::nullopt;
  /// The hook stage's bucket size in bytes (Model::set_gradient_bucket_bytes);
  /// unset = the model's (default 25 MiB). A positive multiple of 4, else
  /// ValueError.
  std::optional<size_t> gradient_bucket_bytes = std::nullopt;
  /// Data-parallel training (see FitOptions::communicator): every rank makes
  /// a trainer with the same model and options and steps it on its own
  /// batches, in the same order; each update reduces the gradients over the
  /// ranks (before clipping, one reduce_broadcast per gradient bucket) to the
  /// sum of the ranks' row-sums over their total rows, so the weights stay
  /// identical on every rank. The constructor broadcasts rank 0's weights and
  /// optimizer state (ValueError on every rank when the models differ).
  /// step() returns this rank's loss; an exception in step() or join_step()
  /// ends the job (nn/data_parallel.h: MPI_Abort(1)). Null: one process.
  std::shared_ptr<dist::Communicator> communicator = nullptr;
};

/// The trainer. Works on its own copy of a compiled Model's weights (the
/// model given is unchanged), compiled as the model is (optimizer, losses,
/// device, fusion options); dropout masks go on from the model's training
/// step with its layers' seeds. Its predictions, snapshots and handed-out
/// models run in graphs and arenas of their own, so none of them can disturb
/// training. One thread at a time; a snapshot may be used in another thread
/// while the trainer steps. free() releases early; every method then throws
/// StateError. Destruction releases everything.
class Trainer {
 public:
  /// Throws StateError if `model` is not compiled or has been freed;
  /// ValueError for bad options (see TrainerOptions).
  Trainer(const Model& model, const TrainerOptions& options = {});
  ~Trainer();
  /// Moving hands the context on; the moved-from trainer is released.
  ///@{
  Trainer(Trainer&&) noexcept;
  Trainer& operator=(Trainer&&) noexcept;
  ///@}

  /// One forward and backward pass on exactly batch_size rows; the weights
  /// update when the accumulation period completes. x {batch, input_shape...},
  /// y as the compiled loss takes it, sample_weight per loss_mask (undefined =
  /// all ones). Returns this step's loss. Throws ShapeError ("exactly N rows"),
  /// ValueError (weights without loss_mask, NaN), and the label errors of
  /// OptimizerContext::step. Allocates nothing after the first call.
  float step(const Tensor& x, const Tensor& y, const Tensor& sample_weight = {});
  /// Several inputs and outputs, in the model's order (OptimizerContext::step):
  /// the loss is the weighted sum of the outputs' losses.
  float step(std::span<const Tensor> x, std::span<const Tensor> y, std::span<const Tensor> sample_weight = {});
  /// Data-parallel training: this rank has no batch for the step the others
  /// take (an episode that ended early): it joins their update with no rows
  /// (OptimizerContext::join_step). Throws StateError without
  /// TrainerOptions::communicator.
  void join_step();
  /// The loss on (x, y) without a backward pass or update; the arguments and
  /// errors of step(). By default in inference mode, what held-out data
  /// needs: dropout off, batch normalization with its moving statistics (as
  /// Keras' evaluate and model(x)). With options.training, the forward pass
  /// of step() instead (Keras' model(x, training=True): the training graph
  /// without its backward pass and update): dropout active, with the masks
  /// the next step() draws, and batch normalization with the batch's
  /// statistics. Either way nothing changes: the weights, the optimizer state,
  /// the moving statistics and the dropout stream stay as they were (see
  /// EvalOptions), so steps go on exactly as without the call.
  float eval(const Tensor& x, const Tensor& y, const Tensor& sample_weight = {}, const EvalOptions& options = {});
  /// The same for a model of several inputs or outputs (one tensor each, in
  /// the model's order).
  float eval(std::span<const Tensor> x, std::span<const Tensor> y, std::span<const Tensor> sample_weight = {},
             const EvalOptions& options = {});
  /// Outputs from the current weights for any number of rows, in batches of
  /// batch_size (default: the trainer's).
  Tensor predict(const Tensor& x, int64_t batch_size = 0);
  /// The same into caller memory {rows, outputs}, all rows in one batch;
  /// allocates nothing once this row count has been seen (a one-row action).
  void predict(const Tensor& x, Tensor& out);
  /// Every output into caller memory, for inputs in the model's order
  /// (Model::predict); allocation-free as above.
  void predict(std::span<const Tensor> x, std::span<Tensor> out);

  /// An independent model holding a copy of the current weights (for
  /// prediction: inference mode), which outlives the trainer. Its own free()
  /// releases it early.
  Model snapshot() const;
  /// theta' <- tau * theta + (1 - tau) * theta' for every weight of `target`
  /// (Polyak averaging; batch-norm moving statistics are copied whole, never
  /// averaged; tau = 0 leaves the target as it is). Throws ValueError when tau is outside [0, 1] or the target's
  /// weights differ by name or shape (checked at every tau, 0 included), StateError for a released target.
  /// Runs as a graph of one op per weight (PolyakUpdate, or Assign for the
  /// copied statistics) with tau in a persistent tensor, built at the first
  /// call with a target and run again for the same target: it allocates
  /// nothing when called again with the same target, whatever tau. The graph
  /// holds the last target's weights until another target comes, the trainer
  /// is freed, or a call finds that target freed.
  void update_target(Model& target, float tau = 1.0f);
  /// A compiled model (same loss and optimizer settings) holding a copy of
  /// the current weights and fresh optimizer state, valid after the trainer
  /// is gone.
  Model model() const;
  /// The trainer's own weights, "<layer>/<weight>" in layer order: views of
  /// the very tensors its steps update (no copy, unlike model() and
  /// snapshot()), to read training as it goes. They are read-only by
  /// contract: writing through them changes the trainer's weights. Valid
  /// until the trainer is freed, moved from or destroyed. Throws StateError
  /// after free().
  std::vector<Weight> weights() const;
  /// Batch-norm moving statistics from up to 1024 rows of x (Model::calibrate_bn).
  void calibrate_bn(const Tensor& x);
  /// Adds a gradient hook (see GradientHook) to this trainer's own model:
  /// run by every step's update after the hooks the model had when the
  /// trainer was made, in the order added (Model::add_gradient_hook).
  /// Throws ValueError for an empty hook, StateError after free().
  void add_gradient_hook(GradientHook hook);
  /// The same for a hook that sees the flat gradient buffer cut into buckets
  /// (see GradientBuffer, Model::add_gradient_bucket_hook).
  void add_gradient_bucket_hook(GradientBucketHook hook);
  /// The bucket size in bytes of the hook stage (see
  /// TrainerOptions::gradient_bucket_bytes).
  size_t gradient_bucket_bytes() const { return model_.gradient_bucket_bytes(); }
  /// Sets the learning rate of the next updates, as Model::set_learning_rate
  /// (Keras' model.optimizer.learning_rate; stored in float32, like the
  /// optimizer's other hyper-parameters). Throws ValueError unless lr is
  /// positive and finite (in float32 too), TypeError when the optimizer has a
  /// learning_rate_schedule (its rate is not settable), StateError after
  /// free().
  void set_learning_rate(double lr);
  /// The learning rate of the next update (with a schedule, its value at the
  /// current iterations), as Model::learning_rate. StateError after free().
  double learning_rate() const;
  /// The earlier names of set_learning_rate and learning_rate.
  ///@{
  [[deprecated("use set_learning_rate")]] void set_lr(float lr) { set_learning_rate(lr); }
  [[deprecated("use learning_rate")]] float lr() const { return float(learning_rate()); }
  ///@}
  /// Calls of step() so far (and of join_step()), counted on from a state set
  /// by set_training_state.
  int64_t n_steps() const;
  /// The trainer's training state (Model::training_state) with its step
  /// count and accumulation period: what io::save_checkpoint saves beside
  /// the weights. Throws StateError after free().
  TrainingState training_state() const;
  /// Puts back a state from training_state() of a trainer made alike (the
  /// same model, optimizer and nbatch_logical / batch_size), as
  /// Model::set_training_state, and its step count: with the same weights,
  /// steps then go on bit for bit as from where the state was taken.
  /// io::load_checkpoint restores through it. Throws ValueError for a state
  /// without an optimizer part, one taken inside an accumulation period of
  /// another length (its gradients are scaled for that period), a negative
  /// step count, and the errors of Model::set_training_state (nothing
  /// changes then); StateError after free().
  void set_training_state(const TrainingState& state);
  /// The model the trainer trains, read-only: its very weights and
  /// optimizer state (no copy, unlike model() and snapshot()), for what
  /// reads a model without changing it (io::save_checkpoint saves its
  /// architecture and configuration). Valid until the trainer is freed,
  /// moved from or destroyed. Throws StateError after free().
  const Model& training_model() const;
  /// Rows of every step() (TrainerOptions::batch_size).
  int64_t batch_size() const { return options_.batch_size; }
  /// Early release; idempotent (Model::free).
  void free();
  /// Whether free() ran or the trainer was moved from (Model::released).
  bool released() const { return freed_; }
  /// The earlier name of released().
  [[deprecated("use released")]] bool freed() const { return released(); }

 private:
  void check_live(const char* call) const;
  void check_weights_allowed(const Tensor& sample_weight) const;
  Model model_;
  TrainerOptions options_;
  OptimizerContext* ctx_ = nullptr;
  bool freed_ = false;
  bool warned_non_finite_ = false;
  // n_steps() minus the context's count: a state set by set_training_state
  // carries its own count.
  int64_t n_steps_offset_ = 0;
  // update_target's graph (tau and the executable), kept for the last target seen.
  struct TargetUpdate;
  const Model* target_ = nullptr;
  uint64_t target_structure_ = 0;
  std::unique_ptr<TargetUpdate> target_update_;
};

}  // namespace tensorgrad::nn
