#pragma once
// Optimizers, learning-rate schedulers and gradient clipping for the eager
// API, in PyTorch's names and semantics (torch.optim, torch.optim.lr_scheduler,
// torch.nn.utils.clip_grad_*). The arithmetic is the graph engine's: each
// step runs the optimizer ops of the op table (ops/op.h: OptimizerTick, then
// SgdUpdate / AdamWUpdate / RmspropUpdate in their PyTorch modes) on every
// parameter in place, and clipping runs SquaredNorm / ClipNorm / ClipValue,
// so eager and graph training update with the same kernels.
//
// Numbers: the update kernels compute in float32 and read the
// hyper-parameters as float32 (lr, betas, eps, ...); Adam's bias corrections
// are computed in double by OptimizerTick from the float32 betas. Against
// PyTorch in float64 the parameters agree to about 1e-6 relative per step.
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tensorgrad/ag/nn/module.h"
#include "tensorgrad/ag/tensor.h"
#include "tensorgrad/core/tensor.h"

namespace tensorgrad::ag::optim {

/// A parameter group (one dict of PyTorch's optimizer.param_groups): the
/// parameters and the options of their updates. When a group is given to a
/// constructor or to add_param_group, an option left empty takes the
/// optimizer's default (a key missing from PyTorch's dict); in param_groups()
/// every option the optimizer uses is set, and may be changed between steps
/// (`opt.param_groups()[0].lr = 0.01`). Options an optimizer does not use
/// stay empty.
struct ParamGroup {
  std::vector<Tensor> params;                  ///< the group's parameters (leaves requiring grad)
  std::optional<double> lr;                    ///< the learning rate, >= 0
  std::optional<double> weight_decay;          ///< >= 0; Adam, SGD, RMSprop: L2; AdamW: decoupled
  std::optional<double> momentum;              ///< SGD, RMSprop
  std::optional<double> dampening;             ///< SGD
  std::optional<bool> nesterov;                ///< SGD
  std::optional<std::array<double, 2>> betas;  ///< Adam, AdamW: the moments' decays, each in [0, 1)
  std::optional<double> eps;                   ///< Adam, AdamW, RMSprop: added to the denominator, >= 0
  std::optional<double> alpha;                 ///< RMSprop: the decay of the mean square
  std::optional<bool> centered;                ///< RMSprop

  /// No parameters, every option empty.
  ParamGroup() = default;
  /// `params` with every option empty (the optimizer's defaults); implicit,
  /// so that a list of tensors converts, as in PyTorch.
  ParamGroup(std::vector<Tensor> params) : params(std::move(params)) {}  // NOLINT: a list converts, as in PyTorch
};

/// The base of the optimizers (torch.optim.Optimizer). Holds the groups, a
/// state per parameter (created at its first step with a gradient) and, per
/// group, the float32 hyper-parameter tensor {kHyperSize} the kernels read.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// "SGD", "Adam", "AdamW", "RMSprop".
  virtual const char* name() const = 0;

  /// Every parameter's grad() reset: undefined with set_to_none (PyTorch's
  /// default), else zeroed in place.
  void zero_grad(bool set_to_none = true);
  /// One update of every parameter whose grad() is defined (the others are
  /// skipped, their state untouched), in place, under a NoGradGuard; each
  /// updated parameter's version counter advances. Throws ValueError when a
  /// group's options became invalid (checked as at construction).
  void step();

  /// The groups in order, every option the optimizer uses filled in; an
  /// option changed here (lr by a scheduler) applies from the next step().
  ///@{
  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  ///@}
  /// Adds a group; empty options take the defaults. ValueError for an empty
  /// list, a parameter that does not require grad or is in another group
  /// already, or invalid options (PyTorch's messages).
  void add_param_group(ParamGroup group);

