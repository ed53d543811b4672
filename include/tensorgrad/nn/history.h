#pragma once
#include <map>
#include <string>
#include <vector>

namespace tensorgrad::nn {

/// What fit returns (keras.callbacks.History): per-epoch values of every
/// metric, keyed as Keras keys them ("loss", "accuracy", "val_loss",
/// "val_accuracy").
struct History {
  std::vector<int> epoch;  // 0-based epoch numbers that ran
  std::map<std::string, std::vector<double>> history;
  /// The values of `key`; throws IndexError naming the keys there are.
  const std::vector<double>& operator[](const std::string& key) const;
  bool has(const std::string& key) const { return history.count(key) > 0; }
};

}  // namespace tensorgrad::nn
