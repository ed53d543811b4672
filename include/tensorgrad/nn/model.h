#pragma once
// keras.Model in C++: the one model class the library is written on. A
// functional model is the graph of layer calls between Input()s and outputs;
// Sequential (nn/sequential.h) builds one a layer at a time. compile, fit,
// evaluate, predict, summary, clone and the Trainer take any Model.
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "tensorgrad/backend/executable.h"
#include "tensorgrad/nn/history.h"
#include "tensorgrad/nn/layers.h"
#include "tensorgrad/nn/training_state.h"
#include "tensorgrad/opt/optimizer.h"

namespace tensorgrad::nn {

/// Options of Model::fit, Keras' arguments by Keras' names; an aggregate, so
/// `fit(x, y, {.epochs = 5, .batch_size = 64, .verbose = 0})` names what it
/// sets. Designated initializers must keep the order of the fields: epochs,
/// initial_epoch, batch_size, nbatch_logical, validation_split,
/// validation_data, validation_x, validation_y, validation_sample_weight,
/// validation_batch_size, shuffle, sample_weight, class_weight, verbose,
/// callbacks, communicator.
struct FitOptions {
  /// Epochs initial_epoch .. epochs - 1 run, as Keras (to continue an
  /// earlier fit: History and callbacks see those numbers).
  ///@{
  int epochs = 1;
  int initial_epoch = 0;
  ///@}
  /// Rows per training step (the last batch of an epoch may have fewer).
  int64_t batch_size = 32;
  /// Rows per optimizer update (gradient accumulation); 0 = batch_size; else
  /// an exact multiple of batch_size (ValueError otherwise). With
  /// accumulation, a last partial batch of an epoch is left out, as ggml_opt_fit does.
  int64_t nbatch_logical = 0;
  /// Fraction in [0, 1) of the rows held out for validation: the last rows,
  /// taken before shuffling (as Keras).
  double validation_split = 0.0;
  /// Explicit validation data (one input, one output); takes precedence over
  /// validation_split.
  std::optional<std::pair<Tensor, Tensor>> validation_data{};
  /// Explicit validation data for any model: one tensor per input and per
  /// output, in the model's order (Keras' validation_data = (x_list,
  /// y_list)). Takes precedence over validation_split; giving both this and
  /// validation_data is a ValueError.
  ///@{
  std::vector<Tensor> validation_x{}, validation_y{};
  ///@}
  /// One weight per row of validation_data ({rows} or {rows, 1}; Keras'
  /// third element of validation_data); undefined = all ones. With
  /// validation_split, the validation rows keep their sample_weight instead
  /// (split with the rows, as Keras). ValueError without validation_data
  /// (or validation_x).
  Tensor validation_sample_weight{};
  /// Rows per validation batch (Keras' validation_batch_size), the last one
  /// short when they do not divide; none: batch_size. Evaluation is
  /// planned for it on its own, so it may exceed batch_size (validation
  /// needs no gradients: larger batches fit in the same memory). ValueError
  /// below 1, or without validation data (validation_data, validation_x or
  /// validation_split). Data-parallel, it is the global validation batch.
  std::optional<int64_t> validation_batch_size{};
  /// Shuffle the training rows before every epoch, from the model's random
  /// stream (random_stream()).
  bool shuffle = true;
  /// One weight per row, {rows} or {rows, 1}, for every output; undefined =
  /// all ones. Each output's loss is sum(w * loss_row) / rows (Keras' sum
  /// over batch size).
  Tensor sample_weight{};
  /// A weight per class id for the training rows (Keras' class_weight):
  /// each row's loss is multiplied by its class's weight (class ids, or the
  /// argmax of one-hot rows; 1 for classes not in the map) and by its
  /// sample_weight. Validation rows are not class-weighted, as Keras.
  /// ValueError for a model of several outputs or a negative weight.
  std::map<int, float> class_weight{};
  /// 0 silent; 1 a live progress bar on a terminal, one line per epoch
  /// otherwise; 2 one line per epoch (fit adds a ProgbarLogger unless one is
  /// in `callbacks`).
  int verbose = 1;
  /// Called in this order, then the History fit returns, then the progress
  /// printer (Keras' order: callbacks see each other's additions to the
  /// logs). nn/callbacks.h has Keras' built-in ones: EarlyStopping,
  /// ReduceLROnPlateau, LearningRateScheduler, TerminateOnNaN, CSVLogger,
  /// LambdaCallback. A null pointer is a ValueError.
  std::vector<std::shared_ptr<Callback>> callbacks{};
  /// Data-parallel training over MPI (PyTorch's
  /// DistributedDataParallel, Horovod): the same program runs on every rank
  /// with the same data and options, and batch_size and nbatch_logical are
  /// the global batch's. Every epoch's shuffled order is the same on every
  /// rank (the model's random stream, broadcast from rank 0) and rank r of R
  /// trains on rows [g r / R, g (r + 1) / R) of each global batch of g rows
  /// (validation likewise); the gradients are reduced over the ranks before
  /// clipping, once per logical batch, as the sum of the ranks' row-sums
  /// over the global rows, so training equals one process's on the global
  /// batches (up to float rounding). Weights and optimizer state start as
  /// rank 0's. Batch-norm statistics stay per rank (DistributedDataParallel
  /// without SyncBatchNorm). History, the progress line and callbacks see
  /// losses and metrics over all ranks; only rank 0 prints and writes
  /// files (Callback::rank()). Ranks whose models or fits (epochs, batches
  /// per epoch, validation) differ are refused on every rank with a
  /// ValueError; any later exception on a rank ends the job with
  /// MPI_Abort(1) (nn/data_parallel.h). batch_size must be at least the
  /// number of ranks (ValueError). Null: one process.
  std::shared_ptr<dist::Communicator> communicator{};
};

/// One batch from a generator (Keras' (x, y, sample_weight) tuple): one
/// tensor per model input and one per output, in the model's order, with
/// the same rows, and optional per-row weights ({rows} or {rows, 1}).
struct Batch {
  /// The inputs (x) and the targets (y), one tensor each per model input
  /// and output.
  ///@{
  std::vector<Tensor> x, y;
  ///@}
  Tensor sample_weight;  ///< {rows} or {rows, 1}; undefined = all ones
};

/// A batch source for Model::fit (Keras' fit with a generator): each call
/// returns the next batch, or std::nullopt to end the epoch. A finite
/// generator must restart itself: after returning nullopt, its next call
/// gives the first batch of the next epoch. An infinite one never returns
/// nullopt and needs steps_per_epoch. It must not touch the model (it may run
/// on a producer thread while the model trains).
using Generator = std::function<std::optional<Batch>()>;

/// Options of Model::fit from a generator (Keras' names); an aggregate, as
/// FitOptions. Designated initializers must keep the order of the fields:
/// epochs, initial_epoch, steps_per_epoch, batch_size, nbatch_logical,
/// validation_generator, validation_steps, validation_batch_size, prefetch,
/// verbose, callbacks, communicator.
struct GeneratorFitOptions {
  /// Epochs initial_epoch .. epochs - 1 run, as Keras (History and callbacks
  /// see those numbers; the progress line counts from 1).
  ///@{
  int epochs = 1;
  int initial_epoch = 0;
  ///@}
  /// Batches per epoch; 0: until the generator returns nullopt. With a
  /// number, a generator that ends early makes a short epoch (a warning
  /// says "d of s").
  int64_t steps_per_epoch = 0;
  /// The most rows a batch may have (graphs are planned for it; smaller
  /// batches run in the same plans, a larger one is a ShapeError naming the
  /// batch).
  int64_t batch_size = 32;
  /// Rows per optimizer update (gradient accumulation), a multiple of
  /// batch_size; the generator does not see it. A batch of fewer rows is a
  /// short micro-batch: it counts as one of the period's nbatch_logical /
  /// batch_size batches and its loss is scaled by its rows over
  /// nbatch_logical (every row weighs the same in the update). A period an
  /// epoch leaves incomplete is applied at the epoch's end (a smaller step,
  /// its rows over nbatch_logical), so nothing carries into the next epoch or
  /// fit.
  int64_t nbatch_logical = 0;
  /// Validation after every epoch from a generator of the same contract, for
  /// validation_steps batches (0: until it returns nullopt); val_* keys are
  /// NaN for an epoch where it gives nothing.
  ///@{
  Generator validation_generator{};
  int64_t validation_steps = 0;
  ///@}
  /// The most rows a validation batch may have (Keras'
  /// validation_batch_size); none: batch_size. Evaluation is planned for it
  /// on its own, so it may exceed batch_size; a larger batch is a
  /// ShapeError naming the batch and this option. ValueError below 1, or
  /// without a validation_generator.
  std::optional<int64_t> validation_batch_size{};
  /// Batches the generator runs ahead on a producer thread; 0 calls it on
  /// the calling thread. Either way it is called exactly as often, never past
  /// an epoch's end.
  int prefetch = 2;
  /// As FitOptions.
  ///@{
  int verbose = 1;
  std::vector<std::shared_ptr<Callback>> callbacks{};
  ///@}
  /// Data-parallel training (see FitOptions::communicator): each rank calls
  /// its own generator (its own part of the data; batch_size and
  /// nbatch_logical are per rank here). An epoch ends when every rank's
  /// generator has ended; a rank whose generator ends first joins the
  /// others' updates without rows until then (PyTorch's Join). Null: off.
  std::shared_ptr<dist::Communicator> communicator{};
};

class FunctionalGraph;

/// Where a model's graphs run, in what precision and with which fused ops:
/// compile's last argument. A Device or a DTypePolicy converts to it.
struct CompileTarget {
  Device device = Device::CPU;                 ///< the device whose backend runs the graphs
  DTypePolicy policy = DTypePolicy::kFloat32;  ///< the precision (Keras' dtype policy)
  /// The fusion pass's rewrites for the model's graphs (training,
  /// evaluation, prediction), as far as the backend has the fused kernels;
  /// FusionOptions::none() runs them as written (the same values up to
  /// rounding; the CPU's fused kernels give the same bits). The compile
  /// overloads that take a backend object use the default.
  FusionOptions fusion;
  /// The CPU in float32 with every fusion.
  CompileTarget() = default;
  /// `d` in precision `p`; implicit, so that compile takes a Device.
  CompileTarget(Device d, DTypePolicy p = DTypePolicy::kFloat32) : device(d), policy(p) {}  // NOLINT: converts
  /// The CPU in precision `p`; implicit, so that compile takes a DTypePolicy.
  CompileTarget(DTypePolicy p) : policy(p) {}                                                // NOLINT: converts
};

/// A model (keras.Model): inputs, named outputs, and the layers between.
/// Functional: `Model(inputs, outputs)` over symbolic tensors; Sequential
/// derives from it. A Model called on a symbolic tensor is a layer sharing
/// its weights (operator()). One thread at a time: calls on one model from
/// two threads at once, predict included, share its scratch memory and must
/// be serialised.
class Model {
 public:
  /// The graph of layer calls between `inputs` (made by Input()) and
  /// `outputs`, in the order given; outputs are named after the layer that
  /// made them. Throws ValueError when an output depends on an input not in
  /// `inputs` (Keras' "graph disconnected", naming the input and the layer
  /// that needs it), when two distinct layers or two outputs share a name,
  /// when an input is not made by Input() or is given twice, or when a list
  /// is empty. An input no output uses is logged as a warning (as Keras).
  Model(const std::vector<SymbolicTensor>& inputs, const std::vector<SymbolicTensor>& outputs,
        const std::string& name = "");
  /// The same for one input and one output.
  Model(const SymbolicTensor& input, const SymbolicTensor& output, const std::string& name = "");
  /// Releases the weights and graphs (free() does so early).
  virtual ~Model();
  /// Moving hands everything on; the moved-from model is released (every
  /// method then throws StateError).
  ///@{
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  ///@}

