// The data adapter (nn/data_adapter.h): fit, evaluate, predict and the
// per-batch calls check their data here, once.
#include "nn/data_adapter.h"

#include "opt/data_checks.h"
#include "tensorgrad/core/error.h"

namespace tensorgrad::nn::detail {

Batch rows_of(const Batch& b, int64_t begin, int64_t end) {
  Batch out;
  for (const Tensor& t : b.x) out.x.push_back(t.rows(begin, end));
  for (const Tensor& t : b.y) out.y.push_back(t.rows(begin, end));
  if (b.sample_weight.defined()) out.sample_weight = b.sample_weight.rows(begin, end);
  return out;
}

AdaptedData AdaptedData::rows_of(int64_t begin, int64_t end) const {
  AdaptedData out;
  static_cast<Batch&>(out) = detail::rows_of(*this, begin, end);
  out.rows = end - begin;
  return out;
}

std::unique_ptr<TensorSource> AdaptedData::source(int64_t batch_size, std::mt19937_64* shuffle_rng,
                                                  std::string label) const {
  return std::make_unique<TensorSource>(x, y, sample_weight, batch_size, shuffle_rng, std::move(label));
}

DataAdapter::DataAdapter(const Model& model, const char* call) : model_(model.model_function()), call_(call) {}

namespace {
// One weight per row, as Keras' sample_weight (per-element weights are the
// Trainer's loss_mask), float32; returns it as {rows} (a view). Allocates
// nothing unless it throws.
Tensor per_row(const Tensor& w, int64_t rows, const char* call, const char* weight) {
  if (w.numel() != rows) {
    const std::string n = std::to_string(rows);
    throw ValueError(std::string(call) + ": " + weight + " must be one weight per row ({" + n + "} or {" + n +
                     ", 1}), as in Keras; got " + w.shape().str() +
                     ". For one weight per output element, use a Trainer with loss_mask = outputs");
  }
  if (w.dtype() != DType::Float32)
    throw TypeError(std::string(call) + ": " + weight + " must be float32; got " + dtype_name(w.dtype()));
  return w.shape().rank() == 1 ? w : w.reshape(Shape{rows});
}
}  // namespace

AdaptedData DataAdapter::counted(std::span<const Tensor> x, std::span<const Tensor> y, const Tensor& w, bool targets,
                                 const char* weight) const {
  AdaptedData out;
  const std::span<const Tensor> weights = w.defined() ? std::span<const Tensor>(&w, 1) : std::span<const Tensor>();
  out.rows = tensorgrad::detail::check_data(tensorgrad::detail::DataNames::of(call_, model_, weight), x, y, weights, -1,
                                            {.targets = targets});
  out.y.assign(y.begin(), y.end());
  if (w.defined()) out.sample_weight = per_row(w, out.rows, call_, weight);
  return out;
}

AdaptedData DataAdapter::arrays(std::span<const Tensor> x, std::span<const Tensor> y, const Tensor& w,
                                const char* prefix) const {
  AdaptedData out = counted(x, y, w, true, *prefix ? "validation_sample_weight" : "sample_weight");
  if (out.rows == 0)
    throw ValueError(std::string(call_) + ": " + prefix + "x has no rows; give at least one row");
  const auto names = tensorgrad::detail::DataNames::of(call_, model_);
  for (size_t i = 0; i < x.size(); ++i) out.x.push_back(model_.inputs[i].check(x[i], out.rows, prefix + names.x(i)));
  return out;
}

AdaptedData DataAdapter::inputs(std::span<const Tensor> x) const {
  AdaptedData out = counted(x, {}, {}, false, "sample_weight");
  const auto names = tensorgrad::detail::DataNames::of(call_, model_);
  for (size_t i = 0; i < x.size(); ++i) out.x.push_back(model_.inputs[i].check(x[i], out.rows, names.x(i)));
  return out;
}

int64_t check_batch(const tensorgrad::detail::DataNames& names, const Batch& b, int64_t max_rows, Tensor& weight) {
  const std::span<const Tensor> weights =
      b.sample_weight.defined() ? std::span<const Tensor>(&b.sample_weight, 1) : std::span<const Tensor>();
  const int64_t rows = tensorgrad::detail::check_data(names, b.x, b.y, weights, -1);
  if (rows == 0) throw ValueError(std::string(names.call) + ": x has no rows; give at least one row");
  if (max_rows > 0 && rows > max_rows)
    throw ShapeError(std::string(names.call) + ": the batch has " + std::to_string(rows) + " rows, more than batch_size " +
                     std::to_string(max_rows) + " (graphs are planned for it): raise batch_size");
  weight = b.sample_weight.defined() ? per_row(b.sample_weight, rows, names.call, names.weight) : Tensor{};
  return rows;
}

void DataAdapter::check_targets(const OptimizerContext& ctx, const AdaptedData& data) {
  for (size_t i = 0; i < data.y.size(); ++i) ctx.check_targets(i, data.y[i], data.sample_weight, -1);
}

}  // namespace tensorgrad::nn::detail
