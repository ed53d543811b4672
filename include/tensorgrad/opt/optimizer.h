#pragma once
// The optimizer context (DESIGN.md, opt layer), as ggml_opt is for the seeds:
// a model's forward pass, one loss head per output, reverse-mode gradients,
// gradient accumulation, a hook stage and the optimizer update, built and
// planned once and then stepped. `fit` and the Trainer are both written on
// `step`.
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "tensorgrad/backend/executable.h"
#include "tensorgrad/core/tensor.h"
#include "tensorgrad/dist/communicator.h"
#include "tensorgrad/ops/builder.h"
#include "tensorgrad/opt/schedules.h"

namespace tensorgrad::io::detail {
struct Access;
}

namespace tensorgrad {

/// Losses by their Keras names; Custom is a user's LossFunction.
enum class LossKind {
  MeanSquaredError,
  MeanAbsoluteError,
  Huber,
  BinaryCrossentropy,
  CategoricalCrossentropy,
  SparseCategoricalCrossentropy,
  Custom
};
/// "mse" / "mean_squared_error", "mae" / "mean_absolute_error", "huber"
/// (delta 1: Keras' Huber, PyTorch's smooth_l1_loss with beta 1, the usual
/// DQN loss), "binary_crossentropy" (a final sigmoid folded into the loss,
/// exact for large logits; a linear output is taken as logits),
/// "categorical_crossentropy", "sparse_categorical_crossentropy". Throws
/// ValueError for any other name, listing the accepted ones.
LossKind loss_from_name(const std::string& name);
/// Keras' name of a built-in loss; "custom" for Custom.
const char* loss_name(LossKind loss);

/// A user's loss (DESIGN.md, "Loss heads per output"): from the targets
/// y_true and the model's output y_pred (both {batch, ...} as the output),
/// the per-row losses {batch}. The head multiplies them by the sample weights
/// and divides by the row count (Keras' sum over batch size), so a custom
/// loss is the same kind of thing as a built-in one. Any other result shape
/// is a ShapeError naming the loss.
using LossFunction = std::function<Value(Builder& b, Value y_true, Value y_pred)>;

/// One output's loss: a built-in one by its Keras name, or a custom function
/// with a name of its own (for messages and History keys).
struct Loss {
  LossKind kind = LossKind::MeanSquaredError;
  std::string name = "mse";
  LossFunction function;  // Custom only
  Loss() = default;
  /// A built-in loss by name; throws as loss_from_name.
  Loss(const char* name);         // NOLINT: implicit, so "mse" reads as a loss
  Loss(const std::string& name);  // NOLINT
  /// A custom loss; throws ValueError for an empty function or name.
  Loss(std::string name, LossFunction function);
};

/// Keyword arguments of OptimizerSpec::sgd, in the order of Keras 3's
/// `keras.optimizers.SGD` (fields PyTorch has and Keras lacks after Keras'
/// own), with Keras' defaults: write them as designated initializers,
/// `OptimizerSpec::sgd({.learning_rate = 0.1f, .momentum = 0.9f, .nesterov = true})`.
/// Each field means what the OptimizerSpec field of the same name means (a
/// learning_rate_schedule, as Keras' learning_rate given a schedule, replaces
/// learning_rate: `{.learning_rate_schedule = ExponentialDecay{0.1f, 100, 0.5f}, .momentum = 0.9f}`).
struct SGDOptions {
  float learning_rate = 0.01f;
  std::optional<LearningRateSchedule> learning_rate_schedule;
  float momentum = 0.0f;
  bool nesterov = false;
  float dampening = 0.0f;  // PyTorch's; Keras has none
  float weight_decay = 0.0f;
  bool decoupled_weight_decay = true;
  float clipnorm = 0.0f, clipvalue = 0.0f, global_clipnorm = 0.0f;
};

/// Keyword arguments of OptimizerSpec::rmsprop, in the order of Keras 3's
/// `keras.optimizers.RMSprop`, with Keras' defaults (learning rate 1e-3, rho
/// 0.9, no momentum, epsilon 1e-7 inside the square root, not centered).
/// PyTorch's RMSprop is `{.learning_rate = 0.01f, .rho = 0.99f, .epsilon =
/// 1e-8f, .epsilon_inside_sqrt = false}` (rho is its alpha), with
/// `.decoupled_weight_decay = false` for its weight_decay.
struct RMSpropOptions {
  float learning_rate = 1e-3f;
  std::optional<LearningRateSchedule> learning_rate_schedule;
  float rho = 0.9f;
  float momentum = 0.0f;
  float epsilon = 1e-7f;
  bool centered = false;
  bool epsilon_inside_sqrt = true;
  float weight_decay = 0.0f;
  bool decoupled_weight_decay = true;
  float clipnorm = 0.0f, clipvalue = 0.0f, global_clipnorm = 0.0f;
};

/// Keyword arguments of OptimizerSpec::adagrad, in the order of Keras 3's
/// `keras.optimizers.Adagrad`, with Keras' defaults (learning rate 1e-3,
/// initial accumulator 0.1, epsilon 1e-7 inside the square root). PyTorch's
/// Adagrad is `{.learning_rate = 0.01f, .initial_accumulator_value = 0.0f,
/// .epsilon = 1e-10f, .epsilon_inside_sqrt = false}`, with
/// `.decoupled_weight_decay = false` for its weight_decay.
struct AdagradOptions {
  float learning_rate = 1e-3f;
  std::optional<LearningRateSchedule> learning_rate_schedule;
  float initial_accumulator_value = 0.1f;
  float epsilon = 1e-7f;
  bool epsilon_inside_sqrt = true;
  float weight_decay = 0.0f;
  bool decoupled_weight_decay = true;
  float clipnorm = 0.0f, clipvalue = 0.0f, global_clipnorm = 0.0f;
};

/// Optimizer settings: which optimizer, its hyper-parameters, weight decay
/// and gradient clipping. Built by the factories below (Keras' defaults; the
/// eager API will take PyTorch's), whose fields may then be changed
/// directly; compile() and OptimizerContext check them with validate().
///
/// The update formulas are PyTorch's (torch.optim), written per element in
/// src/kernels/optimizer.cpp. Where Keras computes the same optimizer
/// differently, a field chooses:
///  - epsilon_inside_sqrt (RMSprop, Adagrad): Keras divides by sqrt(v + eps),
///    PyTorch by sqrt(v) + eps.
///  - decoupled_weight_decay: Keras 3 (every optimizer) and PyTorch's AdamW
///    decay the weights, p <- p (1 - lr wd), before the update; PyTorch's
///    SGD, Adam, RMSprop and Adagrad add wd p to the gradient (L2) instead.
///  - Momentum (SGD, RMSprop): PyTorch's buffer holds gradients (SGD:
///    b <- momentum b + (1 - dampening) g, the step lr b); Keras' holds
///    learning-rate-scaled steps (m <- momentum m - lr g, the step m). At a
///    constant learning rate the two are the same; under a schedule (or
///    set_learning_rate, ReduceLROnPlateau) a new learning rate scales the
///    whole PyTorch step at once, while Keras' velocity keeps the steps taken
///    at the old rate and forgets them at the rate of `momentum`. tensorgrad
///    follows PyTorch.
///
/// Gradient clipping (clipnorm, global_clipnorm, clipvalue; 0 = off) runs in
/// the hook stage, after the gradients of the accumulation period are
/// complete (and, in data-parallel training, reduced across ranks) and before the user's
/// gradient hooks and the update, as graph ops on the device.
struct OptimizerSpec {
  enum class Kind { AdamW, SGD, RMSprop, Adagrad };
  Kind kind = Kind::AdamW;
  /// The constant learning rate, when there is no schedule.
  float learning_rate = 1e-3f;
  /// Keras' learning_rate given a LearningRateSchedule (opt/schedules.h):
  /// the rate of each update is the schedule at the updates applied before
  /// it, computed in the update graph; learning_rate is then unused, and
  /// set_learning_rate throws TypeError (as Keras). Every optimizer, and
  /// decoupled weight decay, uses the scheduled rate. Its steps are
  /// optimizer updates: with gradient accumulation, one per period.
  std::optional<LearningRateSchedule> learning_rate_schedule;
  /// Adam's moment decays and every optimizer's epsilon (SGD: unused).
  float beta_1 = 0.9f, beta_2 = 0.999f, epsilon = 1e-8f;
  /// In [0, 1]; 0 = none. Decoupled or L2 per decoupled_weight_decay.
  float weight_decay = 0.0f;
  /// True: p <- p (1 - lr wd) before the update (Keras 3, PyTorch's AdamW).
  /// False: g <- g + wd p before the update (L2; PyTorch's SGD, Adam,
  /// RMSprop and Adagrad).
  bool decoupled_weight_decay = true;
  /// SGD and RMSprop: the momentum factor in [0, 1]; 0 = none (no buffer).
  float momentum = 0.0f;
  /// SGD: Nesterov momentum (needs momentum > 0 and dampening 0, as PyTorch).
  bool nesterov = false;
  /// SGD: PyTorch's dampening in [0, 1]: the buffer takes (1 - dampening) of
  /// each gradient after the first.
  float dampening = 0.0f;
  /// RMSprop: the decay of the mean square in [0, 1) (PyTorch's alpha).
  float rho = 0.9f;
  /// RMSprop: divide by an estimate of the variance (the mean square less
  /// the squared mean gradient) instead of the mean square.
  bool centered = false;
  /// RMSprop and Adagrad: sqrt(v + epsilon) (Keras) instead of sqrt(v) +
  /// epsilon (PyTorch).
  bool epsilon_inside_sqrt = false;
  /// Adagrad: the starting value (>= 0) of every sum of squared gradients.
  float initial_accumulator_value = 0.1f;
  /// Gradient clipping, at most one of the three (as Keras, which would
  /// apply only the first set; here a second is a ValueError); 0 = off.
  /// clipnorm: each gradient tensor scaled by c / max(||g||, c) (Keras'
  /// per-tensor clip_by_norm). global_clipnorm: every gradient scaled by
  /// min(1, c / (||all gradients|| + 1e-6)) (PyTorch's clip_grad_norm_ with
  /// max_norm c; Keras' global_clipnorm without the 1e-6). clipvalue: each
  /// element clamped to [-c, c] (PyTorch's clip_grad_value_). Norms are
  /// summed in double, so gradients as large as float32 holds clip right;
  /// a norm that is inf or NaN (an inf or NaN gradient) sets the gradients
  /// it scales to NaN, as TensorFlow's clip_by_global_norm documents, so the
  /// divergence reaches the weights and the loss (TerminateOnNaN), and is
  /// logged once per process.
  float clipnorm = 0.0f, global_clipnorm = 0.0f, clipvalue = 0.0f;

