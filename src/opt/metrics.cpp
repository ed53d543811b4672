#include <string>

#include "opt/context_parts.h"
#include "tensorgrad/core/error.h"
#include "tensorgrad/graph/graph.h"
#include "tensorgrad/opt/metrics.h"

namespace tensorgrad {

MetricKind metric_from_name(const std::string& name, LossKind loss) {
  const bool sparse = loss == LossKind::SparseCategoricalCrossentropy;
  MetricKind kind;
  if (name == "accuracy" || name == "acc") {
    switch (loss) {
      case LossKind::SparseCategoricalCrossentropy: return MetricKind::SparseCategoricalAccuracy;
      case LossKind::CategoricalCrossentropy: return MetricKind::CategoricalAccuracy;
      case LossKind::BinaryCrossentropy: return MetricKind::BinaryAccuracy;
      case LossKind::MeanSquaredError:
      case LossKind::MeanAbsoluteError:
      case LossKind::Huber:
      case LossKind::Custom: break;
    }
    throw ValueError("metric \"" + name + "\" needs a cross-entropy loss to resolve from; the output is compiled with \"" +
                     loss_name(loss) + "\". Name the metric (binary_accuracy, categorical_accuracy, mae, ...)");
  } else if (name == "binary_accuracy") kind = MetricKind::BinaryAccuracy;
  else if (name == "categorical_accuracy") kind = MetricKind::CategoricalAccuracy;
  else if (name == "sparse_categorical_accuracy") kind = MetricKind::SparseCategoricalAccuracy;
  else if (name == "top_k_categorical_accuracy") kind = MetricKind::TopKCategoricalAccuracy;
  else if (name == "sparse_top_k_categorical_accuracy") kind = MetricKind::SparseTopKCategoricalAccuracy;
  else if (name == "mae" || name == "mean_absolute_error") kind = MetricKind::MeanAbsoluteError;
  else if (name == "mse" || name == "mean_squared_error") kind = MetricKind::MeanSquaredError;
  else if (name == "rmse" || name == "root_mean_squared_error") kind = MetricKind::RootMeanSquaredError;
  else
    throw ValueError("unknown metric '" + name +
                     "'; supported: accuracy, binary_accuracy, categorical_accuracy, sparse_categorical_accuracy, "
                     "top_k_categorical_accuracy, sparse_top_k_categorical_accuracy, mae, mse, rmse");
  const bool wants_ids = kind == MetricKind::SparseCategoricalAccuracy || kind == MetricKind::SparseTopKCategoricalAccuracy;
  if (wants_ids != sparse)
    throw ValueError("metric \"" + name + "\" takes " + (wants_ids ? "class ids" : "targets shaped as the output") +
                     ", but the output's loss \"" + loss_name(loss) + "\" takes " +
                     (sparse ? "class ids" : "targets shaped as the output"));
  return kind;
}

namespace detail {

Value build_metric(Graph& g, MetricKind kind, Value y_pred_flat, Value y_flat, int64_t outputs) {
  Value v;
  OpAttrs at;
  switch (kind) {
    case MetricKind::CategoricalAccuracy:
    case MetricKind::SparseCategoricalAccuracy: v = g.apply(OpKind::Accuracy, {y_pred_flat, y_flat}); break;
    case MetricKind::TopKCategoricalAccuracy:
    case MetricKind::SparseTopKCategoricalAccuracy:
      at.k = 5;
      v = g.apply(OpKind::TopKAccuracy, {y_pred_flat, y_flat}, at);
      break;
    case MetricKind::BinaryAccuracy:
      at.threshold = 0.5f;
      v = g.scale(g.apply(OpKind::BinaryAccuracy, {y_pred_flat, y_flat}, at), 1.0f / float(outputs));
      break;
    case MetricKind::MeanAbsoluteError: v = g.mae_loss(y_pred_flat, y_flat); break;  // means: times the rows in run()
    case MetricKind::MeanSquaredError:
    case MetricKind::RootMeanSquaredError: v = g.mse_loss(y_pred_flat, y_flat); break;
  }
  return v;
}

bool metric_is_mean(MetricKind kind) {
  return kind == MetricKind::MeanAbsoluteError || kind == MetricKind::MeanSquaredError ||
         kind == MetricKind::RootMeanSquaredError;
}

}  // namespace detail
}  // namespace tensorgrad
