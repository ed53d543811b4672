#include "tensorgrad/nn/conv.h"

#include "tensorgrad/core/error.h"

namespace tensorgrad::nn {

namespace {
// TensorFlow's "same" padding along one axis: output ceil(in / stride); the
// odd pixel of the total goes after.
void same_pads(int64_t in, int64_t k, int64_t stride, int64_t dilation, int64_t& before, int64_t& after) {
  const int64_t out = (in + stride - 1) / stride;
  const int64_t total = std::max<int64_t>((out - 1) * stride + (k - 1) * dilation + 1 - in, 0);
  before = total / 2;
  after = total - before;
}

Window2D make_window(std::array<int64_t, 2> k, std::array<int64_t, 2> s, std::array<int64_t, 2> d, Padding p,
                     int64_t h, int64_t w) {
  Window2D win;
  win.kh = k[0];
  win.kw = k[1];
  win.sh = s[0];
  win.sw = s[1];
  win.dh = d[0];
  win.dw = d[1];
  if (p == Padding::Same) {
    same_pads(h, k[0], s[0], d[0], win.pad_top, win.pad_bottom);
    same_pads(w, k[1], s[1], d[1], win.pad_left, win.pad_right);
  }
  return win;
}

void check_window_fits(const std::string& layer, const Window2D& win, int64_t h, int64_t w) {
  const int64_t span_h = win.dh * (win.kh - 1) + 1, span_w = win.dw * (win.kw - 1) + 1;
  if (span_h > h + win.pad_top + win.pad_bottom || span_w > w + win.pad_left + win.pad_right)
    throw ShapeError(layer + ": its " + std::to_string(span_h) + "x" + std::to_string(span_w) +
                     " window (dilation included) is larger than its padded input " + std::to_string(h) + "x" +
                     std::to_string(w) + "; use padding=\"same\", a smaller kernel, or a larger input");
}

void check_positive(const char* what, std::array<int64_t, 2> v) {
  if (v[0] < 1 || v[1] < 1)
    throw ValueError(std::string(what) + " must be >= 1; got {" + std::to_string(v[0]) + ", " + std::to_string(v[1]) + "}");
}

Shape expect_image(const std::string& layer, const Shape& s) {
  if (s.rank() != 3)
    throw ShapeError(layer + " takes images {height, width, channels}; got input_shape " + s.str() +
                     (s.rank() == 1 ? ". Reshape flat rows to {H, W, C} (e.g. load_mnist(dir, false))" : ""));
  return s;
}
}  // namespace

Padding padding_from_name(const std::string& name) {
  if (name == "valid") return Padding::Valid;
  if (name == "same") return Padding::Same;
  throw ValueError("unknown padding '" + name + "'; expected \"valid\" or \"same\"");
}

Conv2D::Conv2D(const char* prefix, int64_t filters, std::array<int64_t, 2> kernel_size, std::array<int64_t, 2> strides,
               const std::string& padding, std::array<int64_t, 2> dilation_rate, const std::string& activation,
               bool use_bias, int64_t groups)
    : Layer(prefix),
      filters_(filters),
      kernel_size_(kernel_size),
      strides_(strides),
      dilation_(dilation_rate),
      padding_(padding_from_name(padding)),
      activation_(activation_from_name(activation)),
      use_bias_(use_bias),
      groups_(groups) {
  if (filters < 1) throw ValueError(name() + ": filters must be >= 1; got " + std::to_string(filters));
  if (groups < 1 || filters % groups != 0)
    throw ValueError(name() + ": groups must be >= 1 and divide filters (" + std::to_string(filters) +
                     "); got groups " + std::to_string(groups));
  check_positive("kernel_size", kernel_size);
  check_positive("strides", strides);
  check_positive("dilation_rate", dilation_rate);
  if ((strides[0] > 1 || strides[1] > 1) && (dilation_rate[0] > 1 || dilation_rate[1] > 1))
    throw ValueError(name() + ": strides > 1 together with dilation_rate > 1 is not supported (as in Keras)");
}

Conv2D::Conv2D(int64_t filters, std::array<int64_t, 2> kernel_size, std::array<int64_t, 2> strides,
               const std::string& padding, std::array<int64_t, 2> dilation_rate, const std::string& activation,
               bool use_bias, int64_t groups)
    : Conv2D("conv2d", filters, kernel_size, strides, padding, dilation_rate, activation, use_bias, groups) {}

void Conv2D::check_groups(int64_t channels) const {
  if (channels % groups_ != 0)
    throw ValueError(name() + ": groups (" + std::to_string(groups_) + ") must divide the input channels; got " +
                     std::to_string(channels) + " channels. Give groups a divisor of " + std::to_string(channels));
}

Conv2D::Conv2D(int64_t filters, int64_t kernel_size, const std::string& padding, const std::string& activation)
    : Conv2D(filters, {kernel_size, kernel_size}, {1, 1}, padding, {1, 1}, activation) {}

Shape Conv2D::build(const Shape& input_shape) {
  in_shape_ = expect_image(name(), input_shape);
  const int64_t h = in_shape_[0], w = in_shape_[1], c = in_shape_[2];
  window_ = make_window(kernel_size_, strides_, dilation_, padding_, h, w);
  check_window_fits(name(), window_, h, w);
  check_groups(c);
  window_.groups = groups_;
  declare_weights(Shape{kernel_size_[0], kernel_size_[1], c / groups_, filters_});
  return Shape{window_.out_h(h), window_.out_w(w), filters_};
}

void Conv2D::declare_weights(const Shape& kernel_shape) {
  kernel_ = add_weight({.name = "kernel", .shape = kernel_shape, .initializer = initializers::glorot_uniform()});
  if (use_bias_) bias_ = add_weight({.name = "bias", .shape = {filters_}, .initializer = initializers::zeros()});
}

Value Conv2D::convolve(Builder& b, Value x4) const {
  Value k = bind_weight(b, kernel_);
  // Conv1D's {k, C/G, F} and DepthwiseConv2D's {kh, kw, C, M}: the op's
  // {kh, kw, C/G, F} over the same memory.
  const Shape op_shape{window_.kh, window_.kw, in_shape_[2] / groups_, filters_};
  if (b.shape(k) != op_shape) k = b.reshape(k, op_shape);
  OpAttrs at;
  at.window = window_;
  if (!use_bias_) return b.apply(OpKind::Conv2D, {x4, k}, at);
  return b.apply(OpKind::Conv2D, {x4, k, bind_weight(b, bias_)}, at);
}

Value Conv2D::activate(Builder& b, Value y) const { return apply_activation(b, activation_, y); }

Value Conv2D::call(Builder& b, Value x, const CallOptions&) {
  Value y = convolve(b, x);
  return activate(b, y);
}

Conv1D::Conv1D(int64_t filters, int64_t kernel_size, int64_t strides, const std::string& padding,
               int64_t dilation_rate, const std::string& activation, bool use_bias, int64_t groups)
    : Conv2D("conv1d", filters, {1, kernel_size}, {1, strides}, padding, {1, dilation_rate}, activation, use_bias,
             groups) {}

Shape Conv1D::build(const Shape& input_shape) {
  if (input_shape.rank() != 2)
    throw ShapeError(name() + " takes sequences {steps, channels}; got input_shape " + input_shape.str());
  const int64_t steps = input_shape[0], c = input_shape[1];
  in_shape_ = Shape{1, steps, c};
  window_ = make_window(kernel_size_, strides_, dilation_, padding_, 1, steps);
  window_.pad_top = window_.pad_bottom = 0;
  check_window_fits(name(), window_, 1, steps);
  check_groups(c);
  window_.groups = groups_;
  declare_weights(Shape{kernel_size_[1], c / groups_, filters_});  // Keras' Conv1D layout
  return Shape{window_.out_w(steps), filters_};
}

Value Conv1D::call(Builder& b, Value x, const CallOptions&) {
  const Shape xs = b.shape(x);
  // Activated before the reshape back to {B, steps, F}, where the fusion
  // pass can fold a ReLU into the convolution (the activations are
  // element-wise or over the last axis, which the reshape keeps).
  const Value y = activate(b, convolve(b, b.reshape(x, Shape{xs[0], 1, xs[1], xs[2]})));
  const Shape ys = b.shape(y);
  return b.reshape(y, Shape{ys[0], ys[2], ys[3]});
}

Pooling2D::Pooling2D(const char* prefix, bool is_max, std::array<int64_t, 2> pool_size,
                     std::array<int64_t, 2> strides, const std::string& padding)
    : Layer(prefix),
      is_max_(is_max),
      pool_size_(pool_size),
      strides_(strides[0] == 0 && strides[1] == 0 ? pool_size : strides),
      padding_(padding_from_name(padding)) {
  check_positive("pool_size", pool_size_);
  check_positive("strides", strides_);
}

Shape Pooling2D::build(const Shape& input_shape) {
  const Shape s = expect_image(name(), input_shape);
  window_ = make_window(pool_size_, strides_, {1, 1}, padding_, s[0], s[1]);
  check_window_fits(name(), window_, s[0], s[1]);
  return Shape{window_.out_h(s[0]), window_.out_w(s[1]), s[2]};
}

Value Pooling2D::call(Builder& b, Value x, const CallOptions&) {
  return b.windowed(is_max_ ? OpKind::MaxPool2D : OpKind::AvgPool2D, x, window_);
}

Shape GlobalPooling2D::build(const Shape& input_shape) {
  const Shape s = expect_image(name(), input_shape);
  window_ = Window2D{};
  window_.kh = s[0];
  window_.kw = s[1];
  window_.sh = s[0];
  window_.sw = s[1];
  return Shape{s[2]};
}

Value GlobalPooling2D::call(Builder& b, Value x, const CallOptions&) {
  Value y = b.windowed(is_max_ ? OpKind::MaxPool2D : OpKind::AvgPool2D, x, window_);
  const Shape s = b.shape(y);
  return b.reshape(y, Shape{s[0], s[3]});
}

LayerConfig Conv2D::config() const {
  LayerConfig c(type());
  c.set("filters", filters_)
      .set("kernel_size", std::vector<int64_t>{kernel_size_[0], kernel_size_[1]})
      .set("strides", std::vector<int64_t>{strides_[0], strides_[1]})
      .set("padding", std::string(padding_ == Padding::Same ? "same" : "valid"))
      .set("dilation_rate", std::vector<int64_t>{dilation_[0], dilation_[1]})
      .set("activation", std::string(activation_name(activation_)))
      .set("use_bias", use_bias_)
      .set("groups", groups_);
  return c;
}

LayerConfig Conv1D::config() const {
  // Keras' Conv1D arguments: the second of each 1 x k pair.
  LayerConfig c = Conv2D::config();
  c.set("kernel_size", kernel_size_[1]).set("strides", strides_[1]).set("dilation_rate", dilation_[1]);
  return c;
}

LayerConfig Pooling2D::config() const {
  LayerConfig c(type());
  c.set("pool_size", std::vector<int64_t>{pool_size_[0], pool_size_[1]})
      .set("strides", std::vector<int64_t>{strides_[0], strides_[1]})
      .set("padding", std::string(padding_ == Padding::Same ? "same" : "valid"));
  return c;
}

}  // namespace tensorgrad::nn

