// Mini-batches over tensors (ag/data.h).
#include "tensorgrad/ag/data.h"

#include "ag/autograd.h"
#include "tensorgrad/backend/backend.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "tensorgrad/core/error.h"

namespace tensorgrad::ag {

namespace {

// Uniform in [0, bound) without modulo bias (rejection below 2^64 mod bound),
// so the permutation depends only on the Mersenne twister's outputs, not on
// the standard library's distributions (which differ between libraries).
uint64_t uniform_below(std::mt19937_64& engine, uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;
  uint64_t r;
  do r = engine();
  while (r < threshold);
  return r % bound;
}

int64_t rows_of(const tensorgrad::Tensor& t, const char* what) {
  if (t.shape().rank() < 1)
    throw ShapeError(std::string("DataLoader: ") + what + " must have a row dimension {N, ...}; got " +
                     t.shape().str());
  return t.shape()[0];
}

// Rows `order[begin, end)` of t, copied into a new tensor.
tensorgrad::Tensor gather_rows(const tensorgrad::Tensor& t, const std::vector<int64_t>& order, size_t begin,
                               size_t end) {
  std::vector<int64_t> dims(t.shape().begin(), t.shape().end());
  dims[0] = int64_t(end - begin);
  tensorgrad::Tensor out = tensorgrad::Tensor::empty(Shape(dims), t.dtype());
  const size_t row_bytes = t.shape()[0] == 0 ? 0 : t.nbytes() / size_t(t.shape()[0]);
  const auto* src = static_cast<const uint8_t*>(t.raw());
  auto* dst = static_cast<uint8_t*>(out.raw());
  for (size_t i = begin; i < end; ++i, dst += row_bytes)
    std::memcpy(dst, src + size_t(order[i]) * row_bytes, row_bytes);
  return out;
}

}  // namespace

DataLoader::DataLoader(Tensor x, DataLoaderOptions options) : DataLoader(std::move(x), Tensor(), options) {}

DataLoader::DataLoader(Tensor x, Tensor y, DataLoaderOptions options)
    : options_(options), generator_(options.seed) {
  if (!x.defined()) throw ValueError("DataLoader: the inputs x are undefined");
  if (options.batch_size < 1)
    throw ValueError("DataLoader: batch_size must be >= 1; got " + std::to_string(options.batch_size));
  if (x.device() != Device::CPU || (y.defined() && y.device() != Device::CPU))
    throw ValueError("DataLoader: the data set must be on the CPU (it reads rows on the host); got x on " +
                     x.device().str() + (y.defined() ? " and y on " + y.device().str() : std::string()) +
                     ". Pass CPU tensors and set DataLoaderOptions::device to get batches on a device");
  (void)backend(options.device);  // an unavailable device is refused here, not at the first batch
  x_ = x.data();
  n_ = rows_of(x_, "x");
  if (y.defined()) {
    y_ = y.data();
    const int64_t ny = rows_of(y_, "y");
    if (ny != n_)
      throw ShapeError("DataLoader: x and y must have the same number of rows (row i of x goes with row i of y); "
                       "got x " + x_.shape().str() + " and y " + y_.shape().str());
  }
}

size_t DataLoader::size() const {
  const int64_t b = options_.batch_size;
  return size_t(options_.drop_last || n_ % b == 0 ? n_ / b : n_ / b + 1);  // no n + b - 1: it overflows
}

DataLoader::Iterator DataLoader::begin() {
  Iterator it;
  it.loader_ = this;
  if (options_.shuffle) {
    auto order = std::make_shared<std::vector<int64_t>>(size_t(n_));
    for (int64_t i = 0; i < n_; ++i) (*order)[size_t(i)] = i;
    for (int64_t i = n_ - 1; i > 0; --i)
      std::swap((*order)[size_t(i)], (*order)[size_t(uniform_below(generator_.engine(), uint64_t(i) + 1))]);
    it.order_ = std::move(order);
  }
  return it;
}

DataLoader::Iterator DataLoader::end() const {
  Iterator it;
  it.loader_ = this;
  it.batch_ = size();
  return it;
}

Batch DataLoader::Iterator::operator*() const {
  if (!loader_) throw StateError("DataLoader::Iterator: dereferenced a default-constructed iterator");
  if (batch_ >= loader_->size())
    throw IndexError("DataLoader::Iterator: batch " + std::to_string(batch_) + " is past the end (" +
                     std::to_string(loader_->size()) + " batches)");
  return loader_->batch_at(batch_, order_.get());
}

Batch DataLoader::batch_at(size_t b, const std::vector<int64_t>* order) const {
  const size_t begin = b * size_t(options_.batch_size);
  const size_t end = std::min(begin + size_t(options_.batch_size), size_t(n_));
  Batch out;
  if (order) {
    out.x = Tensor(gather_rows(x_, *order, begin, end));
    if (y_.defined()) out.y = Tensor(gather_rows(y_, *order, begin, end));
  } else {
    out.x = Tensor(x_.rows(int64_t(begin), int64_t(end)));
    if (y_.defined()) out.y = Tensor(y_.rows(int64_t(begin), int64_t(end)));
  }
  if (options_.device != Device::CPU) {
    out.x = Tensor(detail::copy_to(out.x.data(), options_.device));
    if (out.y.defined()) out.y = Tensor(detail::copy_to(out.y.data(), options_.device));
  }
  return out;
}

}  // namespace tensorgrad::ag
