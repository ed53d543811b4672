#pragma once
// Metrics by their Keras names, resolved against the loss of their output.
#include <string>

#include "tensorgrad/opt/losses.h"

namespace tensorgrad {

/// Metrics by their Keras names: each a per-row quantity averaged over the
/// rows of an epoch (rmse: the square root of the epoch's mse).
enum class MetricKind {
  BinaryAccuracy,             // "binary_accuracy": share of elements on the right side of 0.5
  CategoricalAccuracy,        // "categorical_accuracy": argmax of the output == argmax of one-hot y
  SparseCategoricalAccuracy,  // "sparse_categorical_accuracy": argmax of the output == the class id
  TopKCategoricalAccuracy,    // "top_k_categorical_accuracy": k = 5, one-hot y
  SparseTopKCategoricalAccuracy,  // "sparse_top_k_categorical_accuracy": k = 5, class ids
  MeanAbsoluteError,          // "mae"
  MeanSquaredError,           // "mse"
  RootMeanSquaredError        // "rmse"
};
/// The metric `name` means for an output trained with `loss`: "accuracy" (or
/// "acc") resolves from the loss as Keras does (sparse -> sparse categorical,
/// categorical -> categorical, binary -> binary accuracy). Throws ValueError
/// for an unknown name, for "accuracy" after a loss it cannot resolve from
/// (mse, mae, huber, custom), and for a metric whose targets the loss's
/// label form cannot give (class ids against one-hot metrics and back).
MetricKind metric_from_name(const std::string& name, LossKind loss);

}  // namespace tensorgrad
