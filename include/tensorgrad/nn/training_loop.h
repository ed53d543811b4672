#pragma once
// The training loop in public layers, as ggml-opt is layered (a dataset, an
// epoch over it, a fit of epochs):
//
//   BatchSource        where batches come from: TensorSource (rows held in
//                      memory, shuffled from the model's random stream) or
//                      GeneratorSource (a Generator, prefetched on a thread);
//   Model::train_on_batch / test_on_batch
//                      one batch through the model's optimizer contexts;
//   train_epoch        one epoch of a source, with the batch callbacks;
//   test_epoch         one pass over a source without training (validation);
//   fit_loop           epochs of train_epoch, validation after each, and the
//                      epoch and train callbacks; returns the History;
//   LoopGroup          what processes running one loop in step decide
//                      together (data-parallel training: nn/data_parallel.h
//                      makes one); the loop asks it and knows no more.
//
// Both Model::fit overloads (tensors and generator) are written on these
// alone, so a loop that needs something else (two sources alternating, a
// curriculum, a custom stopping rule) can start from a copy of any level.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "tensorgrad/nn/callbacks.h"
#include "tensorgrad/nn/model.h"

namespace tensorgrad::nn {

/// Batches for one epoch at a time. A source is read by one thread (the
/// loop's); GeneratorSource may call its generator on a thread of its own.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  /// Begins an epoch (0-based; -1 outside fit, for messages) of at most
  /// `limit` batches (0: until the source ends). The built-in sources throw
  /// ValueError for a negative limit, and GeneratorSource StateError after
  /// stop().
  virtual void start_epoch(int epoch, int64_t limit) = 0;
  /// The epoch's next batch, or nullptr at its end. The batch (and the
  /// tensors in it) stay valid until the next call of next() or
  /// start_epoch(). The built-in sources throw StateError before the first
  /// start_epoch(); GeneratorSource returns nullptr after stop().
  virtual const Batch* next() = 0;
  /// Batches in a full epoch when known (for the progress bar), else 0.
  virtual int64_t batches_per_epoch() const = 0;
  /// The most rows a batch has: the graphs are planned for it.
  virtual int64_t batch_size() const = 0;
  /// The option that sets batch_size(), which a hint asks to raise when a
  /// batch has more rows: "batch_size" unless a source says otherwise.
  virtual std::string batch_size_option() const { return "batch_size"; }
  /// What messages call a batch of this source: "batch", "generator batch",
  /// "validation batch". Only a name: nothing is decided by its words.
  virtual const std::string& label() const = 0;
  /// What warnings call the source as a whole ("the generator returned
  /// nothing"): "batch source" unless a source says what it is.
  virtual std::string noun() const { return "batch source"; }
  /// Ends work in the background (GeneratorSource's producer); next() is not
  /// called afterwards. Idempotent.
  virtual void stop() {}
};

/// Rows held in memory, `batch_size` at a time, the last batch short when
/// the rows do not divide (Keras' fit on arrays). With a random stream, each
/// epoch gathers the rows in a new order (a permutation drawn with
/// std::shuffle at start_epoch) into staging tensors made once; without one,
/// batches are views of the rows in order and nothing is copied.
class TensorSource final : public BatchSource {
 public:

  /// x: one tensor per model input, y: one per output, sample_weight {rows}
  /// or undefined; all with the same rows (first axis). `shuffle_rng`: the
  /// stream the orders are drawn from (Model::random_stream() for fit's
  /// behaviour), or null for the rows in order; it must outlive the source.
  /// Throws ValueError for batch_size < 1, no rows or no tensors, and
  /// ShapeError naming the tensor whose rows differ. The values are not
  /// checked here: the optimizer context checks each batch.
  TensorSource(std::vector<Tensor> x, std::vector<Tensor> y, Tensor sample_weight, int64_t batch_size,
               std::mt19937_64* shuffle_rng = nullptr, std::string label = "batch");
  void start_epoch(int epoch, int64_t limit) override;
  const Batch* next() override;
  /// ceil(rows / batch_size).
  int64_t batches_per_epoch() const override;
  int64_t batch_size() const override { return batch_size_; }
  const std::string& label() const override { return label_; }
  /// The rows held (every tensor's first axis).
  int64_t rows() const { return rows_; }

