#include "core/host_copy.h"

#include <string>

#include "tensorgrad/core/error.h"

namespace tensorgrad::detail {

namespace {
// Checks elements [first, first + count) of t against `dtype`; returns the
// byte offset of `first`.
size_t element_offset(const Tensor& t, int64_t first, int64_t count, DType dtype, const char* call) {
  if (!t.defined()) throw StateError(std::string(call) + ": the tensor is undefined");
  if (t.dtype() != dtype)
    throw TypeError(std::string(call) + ": the tensor is " + dtype_name(t.dtype()) + "; got host values of " +
                    dtype_name(dtype) + ". Pass values of the tensor's dtype");
  if (count < 0 || first < 0 || first > t.numel() - count)
    throw IndexError(std::string(call) + ": elements [" + std::to_string(first) + ", " + std::to_string(first + count) +
                     ") are outside a tensor of " + std::to_string(t.numel()) + " elements");
  return size_t(first) * dtype_size(dtype);
}
}  // namespace

void copy_from_host(const Tensor& dst, int64_t first, const void* values, int64_t count, DType dtype) {
  const size_t offset = element_offset(dst, first, count, dtype, "copy_from_host");
  Tensor shared = dst;  // shares the storage: the copy lands in dst
  shared.copy_from_host(values, size_t(count) * dtype_size(dtype), offset);
}

void copy_to_host(const Tensor& src, int64_t first, void* values, int64_t count, DType dtype) {
  const size_t offset = element_offset(src, first, count, dtype, "copy_to_host");
  src.copy_to_host(values, size_t(count) * dtype_size(dtype), offset);
}

}  // namespace tensorgrad::detail