  /// Sets the optimizer, one loss for every output (a Keras name: "mse",
  /// "mae", "huber", "binary_crossentropy", "categorical_crossentropy",
  /// "sparse_categorical_crossentropy"; or a custom Loss) and the metrics of
  /// every output (Keras names, see metric_from_name: "accuracy" resolves
  /// from the loss; binary_accuracy, categorical_accuracy,
  /// sparse_categorical_accuracy, top_k_categorical_accuracy and
  /// sparse_top_k_categorical_accuracy with k = 5, mae, mse, rmse). A
  /// softmax (a sigmoid for binary_crossentropy) that makes an output is
  /// folded into a cross-entropy loss for training (found from the graph: through Flatten
  /// and Reshape too); predict still returns probabilities. An output made
  /// by a linear op is taken as logits (Keras' from_logits = True). Throws
  /// ValueError for unknown names, and for a cross-entropy loss on an output
  /// made by another activation (sigmoid, relu, ...). A failed compile
  /// leaves the model as it was.
  ///
  /// `target` selects the backend every graph of the model runs on, and
  /// the precision (the CPU in float32 by default; backend(Device,
  /// DTypePolicy)); a Device or a DTypePolicy converts to it, so
  /// `compile(opt, loss, {"accuracy"}, DTypePolicy::kMixedBFloat16)` is
  /// Keras' mixed_bfloat16 policy (bfloat16 matmuls and convolutions where
  /// the CPU has AVX512-BF16, float32 weights and optimizer state; float32
  /// elsewhere, logged once). compile throws StateError when the
  /// device has no backend here ("no CUDA device ...") or its backend has no
  /// kernel for an op the model's training or evaluation graph needs (naming
  /// the op; no silent fallback to the CPU), ValueError for mixed_bfloat16 on
  /// any device but the CPU. Every overload takes it last.
  void compile(const OptimizerSpec& optimizer, const Loss& loss, const std::vector<std::string>& metrics = {},
               CompileTarget target = {});
  /// The same on a backend object (a custom backend; backend(Device) gives
  /// the built-in ones). Throws ValueError for a null backend.
  void compile(const OptimizerSpec& optimizer, const Loss& loss, const std::vector<std::string>& metrics,
               std::shared_ptr<const Backend> backend);
  /// One loss per output in output order, optional loss weights (one per
  /// output; the total loss is their weighted sum) and metrics per output.
  /// Throws ValueError when a list's length is not the number of outputs.
  void compile(const OptimizerSpec& optimizer, const std::vector<Loss>& losses,
               const std::vector<float>& loss_weights = {},
               const std::vector<std::vector<std::string>>& metrics = {}, CompileTarget target = {});
  /// The same on a backend object (ValueError for a null one).
  void compile(const OptimizerSpec& optimizer, const std::vector<Loss>& losses, const std::vector<float>& loss_weights,
               const std::vector<std::vector<std::string>>& metrics, std::shared_ptr<const Backend> backend);
  /// Losses, loss weights and metrics by output name; an output missing from
  /// `losses` is a ValueError, a name that is no output too (listing the
  /// outputs). Missing loss weights are 1.
  void compile(const OptimizerSpec& optimizer, const std::map<std::string, Loss>& losses,
               const std::map<std::string, float>& loss_weights = {},
               const std::map<std::string, std::vector<std::string>>& metrics = {}, CompileTarget target = {});
  /// Moves a compiled model to `device` (PyTorch's Module.to): its weights
  /// and its whole training state (the optimizer's moments, iterations and
  /// accumulators, the open accumulation period, the random streams) go
  /// there, and its graphs are built for that device's backend with the
  /// same optimizer, losses, metrics and precision, so training goes on
  /// where it was. compile() for another device moves the weights too but,
  /// as Keras' compile, starts a fresh optimizer state. Graphs built before
  /// (a Trainer's) are retired, as by compile. A no-op on the model's own
  /// device. Throws StateError before compile() or after free(), when the
  /// device is not available, or when its backend lacks a kernel the model
  /// needs (naming the op; the model is then left as it was).
  void to(Device device);
  /// Whether the model is compiled: compile() succeeded, and neither free()
  /// nor a change of the graph (Sequential::add) has undone it since.
  bool compiled() const { return state_.compiled; }
  /// The backend the model's graphs run on (compile's device; the CPU
  /// before the first compile).
  const std::shared_ptr<const Backend>& backend() const { return state_.backend; }
  /// The device of backend().
  Device device() const { return state_.backend->device(); }
  /// The precision compile() chose (kFloat32 before the first compile).
  DTypePolicy dtype_policy() const { return state_.backend->dtype_policy(); }
  /// What compile() was given (meaningful once compiled).
  const OptimizerSpec& optimizer() const { return state_.optimizer; }
  /// The first output's loss kind (the loss of a one-output model).
  LossKind loss() const;
  /// Every output's loss and loss weight, in output order.
  ///@{
  const std::vector<Loss>& losses() const { return state_.losses; }
  const std::vector<float>& loss_weights() const { return state_.loss_weights; }
  ///@}
  /// The metrics of the first output (of a one-output model).
  std::vector<std::string> metrics() const;
  /// The metrics of every output, in output order.
  std::vector<std::vector<std::string>> output_metrics() const;
  /// The optimizer's learning rate now (what compile set, or a callback
  /// since; under a learning_rate_schedule, the rate of the next update);
  /// set_learning_rate changes it for every context of the model from the
  /// next step on (Keras' model.optimizer.learning_rate). Throw StateError
  /// before compile; ValueError for a rate not positive and finite; and
  /// set_learning_rate TypeError under a schedule (as Keras: the rate is not
  /// settable; compile without the schedule to set it by hand).
  ///@{
  double learning_rate() const;
  void set_learning_rate(double lr);
  ///@}
  /// Keras' model.stop_training: a callback sets it to end fit after the
  /// current hook (see Callback). fit clears it when it starts.
  ///@{
  bool stop_training() const { return state_.stop_training; }
  void set_stop_training(bool stop) { state_.stop_training = stop; }
  ///@}
  /// Moves the first epoch of the fit in progress (Keras 3's
  /// model._initial_epoch): a callback calls it in on_train_begin
  /// (io::BackupAndRestore, after restoring a backup), and fit then runs
  /// epochs `epoch` .. epochs - 1 instead of initial_epoch .. epochs - 1
  /// (none when epoch >= epochs). fit reads it right after on_train_begin;
  /// it is cleared when fit starts and once read. Throws ValueError for a
  /// negative epoch.
  void set_initial_epoch(int epoch);
  /// The epoch set_initial_epoch gave, if any, clearing it (the loop's read).
  std::optional<int> take_initial_epoch() { return std::exchange(state_.initial_epoch, std::nullopt); }
  /// Copies of every weight's values, in weights() order, non-trainable ones
  /// (batch-norm statistics) included (Keras' get_weights); set_weights
  /// copies them back, throwing ValueError for the wrong count and
  /// ShapeError for a wrong shape, naming the weight, before changing any.
  ///@{
  std::vector<Tensor> get_weights() const;
  void set_weights(const std::vector<Tensor>& values);
  ///@}
  /// The training state beside the weights (nn/training_state.h): the
  /// optimizer state (hyper-parameters, iterations, every weight's slots,
  /// the open accumulation period), the dropout counter and the random
  /// stream, as copies (PyTorch's optimizer.state_dict(), with the random
  /// states). Only the random stream when the model is not compiled.
  /// io::save_checkpoint writes it. Throws StateError after free().
  TrainingState training_state() const;
  /// Puts back a state from training_state() of this model or of one built
  /// and compiled alike (PyTorch's load_state_dict), in place: tensors bound
  /// into planned graphs stay bound. With the same weights (set_weights),
  /// training then goes on bit for bit as from where the state was taken. A
  /// state without an optimizer part sets the random stream only; a
  /// Trainer's step count and period are not read. Checks everything before
  /// changing anything: StateError when the model is not compiled (and the
  /// state has an optimizer part) or was freed, ValueError for tensors of
  /// other shapes or dtypes than this model's (naming the slot and weight),
  /// or a negative micro_step. Slots for names that are no weight of this
  /// model are ignored; a slot the state lacks starts again from its initial
  /// value. io::load_checkpoint restores through it.
  void set_training_state(const TrainingState& state);
  /// Changes whenever the graph or its weights' memory changes (add,
  /// clone, free): lets holders of cached weight pointers notice.
  uint64_t structure_id() const { return state_.structure_id; }

