#include "tensorgrad/nn/layers.h"

#include "nn/functional.h"

#include <cmath>
#include <map>
#include <random>

#include "tensorgrad/core/error.h"
#include "tensorgrad/core/random.h"

namespace tensorgrad::nn {

namespace {
std::map<std::string, int>& name_counters() {
  static std::map<std::string, int> counters;
  return counters;
}

}  // namespace

void clear_session() { name_counters().clear(); }

std::string unique_name(const char* prefix) {
  int& n = name_counters()[prefix];
  std::string name = n == 0 ? std::string(prefix) : std::string(prefix) + "_" + std::to_string(n);
  ++n;
  return name;
}

Layer::Layer(const char* prefix) : name_(unique_name(prefix)) {}

Shape Layer::build_once(const Shape& input_shape) {
  if (built_) {
    if (input_shape != built_input_)
      throw ShapeError("layer '" + name_ + "' was built for input shape " + built_input_.str() + "; it cannot take " +
                       input_shape.str() + " (a shared layer needs the same input shape in every model)");
    return built_output_;
  }
  built_output_ = build(input_shape);
  built_input_ = input_shape;
  built_ = true;
  return built_output_;
}

WeightId Layer::add_weight(WeightSpec spec) {
  if (spec.name.empty() || spec.name.find('/') != std::string::npos)
    throw ValueError(std::string(type()) + " '" + name_ + "': add_weight needs a name without '/' (the listing adds \"" +
                     name_ + "/\" before it); got \"" + spec.name + "\"");
  if (!spec.initializer)
    throw ValueError(std::string(type()) + " '" + name_ + "': add_weight(\"" + spec.name +
                     "\") has no initializer; give one (initializers::zeros(), glorot_uniform(), ...)");
  Tensor value = spec.initializer(spec.shape);
  if (!value.defined() || value.shape() != spec.shape || value.dtype() != spec.dtype)
    throw ValueError(std::string(type()) + " '" + name_ + "': the initializer of weight \"" + spec.name +
                     "\" was declared to give " + dtype_name(spec.dtype) + " " + spec.shape.str() + "; it gave " +
                     (value.defined() ? std::string(dtype_name(value.dtype())) + " " + value.shape().str()
                                      : std::string("an undefined tensor")) +
                     ". Make the initializer return a tensor of the shape it is given");
  for (size_t i = 0; i < declared_.size(); ++i)
    if (declared_[i].spec.name == spec.name) {  // build() again: the same weight, a new value
      declared_[i] = {std::move(spec), std::move(value)};
      return WeightId(int(i));
    }
  declared_.push_back({std::move(spec), std::move(value)});
  return WeightId(int(declared_.size() - 1));
}

const Layer::Declared& Layer::declared(WeightId id) const {
  if (!id.valid() || size_t(id.index_) >= declared_.size())
    throw StateError(std::string(type()) + " '" + name_ +
                     "' was called before build(); add it to a model or call it on a symbolic tensor first");
  return declared_[size_t(id.index_)];
}

const Tensor& Layer::weight(WeightId id) const { return declared(id).value; }
Tensor& Layer::weight(WeightId id) { return const_cast<Tensor&>(declared(id).value); }

Value Layer::bind_weight(Builder& b, WeightId id) const {
  const Declared& d = declared(id);
  return b.parameter(d.value, (name_ + "/" + d.spec.name).c_str(), d.spec.trainable && trainable);
}

std::vector<Weight> Layer::weights() const {
  std::vector<Weight> out;
  out.reserve(declared_.size());
  for (const Declared& d : declared_)  // a non-trainable weight is state (moving statistics): copied whole
    out.push_back({name_ + "/" + d.spec.name, d.value, d.spec.trainable && trainable, d.spec.trainable});
  return out;
}

std::vector<Tensor*> Layer::weight_slots() {
  std::vector<Tensor*> out;
  out.reserve(declared_.size());
  for (Declared& d : declared_) out.push_back(&d.value);
  return out;
}

Activation activation_from_name(const std::string& name) {
  if (name.empty() || name == "linear") return Activation::Linear;
  if (name == "relu") return Activation::Relu;
  if (name == "sigmoid") return Activation::Sigmoid;
  if (name == "tanh") return Activation::Tanh;
  if (name == "softmax") return Activation::Softmax;
  if (name == "gelu") return Activation::Gelu;
  if (name == "gelu_tanh") return Activation::GeluTanh;
  if (name == "silu" || name == "swish") return Activation::Silu;
  if (name == "elu") return Activation::Elu;
  if (name == "leaky_relu") return Activation::LeakyRelu;
  if (name == "softplus") return Activation::Softplus;
  if (name == "relu6") return Activation::Relu6;
  if (name == "hard_sigmoid") return Activation::HardSigmoid;
  if (name == "hard_swish" || name == "hard_silu") return Activation::HardSwish;
  throw ValueError("unknown activation '" + name +
                   "'; expected one of linear, relu, sigmoid, tanh, softmax, gelu, gelu_tanh, silu, elu, leaky_relu, "
                   "softplus, relu6, hard_sigmoid, hard_swish");
}

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::Linear: return "linear";
    case Activation::Relu: return "relu";
    case Activation::Sigmoid: return "sigmoid";
    case Activation::Tanh: return "tanh";
    case Activation::Softmax: return "softmax";
    case Activation::Gelu: return "gelu";
    case Activation::Silu: return "silu";
    case Activation::Elu: return "elu";
    case Activation::LeakyRelu: return "leaky_relu";
    case Activation::Softplus: return "softplus";
    case Activation::GeluTanh: return "gelu_tanh";
    case Activation::Relu6: return "relu6";
    case Activation::HardSigmoid: return "hard_sigmoid";
    case Activation::HardSwish: return "hard_swish";
  }
  return "?";
}