 private:
  std::vector<Tensor> x_, y_;
  Tensor w_;
  int64_t rows_, batch_size_;
  std::mt19937_64* rng_;
  std::string label_;
  std::vector<int64_t> order_;
  Batch full_, part_;  // views of the staging: batch_size rows, and the short last batch
  Batch current_;      // the batch handed out when reading in order (views of the rows)
  int64_t next_row_ = 0, given_ = 0, limit_ = 0;
  bool started_ = false;
};

/// What a source feeds: training batches, or validation batches (which
/// warnings then name as such).
enum class SourceRole { kTraining, kValidation };

/// Batches from a Generator, called as its contract says (see Generator).
/// With prefetch > 0 the generator runs on a producer thread at most
/// `prefetch` batches ahead; it is never called past an epoch's end (a
/// nullopt, or `limit` calls) and the next epoch's calls start at
/// start_epoch, so it is called exactly as often as with prefetch 0 (on the
/// reading thread) when every epoch is read to its end, as fit does. A loop
/// that starts a new epoch before the last one ended discards the batches
/// fetched ahead (the generator was called for them; with prefetch 0 it was
/// not). An exception thrown by the generator is rethrown from next() as the
/// same object, after a warning naming the batch. stop() (and the destructor)
/// waits for a call in progress and joins the producer: a generator that
/// never returns blocks it.
class GeneratorSource final : public BatchSource {
 public:
  /// The generator is called in place, not copied (its state advances as
  /// the caller's): it must outlive the source. batch_size: the most rows a
  /// batch may have (checked by train_on_batch). `label` names its batches
  /// in messages ("generator batch 3 of epoch 1"); `role` kValidation makes
  /// the warnings say "the validation generator". Throws ValueError for an
  /// empty generator, batch_size < 1 or a negative prefetch.
  GeneratorSource(const Generator& generator, int64_t batch_size, int prefetch = 2,
                  std::string label = "generator batch", SourceRole role = SourceRole::kTraining);
  ~GeneratorSource() override;
  GeneratorSource(const GeneratorSource&) = delete;
  GeneratorSource& operator=(const GeneratorSource&) = delete;
  void start_epoch(int epoch, int64_t limit) override;
  const Batch* next() override;
  /// 0 (unknown): a generator's length is what it returns.
  int64_t batches_per_epoch() const override { return 0; }
  int64_t batch_size() const override { return batch_size_; }
  const std::string& label() const override { return label_; }
  /// "generator", or "validation generator" (SourceRole::kValidation).
  std::string noun() const override;
  /// "batch_size", or "validation_batch_size" (SourceRole::kValidation:
  /// fit's validation_generator).
  std::string batch_size_option() const override;
  void stop() override;

 private:
  class Feed;
  std::unique_ptr<Feed> feed_;
  int64_t batch_size_;
  std::string label_;
  SourceRole role_;
  std::optional<Batch> current_;
  bool started_ = false, stopped_ = false;
};

struct LoopOptions;

