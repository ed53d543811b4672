#include "core/host_copy.h"

#include <cstring>
#include <string>

#include "tensorgrad/core/error.h"

namespace tensorgrad::detail {

namespace {
// Elements [first, first + count) of t, flattened: a view sharing t's memory
// (reshape and rows copy the holder, so nothing is allocated).
Tensor element_range(const Tensor& t, int64_t first, int64_t count, DType dtype, const char* call) {
  if (!t.defined()) throw StateError(std::string(call) + ": the tensor is undefined");
  if (t.dtype() != dtype)
    throw TypeError(std::string(call) + ": the tensor is " + dtype_name(t.dtype()) + "; got host values of " +
                    dtype_name(dtype) + ". Pass values of the tensor's dtype");
  if (count < 0 || first < 0 || first > t.numel() - count)
    throw IndexError(std::string(call) + ": elements [" + std::to_string(first) + ", " + std::to_string(first + count) +
                     ") are outside a tensor of " + std::to_string(t.numel()) + " elements");
  return t.reshape(Shape{t.numel()}).rows(first, first + count);
}

// A host staging buffer per thread and dtype, and a view of it made once.
struct Staging {
  alignas(64) unsigned char bytes[kStagingElements * 8];
  Tensor view[3];  // by dtype: float32, int32, int64
  Tensor of(DType dtype, int64_t count) {
    const int k = dtype == DType::Float32 ? 0 : dtype == DType::Int32 ? 1 : 2;
    if (!view[k].defined()) view[k] = Tensor::view(bytes, Shape{kStagingElements}, dtype);
    return view[k].rows(0, count);
  }
};
Staging& staging() {
  thread_local Staging s;
  return s;
}
}  // namespace

void copy_from_host(const Tensor& dst, int64_t first, const void* values, int64_t count, DType dtype) {
  Tensor range = element_range(dst, first, count, dtype, "copy_from_host");
  if (count == 0) return;
  if (count <= kStagingElements) {
    Tensor stage = staging().of(dtype, count);
    std::memcpy(stage.raw(), values, size_t(count) * dtype_size(dtype));  // host to host
    range.copy_from(stage);
    return;
  }
  range.copy_from(Tensor::view(const_cast<void*>(values), Shape{count}, dtype));  // read only
}

void copy_to_host(const Tensor& src, int64_t first, void* values, int64_t count, DType dtype) {
  const Tensor range = element_range(src, first, count, dtype, "copy_to_host");
  if (count == 0) return;
  if (count <= kStagingElements) {
    Tensor stage = staging().of(dtype, count);
    stage.copy_from(range);
    std::memcpy(values, stage.raw(), size_t(count) * dtype_size(dtype));  // host to host
    return;
  }
  Tensor::view(values, Shape{count}, dtype).copy_from(range);
}

}  // namespace tensorgrad::detail
