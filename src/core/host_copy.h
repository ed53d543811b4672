#pragma once
// Host values into and out of persistent tensors, as backend copies
// (DESIGN.md: state lives on the device, in tensors). Every write of a host
// number into a weight, an optimizer slot, a step or random counter, the
// hyper-parameter tensor or a schedule goes through here (or through
// Tensor::copy_from of a host view), never through data<T>()[i] = v, so that
// a device backend only has to implement its Storage's host copies. They
// allocate nothing (Tensor::copy_from_host / copy_to_host).
#include <cstdint>
#include <span>

#include "tensorgrad/core/tensor.h"

namespace tensorgrad::detail {

/// Copies `count` elements of `dtype` from host memory `values` into elements
/// [first, first + count) of `dst` (flattened, row-major), as one
/// Tensor::copy_from_host. Throws StateError for an undefined `dst`, TypeError when
/// `dtype` is not dst's dtype, IndexError when the range leaves dst.
void copy_from_host(const Tensor& dst, int64_t first, const void* values, int64_t count, DType dtype);
/// Copies elements [first, first + count) of `src` (flattened) into host
/// memory `values` of `dtype`, as one Tensor::copy_to_host. Throws as copy_from_host.
void copy_to_host(const Tensor& src, int64_t first, void* values, int64_t count, DType dtype);

template <class T> constexpr DType host_dtype();
template <> constexpr DType host_dtype<float>() { return DType::Float32; }
template <> constexpr DType host_dtype<int32_t>() { return DType::Int32; }
template <> constexpr DType host_dtype<int64_t>() { return DType::Int64; }

/// Writes `values` into elements [first, first + values.size()) of `dst`
/// (T must be dst's element type, else TypeError).
template <class T>
void write_elements(const Tensor& dst, int64_t first, std::span<const T> values) {
  copy_from_host(dst, first, values.data(), int64_t(values.size()), host_dtype<T>());
}
/// Writes one host value into element `i` of `dst`.
template <class T>
void write_element(const Tensor& dst, int64_t i, T value) {
  copy_from_host(dst, i, &value, 1, host_dtype<T>());
}
/// Element `i` of `src`, read to the host exactly (int64 counters included,
/// which Tensor::item's float would round above 2^24).
template <class T>
T read_element(const Tensor& src, int64_t i) {
  T value{};
  copy_to_host(src, i, &value, 1, host_dtype<T>());
  return value;
}

}  // namespace tensorgrad::detail
