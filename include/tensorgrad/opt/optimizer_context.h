#pragma once
// The optimizer context, as ggml_opt_context is in ggml: a model's forward
// pass, one loss head per output, reverse-mode gradients, gradient
// accumulation, the hook stage and the optimizer update, built and planned
// once and then stepped. `fit` and the Trainer are both written on `step`.
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tensorgrad/backend/executable.h"
#include "tensorgrad/core/tensor.h"
#include "tensorgrad/dist/communicator.h"
#include "tensorgrad/opt/hook_stage.h"
#include "tensorgrad/opt/losses.h"
#include "tensorgrad/opt/metrics.h"
#include "tensorgrad/opt/model_function.h"
#include "tensorgrad/opt/optimizer_spec.h"

namespace tensorgrad {

struct OptimizerPlan;
/// Planned graphs shared by the contexts of one model that differ only in
/// their batch size: a graph planned for a capacity runs every batch up to
/// it, so contexts for 50 batch sizes need a handful of plans, not 50.
class OptimizerPlans {
 public:
  /// Bytes of every arena held, and the number of plans.
  ///@{
  size_t arena_bytes() const;
  size_t count() const;
  ///@}

 private:
  friend class OptimizerContext;
  // By (capacity, graph kind: evaluation, training forward or training step).
  std::map<std::pair<int64_t, int>, std::shared_ptr<OptimizerPlan>> plans_;
};

/// How OptimizerContext::evaluate (and Trainer::eval) runs the model.
struct EvalOptions {
  /// false (the default): inference mode, what held-out data needs: dropout
  /// off, batch normalization with its moving statistics. true: the training
  /// step's forward pass (Keras' model(x, training=True), PyTorch's
  /// model.train()): dropout active, batch normalization with the batch's
  /// statistics; still nothing changes: no weight, no optimizer state, no
  /// moving statistic, and not the dropout stream, so the masks are the ones
  /// the next training step draws (every training-mode evaluation between
  /// two steps draws the same masks), and a run with such evaluations trains
  /// exactly as one without. (Keras' call updates the moving statistics;
  /// this one leaves the model as it is.)
  bool training = false;
};

/// Options of an optimizer context.
struct OptimizerContextOptions {
  int64_t batch_size = 32;  ///< rows of every step and evaluation, exactly
  /// Rows per optimizer update; an exact multiple of micro_batch (0 =
  /// micro_batch). Gradients are averaged over the logical batch: the loss
  /// of each physical batch is scaled by batch_size / nbatch_logical (ggml
  /// scales by 1/opt_period; the two agree for full micro-batches).
  int64_t nbatch_logical = 0;
  /// The micro-batch the accumulation period counts (period = nbatch_logical
  /// / micro_batch); 0 = batch_size. A context whose batch_size is less runs
  /// short micro-batches (a generator's last batch) inside that period,
  /// sharing the optimizer state: each counts as one micro-step, its rows
  /// weighing as much as any other rows. ValueError when less than batch_size.
  int64_t micro_batch = 0;
  /// One loss per output in the model's output order, or one for every output.
  std::vector<Loss> losses{Loss()};
  /// The total loss is sum_i loss_weights[i] * loss_i (Keras' loss_weights);
  /// empty = all ones, else one per output (ValueError otherwise).
  std::vector<float> loss_weights;
  /// Metric names per output (Keras names, see metric_from_name); empty =
  /// none, else one list for every output or one list per output.
  std::vector<std::vector<std::string>> metrics;
  LossWeights weights = LossWeights::None;  ///< the form of the sample weights step() takes
  OptimizerSpec optimizer;                  ///< the optimizer and its settings
  /// Rows the graphs are planned for (0 = batch_size), at least batch_size.
  /// A graph that scales with its batch is planned once for the capacity and
  /// run at batch_size rows; one that does not is planned for batch_size.
  int64_t capacity = 0;
  /// Plans shared with other contexts of the same model, loss heads and
  /// accumulation period (null: this context's own).
  std::shared_ptr<OptimizerPlans> plans;
  /// The model's gradient hooks (hooks belong to the model, not to one
  /// context), run before the context's own, in order; shared, so a hook
  /// added to the model later reaches contexts made earlier.
  std::shared_ptr<const std::vector<AnyGradientHook>> model_hooks;
  /// The size in bytes of the hook stage's gradient buckets (see
  /// GradientBuffer): a positive multiple of 4, else ValueError; default 25
  /// MiB (PyTorch DDP's bucket_cap_mb).
  size_t gradient_bucket_bytes = kDefaultGradientBucketBytes;
  /// The backend the graphs run on (Model::compile's device); null: the CPU.
  std::shared_ptr<const Backend> backend;
  /// The fusion pass's rewrites for the graphs (Model::compile's
  /// CompileTarget::fusion), as far as the backend has the fused kernels.
  FusionOptions fusion;
};

/// What one step or evaluation measured. The spans point into the context
/// and stay valid until its next step() or evaluate().
struct StepResult {
  float loss = 0.0f;       ///< total loss of the batch (unscaled by accumulation)
  int64_t correct = -1;    ///< first output's first accuracy metric: rows counted right; -1 without one
  int64_t rows = 0;        ///< the batch's rows (0 for join_step)
  bool updated = false;    ///< whether this step applied an optimizer update
  std::span<const float> output_losses;  ///< per output, before loss_weights
  /// Every output's metrics in order (output 0's first), each summed over
  /// the batch's rows: divide by the rows for the batch's value (rmse: the
  /// sum of squared errors per row; take the root after dividing).
  std::span<const double> metric_sums;
};

/// A model's training and evaluation graphs for one batch size (as ggml's
/// ggml_opt_context): the forward pass, one loss head per output, the
/// backward pass, gradient accumulation, the hook stage and the optimizer
/// update, built and planned once, then run by step() and evaluate(). Every
/// context of one model shares its OptimizerState, so contexts for other
/// batch sizes continue the same optimizer.
class OptimizerContext {
 public:
  /// A context for exactly `options.batch_size` rows; the training graph is
  /// built and planned on the first step(), the evaluation graph on the first
  /// evaluate(). Throws ValueError when nbatch_logical is not a positive
  /// multiple of batch_size, the optimizer settings are invalid, the model
  /// function is empty, the losses, loss weights or metric lists do not
  /// match the outputs, a metric is unknown or does not fit its loss, or the batch cannot fit in memory; ShapeError or
  /// TypeError when the model cannot be built for its losses.
  OptimizerContext(const ModelFunction& model, const OptimizerContextOptions& options,
                   std::shared_ptr<OptimizerState> state = nullptr);
  /// Releases what only this context holds; the shared state and plans live
  /// on in their other holders.
  ~OptimizerContext();

