#pragma once
#include <cstdint>
#include <initializer_list>
#include <span>

#include "tensorgrad/core/tensor.h"
#include "tensorgrad/ops/op.h"

namespace tensorgrad {

/// A handle to a value inside a Builder (a graph node; an eager tensor in the planned eager API).
struct Value {
  int32_t id = -1;
  bool valid() const { return id >= 0; }
  bool operator==(const Value&) const = default;
};

/// The small interface every gradient rule and every layer is written
/// against. The lazy graph (graph/graph.h) records ops; the eager API
/// (planned) will run them at once. The typed helpers below all go through `apply`.
class Builder {
 public:
  virtual ~Builder() = default;

  /// Applies `op` to `inputs`; checks the shape rule (throws ShapeError /
  /// TypeError) and returns the result.
  virtual Value apply(OpKind op, std::span<const Value> inputs, const OpAttrs& attrs) = 0;
  /// A parameter (or other persistent tensor) bound into the computation.
  /// The same tensor memory given twice gives the same Value (shared layers).
  /// `trainable` false: no gradient flows to it, no update, no decay.
  virtual Value parameter(const Tensor& tensor, const char* name, bool trainable) = 0;
  /// Shape and dtype of a value; throw IndexError for a handle this builder did not make.
  virtual Shape shape(Value v) const = 0;
  virtual DType dtype(Value v) const = 0;

  Value apply(OpKind op, std::initializer_list<Value> inputs, const OpAttrs& attrs = {}) {
    return apply(op, std::span<const Value>(inputs.begin(), inputs.size()), attrs);
  }

  // Typed helpers; shapes as in op.h.
  Value matmul(Value a, Value b, bool trans_a = false, bool trans_b = false);
  Value add(Value a, Value b) { return apply(OpKind::Add, {a, b}); }
  Value sub(Value a, Value b) { return apply(OpKind::Sub, {a, b}); }
  Value mul(Value a, Value b) { return apply(OpKind::Mul, {a, b}); }
  /// Element-wise max(a, b) with NumPy broadcasting (shape as Add). The
  /// gradient goes to a where a >= b, to b elsewhere (TensorFlow's rule).
  Value maximum(Value a, Value b) { return apply(OpKind::Maximum, {a, b}); }
  /// Element-wise min(a, b) with NumPy broadcasting. The gradient goes to a
  /// where a <= b, to b elsewhere.
  Value minimum(Value a, Value b) { return apply(OpKind::Minimum, {a, b}); }
  /// x * s.
  Value scale(Value x, float s);
  Value relu(Value x) { return apply(OpKind::Relu, {x}); }
  Value sigmoid(Value x) { return apply(OpKind::Sigmoid, {x}); }
  Value tanh(Value x) { return apply(OpKind::Tanh, {x}); }
  Value softmax(Value x) { return apply(OpKind::Softmax, {x}); }
  Value log_softmax(Value x) { return apply(OpKind::LogSoftmax, {x}); }
  /// Mean over rows of weights[i] * cross-entropy(softmax(logits[i]), labels[i]).
  Value softmax_cross_entropy(Value logits, Value labels, Value weights = {});
  /// sum(weights * (pred - target)^2) / numel(pred), weights optional.
  Value mse_loss(Value pred, Value target, Value weights = {});
  /// pred, target {B, N}; weights {B} (per row) or {B, N} (per element), optional.
  /// Scalar sum(weights * |pred - target|) / (B N). Gradient sign(pred - target), 0 where equal.
  Value mae_loss(Value pred, Value target, Value weights = {});
  /// pred, target {B, N}; weights {B} or {B, N}, optional; delta > 0. With
  /// d = pred - target, per element e = d^2 / 2 where |d| <= delta, else
  /// delta (|d| - delta / 2) (Keras' Huber; PyTorch's smooth_l1 for delta = 1).
  /// Scalar sum(weights * e) / (B N).
  Value huber_loss(Value pred, Value target, float delta = 1.0f, Value weights = {});
  /// logits, targets {B, N} (targets in [0, 1]); weights {B} or {B, N}, optional.
  /// Scalar sum(weights * (max(z, 0) - z y + log1p(exp(-|z|)))) / (B N): the
  /// cross-entropy of sigmoid(z) against y, finite for any finite z.
  Value binary_cross_entropy(Value logits, Value targets, Value weights = {});
  /// Inverted dropout with drop probability `rate`, random stream `seed`.
  Value dropout(Value x, float rate, uint64_t seed);
  Value sum(Value x) { return apply(OpKind::Sum, {x}); }
  Value mean(Value x) { return apply(OpKind::Mean, {x}); }
  /// x summed down to `shape` (the adjoint of broadcasting); x itself when already that shape.
  Value sum_to(Value x, const Shape& shape);
  /// x expanded to `shape` by NumPy broadcasting; x itself when already that shape.
  Value broadcast_to(Value x, const Shape& shape);
  /// A constant of `shape` filled with `value`.
  Value fill(const Shape& shape, float value);
  /// The same elements under a new shape (a view: no copy).
  Value reshape(Value x, const Shape& shape);
  /// `length` entries of x from `start` along `axis`.
  Value slice(Value x, int axis, int64_t start, int64_t length);
  /// a and b joined along `axis`.
  Value concat(Value a, Value b, int axis);
  /// A one-input op with one float parameter (Elu alpha, LeakyRelu slope).
  Value unary(OpKind op, Value x, float param = 0.0f);
  /// Im2Col, MaxPool2D or AvgPool2D of x {B, H, W, C} with `window`.
  Value windowed(OpKind op, Value x, const Window2D& window);
};

}  // namespace tensorgrad