// Keras 3's and PyTorch's hard sigmoid, relu6(x + 3) / 6: a Clamp between
// two scalings, so its gradient is 1/6 inside [-3, 3] and 0 outside.
Value hard_sigmoid(Builder& b, Value x) {
  return b.scale(b.clamp(b.add(x, b.fill(Shape{}, 3.0f)), 0.0f, 6.0f), 1.0f / 6.0f);
}

Value apply_activation(Builder& b, Activation a, Value x) {
  switch (a) {
    case Activation::Linear: return x;
    case Activation::Relu: return b.relu(x);
    case Activation::Sigmoid: return b.sigmoid(x);
    case Activation::Tanh: return b.tanh(x);
    case Activation::Softmax: return b.softmax(x);
    case Activation::Gelu: return b.unary(OpKind::Gelu, x);
    case Activation::Silu: return b.unary(OpKind::Silu, x);
    case Activation::Elu: return b.unary(OpKind::Elu, x, 1.0f);
    case Activation::LeakyRelu: return b.unary(OpKind::LeakyRelu, x, 0.2f);
    case Activation::Softplus: return b.unary(OpKind::Softplus, x);
    case Activation::GeluTanh: return b.unary(OpKind::GeluTanh, x);
    case Activation::Relu6: return b.clamp(x, 0.0f, 6.0f);
    case Activation::HardSigmoid: return hard_sigmoid(b, x);
    case Activation::HardSwish: return b.mul(x, hard_sigmoid(b, x));
  }
  // Reached only through a cast; passing x through would train a silently linear layer.
  throw ValueError("apply_activation: " + std::to_string(static_cast<int>(a)) +
                   " is not an Activation; its values are 0 (Linear) to 13 (HardSwish); pass one of the Activation "
                   "enumerators (activation_from_name gives one for a Keras name)");
}

Dense::Dense(int64_t units, const std::string& activation, bool use_bias)
    : Layer("dense"), units_(units), activation_(activation_from_name(activation)), use_bias_(use_bias) {
  if (units < 1) throw ValueError("Dense: units must be at least 1; got " + std::to_string(units));
}

Shape Dense::build(const Shape& input_shape) {
  if (input_shape.rank() < 1)
    throw ShapeError("Dense '" + name() + "' takes features {features} (or {..., features}); got input_shape " +
                     input_shape.str());
  kernel_ = add_weight(
      {.name = "kernel", .shape = {input_shape[-1], units_}, .initializer = initializers::glorot_uniform()});
  if (use_bias_) bias_ = add_weight({.name = "bias", .shape = {units_}, .initializer = initializers::zeros()});
  Shape out = input_shape;
  out.set(-1, units_);
  return out;
}

// Rows of features as they are; a sequence {B, ..., F} as the rows {B ..., F} of one product (Keras applies
// Dense to the last axis).
Value Dense::call(Builder& b, Value x, const CallOptions&) {
  const Value kernel = bind_weight(b, kernel_);
  const Shape s = b.shape(x);
  const Value rows = s.rank() > 2 ? b.reshape(x, Shape{s.numel() / s[-1], s[-1]}) : x;
  Value y = use_bias_ ? b.matmul(rows, kernel, bind_weight(b, bias_)) : b.matmul(rows, kernel);
  y = apply_activation(b, activation_, y);
  if (s.rank() <= 2) return y;
  Shape out = s;
  out.set(-1, units_);
  return b.reshape(y, out);
}

Value Flatten::call(Builder& b, Value x, const CallOptions&) {
  const Shape s = b.shape(x);
  return b.reshape(x, Shape{s[0], s.row_size()});
}

ActivationLayer::ActivationLayer(const std::string& activation)
    : Layer("activation"), activation_(activation_from_name(activation)) {}

Value ActivationLayer::call(Builder& b, Value x, const CallOptions&) {
  return apply_activation(b, activation_, x);
}

Dropout::Dropout(float rate, std::optional<uint64_t> seed) : Layer("dropout"), rate_(rate) {
  if (!(rate >= 0.0f && rate < 1.0f))
    throw ValueError("Dropout: rate must be in [0, 1); got " + std::to_string(rate));
  seed_ = seed ? *seed : global_generator()();
}

Value Dropout::call(Builder& b, Value x, const CallOptions& options) {
  if (!options.training || rate_ == 0.0f) return x;
  return b.dropout(x, rate_, seed_);
}

LayerConfig Dense::config() const {
  LayerConfig c(type());
  c.set("units", units_).set("activation", std::string(activation_name(activation_))).set("use_bias", use_bias_);
  return c;
}

LayerConfig ActivationLayer::config() const {
  return LayerConfig(type()).set("activation", std::string(activation_name(activation_)));
}

LayerConfig Dropout::config() const {
  // The seed makes a loaded model's masks those of the saved one.
  return LayerConfig(type()).set("rate", double(rate_)).set("seed", int64_t(seed_));
}

}  // namespace tensorgrad::nn