  /// One forward and backward pass; the optimizer updates the weights when
  /// the accumulation period completes. x: one tensor per input, {batch_size,
  /// input_shape...} (or {batch_size, features} flattened); y: one per
  /// output, {batch_size, output_shape...} float32 for MSE, categorical
  /// cross-entropy and custom losses, {batch_size} or {batch_size, 1} class
  /// ids (int32, or float32 holding whole numbers) for sparse cross-entropy;
  /// sample_weight: empty, one tensor for every output, or one per output, per
  /// LossWeights (an undefined tensor = ones). Throws ShapeError ("exactly N"
  /// rows, feature count, tensor counts), TypeError (label form), IndexError
  /// (class id out of range), ValueError (NaN or infinity, fractional id).
  /// Allocates nothing after the first call.
  StepResult step(std::span<const Tensor> x, std::span<const Tensor> y, std::span<const Tensor> sample_weight = {});
  /// One input, one output.
  StepResult step(const Tensor& x, const Tensor& y, const Tensor& sample_weight = {});
  /// Applies an accumulation period left incomplete (some but not all of its
  /// micro-batches stepped since the last update): the gradients gathered so
  /// far, each row weighing 1 / nbatch_logical as always (so a part period
  /// takes a smaller step), through clipping, the gradient hooks and the
  /// update; the next step starts a new period. Returns false, doing
  /// nothing, without accumulation or with nothing pending. train_epoch calls
  /// it at every epoch's end, so that no rows carry into the next epoch or
  /// fit (PyTorch's loops step on the last batch alike). Throws StateError
  /// for a retired context, and what a hook throws. Allocates nothing once
  /// the context has stepped.
  bool apply_pending_update();
  /// Data-parallel training: this rank has no rows for the step the other
  /// ranks take now (its share of a short last global batch, or its
  /// generator ended first). It counts one micro-step and, when that
  /// completes the period, joins the update with no gradient of its own (as
  /// PyTorch's Join for uneven inputs), so no rank waits in a collective.
  /// Returns a result of 0 rows (loss and metric sums 0). Throws StateError
  /// for a retired context or without OptimizerState::communicator.
  StepResult join_step();
  /// The losses and metrics without a backward pass or update, in inference
  /// mode unless options.training (see EvalOptions); the arguments and
  /// errors of step(). The model is left exactly as it was. Allocates
  /// nothing after the first call of each mode.
  StepResult evaluate(std::span<const Tensor> x, std::span<const Tensor> y,
                      std::span<const Tensor> sample_weight = {}, const EvalOptions& options = {});
  /// One input, one output.
  StepResult evaluate(const Tensor& x, const Tensor& y, const Tensor& sample_weight = {},
                      const EvalOptions& options = {});

  /// Checks one output's labels and weights for `rows` rows (any row count
  /// when rows < 0) with the same rules and errors as step(), without running
  /// anything.
  void check_targets(size_t output, const Tensor& y, const Tensor& sample_weight, int64_t rows) const;
  /// The same for output 0.
  void check_targets(const Tensor& y, const Tensor& sample_weight, int64_t rows) const {
    check_targets(0, y, sample_weight, rows);
  }

