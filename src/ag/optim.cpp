// torch.optim for the eager API on the graph engine's optimizer kernels
// (ag/optim.h). Nothing numerical lives here: per parameter, OptimizerTick
// advances the step count and writes the bias corrections and the step's
// dampening into the group's hyper tensor, then the update op (SgdUpdate,
// AdamWUpdate, RmspropUpdate in PyTorch's modes) changes the parameter and
// its buffers in place; clipping runs SquaredNorm, ClipNorm and ClipValue.
#include "tensorgrad/ag/optim.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <utility>

#include "ag/autograd.h"
#include "tensorgrad/backend/backend.h"
#include "ops/norm_pair.h"
#include "tensorgrad/core/error.h"
#include "tensorgrad/ops/op.h"

namespace tensorgrad::ag::optim {

namespace {

using detail::Access;

// A number as Python prints it in PyTorch's messages (close enough: %g with 17 digits trimmed).
std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  std::string s = buf;
  // Prefer the shortest representation that reads back the same.
  for (int p = 1; p <= 17; ++p) {
    std::snprintf(buf, sizeof buf, "%.*g", p, v);
    if (std::strtod(buf, nullptr) == v) return buf;
  }
  return s;
}

const void* key(const Tensor& t) { return Access::impl(t).get(); }

// Runs one in-place optimizer op of the op table (its kernel writes inputs[0]).
void run_in_place(OpKind op, const OpAttrs& attrs, std::initializer_list<tensorgrad::Tensor> inputs) {
  detail::run_into(op, attrs, std::span<const tensorgrad::Tensor>(inputs.begin(), inputs.size()), *inputs.begin());
}

// The parameter's memory changed in place: its version counter advances (PyTorch's optimizer step does).
void bump_version(const Tensor& t) { ++Access::impl(t)->version(); }

Tensor scalar_f32(double v) { return Tensor(tensorgrad::Tensor::full(Shape{}, float(v))); }
Tensor scalar_i64(int64_t v) {
  tensorgrad::Tensor t = tensorgrad::Tensor::zeros(Shape{}, DType::Int64);
  t.data<int64_t>()[0] = v;
  return Tensor(t);
}
double read_number(const Tensor& t, const std::string& name) {
  if (t.numel() != 1) throw ValueError("state dict entry " + name + ": expected one value; got shape " + t.shape().str());
  if (t.dtype() == DType::Int64) return double(t.data().to(Device::CPU).data<int64_t>()[0]);
  return double(t.item());
}
int64_t read_int(const Tensor& t, const std::string& name) {
  if (t.numel() != 1) throw ValueError("state dict entry " + name + ": expected one value; got shape " + t.shape().str());
  const tensorgrad::Tensor host = t.data().to(Device::CPU);
  if (t.dtype() == DType::Int64) return host.data<int64_t>()[0];
  if (t.dtype() == DType::Int32) return host.data<int32_t>()[0];
  return int64_t(t.item());
}

// Host bytes into `t` at byte `offset`, after the ops queued on its device so far.
void copy_in_order(const tensorgrad::Tensor& t, const void* src, size_t bytes, size_t offset = 0) {
  backend(t.device())->copy_from_host_in_order(*t.storage(), t.storage_offset() + offset, src, bytes);
}

// An independent copy on `device` (a state dict's tensor is the caller's).
tensorgrad::Tensor copy_of(const tensorgrad::Tensor& t, Device device) {
  return t.device() == device ? t.clone() : detail::copy_to(t, device);
}

// Optimizer state lives where its parameter does (PyTorch makes it with torch.zeros_like).
Tensor zeros_like(const Tensor& p) {
  return Tensor(detail::copy_to(tensorgrad::Tensor::zeros(p.shape(), DType::Float32), p.device()));
}
tensorgrad::Tensor step_counter(int64_t value, Device device) {
  tensorgrad::Tensor t = tensorgrad::Tensor::zeros(Shape{1}, DType::Int64);
  t.data<int64_t>()[0] = value;
  return detail::copy_to(t, device);
}

// The group options in the state dict's order, with accessors.
struct Option {
  const char* name;
  bool is_bool;
  std::optional<double> ParamGroup::*number;
  std::optional<bool> ParamGroup::*flag;
};
const Option kOptions[] = {
    {"lr", false, &ParamGroup::lr, nullptr},
    {"eps", false, &ParamGroup::eps, nullptr},
    {"weight_decay", false, &ParamGroup::weight_decay, nullptr},
    {"momentum", false, &ParamGroup::momentum, nullptr},
    {"dampening", false, &ParamGroup::dampening, nullptr},
    {"nesterov", true, nullptr, &ParamGroup::nesterov},
    {"alpha", false, &ParamGroup::alpha, nullptr},
    {"centered", true, nullptr, &ParamGroup::centered},
};

void check_lr(const ParamGroup& g) {
  if (!(*g.lr >= 0.0)) throw ValueError("Invalid learning rate: " + num(*g.lr));
}
void check_eps(const ParamGroup& g) {
  if (!(*g.eps >= 0.0)) throw ValueError("Invalid epsilon value: " + num(*g.eps));
}
void check_weight_decay(const ParamGroup& g) {
  if (!(*g.weight_decay >= 0.0)) throw ValueError("Invalid weight_decay value: " + num(*g.weight_decay));
}
void check_momentum(const ParamGroup& g) {
  if (!(*g.momentum >= 0.0)) throw ValueError("Invalid momentum value: " + num(*g.momentum));
}

}  // namespace