  /// AdamW (PyTorch and ggml defaults: lr 1e-3, betas 0.9/0.999, eps 1e-8)
  /// with decoupled weight decay.
  static OptimizerSpec adamw(float learning_rate = 1e-3f, float weight_decay = 0.0f);
  /// Adam is AdamW with no weight decay (for PyTorch's Adam with L2, set
  /// weight_decay and decoupled_weight_decay = false).
  static OptimizerSpec adam(float learning_rate = 1e-3f);
  /// AdamW and Adam whose learning rate follows `schedule` (Keras'
  /// `keras.optimizers.AdamW(learning_rate=schedule)`); throws as validate().
  static OptimizerSpec adamw(const LearningRateSchedule& schedule, float weight_decay = 0.0f);
  static OptimizerSpec adam(const LearningRateSchedule& schedule);
  /// Plain SGD: p <- p * (1 - lr * weight_decay) - lr * g. (Kept for its
  /// callers; its second argument is the weight decay, not Keras' momentum:
  /// use the SGDOptions form for momentum.)
  static OptimizerSpec sgd(float learning_rate = 1e-2f, float weight_decay = 0.0f);
  /// SGD with Keras' keyword arguments and defaults (PyTorch's SGD, with
  /// its dampening, at a constant learning rate; see the struct comment).
  static OptimizerSpec sgd(const SGDOptions& options);
  /// RMSprop with Keras' keyword arguments and defaults.
  static OptimizerSpec rmsprop(const RMSpropOptions& options = {});
  /// Adagrad with Keras' keyword arguments and defaults.
  static OptimizerSpec adagrad(const AdagradOptions& options = {});
  /// Throws ValueError, naming the field, the value and the accepted range,
  /// for: a non-positive or non-finite learning rate; betas outside [0, 1);
  /// epsilon <= 0; weight decay outside [0, 1]; momentum or dampening
  /// outside [0, 1]; rho outside [0, 1); a negative initial accumulator;
  /// nesterov without momentum or with dampening (as PyTorch); a negative
  /// or non-finite clip value, or more than one clip option; and a field
  /// set away from its default on an optimizer it does not apply to
  /// (momentum on Adam, centered on SGD, ...); and an invalid
  /// learning_rate_schedule (see validate_schedule).
  void validate() const;
};

/// "AdamW", "SGD", "RMSprop" or "Adagrad".
const char* optimizer_name(OptimizerSpec::Kind kind);

/// Metrics by their Keras names: each a per-row quantity averaged over the
/// rows of an epoch (rmse: the square root of the epoch's mse).
enum class MetricKind {
  BinaryAccuracy,             // "binary_accuracy": share of elements on the right side of 0.5
  CategoricalAccuracy,        // "categorical_accuracy": argmax of the output == argmax of one-hot y
  SparseCategoricalAccuracy,  // "sparse_categorical_accuracy": argmax of the output == the class id
  TopKCategoricalAccuracy,    // "top_k_categorical_accuracy": k = 5, one-hot y
  SparseTopKCategoricalAccuracy,  // "sparse_top_k_categorical_accuracy": k = 5, class ids
  MeanAbsoluteError,          // "mae"
  MeanSquaredError,           // "mse"
  RootMeanSquaredError        // "rmse"
};
/// The metric `name` means for an output trained with `loss`: "accuracy" (or
/// "acc") resolves from the loss as Keras does (sparse -> sparse categorical,
/// categorical -> categorical, binary -> binary accuracy). Throws ValueError
/// for an unknown name, for "accuracy" after a loss it cannot resolve from
/// (mse, mae, huber, custom), and for a metric whose targets the loss's
/// label form cannot give (class ids against one-hot metrics and back).
MetricKind metric_from_name(const std::string& name, LossKind loss);

/// One input of a model: its name, shape without the batch, dtype (float32,
/// or int32 for token ids), and an optional check of values the graph cannot
/// check (token ids against a vocabulary).
struct InputSpec {
  std::string name;
  Shape shape;
  DType dtype = DType::Float32;
  /// Given x as {rows, shape...} in float32 or int32; throws the DESIGN.md
  /// error naming the bad value.
  std::function<void(const Tensor& x)> validate;