  /// Trains on x {rows, input_shape...} (or {rows, features}) and y (as each
  /// output's loss takes it; see OptimizerContext::step) for `epochs` epochs.
  /// Returns the History: "loss" (the weighted sum of the outputs' losses)
  /// and, for several outputs, "<output>_loss" and "<output>_<metric>"; a
  /// one-output model reports its metrics unprefixed ("accuracy"). Throws StateError before compile,
  /// ShapeError when inputs and targets differ in rows or a tensor has the
  /// wrong shape, ValueError for validation_split outside [0, 1), a
  /// sample_weight matrix (use the Trainer's loss_mask), NaN or infinity, and
  /// the label errors of OptimizerContext::step.
  History fit(const Tensor& x, const Tensor& y, const FitOptions& options = {});
  /// Several inputs and outputs, in the model's order (ShapeError naming the
  /// counts when they do not match).
  History fit(std::span<const Tensor> x, std::span<const Tensor> y, const FitOptions& options = {});
  /// By input and output name (ValueError naming an unknown or missing name).
  History fit(const std::map<std::string, Tensor>& x, const std::map<std::string, Tensor>& y,
              const FitOptions& options = {});

  /// Trains from a generator (Keras' Model.fit with a generator, with its
  /// epochs/initial_epoch). Returns the History as the in-memory fit. An
  /// epoch whose first call gives nothing stops training with a warning
  /// ("trained k of n epochs"). An exception thrown by the generator is
  /// rethrown to the caller as the same object after a warning naming the
  /// batch; on any exit the producer thread is joined and the generator is
  /// not called again. A generator that never returns blocks fit. Throws
  /// ValueError for a negative steps_per_epoch, validation_steps or prefetch,
  /// an initial_epoch outside [0, epochs), an empty generator; ShapeError for
  /// a batch with the wrong number of tensors, rows that differ between its
  /// tensors, more rows than batch_size, or a wrong feature shape (naming the
  /// batch number); and the label errors of the in-memory fit.
  History fit(const Generator& generator, const GeneratorFitOptions& options);