// ---------------------------------------------------------------- Optimizer

Tensor* Optimizer::ParamState::find(const std::string& name) {
  for (auto& [n, t] : buffers)
    if (n == name) return &t;
  return nullptr;
}

Optimizer::Optimizer(ParamGroup defaults) : defaults_(std::move(defaults)) {}

void Optimizer::add_param_groups(std::vector<ParamGroup> groups) {
  if (groups.empty()) throw ValueError("optimizer got an empty parameter list");
  for (ParamGroup& g : groups) add_param_group(std::move(g));
}

void Optimizer::fill_defaults(ParamGroup& g) const {
  for (const Option& o : kOptions) {
    if (o.is_bool) {
      if ((defaults_.*o.flag).has_value()) {
        if (!(g.*o.flag).has_value()) g.*o.flag = defaults_.*o.flag;
      } else {
        g.*o.flag = std::nullopt;
      }
    } else if ((defaults_.*o.number).has_value()) {
      if (!(g.*o.number).has_value()) g.*o.number = defaults_.*o.number;
    } else {
      g.*o.number = std::nullopt;
    }
  }
  if (defaults_.betas.has_value()) {
    if (!g.betas.has_value()) g.betas = defaults_.betas;
  } else {
    g.betas = std::nullopt;
  }
}

void Optimizer::add_param_group(ParamGroup group) {
  if (group.params.empty()) throw ValueError("optimizer got an empty parameter list");
  std::set<const void*> seen;
  for (const ParamGroup& g : groups_)
    for (const Tensor& p : g.params) seen.insert(key(p));
  for (size_t i = 0; i < group.params.size(); ++i) {
    const Tensor& p = group.params[i];
    const std::string which = "parameter " + std::to_string(i) + " of the group";
    if (!p.defined()) throw ValueError("optimizer can only optimize defined Tensors; " + which + " is undefined");
    if (!p.requires_grad())
      throw ValueError("optimizer: " + which + " (shape " + p.shape().str() +
                       ") does not require grad; mark it with requires_grad_() or leave it out");
    if (!p.is_leaf()) throw ValueError("can't optimize a non-leaf Tensor (" + which + ")");
    if (!seen.insert(key(p)).second) throw ValueError("some parameters appear in more than one parameter group");
  }
  fill_defaults(group);
  validate(group);
  groups_.push_back(std::move(group));
  hypers_.push_back(tensorgrad::Tensor::zeros(Shape{kHyperSize}));
}

void Optimizer::zero_grad(bool set_to_none) {
  for (ParamGroup& g : groups_)
    for (Tensor& p : g.params) {
      const tensorgrad::Tensor& grad = Access::impl(p)->grad;
      if (!grad.defined()) continue;
      if (set_to_none) {
        p.set_grad(Tensor());
      } else {
        NoGradGuard guard;
        p.grad().zero_();
      }
    }
}

void Optimizer::tick(ParamState& state, const tensorgrad::Tensor& hyper) {
  run_in_place(OpKind::OptimizerTick, OpAttrs{}, {hyper, state.step});
}

