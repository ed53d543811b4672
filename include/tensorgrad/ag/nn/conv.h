#pragma once
// Convolution, normalization, embedding and pooling modules of the eager API,
// as torch.nn names them, with PyTorch's argument names, parameter and
// buffer names, layouts and default initialisations, so a PyTorch state dict
// converts by name (Conv2d's weight stays {out, in, kh, kw}). Activations
// keep the engine's channels-last layouts: images are {N, H, W, C}, where
// PyTorch's are {N, C, H, W}; move the channel axis last to feed one the
// other's data. Every module here is in the type registry
// (module_from_config rebuilds it from config()).
//
// Square kernels, strides, paddings and dilations only (one int each, as
// torch accepts for a square window); PyTorch's padding_mode,
// padding_idx, ceil_mode and the like are not built.
#include <cstdint>
#include <memory>
#include <string>

#include "tensorgrad/ag/nn/module.h"

namespace tensorgrad::ag::nn {

/// 2-D convolution, as torch.nn.Conv2d (zero padding).
///
/// Parameters: weight {out_channels, in_channels / groups, kernel_size,
/// kernel_size} (PyTorch's layout), bias {out_channels} unless bias = false;
/// both drawn U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in_channels /
/// groups * kernel_size^2,
/// from ag::default_generator() (PyTorch's kaiming_uniform_(a = sqrt(5)) and
/// its bias rule).
///
/// forward: x {N, H, W, in_channels} -> {N, Ho, Wo, out_channels}, Ho =
/// (H + 2 padding - dilation (kernel_size - 1) - 1) / stride + 1 (Wo alike).
/// The weight is permuted to the engine's {kh, kw, C, F} by recorded ops, so
/// gradients reach the PyTorch-layout weight.
///
/// groups (PyTorch's): output channels [g out/groups, (g+1) out/groups)
/// see input channels [g in/groups, (g+1) in/groups) only; groups =
/// in_channels is a depthwise convolution.
///
/// Throws ValueError for in/out channels or kernel_size, stride, dilation or
/// groups < 1, groups not dividing both channel counts, or padding < 0; ShapeError naming Conv2d and the shape for an input
/// that is not {N, H, W, in_channels} or is smaller than the dilated kernel.
class Conv2d : public Module {
 public:
  /// torch.nn.Conv2d's arguments and defaults, square (one int each);
  /// throws as the class says.
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1, int64_t padding = 0,
         int64_t dilation = 1, bool bias = true, int64_t groups = 1);
  const char* type() const override { return "Conv2d"; }
  /// in_channels, out_channels, kernel_size, stride, padding, dilation, bias, groups.
  ModuleConfig config() const override;
  Tensor forward(const Tensor& input) override;
  /// weight {out_channels, in_channels, kernel_size, kernel_size}; bias
  /// {out_channels}, undefined without one.
  ///@{
  Tensor weight, bias;  // bias undefined without one
  ///@}

 private:
  int64_t in_, out_, kernel_, stride_, padding_, dilation_, groups_;
};

/// Batch normalization over every axis but the last (channels-last), the
/// common part of BatchNorm1d and BatchNorm2d (torch.nn's _BatchNorm).
///
/// Parameters (with affine): weight {C} (ones), bias {C} (zeros). Buffers
/// (with track_running_stats): running_mean {C} (zeros), running_var {C}
/// (ones), num_batches_tracked (int64, shape {}, 0). State-dict order as
/// PyTorch's: weight, bias, running_mean, running_var, num_batches_tracked.
///
/// Training mode (or without running statistics): normalises with the
/// batch's own mean and biased variance over every axis but the last
/// (gradients through them), and, with track_running_stats, updates under a
/// NoGradGuard, as PyTorch:
///   running_mean = (1 - momentum) running_mean + momentum mean,
///   running_var  = (1 - momentum) running_var + momentum var * n / (n - 1)
/// (the unbiased variance, n the elements per channel), num_batches_tracked += 1.
/// Evaluation mode: normalises with running_mean and running_var.
///
/// Throws ValueError for num_features < 1, eps <= 0 or momentum outside
/// [0, 1]; ShapeError naming the module and the shape for an input of
/// another rank or channel count; ValueError naming the module in training
/// for a batch of one element per channel (PyTorch's "Expected more than 1
/// value per channel when training").
class BatchNormBase : public Module {
 public:
  ModuleConfig config() const override;  // num_features, eps, momentum, affine, track_running_stats
  Tensor forward(const Tensor& input) override;
  /// The scale and shift {C}; undefined without affine.
  ///@{
  Tensor weight, bias;
  ///@}
  /// The running statistics {C} and the batch count {}; undefined without
  /// track_running_stats.
  ///@{
  Tensor running_mean, running_var, num_batches_tracked;
  ///@}

 protected:
  /// torch.nn's _BatchNorm arguments; `name` is the module type in
  /// messages. Throws as the class says.
  BatchNormBase(const char* name, int64_t num_features, double eps, double momentum, bool affine,
                bool track_running_stats);
  /// Throws ShapeError unless `input` has a rank this module takes.
  virtual void check_rank(const Tensor& input) const = 0;

 private:
  int64_t c_;
  double eps_, momentum_;
  bool affine_, track_;
};

