// The errors of ids outside their range, one text for every backend: the
// CPU's kernels throw them, a device's kernels report the id and the host
// throws them after the submit.
#pragma once

#include <cstdint>

#include "tensorgrad/core/error.h"

namespace tensorgrad::kernels {

/// A gather (embedding lookup) id outside [0, rows) at `position` of the ids.
IndexError gather_id_error(int64_t id, int64_t position, int64_t rows);
/// A sparse cross-entropy class id outside [0, classes) at row `position`.
IndexError class_id_error(int64_t id, int64_t position, int64_t classes);

}  // namespace tensorgrad::kernels
