#include "tensorgrad/core/shape.h"

#include "tensorgrad/core/error.h"

namespace tensorgrad {

Shape::Shape(std::initializer_list<int64_t> dims) : Shape(std::span<const int64_t>(dims.begin(), dims.size())) {}

Shape::Shape(std::span<const int64_t> dims) {
  if (dims.size() > size_t(kMaxRank))
    throw ShapeError("a shape has at most " + std::to_string(kMaxRank) + " dimensions; got " +
                     std::to_string(dims.size()));
  int64_t count = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 0)
      throw ShapeError("shape dimensions must be >= 0; dimension " + std::to_string(i) + " is " +
                       std::to_string(dims[i]));
    dims_[i] = dims[i];
    if (count != 0 && dims[i] != 0 && __builtin_mul_overflow(count, dims[i], &count))
      throw ShapeError("a shape's element count must fit in 64 bits; " + std::to_string(dims[i]) +
                       " overflows it at dimension " + std::to_string(i));
    if (dims[i] == 0) count = 0;
  }
  rank_ = int(dims.size());
}

void Shape::throw_out_of_range(int i) const {
  throw IndexError("dimension " + std::to_string(i) + " is out of range for shape " + str());
}

void Shape::set(int i, int64_t value) {
  int j = i < 0 ? i + rank_ : i;
  if (j < 0 || j >= rank_)
    throw IndexError("dimension " + std::to_string(i) + " is out of range for shape " + str());
  if (value < 0) throw ShapeError("shape dimensions must be >= 0; got " + std::to_string(value));
  const int64_t old = dims_[j];
  dims_[j] = value;
  try {
    Shape(std::span<const int64_t>(dims_.data(), size_t(rank_)));  // re-checks the element count
  } catch (...) {
    dims_[j] = old;
    throw;
  }
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

int64_t Shape::row_size() const {
  int64_t n = 1;
  for (int i = 1; i < rank_; ++i) n *= dims_[i];
  return n;
}

Shape Shape::with_rows(int64_t rows) const {
  if (rank_ == 0) throw ShapeError("a scalar has no rows to replace");
  Shape s = *this;
  s.set(0, rows);
  return s;
}

Shape Shape::with_batch(int64_t rows) const {
  if (rank_ == kMaxRank) throw ShapeError("cannot add a batch dimension to " + str() + ": already at the rank limit");
  int64_t dims[kMaxRank];
  dims[0] = rows;
  for (int i = 0; i < rank_; ++i) dims[i + 1] = dims_[i];
  return Shape(std::span<const int64_t>(dims, size_t(rank_ + 1)));
}

std::string Shape::str() const {
  std::string s = "{";
  for (int i = 0; i < rank_; ++i) {
    if (i) s += ", ";
    s += std::to_string(dims_[i]);
  }
  return s + "}";
}

bool Shape::operator==(const Shape& o) const {
  if (rank_ != o.rank_) return false;
  for (int i = 0; i < rank_; ++i)
    if (dims_[i] != o.dims_[i]) return false;
  return true;
}

}  // namespace tensorgrad
