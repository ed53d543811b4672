#pragma once
// Convolution and pooling layers (keras.layers), channels-last: images are
// {height, width, channels}, sequences {steps, channels}, batch first.
#include <array>
#include <string>

#include "tensorgrad/nn/layers.h"

namespace tensorgrad::nn {

/// Padding modes as Keras: "valid" (none) or "same" (TensorFlow's rule:
/// output size ceil(in / stride); the extra pixel of an odd total goes after).
enum class Padding { Valid, Same };
/// Throws ValueError for anything but "valid" or "same".
Padding padding_from_name(const std::string& name);

/// 2-D convolution (keras.layers.Conv2D). Input {H, W, C_in}, output
/// {H_out, W_out, filters}; kernel {kh, kw, C_in / groups, filters} Glorot
/// uniform (fan_in kh*kw*C_in/groups, fan_out kh*kw*filters), bias
/// {filters} zeros. With groups > 1 (Keras 3's argument) the channels split
/// into `groups` equal groups, filters [g F/groups, (g+1) F/groups) seeing
/// only group g's channels (groups == C_in: a depthwise convolution).
/// Computed by the direct convolution op (kernels/conv.cpp: libxsmm
/// batch-reduce GEMMs over each output row, no patch matrix for the batch;
/// grouped ones by kernels/grouped_conv.cpp).
class Conv2D : public Layer {
 public:
  LayerConfig config() const override;
  /// Throws ValueError for filters < 1, a non-positive size, stride,
  /// dilation or groups, filters not a multiple of groups, strides > 1
  /// combined with dilation > 1 (as Keras), an unknown padding or activation.
  Conv2D(int64_t filters, std::array<int64_t, 2> kernel_size, std::array<int64_t, 2> strides = {1, 1},
         const std::string& padding = "valid", std::array<int64_t, 2> dilation_rate = {1, 1},
         const std::string& activation = "linear", bool use_bias = true, int64_t groups = 1);
  /// Square kernel convenience: Conv2D(8, 3, "same", "relu").
  Conv2D(int64_t filters, int64_t kernel_size, const std::string& padding = "valid",
         const std::string& activation = "linear");
  const char* type() const override { return "Conv2D"; }
  /// Throws ShapeError unless the input is {H, W, C}, or when the kernel
  /// (dilation included) is larger than the padded input; ValueError when
  /// groups does not divide C.
  Shape build(const Shape& input_shape) override;
  Value call(Builder& b, Value x, const CallOptions& options) override;
  const char* output_activation() const override { return activation_name(activation_); }
  std::shared_ptr<Layer> clone() const override { return clone_layer(*this); }

 protected:
  /// The public constructor's checks and arguments, with the automatic name
  /// made from `prefix` (Conv1D's "conv1d").
  Conv2D(const char* prefix, int64_t filters, std::array<int64_t, 2> kernel_size, std::array<int64_t, 2> strides,
         const std::string& padding, std::array<int64_t, 2> dilation_rate, const std::string& activation,
         bool use_bias, int64_t groups);
  /// Throws ValueError naming the layer unless groups divides `channels`.
  void check_groups(int64_t channels) const;
  /// x4 {B, H, W, C} -> {B, Ho, Wo, filters}; a ReLU activation is done
  /// inside the convolution's pass (kReluOutput).
  Value convolve(Builder& b, Value x4) const;
  /// The layer's activation on convolve's output (ReLU: already done).
  Value activate(Builder& b, Value y) const;
  /// Declares kernel {kernel_shape...} (Glorot uniform) and the bias; the
  /// layout is Keras' (Conv1D's kernel is {k, C, F}).
  void declare_weights(const Shape& kernel_shape);

