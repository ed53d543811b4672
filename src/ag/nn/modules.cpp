#include "tensorgrad/ag/nn/modules.h"

#include <cmath>
#include <string>

#include "tensorgrad/ag/functional.h"
#include "tensorgrad/ag/nn/attention.h"
#include "tensorgrad/ag/nn/conv.h"
#include "tensorgrad/ag/nn/recurrent.h"
#include "tensorgrad/core/error.h"

namespace tensorgrad::ag::nn {

namespace {
// U(-bound, bound) of `shape`, as PyTorch's kaiming_uniform_(a = sqrt(5)) and
// its bias rule both reduce to bound = 1 / sqrt(fan_in).
Tensor uniform_init(const Shape& shape, int64_t fan_in) {
  const float bound = 1.0f / std::sqrt(float(fan_in));
  NoGradGuard no_grad;
  return (rand(shape) * (2.0f * bound) - bound).detach();
}
}  // namespace

// ---- Linear ----

Linear::Linear(int64_t in_features, int64_t out_features, bool has_bias) : in_(in_features), out_(out_features) {
  if (in_features < 1 || out_features < 1)
    throw ValueError("Linear: in_features and out_features must be >= 1; got " + std::to_string(in_features) +
                     " and " + std::to_string(out_features));
  weight = register_parameter("weight", uniform_init(Shape{out_, in_}, in_));
  if (has_bias) bias = register_parameter("bias", uniform_init(Shape{out_}, in_));
}

ModuleConfig Linear::config() const {
  ModuleConfig c(type());
  c.set("in_features", in_);
  c.set("out_features", out_);
  c.set("bias", bias.defined());
  return c;
}

Tensor Linear::forward(const Tensor& input) {
  if (input.defined() && (input.dim() < 1 || input.size(-1) != in_))
    throw ShapeError("Linear: expects inputs {..., " + std::to_string(in_) + "}; got " + input.shape().str());
  return linear(input, weight, bias);
}

// ---- Sequential ----

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (const auto& m : modules) push_back(m);
}

Sequential& Sequential::push_back(std::shared_ptr<Module> module) {
  register_module(std::to_string(size()), std::move(module));
  return *this;
}

Tensor Sequential::forward(const Tensor& input) {
  Tensor x = input;
  for (const auto& [name, m] : named_children()) x = m->forward(x);
  return x;
}

std::shared_ptr<Module> Sequential::operator[](size_t i) const {
  if (i >= size())
    throw IndexError("Sequential: index " + std::to_string(i) + " is outside [0, " + std::to_string(size()) + ")");
  return named_children()[i].second;
}

// ---- parameter-free modules ----

Tensor ReLU::forward(const Tensor& x) { return relu(x); }
Tensor Sigmoid::forward(const Tensor& x) { return sigmoid(x); }
Tensor Tanh::forward(const Tensor& x) { return tanh(x); }
Tensor GELU::forward(const Tensor& x) { return gelu(x, approximate_); }
Tensor SiLU::forward(const Tensor& x) { return silu(x); }
Tensor Softplus::forward(const Tensor& x) { return softplus(x); }
Tensor ELU::forward(const Tensor& x) { return elu(x, alpha_); }
Tensor LeakyReLU::forward(const Tensor& x) { return leaky_relu(x, slope_); }
Tensor Softmax::forward(const Tensor& x) { return softmax(x, dim_); }
Tensor Flatten::forward(const Tensor& x) { return flatten(x); }

ModuleConfig ELU::config() const { return ModuleConfig(type()).set("alpha", double(alpha_)); }
ModuleConfig LeakyReLU::config() const { return ModuleConfig(type()).set("negative_slope", double(slope_)); }
ModuleConfig Softmax::config() const { return ModuleConfig(type()).set("dim", int64_t(dim_)); }

GELU::GELU(std::string approximate) : approximate_(std::move(approximate)) {
  if (approximate_ != "none" && approximate_ != "tanh")
    throw ValueError("GELU: approximate must be \"none\" (the exact form) or \"tanh\"; got \"" + approximate_ + "\"");
}
ModuleConfig GELU::config() const { return ModuleConfig(type()).set("approximate", approximate_); }

Dropout::Dropout(float p) : p_(p) {
  if (!(p >= 0.0f && p < 1.0f)) throw ValueError("Dropout: p must be in [0, 1); got " + std::to_string(p));
}
ModuleConfig Dropout::config() const { return ModuleConfig(type()).set("p", double(p_)); }
Tensor Dropout::forward(const Tensor& x) { return dropout(x, p_, is_training()); }

// ---- the built-in types' factories ----