  /// One training step on one batch (Keras' train_on_batch; the level
  /// train_epoch is written on, nn/training_loop.h): the batch's x (one
  /// tensor per input), y (one per output) and optional sample_weight ({rows}
  /// or {rows, 1}) through the optimizer context of its row count. The graphs
  /// are planned for `batch_size` rows as a maximum (0: the batch's rows), so
  /// batches of any size up to it share them; with `nbatch_logical` (gradient
  /// accumulation, a multiple of batch_size) the weights change once per
  /// nbatch_logical / batch_size batches, a short batch counting as one with
  /// its rows weighing as much as any (its loss scaled by rows /
  /// nbatch_logical). Returns the step's losses and metric sums (valid
  /// until the next step; EpochLogs averages them). Throws StateError before
  /// compile; ShapeError for the wrong number of tensors, rows that differ
  /// between them, more rows than batch_size, or a wrong feature shape; ValueError for a batch of no rows; and the input
  /// and label errors of OptimizerContext::step.
  StepResult train_on_batch(const Batch& batch, int64_t batch_size = 0, int64_t nbatch_logical = 0);
  /// The losses and metrics of one batch, nothing trained (Keras'
  /// test_on_batch); checks and errors as train_on_batch.
  StepResult test_on_batch(const Batch& batch, int64_t batch_size = 0);
  /// The model's random stream: fit's shuffles (TensorSource) draw from it.
  /// Seeded at compile from the global seed (manual_seed), so a seeded run
  /// repeats.
  std::mt19937_64& random_stream() { return state_.rng; }

