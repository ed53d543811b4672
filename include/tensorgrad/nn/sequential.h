#pragma once
// keras.Sequential in C++: a stack of layers, compile, fit, evaluate, predict.
#include <concepts>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tensorgrad/backend/executable.h"
#include "tensorgrad/nn/history.h"
#include "tensorgrad/nn/layers.h"
#include "tensorgrad/opt/optimizer.h"

namespace tensorgrad::nn {

/// Options of Sequential::fit, Keras' arguments by Keras' names.
struct FitOptions {
  int epochs = 1;
  int64_t batch_size = 32;
  /// Rows per optimizer update (gradient accumulation); 0 = batch_size; else
  /// an exact multiple of batch_size (ValueError otherwise). With
  /// accumulation, a last partial batch of an epoch is left out, as ggml_opt_fit does.
  int64_t nbatch_logical = 0;
  /// Fraction in [0, 1) of the rows held out for validation: the last rows,
  /// taken before shuffling (as Keras).
  double validation_split = 0.0;
  /// Explicit validation data; takes precedence over validation_split.
  std::optional<std::pair<Tensor, Tensor>> validation_data;
  /// One weight per row of validation_data ({rows} or {rows, 1}; Keras'
  /// third element of validation_data); undefined = all ones. With
  /// validation_split, the validation rows keep their sample_weight instead
  /// (split with the rows, as Keras). ValueError without validation_data.
  Tensor validation_sample_weight;
  bool shuffle = true;
  /// One weight per row, {rows} or {rows, 1}; undefined = all ones. The loss
  /// is sum(w * loss_row) / rows (Keras' sum over batch size).
  Tensor sample_weight;
  /// 0 silent; 1 a live progress bar on a terminal, one line per epoch
  /// otherwise; 2 one line per epoch.
  int verbose = 1;
  /// Optional learning-rate schedule, as keras.callbacks.LearningRateScheduler:
  /// called before each epoch with the 0-based epoch and the current rate,
  /// returns the rate for that epoch (positive and finite, else ValueError).
  std::function<float(int epoch, float lr)> learning_rate_schedule;
};

/// A linear stack of layers (keras.Sequential). Layers are built as they are
/// added, so each layer's weights exist from then on (drawn from the global seed).
/// One thread at a time (DESIGN.md): calls on one model from two threads
/// at once, predict included, share its scratch memory and must be serialised.
class Sequential {
 public:
  /// input_shape excludes the batch: {784} for flat images, {28, 28, 1} for
  /// images. Throws ShapeError for an empty or non-positive shape.
  explicit Sequential(const Shape& input_shape);
  ~Sequential();
  /// Moving hands everything on; the moved-from model is released (every
  /// method then throws StateError).
  Sequential(Sequential&&) noexcept;
  Sequential& operator=(Sequential&&) noexcept;

  /// Appends a layer and builds it for the current output shape (a layer
  /// already built, shared with another model, keeps its weights). Throws
  /// ShapeError when it does not fit. After compile(), the model must be
  /// compiled again (as Keras); the optimizer state is then fresh.
  Sequential& add(std::shared_ptr<Layer> layer);
  /// Adds a copy of a layer given by value: model.add(Dense(10)).
  template <class L>
    requires std::derived_from<L, Layer>
  Sequential& add(L layer) {
    return add(std::shared_ptr<Layer>(std::make_shared<L>(std::move(layer))));
  }
  /// Adds a layer held by the caller (to share it, or to set trainable later).
  template <class L>
    requires std::derived_from<L, Layer>
  Sequential& add(std::shared_ptr<L> layer) {
    return add(std::shared_ptr<Layer>(std::move(layer)));
  }

  /// Sets the loss ("mse", "categorical_crossentropy",
  /// "sparse_categorical_crossentropy"), the optimizer and the metrics
  /// (only "accuracy", for the cross-entropy losses). A final softmax is folded
  /// into a cross-entropy loss for training; predict still returns
  /// probabilities. A final linear output is taken as logits (Keras'
  /// from_logits = True) and predict returns them. Throws ValueError for
  /// unknown names, and for a cross-entropy loss after another final
  /// activation (sigmoid, relu, ...).
  void compile(const OptimizerSpec& optimizer, const std::string& loss, const std::vector<std::string>& metrics = {});
  bool compiled() const { return compiled_; }
  /// What compile() was given (meaningful once compiled).
  const OptimizerSpec& optimizer() const { return optimizer_; }
  LossKind loss() const { return loss_; }
  std::vector<std::string> metrics() const { return accuracy_metric_ ? std::vector<std::string>{"accuracy"} : std::vector<std::string>{}; }
  /// Changes whenever the layer stack or its weights' memory changes (add,
  /// clone, free): lets holders of cached weight pointers notice.
  uint64_t structure_id() const { return structure_id_; }

