#pragma once
// Built-in modules of the eager API, as torch.nn names them, with PyTorch's
// parameter names, layouts and default initialisations, so a PyTorch state
// dict converts by name. Activations keep the engine's layouts (features
// last; images {N, H, W, C}).
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "tensorgrad/ag/nn/module.h"

namespace tensorgrad::ag::nn {

/// y = x W^T + b (torch.nn.Linear): weight {out_features, in_features}, bias
/// {out_features}, both U(-1/sqrt(in), 1/sqrt(in)) from ag::default_generator()
/// (PyTorch's default). Input {..., in_features}. ValueError for a size < 1.
class Linear : public Module {
 public:
  /// torch.nn.Linear's arguments.
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  const char* type() const override { return "Linear"; }
  /// in_features, out_features, bias.
  ModuleConfig config() const override;
  /// input {..., in_features} -> {..., out_features}.
  Tensor forward(const Tensor& input) override;
  /// weight {out_features, in_features}; bias {out_features}, undefined
  /// without one.
  ///@{
  Tensor weight, bias;  // bias undefined without one
  ///@}

 private:
  int64_t in_, out_;
};

/// Modules applied in order (torch.nn.Sequential); children named "0", "1", ...
class Sequential : public Module {
 public:
  /// No modules yet: push_back adds them.
  Sequential() = default;
  /// The modules in order, as push_back each.
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);
  const char* type() const override { return "Sequential"; }
  /// Appends a module as the next child (named by its position).
  Sequential& push_back(std::shared_ptr<Module> module);
  /// Each module's forward on the previous one's output.
  Tensor forward(const Tensor& input) override;
  /// The number of modules.
  size_t size() const { return named_children().size(); }
  /// Child i; IndexError outside [0, size()).
  std::shared_ptr<Module> operator[](size_t i) const;
};

/// max(x, 0), element-wise (torch.nn.ReLU). The other activation modules
/// below are likewise element-wise and without parameters.
class ReLU : public Module {
 public:
  const char* type() const override { return "ReLU"; }
  Tensor forward(const Tensor& x) override;
};
/// 1 / (1 + e^-x), element-wise (torch.nn.Sigmoid).
class Sigmoid : public Module {
 public:
  const char* type() const override { return "Sigmoid"; }
  Tensor forward(const Tensor& x) override;
};
/// tanh(x), element-wise (torch.nn.Tanh).
class Tanh : public Module {
 public:
  const char* type() const override { return "Tanh"; }
  Tensor forward(const Tensor& x) override;
};
/// torch.nn.GELU(approximate): "none" (the default) is the exact form
/// x Phi(x) through erf, "tanh" the tanh approximation
/// 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), as ag::gelu. The choice
/// is saved in the module's config ("approximate"); a config without it, as
/// saved before the option existed, loads as "none". ValueError for any
/// other string, naming both.
class GELU : public Module {
 public:
  /// Throws ValueError for an `approximate` other than "none" or "tanh".
  explicit GELU(std::string approximate = "none");
  const char* type() const override { return "GELU"; }
  ModuleConfig config() const override;
  Tensor forward(const Tensor& x) override;
  /// "none" or "tanh".
  const std::string& approximate() const { return approximate_; }

 private:
  std::string approximate_;
};
/// x sigmoid(x), element-wise (torch.nn.SiLU, ag::silu).
class SiLU : public Module {
 public:
  const char* type() const override { return "SiLU"; }
  Tensor forward(const Tensor& x) override;
};
/// log(1 + e^x), element-wise (torch.nn.Softplus with beta 1, ag::softplus).
class Softplus : public Module {
 public:
  const char* type() const override { return "Softplus"; }
  Tensor forward(const Tensor& x) override;
};
/// x where x > 0, else alpha (e^x - 1) (torch.nn.ELU, ag::elu).
class ELU : public Module {
 public:
  /// The negative side's scale, PyTorch's default 1.
  explicit ELU(float alpha = 1.0f) : alpha_(alpha) {}
  const char* type() const override { return "ELU"; }
  ModuleConfig config() const override;
  Tensor forward(const Tensor& x) override;

 private:
  float alpha_;
};
/// x where x > 0, else negative_slope x (torch.nn.LeakyReLU, ag::leaky_relu).
class LeakyReLU : public Module {
 public:
  /// The negative side's slope, PyTorch's default 0.01.
  explicit LeakyReLU(float negative_slope = 0.01f) : slope_(negative_slope) {}
  const char* type() const override { return "LeakyReLU"; }
  ModuleConfig config() const override;
  Tensor forward(const Tensor& x) override;

 private:
  float slope_;
};
/// Softmax along the last dimension (dim -1, the one the kernels take).
class Softmax : public Module {
 public:
  /// `dim` as ag::softmax takes it: forward throws ValueError for any but
  /// the last.
  explicit Softmax(int dim = -1) : dim_(dim) {}
  const char* type() const override { return "Softmax"; }
  ModuleConfig config() const override;
  Tensor forward(const Tensor& x) override;

 private:
  int dim_;
};
/// x itself.
class Identity : public Module {
 public:
  const char* type() const override { return "Identity"; }
  Tensor forward(const Tensor& x) override { return x; }
};
/// {N, d1, d2, ...} -> {N, d1 * d2 * ...} (torch.nn.Flatten's default).
class Flatten : public Module {
 public:
  const char* type() const override { return "Flatten"; }
  Tensor forward(const Tensor& x) override;
};
/// Inverted dropout with probability p in training mode, the identity in
/// eval mode (torch.nn.Dropout). Masks come from ag::default_generator().
/// ValueError for p outside [0, 1).
class Dropout : public Module {
 public:
  /// The drop probability, PyTorch's default 0.5.
  explicit Dropout(float p = 0.5f);
  const char* type() const override { return "Dropout"; }
  ModuleConfig config() const override;
  Tensor forward(const Tensor& x) override;

 private:
  float p_;
};

}  // namespace tensorgrad::ag::nn
