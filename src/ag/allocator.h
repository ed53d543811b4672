#pragma once
// The eager API's caching allocator (as PyTorch's): tensor storage comes from
// blocks kept by size, so a training step that makes the same tensors every
// time reuses the same blocks and calls malloc only while warming up.
#include "tensorgrad/core/tensor.h"

namespace tensorgrad::ag::detail {

/// An uninitialised tensor whose storage is a cached block (64-byte aligned,
/// rounded up to 64 bytes), returned to the cache when its last copy goes.
/// Throws ValueError for an impossible size, MemoryError when out of memory.
tensorgrad::Tensor cached_empty(const Shape& shape, DType dtype);
/// The same on `device`: a block of the device's backend (rounded up to 256
/// bytes) from the cache of that device. Throws StateError when the device
/// is not available, MemoryError when it is out of memory even after its
/// cached blocks were freed.
tensorgrad::Tensor cached_empty(const Shape& shape, DType dtype, Device device);

}  // namespace tensorgrad::ag::detail
