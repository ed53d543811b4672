// The data adapter (nn/data_adapter.h): fit, evaluate, predict and the
// per-batch calls check their data here, once.
#include "nn/data_adapter.h"

#include <algorithm>
#include <cmath>

#include "opt/data_checks.h"
#include "tensorgrad/core/error.h"

namespace tensorgrad::nn::detail {

namespace {
// Per-row weights for the first `rows` rows of y: class_weight of each row's
// class (class ids, or the argmax of one-hot rows; 1 for a class not in the
// map), times `base` (sample_weight) when given.
Tensor class_weighted(const std::map<int, float>& class_weight, const Tensor& y, const Tensor& base, int64_t rows) {
  for (const auto& [c, w] : class_weight)
    if (!(w >= 0.0f) || !std::isfinite(w))
      throw ValueError("class_weight of class " + std::to_string(c) + " must be finite and >= 0; got " +
                       std::to_string(w));
  Tensor out = Tensor::empty(Shape{rows});
  float* o = out.data<float>();
  const int64_t width = y.shape().rank() >= 2 ? y.shape().row_size() : 1;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t id;
    if (y.dtype() == DType::Int32) {
      id = y.data<int32_t>()[r * width];
    } else if (width == 1) {
      const float v = y.data<float>()[r];
      id = std::isfinite(v) && std::fabs(v) < 2e9f ? int64_t(v) : -1;  // a bad id is refused by the label check next
    } else {  // one-hot or probabilities: the argmax, as Keras
      const float* row = y.data<float>() + r * width;
      id = std::max_element(row, row + width) - row;
    }
    auto it = class_weight.find(int(id));
    o[r] = (it == class_weight.end() ? 1.0f : it->second) * (base.defined() ? base.data<float>()[r] : 1.0f);
  }
  return out;
}

}  // namespace

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

FitData fit_data(const Model& model, std::span<const Tensor> x, std::span<const Tensor> y, const FitOptions& opt) {
  FitData d{DataAdapter(model, "fit").arrays(x, y, opt.sample_weight), {}};
  if (opt.validation_data) {
    d.validation = DataAdapter(model, "validation_data")
                       .arrays(std::span<const Tensor>(&opt.validation_data->first, 1),
                               std::span<const Tensor>(&opt.validation_data->second, 1), opt.validation_sample_weight,
                               "validation ");
  } else if (!opt.validation_x.empty() || !opt.validation_y.empty()) {
    d.validation = DataAdapter(model, "validation_x/validation_y")
                       .arrays(opt.validation_x, opt.validation_y, opt.validation_sample_weight, "validation ");
  } else if (opt.validation_split > 0.0) {
    // The last rows, with their weights, as Keras splits them.
    const int64_t n_train = int64_t(double(d.train.rows) * (1.0 - opt.validation_split));
    if (n_train < d.train.rows) d.validation = d.train.rows_of(n_train, d.train.rows);
    d.train = d.train.rows_of(0, n_train);
  }
  if (d.train.rows < 1) throw ValueError("no rows left to train on after validation_split");
  // class_weight weighs the training rows only (Keras applies it to the
  // training data, after validation_split), times their sample_weight.
  if (!opt.class_weight.empty())
    d.train.sample_weight = class_weighted(opt.class_weight, d.train.y[0], d.train.sample_weight, d.train.rows);
  return d;
}

}  // namespace tensorgrad::nn::detail
