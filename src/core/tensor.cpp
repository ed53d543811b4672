#include "tensorgrad/core/tensor.h"

#include <cstdlib>
#include <cstring>

#include "tensorgrad/core/error.h"

namespace tensorgrad {

namespace {
constexpr size_t kAlignment = 64;

std::shared_ptr<void> allocate(const Shape& shape, DType dtype) {
  size_t bytes = 0;
  if (__builtin_mul_overflow(size_t(shape.numel()), dtype_size(dtype), &bytes) || bytes > (size_t(1) << 48))
    throw ValueError("a tensor of shape " + shape.str() + " is too large to allocate; use smaller dimensions");
  size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
  if (!p)
    throw MemoryError("out of memory allocating " + std::to_string(bytes) + " bytes for a tensor of shape " + shape.str() +
                "; use a smaller batch or model");
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}
}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype) {
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.holder_ = allocate(shape, dtype);
  t.data_ = t.holder_.get();
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  std::memset(t.data_, 0, t.nbytes());
  return t;
}

Tensor Tensor::full(const Shape& shape, float value) {
  Tensor t = empty(shape, DType::Float32);
  t.fill(value);
  return t;
}

Tensor Tensor::from_vector(std::span<const float> values, const Shape& shape) {
  if (int64_t(values.size()) != shape.numel())
    throw ShapeError("from_vector: shape " + shape.str() + " needs " + std::to_string(shape.numel()) +
                     " values; got " + std::to_string(values.size()));
  Tensor t = empty(shape, DType::Float32);
  if (!values.empty()) std::memcpy(t.data_, values.data(), t.nbytes());
  return t;
}

Tensor Tensor::from_vector(std::span<const int32_t> values, const Shape& shape) {
  if (int64_t(values.size()) != shape.numel())
    throw ShapeError("from_vector: shape " + shape.str() + " needs " + std::to_string(shape.numel()) +
                     " values; got " + std::to_string(values.size()));
  Tensor t = empty(shape, DType::Int32);
  if (!values.empty()) std::memcpy(t.data_, values.data(), t.nbytes());
  return t;
}

Tensor Tensor::view(void* data, const Shape& shape, DType dtype) {
  if (!data && shape.numel() > 0) throw ValueError("Tensor::view: null data for shape " + shape.str());
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.holder_ = std::shared_ptr<void>(data, [](void*) {});
  t.data_ = data;
  return t;
}

Tensor Tensor::adopt(std::shared_ptr<void> holder, const Shape& shape, DType dtype) {
  if (!holder && shape.numel() > 0) throw StateError("Tensor::adopt: null memory for shape " + shape.str());
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.data_ = holder.get();
  t.holder_ = std::move(holder);
  return t;
}

Tensor Tensor::view(const float* data, const Shape& shape) {
  return view(const_cast<float*>(data), shape, DType::Float32);
}

template <> float* Tensor::data<float>() const {
  if (!defined()) throw StateError("data<float>() on an undefined tensor");
  if (dtype_ != DType::Float32)
    throw TypeError(std::string("expected a float32 tensor; this one is ") + dtype_name(dtype_));
  return static_cast<float*>(data_);
}

template <> int32_t* Tensor::data<int32_t>() const {
  if (!defined()) throw StateError("data<int32_t>() on an undefined tensor");
  if (dtype_ != DType::Int32)
    throw TypeError(std::string("expected an int32 tensor; this one is ") + dtype_name(dtype_));
  return static_cast<int32_t*>(data_);
}

template <> int64_t* Tensor::data<int64_t>() const {
  if (!defined()) throw StateError("data<int64_t>() on an undefined tensor");
  if (dtype_ != DType::Int64)
    throw TypeError(std::string("expected an int64 tensor; this one is ") + dtype_name(dtype_));
  return static_cast<int64_t*>(data_);
}

float Tensor::item(int64_t i) const {
  if (!defined()) throw StateError("item() on an undefined tensor");
  if (i < 0 || i >= numel())
    throw IndexError("item(" + std::to_string(i) + ") is out of range for a tensor of " +
                     std::to_string(numel()) + " elements");
  switch (dtype_) {
    case DType::Float32: return static_cast<const float*>(data_)[i];
    case DType::Int32: return float(static_cast<const int32_t*>(data_)[i]);
    case DType::Int64: return float(static_cast<const int64_t*>(data_)[i]);
  }
  return 0.0f;
}

std::vector<float> Tensor::to_vector() const {
  std::vector<float> v(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) v[size_t(i)] = item(i);
  return v;
}

Tensor Tensor::clone() const {
  if (!defined()) return {};
  Tensor t = empty(shape_, dtype_);
  if (nbytes()) std::memcpy(t.data_, data_, nbytes());
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  if (!defined() || !src.defined()) throw StateError("copy_from needs two defined tensors");
  if (src.shape_ != shape_)
    throw ShapeError("copy_from: expected shape " + shape_.str() + "; got " + src.shape_.str());
  if (src.dtype_ != dtype_)
    throw TypeError(std::string("copy_from: expected ") + dtype_name(dtype_) + "; got " + dtype_name(src.dtype_));
  if (data_ != src.data_ && nbytes()) std::memmove(data_, src.data_, nbytes());
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  if (!defined()) throw StateError("rows() on an undefined tensor");
  if (shape_.rank() == 0) throw ShapeError("rows() on a scalar tensor");
  if (begin < 0 || end < begin || end > shape_[0])
    throw IndexError("rows [" + std::to_string(begin) + ", " + std::to_string(end) +
                     ") is outside a tensor of " + std::to_string(shape_[0]) + " rows");
  Tensor t = *this;
  t.shape_ = shape_.with_rows(end - begin);
  t.data_ = static_cast<char*>(data_) + size_t(begin * shape_.row_size()) * dtype_size(dtype_);
  return t;
}

Tensor Tensor::reshape(const Shape& shape) const {
  if (shape.numel() != numel())
    throw ShapeError("reshape: cannot view " + shape_.str() + " (" + std::to_string(numel()) +
                     " elements) as " + shape.str());
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

void Tensor::fill(float value) {
  float* p = data<float>();
  for (int64_t i = 0; i < numel(); ++i) p[i] = value;
}

}  // namespace tensorgrad