  /// Loss (and metrics, if compiled with them) over (x, y), in batches of
  /// batch_size, with optional per-row sample_weight ({rows} or {rows, 1}) as
  /// Keras' evaluate. Keys as History. Throws StateError before compile,
  /// ShapeError naming both row counts when inputs and targets (or the
  /// weights) differ in rows, and the input and label errors of fit.
  std::map<std::string, double> evaluate(const Tensor& x, const Tensor& y, int64_t batch_size = 32,
                                         const Tensor& sample_weight = {});
  /// The same with one tensor per input and per output, in the model's order.
  std::map<std::string, double> evaluate(std::span<const Tensor> x, std::span<const Tensor> y,
                                         int64_t batch_size = 32, const Tensor& sample_weight = {});
  /// The same by input and output name (ValueError naming an unknown or
  /// missing name).
  std::map<std::string, double> evaluate(const std::map<std::string, Tensor>& x,
                                         const std::map<std::string, Tensor>& y, int64_t batch_size = 32,
                                         const Tensor& sample_weight = {});

  /// The same over a generator's batches (at most batch_size rows each), for
  /// `steps` batches (0: until it returns nullopt). Keys as History; NaN
  /// values when the generator gives nothing.
  std::map<std::string, double> evaluate(const Generator& generator, int64_t steps = 0, int64_t batch_size = 32);
  /// Every output over a generator's batches (their `y` is not read), for
  /// `steps` batches (0: until it returns nullopt), the rows of all batches
  /// one after another. Throws ValueError when it gives no batch, and the
  /// input errors of predict naming the batch.
  std::vector<Tensor> predict(const Generator& generator, int64_t steps = 0);

