#include "tensorgrad/core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tensorgrad/core/error.h"

namespace tensorgrad {

namespace {
size_t checked_bytes(const Shape& shape, DType dtype) {
  size_t bytes = 0;
  if (__builtin_mul_overflow(size_t(shape.numel()), dtype_size(dtype), &bytes) || bytes > (size_t(1) << 48))
    throw ValueError("a tensor of shape " + shape.str() + " is too large to allocate; use smaller dimensions");
  return bytes;
}
}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  const size_t bytes = checked_bytes(shape, dtype);
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  if (device == Device::CPU) {
    try {
      t.storage_ = CpuStorage::allocate(bytes);
    } catch (const MemoryError&) {
      throw MemoryError("out of memory allocating " + std::to_string(bytes) + " bytes for a tensor of shape " +
                        shape.str() + "; use a smaller batch or model");
    }
  } else {
    t.storage_ = allocate_storage(device, bytes);
  }
  t.data_ = t.storage_->data();
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (device == Device::CPU) {
    std::memset(t.data_, 0, t.nbytes());
  } else {
    const std::vector<char> host(t.nbytes(), 0);
    t.copy_from_host(host.data(), host.size());
  }
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
  t.storage_ = CpuStorage::wrap(data, checked_bytes(shape, dtype));
  t.data_ = data;
  return t;
}

Tensor Tensor::adopt(std::shared_ptr<Storage> storage, const Shape& shape, DType dtype, size_t offset) {
  if (!storage) throw StateError("Tensor::adopt: null storage for shape " + shape.str());
  const size_t bytes = checked_bytes(shape, dtype);
  if (offset > storage->nbytes() || storage->nbytes() - offset < bytes)
    throw StateError("Tensor::adopt: a storage of " + std::to_string(storage->nbytes()) + " bytes cannot hold shape " +
                     shape.str() + " of " + dtype_name(dtype) + " (" + std::to_string(bytes) + " bytes) from byte " +
                     std::to_string(offset));
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.data_ = static_cast<char*>(storage->data()) + offset;
  t.storage_ = std::move(storage);
  return t;
}

size_t Tensor::storage_offset() const {
  return storage_ ? size_t(static_cast<const char*>(data_) - static_cast<const char*>(storage_->data())) : 0;
}

void Tensor::check_host(const char* what) const {
  if (!storage_) throw StateError(std::string(what) + " on an undefined tensor");
  if (storage_->device() != Device::CPU)
    throw StateError(std::string(what) + " needs a CPU tensor; this one is on " + device_name(storage_->device()) +
                     ": copy it with to(Device::CPU)");
}

Tensor Tensor::view(const float* data, const Shape& shape) {
  return view(const_cast<float*>(data), shape, DType::Float32);
}

template <> float* Tensor::data<float>() const {
  check_host("data<float>()");
  if (dtype_ != DType::Float32)
    throw TypeError(std::string("expected a float32 tensor; this one is ") + dtype_name(dtype_));
  return static_cast<float*>(data_);
}

template <> int32_t* Tensor::data<int32_t>() const {
  check_host("data<int32_t>()");
  if (dtype_ != DType::Int32)
    throw TypeError(std::string("expected an int32 tensor; this one is ") + dtype_name(dtype_));
  return static_cast<int32_t*>(data_);
}

template <> int64_t* Tensor::data<int64_t>() const {
  check_host("data<int64_t>()");
  if (dtype_ != DType::Int64)
    throw TypeError(std::string("expected an int64 tensor; this one is ") + dtype_name(dtype_));
  return static_cast<int64_t*>(data_);
}

float Tensor::item(int64_t i) const {
  if (!defined()) throw StateError("item() on an undefined tensor");
  if (i < 0 || i >= numel())
    throw IndexError("item(" + std::to_string(i) + ") is out of range for a tensor of " +
                     std::to_string(numel()) + " elements");
  const size_t size = dtype_size(dtype_);
  alignas(8) char bytes[8];
  const char* at = static_cast<const char*>(data_) + size_t(i) * size;
  if (storage_->device() != Device::CPU) {
    copy_to_host(bytes, size, size_t(i) * size);
    at = bytes;
  }
  switch (dtype_) {
    case DType::Float32: { float v; std::memcpy(&v, at, 4); return v; }
    case DType::Int32: { int32_t v; std::memcpy(&v, at, 4); return float(v); }
    case DType::Int64: { int64_t v; std::memcpy(&v, at, 8); return float(v); }
  }
  return 0.0f;
}

std::vector<float> Tensor::to_vector() const {
  if (defined() && storage_->device() != Device::CPU) return to(Device::CPU).to_vector();
  std::vector<float> v(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) v[size_t(i)] = item(i);
  return v;
}

Tensor Tensor::clone() const {
  if (!defined()) return {};
  Tensor t = empty(shape_, dtype_, device());
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(Device device) const {
  if (!defined() || this->device() == device) return *this;
  Tensor t = empty(shape_, dtype_, device);
  t.copy_from(*this);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  if (!defined() || !src.defined()) throw StateError("copy_from needs two defined tensors");
  if (src.shape_ != shape_)
    throw ShapeError("copy_from: expected shape " + shape_.str() + "; got " + src.shape_.str());
  if (src.dtype_ != dtype_)
    throw TypeError(std::string("copy_from: expected ") + dtype_name(dtype_) + "; got " + dtype_name(src.dtype_));
  if (!nbytes() || data_ == src.data_) return;
  copy_bytes(*storage_, storage_offset(), *src.storage_, src.storage_offset(), nbytes());
}

void Tensor::copy_from_host(const void* src, size_t bytes, size_t offset) {
  if (!defined()) throw StateError("copy_from_host on an undefined tensor");
  if (offset > nbytes() || bytes > nbytes() - offset)
    throw IndexError("copy_from_host: bytes [" + std::to_string(offset) + ", " + std::to_string(offset) + " + " +
                     std::to_string(bytes) + ") are outside a tensor of " + std::to_string(nbytes()) + " bytes");
  storage_->copy_from_host(storage_offset() + offset, src, bytes);
}

void Tensor::copy_to_host(void* dst, size_t bytes, size_t offset) const {
  if (!defined()) throw StateError("copy_to_host on an undefined tensor");
  if (offset > nbytes() || bytes > nbytes() - offset)
    throw IndexError("copy_to_host: bytes [" + std::to_string(offset) + ", " + std::to_string(offset) + " + " +
                     std::to_string(bytes) + ") are outside a tensor of " + std::to_string(nbytes()) + " bytes");
  storage_->copy_to_host(storage_offset() + offset, dst, bytes);
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
  if (defined() && storage_->device() != Device::CPU) {
    if (dtype_ != DType::Float32)
      throw TypeError(std::string("fill: expected a float32 tensor; this one is ") + dtype_name(dtype_));
    const std::vector<float> host(size_t(numel()), value);
    copy_from_host(host.data(), nbytes());
    return;
  }
  float* p = data<float>();
  for (int64_t i = 0; i < numel(); ++i) p[i] = value;
}

}  // namespace tensorgrad