  int64_t filters_;  ///< output channels
  /// Kernel size, strides and dilation along H and W (Conv1D: {1, k}, ...).
  ///@{
  std::array<int64_t, 2> kernel_size_, strides_, dilation_;
  ///@}
  Padding padding_;         ///< "valid" or "same"
  Activation activation_;   ///< applied after the bias
  bool use_bias_;           ///< whether there is a bias
  int64_t groups_ = 1;      ///< channel groups (Window2D::groups)
  Window2D window_;         ///< the window for the built input shape (pads resolved)
  Shape in_shape_;          ///< {H, W, C}, as built
  /// The weights' handles (bias_ invalid without a bias).
  ///@{
  WeightId kernel_, bias_;
  ///@}
};

/// 1-D convolution over sequences (keras.layers.Conv1D): input {steps, C_in},
/// output {steps_out, filters}; kernel {k, C_in / groups, filters}. Runs as
/// a Conv2D with a 1 x k window.
class Conv1D : public Conv2D {
 public:
  LayerConfig config() const override;
  /// Throws as Conv2D.
  Conv1D(int64_t filters, int64_t kernel_size, int64_t strides = 1, const std::string& padding = "valid",
         int64_t dilation_rate = 1, const std::string& activation = "linear", bool use_bias = true,
         int64_t groups = 1);
  const char* type() const override { return "Conv1D"; }
  /// Throws ShapeError unless the input is {steps, C}.
  Shape build(const Shape& input_shape) override;
  Value call(Builder& b, Value x, const CallOptions& options) override;
  std::shared_ptr<Layer> clone() const override { return clone_layer(*this); }
};

/// Depthwise 2-D convolution (keras.layers.DepthwiseConv2D): each input
/// channel convolved with its own `depth_multiplier` filters. Input
/// {H, W, C}, output {H_out, W_out, C * depth_multiplier}, output channel
/// c * depth_multiplier + m from channel c; kernel {kh, kw, C,
/// depth_multiplier} (Keras' layout; PyTorch's Conv2d(groups=C) holds the
/// same numbers as {C * depth_multiplier, 1, kh, kw}) Glorot uniform, bias
/// {C * depth_multiplier} zeros. A Conv2D with groups = C over the same
/// memory; its own memory-bound kernel (kernels/grouped_conv.cpp).
class DepthwiseConv2D : public Conv2D {
 public:
  LayerConfig config() const override;
  /// Throws as Conv2D; ValueError for depth_multiplier < 1.
  DepthwiseConv2D(std::array<int64_t, 2> kernel_size, std::array<int64_t, 2> strides = {1, 1},
                  const std::string& padding = "valid", int64_t depth_multiplier = 1,
                  std::array<int64_t, 2> dilation_rate = {1, 1}, const std::string& activation = "linear",
                  bool use_bias = true);
  const char* type() const override { return "DepthwiseConv2D"; }
  /// Throws as Conv2D::build.
  Shape build(const Shape& input_shape) override;
  std::shared_ptr<Layer> clone() const override { return clone_layer(*this); }

 private:
  int64_t depth_multiplier_;
};

/// Depthwise separable 2-D convolution (keras.layers.SeparableConv2D): a
/// depthwise convolution (weights "depthwise_kernel" {kh, kw, C,
/// depth_multiplier}) then a pointwise 1x1 one ("pointwise_kernel" {1, 1,
/// C * depth_multiplier, filters}), then the bias {filters} and the
/// activation. Input {H, W, C}, output {H_out, W_out, filters}; strides,
/// padding and dilation are the depthwise step's, as Keras.
class SeparableConv2D : public Layer {
 public:
  LayerConfig config() const override;
  /// Throws ValueError for filters or depth_multiplier < 1, and as Conv2D.
  SeparableConv2D(int64_t filters, std::array<int64_t, 2> kernel_size, std::array<int64_t, 2> strides = {1, 1},
                  const std::string& padding = "valid", int64_t depth_multiplier = 1,
                  std::array<int64_t, 2> dilation_rate = {1, 1}, const std::string& activation = "linear",
                  bool use_bias = true);
  const char* type() const override { return "SeparableConv2D"; }
  /// Throws as Conv2D::build.
  Shape build(const Shape& input_shape) override;
  Value call(Builder& b, Value x, const CallOptions& options) override;
  const char* output_activation() const override { return activation_name(activation_); }
  std::shared_ptr<Layer> clone() const override { return clone_layer(*this); }

 private:
  int64_t filters_, depth_multiplier_;
  std::array<int64_t, 2> kernel_size_, strides_, dilation_;
  Padding padding_;
  Activation activation_;
  bool use_bias_;
  Window2D window_;  ///< the depthwise step's, pads resolved at build
  WeightId depthwise_, pointwise_, bias_;
};

/// Zero padding of images (keras.layers.ZeroPadding2D): {H, W, C} ->
/// {top + H + bottom, left + W + right, C}, the new pixels zeros.
class ZeroPadding2D : public Layer {
 public:
  LayerConfig config() const override;
  /// padding {{top, bottom}, {left, right}} as Keras; throws ValueError for
  /// a negative one.
  explicit ZeroPadding2D(std::array<std::array<int64_t, 2>, 2> padding = {{{1, 1}, {1, 1}}});
  /// The same `padding` on every side.
  explicit ZeroPadding2D(int64_t padding) : ZeroPadding2D({{{padding, padding}, {padding, padding}}}) {}
  const char* type() const override { return "ZeroPadding2D"; }
  /// Throws ShapeError unless the input is {H, W, C}.
  Shape build(const Shape& input_shape) override;
  Value call(Builder& b, Value x, const CallOptions& options) override;
  std::shared_ptr<Layer> clone() const override { return clone_layer(*this); }