  /// Builds the training and evaluation graphs (at two rows, unplanned) and
  /// throws StateError naming the first op `backend` has no kernel for
  /// (Backend::check_kernels): how compile refuses a model for a device.
  void check_kernels(const Backend& backend);
  /// Adds a hook run between backward and update (see GradientHook), after
  /// the model's hooks; this context's only.
  void add_gradient_hook(GradientHook hook);
  /// Adds a hook that sees the model's flat gradient buffer cut into buckets
  /// (see GradientBuffer), run in the same stage as add_gradient_hook's and
  /// in one order with them. Throws ValueError for an empty hook.
  void add_gradient_bucket_hook(GradientBucketHook hook);
  /// Sets the bucket size of the hook stage from the next hook call on;
  /// throws ValueError unless bytes is a positive multiple of 4.
  void set_gradient_bucket_bytes(size_t bytes);
  /// The bucket size, in bytes.
  size_t gradient_bucket_bytes() const { return options_.gradient_bucket_bytes; }
  /// Sets the learning rate from the next update on. Throws ValueError
  /// unless lr is positive and finite, and TypeError when the optimizer has
  /// a learning_rate_schedule (as Keras).
  void set_learning_rate(float lr);
  /// The learning rate of the next update: the spec's or set_learning_rate's,
  /// or with a schedule its value at the current iterations (Keras'
  /// optimizer.learning_rate).
  float learning_rate() const;
  /// Rows of every step (options().batch_size).
  int64_t batch_size() const { return options_.batch_size; }
  /// Steps per optimizer update: nbatch_logical / micro_batch (1 without
  /// accumulation).
  int64_t accumulation_period() const { return period_; }
  /// Calls of step().
  int64_t n_steps() const { return n_steps_; }
  /// The rows the training graph was planned for (the capacity when it
  /// scales with its batch, else batch_size); 0 before the first step.
  int64_t planned_rows() const;
  /// Releases the graphs, the model function and the optimizer state (so a
  /// freed model's memory goes); every later step(), evaluate() or learning
  /// rate call throws StateError saying `why` (the model changed).
  void retire(const std::string& why);
  /// The options the context was made with.
  const OptimizerContextOptions& options() const { return options_; }
  /// The optimizer state it updates (shared with the model's other contexts).
  const std::shared_ptr<OptimizerState>& state() const { return state_; }
  /// Number of model outputs.
  size_t n_outputs() const;
  /// The metrics of output i, resolved, with the names they were given.
  const std::vector<std::pair<std::string, MetricKind>>& metrics(size_t output) const;

 private:
  struct Head;
  // What a graph computes: the inference forward pass and losses; the
  // training forward pass and losses, without backward or update; or a
  // whole training step. (The values key OptimizerPlans::plans_.)
  enum class GraphKind { kEvaluation = 0, kTrainingForward = 1, kTraining = 2 };
  StepResult run(OptimizerPlan& plan, std::span<const Tensor> x, std::span<const Tensor> y,
                 std::span<const Tensor> w, bool train);
  std::vector<Value> build_graph(Graph& g, int64_t rows, GraphKind kind, OptimizerPlan* plan);
  void build_update(Graph& g, OptimizerPlan* plan, std::vector<Value>& results);
  std::shared_ptr<OptimizerPlan> build(GraphKind kind);
  void apply_update(OptimizerPlan& plan, float rows);
  void reduce_over_ranks(dist::Communicator& comm, float rows, bool row_sums);
  // Whether the model trains data-parallel now (a communicator of 2 or more ranks).
  bool distributed() const;
  OptimizerPlan& acquire(GraphKind kind);
  void stage(OptimizerPlan& plan, std::span<const Tensor> x, std::span<const Tensor> y, std::span<const Tensor> w);
  Device device() const { return options_.backend ? options_.backend->device() : Device::CPU; }

  ModelFunction model_;
  OptimizerContextOptions options_;
  std::shared_ptr<OptimizerState> state_;
  int64_t period_ = 1;
  int64_t n_steps_ = 0;
  std::vector<Head> heads_;  // per output: its loss and staging
  std::shared_ptr<OptimizerPlan> train_, eval_, train_forward_;
  std::string retired_;  // non-empty once retired: why
  std::vector<AnyGradientHook> hooks_;
  GradientBuffer buffer_;  // what the hooks see: views of state_->gradients
  // Per buffer_.tensors_ entry, the gradient in the executable's arena when
  // the training graph does not accumulate (copied into the flat buffer
  // before hooks and back after); undefined when it accumulates.
  std::vector<Tensor> arena_grads_;
  bool in_hook_stage_ = false;  // apply_update is running the hooks
  void release_gradient_views();
  std::vector<Tensor> x_staging_;  // per input: float32 token ids converted to int32
  std::vector<std::string> x_names_;  // per input, for messages: made once so that a step never allocates
  std::vector<float> output_losses_;
  std::vector<double> metric_sums_;
  Tensor accumulation_scale_;  // {} float32: the gradient seed, batch_size / nbatch_logical (1 without accumulation)
  Tensor row_sum_seed_;        // {} float32: batch_size, the gradient seed in data-parallel training
  // Data-parallel training on a device: the gradients (and row count)
  // copied to the host for the reduction over ranks and back, one copy
  // each way per step; sized at the first step.
  std::vector<float> host_message_;
};

}  // namespace tensorgrad
