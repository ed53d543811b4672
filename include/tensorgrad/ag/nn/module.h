#pragma once
// Modules of the eager API, in PyTorch's words (torch.nn.Module): a module
// owns named parameters (tensors that require grad), named buffers (state
// that is saved but not trained: batch-norm running statistics) and named
// child modules; names join with dots ("0.weight", "encoder.fc.bias") as
// PyTorch's state dicts do, so a PyTorch state dict converts by name.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tensorgrad/ag/tensor.h"
#include "tensorgrad/nn/layers.h"

namespace tensorgrad::ag::nn {

/// A module's configuration: its type and the constructor arguments that
/// rebuild it, by PyTorch's argument names ("in_features", "bias", ...).
/// The same class as the Keras layers' configuration.
using ModuleConfig = tensorgrad::nn::LayerConfig;

/// Named tensors in registration order (torch's OrderedDict of a state dict).
class StateDict {
 public:
  /// Adds `name` (ValueError when it is already there).
  void insert(const std::string& name, const Tensor& tensor);
  /// The tensor named `name`, or nullptr.
  const Tensor* find(const std::string& name) const;
  /// The tensor named `name`; IndexError naming it when absent.
  const Tensor& at(const std::string& name) const;
  /// Whether `name` is there.
  bool contains(const std::string& name) const { return find(name) != nullptr; }
  /// The number of entries.
  size_t size() const { return items_.size(); }
  /// Whether there is no entry.
  bool empty() const { return items_.empty(); }
  /// Every (name, tensor) in insertion order.
  const std::vector<std::pair<std::string, Tensor>>& items() const { return items_; }
  /// Iteration over items(): `for (const auto& [name, t] : dict)`.
  ///@{
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }
  ///@}

 private:
  std::vector<std::pair<std::string, Tensor>> items_;
};

/// What load_state_dict did not match (torch's _IncompatibleKeys), and, for
/// strict = false, what it therefore skipped.
struct LoadResult {
  std::vector<std::string> missing_keys;     ///< in the module, not in the dict
  std::vector<std::string> unexpected_keys;  ///< in the dict, not in the module
  std::vector<std::string> shape_mismatches; ///< "name: model {a, b} vs file {c, d}" (also skipped)
  /// Whether everything matched.
  bool ok() const { return missing_keys.empty() && unexpected_keys.empty() && shape_mismatches.empty(); }
  /// One line per problem, for messages.
  std::string str() const;
};

/// The base of every module (torch.nn.Module). A subclass registers its
/// parameters, buffers and children in its constructor and keeps the
/// returned handles (ag::Tensor shares, so the handle and the registry are
/// the same tensor) and implements forward.
///
/// Modules are held by std::shared_ptr; a child registered in two parents
/// is shared (its parameters listed once per path in named_parameters,
/// once in parameters()).
class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  /// The type name ("Linear", "Sequential"), which the state-dict file
  /// stores to rebuild built-in modules.
  virtual const char* type() const = 0;
  /// The constructor arguments (PyTorch's names). Default: the type only.
  virtual ModuleConfig config() const { return ModuleConfig(type()); }

  /// The module applied to one input. Modules with other signatures (several
  /// inputs or outputs) have their own forward and throw ValueError here.
  virtual Tensor forward(const Tensor& input);
  /// forward(input), as calling a torch.nn.Module.
  Tensor operator()(const Tensor& input) { return forward(input); }

  /// Parameters (and their dotted names), this module's first, then each
  /// child's in registration order; a tensor reached twice is listed once.
  /// Without `recurse`, this module's own only.
  ///@{
  std::vector<Tensor> parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_parameters(bool recurse = true) const;
  ///@}
  /// Buffers (and their dotted names), in the same order as parameters.
  ///@{
  std::vector<Tensor> buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const;
  ///@}
  /// The direct children (and their names), in registration order.
  ///@{
  std::vector<std::shared_ptr<Module>> children() const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const { return children_; }
  ///@}

  /// Training mode (dropout active, batch statistics) for this module and
  /// every child; eval() is train(false). Returns *this, as PyTorch.
  ///@{
  Module& train(bool on = true);
  Module& eval() { return train(false); }
  ///@}
  /// Whether the module is in training mode (torch's module.training).
  bool is_training() const { return training_; }

  /// Moves every parameter and buffer (and a parameter's grad()) of this
  /// module and its children to `device`, in place, as torch.nn.Module.to:
  /// handles the module and its callers hold stay valid and now see the
  /// device's memory, so a module moved before its optimizer is made trains
  /// there. Returns *this. Throws StateError when the device is not
  /// available (nothing moved then), MemoryError when it runs out of memory
  /// (what was moved stays moved; move it back or load a state dict).
  Module& to(Device device);

  /// Every parameter's grad() reset: undefined with set_to_none (PyTorch's
  /// default), else zeroed in place.
  void zero_grad(bool set_to_none = true);

  /// Parameters and buffers by dotted name (PyTorch's state_dict), sharing
  /// memory with the module.
  StateDict state_dict() const;
  /// Copies each entry's values into the module's tensor of the same name,
  /// in place (handles stay valid). strict (PyTorch's default): any missing
  /// key, unexpected key or shape mismatch throws ValueError listing all of
  /// them ("name: model {a, b} vs file {c, d}") and nothing is copied. Not
  /// strict: the matching entries are copied, the rest skipped and reported
  /// in the result. TypeError for a dtype mismatch.
  LoadResult load_state_dict(const StateDict& dict, bool strict = true);

 protected:
  /// Registers a parameter (requires grad unless `requires_grad` is false)
  /// and returns it. ValueError for an empty name, a dot in it, or a name
  /// already used by a parameter, buffer or child.
  Tensor register_parameter(const std::string& name, Tensor tensor, bool requires_grad = true);
  /// Registers a buffer (saved in the state dict, not trained).
  Tensor register_buffer(const std::string& name, Tensor tensor);
  /// Registers a child module and returns it.
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }

 private:
  void check_name(const std::string& name) const;
  /// Whether `m` is this module or one below it.
  bool contains(const Module* m) const;
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  void collect(const std::string& prefix, bool params, bool recurse,
               std::vector<std::pair<std::string, Tensor>>& out) const;
  // PyTorch's state-dict order: own parameters, own buffers, then each child.
  void collect_state(const std::string& prefix, StateDict& out) const;

  std::vector<std::pair<std::string, Tensor>> parameters_, buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

namespace detail {
/// The factories by type, the built-in modules' already in (src/ag/nn/modules.cpp).
std::map<std::string, std::function<std::shared_ptr<Module>(const ModuleConfig&)>>& module_registry();
}  // namespace detail

/// Builds a module of one type from its configuration (the state-dict
/// loader's way of rebuilding modules, ag::load).
using ModuleFactory = std::function<std::shared_ptr<Module>(const ModuleConfig&)>;
/// Registers the factory of a user's module type, so ag::load can rebuild
/// it: `type` is what the module's type() returns. Registering a type again
/// replaces its factory. Throws ValueError for an empty factory.
void register_module_type(const std::string& type, ModuleFactory factory);
/// A new module of config.type() built from `config` by its registered
/// factory. Built-in types are registered already. Throws ValueError for an
/// unknown type, listing the known ones and saying to call
/// register_module_type.
std::shared_ptr<Module> module_from_config(const ModuleConfig& config);

}  // namespace tensorgrad::ag::nn
