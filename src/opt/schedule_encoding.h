#pragma once
// How a LearningRateSchedule reaches the update graph: OptimizerTick's
// schedule kind (its attrs.flags) and the steps and values it reads
// (LrScheduleKind in ops/op.h). Internal to the library.
#include <cstdint>
#include <vector>

#include "tensorgrad/opt/schedules.h"

namespace tensorgrad {

struct EncodedSchedule {
  uint32_t kind = 0;  // an LrScheduleKind
  std::vector<int64_t> steps;
  std::vector<float> values;
};

/// The LrScheduleKind of a schedule: its variant index + 1 (checked in schedules.cpp).
inline uint32_t schedule_kind(const LearningRateSchedule& schedule) { return uint32_t(schedule.index()) + 1; }

/// The encoding of a valid schedule (call validate_schedule first).
EncodedSchedule encode_schedule(const LearningRateSchedule& schedule);

}  // namespace tensorgrad