  /// x as the graph takes it: {rows, shape...} of `dtype`. x must be {rows,
  /// shape...} or {rows, product(shape)} (rows exactly `rows` when rows >= 0;
  /// ShapeError naming both shapes otherwise), finite (ValueError), and pass
  /// validate. For an int32 input, float32 ids holding whole numbers are
  /// converted into `*staging` when it has the right shape (no allocation),
  /// else into a new tensor that is also stored there; int32 x is returned as
  /// a view. Throws TypeError for other dtypes. `what` names x in messages.
  Tensor check(const Tensor& x, int64_t rows, const std::string& what, Tensor* staging = nullptr) const;
};

/// How a model's forward pass is built into a graph (DESIGN.md, "One model
/// contract"): input specs, named outputs, and `forward(b, inputs, training)`
/// returning one value per output, {batch, output_shape...}, for inputs
/// {batch, input_shape...} in the order of `inputs`. Outputs are the model's
/// full outputs (probabilities after a softmax); a loss head folds a final
/// softmax into cross-entropy by looking at the op that produced the output.
struct ModelFunction {
  std::vector<InputSpec> inputs;
  std::vector<std::string> output_names;
  std::function<std::vector<Value>(Builder& b, std::span<const Value> inputs, bool training)> forward;
};

/// Loss weights: none, one per sample ({batch} or {batch, 1}), or one per
/// output element ({batch, outputs}; the seeds' loss_mask, MSE only).
enum class LossWeights { None, PerSample, PerOutput };

/// Persistent optimizer state shared by every context of one model: the
/// hyper-parameters and step count, each parameter's moments and gradient
/// accumulator, and the position inside the accumulation period. Kept apart
/// from the context so that contexts for other batch sizes continue the same
/// optimizer (as a Keras optimizer lives across fit calls).
struct OptimizerState {
  Tensor hyper;  // {kHyperSize} float32, see HyperSlot
  /// {1} int64: optimizer updates applied so far (Keras' `iterations`, the t
  /// of Adam's bias corrections). A persistent tensor the update graph
  /// advances; writable, to resume a run.
  Tensor step;
  /// A parameter's optimizer state, each {parameter shape} float32, made
  /// when a graph first uses it (undefined when its optimizer has none):
  struct Slots {
    Tensor m;         // AdamW: first moment; RMSprop centered: mean gradient
    Tensor v;         // AdamW: second moment; RMSprop: mean square; Adagrad: sum of squares
    Tensor momentum;  // SGD and RMSprop with momentum: the momentum buffer
    Tensor acc;       // gradient accumulator: accumulation period > 1, or clipping
  };
  std::unordered_map<const void*, Slots> slots;  // by parameter memory
  /// The model's flat gradient buffer (DESIGN.md: "hooks see one flat
  /// gradient buffer cut into buckets"): {n} float32 on the model's device,
  /// every trainable weight's gradient one after another in the order of the
  /// training graph's trainable_parameters(), n the sum of their element
  /// counts. Made, zeroed, by the model's first training graph; every later
  /// training graph must have the same trainable weights (StateError
  /// otherwise). With accumulation or clipping it is the gradient
  /// accumulator (each Slots::acc a view of it); without, the hook stage
  /// copies a step's gradients into it before the hooks and back after.
  Tensor gradients;
  /// {n + 1} float32: `gradients` (a view of its first n elements) followed
  /// by one element the data-parallel reduction sends with the last bucket
  /// (the rows the rank's gradients stand for), so the row count costs no
  /// message of its own.
  Tensor gradients_with_rows;
  /// Data-parallel training (issue 14): while set, every update first
  /// reduces the flat gradient buffer over the communicator's ranks, before
  /// clipping and the hooks (DESIGN.md's hook-stage order), bucket by bucket
  /// (one reduce_broadcast per bucket): the gradient becomes the sum of the
  /// ranks' row-sums over the ranks' total rows, identical on every rank.
  /// Set by Model::fit with FitOptions::communicator (for the fit only) and
  /// by a Trainer with TrainerOptions::communicator; null: one process.
  std::shared_ptr<dist::Communicator> communicator;
  /// Where one trainable weight's gradient lies in `gradients`.
  struct GradientRange {
    const void* parameter = nullptr;  // the weight's memory (the key of `slots`)
    std::string name;                 // "<layer>/<weight>"
    Shape shape;                      // the weight's shape
    int64_t offset = 0;               // first element in `gradients`
  };
  /// The layout of `gradients`, in order; empty until it is made.
  std::vector<GradientRange> gradient_layout;
  /// True once some training graph accumulates into `gradients` (then it
  /// must be zero between updates, and the hook stage of a graph without
  /// accumulation clears it after use).
  bool gradients_accumulate = false;
  int64_t micro_step = 0;                        // physical steps since the last update
  /// {1} int64: the model's dropout counter, a persistent tensor every
  /// training graph of the model binds (Graph::set_rng_counter) and advances
  /// once per run, so that no two steps (of any batch size) share a mask.
  /// Seeded once per model from the global generator.
  Tensor rng_counter;
  /// The spec's learning-rate schedule, if any, and what the update graph
  /// reads of it (LrScheduleKind in ops/op.h): `schedule_steps` {n} int64 and
  /// `schedule_values` {m} float32, persistent; both undefined without one.
  std::optional<LearningRateSchedule> learning_rate_schedule;
  Tensor schedule_steps, schedule_values;
  /// Fresh state for `spec` (step 0, no moments yet) on `device`, where the
  /// update graph that reads it runs (the model's backend's device); throws
  /// as spec.validate(), and StateError as allocate_storage for a device
  /// without a backend.
  explicit OptimizerState(const OptimizerSpec& spec, Device device = Device::CPU);
  /// The value of `step`, read to the host by a copy (exact at any count).
  int64_t iterations() const;
  /// The learning rate of the next update (Keras' optimizer.learning_rate):
  /// the schedule at iterations() (in double, as learning_rate_at), or the
  /// constant rate; read from the persistent tensors by copies. Allocates
  /// nothing (after a first call on the thread), except for a piecewise
  /// schedule of more than 15 boundaries, whose numbers are read into vectors.
  double learning_rate() const;
  /// Sets the constant learning rate from the next update on, a copy of the
  /// host value into hyper[kLr]. Throws ValueError unless lr is positive and
  /// finite, and TypeError when the optimizer has a learning-rate schedule
  /// (as Keras: a schedule's rate is not settable).
  void set_learning_rate(float lr);
};

/// A trainable gradient as the hook stage sees it.
struct NamedGradient {
  std::string name;
  Tensor grad;  // view of the gradient (averaged over the logical batch) in the model's flat buffer, writable
};
/// Called between backward and update with every trainable gradient (gradient
/// clipping, all-reduce, inspection). May modify the gradients in place. A
/// hook that throws cancels that update: the period's gradients are dropped
/// and the exception propagates. The views are valid after the first step();
/// they are GradientBuffer::tensors(), views of the model's flat gradient
/// buffer (see GradientBuffer for the bucketed form).
using GradientHook = std::function<void(std::span<NamedGradient>)>;

/// The hook stage's default bucket size: 25 MiB, PyTorch DDP's bucket_cap_mb.
inline constexpr size_t kDefaultGradientBucketBytes = size_t(25) << 20;

/// Throws ValueError unless `bytes` is a positive multiple of 4 (buckets hold
/// whole float32 elements), naming `where` (the option) and the value.
void check_gradient_bucket_bytes(size_t bytes, const char* where);

/// The model's trainable gradients as the hook stage sees them (DESIGN.md:
/// "hooks see one flat gradient buffer cut into buckets"): one flat float32
/// buffer holding every gradient contiguously (OptimizerState::gradients),
/// the per-weight views into it, and its cut into buckets of bucket_bytes()
/// (PyTorch DDP's buckets and bucket_cap_mb): bucket k is the elements
/// [k * bucket_bytes() / 4, min((k + 1) * bucket_bytes() / 4, n)) of flat(),
/// contiguous byte ranges that ignore tensor boundaries, so an all-reduce per
/// bucket makes ceil(bytes() / bucket_bytes()) collective calls. Every
/// tensor, bucket and flat() alias the same memory: writing through one
/// changes the others and the update. The gradients are averaged over the
/// logical batch (over every rank in data-parallel training) and already clipped. Valid during a hook call; an optimizer
/// context passes the same object to every hook.
class GradientBuffer {
 public:
  /// {n} float32, n the total element count of the trainable weights, on the
  /// model's device; undefined before the context's first step.
  const Tensor& flat() const { return flat_; }
  /// The weights that get a gradient from the loss, in the model's order,
  /// each a writable view of its range of flat() with the weight's shape.
  std::span<NamedGradient> tensors() { return tensors_; }
  std::span<const NamedGradient> tensors() const { return tensors_; }
  /// Bytes of flat() (4 per element); 0 before the first step.
  size_t bytes() const { return flat_.defined() ? flat_.nbytes() : 0; }
  /// The bucket size in bytes, a positive multiple of 4
  /// (OptimizerContextOptions::gradient_bucket_bytes).
  size_t bucket_bytes() const { return bucket_bytes_; }
  /// ceil(bytes() / bucket_bytes()); 0 for an empty buffer.
  size_t n_buckets() const { return (bytes() + bucket_bytes_ - 1) / bucket_bytes_; }
  /// Bucket k's element range [begin, end) in flat(); IndexError unless
  /// k < n_buckets().
  std::pair<int64_t, int64_t> bucket_range(size_t k) const;
  /// Bucket k: a writable {end - begin} view of flat() (see bucket_range).
  /// Throws IndexError unless k < n_buckets(). Allocates nothing.
  Tensor bucket(size_t k) const;