void Optimizer::step() {
  NoGradGuard guard;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    ParamGroup& group = groups_[gi];
    fill_defaults(group);  // options a user reset to empty take the defaults again
    validate(group);
    // The group's hyperparameters live on its parameters' device.
    for (const Tensor& p : group.params)
      if (p.defined()) {
        if (hypers_[gi].device() != p.device()) hypers_[gi] = detail::copy_to(hypers_[gi], p.device());
        break;
      }
    const tensorgrad::Tensor& hyper = hypers_[gi];
    // Persistent state is written by copies (DESIGN.md: state lives on the
    // device): the slots the group does not set keep their values.
    // Written whole from the host, in order with the queued ops (on a
    // device, without reading anything back): the slots OptimizerTick
    // writes (bias corrections, the step's dampening) it recomputes from
    // the step count before each update reads them.
    float h[kHyperSize] = {};
    write_hyper(group, h);
    copy_in_order(hyper, h, sizeof h);
    for (const Tensor& p : group.params) {
      if (!p.defined())
        throw StateError(std::string(name()) + ".step: parameter group " + std::to_string(gi) +
                         " holds an undefined tensor (put there through param_groups()); give it defined parameters");
      const tensorgrad::Tensor& grad = Access::impl(p)->grad;  // no handle made per step
      if (!grad.defined()) continue;
      ParamState& s = state_[key(p)];
      if (!s.step.defined()) s.step = step_counter(0, p.device());
      update(group, p, grad, s, hyper);
      bump_version(p);
    }
  }
}

nn::StateDict Optimizer::state_dict() const {
  nn::StateDict dict;
  size_t index = 0;
  for (const ParamGroup& g : groups_)
    for (const Tensor& p : g.params) {
      const std::string prefix = "state." + std::to_string(index++) + ".";
      auto it = state_.find(key(p));
      if (it == state_.end()) continue;
      dict.insert(prefix + "step", Tensor(it->second.step.reshape(Shape{})));
      for (const auto& [name, t] : it->second.buffers) dict.insert(prefix + name, t);
    }
  index = 0;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const ParamGroup& g = groups_[gi];
    const std::string prefix = "param_groups." + std::to_string(gi) + ".";
    for (const Option& o : kOptions) {
      if (o.is_bool) {
        if ((g.*o.flag).has_value()) dict.insert(prefix + o.name, scalar_i64(*(g.*o.flag) ? 1 : 0));
      } else if ((g.*o.number).has_value()) {
        dict.insert(prefix + o.name, scalar_f32(*(g.*o.number)));
      }
    }
    if (g.betas) {
      dict.insert(prefix + "betas.0", scalar_f32((*g.betas)[0]));
      dict.insert(prefix + "betas.1", scalar_f32((*g.betas)[1]));
    }
    tensorgrad::Tensor ids = tensorgrad::Tensor::zeros(Shape{int64_t(g.params.size())}, DType::Int64);
    for (size_t k = 0; k < g.params.size(); ++k) ids.data<int64_t>()[k] = int64_t(index++);
    dict.insert(prefix + "params", Tensor(ids));
  }
  return dict;
}

