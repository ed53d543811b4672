// The data checks (opt/data_checks.h): the per-input ones (shape, dtype,
// finite values, token ids) and the counts and rows around them, shared by
// the optimizer context's steps and nn's data adapter.
#include "opt/data_checks.h"

#include <cmath>
#include <cstdint>

#include "tensorgrad/core/error.h"
#include "tensorgrad/opt/optimizer.h"

namespace tensorgrad {

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

using detail::check_finite;
using detail::check_rows;

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

namespace detail {
std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

namespace {
std::string count_message(const DataNames& names, size_t got, bool inputs) {
  std::vector<std::string> list(names.outputs.begin(), names.outputs.end());
  if (inputs) {
    list.clear();
    for (size_t i = 0; i < names.inputs(); ++i) list.push_back(names.input(i));
  }
  return std::string(names.call) + ": the model has " + std::to_string(list.size()) + (inputs ? " input" : " output") +
         "(s) (" + joined(list) + "); got " + std::to_string(got) + (inputs ? " x" : " target") + " tensor(s)";
}

int64_t rows_of(const Tensor& t) { return t.shape()[0]; }
}  // namespace

std::string DataNames::x(size_t i) const {
  return inputs() == 1 ? std::string("x") : "x '" + input(i) + "'";
}

std::string DataNames::y(size_t i) const {
  return outputs.size() == 1 ? std::string("y") : "y '" + outputs[i] + "'";
}

int64_t check_data(const DataNames& names, std::span<const Tensor> x, std::span<const Tensor> y,
                   std::span<const Tensor> w, int64_t rows, DataRules rules) {
  const std::span<const std::string> outputs = names.outputs;
  if (x.size() != names.inputs()) throw ShapeError(count_message(names, x.size(), true));
  if (rules.targets && y.size() != outputs.size()) throw ShapeError(count_message(names, y.size(), false));
  const bool per_output = rules.weight_per_output && w.size() == outputs.size();
  if (w.size() > 1 && !per_output)
    throw ShapeError(std::string(names.call) + ": give " +
                     (rules.weight_per_output ? "no sample_weight, one for all outputs or one per output (" +
                                                    std::to_string(outputs.size()) + ")"
                                              : std::string("no sample_weight or one for all outputs")) +
                     "; got " + std::to_string(w.size()) + " sample_weight tensor(s)");
  // Nothing is formatted unless a check fails: the optimizer context runs
  // these on every step without allocating. With rows >= 0 every tensor is
  // held to it (check_rows says "exactly"); else to the first input's rows.
  auto fits = [rows](const Tensor& t) { return t.defined() && t.shape().rank() > 0 && (rows < 0 || t.shape()[0] == rows); };
  for (size_t i = 0; i < x.size(); ++i) {
    if (!fits(x[i])) check_rows(x[i], rows, names.x(i).c_str());
    if (rows < 0 && i > 0 && rows_of(x[i]) != rows_of(x[0]))
      throw ShapeError(std::string(names.call) + ": inputs differ in rows: '" + names.input(0) + "' has " +
                       std::to_string(rows_of(x[0])) + ", '" + names.input(i) + "' has " +
                       std::to_string(rows_of(x[i])) + "; give every input the same rows");
  }
  const int64_t n = rows >= 0 ? rows : x.empty() ? 0 : rows_of(x[0]);
  for (size_t i = 0; i < y.size(); ++i) {
    if (!fits(y[i])) check_rows(y[i], rows, names.y(i).c_str());
    if (rows_of(y[i]) != n)
      throw ShapeError(std::string(names.call) + ": x has " + std::to_string(n) + " rows but " + names.y(i) + " has " +
                       std::to_string(rows_of(y[i])) + "; give one label row per input row");
  }
  for (size_t i = 0; i < w.size(); ++i) {
    if (!w[i].defined()) continue;  // no weights (for this output)
    auto name = [&] {
      return std::string(names.weight) + (per_output && w.size() > 1 ? " '" + outputs[i] + "'" : std::string());
    };
    if (!fits(w[i])) check_rows(w[i], rows, name().c_str());
    if (rows_of(w[i]) != n)
      throw ShapeError(std::string(names.call) + ": " + name() + " must have one weight per row of x (" + std::to_string(n) + "); got " +
                       w[i].shape().str());
  }
  return n;
}
}  // namespace detail

}  // namespace tensorgrad
