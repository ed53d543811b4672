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
  const int64_t c = input_shape[-1];
  gamma_ = Tensor::full(Shape{c}, 1.0f);
  beta_ = Tensor::zeros(Shape{c});
  moving_mean_ = Tensor::zeros(Shape{c});
  moving_variance_ = Tensor::full(Shape{c}, 1.0f);
  return input_shape;
}

Value BatchNormalization::call(Builder& b, Value x, const CallOptions& options) {
  if (!gamma_.defined()) throw StateError(name() + " was called before build()");
  const Shape c{gamma_.numel()};
  Value gamma = b.parameter(gamma_, (name() + "/gamma").c_str(), trainable);
  Value beta = b.parameter(beta_, (name() + "/beta").c_str(), trainable);
  Value moving_mean = b.parameter(moving_mean_, (name() + "/moving_mean").c_str(), false);
  Value moving_var = b.parameter(moving_variance_, (name() + "/moving_variance").c_str(), false);
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

std::vector<Weight> BatchNormalization::weights() const {
  return {{name() + "/gamma", gamma_, trainable},
          {name() + "/beta", beta_, trainable},
          {name() + "/moving_mean", moving_mean_, false, false},
          {name() + "/moving_variance", moving_variance_, false, false}};
}

LayerNormalization::LayerNormalization(float epsilon) : Layer("layer_normalization"), epsilon_(epsilon) {
  if (!(epsilon > 0.0f)) throw ValueError("LayerNormalization: epsilon must be > 0; got " + std::to_string(epsilon));
}

Shape LayerNormalization::build(const Shape& input_shape) {
  gamma_ = Tensor::full(Shape{input_shape[-1]}, 1.0f);
  beta_ = Tensor::zeros(Shape{input_shape[-1]});
  return input_shape;
}

Value LayerNormalization::call(Builder& b, Value x, const CallOptions&) {
  if (!gamma_.defined()) throw StateError(name() + " was called before build()");
  Value centered = b.sub(x, b.apply(OpKind::MeanLastAxis, {x}));
  Value var = b.apply(OpKind::MeanLastAxis, {b.mul(centered, centered)});
  Value inv_std = b.apply(OpKind::Rsqrt, {b.add(var, b.fill(Shape{}, epsilon_))});
  Value gamma = b.parameter(gamma_, (name() + "/gamma").c_str(), trainable);
  Value beta = b.parameter(beta_, (name() + "/beta").c_str(), trainable);
  return b.add(b.mul(b.mul(centered, inv_std), gamma), beta);
}

std::vector<Weight> LayerNormalization::weights() const {
  return {{name() + "/gamma", gamma_, trainable}, {name() + "/beta", beta_, trainable}};
}

LayerConfig BatchNormalization::config() const {
  LayerConfig c(type());
  c.set("momentum", double(momentum_)).set("epsilon", double(epsilon_)).set("freeze_stats", freeze_stats);
  return c;
}

LayerConfig LayerNormalization::config() const { return LayerConfig(type()).set("epsilon", double(epsilon_)); }

}  // namespace tensorgrad::nn