void Optimizer::load_state_dict(const nn::StateDict& dict) {
  // Everything is checked before anything changes.
  std::set<std::string> used;
  const std::string kind = name();
  auto need = [&](const std::string& name) -> const Tensor& {
    const Tensor* t = dict.find(name);
    if (!t) throw ValueError("load_state_dict: the state dict lacks " + name + " (a " + kind + " state dict?)");
    used.insert(name);
    return *t;
  };
  size_t dict_groups = 0;
  while (dict.contains("param_groups." + std::to_string(dict_groups) + ".params")) ++dict_groups;
  if (dict_groups != groups_.size())
    throw ValueError("load_state_dict: " + std::to_string(groups_.size()) + " parameter groups here vs " +
                     std::to_string(dict_groups) + " in the state dict");
  std::vector<ParamGroup> groups = groups_;
  std::vector<Tensor> params;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    ParamGroup& g = groups[gi];
    const std::string prefix = "param_groups." + std::to_string(gi) + ".";
    const Tensor& ids = need(prefix + "params");
    if (ids.numel() != int64_t(g.params.size()))
      throw ValueError("load_state_dict: parameter group " + std::to_string(gi) + " has " +
                       std::to_string(g.params.size()) + " parameters here vs " + std::to_string(ids.numel()) +
                       " in the state dict");
    for (const Option& o : kOptions) {
      if (o.is_bool) {
        if ((g.*o.flag).has_value()) g.*o.flag = read_int(need(prefix + o.name), prefix + o.name) != 0;
      } else if ((g.*o.number).has_value()) {
        g.*o.number = read_number(need(prefix + o.name), prefix + o.name);
      }
    }
    if (g.betas) {
      g.betas = std::array<double, 2>{read_number(need(prefix + "betas.0"), prefix + "betas.0"),
                                      read_number(need(prefix + "betas.1"), prefix + "betas.1")};
    }
    validate(g);
    for (const Tensor& p : g.params) params.push_back(p);
  }
  const std::vector<std::string> buffers = buffer_names();
  std::vector<std::pair<const void*, ParamState>> loaded;
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string prefix = "state." + std::to_string(i) + ".";
    ParamState s;
    bool any = false;
    for (const std::string& b : buffers) {
      const Tensor* t = dict.find(prefix + b);
      if (!t) continue;
      used.insert(prefix + b);
      any = true;
      if (t->shape() != params[i].shape())
        throw ValueError("optimizer state for parameter " + std::to_string(i) + ": " + params[i].shape().str() +
                         " here vs " + t->shape().str() + " in the state dict (" + b + ")");
      if (t->dtype() != DType::Float32)
        throw ValueError("optimizer state for parameter " + std::to_string(i) + ": " + b + " is " +
                         dtype_name(t->dtype()) + " in the state dict, not float32");
      s.buffers.emplace_back(b, Tensor(copy_of(t->data(), params[i].device())));
    }
    const Tensor* step = dict.find(prefix + "step");
    if (step) used.insert(prefix + "step");
    if (!step && !any) continue;
    // PyTorch's SGD keeps no step: a momentum buffer means the first step is done.
    s.step = step_counter(step ? read_int(*step, prefix + "step") : 1, params[i].device());
    loaded.emplace_back(key(params[i]), std::move(s));
  }
  for (const auto& entry : dict)
    if (!used.count(entry.first))
      throw ValueError("load_state_dict: unexpected entry " + entry.first + " in the state dict for " + kind +
                       " (a state for a parameter index past " + std::to_string(params.size() - 1) +
                       ", or a buffer this optimizer does not keep?)");
  // Apply.
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    ParamGroup& g = groups_[gi];
    const std::vector<Tensor> keep = std::move(g.params);
    g = std::move(groups[gi]);
    g.params = keep;
  }
  state_.clear();
  for (auto& [k, s] : loaded) state_[k] = std::move(s);
}

// ---------------------------------------------------------------- SGD

namespace {
ParamGroup sgd_defaults(double lr, double momentum, double dampening, double weight_decay, bool nesterov) {
  ParamGroup d;
  d.lr = lr, d.momentum = momentum, d.dampening = dampening, d.weight_decay = weight_decay, d.nesterov = nesterov;
  return d;
}
std::vector<ParamGroup> one_group(std::vector<Tensor> params) {
  if (params.empty()) throw ValueError("optimizer got an empty parameter list");
  return {ParamGroup(std::move(params))};
}
}  // namespace

SGD::SGD(std::vector<ParamGroup> params, double lr, double momentum, double dampening, double weight_decay,
         bool nesterov)
    : Optimizer(sgd_defaults(lr, momentum, dampening, weight_decay, nesterov)) {
  add_param_groups(std::move(params));
}
SGD::SGD(std::vector<Tensor> params, double lr, double momentum, double dampening, double weight_decay, bool nesterov)
    : SGD(one_group(std::move(params)), lr, momentum, dampening, weight_decay, nesterov) {}

void SGD::validate(const ParamGroup& g) const {
  check_lr(g);
  check_momentum(g);
  check_weight_decay(g);
  if (*g.nesterov && (*g.momentum <= 0.0 || *g.dampening != 0.0))
    throw ValueError("Nesterov momentum requires a momentum and zero dampening");
}

