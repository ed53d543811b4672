#pragma once
// Losses by their Keras names, custom losses, and the loss weights a context
// takes. A loss head per output turns them into graph ops (a final softmax
// or sigmoid folded into cross-entropy on logits).
#include <functional>
#include <string>

#include "tensorgrad/ops/builder.h"

namespace tensorgrad {

/// Losses by their Keras names; Custom is a user's LossFunction.
enum class LossKind {
  MeanSquaredError,
  MeanAbsoluteError,
  Huber,
  BinaryCrossentropy,
  CategoricalCrossentropy,
  SparseCategoricalCrossentropy,
  Custom
};
/// "mse" / "mean_squared_error", "mae" / "mean_absolute_error", "huber"
/// (delta 1: Keras' Huber, PyTorch's smooth_l1_loss with beta 1, the usual
/// DQN loss), "binary_crossentropy" (a final sigmoid folded into the loss,
/// exact for large logits; a linear output is taken as logits),
/// "categorical_crossentropy", "sparse_categorical_crossentropy". Throws
/// ValueError for any other name, listing the accepted ones.
LossKind loss_from_name(const std::string& name);
/// Keras' name of a built-in loss; "custom" for Custom.
const char* loss_name(LossKind loss);

/// A user's loss, one per output like the built-in ones: from the targets
/// y_true and the model's output y_pred (both {batch, ...} as the output),
/// the per-row losses {batch}. The head multiplies them by the sample weights
/// and divides by the row count (Keras' sum over batch size), so a custom
/// loss is the same kind of thing as a built-in one. Any other result shape
/// is a ShapeError naming the loss.
using LossFunction = std::function<Value(Builder& b, Value y_true, Value y_pred)>;

/// One output's loss: a built-in one by its Keras name, or a custom function
/// with a name of its own (for messages and History keys).
struct Loss {
  LossKind kind = LossKind::MeanSquaredError;  ///< which loss; Custom for a function
  std::string name = "mse";  ///< the Keras name, or the custom loss's own
  LossFunction function;     ///< Custom only
  /// Mean squared error.
  Loss() = default;
  /// A built-in loss by name; throws as loss_from_name. Implicit, so "mse"
  /// reads as a loss.
  ///@{
  Loss(const char* name);         // NOLINT: implicit, so "mse" reads as a loss
  Loss(const std::string& name);  // NOLINT
  ///@}
  /// A custom loss; throws ValueError for an empty function or name.
  Loss(std::string name, LossFunction function);
};

/// Loss weights: none, one per sample ({batch} or {batch, 1}), or one per
/// output element ({batch, outputs}; a loss mask, for mse, huber and mae).
enum class LossWeights { None, PerSample, PerOutput };

}  // namespace tensorgrad
