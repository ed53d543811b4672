#pragma once
// Schedules of a hyper-parameter over the steps of a run: exploration rates,
// prioritized replay's importance exponent.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "tensorgrad/core/error.h"

namespace tensorgrad::rl {

/// A value going linearly from `start` to `end` over the first `steps` steps
/// and staying at `end` after (stable-baselines3's get_linear_fn with the
/// fraction given as steps; baselines' LinearSchedule): value(t) = start +
/// (end - start) min(t / steps, 1). With steps = 0 it is `end` from step 0.
struct LinearSchedule {
  double start = 1.0;  ///< the value at step 0
  double end = 1.0;    ///< the value from step `steps` on
  int64_t steps = 0;   ///< how many steps the change takes

  /// The value at step `t` (t < 0 counts as 0). Throws ValueError when the
  /// schedule is invalid (see check()).
  double value(int64_t t) const {
    check("LinearSchedule");
    if (steps == 0) return end;
    const double f = std::clamp(double(t) / double(steps), 0.0, 1.0);
    return start + (end - start) * f;
  }
  /// Throws ValueError, naming `owner`, for a NaN or infinite start or end or
  /// a negative steps.
  void check(const std::string& owner) const {
    if (!std::isfinite(start) || !std::isfinite(end) || steps < 0)
      throw ValueError(owner + ": a linear schedule needs finite start and end values and steps >= 0; got start " +
                       std::to_string(start) + ", end " + std::to_string(end) + ", steps " + std::to_string(steps));
  }
};

}  // namespace tensorgrad::rl
