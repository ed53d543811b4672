#pragma once
#include <cstddef>
#include <string>

namespace tensorgrad {

/// Element types. float32 is the default everywhere; int32 carries class and
/// token ids.
enum class DType { Float32, Int32 };

/// Bytes per element.
inline size_t dtype_size(DType) { return 4; }
/// "float32" or "int32".
inline const char* dtype_name(DType t) { return t == DType::Float32 ? "float32" : "int32"; }

/// Where a tensor's memory lives. Only the CPU exists now; the enum is the
/// seam a CUDA backend (planned) plugs into.
enum class Device { CPU };

}  // namespace tensorgrad
