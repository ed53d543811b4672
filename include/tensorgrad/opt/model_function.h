#pragma once
// What an optimizer context needs from a model: its inputs (with the checks
// a batch must pass) and a function that builds its forward pass into a
// graph. Model and Sequential provide one; so can any other code that builds
// a graph.
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "tensorgrad/core/tensor.h"
#include "tensorgrad/ops/builder.h"

namespace tensorgrad {

/// One input of a model: its name, shape without the batch, dtype (float32,
/// or int32 for token ids), and an optional check of values the graph cannot
/// check (token ids against a vocabulary).
struct InputSpec {
  std::string name;              ///< the input's name (Input()'s)
  Shape shape;                   ///< without the batch
  DType dtype = DType::Float32;  ///< float32, or int32 for token ids
  /// Given x as {rows, shape...} in float32 or int32; throws the error that
  /// fits the bad value (IndexError for a token id outside the vocabulary),
  /// naming it.
  std::function<void(const Tensor& x)> validate;

  /// x as the graph takes it: {rows, shape...} of `dtype`. x must be {rows,
  /// shape...} or {rows, product(shape)} (rows exactly `rows` when rows >= 0;
  /// ShapeError naming both shapes otherwise), finite (ValueError), and pass
  /// validate. For an int32 input, float32 ids holding whole numbers are
  /// converted into `*staging` when it has the right shape (no allocation),
  /// else into a new tensor that is also stored there; int32 x is returned as
  /// a view. Throws TypeError for other dtypes. `what` names x in messages.
  Tensor check(const Tensor& x, int64_t rows, const std::string& what, Tensor* staging = nullptr) const;
};

/// How a model's forward pass is built into a graph, the one contract
/// between a model and the optimizer context: input specs, named outputs, and `forward(b, inputs, training)`
/// returning one value per output, {batch, output_shape...}, for inputs
/// {batch, input_shape...} in the order of `inputs`. Outputs are the model's
/// full outputs (probabilities after a softmax); a loss head folds a final
/// softmax into cross-entropy by looking at the op that produced the output.
struct ModelFunction {
  std::vector<InputSpec> inputs;          ///< one per model input, in order
  std::vector<std::string> output_names;  ///< one per output, in order
  /// Builds the forward pass into `b`; `training` selects dropout and batch
  /// statistics.
  std::function<std::vector<Value>(Builder& b, std::span<const Value> inputs, bool training)> forward;
  /// Which outputs carry a Keras mask {batch, steps} (padding from an
  /// Embedding with mask_zero); empty: none does.
  std::vector<bool> masked_outputs;
  /// forward that also gives each output's mask (an invalid Value where it
  /// has none), for losses that skip the padding; set when masked_outputs is.
  std::function<std::vector<Value>(Builder& b, std::span<const Value> inputs, bool training,
                                   std::vector<Value>& masks)>
      forward_with_masks;
};

/// Checks a batch's shape against a model's input: x must be {rows,
/// input_shape...} or {rows, product(input_shape)} (the flattened form), with
/// exactly `rows` rows when rows >= 0. Returns x viewed as {rows,
/// input_shape...}; throws ShapeError naming both shapes otherwise.
Tensor check_input_shape(const Tensor& x, const Shape& input_shape, int64_t rows, const char* what = "x");
/// check_input_shape, then float32 (TypeError) and finite (ValueError naming
/// the row and column of the first NaN or infinity).
Tensor check_features(const Tensor& x, const Shape& input_shape, int64_t rows, const char* what = "x");

}  // namespace tensorgrad