void SGD::write_hyper(const ParamGroup& g, float* h) const {
  h[kLr] = float(*g.lr);
  h[kWeightDecay] = float(*g.weight_decay);
  h[kMomentum] = float(*g.momentum);
  h[kDampening] = float(*g.dampening);
}

void SGD::update(const ParamGroup& g, const Tensor& param, const tensorgrad::Tensor& grad, ParamState& s,
                 const tensorgrad::Tensor& hyper) const {
  tick(s, hyper);
  OpAttrs at;
  at.flags = kL2WeightDecay;
  if (*g.momentum == 0.0) {
    run_in_place(OpKind::SgdUpdate, at, {param.data(), grad, hyper});
    return;
  }
  at.flags |= kUseMomentum;
  if (*g.nesterov) at.flags |= kNesterov;
  Tensor* buf = s.find("momentum_buffer");
  if (!buf) {
    // PyTorch's buffer starts as the gradient (no dampening) whenever it is
    // created: with a zero buffer, the update's first step does exactly that.
    s.buffers.emplace_back("momentum_buffer", zeros_like(param));
    buf = &s.buffers.back().second;
    const float no_dampening = 0.0f;
    copy_in_order(hyper, &no_dampening, sizeof no_dampening, kStepDampening * sizeof(float));
  }
  run_in_place(OpKind::SgdUpdate, at, {param.data(), grad, buf->data(), hyper});
}

// ---------------------------------------------------------------- Adam, AdamW

namespace {
ParamGroup adam_defaults(double lr, std::array<double, 2> betas, double eps, double weight_decay) {
  ParamGroup d;
  d.lr = lr, d.betas = betas, d.eps = eps, d.weight_decay = weight_decay;
  return d;
}
}  // namespace

Adam::Adam(std::vector<ParamGroup> params, ParamGroup defaults, bool decoupled)
    : Optimizer(std::move(defaults)), decoupled_(decoupled) {
  add_param_groups(std::move(params));
}
Adam::Adam(std::vector<ParamGroup> params, double lr, std::array<double, 2> betas, double eps, double weight_decay)
    : Adam(std::move(params), adam_defaults(lr, betas, eps, weight_decay), false) {}
Adam::Adam(std::vector<Tensor> params, double lr, std::array<double, 2> betas, double eps, double weight_decay)
    : Adam(one_group(std::move(params)), lr, betas, eps, weight_decay) {}

AdamW::AdamW(std::vector<ParamGroup> params, double lr, std::array<double, 2> betas, double eps, double weight_decay)
    : Adam(std::move(params), adam_defaults(lr, betas, eps, weight_decay), true) {}
AdamW::AdamW(std::vector<Tensor> params, double lr, std::array<double, 2> betas, double eps, double weight_decay)
    : AdamW(one_group(std::move(params)), lr, betas, eps, weight_decay) {}

void Adam::validate(const ParamGroup& g) const {
  check_lr(g);
  check_eps(g);
  for (int i = 0; i < 2; ++i)
    if (!((*g.betas)[i] >= 0.0 && (*g.betas)[i] < 1.0))
      throw ValueError("Invalid beta parameter at index " + std::to_string(i) + ": " + num((*g.betas)[i]));
  check_weight_decay(g);
}

void Adam::write_hyper(const ParamGroup& g, float* h) const {
  h[kLr] = float(*g.lr);
  h[kBeta1] = float((*g.betas)[0]);
  h[kBeta2] = float((*g.betas)[1]);
  h[kEps] = float(*g.eps);
  h[kWeightDecay] = float(*g.weight_decay);
}

void Adam::update(const ParamGroup&, const Tensor& param, const tensorgrad::Tensor& grad, ParamState& s,
                  const tensorgrad::Tensor& hyper) const {
  if (!s.find("exp_avg")) s.buffers.emplace_back("exp_avg", zeros_like(param));
  if (!s.find("exp_avg_sq")) s.buffers.emplace_back("exp_avg_sq", zeros_like(param));
  tick(s, hyper);
  OpAttrs at;
  if (!decoupled_) at.flags = kL2WeightDecay;
  run_in_place(OpKind::AdamWUpdate, at,
               {param.data(), grad, s.find("exp_avg")->data(), s.find("exp_avg_sq")->data(), hyper});
}

// ---------------------------------------------------------------- RMSprop