  /// The optimizer's state with PyTorch's numbering. Parameters are indexed
  /// over all groups in order: `state.<i>.step` (int64 {}), `state.<i>.<buffer>`
  /// (exp_avg, exp_avg_sq, momentum_buffer, square_avg, grad_avg), and per
  /// group `param_groups.<g>.<option>` (float32 {}; nesterov and centered
  /// int64 {} 0/1; betas as betas.0 and betas.1) and `param_groups.<g>.params`
  /// (int64 {n}, the group's parameter indices). The state tensors share
  /// memory with the optimizer's (as PyTorch's state_dict).
  nn::StateDict state_dict() const;
  /// Copies a state_dict() into this optimizer (state and group options;
  /// parameters without state in the dict lose theirs), all or nothing.
  /// ValueError naming what differs: the number of groups or of a group's
  /// parameters, a state tensor's shape ("optimizer state for parameter 2:
  /// {64, 4} here vs {4, 64} in the state dict"), a missing or unknown entry.
  void load_state_dict(const nn::StateDict& dict);

 protected:
  /// `defaults` holds every option the optimizer uses (the constructor's
  /// arguments). The subclass' constructor then adds the groups with
  /// add_param_groups (validate is virtual, so not from here).
  explicit Optimizer(ParamGroup defaults);
  /// add_param_group for each; ValueError for an empty list.
  void add_param_groups(std::vector<ParamGroup> groups);

  /// One parameter's state: the step count and the named buffers.
  struct ParamState {
    tensorgrad::Tensor step;  ///< int64 {1}: the updates so far, which OptimizerTick advances
    std::vector<std::pair<std::string, Tensor>> buffers;  ///< by PyTorch's names, in its order
    /// The buffer named `name`, or null when the parameter has none yet.
    Tensor* find(const std::string& name);
  };
  /// Checks a group's options (filled), throwing PyTorch's ValueError.
  virtual void validate(const ParamGroup& group) const = 0;
  /// Writes the group's options into its hyper tensor (before the ticks).
  virtual void write_hyper(const ParamGroup& group, float* hyper) const = 0;
  /// Creates the buffers this step needs that `state` lacks (zeros, PyTorch's
  /// lazy initialisation), ticks, and runs the update kernel in place.
  virtual void update(const ParamGroup& group, const Tensor& param, const tensorgrad::Tensor& grad,
                      ParamState& state, const tensorgrad::Tensor& hyper) const = 0;
  /// The buffer names the state dict may hold for this optimizer.
  virtual std::vector<std::string> buffer_names() const = 0;
  /// Runs OptimizerTick on the group's hyper and the parameter's step.
  static void tick(ParamState& state, const tensorgrad::Tensor& hyper);

 private:
  void fill_defaults(ParamGroup& group) const;
  ParamGroup defaults_;
  std::vector<ParamGroup> groups_;
  std::vector<tensorgrad::Tensor> hypers_;  // one float32 {kHyperSize} per group
  std::map<const void*, ParamState> state_;  // by the parameter's identity
};

/// torch.optim.SGD: weight decay added to the gradient; the momentum buffer
/// starts as the gradient at a parameter's first step (dampening from the
/// second on); nesterov needs momentum > 0 and dampening 0.
class SGD : public Optimizer {
 public:
  /// torch.optim.SGD's arguments, the defaults of every group. Throws
  /// ValueError (PyTorch's messages) for a negative lr, momentum or weight
  /// decay, nesterov without momentum or with dampening, or an empty list.
  ///@{
  SGD(std::vector<ParamGroup> params, double lr, double momentum = 0, double dampening = 0, double weight_decay = 0,
      bool nesterov = false);
  SGD(std::vector<Tensor> params, double lr, double momentum = 0, double dampening = 0, double weight_decay = 0,
      bool nesterov = false);
  ///@}
  const char* name() const override { return "SGD"; }

 protected:
  void validate(const ParamGroup& group) const override;
  void write_hyper(const ParamGroup& group, float* hyper) const override;
  void update(const ParamGroup& group, const Tensor& param, const tensorgrad::Tensor& grad, ParamState& state,
              const tensorgrad::Tensor& hyper) const override;
  std::vector<std::string> buffer_names() const override { return {"momentum_buffer"}; }
};

