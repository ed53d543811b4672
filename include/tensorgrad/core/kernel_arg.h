#pragma once
// What a backend's kernel is handed for each tensor it reads or writes. It
// lives in core, beside Storage, because both halves of the device seam use
// it: the executable above the backend fills it, the backend's kernels read
// it, and neither needs the other's internals.
#include <cstdint>

#include "tensorgrad/core/dtype.h"
#include "tensorgrad/core/shape.h"

namespace tensorgrad {

/// One tensor argument of a kernel: contiguous row-major memory on the
/// backend's device, with the shape the current run gives it (a plan made
/// for a larger batch runs smaller ones) and its dtype. `data` is a device
/// address (Storage::data() plus a byte offset): only that device's backend
/// may dereference it. f() and i() type it for kernels whose device
/// addresses are host pointers (the CPU's); they never read memory.
struct KernelArg {
  void* data = nullptr;          ///< the device address of element 0
  Shape shape;                   ///< the shape at the current run's rows
  DType dtype = DType::Float32;  ///< the element type
  /// `data` as float32 or int32 elements (no check of dtype).
  ///@{
  float* f() const { return static_cast<float*>(data); }
  int32_t* i() const { return static_cast<int32_t*>(data); }
  ///@}
  /// The number of elements.
  int64_t numel() const { return shape.numel(); }
};

}  // namespace tensorgrad
