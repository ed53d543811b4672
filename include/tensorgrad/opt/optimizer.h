#pragma once
// The optimizer context (DESIGN.md, opt layer), as ggml_opt is for the seeds:
// a model's forward pass, a loss head, reverse-mode gradients, gradient
// accumulation, a hook stage and the optimizer update, built and planned once
// and then stepped. `fit` and the Trainer are both written on `step`.
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tensorgrad/backend/executable.h"
#include "tensorgrad/core/tensor.h"
#include "tensorgrad/ops/builder.h"

namespace tensorgrad {

/// Losses by their Keras names.
enum class LossKind { MeanSquaredError, CategoricalCrossentropy, SparseCategoricalCrossentropy };
/// "mse" / "mean_squared_error", "categorical_crossentropy",
/// "sparse_categorical_crossentropy". Throws ValueError for any other name,
/// listing the accepted ones.
LossKind loss_from_name(const std::string& name);
const char* loss_name(LossKind loss);

/// Optimizer settings. AdamW defaults as PyTorch and ggml (lr 1e-3, betas
/// 0.9/0.999, eps 1e-8) with decoupled weight decay 0; SGD is plain (no momentum)
/// with the same decoupled decay.
struct OptimizerSpec {
  enum class Kind { AdamW, SGD };
  Kind kind = Kind::AdamW;
  float learning_rate = 1e-3f;
  float beta_1 = 0.9f, beta_2 = 0.999f, epsilon = 1e-8f;
  float weight_decay = 0.0f;

  static OptimizerSpec adamw(float learning_rate = 1e-3f, float weight_decay = 0.0f);
  /// Adam is AdamW with no weight decay.
  static OptimizerSpec adam(float learning_rate = 1e-3f);
  /// Plain SGD: p <- p * (1 - lr * weight_decay) - lr * g.
  static OptimizerSpec sgd(float learning_rate = 1e-2f, float weight_decay = 0.0f);
  /// Throws ValueError for a non-positive or non-finite learning rate, betas
  /// outside [0, 1), epsilon <= 0, or weight decay outside [0, 1].
  void validate() const;
};

/// How a model's forward pass is built into a graph. `forward(b, x, training,
/// logits)` returns the output for input `x` {batch, input_shape...} of
/// `input_dtype`; with `logits` true a final softmax is left out (it is
/// folded into the loss).
struct ModelFunction {
  Shape input_shape;  // without the batch dimension
  /// float32, or int32 for token ids (a model starting with Embedding).
  DType input_dtype = DType::Float32;
  std::function<Value(Builder& b, Value x, bool training, bool logits)> forward;
  /// Optional check of input values the graph cannot check (token ids), given
  /// x as {rows, input_shape...} in float32 or int32; throws the DESIGN.md
  /// error naming the bad value.
  std::function<void(const Tensor& x)> validate_input;

  /// x as the graph takes it: {rows, input_shape...} of input_dtype. x must
  /// be {rows, input_shape...} or {rows, product(input_shape)} (rows exactly
  /// `rows` when rows >= 0; ShapeError naming both shapes otherwise), finite
  /// (ValueError), and pass validate_input. For an int32 input, float32 ids
  /// holding whole numbers are converted into `*staging` when it has the
  /// right shape (no allocation), else into a new tensor that is also stored
  /// there; int32 x is returned as a view. Throws TypeError for other dtypes.
  Tensor check_input(const Tensor& x, int64_t rows, const char* what = "x", Tensor* staging = nullptr) const;
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
  struct Slots { Tensor m, v, acc; };
  std::unordered_map<const void*, Slots> slots;  // by parameter memory
  int64_t micro_step = 0;                        // physical steps since the last update
  /// Fresh state for `spec` (step 0, no moments yet); throws as spec.validate().
  explicit OptimizerState(const OptimizerSpec& spec);
  /// The value of `step`.
  int64_t iterations() const;
};

/// Options of an optimizer context.
struct OptimizerContextOptions {
  int64_t batch_size = 32;
  /// Rows per optimizer update; an exact multiple of batch_size (0 = batch_size).
  /// Gradients are averaged over the logical batch: the loss of each physical
  /// batch is scaled by batch_size / nbatch_logical, as ggml scales by 1/opt_period.
  int64_t nbatch_logical = 0;
  LossKind loss = LossKind::MeanSquaredError;
  LossWeights weights = LossWeights::None;
  OptimizerSpec optimizer;
};

/// What one step or evaluation measured.
struct StepResult {
  float loss = 0.0f;       // mean loss of the batch (unscaled by accumulation)
  int64_t correct = -1;    // rows whose argmax matches the label; -1 for MSE
  int64_t rows = 0;
  bool updated = false;    // whether this step applied an optimizer update
};

/// A trainable gradient as the hook stage sees it.
struct NamedGradient {
  std::string name;
  Tensor grad;  // view of the gradient (averaged over the logical batch), writable
};
/// Called between backward and update with every trainable gradient (gradient
/// clipping, all-reduce, inspection). May modify the gradients in place. A
/// hook that throws cancels that update: the period's gradients are dropped
/// and the exception propagates. The views are valid after the first step().
using GradientHook = std::function<void(std::span<NamedGradient>)>;

class OptimizerContext {
 public:
  /// A context for exactly `options.batch_size` rows; the training graph is
  /// built and planned on the first step(), the evaluation graph on the first
  /// evaluate(). Throws ValueError when nbatch_logical is not a positive
  /// multiple of batch_size, the optimizer settings are invalid or the model
  /// function is empty, and ShapeError/TypeError when the model cannot be
  /// built for the loss.
  OptimizerContext(const ModelFunction& model, const OptimizerContextOptions& options,
                   std::shared_ptr<OptimizerState> state = nullptr);
  ~OptimizerContext();