/// torch.optim.Adam (weight decay as L2: g += wd p) and torch.optim.AdamW
/// (decoupled: p *= 1 - lr wd). State: step, exp_avg, exp_avg_sq.
class Adam : public Optimizer {
 public:
  /// torch.optim.Adam's arguments and defaults. Throws ValueError (PyTorch's
  /// messages) for a negative lr, eps or weight decay, a beta outside
  /// [0, 1), or an empty list.
  ///@{
  Adam(std::vector<ParamGroup> params, double lr = 1e-3, std::array<double, 2> betas = {0.9, 0.999},
       double eps = 1e-8, double weight_decay = 0);
  Adam(std::vector<Tensor> params, double lr = 1e-3, std::array<double, 2> betas = {0.9, 0.999}, double eps = 1e-8,
       double weight_decay = 0);
  ///@}
  const char* name() const override { return "Adam"; }

 protected:
  /// AdamW's way in: `decoupled` chooses AdamW's weight decay.
  Adam(std::vector<ParamGroup> params, ParamGroup defaults, bool decoupled);
  void validate(const ParamGroup& group) const override;
  void write_hyper(const ParamGroup& group, float* hyper) const override;
  void update(const ParamGroup& group, const Tensor& param, const tensorgrad::Tensor& grad, ParamState& state,
              const tensorgrad::Tensor& hyper) const override;
  std::vector<std::string> buffer_names() const override { return {"exp_avg", "exp_avg_sq"}; }

 private:
  bool decoupled_ = false;
};

/// torch.optim.AdamW: Adam with decoupled weight decay (p *= 1 - lr wd
/// before the update; Loshchilov and Hutter, 2019), weight decay 1e-2 by
/// default. State: step, exp_avg, exp_avg_sq.
class AdamW : public Adam {
 public:
  /// torch.optim.AdamW's arguments and defaults; throws as Adam's.
  ///@{
  AdamW(std::vector<ParamGroup> params, double lr = 1e-3, std::array<double, 2> betas = {0.9, 0.999},
        double eps = 1e-8, double weight_decay = 1e-2);
  AdamW(std::vector<Tensor> params, double lr = 1e-3, std::array<double, 2> betas = {0.9, 0.999}, double eps = 1e-8,
        double weight_decay = 1e-2);
  ///@}
  const char* name() const override { return "AdamW"; }
};

/// torch.optim.RMSprop: epsilon outside the square root, weight decay as L2.
/// State: step, square_avg, momentum_buffer (momentum > 0), grad_avg (centered).
class RMSprop : public Optimizer {
 public:
  /// torch.optim.RMSprop's arguments and defaults. Throws ValueError
  /// (PyTorch's messages) for a negative lr, alpha, eps, weight decay or
  /// momentum, or an empty list.
  ///@{
  RMSprop(std::vector<ParamGroup> params, double lr = 1e-2, double alpha = 0.99, double eps = 1e-8,
          double weight_decay = 0, double momentum = 0, bool centered = false);
  RMSprop(std::vector<Tensor> params, double lr = 1e-2, double alpha = 0.99, double eps = 1e-8,
          double weight_decay = 0, double momentum = 0, bool centered = false);
  ///@}
  const char* name() const override { return "RMSprop"; }

 protected:
  void validate(const ParamGroup& group) const override;
  void write_hyper(const ParamGroup& group, float* hyper) const override;
  void update(const ParamGroup& group, const Tensor& param, const tensorgrad::Tensor& grad, ParamState& state,
              const tensorgrad::Tensor& hyper) const override;
  std::vector<std::string> buffer_names() const override { return {"square_avg", "momentum_buffer", "grad_avg"}; }
};

// ---- learning-rate schedulers (torch.optim.lr_scheduler) ----

