#include "tensorgrad/ag/nn/conv.h"

#include <cmath>
#include <string>

#include "ag/autograd.h"
#include "tensorgrad/ag/eager_builder.h"
#include "tensorgrad/ag/functional.h"
#include "tensorgrad/core/error.h"

namespace tensorgrad::ag::nn {

namespace {

std::string str(int64_t v) { return std::to_string(v); }
std::string str(double v) { return std::to_string(v); }

// U(-bound, bound) of `shape`, bound = 1 / sqrt(fan_in): PyTorch's
// kaiming_uniform_(a = sqrt(5)) for the weight and its bias rule.
Tensor uniform_init(const Shape& shape, int64_t fan_in) {
  const float bound = 1.0f / std::sqrt(float(fan_in));
  NoGradGuard no_grad;
  return (rand(shape) * (2.0f * bound) - bound).detach();
}

void check_positive(const char* module, const char* what, int64_t v) {
  if (v < 1) throw ValueError(std::string(module) + ": " + what + " must be >= 1; got " + str(v));
}

void check_non_negative(const char* module, const char* what, int64_t v) {
  if (v < 0) throw ValueError(std::string(module) + ": " + what + " must be >= 0; got " + str(v));
}

// One output size of a window: (size + 2 padding - dilation (kernel - 1) - 1) / stride + 1, or 0 when it does not fit.
int64_t window_out(int64_t size, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation) {
  const int64_t span = dilation * (kernel - 1) + 1;
  if (size + 2 * padding < span) return 0;
  return (size + 2 * padding - span) / stride + 1;
}

// ShapeError unless x is {N, H, W, C} (C checked when channels >= 1) with a
// window that fits in the padded image.
void check_image(const char* module, const Tensor& x, int64_t channels, int64_t kernel, int64_t stride,
                 int64_t padding, int64_t dilation) {
  const std::string want = channels >= 1 ? "{N, H, W, " + str(channels) + "}" : std::string("{N, H, W, C}");
  if (!x.defined()) throw StateError(std::string(module) + ": the input is undefined");
  if (x.dim() != 4 || (channels >= 1 && x.size(3) != channels))
    throw ShapeError(std::string(module) + ": expects inputs " + want + " (channels last); got " + x.shape().str());
  if (window_out(x.size(1), kernel, stride, padding, dilation) < 1 ||
      window_out(x.size(2), kernel, stride, padding, dilation) < 1)
    throw ShapeError(std::string(module) + ": the input " + x.shape().str() + " padded by " + str(padding) +
                     " is smaller than the " + str(dilation * (kernel - 1) + 1) + "x" +
                     str(dilation * (kernel - 1) + 1) + " (dilated) kernel");
}

void check_pool(const char* module, int64_t kernel, int64_t stride, int64_t padding) {
  check_positive(module, "kernel_size", kernel);
  check_non_negative(module, "stride", stride);
  check_non_negative(module, "padding", padding);
  if (padding > kernel / 2)
    throw ValueError(std::string(module) + ": padding must be at most half the kernel size; got padding " +
                     str(padding) + " for kernel_size " + str(kernel));
}

}  // namespace

// ---- Conv2d ----

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride, int64_t padding,
               int64_t dilation, bool has_bias, int64_t groups)
    : in_(in_channels), out_(out_channels), kernel_(kernel_size), stride_(stride), padding_(padding),
      dilation_(dilation), groups_(groups) {
  check_positive("Conv2d", "in_channels", in_channels);
  check_positive("Conv2d", "out_channels", out_channels);
  check_positive("Conv2d", "kernel_size", kernel_size);
  check_positive("Conv2d", "stride", stride);
  check_positive("Conv2d", "dilation", dilation);
  check_non_negative("Conv2d", "padding", padding);
  check_positive("Conv2d", "groups", groups);
  if (in_channels % groups != 0 || out_channels % groups != 0)
    throw ValueError("Conv2d: groups (" + str(groups) + ") must divide in_channels (" + str(in_channels) +
                     ") and out_channels (" + str(out_channels) + ")");
  const int64_t fan_in = in_ / groups_ * kernel_ * kernel_;
  weight = register_parameter("weight", uniform_init(Shape{out_, in_ / groups_, kernel_, kernel_}, fan_in));
  if (has_bias) bias = register_parameter("bias", uniform_init(Shape{out_}, fan_in));
}

