#pragma once
#include <cstddef>
#include <string>

#include "tensorgrad/core/device.h"

namespace tensorgrad {

/// Element types. float32 is the default everywhere; int32 carries class and
/// token ids; int64 carries counters that must not saturate (optimizer steps).
enum class DType { Float32, Int32, Int64 };

/// Bytes per element.
inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::Float32:
    case DType::Int32: return 4;
    case DType::Int64: return 8;
  }
  return 4;
}
/// "float32", "int32" or "int64".
inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
  }
  return "?";
}

}  // namespace tensorgrad
