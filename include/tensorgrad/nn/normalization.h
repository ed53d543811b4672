#pragma once
// Normalization layers (keras.layers), over the last (channel) axis.
#include "tensorgrad/nn/layers.h"

namespace tensorgrad::nn {

/// Batch normalization (keras.layers.BatchNormalization, axis -1):
/// y = (x - mean) / sqrt(var + epsilon) * gamma + beta per channel.
/// Training uses the batch's mean and (biased) variance over every axis but
/// the last, and updates moving_mean and moving_variance every training step
/// with Keras' momentum: moving = momentum * moving + (1 - momentum) * batch,
/// as persistent tensors updated by ops of the training graph. Prediction uses
/// the moving statistics. A layer with trainable = false runs in inference
/// mode (as Keras); with freeze_stats set, training uses batch statistics but
/// leaves the moving ones unchanged. Weights: gamma (ones), beta (zeros),
/// moving_mean (zeros), moving_variance (ones), each {channels}.
class BatchNormalization : public Layer {
 public:
  LayerConfig config() const override;
  /// Throws ValueError unless 0 <= momentum < 1 and epsilon > 0.
  explicit BatchNormalization(float momentum = 0.99f, float epsilon = 1e-3f);
  const char* type() const override { return "BatchNormalization"; }
  Shape build(const Shape& input_shape) override;
  Value call(Builder& b, Value x, const CallOptions& options) override;
  std::shared_ptr<Layer> clone() const override { return clone_layer(*this); }
  /// Training steps leave the moving statistics unchanged (Sequential::freeze_bn_stats).
  bool freeze_stats = false;

 private:
  float momentum_, epsilon_;
  WeightId gamma_, beta_, moving_mean_, moving_variance_;
};

/// Layer normalization (keras.layers.LayerNormalization, axis -1): each row
/// normalized over its last axis, then scaled by gamma (ones) and shifted by
/// beta (zeros), both {features}.
class LayerNormalization : public Layer {
 public:
  LayerConfig config() const override;
  /// Throws ValueError unless epsilon > 0.
  explicit LayerNormalization(float epsilon = 1e-3f);
  const char* type() const override { return "LayerNormalization"; }
  /// Normalizes each step alone: passes a mask on.
  bool supports_masking() const override { return true; }
  Shape build(const Shape& input_shape) override;
  Value call(Builder& b, Value x, const CallOptions& options) override;
  std::shared_ptr<Layer> clone() const override { return clone_layer(*this); }

 private:
  float epsilon_;
  WeightId gamma_, beta_;
};

}  // namespace tensorgrad::nn
