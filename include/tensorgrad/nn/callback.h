#pragma once
// The callback interface of Model::fit (keras.callbacks.Callback, Keras 3).
// The built-in callbacks are in nn/callbacks.h; History (nn/history.h) is one.
#include <cstdint>
#include <map>
#include <string>

namespace tensorgrad::nn {

class Model;

/// Metric values by Keras key ("loss", "accuracy", "val_loss", ...). One map
/// is handed along the callbacks in order, so a callback may add keys (the
/// learning-rate callbacks add "learning_rate") that later ones, History
/// among them, see.
using Logs = std::map<std::string, double>;

/// Hooks fit calls, as Keras 3 names them. Epochs and batches count from 0.
/// A hook may stop training with model().set_stop_training(true): fit checks
/// the flag after every hook and ends after the current one (the epoch's
/// remaining batches are skipped; on_epoch_end and on_train_end still run).
/// Exceptions thrown by a hook leave fit at once, as the same object.
class Callback {
 public:
  virtual ~Callback() = default;
  /// The model being trained; throws StateError outside fit (set by fit
  /// before on_train_begin, cleared after on_train_end).
  Model& model() const;
  void set_model(Model* model) { model_ = model; }

  virtual void on_train_begin(Logs& logs) { (void)logs; }
  virtual void on_train_end(Logs& logs) { (void)logs; }
  virtual void on_epoch_begin(int epoch, Logs& logs) { (void)epoch, (void)logs; }
  /// logs: the epoch's training metrics and, after validation, "val_" ones.
  virtual void on_epoch_end(int epoch, Logs& logs) { (void)epoch, (void)logs; }
  virtual void on_train_batch_begin(int64_t batch, Logs& logs) { (void)batch, (void)logs; }
  /// logs: the running means over the epoch's batches so far.
  virtual void on_train_batch_end(int64_t batch, Logs& logs) { (void)batch, (void)logs; }
  /// Around fit's validation pass; on_test_end gets the validation metrics
  /// without the "val_" prefix, as Keras.
  virtual void on_test_begin(Logs& logs) { (void)logs; }
  virtual void on_test_end(Logs& logs) { (void)logs; }

 private:
  Model* model_ = nullptr;
};

}  // namespace tensorgrad::nn
