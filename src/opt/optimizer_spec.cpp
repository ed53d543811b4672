#include "tensorgrad/opt/optimizer_spec.h"

#include <array>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/host_copy.h"
#include "kernels/kernels.h"
#include "opt/schedule_encoding.h"
#include "tensorgrad/core/error.h"

namespace tensorgrad {

OptimizerSpec OptimizerSpec::adamw(float learning_rate, float weight_decay) {
  OptimizerSpec s;
  s.learning_rate = learning_rate;
  s.weight_decay = weight_decay;
  return s;
}
OptimizerSpec OptimizerSpec::adam(float learning_rate) { return adamw(learning_rate, 0.0f); }
OptimizerSpec OptimizerSpec::adamw(const LearningRateSchedule& schedule, float weight_decay) {
  OptimizerSpec s = adamw(1e-3f, weight_decay);
  s.learning_rate_schedule = schedule;
  s.validate();
  return s;
}
OptimizerSpec OptimizerSpec::adam(const LearningRateSchedule& schedule) { return adamw(schedule, 0.0f); }
OptimizerSpec OptimizerSpec::sgd(float learning_rate, float weight_decay) {
  OptimizerSpec s;
  s.kind = Kind::SGD;
  s.learning_rate = learning_rate;
  s.weight_decay = weight_decay;
  return s;
}

namespace {
// The fields every options struct shares.
template <class Options>
OptimizerSpec common(OptimizerSpec::Kind kind, const Options& o) {
  OptimizerSpec s;
  s.kind = kind;
  s.learning_rate = o.learning_rate;
  s.learning_rate_schedule = o.learning_rate_schedule;
  s.weight_decay = o.weight_decay;
  s.decoupled_weight_decay = o.decoupled_weight_decay;
  s.clipnorm = o.clipnorm;
  s.clipvalue = o.clipvalue;
  s.global_clipnorm = o.global_clipnorm;
  return s;
}

std::string str(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", double(v));
  return buf;
}
}  // namespace

OptimizerSpec OptimizerSpec::sgd(const SGDOptions& o) {
  OptimizerSpec s = common(Kind::SGD, o);
  s.momentum = o.momentum;
  s.nesterov = o.nesterov;
  s.dampening = o.dampening;
  return s;
}

OptimizerSpec OptimizerSpec::rmsprop(const RMSpropOptions& o) {
  OptimizerSpec s = common(Kind::RMSprop, o);
  s.rho = o.rho;
  s.momentum = o.momentum;
  s.epsilon = o.epsilon;
  s.centered = o.centered;
  s.epsilon_inside_sqrt = o.epsilon_inside_sqrt;
  return s;
}

OptimizerSpec OptimizerSpec::adagrad(const AdagradOptions& o) {
  OptimizerSpec s = common(Kind::Adagrad, o);
  s.initial_accumulator_value = o.initial_accumulator_value;
  s.epsilon = o.epsilon;
  s.epsilon_inside_sqrt = o.epsilon_inside_sqrt;
  return s;
}

const char* optimizer_name(OptimizerSpec::Kind kind) {
  switch (kind) {
    case OptimizerSpec::Kind::AdamW: return "AdamW";
    case OptimizerSpec::Kind::SGD: return "SGD";
    case OptimizerSpec::Kind::RMSprop: return "RMSprop";
    case OptimizerSpec::Kind::Adagrad: return "Adagrad";
  }
  return "?";
}

void OptimizerSpec::validate() const {
  const std::string name = optimizer_name(kind);
  auto in_range = [&](const char* field, float v, float lo, float hi, bool hi_open, const char* advice) {
    if (v >= lo && (hi_open ? v < hi : v <= hi)) return;  // false for NaN
    throw ValueError(name + ": " + field + " must be in [" + str(lo) + ", " + str(hi) + (hi_open ? ")" : "]") +
                     "; got " + str(v) + ". " + advice);
  };
  if (!(learning_rate > 0.0f) || !std::isfinite(learning_rate))
    throw ValueError(name + ": learning_rate must be a positive finite number; got " + str(learning_rate) +
                     ". Keras' defaults are 1e-3 (Adam, RMSprop, Adagrad) and 0.01 (SGD)");
  if (!(beta_1 >= 0.0f && beta_1 < 1.0f) || !(beta_2 >= 0.0f && beta_2 < 1.0f))
    throw ValueError(name + ": beta_1 and beta_2 must be in [0, 1); got " + str(beta_1) + " and " + str(beta_2) +
                     ". The usual values are 0.9 and 0.999");
  if (!(epsilon > 0.0f) || !std::isfinite(epsilon))
    throw ValueError(name + ": epsilon must be a positive finite number; got " + str(epsilon) +
                     ". Keras uses 1e-7, PyTorch 1e-8 (Adagrad 1e-10)");
  in_range("weight_decay", weight_decay, 0.0f, 1.0f, false, "Use 0 for none; 1e-4 to 1e-2 is usual");
  in_range("momentum", momentum, 0.0f, 1.0f, false, "Use 0 for none; 0.9 is usual");
  in_range("dampening", dampening, 0.0f, 1.0f, false, "Use 0 for none (Keras has no dampening)");
  in_range("rho", rho, 0.0f, 1.0f, true, "Keras' default is 0.9, PyTorch's (alpha) 0.99");
  if (!(initial_accumulator_value >= 0.0f) || !std::isfinite(initial_accumulator_value))
    throw ValueError(name + ": initial_accumulator_value must be a finite number >= 0; got " +
                     str(initial_accumulator_value) + ". Keras' default is 0.1, PyTorch's 0");
  // Fields of other optimizers must keep their defaults: a setting that
  // would be ignored is refused instead.
  const OptimizerSpec d;
  auto only_for = [&](const char* field, bool changed, const char* applies, const std::string& value) {
    if (!changed) return;
    throw ValueError(std::string(field) + " applies to " + applies + " only; got " + field + " = " + value +
                     " for " + name + ". Build the spec with the factory of that optimizer, or leave " + field +
                     " at its default");
  };
  const bool adam = kind == Kind::AdamW, sgd = kind == Kind::SGD, rms = kind == Kind::RMSprop,
             adagrad = kind == Kind::Adagrad;
  only_for("beta_1", !adam && beta_1 != d.beta_1, "AdamW and Adam", str(beta_1));
  only_for("beta_2", !adam && beta_2 != d.beta_2, "AdamW and Adam", str(beta_2));
  only_for("momentum", !(sgd || rms) && momentum != d.momentum, "SGD and RMSprop", str(momentum));
  only_for("nesterov", !sgd && nesterov, "SGD", "true");
  only_for("dampening", !sgd && dampening != d.dampening, "SGD", str(dampening));
  only_for("rho", !rms && rho != d.rho, "RMSprop", str(rho));
  only_for("centered", !rms && centered, "RMSprop", "true");
  only_for("epsilon_inside_sqrt", !(rms || adagrad) && epsilon_inside_sqrt, "RMSprop and Adagrad", "true");
  only_for("initial_accumulator_value", !adagrad && initial_accumulator_value != d.initial_accumulator_value,
           "Adagrad", str(initial_accumulator_value));
  if (nesterov && (momentum == 0.0f || dampening != 0.0f))
    throw ValueError("SGD: nesterov = true needs momentum > 0 and dampening = 0 (as PyTorch); got momentum " +
                     str(momentum) + " and dampening " + str(dampening) +
                     ". Set a momentum (0.9 is usual) and no dampening, or turn nesterov off");
  const std::pair<const char*, float> clips[] = {
      {"clipnorm", clipnorm}, {"global_clipnorm", global_clipnorm}, {"clipvalue", clipvalue}};
  std::string set;
  for (const auto& [field, v] : clips) {
    if (!(v >= 0.0f) || !std::isfinite(v))
      throw ValueError(name + ": " + field + " must be a finite number > 0, or 0 for no clipping; got " + str(v));
    if (v > 0.0f) set += std::string(set.empty() ? "" : " and ") + field + " = " + str(v);
  }
  if ((clipnorm > 0.0f) + (global_clipnorm > 0.0f) + (clipvalue > 0.0f) > 1)
    throw ValueError(name + ": only one of clipnorm, global_clipnorm and clipvalue can be set (as Keras); got " +
                     set + ". Keep one and set the others to 0");
  if (learning_rate_schedule) validate_schedule(*learning_rate_schedule);
}

OptimizerState::OptimizerState(const OptimizerSpec& spec, Device device) {
  spec.validate();
  hyper = Tensor::zeros(Shape{kHyperSize}, DType::Float32, device);
  rng_counter = Tensor::zeros(Shape{1}, DType::Int64, device);
  // Built on the host, then one copy into the persistent tensor.
  std::array<float, kHyperSize> h{};
  h[kLr] = spec.learning_rate;
  h[kBeta1] = spec.beta_1;
  h[kBeta2] = spec.beta_2;
  h[kEps] = spec.epsilon;
  h[kWeightDecay] = spec.weight_decay;
  h[kBiasCorrection1] = h[kBiasCorrection2] = 1.0f;
  h[kMomentum] = spec.momentum;
  h[kDampening] = spec.dampening;
  h[kStepDampening] = 0.0f;
  h[kRho] = spec.rho;
  step = Tensor::zeros(Shape{1}, DType::Int64, device);
  if (spec.learning_rate_schedule) {
    learning_rate_schedule = spec.learning_rate_schedule;
    const EncodedSchedule e = encode_schedule(*learning_rate_schedule);
    schedule_steps = Tensor::zeros(Shape{int64_t(e.steps.size())}, DType::Int64, device);
    tensorgrad::detail::write_elements(schedule_steps, 0, std::span<const int64_t>(e.steps));
    schedule_values = Tensor::zeros(Shape{int64_t(e.values.size())}, DType::Float32, device);
    tensorgrad::detail::write_elements(schedule_values, 0, std::span<const float>(e.values));
    h[kLr] = float(learning_rate());
  }
  tensorgrad::detail::write_elements(hyper, 0, std::span<const float>(h));
}

int64_t OptimizerState::iterations() const { return tensorgrad::detail::read_element<int64_t>(step, 0); }

double OptimizerState::learning_rate() const {
  if (!learning_rate_schedule) return double(tensorgrad::detail::read_element<float>(hyper, kLr));
  // A schedule of up to this many numbers is read into stack arrays (no
  // allocation); a longer piecewise one into vectors.
  constexpr int64_t kScheduleOnStack = 16;
  std::array<int64_t, kScheduleOnStack> steps{};
  std::array<float, kScheduleOnStack> values{};
  const int64_t n_steps = schedule_steps.numel(), n_values = schedule_values.numel();
  if (n_steps > kScheduleOnStack || n_values > kScheduleOnStack) {
    // A long piecewise schedule: read through vectors (allocates; only callbacks and logs ask).
    std::vector<int64_t> many_steps(static_cast<size_t>(n_steps));
    std::vector<float> many_values(static_cast<size_t>(n_values));
    tensorgrad::detail::copy_to_host(schedule_steps, 0, many_steps.data(), n_steps, DType::Int64);
    tensorgrad::detail::copy_to_host(schedule_values, 0, many_values.data(), n_values, DType::Float32);
    return kernels::scheduled_learning_rate(schedule_kind(*learning_rate_schedule), many_steps, many_values,
                                            iterations());
  }
  tensorgrad::detail::copy_to_host(schedule_steps, 0, steps.data(), n_steps, DType::Int64);
  tensorgrad::detail::copy_to_host(schedule_values, 0, values.data(), n_values, DType::Float32);
  return kernels::scheduled_learning_rate(schedule_kind(*learning_rate_schedule), {steps.data(), size_t(n_steps)},
                                          {values.data(), size_t(n_values)}, iterations());
}

void OptimizerState::set_learning_rate(float lr) {
  if (learning_rate_schedule)
    throw TypeError(std::string("This optimizer was created with a LearningRateSchedule (") +
                    schedule_name(*learning_rate_schedule) +
                    "), so its learning rate is not settable: each update computes it from the schedule. Remove "
                    "the learning_rate_schedule from the OptimizerSpec to set rates yourself, or drop the "
                    "LearningRateScheduler / ReduceLROnPlateau callback (or set_learning_rate call); got lr = " +
                    std::to_string(lr));
  if (!(lr > 0.0f) || !std::isfinite(lr))
    throw ValueError("learning rate must be a positive finite number; got " + std::to_string(lr));
  tensorgrad::detail::write_element(hyper, kLr, lr);
}

}  // namespace tensorgrad
