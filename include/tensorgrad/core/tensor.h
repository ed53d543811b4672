#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "tensorgrad/core/dtype.h"
#include "tensorgrad/core/shape.h"
#include "tensorgrad/core/storage.h"

namespace tensorgrad {

/// A dense, row-major block of elements with a shape and a dtype, on a
/// device.
///
/// Copying a Tensor shares its memory (as torch::Tensor does); `clone()` makes
/// an independent copy. The memory is a Storage (core/storage.h) that the
/// tensor views from a byte offset: owned (64-byte aligned, freed with the
/// last copy), a view of memory the caller owns, made by `Tensor::view`
/// without a copy (the caller then keeps that memory alive), or memory of
/// another device. Element access from the host (data<T>(), item, fill,
/// to_vector) needs a CPU tensor and throws StateError otherwise; copies
/// (copy_from, clone, to) work across devices.
class Tensor {
 public:
  /// An undefined tensor (`defined()` is false).
  Tensor() = default;

  /// Uninitialised owning tensor on `device`. Throws ShapeError on a bad
  /// shape, ValueError when too large, StateError when the device has no
  /// backend (allocate_storage).
  static Tensor empty(const Shape& shape, DType dtype = DType::Float32, Device device = Device::CPU);
  /// Owning tensor filled with zeros (same errors).
  static Tensor zeros(const Shape& shape, DType dtype = DType::Float32, Device device = Device::CPU);
  /// Owning float32 tensor filled with `value`.
  static Tensor full(const Shape& shape, float value);
  /// Owning float32 tensor holding a copy of `values`, which must have
  /// `shape.numel()` elements (else ShapeError).
  static Tensor from_vector(std::span<const float> values, const Shape& shape);
  /// Owning int32 tensor holding a copy of `values` (same rule).
  static Tensor from_vector(std::span<const int32_t> values, const Shape& shape);
  /// A view of caller memory: no copy, no ownership. `data` must hold
  /// `shape.numel()` elements of `dtype` and outlive every use of the view.
  static Tensor view(void* data, const Shape& shape, DType dtype = DType::Float32);
  /// A tensor over `storage` from byte `offset` on (shared with the
  /// tensor's copies): how an allocator or a backend hands out its blocks,
  /// and how an executable shows a result inside its arena on any device.
  /// Throws StateError for a null storage or one that holds fewer than
  /// shape.numel() elements of `dtype` after `offset`.
  static Tensor adopt(std::shared_ptr<Storage> storage, const Shape& shape, DType dtype = DType::Float32,
                      size_t offset = 0);
  /// Read-only convenience for views of const float data. Writing through the
  /// result is the caller's responsibility to avoid.
  static Tensor view(const float* data, const Shape& shape);

  /// Whether it holds memory (false for a default-constructed tensor).
  bool defined() const { return storage_ != nullptr; }
  /// The shape, outermost first.
  const Shape& shape() const { return shape_; }
  /// The element type.
  DType dtype() const { return dtype_; }
  /// The device of the storage (CPU for an undefined tensor).
  Device device() const { return storage_ ? storage_->device() : Device::CPU; }
  /// The number of elements (1 for a scalar {}).
  int64_t numel() const { return shape_.numel(); }
  /// The elements' size in bytes.
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }
  /// The memory this tensor views, and where in it (bytes) element 0 is.
  ///@{
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  size_t storage_offset() const;
  ///@}

  /// The device address of element 0 (a host pointer for a CPU tensor): for
  /// kernels of the tensor's device, not for host code on another device.
  void* raw() const { return data_; }
  /// Typed host pointer; throws TypeError if T does not match dtype() and
  /// StateError for an undefined or non-CPU tensor.
  template <class T> T* data() const;

  /// Element i of the flattened tensor, as float (integers converted), read
  /// from any device. Throws IndexError when out of range.
  float item(int64_t i = 0) const;
  /// A host copy of the elements as floats, from any device.
  std::vector<float> to_vector() const;
  /// Independent owning copy on the same device.
  Tensor clone() const;
  /// This tensor on `device`: itself (shared) when already there, else an
  /// owning copy (torch.Tensor.to). Throws StateError as allocate_storage.
  Tensor to(Device device) const;
  /// Copies `src` into this tensor, from any device (a backend copy); shapes
  /// and dtypes must match (else ShapeError / TypeError).
  void copy_from(const Tensor& src);
  /// Copies `bytes` host bytes into this tensor from byte `offset` on (how a
  /// host value reaches persistent state on any device). Throws IndexError
  /// when [offset, offset + bytes) is outside nbytes().
  void copy_from_host(const void* src, size_t bytes, size_t offset = 0);
  /// Copies this tensor's bytes [offset, offset + bytes) to host memory
  /// (same IndexError).
  void copy_to_host(void* dst, size_t bytes, size_t offset = 0) const;
  /// A view of rows [begin, end) along dimension 0 sharing this memory.
  /// Throws IndexError when the range is outside [0, shape[0]].
  Tensor rows(int64_t begin, int64_t end) const;
  /// A view with a new shape of the same element count (else ShapeError).
  Tensor reshape(const Shape& shape) const;
  /// Fills a float32 tensor with `value` (on any device: a host pattern is
  /// copied in). Throws TypeError for another dtype.
  void fill(float value);

 private:
  void check_host(const char* what) const;

  std::shared_ptr<Storage> storage_;
  void* data_ = nullptr;
  Shape shape_;
  DType dtype_ = DType::Float32;
};

/// Tensor::data for the element types there are: float32, int32, int64.
///@{
template <> float* Tensor::data<float>() const;
template <> int32_t* Tensor::data<int32_t>() const;
template <> int64_t* Tensor::data<int64_t>() const;
///@}

}  // namespace tensorgrad
