#pragma once
// Merge and shape layers (keras.layers): layers of several inputs for
// functional models (residual connections, branches joined), and Reshape.
#include <span>
#include <vector>

#include "tensorgrad/nn/layers.h"

namespace tensorgrad::nn {

/// Base of the element-wise merge layers (keras.layers.Add and the rest):
/// two or more inputs of equal shape (excluding the batch), or shapes that
/// broadcast NumPy's way where every dimension that differs is 1. Inputs of
/// different ranks, or of sizes that differ and are not 1, throw ShapeError;
/// fewer than two inputs throw ValueError. The output has the broadcast shape.
class Merge : public Layer {
 public:
  /// A merge layer called on one tensor: ValueError.
  Shape build(const Shape& input_shape) override;
  Shape build_inputs(std::span<const Shape> input_shapes) override;
  Value call(Builder& b, Value x, const CallOptions& options) override;
  Value call_inputs(Builder& b, std::span<const Value> inputs, const CallOptions& options) override;
  /// Element-wise: takes masked inputs (Keras' merges).
  bool supports_masking() const override { return true; }
  /// The inputs' masks combined (a step is kept where every masked input
  /// keeps it), as Keras' merges combine them.
  Value compute_mask(Builder& b, std::span<const Value> inputs, std::span<const Value> masks) override;

 protected:
  /// Automatic names from `prefix` ("add", "add_1", ...).
  explicit Merge(const char* prefix) : Layer(prefix) {}
  /// The merged value of two or more inputs (already checked).
  virtual Value merge(Builder& b, std::span<const Value> inputs) const = 0;
  /// The most inputs the layer takes (Subtract: 2).
  virtual size_t max_inputs() const { return SIZE_MAX; }
};

/// Sum of the inputs (keras.layers.Add): a residual connection.
class Add : public Merge {
 public:
  Add() : Merge("add") {}
  const char* type() const override { return "Add"; }
  std::shared_ptr<Layer> clone() const override { return clone_layer(*this); }

 protected:
  Value merge(Builder& b, std::span<const Value> inputs) const override;
};

/// First input minus the second (keras.layers.Subtract): exactly two inputs.
class Subtract : public Merge {
 public:
  Subtract() : Merge("subtract") {}
  const char* type() const override { return "Subtract"; }
  std::shared_ptr<Layer> clone() const override { return clone_layer(*this); }

 protected:
  Value merge(Builder& b, std::span<const Value> inputs) const override;
  size_t max_inputs() const override { return 2; }
};

/// Element-wise product of the inputs (keras.layers.Multiply).
class Multiply : public Merge {
 public:
  Multiply() : Merge("multiply") {}
  const char* type() const override { return "Multiply"; }
  std::shared_ptr<Layer> clone() const override { return clone_layer(*this); }

 protected:
  Value merge(Builder& b, std::span<const Value> inputs) const override;
};

/// Element-wise mean of the inputs (keras.layers.Average).
class Average : public Merge {
 public:
  Average() : Merge("average") {}
  const char* type() const override { return "Average"; }
  std::shared_ptr<Layer> clone() const override { return clone_layer(*this); }

 protected:
  Value merge(Builder& b, std::span<const Value> inputs) const override;
};

/// Element-wise maximum of the inputs (keras.layers.Maximum); the gradient
/// goes to the first of tied inputs (TensorFlow's rule).
class Maximum : public Merge {
 public:
  Maximum() : Merge("maximum") {}
  const char* type() const override { return "Maximum"; }
  std::shared_ptr<Layer> clone() const override { return clone_layer(*this); }

 protected:
  Value merge(Builder& b, std::span<const Value> inputs) const override;
};

/// Element-wise minimum of the inputs (keras.layers.Minimum).
class Minimum : public Merge {
 public:
  Minimum() : Merge("minimum") {}
  const char* type() const override { return "Minimum"; }
  std::shared_ptr<Layer> clone() const override { return clone_layer(*this); }

 protected:
  Value merge(Builder& b, std::span<const Value> inputs) const override;
};

/// Joins two or more inputs along `axis` (keras.layers.Concatenate). The axis
/// counts the batch as 0, as Keras: -1 (the default) is the last axis;
/// negative axes count from the end; the batch axis cannot be joined. Inputs
/// must have the same rank and equal sizes off the axis (ShapeError naming
/// the shapes otherwise).
class Concatenate : public Layer {
 public:
  LayerConfig config() const override;
  /// Throws ValueError for axis 0 (the batch).
  explicit Concatenate(int axis = -1);
  const char* type() const override { return "Concatenate"; }
  /// Called on one tensor: ValueError.
  Shape build(const Shape& input_shape) override;
  Shape build_inputs(std::span<const Shape> input_shapes) override;
  Value call(Builder& b, Value x, const CallOptions& options) override;
  Value call_inputs(Builder& b, std::span<const Value> inputs, const CallOptions& options) override;
  std::shared_ptr<Layer> clone() const override { return clone_layer(*this); }
  /// The axis joined along (negative counts from the end).
  int axis() const { return axis_; }

 private:
  int axis_;
  int resolved_ = 0;  // the axis in a tensor with the batch, once built
};

/// The same elements in `target_shape` (keras.layers.Reshape), batch kept:
/// {batch, ...} -> {batch, target_shape...}. One dimension may be -1, taken
/// from the element count. A view, no copy.
class Reshape : public Layer {
 public:
  LayerConfig config() const override;
  /// Throws ValueError for an empty shape, more than one -1, or another
  /// non-positive size.
  explicit Reshape(std::vector<int64_t> target_shape);
  const char* type() const override { return "Reshape"; }
  /// Throws ShapeError when the element counts differ (or -1 does not divide).
  Shape build(const Shape& input_shape) override;
  Value call(Builder& b, Value x, const CallOptions& options) override;
  std::shared_ptr<Layer> clone() const override { return clone_layer(*this); }

 private:
  std::vector<int64_t> target_;
  Shape resolved_;
};

}  // namespace tensorgrad::nn