  /// One forward and backward pass on (x, y); the optimizer updates the
  /// weights when the accumulation period completes. x: {batch_size,
  /// input_shape...} (or {batch_size, features} flattened); y: {batch_size,
  /// outputs} float32 for MSE and categorical cross-entropy, {batch_size} or
  /// {batch_size, 1} class ids (int32, or float32 holding whole numbers) for
  /// sparse cross-entropy; sample_weight per LossWeights (undefined = ones).
  /// Throws ShapeError ("exactly N" rows, feature count), TypeError (label
  /// form), IndexError (class id out of range), ValueError (NaN or infinity,
  /// fractional id). Allocates nothing after the first call.
  StepResult step(const Tensor& x, const Tensor& y, const Tensor& sample_weight = {});
  /// The loss and accuracy of (x, y) without a backward pass or update.
  StepResult evaluate(const Tensor& x, const Tensor& y, const Tensor& sample_weight = {});

  /// Checks labels and weights for `rows` rows (any row count when rows < 0)
  /// with the same rules and errors as step(), without running anything.
  void check_targets(const Tensor& y, const Tensor& sample_weight, int64_t rows) const;

  /// Adds a hook run between backward and update (see GradientHook).
  void add_gradient_hook(GradientHook hook);
  /// Throws ValueError unless lr is positive and finite.
  void set_learning_rate(float lr);
  /// Starts the dropout streams of the training graph at `seed` (they
  /// advance every step). Takes effect when the training graph is built (the
  /// first step) or at once if it exists.
  void set_rng_seed(uint64_t seed);
  /// The current learning rate (as set by the spec, set_learning_rate or a schedule).
  float learning_rate() const;
  int64_t batch_size() const { return options_.batch_size; }
  int64_t accumulation_period() const { return period_; }
  /// Calls of step().
  int64_t n_steps() const { return n_steps_; }
  /// Releases the graphs; every later step() or evaluate() throws
  /// StateError saying `why` (the model this context belongs to changed).
  void retire(const std::string& why);
  const OptimizerContextOptions& options() const { return options_; }
  const std::shared_ptr<OptimizerState>& state() const { return state_; }

 private:
  struct Head;
  StepResult run(Head& head, const Tensor& x, const Tensor& y, const Tensor& w, bool train);
  std::unique_ptr<Head> build(bool train);
  void stage(Head& head, const Tensor& x, const Tensor& y, const Tensor& w);

  ModelFunction model_;
  OptimizerContextOptions options_;
  std::shared_ptr<OptimizerState> state_;
  int64_t period_ = 1;
  int64_t outputs_ = 0;
  int64_t n_steps_ = 0;
  std::unique_ptr<Head> train_, eval_;
  uint64_t rng_seed_ = 0;
  std::string retired_;  // non-empty once retired: why
  std::vector<GradientHook> hooks_;
  std::vector<NamedGradient> grads_;
  Tensor labels_i32_, ones_;  // staging: class ids converted to int32; default weights
  Tensor x_staging_;          // float32 token ids converted to int32 (made on first use)
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