RMSprop::RMSprop(std::vector<ParamGroup> params, double lr, double alpha, double eps, double weight_decay,
                 double momentum, bool centered)
    : Optimizer([&] {
        ParamGroup d;
        d.lr = lr, d.alpha = alpha, d.eps = eps, d.weight_decay = weight_decay, d.momentum = momentum,
        d.centered = centered;
        return d;
      }()) {
  add_param_groups(std::move(params));
}
RMSprop::RMSprop(std::vector<Tensor> params, double lr, double alpha, double eps, double weight_decay,
                 double momentum, bool centered)
    : RMSprop(one_group(std::move(params)), lr, alpha, eps, weight_decay, momentum, centered) {}

void RMSprop::validate(const ParamGroup& g) const {
  check_lr(g);
  check_eps(g);
  check_momentum(g);
  check_weight_decay(g);
  if (!(*g.alpha >= 0.0)) throw ValueError("Invalid alpha value: " + num(*g.alpha));
}

void RMSprop::write_hyper(const ParamGroup& g, float* h) const {
  h[kLr] = float(*g.lr);
  h[kRho] = float(*g.alpha);
  h[kEps] = float(*g.eps);
  h[kWeightDecay] = float(*g.weight_decay);
  h[kMomentum] = float(*g.momentum);
}

void RMSprop::update(const ParamGroup& g, const Tensor& param, const tensorgrad::Tensor& grad, ParamState& s,
                     const tensorgrad::Tensor& hyper) const {
  // PyTorch's order of the state: step, square_avg, momentum_buffer, grad_avg.
  if (!s.find("square_avg")) s.buffers.emplace_back("square_avg", zeros_like(param));
  const bool momentum = *g.momentum > 0.0;
  if (momentum && !s.find("momentum_buffer")) s.buffers.emplace_back("momentum_buffer", zeros_like(param));
  if (*g.centered && !s.find("grad_avg")) s.buffers.emplace_back("grad_avg", zeros_like(param));
  tick(s, hyper);
  OpAttrs at;
  at.flags = kL2WeightDecay;
  std::vector<tensorgrad::Tensor> in{param.data(), grad, s.find("square_avg")->data()};
  if (*g.centered) {
    at.flags |= kCentered;
    in.push_back(s.find("grad_avg")->data());
  }
  if (momentum) {
    at.flags |= kUseMomentum;
    in.push_back(s.find("momentum_buffer")->data());
  }
  in.push_back(hyper);
  detail::run_into(OpKind::RmspropUpdate, at, in, in[0]);
}

// ---------------------------------------------------------------- schedulers

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  for (const ParamGroup& g : optimizer.param_groups()) base_lrs_.push_back(double(float(*g.lr)));
}

void LRScheduler::apply_lrs() {
  std::vector<ParamGroup>& groups = optimizer_.param_groups();
  if (groups.size() != base_lrs_.size())
    throw StateError("lr scheduler: the optimizer has " + std::to_string(groups.size()) +
                     " parameter groups, the scheduler was made for " + std::to_string(base_lrs_.size()));
  last_lr_.clear();
  for (size_t g = 0; g < groups.size(); ++g) {
    groups[g].lr = lr_at(g, last_epoch_);
    last_lr_.push_back(*groups[g].lr);
  }
}

void LRScheduler::step() {
  ++step_count_;
  ++last_epoch_;
  apply_lrs();
}

nn::StateDict LRScheduler::state_dict() const {
  nn::StateDict dict;
  dict.insert("last_epoch", scalar_i64(last_epoch_));
  dict.insert("_step_count", scalar_i64(step_count_));
  for (size_t g = 0; g < base_lrs_.size(); ++g) dict.insert("base_lrs." + std::to_string(g), scalar_f32(base_lrs_[g]));
  return dict;
}

