#pragma once
// The callback interface of Model::fit (keras.callbacks.Callback, Keras 3).
// The built-in callbacks are in nn/callbacks.h; History (nn/history.h) is one.
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tensorgrad/core/tensor.h"

namespace tensorgrad::nn {

class Model;

/// Metric values by Keras key ("loss", "accuracy", "val_loss", ...). One map
/// is handed along the callbacks in order, so a callback may add keys (the
/// learning-rate callbacks add "learning_rate") that later ones, History
/// among them, see.
using Logs = std::map<std::string, double>;

/// What a callback keeps from one epoch to the next (EarlyStopping's wait
/// count and best value, ...), so a checkpoint can save it and a resumed fit
/// go on as the uninterrupted one (io::save_checkpoint, io::BackupAndRestore).
/// Numbers by name in `values` (an absent optional value is an absent key);
/// tensors by name, in order, in `tensors`.
struct CallbackState {
  std::map<std::string, double> values;                 ///< numbers by name
  std::vector<std::pair<std::string, Tensor>> tensors;  ///< tensors by name, in the callback's order
  /// No values and no tensors: a callback that keeps nothing.
  bool empty() const { return values.empty() && tensors.empty(); }
};

/// An object whose state a checkpoint saves and restores, recorded under
/// its type name: the callbacks of a fit (io::save_checkpoint with a model),
/// and what a training loop of one's own keeps beside its Trainer, such as a
/// replay buffer (io::save_checkpoint with a Trainer and `states`).
class Stateful {
 public:
  virtual ~Stateful() = default;
  /// The name a checkpoint records the state under and checks on loading:
  /// the same in every build. Must not return null or an empty name.
  virtual const char* type() const = 0;
  /// What the object keeps: numbers by name, tensors by name in order.
  virtual CallbackState get_state() const = 0;
  /// Puts back a state from get_state() of an object of the same type and
  /// arguments. Throws ValueError for a malformed state and changes nothing
  /// then.
  virtual void set_state(const CallbackState& state) = 0;
};

/// Hooks fit calls, as Keras 3 names them. Epochs and batches count from 0.
/// A hook may stop training with model().set_stop_training(true): fit checks
/// the flag after every hook and ends after the current one (the epoch's
/// remaining batches are skipped; on_epoch_end and on_train_end still run).
/// Exceptions thrown by a hook leave fit at once, as the same object.
class Callback : public Stateful {
 public:
  ~Callback() override = default;
  /// The model being trained; throws StateError outside fit (set by fit
  /// before on_train_begin, cleared after on_train_end).
  Model& model() const;
  /// Sets (or, with null, clears) what model() returns; fit calls it, a loop
  /// of one's own that drives callbacks calls it likewise.
  void set_model(Model* model) { model_ = model; }
  /// The callbacks of the fit in progress in the order fit calls them (the
  /// given ones, then the History, then the progress printer); empty outside
  /// fit. Set by fit (CallbackList) with the model: io::BackupAndRestore
  /// finds the callbacks whose state it saves here.
  const std::vector<Callback*>& fit_callbacks() const;
  /// Sets what fit_callbacks() returns (null: none); the list must outlive
  /// the fit.
  void set_fit_callbacks(const std::vector<Callback*>* callbacks) { fit_callbacks_ = callbacks; }
  /// In data-parallel training (FitOptions::communicator) this process's
  /// rank and the job's number of ranks (torch.distributed's rank and
  /// world size); 0 and 1 otherwise. The logs a callback sees are the same
  /// on every rank (reduced over all of them), so decisions agree; what
  /// writes files or prints (ProgbarLogger, CSVLogger, PlotHistory,
  /// ModelCheckpoint, BackupAndRestore's backups) does so on rank 0 only, as
  /// Horovod's recipe: a callback of a user's that writes should check
  /// rank() == 0 alike. Set by fit (CallbackList) with the model.
  ///@{
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  ///@}
  /// Sets what rank() and world_size() return.
  void set_rank(int rank, int world_size) { rank_ = rank, world_size_ = world_size; }

  /// The callback's type name, which checkpoints record with its state
  /// (io::save_checkpoint, io::BackupAndRestore) and check when they load it
  /// into callbacks again, as Layer::type() names a layer: the same in every
  /// build, whatever the compiler. The built-in callbacks return their Keras
  /// class names ("EarlyStopping", "ModelCheckpoint", ...; PlotHistory,
  /// which Keras lacks, "PlotHistory"). The default is "Callback", Keras'
  /// base class: override it in a callback of yours that keeps state, so
  /// that a checkpoint tells it from other callbacks and refuses to load its
  /// state into another. Must not return null.
  const char* type() const override { return "Callback"; }

  /// What the callback keeps between epochs (default: nothing). Taken after
  /// an on_epoch_end, it is what the next epoch starts from.
  CallbackState get_state() const override { return {}; }
  /// Puts back a state from get_state() of a callback of the same type and
  /// arguments; called after on_train_begin (which resets the state), the
  /// callback then behaves as the one the state came from. Built-in
  /// callbacks throw ValueError for a malformed state (a missing, unknown or
  /// out-of-range key, naming the callback and the key) and change nothing
  /// then. Default: ignores the state (a callback that keeps nothing).
  void set_state(const CallbackState& state) override { (void)state; }
  /// Whether the callback keeps state between epochs at all, asked when a
  /// fit begins (io::BackupAndRestore refuses such a callback placed after
  /// it). Default: a non-empty get_state(); a callback whose state is empty
  /// until an epoch has run (PlotHistory, ModelCheckpoint's best) says true.
  virtual bool keeps_state() const { return !get_state().empty(); }

  /// Once when fit starts, before the first epoch (logs empty). Default:
  /// nothing, as every hook.
  virtual void on_train_begin(Logs& logs) { (void)logs; }
  /// Once when fit ends, stopped early or not; logs: the last epoch's.
  virtual void on_train_end(Logs& logs) { (void)logs; }
  /// Before epoch `epoch`'s first batch (logs empty; a callback may add keys
  /// that on_epoch_end's logs then hold, as the learning-rate callbacks do).
  virtual void on_epoch_begin(int epoch, Logs& logs) { (void)epoch, (void)logs; }
  /// logs: the epoch's training metrics and, after validation, "val_" ones.
  virtual void on_epoch_end(int epoch, Logs& logs) { (void)epoch, (void)logs; }
  /// Before training batch `batch` of the epoch (logs empty).
  virtual void on_train_batch_begin(int64_t batch, Logs& logs) { (void)batch, (void)logs; }
  /// logs: the running means over the epoch's batches so far.
  virtual void on_train_batch_end(int64_t batch, Logs& logs) { (void)batch, (void)logs; }
  /// Around fit's validation pass; on_test_end gets the validation metrics
  /// without the "val_" prefix, as Keras.
  ///@{
  virtual void on_test_begin(Logs& logs) { (void)logs; }
  virtual void on_test_end(Logs& logs) { (void)logs; }
  ///@}

 private:
  Model* model_ = nullptr;
  const std::vector<Callback*>* fit_callbacks_ = nullptr;
  int rank_ = 0, world_size_ = 1;
};

}  // namespace tensorgrad::nn