/// Processes that run one training loop in step, each on its own batches
/// (data-parallel training: nn/data_parallel.h's data_parallel_group makes
/// one from a communicator). The loop asks it at the points where the
/// processes must decide together, and knows no more of them; without one
/// (null), the process decides alone. Every member calls every method at
/// the same point of the loop (they are collective).
class LoopGroup {
 public:
  virtual ~LoopGroup() = default;
  /// Runs `loop` (fit_loop's epochs) in the group: first checks that every
  /// member runs the same loop (`options`, `train`'s batches per epoch,
  /// validation or none), and whatever the group needs around it (an
  /// exception leaving `loop` on one member must not leave the others
  /// waiting). Returns what `loop` returns.
  virtual History run(Model& model, const BatchSource& train, const BatchSource* validation,
                      const LoopOptions& options, const std::function<History()>& loop) = 0;
  /// After on_train_begin: every member takes the first member's training
  /// state and `first_epoch` (a restore on_train_begin made included).
  virtual void start(Model& model, int& first_epoch) = 0;
  /// Before each training batch: `more` (this member has a batch) and
  /// `stop` (its model asked to stop) become whether any member has one and
  /// whether any asked; every member gets the same answers.
  virtual void agree(bool& more, bool& stop) = 0;
  /// `sums` (a pass's loss and metric sums) added over the members, in
  /// place; every member gets the same bits.
  virtual void add_up(std::span<double> sums) = 0;
  /// After on_train_end: returns when every member has come here.
  virtual void finish() = 0;
  /// This member's index in [0, members()): callbacks learn it
  /// (Callback::rank(); only member 0 prints and writes files).
  virtual int member() const = 0;
  /// The number of members (the world size).
  virtual int members() const = 0;
};

/// The callbacks of one training run in Keras 3's order
/// (keras.callbacks.CallbackList): the given ones, then the History the run
/// returns, then a ProgbarLogger unless one was given (verbose 1 or 2).
/// Attaches the model to each while it lives and clears the model's
/// stop_training flag.
class CallbackList {
 public:
  /// steps: batches per epoch for the progress bar (0: unknown). `group`:
  /// the processes running the loop together (every callback learns its
  /// place: Callback::rank()), or null. Throws ValueError naming a null
  /// callback.
  CallbackList(Model& model, const std::vector<std::shared_ptr<Callback>>& callbacks, int verbose, int epochs,
               int64_t steps, const LoopGroup* group = nullptr);
  /// Detaches the model, the callback list and the rank from every callback.
  ~CallbackList();
  CallbackList(const CallbackList&) = delete;
  CallbackList& operator=(const CallbackList&) = delete;

  /// Each calls the Callback hook of the same name on every callback, in
  /// order, with the same `logs` (so a callback sees what earlier ones added).
  ///@{
  void on_train_begin(Logs& logs);
  void on_train_end(Logs& logs);
  void on_epoch_begin(int epoch, Logs& logs);
  void on_epoch_end(int epoch, Logs& logs);
  void on_train_batch_begin(int64_t batch, Logs& logs);
  void on_train_batch_end(int64_t batch, Logs& logs);
  void on_test_begin(Logs& logs);
  void on_test_end(Logs& logs);
  ///@}

  /// What the run records (returned by fit).
  History history;

 private:
  std::vector<Callback*> list_;
  std::unique_ptr<ProgbarLogger> own_progbar_;
};

/// Running means of one pass's losses and metrics, weighted by rows, with
/// fit's keys (see Model::fit): "loss", and per output "<output>_loss" and
/// the metrics when the model has several outputs.
class EpochLogs {
 public:
  /// Throws StateError for a model not compiled (or freed).
  explicit EpochLogs(const Model& model);
  /// Adds one batch's result (what train_on_batch or test_on_batch returned).
  void add(const StepResult& result);
  /// The means so far; every value NaN (no value) when no batch was added.
  Logs logs() const;
  /// These sums added over every member of `group` (LoopGroup::add_up:
  /// every member gets the same bits). Collective.
  EpochLogs reduced(LoopGroup& group) const;
  /// The batches and rows added so far.
  ///@{
  int64_t batches() const { return batches_; }
  int64_t rows() const { return rows_; }
  ///@}

 private:
  const Model* model_;
  double loss_sum_ = 0;
  std::vector<double> output_loss_sums_, metric_sums_;
  int64_t rows_ = 0, batches_ = 0;
};

/// Options of train_epoch.
struct EpochOptions {
  /// At most this many batches (0: until the source ends).
  int64_t steps = 0;
  /// Rows per optimizer update (gradient accumulation), as FitOptions; 0 =
  /// every batch updates. In a group, this member's part.
  int64_t nbatch_logical = 0;
  /// The processes running the loop together (see LoopOptions::group); null: one.
  LoopGroup* group = nullptr;
};