  /// The first output for any number of rows: {rows, output_shape...},
  /// probabilities after a softmax. Runs in batches of batch_size. Throws as
  /// the input checks of fit.
  Tensor predict(const Tensor& x, int64_t batch_size = 32);
  /// Every output, in output order, for inputs in the model's order.
  std::vector<Tensor> predict(std::span<const Tensor> x, int64_t batch_size = 32);
  /// Every output by name, for inputs by name.
  std::map<std::string, Tensor> predict(const std::map<std::string, Tensor>& x, int64_t batch_size = 32);
  /// The first output into caller memory `out` {rows, output_shape...} (or
  /// {rows, features}), all rows in one batch; allocates nothing once this
  /// row count has been seen (plans for the 8 most recent row counts are
  /// kept). Throws TypeError for a non-float32 `out`, ShapeError for the
  /// wrong shape.
  void predict(const Tensor& x, Tensor& out);
  /// Every output into caller memory (one tensor per output, in order), for
  /// inputs in the model's order; allocation-free as above.
  void predict(std::span<const Tensor> x, std::span<Tensor> out);

  /// The optimizer context fit uses for batches of `batch_size` (made on first
  /// use; shares the optimizer state of every other batch size). Its graphs
  /// are planned for the next power of two at or above batch_size and shared
  /// with every context of the same accumulation period and loss weights
  /// whose batch rounds to the same capacity, so many batch sizes cost a few
  /// plans (when the model's graph scales with its batch; otherwise each
  /// batch size has its own). This is the
  /// public step fit is written on. Throws StateError when a layer's
  /// `trainable` changed after compile() (it takes effect at the next
  /// compile, as Keras: compile again). After the next compile(), a change to
  /// the model or freeze_bn_stats() the context is retired: its graphs are
  /// released and its step() throws StateError naming the call that retired
  /// it (the object itself stays valid until the model is destroyed). Throws
  /// StateError before compile.
  /// `micro_batch` (see OptimizerContextOptions): with accumulation, the
  /// full micro-batch whose period a context of a smaller batch_size joins.
  OptimizerContext& optimizer_context(int64_t batch_size, int64_t nbatch_logical = 0,
                                      LossWeights weights = LossWeights::None, int64_t micro_batch = 0);

  /// Data-parallel training: while set, every optimizer update of this
  /// model first reduces its gradients over `comm`'s ranks
  /// (OptimizerState::communicator). fit sets it for its own run
  /// (FitOptions::communicator) and puts back the previous one after; a
  /// Trainer's model keeps TrainerOptions::communicator. Null: one process.
  /// Throws StateError before compile() (the optimizer state holds it;
  /// compile() starts a fresh state without one).
  void set_communicator(std::shared_ptr<dist::Communicator> comm);
  /// The communicator set, or null (also before compile()).
  std::shared_ptr<dist::Communicator> communicator() const;

