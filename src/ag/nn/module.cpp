#include "tensorgrad/ag/nn/module.h"

#include "ag/autograd.h"
#include "tensorgrad/backend/backend.h"

#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "tensorgrad/core/error.h"

namespace tensorgrad::ag::nn {

// ---- StateDict ----

void StateDict::insert(const std::string& name, const Tensor& tensor) {
  if (find(name)) throw ValueError("state dict: '" + name + "' is already in it");
  if (!tensor.defined()) throw StateError("state dict: '" + name + "' is an undefined tensor");
  items_.emplace_back(name, tensor);
}

const Tensor* StateDict::find(const std::string& name) const {
  for (const auto& [key, t] : items_)
    if (key == name) return &t;
  return nullptr;
}

const Tensor& StateDict::at(const std::string& name) const {
  if (const Tensor* t = find(name)) return *t;
  throw IndexError("state dict: no entry '" + name + "' among its " + std::to_string(items_.size()) + " entries");
}

std::string LoadResult::str() const {
  std::ostringstream s;
  for (const std::string& k : missing_keys) s << "\n  missing key: " << k;
  for (const std::string& k : unexpected_keys) s << "\n  unexpected key: " << k;
  for (const std::string& k : shape_mismatches) s << "\n  shape mismatch: " << k;
  return s.str();
}

// ---- Module ----

Tensor Module::forward(const Tensor&) {
  throw ValueError(std::string(type()) + " has no one-input forward; call its own forward with its inputs");
}

void Module::check_name(const std::string& name) const {
  if (name.empty() || name.find('.') != std::string::npos)
    throw ValueError(std::string(type()) + ": a parameter, buffer or child name must be non-empty and without '.'; "
                     "got '" + name + "'");
  for (const auto& [n, t] : parameters_)
    if (n == name) throw ValueError(std::string(type()) + ": '" + name + "' is already a parameter");
  for (const auto& [n, t] : buffers_)
    if (n == name) throw ValueError(std::string(type()) + ": '" + name + "' is already a buffer");
  for (const auto& [n, m] : children_)
    if (n == name) throw ValueError(std::string(type()) + ": '" + name + "' is already a child module");
}

bool Module::contains(const Module* m) const {
  if (this == m) return true;
  for (const auto& [n, child] : children_)
    if (child->contains(m)) return true;  // children form a tree (add_child refuses loops), so this ends
  return false;
}

Tensor Module::register_parameter(const std::string& name, Tensor tensor, bool requires_grad) {
  check_name(name);
  if (!tensor.defined()) throw StateError(std::string(type()) + ": parameter '" + name + "' is undefined");
  if (!tensor.is_leaf())
    throw ValueError(std::string(type()) + ": parameter '" + name + "' must be a leaf (made by a factory or "
                     "detach()), not the result of a recorded op");
  tensor.requires_grad_(requires_grad);
  parameters_.emplace_back(name, tensor);
  return tensor;
}

Tensor Module::register_buffer(const std::string& name, Tensor tensor) {
  check_name(name);
  if (!tensor.defined()) throw StateError(std::string(type()) + ": buffer '" + name + "' is undefined");
  buffers_.emplace_back(name, tensor);
  return tensor;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  check_name(name);
  if (!module) throw StateError(std::string(type()) + ": child module '" + name + "' is null");
  if (module->contains(this))
    throw ValueError(std::string(type()) + ": child module '" + name + "' is this module or contains it; a module "
                     "tree cannot loop (forward, parameters() and state_dict() would never end)");
  children_.emplace_back(name, std::move(module));
}

void Module::collect(const std::string& prefix, bool params, bool recurse,
                     std::vector<std::pair<std::string, Tensor>>& out) const {
  for (const auto& [n, t] : params ? parameters_ : buffers_) out.emplace_back(prefix + n, t);
  if (!recurse) return;
  for (const auto& [n, child] : children_) child->collect(prefix + n + ".", params, true, out);
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> all, out;
  collect("", true, recurse, all);
  std::set<const void*> seen;  // a shared child's tensors once
  for (auto& p : all)
    if (seen.insert(p.second.data().raw()).second) out.push_back(std::move(p));
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", false, recurse, out);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_buffers(recurse)) out.push_back(t);
  return out;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& [n, m] : children_) out.push_back(m);
  return out;
}