  /// Trains on x {rows, input_shape...} (or {rows, features}) and y (as the
  /// loss takes it; see OptimizerContext::step) for `epochs` epochs. Returns the
  /// History. Throws StateError before compile, ShapeError when x and y
  /// differ in rows or x has the wrong feature count, ValueError for
  /// validation_split outside [0, 1), a sample_weight matrix (use the Trainer's
  /// loss_mask), NaN or infinity, and the label errors of OptimizerContext::step.
  History fit(const Tensor& x, const Tensor& y, const FitOptions& options = {});

  /// Loss (and accuracy, if compiled with it) over (x, y), in batches of
  /// batch_size, with optional per-row sample_weight ({rows} or {rows, 1}) as
  /// Keras' evaluate. Keys as History: "loss", "accuracy". Throws StateError
  /// before compile, ShapeError naming both row counts when x and y (or the
  /// weights) differ in rows, and the input and label errors of fit.
  std::map<std::string, double> evaluate(const Tensor& x, const Tensor& y, int64_t batch_size = 32,
                                         const Tensor& sample_weight = {});

  /// Outputs for any number of rows: {rows, outputs}, probabilities after a
  /// softmax. Runs in batches of batch_size. Throws as check_features.
  Tensor predict(const Tensor& x, int64_t batch_size = 32);
  /// The same into caller memory `out` {rows, outputs}, all rows in one
  /// batch; allocates nothing once this row count has been seen (plans for
  /// the 8 most recent row counts are kept). Throws TypeError for a
  /// non-float32 `out`, ShapeError for the wrong shape.
  void predict(const Tensor& x, Tensor& out);

  /// The optimizer context fit uses for batches of `batch_size` (made on first
  /// use; shares the optimizer state of every other batch size). This is the
  /// public step fit is written on. After the next compile(), add() or
  /// freeze_bn_stats() the context is retired: its graphs are released and
  /// its step() throws StateError naming the call that retired it (the
  /// object itself stays valid until the model is destroyed). Throws
  /// StateError before compile.
  OptimizerContext& optimizer_context(int64_t batch_size, int64_t nbatch_logical = 0,
                                      LossWeights weights = LossWeights::None);

  /// Fixes every BatchNormalization layer's moving statistics: later
  /// training steps still normalize with batch statistics but no longer
  /// update them (as the seeds' freeze). Applies to graphs built from now on.
  void freeze_bn_stats(bool freeze = true);
  /// Sets every BatchNormalization layer's moving mean and variance to the
  /// exact statistics of the first min(rows, 1024) rows of x, computed in one
  /// batch (the recalibration the seeds run after fit). Throws as predict.
  void calibrate_bn(const Tensor& x);

  /// An independent copy: the same layers (names, configuration) with their
  /// own copies of the weights, compiled like this one when this one is, with
  /// fresh optimizer state. Throws StateError after free().
  Sequential clone() const;
  /// Releases the model's weights and graphs early (as the seeds' free()).
  /// Idempotent; afterwards every method throws StateError. The destructor
  /// releases everything anyway.
  void free();
  bool released() const { return released_; }

  /// Every weight, "<layer>/<weight>", in layer order.
  std::vector<Weight> weights() const;
  const std::vector<std::shared_ptr<Layer>>& layers() const { return layers_; }
  const Shape& input_shape() const { return input_shape_; }
  const Shape& output_shape() const { return output_shape_; }
  /// The forward pass as a function the optimizer context builds graphs from.
  ModelFunction model_function() const;
  /// A Keras-like table of layers, output shapes and parameter counts.
  std::string summary() const;

 private:
  struct PredictPlan;
  PredictPlan& predict_plan(int64_t rows);
  void rebuild_model_function();
  std::string not_compiled_message(const char* call) const;
  std::map<std::string, double> evaluate_rows(const Tensor& x, const Tensor& y, const Tensor& w, int64_t batch_size);

  Shape input_shape_, output_shape_;
  ModelFunction model_;  // rebuilt by add(); copied into every graph built
  std::vector<std::shared_ptr<Layer>> layers_;
  std::vector<Shape> layer_shapes_;  // output shape of each layer, without the batch
  bool compiled_ = false;
  bool changed_after_compile_ = false;
  bool released_ = false;
  uint64_t structure_id_ = 0;
  void new_structure_id();
  void check_live(const char* call) const;
  OptimizerSpec optimizer_;
  LossKind loss_ = LossKind::MeanSquaredError;
  bool accuracy_metric_ = false;
  std::shared_ptr<OptimizerState> opt_state_;
  std::map<std::tuple<int64_t, int64_t, int>, std::unique_ptr<OptimizerContext>> contexts_;
  std::vector<std::unique_ptr<OptimizerContext>> retired_contexts_;  // handed out earlier, now refusing to run
  void retire_contexts(const char* why);
  std::map<int64_t, std::unique_ptr<PredictPlan>> predict_plans_;
};

}  // namespace tensorgrad::nn