 private:
  friend class OptimizerContext;
  Tensor flat_;
  std::vector<NamedGradient> tensors_;
  size_t bucket_bytes_ = kDefaultGradientBucketBytes;
};

/// Called between backward and update with the model's gradient buffer, in
/// the same stage and under the same rules as a GradientHook (it may change
/// the gradients in place; a throw cancels the update): the place for an
/// all-reduce per bucket.
using GradientBucketHook = std::function<void(GradientBuffer&)>;

/// A hook of the hook stage, of either kind: hooks of both kinds run in the
/// one order they were added in.
using AnyGradientHook = std::variant<GradientHook, GradientBucketHook>;

struct OptimizerPlan;
/// Planned graphs shared by the contexts of one model that differ only in
/// their batch size: a graph planned for a capacity runs every batch up to
/// it, so contexts for 50 batch sizes need a handful of plans, not 50.
class OptimizerPlans {
 public:
  /// Bytes of every arena held, and the number of plans.
  size_t arena_bytes() const;
  size_t count() const;

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
  int64_t batch_size = 32;
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
  LossWeights weights = LossWeights::None;
  OptimizerSpec optimizer;
  /// Rows the graphs are planned for (0 = batch_size), at least batch_size.
  /// A graph that scales with its batch is planned once for the capacity and
  /// run at batch_size rows; one that does not is planned for batch_size.
  int64_t capacity = 0;
  /// Plans shared with other contexts of the same model, loss heads and
  /// accumulation period (null: this context's own).
  std::shared_ptr<OptimizerPlans> plans;
  /// The model's gradient hooks (DESIGN.md: hooks per model, not per
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
  float loss = 0.0f;       // total loss of the batch (unscaled by accumulation)
  int64_t correct = -1;    // first output's first accuracy metric: rows counted right; -1 without one
  int64_t rows = 0;
  bool updated = false;    // whether this step applied an optimizer update
  std::span<const float> output_losses;  // per output, before loss_weights
  /// Every output's metrics in order (output 0's first), each summed over
  /// the batch's rows: divide by the rows for the batch's value (rmse: the
  /// sum of squared errors per row; take the root after dividing).
  std::span<const double> metric_sums;
};

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
  StepResult evaluate(const Tensor& x, const Tensor& y, const Tensor& sample_weight = {},
                      const EvalOptions& options = {});

