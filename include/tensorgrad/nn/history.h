#pragma once
#include <map>
#include <string>
#include <vector>

#include "tensorgrad/nn/callback.h"

namespace tensorgrad::nn {

/// What fit returns (keras.callbacks.History): per-epoch values of every
/// metric, keyed as Keras keys them ("loss", "accuracy", "val_loss",
/// "val_accuracy", and whatever callbacks add, such as "learning_rate"). A
/// callback: fit records into a History of its own, after every callback
/// given to it; one passed in FitOptions::callbacks records the same.
struct History : Callback {
  std::vector<int> epoch;  ///< 0-based epoch numbers that ran
  std::map<std::string, std::vector<double>> history;  ///< each log key's values, one per epoch in `epoch`
  /// The values of `key`; throws IndexError naming the keys there are.
  const std::vector<double>& operator[](const std::string& key) const;
  /// Whether some epoch recorded `key`.
  bool has(const std::string& key) const { return history.count(key) > 0; }
  /// Writes the training curves as a PNG (plot_history in nn/callbacks.h).
  bool plot(const std::string& png_path) const;
  const char* type() const override { return "History"; }

  /// Starts a new epoch list (the values recorded so far stay, as Keras).
  void on_train_begin(Logs& logs) override;
  /// Appends `epoch` and every value of `logs` under its key.
  void on_epoch_end(int epoch, Logs& logs) override;
};

}  // namespace tensorgrad::nn