namespace tensorgrad::nn {

DepthwiseConv2D::DepthwiseConv2D(std::array<int64_t, 2> kernel_size, std::array<int64_t, 2> strides,
                                 const std::string& padding, int64_t depth_multiplier,
                                 std::array<int64_t, 2> dilation_rate, const std::string& activation, bool use_bias)
    : Conv2D("depthwise_conv2d", std::max<int64_t>(depth_multiplier, 1), kernel_size, strides, padding,
             dilation_rate, activation, use_bias, 1),
      depth_multiplier_(depth_multiplier) {
  if (depth_multiplier < 1)
    throw ValueError(name() + ": depth_multiplier must be >= 1; got " + std::to_string(depth_multiplier));
}

Shape DepthwiseConv2D::build(const Shape& input_shape) {
  in_shape_ = expect_image(name(), input_shape);
  const int64_t h = in_shape_[0], w = in_shape_[1], c = in_shape_[2];
  window_ = make_window(kernel_size_, strides_, dilation_, padding_, h, w);
  check_window_fits(name(), window_, h, w);
  groups_ = c;
  filters_ = c * depth_multiplier_;
  window_.groups = c;
  declare_weights(Shape{kernel_size_[0], kernel_size_[1], c, depth_multiplier_});  // Keras' layout
  return Shape{window_.out_h(h), window_.out_w(w), filters_};
}

LayerConfig DepthwiseConv2D::config() const {
  LayerConfig c(type());
  c.set("kernel_size", std::vector<int64_t>{kernel_size_[0], kernel_size_[1]})
      .set("strides", std::vector<int64_t>{strides_[0], strides_[1]})
      .set("padding", std::string(padding_ == Padding::Same ? "same" : "valid"))
      .set("depth_multiplier", depth_multiplier_)
      .set("dilation_rate", std::vector<int64_t>{dilation_[0], dilation_[1]})
      .set("activation", std::string(activation_name(activation_)))
      .set("use_bias", use_bias_);
  return c;
}

SeparableConv2D::SeparableConv2D(int64_t filters, std::array<int64_t, 2> kernel_size, std::array<int64_t, 2> strides,
                                 const std::string& padding, int64_t depth_multiplier,
                                 std::array<int64_t, 2> dilation_rate, const std::string& activation, bool use_bias)
    : Layer("separable_conv2d"),
      filters_(filters),
      depth_multiplier_(depth_multiplier),
      kernel_size_(kernel_size),
      strides_(strides),
      dilation_(dilation_rate),
      padding_(padding_from_name(padding)),
      activation_(activation_from_name(activation)),
      use_bias_(use_bias) {
  if (filters < 1) throw ValueError(name() + ": filters must be >= 1; got " + std::to_string(filters));
  if (depth_multiplier < 1)
    throw ValueError(name() + ": depth_multiplier must be >= 1; got " + std::to_string(depth_multiplier));
  check_positive("kernel_size", kernel_size);
  check_positive("strides", strides);
  check_positive("dilation_rate", dilation_rate);
  if ((strides[0] > 1 || strides[1] > 1) && (dilation_rate[0] > 1 || dilation_rate[1] > 1))
    throw ValueError(name() + ": strides > 1 together with dilation_rate > 1 is not supported (as in Keras)");
}

Shape SeparableConv2D::build(const Shape& input_shape) {
  const Shape s = expect_image(name(), input_shape);
  const int64_t h = s[0], w = s[1], c = s[2];
  window_ = make_window(kernel_size_, strides_, dilation_, padding_, h, w);
  check_window_fits(name(), window_, h, w);
  window_.groups = c;
  depthwise_ = add_weight({.name = "depthwise_kernel",
                           .shape = {kernel_size_[0], kernel_size_[1], c, depth_multiplier_},
                           .initializer = initializers::glorot_uniform()});
  pointwise_ = add_weight({.name = "pointwise_kernel",
                           .shape = {1, 1, c * depth_multiplier_, filters_},
                           .initializer = initializers::glorot_uniform()});
  if (use_bias_) bias_ = add_weight({.name = "bias", .shape = {filters_}, .initializer = initializers::zeros()});
  return Shape{window_.out_h(h), window_.out_w(w), filters_};
}

Value SeparableConv2D::call(Builder& b, Value x, const CallOptions&) {
  const int64_t c = b.shape(x)[3];
  OpAttrs depthwise;
  depthwise.window = window_;
  const Value dk = b.reshape(bind_weight(b, depthwise_), Shape{kernel_size_[0], kernel_size_[1], 1, c * depth_multiplier_});
  const Value mid = b.apply(OpKind::Conv2D, {x, dk}, depthwise);
  OpAttrs pointwise;  // a 1x1 window, one group
  const Value pk = bind_weight(b, pointwise_);
  const Value y = use_bias_ ? b.apply(OpKind::Conv2D, {mid, pk, bind_weight(b, bias_)}, pointwise)
                            : b.apply(OpKind::Conv2D, {mid, pk}, pointwise);
  return apply_activation(b, activation_, y);
}

LayerConfig SeparableConv2D::config() const {
  LayerConfig c(type());
  c.set("filters", filters_)
      .set("kernel_size", std::vector<int64_t>{kernel_size_[0], kernel_size_[1]})
      .set("strides", std::vector<int64_t>{strides_[0], strides_[1]})
      .set("padding", std::string(padding_ == Padding::Same ? "same" : "valid"))
      .set("depth_multiplier", depth_multiplier_)
      .set("dilation_rate", std::vector<int64_t>{dilation_[0], dilation_[1]})
      .set("activation", std::string(activation_name(activation_)))
      .set("use_bias", use_bias_);
  return c;
}

ZeroPadding2D::ZeroPadding2D(std::array<std::array<int64_t, 2>, 2> padding)
    : Layer("zero_padding2d"), padding_(padding) {
  for (const auto& axis : padding)
    for (int64_t p : axis)
      if (p < 0)
        throw ValueError(name() + ": padding must be >= 0; got ((" + std::to_string(padding[0][0]) + ", " +
                         std::to_string(padding[0][1]) + "), (" + std::to_string(padding[1][0]) + ", " +
                         std::to_string(padding[1][1]) + "))");
}

Shape ZeroPadding2D::build(const Shape& input_shape) {
  const Shape s = expect_image(name(), input_shape);
  return Shape{s[0] + padding_[0][0] + padding_[0][1], s[1] + padding_[1][0] + padding_[1][1], s[2]};
}

Value ZeroPadding2D::call(Builder& b, Value x, const CallOptions&) {
  // A depthwise 1x1 convolution by ones with the pads as its padding: the
  // same values (x * 1 is x, NaN and infinities included; padding taps are
  // skipped, not multiplied), one pass, its gradient the slice back, and in
  // ONNX one Conv whose constant does not depend on the batch.
  const int64_t channels = b.shape(x)[3];
  OpAttrs at;
  at.window.pad_top = padding_[0][0];
  at.window.pad_bottom = padding_[0][1];
  at.window.pad_left = padding_[1][0];
  at.window.pad_right = padding_[1][1];
  at.window.groups = channels;
  return b.apply(OpKind::Conv2D, {x, b.fill(Shape{1, 1, 1, channels}, 1.0f)}, at);
}

LayerConfig ZeroPadding2D::config() const {
  LayerConfig c(type());
  c.set("padding", std::vector<int64_t>{padding_[0][0], padding_[0][1], padding_[1][0], padding_[1][1]});
  return c;
}

}  // namespace tensorgrad::nn