Module& Module::train(bool on) {
  training_ = on;
  for (auto& [n, child] : children_) child->train(on);
  return *this;
}

Module& Module::to(Device device) {
  (void)backend(device);  // an unavailable device moves nothing
  std::vector<std::pair<std::string, Tensor>> all;
  collect("", true, true, all);
  collect("", false, true, all);
  for (auto& [name, t] : all) {
    ag::detail::TensorImpl& impl = *ag::detail::Access::impl(t);
    impl.data = ag::detail::copy_to(impl.data, device);
    if (impl.grad.defined()) impl.grad = ag::detail::copy_to(impl.grad, device);
  }
  return *this;
}

void Module::zero_grad(bool set_to_none) {
  for (Tensor& p : parameters()) {
    if (!p.grad().defined()) continue;
    if (set_to_none) p.set_grad(Tensor());
    else if (p.grad().defined()) p.grad().zero_();
  }
}

void Module::collect_state(const std::string& prefix, StateDict& out) const {
  for (const auto& [n, t] : parameters_) out.insert(prefix + n, t);
  for (const auto& [n, t] : buffers_) out.insert(prefix + n, t);
  for (const auto& [n, child] : children_) child->collect_state(prefix + n + ".", out);
}

StateDict Module::state_dict() const {
  StateDict d;
  collect_state("", d);
  return d;
}

LoadResult Module::load_state_dict(const StateDict& dict, bool strict) {
  StateDict mine = state_dict();
  LoadResult r;
  std::vector<std::pair<Tensor, Tensor>> copies;  // (target, source)
  for (const auto& [name, target] : mine) {
    const Tensor* src = dict.find(name);
    if (!src) {
      r.missing_keys.push_back(name);
      continue;
    }
    if (src->shape() != target.shape()) {
      r.shape_mismatches.push_back(name + ": model " + target.shape().str() + " vs state dict " + src->shape().str());
      continue;
    }
    if (src->dtype() != target.dtype())
      throw TypeError("load_state_dict: '" + name + "' is " + dtype_name(target.dtype()) + " in the model and " +
                      dtype_name(src->dtype()) + " in the state dict");
    copies.emplace_back(target, *src);
  }
  for (const auto& [name, t] : dict)
    if (!mine.contains(name)) r.unexpected_keys.push_back(name);
  if (strict && !r.ok())
    throw ValueError(std::string("load_state_dict: the state dict does not fit this ") + type() + " (strict):" +
                     r.str() + "\nLoad with strict = false to copy only what fits");
  NoGradGuard no_grad;
  for (auto& [target, src] : copies) target.copy_(src);
  return r;
}

// ---- registry ----

namespace {
std::mutex g_registry_mutex;
}  // namespace

void register_module_type(const std::string& type, ModuleFactory factory) {
  if (!factory) throw ValueError("register_module_type: the factory for '" + type + "' is empty");
  std::lock_guard<std::mutex> lock(g_registry_mutex);
  detail::module_registry()[type] = std::move(factory);
}

std::shared_ptr<Module> module_from_config(const ModuleConfig& config) {
  ModuleFactory f;
  {
    std::lock_guard<std::mutex> lock(g_registry_mutex);
    auto& r = detail::module_registry();
    auto it = r.find(config.type());
    if (it == r.end()) {
      std::string known;
      for (const auto& [k, v] : r) known += (known.empty() ? "" : ", ") + k;
      throw ValueError("no module type '" + config.type() + "' is registered (known: " + known +
                       "); call ag::nn::register_module_type for it, or give a factory when loading");
    }
    f = it->second;
  }
  return f(config);
}

}  // namespace tensorgrad::ag::nn
