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
               bool use_bias)
    : Layer(prefix),
      filters_(filters),
      kernel_size_(kernel_size),
      strides_(strides),
      dilation_(dilation_rate),
      padding_(padding_from_name(padding)),
      activation_(activation_from_name(activation)),
      use_bias_(use_bias) {
  if (filters < 1) throw ValueError(name() + ": filters must be >= 1; got " + std::to_string(filters));
  check_positive("kernel_size", kernel_size);
  check_positive("strides", strides);
  check_positive("dilation_rate", dilation_rate);
  if ((strides[0] > 1 || strides[1] > 1) && (dilation_rate[0] > 1 || dilation_rate[1] > 1))
    throw ValueError(name() + ": strides > 1 together with dilation_rate > 1 is not supported (as in Keras)");
}

Conv2D::Conv2D(int64_t filters, std::array<int64_t, 2> kernel_size, std::array<int64_t, 2> strides,
               const std::string& padding, std::array<int64_t, 2> dilation_rate, const std::string& activation,
               bool use_bias)
    : Conv2D("conv2d", filters, kernel_size, strides, padding, dilation_rate, activation, use_bias) {}

Conv2D::Conv2D(int64_t filters, int64_t kernel_size, const std::string& padding, const std::string& activation)
    : Conv2D(filters, {kernel_size, kernel_size}, {1, 1}, padding, {1, 1}, activation) {}

Shape Conv2D::build(const Shape& input_shape) {
  in_shape_ = expect_image(name(), input_shape);
  const int64_t h = in_shape_[0], w = in_shape_[1], c = in_shape_[2];
  window_ = make_window(kernel_size_, strides_, dilation_, padding_, h, w);
  check_window_fits(name(), window_, h, w);
  declare_weights(Shape{kernel_size_[0], kernel_size_[1], c, filters_});
  return Shape{window_.out_h(h), window_.out_w(w), filters_};
}

void Conv2D::declare_weights(const Shape& kernel_shape) {
  kernel_ = add_weight({.name = "kernel", .shape = kernel_shape, .initializer = initializers::glorot_uniform()});
  if (use_bias_) bias_ = add_weight({.name = "bias", .shape = {filters_}, .initializer = initializers::zeros()});
}

Value Conv2D::convolve(Builder& b, Value x4) const {
  Value k = bind_weight(b, kernel_);
  const Shape ks = b.shape(k);
  if (ks.rank() == 3) k = b.reshape(k, Shape{1, ks[0], ks[1], ks[2]});  // Conv1D's {k, C, F}
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
               int64_t dilation_rate, const std::string& activation, bool use_bias)
    : Conv2D("conv1d", filters, {1, kernel_size}, {1, strides}, padding, {1, dilation_rate}, activation, use_bias) {}

Shape Conv1D::build(const Shape& input_shape) {
  if (input_shape.rank() != 2)
    throw ShapeError(name() + " takes sequences {steps, channels}; got input_shape " + input_shape.str());
  const int64_t steps = input_shape[0], c = input_shape[1];
  in_shape_ = Shape{1, steps, c};
  window_ = make_window(kernel_size_, strides_, dilation_, padding_, 1, steps);
  window_.pad_top = window_.pad_bottom = 0;
  check_window_fits(name(), window_, 1, steps);
  declare_weights(Shape{kernel_size_[1], c, filters_});  // Keras' Conv1D layout
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
      .set("use_bias", use_bias_);
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