/// The base of the schedulers. Construction records each group's lr as its
/// base lr (rounded to float32, the precision the kernels and the state dict
/// hold, so that a resumed schedule is bit-identical) and takes step 0, as
/// PyTorch: last_epoch() 0, the groups' lr the schedule's value at 0. Each
/// step() advances last_epoch and sets every group's lr to the schedule at it.
class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  /// Advances last_epoch() by one and sets every group's lr to the schedule
  /// there (call after the optimizer's step(), as PyTorch). Throws
  /// StateError when the optimizer's number of groups changed since.
  void step();
  /// The lr of each group set by the last step (torch's get_last_lr()).
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  /// The steps taken (0 after construction, which takes the first).
  int64_t last_epoch() const { return last_epoch_; }
  /// Each group's lr at construction, rounded to float32.
  const std::vector<double>& base_lrs() const { return base_lrs_; }

  /// `last_epoch` (int64 {}), `_step_count` (int64 {}), `base_lrs.<g>` (float32 {}).
  nn::StateDict state_dict() const;
  /// Restores a state_dict() (ValueError for a different number of groups or a
  /// missing entry) and sets the groups' lr to the schedule at last_epoch.
  void load_state_dict(const nn::StateDict& dict);

 protected:
  /// Records the groups' base lrs; the optimizer must outlive the scheduler.
  explicit LRScheduler(Optimizer& optimizer);
  /// The first step (call at the end of a subclass' constructor).
  void initial_step() { step(); }
  /// The lr of group `g` at `epoch` (PyTorch's closed form).
  virtual double lr_at(size_t g, int64_t epoch) const = 0;

 private:
  void apply_lrs();
  Optimizer& optimizer_;
  std::vector<double> base_lrs_, last_lr_;
  int64_t last_epoch_ = -1, step_count_ = 0;
};

/// base_lr * gamma^(epoch / step_size) (integer division).
class StepLR : public LRScheduler {
 public:
  /// Throws ValueError for a step_size <= 0.
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);

 protected:
  double lr_at(size_t g, int64_t epoch) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

/// base_lr * gamma^epoch.
class ExponentialLR : public LRScheduler {
 public:
  /// `gamma`: the factor per step.
  ExponentialLR(Optimizer& optimizer, double gamma);

 protected:
  double lr_at(size_t g, int64_t epoch) const override;

 private:
  double gamma_;
};

/// eta_min + (base_lr - eta_min) (1 + cos(pi epoch / T_max)) / 2 (PyTorch's closed form).
class CosineAnnealingLR : public LRScheduler {
 public:
  /// Throws ValueError for a T_max <= 0.
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0);

 protected:
  double lr_at(size_t g, int64_t epoch) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

/// base_lr * lr_lambda(epoch) (one function for every group).
class LambdaLR : public LRScheduler {
 public:
  /// Throws ValueError for an empty lr_lambda.
  LambdaLR(Optimizer& optimizer, std::function<double(int64_t epoch)> lr_lambda);

 protected:
  double lr_at(size_t g, int64_t epoch) const override;

 private:
  std::function<double(int64_t)> lr_lambda_;
};

// ---- gradient clipping (torch.nn.utils) ----

/// Scales the defined gradients of `params` in place so that their total
/// 2-norm (over all of them together) is at most max_norm, with PyTorch's
/// coefficient min(1, max_norm / (total + 1e-6)); returns the total norm
/// before clipping, in double (0 when no gradient is defined). The squares
/// are summed in double, so gradients as large as float32 holds give their
/// true norm (a hundred gradients of 1e20: 1e21). A non-finite total (an
/// inf or NaN gradient) is PyTorch's result by default: the coefficient is
/// 0 for inf (finite gradients become 0, infinite ones NaN) and NaN for
/// NaN; with error_if_nonfinite it throws ValueError instead, changing
/// nothing (torch.nn.utils.clip_grad_norm_'s option of that name).
/// ValueError for a norm_type other than 2 (the only one built) or a
/// negative max_norm.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);
/// Clamps every defined gradient of `params` to [-clip_value, clip_value] in
/// place (ClipValue). ValueError for a negative clip_value.
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

}  // namespace tensorgrad::ag::optim
