#include "tensorgrad/nn/normalization.h"

#include "tensorgrad/core/error.h"

namespace tensorgrad::nn {

BatchNormalization::BatchNormalization(float momentum, float epsilon)
    : Layer("batch_normalization"), momentum_(momentum), epsilon_(epsilon) {
  if (!(momentum >= 0.0f && momentum < 1.0f))
    throw ValueError("BatchNormalization: momentum must be in [0, 1); got " + std::to_string(momentum));
  if (!(epsilon > 0.0f)) throw ValueError("BatchNormalization: epsilon must be > 0; got " + std::to_string(epsilon));
}

Shape BatchNormalization::build(const Shape& input_shape) {
  const Shape c{input_shape[-1]};
  gamma_ = add_weight({.name = "gamma", .shape = c, .initializer = initializers::ones()});
  beta_ = add_weight({.name = "beta", .shape = c, .initializer = initializers::zeros()});
  moving_mean_ =
      add_weight({.name = "moving_mean", .shape = c, .initializer = initializers::zeros(), .trainable = false});
  moving_variance_ =
      add_weight({.name = "moving_variance", .shape = c, .initializer = initializers::ones(), .trainable = false});
  return input_shape;
}

Value BatchNormalization::call(Builder& b, Value x, const CallOptions& options) {
  Value gamma = bind_weight(b, gamma_);
  Value beta = bind_weight(b, beta_);
  Value moving_mean = bind_weight(b, moving_mean_);
  Value moving_var = bind_weight(b, moving_variance_);
  const Shape c = b.shape(gamma);
  const bool batch_stats = options.calibrate || (options.training && trainable);
  const int64_t channels = c[0];
  OpAttrs at;
  at.eps = epsilon_;
  at.own_stats = batch_stats;
  Value stats;
  if (batch_stats) {
    stats = b.apply(OpKind::BatchNormStats, {x});
    if (options.calibrate || !freeze_stats) {
      OpAttrs update;
      update.momentum = options.calibrate ? 0.0f : momentum_;  // calibration sets them exactly
      b.apply(OpKind::MovingAverage, {moving_mean, b.reshape(b.slice(stats, 0, 0, 1), c)}, update);
      b.apply(OpKind::MovingAverage, {moving_var, b.reshape(b.slice(stats, 0, 1, 1), c)}, update);
    }
  } else {
    OpAttrs rows;
    rows.axis = 0;
    stats = b.apply(OpKind::Concat,
                    {b.reshape(moving_mean, Shape{1, channels}), b.reshape(moving_var, Shape{1, channels})}, rows);
  }
  // One fused op (kernels/batch_norm.cpp): ten passes over x forward and twenty backward when composed.
  return b.apply(OpKind::BatchNorm, {x, stats, gamma, beta}, at);
}

LayerNormalization::LayerNormalization(float epsilon) : Layer("layer_normalization"), epsilon_(epsilon) {
  if (!(epsilon > 0.0f)) throw ValueError("LayerNormalization: epsilon must be > 0; got " + std::to_string(epsilon));
}

Shape LayerNormalization::build(const Shape& input_shape) {
  const Shape features{input_shape[-1]};
  gamma_ = add_weight({.name = "gamma", .shape = features, .initializer = initializers::ones()});
  beta_ = add_weight({.name = "beta", .shape = features, .initializer = initializers::zeros()});
  return input_shape;
}

Value LayerNormalization::call(Builder& b, Value x, const CallOptions&) {
  const Value gamma = bind_weight(b, gamma_);  // bound in declaration order, as every layer binds
  const Value beta = bind_weight(b, beta_);
  return b.layer_norm(x, epsilon_, gamma, beta);
}

LayerConfig BatchNormalization::config() const {
  LayerConfig c(type());
  c.set("momentum", double(momentum_)).set("epsilon", double(epsilon_)).set("freeze_stats", freeze_stats);
  return c;
}

LayerConfig LayerNormalization::config() const { return LayerConfig(type()).set("epsilon", double(epsilon_)); }

}  // namespace tensorgrad::nn