namespace detail {
std::map<std::string, ModuleFactory>& module_registry() {
  static std::map<std::string, ModuleFactory> r = [] {
    std::map<std::string, ModuleFactory> m;
    m["Linear"] = [](const ModuleConfig& c) {
      return std::make_shared<Linear>(c.get_int("in_features"), c.get_int("out_features"), c.get_bool("bias"));
    };
    m["Sequential"] = [](const ModuleConfig&) { return std::make_shared<Sequential>(); };
    m["ReLU"] = [](const ModuleConfig&) { return std::make_shared<ReLU>(); };
    m["Sigmoid"] = [](const ModuleConfig&) { return std::make_shared<Sigmoid>(); };
    m["Tanh"] = [](const ModuleConfig&) { return std::make_shared<Tanh>(); };
    m["GELU"] = [](const ModuleConfig& c) {
      return std::make_shared<GELU>(c.has("approximate") ? c.get_string("approximate") : "none");
    };
    m["SiLU"] = [](const ModuleConfig&) { return std::make_shared<SiLU>(); };
    m["Softplus"] = [](const ModuleConfig&) { return std::make_shared<Softplus>(); };
    m["ELU"] = [](const ModuleConfig& c) { return std::make_shared<ELU>(float(c.get_double("alpha"))); };
    m["LeakyReLU"] = [](const ModuleConfig& c) {
      return std::make_shared<LeakyReLU>(float(c.get_double("negative_slope")));
    };
    m["Softmax"] = [](const ModuleConfig& c) { return std::make_shared<Softmax>(int(c.get_int("dim"))); };
    m["Identity"] = [](const ModuleConfig&) { return std::make_shared<Identity>(); };
    m["Flatten"] = [](const ModuleConfig&) { return std::make_shared<Flatten>(); };
    m["Dropout"] = [](const ModuleConfig& c) { return std::make_shared<Dropout>(float(c.get_double("p"))); };
    // recurrent.h, attention.h
    m["LSTM"] = [](const ModuleConfig& c) {
      return std::make_shared<LSTM>(c.get_int("input_size"), c.get_int("hidden_size"), c.get_int("num_layers"),
                                    c.get_bool("bias"), c.get_bool("batch_first"));
    };
    m["GRU"] = [](const ModuleConfig& c) {
      return std::make_shared<GRU>(c.get_int("input_size"), c.get_int("hidden_size"), c.get_int("num_layers"),
                                   c.get_bool("bias"), c.get_bool("batch_first"));
    };
    m["MultiheadAttention"] = [](const ModuleConfig& c) {
      return std::make_shared<MultiheadAttention>(c.get_int("embed_dim"), c.get_int("num_heads"), c.get_bool("bias"),
                                                  c.get_bool("batch_first"));
    };
    // conv.h
    m["Conv2d"] = [](const ModuleConfig& c) {
      return std::make_shared<Conv2d>(c.get_int("in_channels"), c.get_int("out_channels"), c.get_int("kernel_size"),
                                      c.get_int("stride"), c.get_int("padding"), c.get_int("dilation"),
                                      c.get_bool("bias"), c.has("groups") ? c.get_int("groups") : 1);
    };
    m["BatchNorm1d"] = [](const ModuleConfig& c) {
      return std::make_shared<BatchNorm1d>(c.get_int("num_features"), c.get_double("eps"), c.get_double("momentum"),
                                           c.get_bool("affine"), c.get_bool("track_running_stats"));
    };
    m["BatchNorm2d"] = [](const ModuleConfig& c) {
      return std::make_shared<BatchNorm2d>(c.get_int("num_features"), c.get_double("eps"), c.get_double("momentum"),
                                           c.get_bool("affine"), c.get_bool("track_running_stats"));
    };
    m["LayerNorm"] = [](const ModuleConfig& c) {
      return std::make_shared<LayerNorm>(c.get_int("normalized_shape"), c.get_double("eps"),
                                         c.get_bool("elementwise_affine"));
    };
    m["Embedding"] = [](const ModuleConfig& c) {
      return std::make_shared<Embedding>(c.get_int("num_embeddings"), c.get_int("embedding_dim"));
    };
    m["MaxPool2d"] = [](const ModuleConfig& c) {
      return std::make_shared<MaxPool2d>(c.get_int("kernel_size"), c.get_int("stride"), c.get_int("padding"));
    };
    m["AvgPool2d"] = [](const ModuleConfig& c) {
      return std::make_shared<AvgPool2d>(c.get_int("kernel_size"), c.get_int("stride"), c.get_int("padding"));
    };
    return m;
  }();
  return r;
}
}  // namespace detail

}  // namespace tensorgrad::ag::nn