  /// Adds a gradient hook (see GradientHook) that every optimizer context of
  /// this model runs between backward and update: fit's, a partial last
  /// batch's, the Trainer's (a Trainer or clone made later takes the model's
  /// hooks with it). Hooks run in the order added. Throws ValueError for an
  /// empty hook.
  void add_gradient_hook(GradientHook hook);
  /// Adds a hook that sees the model's flat gradient buffer cut into buckets
  /// (see GradientBuffer; the place for an all-reduce per bucket), run by
  /// every optimizer context of this model in the same stage as
  /// add_gradient_hook's hooks and in one order with them (the order added).
  /// Throws ValueError for an empty hook.
  void add_gradient_bucket_hook(GradientBucketHook hook);
  /// The size in bytes of the buckets the hook stage cuts the flat gradient
  /// buffer into (PyTorch DDP's bucket_cap_mb, in bytes): default 25 MiB.
  /// Applies to every optimizer context of the model, those made earlier
  /// included, from their next hook call on; kept by compile(), clone() and
  /// a Trainer made from the model. Throws ValueError unless bytes is a
  /// positive multiple of 4 (whole float32 elements), StateError after free().
  void set_gradient_bucket_bytes(size_t bytes);
  /// The bucket size set_gradient_bucket_bytes set, in bytes.
  size_t gradient_bucket_bytes() const { return state_.gradient_bucket_bytes; }

  /// Bytes of every arena the model holds now (training, evaluation and
  /// prediction plans), and the number of those plans: bounded however many
  /// batch sizes were used (see optimizer_context).
  ///@{
  size_t arena_bytes() const;
  size_t plan_count() const;
  ///@}

  /// Fixes every BatchNormalization layer's moving statistics: later training
  /// steps still normalize with batch statistics but no longer update them.
  /// Applies to graphs built from now on.
  void freeze_bn_stats(bool freeze = true);
  /// Sets every BatchNormalization layer's moving mean and variance to the
  /// exact statistics of the first min(rows, 1024) rows of x, computed in one
  /// batch (a recalibration to run after fit). Throws as predict.
  void calibrate_bn(const Tensor& x);
  /// The same for a model of several inputs (one tensor per input).
  void calibrate_bn(std::span<const Tensor> x);

  /// An independent copy: the same graph of layers (names, configuration)
  /// with their own copies of the weights (a layer shared inside the model
  /// stays shared in the copy), compiled like this one when this one is, with
  /// fresh optimizer state. Throws StateError after free().
  Model clone() const;
  /// Releases the model's weights and graphs early.
  /// Idempotent; afterwards every method throws StateError. The destructor
  /// releases everything anyway.
  virtual void free();
  /// Whether free() has run (or the model was moved from).
  bool released() const { return state_.released; }
  /// "Functional", or "Sequential" (Keras' class names, for summary()).
  virtual const char* type() const { return "Functional"; }

  /// Every weight, "<layer>/<weight>", each layer once, in the order layers
  /// are first called.
  std::vector<Weight> weights() const;
  /// The layers, each once, in the order they are first called.
  std::vector<std::shared_ptr<Layer>> layers() const;
  /// The layer calls of the graph in the order the forward pass runs them,
  /// each after the calls that make its inputs (Keras' nodes by depth): the
  /// connections the architecture is saved by (io::save_model). Valid while
  /// the graph is unchanged. Throws StateError after free().
  const std::vector<const LayerCall*>& layer_calls() const;
  /// The layer named `name`; throws ValueError listing the layer names.
  std::shared_ptr<Layer> get_layer(const std::string& name) const;
  /// The model's name: the constructor's, or a unique default ("functional",
  /// "functional_1", ...).
  const std::string& name() const { return state_.name; }
  /// Inputs and outputs as symbolic tensors (to build new models over this
  /// one's graph: feature extraction, as Keras' model.inputs/outputs).
  ///@{
  const std::vector<SymbolicTensor>& inputs() const;
  const std::vector<SymbolicTensor>& outputs() const;
  ///@}
  /// The inputs' and outputs' names, in the model's order (the keys fit,
  /// evaluate and predict take by name).
  ///@{
  std::vector<std::string> input_names() const;
  std::vector<std::string> output_names() const;
  ///@}
  /// The first input's and first output's shape, without the batch.
  ///@{
  const Shape& input_shape() const;
  const Shape& output_shape() const;
  ///@}
  /// The forward pass as a function the optimizer context builds graphs from.
  ModelFunction model_function() const;
  /// Keras' table of layers ("name (Type)"), output shapes and parameter
  /// counts, each column as wide as its longest cell; a functional model
  /// adds a row per input and the "Connected to" column. Then Keras' three
  /// lines "Total params:", "Trainable params:" and "Non-trainable params:"
  /// (digits grouped by thousands, "1,234"); batch-norm moving statistics
  /// and the weights of a layer with trainable = false are non-trainable, a
  /// weight shared by two layers counts once. A device other than the CPU is
  /// named last ("Device: ...").
  std::string summary() const;