ModuleConfig Conv2d::config() const {
  ModuleConfig c(type());
  c.set("in_channels", in_).set("out_channels", out_).set("kernel_size", kernel_);
  c.set("stride", stride_).set("padding", padding_).set("dilation", dilation_).set("bias", bias.defined());
  c.set("groups", groups_);
  return c;
}

Tensor Conv2d::forward(const Tensor& input) {
  check_image("Conv2d", input, in_, kernel_, stride_, padding_, dilation_);
  // {F, C/G, kh, kw} viewed as {F, C/G, kh * kw}; one recorded transpose
  // makes {kh * kw, C/G, F}, viewed as the engine's {kh, kw, C/G, F}.
  const int64_t per_group = in_ / groups_;
  if (weight.shape() != Shape{out_, per_group, kernel_, kernel_})
    throw ShapeError("Conv2d: weight must be {" + str(out_) + ", " + str(per_group) + ", " + str(kernel_) + ", " +
                     str(kernel_) + "} (in_channels " + str(in_) + " / groups " + str(groups_) + "); got " +
                     weight.shape().str());
  Tensor w = reshape(weight, Shape{out_, per_group, kernel_ * kernel_});
  w = reshape(transpose(w, 0, 2), Shape{kernel_, kernel_, per_group, out_});
  return conv2d(input, w, bias, stride_, padding_, dilation_, groups_);
}

// ---- BatchNorm1d / BatchNorm2d ----

BatchNormBase::BatchNormBase(const char* name, int64_t num_features, double eps, double momentum, bool affine,
                             bool track_running_stats)
    : c_(num_features), eps_(eps), momentum_(momentum), affine_(affine), track_(track_running_stats) {
  check_positive(name, "num_features", num_features);
  if (!(eps > 0.0)) throw ValueError(std::string(name) + ": eps must be > 0; got " + str(eps));
  if (!(momentum >= 0.0 && momentum <= 1.0))
    throw ValueError(std::string(name) + ": momentum must be in [0, 1]; got " + str(momentum));
  if (affine) {
    weight = register_parameter("weight", ones(Shape{c_}));
    bias = register_parameter("bias", zeros(Shape{c_}));
  }
  if (track_running_stats) {
    running_mean = register_buffer("running_mean", zeros(Shape{c_}));
    running_var = register_buffer("running_var", ones(Shape{c_}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros(Shape{}, {DType::Int64}));
  }
}

ModuleConfig BatchNormBase::config() const {
  ModuleConfig c(type());
  c.set("num_features", c_).set("eps", eps_).set("momentum", momentum_);
  c.set("affine", affine_).set("track_running_stats", track_);
  return c;
}

void BatchNorm1d::check_rank(const Tensor& x) const {
  if (x.dim() != 2 && x.dim() != 3)
    throw ShapeError("BatchNorm1d: expects inputs {N, C} or {N, L, C} (channels last); got " + x.shape().str());
}

void BatchNorm2d::check_rank(const Tensor& x) const {
  if (x.dim() != 4)
    throw ShapeError("BatchNorm2d: expects inputs {N, H, W, C} (channels last); got " + x.shape().str());
}

Tensor BatchNormBase::forward(const Tensor& input) {
  if (!input.defined()) throw StateError(std::string(type()) + ": the input is undefined");
  check_rank(input);
  if (input.size(-1) != c_)
    throw ShapeError(std::string(type()) + ": expects " + str(c_) + " channels (the last dimension); got input " +
                     input.shape().str());
  const Tensor w = affine_ ? weight : ones(Shape{c_});
  const Tensor b = affine_ ? bias : zeros(Shape{c_});
  const float eps = float(eps_);
  if (!is_training() && track_) return batch_norm(input, w, b, false, running_mean, running_var, eps);

  const int64_t n = input.numel() / c_;  // elements per channel
  if (n <= 1)
    throw ValueError(std::string(type()) + ": expected more than 1 value per channel when training; got input " +
                     input.shape().str());
  Tensor y = batch_norm(input, w, b, true, Tensor(), Tensor(), eps);
  if (is_training() && track_) {
    NoGradGuard no_grad;
    const Tensor stats = ag::detail::apply(OpKind::BatchNormStats, {input.detach()});  // {2, C}: mean, biased var
    const Tensor mean = reshape(narrow(stats, 0, 0, 1), Shape{c_});
    const Tensor var = reshape(narrow(stats, 0, 1, 1), Shape{c_}) * float(double(n) / double(n - 1));
    const float m = float(momentum_);
    running_mean.mul_(1.0f - m).add_(mean, m);
    running_var.mul_(1.0f - m).add_(var, m);
    // Counted where the counter lives (on a device, without a read back).
    const tensorgrad::Tensor counter = num_batches_tracked.data().reshape(Shape{1});
    ag::detail::run_into(OpKind::AdvanceCounter, {}, {&counter, 1}, counter);
    ++ag::detail::Access::impl(num_batches_tracked)->version();
  }
  return y;
}

// ---- LayerNorm ----

LayerNorm::LayerNorm(int64_t normalized_shape, double eps, bool elementwise_affine) : d_(normalized_shape), eps_(eps) {
  check_positive("LayerNorm", "normalized_shape", normalized_shape);
  if (!(eps > 0.0)) throw ValueError("LayerNorm: eps must be > 0; got " + str(eps));
  if (elementwise_affine) {
    weight = register_parameter("weight", ones(Shape{d_}));
    bias = register_parameter("bias", zeros(Shape{d_}));
  }
}

ModuleConfig LayerNorm::config() const {
  ModuleConfig c(type());
  c.set("normalized_shape", d_).set("eps", eps_).set("elementwise_affine", weight.defined());
  return c;
}

Tensor LayerNorm::forward(const Tensor& input) {
  if (!input.defined()) throw StateError("LayerNorm: the input is undefined");
  if (input.dim() < 1 || input.size(-1) != d_)
    throw ShapeError("LayerNorm: expects inputs {..., " + str(d_) + "}; got " + input.shape().str());
  EagerBuilder b;  // the graph layer's formula (Builder::layer_norm), run now
  const Value x = b.input(input);
  const Value gamma = weight.defined() ? b.input(weight) : Value{};
  const Value beta = bias.defined() ? b.input(bias) : Value{};
  return b.tensor(b.layer_norm(x, float(eps_), gamma, beta));
}

// ---- Embedding ----

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim) : v_(num_embeddings), d_(embedding_dim) {
  check_positive("Embedding", "num_embeddings", num_embeddings);
  check_positive("Embedding", "embedding_dim", embedding_dim);
  Tensor w;
  {
    NoGradGuard no_grad;
    w = randn(Shape{v_, d_});
  }
  weight = register_parameter("weight", w);
}

