#pragma once
// Checks a CallbackState before a callback's set_state applies it (nn and io
// callbacks share it). Private to the library.
#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <string>

#include "tensorgrad/core/error.h"
#include "tensorgrad/nn/callback.h"

namespace tensorgrad::nn::detail {

/// Reads the values of a state for the callback `who`; every error is a
/// ValueError naming `who` and the key. Call done() last: it refuses keys
/// nobody read and tensors unless `tensors_allowed`.
class StateReader {
 public:
  StateReader(const CallbackState& state, std::string who) : state_(state), who_(std::move(who)) {}

  /// A value that may be absent (an optional of the callback).
  std::optional<double> optional(const std::string& key) {
    read_.insert(key);
    auto it = state_.values.find(key);
    if (it == state_.values.end()) return std::nullopt;
    return it->second;
  }
  /// A value that must be there.
  double required(const std::string& key) {
    std::optional<double> v = optional(key);
    if (!v) throw ValueError(who_ + ".set_state: the state has no '" + key + "'; give a state from " + who_ +
                             ".get_state()");
    return *v;
  }
  /// A whole number in [lo, int max].
  int count(const std::string& key, int lo = 0) {
    const double v = required(key);
    if (!(v >= lo && v <= double(std::numeric_limits<int>::max()) && v == std::floor(v)))
      throw ValueError(who_ + ".set_state: '" + key + "' must be a whole number >= " + std::to_string(lo) +
                       "; got " + std::to_string(v));
    return int(v);
  }
  /// Refuses keys no call above asked for, and tensors when not allowed.
  void done(bool tensors_allowed = false) const {
    for (const auto& [k, v] : state_.values)
      if (!read_.count(k))
        throw ValueError(who_ + ".set_state: unknown key '" + k + "' in the state; give a state from " + who_ +
                         ".get_state()");
    if (!tensors_allowed && !state_.tensors.empty())
      throw ValueError(who_ + ".set_state: the state has tensors ('" + state_.tensors.front().first + "', ...) but " +
                       who_ + " keeps none here; give a state from " + who_ + ".get_state() of the same arguments");
  }

 private:
  const CallbackState& state_;
  std::string who_;
  std::set<std::string> read_;
};

}  // namespace tensorgrad::nn::detail