void LRScheduler::load_state_dict(const nn::StateDict& dict) {
  size_t n = 0;
  while (dict.contains("base_lrs." + std::to_string(n))) ++n;
  if (n != base_lrs_.size())
    throw ValueError("lr scheduler load_state_dict: " + std::to_string(base_lrs_.size()) +
                     " parameter groups here vs " + std::to_string(n) + " base_lrs in the state dict");
  for (const char* name : {"last_epoch", "_step_count"})
    if (!dict.contains(name)) throw ValueError(std::string("lr scheduler load_state_dict: the state dict lacks ") + name);
  if (dict.size() != n + 2) throw ValueError("lr scheduler load_state_dict: unexpected entries in the state dict");
  std::vector<double> base(n);
  for (size_t g = 0; g < n; ++g) {
    const std::string name = "base_lrs." + std::to_string(g);
    base[g] = read_number(dict.at(name), name);
  }
  base_lrs_ = base;
  last_epoch_ = read_int(dict.at("last_epoch"), "last_epoch");
  step_count_ = read_int(dict.at("_step_count"), "_step_count");
  apply_lrs();
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  if (step_size <= 0) throw ValueError("StepLR: step_size must be positive; got " + std::to_string(step_size));
  initial_step();
}
double StepLR::lr_at(size_t g, int64_t epoch) const {
  return base_lrs()[g] * std::pow(gamma_, double(epoch / step_size_));
}

ExponentialLR::ExponentialLR(Optimizer& optimizer, double gamma) : LRScheduler(optimizer), gamma_(gamma) {
  initial_step();
}
double ExponentialLR::lr_at(size_t g, int64_t epoch) const { return base_lrs()[g] * std::pow(gamma_, double(epoch)); }

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min)
    : LRScheduler(optimizer), t_max_(T_max), eta_min_(eta_min) {
  if (T_max <= 0) throw ValueError("CosineAnnealingLR: T_max must be positive; got " + std::to_string(T_max));
  initial_step();
}
double CosineAnnealingLR::lr_at(size_t g, int64_t epoch) const {
  constexpr double kPi = 3.14159265358979323846;
  return eta_min_ + (base_lrs()[g] - eta_min_) * (1.0 + std::cos(kPi * double(epoch) / double(t_max_))) / 2.0;
}

LambdaLR::LambdaLR(Optimizer& optimizer, std::function<double(int64_t)> lr_lambda)
    : LRScheduler(optimizer), lr_lambda_(std::move(lr_lambda)) {
  if (!lr_lambda_) throw ValueError("LambdaLR: lr_lambda is empty");
  initial_step();
}
double LambdaLR::lr_at(size_t g, int64_t epoch) const { return base_lrs()[g] * lr_lambda_(epoch); }

// ---------------------------------------------------------------- clipping

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type, bool error_if_nonfinite) {
  if (norm_type != 2.0)
    throw ValueError("clip_grad_norm_: only norm_type 2 is built; got " + num(norm_type));
  if (!(max_norm >= 0.0)) throw ValueError("clip_grad_norm_: max_norm must be >= 0; got " + num(max_norm));
  std::vector<tensorgrad::Tensor> grads;
  for (const Tensor& p : params)
    if (p.defined() && p.grad().defined()) grads.push_back(p.grad().data());
  if (grads.empty()) return 0.0;
  // One SquaredNorm pair over every gradient, each one's squares added in double.
  tensorgrad::Tensor squared = detail::run_op(OpKind::SquaredNorm, OpAttrs{}, {&grads[0], 1});
  for (size_t i = 1; i < grads.size(); ++i) {
    const tensorgrad::Tensor in[2] = {grads[i], squared};
    squared = detail::run_op(OpKind::SquaredNorm, OpAttrs{}, in);
  }
  const std::vector<float> pair = squared.to_vector();
  const double total = norm_of_norm_pair(pair.data());
  if (error_if_nonfinite && !std::isfinite(total))
    throw ValueError("clip_grad_norm_: the total norm of order 2 of the gradients is " + num(total) +
                     ", so they cannot be clipped; to scale them by the non-finite norm anyway (PyTorch's result), "
                     "pass error_if_nonfinite = false");
  OpAttrs at;
  at.clip = float(max_norm);
  at.flags = kClipNormEps;
  for (const tensorgrad::Tensor& g : grads) run_in_place(OpKind::ClipNorm, at, {g, squared});
  return total;
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  if (!(clip_value >= 0.0)) throw ValueError("clip_grad_value_: clip_value must be >= 0; got " + num(clip_value));
  OpAttrs at;
  at.clip = float(clip_value);
  for (const Tensor& p : params)
    if (p.defined() && p.grad().defined()) run_in_place(OpKind::ClipValue, at, {p.grad().data()});
}

}  // namespace tensorgrad::ag::optim