/// torch.nn.BatchNorm1d on x {N, C} (or {N, L, C}: PyTorch's {N, C, L} with
/// the channels last) -> the same shape. See BatchNormBase.
class BatchNorm1d : public BatchNormBase {
 public:
  /// torch.nn.BatchNorm1d's arguments and defaults.
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = true,
                       bool track_running_stats = true)
      : BatchNormBase("BatchNorm1d", num_features, eps, momentum, affine, track_running_stats) {}
  const char* type() const override { return "BatchNorm1d"; }

 protected:
  void check_rank(const Tensor& input) const override;
};

/// torch.nn.BatchNorm2d on x {N, H, W, C} (channels last) -> the same shape.
/// See BatchNormBase.
class BatchNorm2d : public BatchNormBase {
 public:
  /// torch.nn.BatchNorm2d's arguments and defaults.
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = true,
                       bool track_running_stats = true)
      : BatchNormBase("BatchNorm2d", num_features, eps, momentum, affine, track_running_stats) {}
  const char* type() const override { return "BatchNorm2d"; }

 protected:
  void check_rank(const Tensor& input) const override;
};

/// Layer normalization over the last dimension, as torch.nn.LayerNorm with
/// normalized_shape one int: x {..., D} -> {..., D},
///   (x - mean) / sqrt(var + eps) * weight + bias,
/// mean and the biased var over the last dimension. Parameters (with
/// elementwise_affine): weight {D} (ones), bias {D} (zeros). Runs the ops
/// of Builder::layer_norm, the formula nn::LayerNormalization uses in a
/// graph, recorded, so gradients flow through all.
/// Throws ValueError for normalized_shape < 1 or eps <= 0; ShapeError naming
/// LayerNorm and the shape for an input whose last dimension is not D.
class LayerNorm : public Module {
 public:
  /// torch.nn.LayerNorm's arguments and defaults (normalized_shape one int: D).
  explicit LayerNorm(int64_t normalized_shape, double eps = 1e-5, bool elementwise_affine = true);
  const char* type() const override { return "LayerNorm"; }
  /// normalized_shape, eps, elementwise_affine.
  ModuleConfig config() const override;
  Tensor forward(const Tensor& input) override;
  /// The scale and shift {D}; undefined without elementwise_affine.
  ///@{
  Tensor weight, bias;
  ///@}

 private:
  int64_t d_;
  double eps_;
};

/// A lookup table, as torch.nn.Embedding: weight {num_embeddings,
/// embedding_dim} drawn N(0, 1) from ag::default_generator() (PyTorch's
/// init). forward: int32 ids of any shape -> {ids..., embedding_dim}; the
/// weight's gradient adds up over repeated ids. Throws ValueError for a size
/// < 1; TypeError for ids that are not int32; IndexError naming the first
/// id outside [0, num_embeddings).
class Embedding : public Module {
 public:
  /// torch.nn.Embedding's first two arguments.
  Embedding(int64_t num_embeddings, int64_t embedding_dim);
  const char* type() const override { return "Embedding"; }
  /// num_embeddings, embedding_dim.
  ModuleConfig config() const override;
  Tensor forward(const Tensor& ids) override;
  Tensor weight;  ///< {num_embeddings, embedding_dim}

 private:
  int64_t v_, d_;
};

/// Max pooling over kernel_size x kernel_size windows of x {N, H, W, C}
/// (channels last) -> {N, Ho, Wo, C}, as torch.nn.MaxPool2d; stride 0 (the
/// default) means stride = kernel_size, as PyTorch's None. Padding is -inf
/// (never chosen). Throws ValueError for kernel_size < 1, stride < 0,
/// padding < 0 or padding > kernel_size / 2 (PyTorch's rule); ShapeError
/// naming MaxPool2d and the shape for an input that is not {N, H, W, C} or
/// is smaller than the window.
class MaxPool2d : public Module {
 public:
  /// torch.nn.MaxPool2d's first three arguments (stride 0: kernel_size).
  explicit MaxPool2d(int64_t kernel_size, int64_t stride = 0, int64_t padding = 0);
  const char* type() const override { return "MaxPool2d"; }
  /// kernel_size, stride (resolved: kernel_size when given 0), padding.
  ModuleConfig config() const override;
  Tensor forward(const Tensor& input) override;

 private:
  int64_t kernel_, stride_, padding_;
};

/// Average pooling, as torch.nn.AvgPool2d with count_include_pad = False
/// (padding is not counted in a window's average; the engine's rule; the
/// same as PyTorch's default when padding is 0). Shapes, arguments and
/// errors as MaxPool2d's. config() records count_include_pad = false.
class AvgPool2d : public Module {
 public:
  /// torch.nn.AvgPool2d's first three arguments (stride 0: kernel_size).
  explicit AvgPool2d(int64_t kernel_size, int64_t stride = 0, int64_t padding = 0);
  const char* type() const override { return "AvgPool2d"; }
  /// kernel_size, stride, padding, count_include_pad (false).
  ModuleConfig config() const override;
  Tensor forward(const Tensor& input) override;

 private:
  int64_t kernel_, stride_, padding_;
};

}  // namespace tensorgrad::ag::nn