ModuleConfig Embedding::config() const {
  return ModuleConfig(type()).set("num_embeddings", v_).set("embedding_dim", d_);
}

Tensor Embedding::forward(const Tensor& ids) {
  if (!ids.defined()) throw StateError("Embedding: the ids are undefined");
  if (ids.dtype() != DType::Int32)
    throw TypeError(std::string("Embedding: ids must be int32; got ") + dtype_name(ids.dtype()) + " " +
                    ids.shape().str());
  return embedding(ids, weight);
}

// ---- MaxPool2d / AvgPool2d ----

MaxPool2d::MaxPool2d(int64_t kernel_size, int64_t stride, int64_t padding)
    : kernel_(kernel_size), stride_(stride == 0 ? kernel_size : stride), padding_(padding) {
  check_pool("MaxPool2d", kernel_size, stride, padding);
}

ModuleConfig MaxPool2d::config() const {
  return ModuleConfig(type()).set("kernel_size", kernel_).set("stride", stride_).set("padding", padding_);
}

Tensor MaxPool2d::forward(const Tensor& input) {
  check_image("MaxPool2d", input, 0, kernel_, stride_, padding_, 1);
  return max_pool2d(input, kernel_, stride_, padding_);
}

AvgPool2d::AvgPool2d(int64_t kernel_size, int64_t stride, int64_t padding)
    : kernel_(kernel_size), stride_(stride == 0 ? kernel_size : stride), padding_(padding) {
  check_pool("AvgPool2d", kernel_size, stride, padding);
}

ModuleConfig AvgPool2d::config() const {
  return ModuleConfig(type())
      .set("kernel_size", kernel_)
      .set("stride", stride_)
      .set("padding", padding_)
      .set("count_include_pad", false);
}

Tensor AvgPool2d::forward(const Tensor& input) {
  check_image("AvgPool2d", input, 0, kernel_, stride_, padding_, 1);
  return avg_pool2d(input, kernel_, stride_, padding_);
}

}  // namespace tensorgrad::ag::nn