  /// Checks one output's labels and weights for `rows` rows (any row count
  /// when rows < 0) with the same rules and errors as step(), without running
  /// anything.
  void check_targets(size_t output, const Tensor& y, const Tensor& sample_weight, int64_t rows) const;
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
  size_t gradient_bucket_bytes() const { return options_.gradient_bucket_bytes; }
  /// Sets the learning rate from the next update on. Throws ValueError
  /// unless lr is positive and finite, and TypeError when the optimizer has
  /// a learning_rate_schedule (as Keras).
  void set_learning_rate(float lr);
  /// The learning rate of the next update: the spec's or set_learning_rate's,
  /// or with a schedule its value at the current iterations (Keras'
  /// optimizer.learning_rate).
  float learning_rate() const;
  int64_t batch_size() const { return options_.batch_size; }
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
  const OptimizerContextOptions& options() const { return options_; }
  const std::shared_ptr<OptimizerState>& state() const { return state_; }
  /// Number of model outputs.
  size_t n_outputs() const;
  /// The metrics of output i, resolved, with the names they were given.
  const std::vector<std::pair<std::string, MetricKind>>& metrics(size_t output) const;

 private:
  friend struct io::detail::Access;  // checkpoints restore n_steps
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
  Tensor row_sum_seed_;        // {} float32: batch_size, the seed in data-parallel training
};

/// Checks a batch's shape against a model's input: x must be {rows,
/// input_shape...} or {rows, product(input_shape)} (the flattened form), with
/// exactly `rows` rows when rows >= 0. Returns x viewed as {rows,
/// input_shape...}; throws ShapeError naming both shapes otherwise.
Tensor check_input_shape(const Tensor& x, const Shape& input_shape, int64_t rows, const char* what = "x");
/// check_input_shape, then float32 (TypeError) and finite (ValueError naming
/// the row and column of the first NaN or infinity).
Tensor check_features(const Tensor& x, const Shape& input_shape, int64_t rows, const char* what = "x");

}  // namespace tensorgrad