/// Trains the model on one epoch of `source`: start_epoch, then for each
/// batch on_train_batch_begin, Model::train_on_batch (at most
/// source.batch_size() rows), and on_train_batch_end with the running means.
/// Stops after any hook that sets model.stop_training(). With accumulation,
/// a period the epoch left incomplete is applied at its end
/// (OptimizerContext::apply_pending_update). A batch the model
/// refuses is rethrown as the same error type with "<label> N of epoch E: "
/// before its message. Returns the epoch's means (batches() == 0 when the
/// source gave nothing or training was stopped before the first batch).
///
/// In a group (options.group): before each batch the members agree
/// (LoopGroup::agree) whether any of them still has a batch and whether any
/// asked to stop; the epoch ends on every member when none has a batch, a
/// member without one trains on a batch of no tensors (train_on_batch then
/// joins the others' update: OptimizerContext::join_step, PyTorch's Join),
/// and a stop asked on any member takes effect on all before the next batch
/// (Keras checks stop_training after each batch too). The batch callbacks
/// get the running means over every member's rows (LoopGroup::add_up). The
/// returned logs are this member's.
EpochLogs train_epoch(Model& model, BatchSource& source, int epoch, CallbackList& callbacks,
                      const EpochOptions& options = {});

/// One pass over `source` (at most `steps` batches; 0: until it ends) with
/// Model::test_on_batch, nothing trained: the loss and metric means, NaN
/// when the source gave nothing. `epoch` names the epoch in messages (-1:
/// none). With `group`, each member passes over its own source and the
/// means are over every member's rows (LoopGroup::add_up at the end). A
/// source that ends before `steps` batches is logged as a warning (Keras:
/// "your input ran out of data"), unless `warned` points to true; it is then
/// set, so that a fit warns once (as the training side's short epochs).
Logs test_epoch(Model& model, BatchSource& source, int64_t steps = 0, int epoch = -1, LoopGroup* group = nullptr,
                bool* warned = nullptr);

/// Options of fit_loop (Keras' names; see GeneratorFitOptions).
struct LoopOptions {
  /// Epochs initial_epoch .. epochs - 1 run (Keras).
  ///@{
  int epochs = 1;
  int initial_epoch = 0;
  ///@}
  /// Batches per epoch (0: until the source ends); with a number, a source
  /// that ends sooner gives a short epoch (warned "d of s").
  int64_t steps_per_epoch = 0;
  /// Validation batches per epoch (0: until the validation source ends).
  int64_t validation_steps = 0;
  /// As FitOptions: rows per optimizer update (0: every batch updates),
  /// the progress output, and the callbacks.
  ///@{
  int64_t nbatch_logical = 0;
  int verbose = 1;
  std::vector<std::shared_ptr<Callback>> callbacks;
  ///@}
  /// The processes running this loop together, each over its own sources
  /// (data-parallel training: nn/data_parallel.h's data_parallel_group): the
  /// loop runs inside LoopGroup::run, starts from the first member's state
  /// (LoopGroup::start, after on_train_begin), agrees before each batch and
  /// adds the logs up over the members. Null: one process.
  std::shared_ptr<LoopGroup> group;
};

/// Trains for epochs initial_epoch .. epochs - 1: on_train_begin, then per
/// epoch on_epoch_begin, train_epoch, a warning the first time the loss is
/// not finite, validation (on_test_begin, test_epoch over `validation` when
/// given, on_test_end; its keys enter the epoch's logs with "val_"),
/// on_epoch_end; then on_train_end. An epoch whose source gives nothing at
/// once ends training with a warning ("trained k of n epochs"). Returns the
/// History. Throws ValueError for epochs < 0, initial_epoch outside [0,
/// epochs), negative steps, verbose outside 0..2; whatever a batch or a
/// callback throws leaves at once (the model keeps its last completed
/// update) after stopping both sources.
History fit_loop(Model& model, BatchSource& train, BatchSource* validation, const LoopOptions& options);

}  // namespace tensorgrad::nn
