#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "tensorgrad/core/dtype.h"
#include "tensorgrad/core/shape.h"

namespace tensorgrad {

/// A dense, row-major block of elements with a shape and a dtype.
///
/// Copying a Tensor shares its memory (as torch::Tensor does); `clone()` makes
/// an independent copy. A tensor either owns its memory (64-byte aligned,
/// freed with the last copy) or is a view of memory the caller owns, made by
/// `Tensor::view` without a copy; the caller then keeps that memory alive.
class Tensor {
 public:
  /// An undefined tensor (`defined()` is false).
  Tensor() = default;

  /// Uninitialised owning tensor. Throws ShapeError on a bad shape.
  static Tensor empty(const Shape& shape, DType dtype = DType::Float32);
  /// Owning tensor filled with zeros.
  static Tensor zeros(const Shape& shape, DType dtype = DType::Float32);
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
  /// A tensor over memory that `holder` owns (released with the last copy of
  /// the tensor): how an allocator hands out its blocks. `holder` must point
  /// at 64-byte aligned memory for shape.numel() elements of `dtype`.
  /// Throws StateError for a null holder with a non-empty shape.
  static Tensor adopt(std::shared_ptr<void> holder, const Shape& shape, DType dtype = DType::Float32);
  /// Read-only convenience for views of const float data. Writing through the
  /// result is the caller's responsibility to avoid.
  static Tensor view(const float* data, const Shape& shape);

  bool defined() const { return holder_ != nullptr; }
  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  Device device() const { return Device::CPU; }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }

  void* raw() const { return data_; }
  /// Typed pointer; throws TypeError if T does not match dtype().
  template <class T> T* data() const;

  /// Element i of the flattened tensor, as float (integers converted).
  /// Throws IndexError when out of range.
  float item(int64_t i = 0) const;
  /// A copy of the elements as floats.
  std::vector<float> to_vector() const;
  /// Independent owning copy.
  Tensor clone() const;
  /// Copies `src` into this tensor; shapes and dtypes must match (else ShapeError / TypeError).
  void copy_from(const Tensor& src);
  /// A view of rows [begin, end) along dimension 0 sharing this memory.
  /// Throws IndexError when the range is outside [0, shape[0]].
  Tensor rows(int64_t begin, int64_t end) const;
  /// A view with a new shape of the same element count (else ShapeError).
  Tensor reshape(const Shape& shape) const;
  /// Fills a float32 tensor with `value`.
  void fill(float value);

 private:
  std::shared_ptr<void> holder_;
  void* data_ = nullptr;
  Shape shape_;
  DType dtype_ = DType::Float32;
};

template <> float* Tensor::data<float>() const;
template <> int32_t* Tensor::data<int32_t>() const;
template <> int64_t* Tensor::data<int64_t>() const;

}  // namespace tensorgrad
