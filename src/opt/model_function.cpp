#include "tensorgrad/opt/model_function.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "opt/context_parts.h"
#include "tensorgrad/core/error.h"

namespace tensorgrad {

using detail::check_finite;
using detail::check_rows;

namespace {
// Index of the first NaN or infinity, or -1. Integer test on the exponent
// bits, which vectorises without fast-math.
int64_t first_non_finite(const float* p, int64_t n) {
  const uint32_t* bits = reinterpret_cast<const uint32_t*>(p);
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; ++i) bad |= uint32_t((bits[i] & 0x7f800000u) == 0x7f800000u);
  if (!bad) return -1;
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(p[i])) return i;
  return -1;
}
}  // namespace

namespace detail {

void check_finite(const Tensor& t, const char* what) {
  const int64_t bad = first_non_finite(t.data<float>(), t.numel());
  if (bad < 0) return;
  const int64_t cols = t.shape().rank() > 0 ? std::max<int64_t>(t.shape().row_size(), 1) : 1;
  throw ValueError(std::string(what) + " contains " + (std::isnan(t.data<float>()[bad]) ? "NaN" : "infinity") +
                   " at row " + std::to_string(bad / cols) + ", column " + std::to_string(bad % cols) +
                   "; remove or impute non-finite values first");
}

void check_rows(const Tensor& t, int64_t rows, const char* what) {
  if (!t.defined()) throw ValueError(std::string(what) + " is an undefined tensor");
  if (t.shape().rank() == 0) throw ShapeError(std::string(what) + " must have a batch dimension; got a scalar");
  if (rows >= 0 && t.shape()[0] != rows)
    throw ShapeError(std::string(what) + " must have exactly " + std::to_string(rows) + (rows == 1 ? " row" : " rows") +
                     " (the batch size); got " +
                     std::to_string(t.shape()[0]) + ". Pass batches of exactly that size or build for another batch size");
}
}  // namespace detail

Tensor check_input_shape(const Tensor& x, const Shape& input_shape, int64_t rows, const char* what) {
  check_rows(x, rows, what);
  const Shape full = input_shape.with_batch(x.shape()[0]);
  if (x.shape() == full) return x;
  const bool flattened = x.shape().rank() == 2 && x.shape()[1] == input_shape.numel();
  if (flattened) return x.reshape(full);
  if (x.shape() == input_shape)  // one sample without its batch dimension
    throw ShapeError(std::string(what) + " has the shape of one sample, " + input_shape.str() +
                     ", with no batch dimension; pass it as " + input_shape.with_batch(1).str() +
                     " (x.reshape(" + input_shape.with_batch(1).str() + ")), or stack samples along a first dimension");
  std::string message = std::string(what) + " must be " + full.str() +
                        " ({rows, input_shape...} for the model's input_shape " + input_shape.str() + ")";
  if (input_shape.rank() > 1) message += " or its flattened form " + Shape{x.shape()[0], input_shape.numel()}.str();
  throw ShapeError(message + "; got " + x.shape().str() + ". Reshape it, or build the model for this input_shape");
}

Tensor check_features(const Tensor& x, const Shape& input_shape, int64_t rows, const char* what) {
  const Tensor shaped = check_input_shape(x, input_shape, rows, what);
  if (x.dtype() != DType::Float32)
    throw TypeError(std::string(what) + " must be float32; got " + dtype_name(x.dtype()));
  check_finite(shaped, what);
  return shaped;
}

Tensor InputSpec::check(const Tensor& x, int64_t rows, const std::string& what, Tensor* staging) const {
  if (dtype == DType::Float32) {
    Tensor checked = check_features(x, shape, rows, what.c_str());
    if (validate) validate(checked);
    return checked;
  }
  // Token ids: int32 is bound as it is; float32 holding whole numbers is
  // checked, then converted into `staging` (kept by the caller, so a step
  // converts without allocating) or into a new tensor.
  const Tensor shaped = check_input_shape(x, shape, rows, what.c_str());
  if (x.dtype() == DType::Int32) {
    if (validate) validate(shaped);
    return shaped;
  }
  if (x.dtype() != DType::Float32)
    throw TypeError(what + " holds token ids: int32, or float32 holding whole numbers; got " + dtype_name(x.dtype()));
  check_finite(shaped, what.c_str());
  if (validate) validate(shaped);
  Tensor ids;
  if (staging && staging->defined() && staging->shape() == shaped.shape()) ids = *staging;
  else ids = Tensor::empty(shaped.shape(), DType::Int32);
  if (staging) *staging = ids;
  const float* src = shaped.data<float>();
  int32_t* dst = ids.data<int32_t>();
  for (int64_t i = 0; i < ids.numel(); ++i) dst[i] = int32_t(src[i]);
  return ids;
}

}  // namespace tensorgrad