  /// Calls the model on symbolic tensors as a layer (a nested model, sharing
  /// its weights with this one; every call is the same layer, so calling it
  /// twice in one graph shares it, as a Siamese encoder). The model must
  /// have as many inputs as tensors given, of the same shapes (ShapeError),
  /// and one output (ValueError otherwise: use call_outputs).
  ///@{
  SymbolicTensor operator()(const SymbolicTensor& x) const;
  SymbolicTensor operator()(const std::vector<SymbolicTensor>& inputs) const;
  ///@}
  /// The same for a model of any number of outputs: one symbolic tensor per
  /// output, in the model's order, named "<model>/<output>" when there are
  /// several (Keras returns a list from model(inputs)). The outputs come from
  /// one call: the shared part of the graph runs once.
  std::vector<SymbolicTensor> call_outputs(const std::vector<SymbolicTensor>& inputs) const;

 protected:
  /// An empty model, for Sequential, which sets its graph as layers come.
  explicit Model(const std::string& name);
  /// Replaces the graph (Sequential::add): contexts are retired, plans
  /// dropped, and a compiled model must be compiled again.
  void set_graph(const std::vector<SymbolicTensor>& inputs, const std::vector<SymbolicTensor>& outputs,
                 const char* why);
  /// Throws StateError naming `call` after free().
  void check_live(const char* call) const;
  /// The graph of layer calls (null until Sequential has a layer).
  std::shared_ptr<const FunctionalGraph> graph_;

 private:
  struct PredictPlan;
  PredictPlan& predict_plan(int64_t rows);
  std::string not_compiled_message(const char* call) const;
  void new_structure_id();
  void retire_contexts(const char* why);
  // Moves every layer's weights to `device` (compile's target).
  void place_weights_on(Device device);
  void set_compiled(const OptimizerSpec& optimizer, std::vector<Loss> losses, std::vector<float> loss_weights,
                    std::vector<std::vector<std::string>> metrics, std::shared_ptr<const Backend> backend);
  std::vector<Tensor> ordered_inputs(const std::map<std::string, Tensor>& x) const;
  std::vector<Tensor> ordered_targets(const std::map<std::string, Tensor>& y) const;
  StepResult run_batch(const Batch& batch, int64_t batch_size, int64_t nbatch_logical, bool train);
  std::map<std::string, double> metric_logs(double loss_sum, std::span<const double> output_loss_sums,
                                            std::span<const double> metric_sums, int64_t rows) const;
  friend class EpochLogs;
  friend class Trainer;  // its copy keeps the model's fusion options across its compile
  friend void broadcast_training_state(Model& model, dist::Communicator& comm);  // data-parallel start

  // Everything the model holds but its graph, in one member that the move
  // hands on as a whole: a field added here cannot be left behind.
  struct State {
    std::string name;
    bool compiled = false;
    bool changed_after_compile = false;
    bool released = false;
    uint64_t structure_id = 0;
    OptimizerSpec optimizer;
    std::vector<Loss> losses;
    std::vector<float> loss_weights;
    std::vector<std::vector<std::string>> metrics;  // per output, as compile() was given them
    std::shared_ptr<OptimizerState> opt_state;
    std::shared_ptr<const Backend> backend = cpu_backend();
    FusionOptions fusion;  // compile's CompileTarget::fusion
    std::map<std::tuple<int64_t, int64_t, int, int64_t>, std::unique_ptr<OptimizerContext>> contexts;
    std::vector<std::unique_ptr<OptimizerContext>> retired_contexts;  // handed out earlier, now refusing to run
    std::map<int64_t, std::unique_ptr<PredictPlan>> predict_plans;  // by capacity
    std::map<std::pair<int64_t, int>, std::shared_ptr<OptimizerPlans>> plan_pools;  // by (period, loss weights)
    std::shared_ptr<std::vector<AnyGradientHook>> hooks = std::make_shared<std::vector<AnyGradientHook>>();
    size_t gradient_bucket_bytes = kDefaultGradientBucketBytes;
    mutable std::shared_ptr<Layer> as_layer;  // this model called as a layer: one object, so calls share it
    std::vector<std::pair<const Layer*, bool>> trainable_at_compile;  // what the optimizer was compiled for
    bool stop_training = false;
    std::optional<int> initial_epoch;  // set_initial_epoch, for the fit in progress
    std::mt19937_64 rng;  // the model's random stream: fit's shuffles, seeded at compile
  };
  State state_;
};

}  // namespace tensorgrad::nn