 private:
  std::array<std::array<int64_t, 2>, 2> padding_;
};

/// Max or average pooling over 2-D windows (keras.layers.MaxPooling2D,
/// AveragePooling2D): input {H, W, C}. strides default to pool_size.
/// Max pooling sends each window's gradient to its first maximum (as
/// PyTorch); average pooling leaves padding out of the count (as Keras).
class Pooling2D : public Layer {
 public:
  LayerConfig config() const override;
  const char* type() const override { return is_max_ ? "MaxPooling2D" : "AveragePooling2D"; }
  /// Throws ShapeError unless the input is {H, W, C} or when the window is
  /// larger than the padded input.
  Shape build(const Shape& input_shape) override;
  Value call(Builder& b, Value x, const CallOptions& options) override;
  std::shared_ptr<Layer> clone() const override { return clone_layer(*this); }

 protected:
  /// Throws ValueError for non-positive sizes or strides, or an unknown padding.
  Pooling2D(const char* prefix, bool is_max, std::array<int64_t, 2> pool_size, std::array<int64_t, 2> strides,
            const std::string& padding);

 private:
  bool is_max_;
  std::array<int64_t, 2> pool_size_, strides_;
  Padding padding_;
  Window2D window_;
};

/// Max pooling (keras.layers.MaxPooling2D): the largest value of each
/// window, NaN when the window holds one.
class MaxPooling2D : public Pooling2D {
 public:
  /// strides {0, 0} means pool_size.
  explicit MaxPooling2D(std::array<int64_t, 2> pool_size = {2, 2}, std::array<int64_t, 2> strides = {0, 0},
                        const std::string& padding = "valid")
      : Pooling2D("max_pooling2d", true, pool_size, strides, padding) {}
};

/// Average pooling (keras.layers.AveragePooling2D): the mean of each
/// window's input pixels, padding not counted.
class AveragePooling2D : public Pooling2D {
 public:
  /// strides {0, 0} means pool_size.
  explicit AveragePooling2D(std::array<int64_t, 2> pool_size = {2, 2}, std::array<int64_t, 2> strides = {0, 0},
                            const std::string& padding = "valid")
      : Pooling2D("average_pooling2d", false, pool_size, strides, padding) {}
};

/// Mean or maximum over the spatial axes (keras.layers.GlobalAveragePooling2D,
/// GlobalMaxPooling2D): {H, W, C} -> {C}.
class GlobalPooling2D : public Layer {
 public:
  const char* type() const override { return is_max_ ? "GlobalMaxPooling2D" : "GlobalAveragePooling2D"; }
  /// Throws ShapeError unless the input is {H, W, C}.
  Shape build(const Shape& input_shape) override;
  Value call(Builder& b, Value x, const CallOptions& options) override;
  std::shared_ptr<Layer> clone() const override { return clone_layer(*this); }

 protected:
  /// The maximum (`is_max`) or the mean, with automatic names from `prefix`.
  GlobalPooling2D(const char* prefix, bool is_max) : Layer(prefix), is_max_(is_max) {}

 private:
  bool is_max_;
  Window2D window_;
};

/// The mean over H and W (keras.layers.GlobalAveragePooling2D): {H, W, C} -> {C}.
class GlobalAveragePooling2D : public GlobalPooling2D {
 public:
  /// Named "global_average_pooling2d", "global_average_pooling2d_1", ...
  GlobalAveragePooling2D() : GlobalPooling2D("global_average_pooling2d", false) {}
};

/// The maximum over H and W (keras.layers.GlobalMaxPooling2D): {H, W, C} -> {C}.
class GlobalMaxPooling2D : public GlobalPooling2D {
 public:
  /// Named "global_max_pooling2d", "global_max_pooling2d_1", ...
  GlobalMaxPooling2D() : GlobalPooling2D("global_max_pooling2d", true) {}
};

}  // namespace tensorgrad::nn
