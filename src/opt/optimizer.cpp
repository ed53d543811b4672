#include "tensorgrad/opt/optimizer.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/host_copy.h"
#include "kernels/kernels.h"
#include "opt/schedule_encoding.h"
#include "tensorgrad/core/error.h"
#include "tensorgrad/core/memory.h"
#include "tensorgrad/graph/graph.h"

namespace tensorgrad {

LossKind loss_from_name(const std::string& name) {
  if (name == "mse" || name == "mean_squared_error") return LossKind::MeanSquaredError;
  if (name == "mae" || name == "mean_absolute_error") return LossKind::MeanAbsoluteError;
  if (name == "huber" || name == "huber_loss") return LossKind::Huber;
  if (name == "binary_crossentropy") return LossKind::BinaryCrossentropy;
  if (name == "categorical_crossentropy") return LossKind::CategoricalCrossentropy;
  if (name == "sparse_categorical_crossentropy") return LossKind::SparseCategoricalCrossentropy;
  throw ValueError("unknown loss '" + name +
                   "'; expected \"mse\", \"mae\", \"huber\", \"binary_crossentropy\", \"categorical_crossentropy\" or "
                   "\"sparse_categorical_crossentropy\" (or a custom Loss)");
}

const char* loss_name(LossKind loss) {
  switch (loss) {
    case LossKind::MeanSquaredError: return "mse";
    case LossKind::MeanAbsoluteError: return "mae";
    case LossKind::Huber: return "huber";
    case LossKind::BinaryCrossentropy: return "binary_crossentropy";
    case LossKind::CategoricalCrossentropy: return "categorical_crossentropy";
    case LossKind::SparseCategoricalCrossentropy: return "sparse_categorical_crossentropy";
    case LossKind::Custom: return "custom";
  }
  return "?";
}

MetricKind metric_from_name(const std::string& name, LossKind loss) {
  const bool sparse = loss == LossKind::SparseCategoricalCrossentropy;
  MetricKind kind;
  if (name == "accuracy" || name == "acc") {
    switch (loss) {
      case LossKind::SparseCategoricalCrossentropy: return MetricKind::SparseCategoricalAccuracy;
      case LossKind::CategoricalCrossentropy: return MetricKind::CategoricalAccuracy;
      case LossKind::BinaryCrossentropy: return MetricKind::BinaryAccuracy;
      case LossKind::MeanSquaredError:
      case LossKind::MeanAbsoluteError:
      case LossKind::Huber:
      case LossKind::Custom: break;
    }
    throw ValueError("metric \"" + name + "\" needs a cross-entropy loss to resolve from; the output is compiled with \"" +
                     loss_name(loss) + "\". Name the metric (binary_accuracy, categorical_accuracy, mae, ...)");
  } else if (name == "binary_accuracy") kind = MetricKind::BinaryAccuracy;
  else if (name == "categorical_accuracy") kind = MetricKind::CategoricalAccuracy;
  else if (name == "sparse_categorical_accuracy") kind = MetricKind::SparseCategoricalAccuracy;
  else if (name == "top_k_categorical_accuracy") kind = MetricKind::TopKCategoricalAccuracy;
  else if (name == "sparse_top_k_categorical_accuracy") kind = MetricKind::SparseTopKCategoricalAccuracy;
  else if (name == "mae" || name == "mean_absolute_error") kind = MetricKind::MeanAbsoluteError;
  else if (name == "mse" || name == "mean_squared_error") kind = MetricKind::MeanSquaredError;
  else if (name == "rmse" || name == "root_mean_squared_error") kind = MetricKind::RootMeanSquaredError;
  else
    throw ValueError("unknown metric '" + name +
                     "'; supported: accuracy, binary_accuracy, categorical_accuracy, sparse_categorical_accuracy, "
                     "top_k_categorical_accuracy, sparse_top_k_categorical_accuracy, mae, mse, rmse");
  const bool wants_ids = kind == MetricKind::SparseCategoricalAccuracy || kind == MetricKind::SparseTopKCategoricalAccuracy;
  if (wants_ids != sparse)
    throw ValueError("metric \"" + name + "\" takes " + (wants_ids ? "class ids" : "targets shaped as the output") +
                     ", but the output's loss \"" + loss_name(loss) + "\" takes " +
                     (sparse ? "class ids" : "targets shaped as the output"));
  return kind;
}

Loss::Loss(const char* loss_name) : Loss(std::string(loss_name ? loss_name : "")) {}
Loss::Loss(const std::string& loss_name) : kind(loss_from_name(loss_name)), name(loss_name) {}
Loss::Loss(std::string loss_name, LossFunction fn) : kind(LossKind::Custom), name(std::move(loss_name)), function(std::move(fn)) {
  if (!function) throw ValueError("custom loss '" + name + "' has an empty function");
  if (name.empty()) throw ValueError("a custom loss needs a name (for messages and History keys)");
}

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

namespace {
// Index of the first NaN or infinity, or -1. Integer test on the exponent
// bits, which vectorises without fast-math.
int64_t first_non_finite(const float* p, int64_t n) {
  const uint32_t* bits = reinterpret_cast<const uint32_t*>(p);
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; ++i) bad |= uint32_t((bits[i] & 0x7f800000u) == 0x7f800000u);
  if (!bad) return -1;
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(p[i])) return i;
  return -1;
}

void check_finite(const Tensor& t, const char* what) {
  const int64_t bad = first_non_finite(t.data<float>(), t.numel());
  if (bad < 0) return;
  const int64_t cols = t.shape().rank() > 0 ? std::max<int64_t>(t.shape().row_size(), 1) : 1;
  throw ValueError(std::string(what) + " contains " + (std::isnan(t.data<float>()[bad]) ? "NaN" : "infinity") +
                   " at row " + std::to_string(bad / cols) + ", column " + std::to_string(bad % cols) +
                   "; remove or impute non-finite values first");
}

void check_rows(const Tensor& t, int64_t rows, const char* what) {
  if (!t.defined()) throw ValueError(std::string(what) + " is an undefined tensor");
  if (t.shape().rank() == 0) throw ShapeError(std::string(what) + " must have a batch dimension; got a scalar");
  if (rows >= 0 && t.shape()[0] != rows)
    throw ShapeError(std::string(what) + " must have exactly " + std::to_string(rows) + (rows == 1 ? " row" : " rows") +
                     " (the batch size); got " +
                     std::to_string(t.shape()[0]) + ". Pass batches of exactly that size or build for another batch size");
}
}  // namespace

Tensor check_input_shape(const Tensor& x, const Shape& input_shape, int64_t rows, const char* what) {
  check_rows(x, rows, what);
  const Shape full = input_shape.with_batch(x.shape()[0]);
  if (x.shape() == full) return x;
  const bool flattened = x.shape().rank() == 2 && x.shape()[1] == input_shape.numel();
  if (flattened) return x.reshape(full);
  if (x.shape() == input_shape)  // one sample without its batch dimension
    throw ShapeError(std::string(what) + " has the shape of one sample, " + input_shape.str() +
                     ", with no batch dimension; pass it as " + input_shape.with_batch(1).str() +
                     " (x.reshape(" + input_shape.with_batch(1).str() + ")), or stack samples along a first dimension");
  std::string message = std::string(what) + " must be " + full.str() +
                        " ({rows, input_shape...} for the model's input_shape " + input_shape.str() + ")";
  if (input_shape.rank() > 1) message += " or its flattened form " + Shape{x.shape()[0], input_shape.numel()}.str();
  throw ShapeError(message + "; got " + x.shape().str() + ". Reshape it, or build the model for this input_shape");
}

Tensor check_features(const Tensor& x, const Shape& input_shape, int64_t rows, const char* what) {
  const Tensor shaped = check_input_shape(x, input_shape, rows, what);
  if (x.dtype() != DType::Float32)
    throw TypeError(std::string(what) + " must be float32; got " + dtype_name(x.dtype()));
  check_finite(shaped, what);
  return shaped;
}

Tensor InputSpec::check(const Tensor& x, int64_t rows, const std::string& what, Tensor* staging) const {
  if (dtype == DType::Float32) {
    Tensor checked = check_features(x, shape, rows, what.c_str());
    if (validate) validate(checked);
    return checked;
  }
  // Token ids: int32 is bound as it is; float32 holding whole numbers is
  // checked, then converted into `staging` (kept by the caller, so a step
  // converts without allocating) or into a new tensor.
  const Tensor shaped = check_input_shape(x, shape, rows, what.c_str());
  if (x.dtype() == DType::Int32) {
    if (validate) validate(shaped);
    return shaped;
  }
  if (x.dtype() != DType::Float32)
    throw TypeError(what + " holds token ids: int32, or float32 holding whole numbers; got " + dtype_name(x.dtype()));
  check_finite(shaped, what.c_str());
  if (validate) validate(shaped);
  Tensor ids;
  if (staging && staging->defined() && staging->shape() == shaped.shape()) ids = *staging;
  else ids = Tensor::empty(shaped.shape(), DType::Int32);
  if (staging) *staging = ids;
  const float* src = shaped.data<float>();
  int32_t* dst = ids.data<int32_t>();
  for (int64_t i = 0; i < ids.numel(); ++i) dst[i] = int32_t(src[i]);
  return ids;
}

// One output's loss head: what it computes and its staging buffers.
struct OptimizerContext::Head {
  Loss loss;
  float weight = 1.0f;
  std::vector<std::pair<std::string, MetricKind>> metrics;
  Shape shape;          // the output, batch included
  int64_t outputs = 0;  // values per row
  std::string y_name, w_name;  // "y", or "y 'name'" with several outputs: made once, so a step never allocates
  Tensor labels_i32, ones;
};

// A built graph: its executable and where each input, label and result lives.
struct OptimizerPlan {
  std::unique_ptr<Executable> exe;
  std::vector<std::pair<std::string, Value>> named;  // trainable gradients, for the hook stage
  std::vector<int64_t> named_offset;  // per `named`, its first element in OptimizerState::gradients
  std::vector<Value> x;
  struct Output {
    Value y, w, loss;
    std::vector<Value> metrics;  // batch sums, in the head's metric order
  };
  std::vector<Output> out;
  Value total;
  // The training graph runs in three parts: forward and backward [0, split),
  // clipping [split, clip_end) once the period's gradients are complete,
  // then (after the user's hooks) the tick and the updates [clip_end, end).
  size_t split = SIZE_MAX, clip_end = SIZE_MAX;
  bool persistent_grads = false;  // gradients live in accumulators (cleared by the update)
  // The gradient seed, set per step: rows / nbatch_logical with
  // accumulation, 1 without; in data-parallel training, rows (the gradients
  // become row-sums, ready for the reduction). Valid with accumulation or
  // when built for data-parallel training.
  Value accumulation_scale;
  // Evaluation graphs: each persistent tensor the graph writes in place (the
  // training forward's moving averages and dropout counter) with a copy of
  // it, so that a run can put it back (an evaluation changes nothing).
  std::vector<std::pair<Tensor, Tensor>> kept_state;
};

namespace {
// Makes the model's flat gradient buffer for the trainable weights `params`
// of a training graph (the first one), or checks that they are the weights
// it was made for (every later one).
void lay_out_gradients(OptimizerState& s, const Graph& g, const std::vector<Value>& params, Device device) {
  if (s.gradient_layout.empty()) {
    int64_t n = 0;
    std::vector<OptimizerState::GradientRange> layout;
    layout.reserve(params.size());
    for (Value p : params) {
      const Node& node = g.node(p);
      layout.push_back({node.bound.raw(), node.name, node.shape, n});
      n += node.shape.numel();
    }
    s.gradients_with_rows = Tensor::zeros(Shape{n + 1}, DType::Float32, device);  // on the model's device
    s.gradients = s.gradients_with_rows.rows(0, n);
    s.gradient_layout = std::move(layout);
    return;
  }
  const std::vector<OptimizerState::GradientRange>& layout = s.gradient_layout;
  auto fail = [&](const std::string& what) {
    throw StateError("a training graph's trainable weights differ from those the model's flat gradient buffer was "
                     "laid out for by its first training graph (" + std::to_string(layout.size()) +
                     " weights): " + what + ". Every training graph of a model must train the same weights; "
                     "compile() again after changing which weights train");
  };
  if (params.size() != layout.size())
    fail("this graph has " + std::to_string(params.size()) + " trainable weights");
  for (size_t i = 0; i < params.size(); ++i) {
    const Node& node = g.node(params[i]);
    if (node.name != layout[i].name || node.shape != layout[i].shape)
      fail("weight " + std::to_string(i) + " is '" + node.name + "' " + node.shape.str() + " here, '" +
           layout[i].name + "' " + layout[i].shape.str() + " in the buffer");
    if (node.bound.raw() != layout[i].parameter)
      fail("weight " + std::to_string(i) + ", '" + node.name + "', is another tensor than the buffer's (a weight "
           "of another model?)");
  }
}

bool is_activation(OpKind op) {
  return op == OpKind::Relu || op == OpKind::Sigmoid || op == OpKind::Tanh || op == OpKind::Gelu || op == OpKind::GeluTanh ||
         op == OpKind::Silu || op == OpKind::Elu || op == OpKind::LeakyRelu || op == OpKind::Softplus ||
         op == OpKind::LogSoftmax;
}

// True when a softmax (sigmoid) feeds `v` through ops that mix probabilities
// without a weight matrix in between (an average of softmaxes, a batch norm
// after one): such an output is neither logits nor a softmax to fold.
bool probabilities_upstream(const Graph& g, Value v, OpKind activation) {
  std::vector<Value> todo{v};
  std::vector<bool> seen(g.size(), false);
  while (!todo.empty()) {
    const Value u = todo.back();
    todo.pop_back();
    if (seen[size_t(u.id)]) continue;
    seen[size_t(u.id)] = true;
    const Node& n = g.node(u);
    if (n.role != NodeRole::Op || n.op == OpKind::MatMul) continue;  // a weight matrix makes new logits
    if (n.op == activation) return true;
    for (Value in : n.input_values()) todo.push_back(in);
  }
  return false;
}

// The logits of a cross-entropy output (DESIGN.md: softmax folding looks at
// the op that produced the output). Walking back through views (Reshape:
// Flatten, Reshape) to a Softmax over the same {batch, classes} gives its
// input; an output made by a linear op is taken as logits (Keras'
// from_logits); any other activation, or a dropout between the softmax and
// the output, cannot be folded and is refused.
Value cross_entropy_logits(const Graph& g, Value out, const std::string& output, const Loss& loss) {
  Value v = out;
  bool crossed_dropout = false;
  while (true) {
    const Node& n = g.node(v);
    if (n.role != NodeRole::Op) break;
    if (n.op == OpKind::Reshape) v = n.inputs[0];
    else if (n.op == OpKind::Dropout) {
      crossed_dropout = true;
      v = n.inputs[0];
    } else break;
  }
  const Node& n = g.node(v);
  const OpKind folded = loss.kind == LossKind::BinaryCrossentropy ? OpKind::Sigmoid : OpKind::Softmax;
  const char* folded_name = loss.kind == LossKind::BinaryCrossentropy ? "sigmoid" : "softmax";
  if (n.role == NodeRole::Op && n.op == folded) {
    if (crossed_dropout)
      throw ValueError(loss.name + " on output '" + output + "': a Dropout comes after its " + folded_name +
                       ", but the " + folded_name + " is folded into the loss (logits and " + folded_name +
                       " fused), which leaves no probabilities to drop. Put the Dropout before the layer with the " +
                       folded_name);
    if (n.shape != g.shape(out) && folded == OpKind::Softmax)
      throw ValueError(loss.name + " on output '" + output + "': its softmax is over the last axis of " +
                       n.shape.str() + ", but the output is " + g.shape(out).str() +
                       "; cross-entropy needs the softmax over the classes of {batch, classes}");
    return n.inputs[0];  // a sigmoid is element-wise: its logits may be reshaped like the output
  }
  if (n.role == NodeRole::Op && !crossed_dropout && probabilities_upstream(g, v, folded))
    throw ValueError(loss.name + " on output '" + output + "': the output mixes " + folded_name +
                     " probabilities (through " + op_info(n.op).name +
                     ") instead of ending in the " + folded_name +
                     ", and cross-entropy on probabilities is not supported: end the output in the " + folded_name +
                     " (it is folded into the loss) or give logits");
  // A ReLU folded into the op before it (kReluOutput) ends the output as a Relu op would.
  const bool folded_relu = n.role == NodeRole::Op && takes_relu_output(n.op) && (n.attrs.flags & kReluOutput);
  if (n.role == NodeRole::Op && (is_activation(n.op) || n.op == OpKind::Softmax || n.op == OpKind::Sigmoid ||
                                 crossed_dropout || folded_relu)) {
    const char* act = crossed_dropout ? "dropout" : folded_relu ? "relu" : op_info(n.op).name;
    throw ValueError(loss.name + " on output '" + output + "' needs a final " + folded_name +
                     " (folded into the loss) or a linear output (taken as logits); it ends in " + act +
                     ". Use activation \"" + folded_name + "\", or \"mse\" for other outputs");
  }
  return out;
}

// A custom loss's per-row losses {batch}, checked.
Value custom_loss_rows(Graph& g, const Loss& loss, Value y, Value out, const std::string& output, int64_t b) {
  const Value rows = loss.function(g, y, out);
  if (!rows.valid() || g.shape(rows) != Shape{b} || g.dtype(rows) != DType::Float32)
    throw ShapeError("custom loss '" + loss.name + "' on output '" + output +
                     "' must return float32 per-row losses of shape {batch} ({" + std::to_string(b) +
                     "} for the graph being built); got " + (rows.valid() ? g.shape(rows).str() : std::string("no value")));
  return rows;
}
}  // namespace

OptimizerContext::OptimizerContext(const ModelFunction& model, const OptimizerContextOptions& options,
                                   std::shared_ptr<OptimizerState> state)
    : model_(model), options_(options), state_(std::move(state)) {
  if (options_.batch_size < 1)
    throw ValueError("batch_size must be at least 1; got " + std::to_string(options_.batch_size));
  if (options_.micro_batch == 0) options_.micro_batch = options_.batch_size;
  if (options_.micro_batch < options_.batch_size)
    throw ValueError("micro_batch " + std::to_string(options_.micro_batch) + " is less than batch_size " +
                     std::to_string(options_.batch_size) + "; a short micro-batch has at most micro_batch rows");
  if (options_.nbatch_logical == 0) options_.nbatch_logical = options_.micro_batch;
  if (options_.nbatch_logical < options_.micro_batch || options_.nbatch_logical % options_.micro_batch != 0)
    throw ValueError("nbatch_logical must be a positive multiple of batch_size " + std::to_string(options_.micro_batch) +
                     "; got " + std::to_string(options_.nbatch_logical));
  options_.optimizer.validate();
  check_gradient_bucket_bytes(options_.gradient_bucket_bytes, "gradient_bucket_bytes");
  buffer_.bucket_bytes_ = options_.gradient_bucket_bytes;
  if (!model_.forward) throw ValueError("OptimizerContext: the ModelFunction has no forward function");
  if (model_.inputs.empty()) throw ValueError("OptimizerContext: the ModelFunction has no inputs");
  const size_t n_out = model_.output_names.size();
  if (n_out == 0) throw ValueError("OptimizerContext: the ModelFunction has no outputs");
  auto count_error = [&](const char* what, size_t got) {
    throw ValueError(std::string("the model has ") + std::to_string(n_out) + " output" + (n_out == 1 ? "" : "s") +
                     "; give one " + what + " for each (or one for all); got " + std::to_string(got));
  };
  if (options_.losses.size() != 1 && options_.losses.size() != n_out) count_error("loss", options_.losses.size());
  if (!options_.loss_weights.empty() && options_.loss_weights.size() != n_out)
    count_error("loss weight", options_.loss_weights.size());
  if (options_.metrics.size() > 1 && options_.metrics.size() != n_out)
    count_error("metric list", options_.metrics.size());
  if (options_.weights == LossWeights::PerOutput && n_out != 1)
    throw ValueError("per-output loss weights (loss_mask) need a model with one output; this one has " +
                     std::to_string(n_out));
  period_ = options_.nbatch_logical / options_.micro_batch;
  // Each row weighs 1 / nbatch_logical of an update, whatever its micro-batch.
  accumulation_scale_ =
      Tensor::full(Shape{}, period_ > 1 ? float(options_.batch_size) / float(options_.nbatch_logical) : 1.0f);
  row_sum_seed_ = Tensor::full(Shape{}, float(options_.batch_size));
  if (!state_) state_ = std::make_shared<OptimizerState>(options_.optimizer, device());

  if (options_.capacity == 0) options_.capacity = options_.batch_size;
  if (options_.capacity < options_.batch_size)
    throw ValueError("capacity " + std::to_string(options_.capacity) + " is less than batch_size " +
                     std::to_string(options_.batch_size));
  const int64_t b = options_.batch_size;
  heads_.resize(n_out);
  for (size_t i = 0; i < n_out; ++i) {
    Head& h = heads_[i];
    h.loss = options_.losses.size() == 1 ? options_.losses[0] : options_.losses[i];
    h.weight = options_.loss_weights.empty() ? 1.0f : options_.loss_weights[i];
    if (!std::isfinite(h.weight) || h.weight < 0.0f)
      throw ValueError("loss weight of output '" + model_.output_names[i] + "' must be finite and >= 0; got " +
                       std::to_string(h.weight));
    if (!options_.metrics.empty())
      for (const std::string& m : options_.metrics.size() == 1 ? options_.metrics[0] : options_.metrics[i])
        h.metrics.emplace_back(m, metric_from_name(m, h.loss.kind));
    if (options_.weights == LossWeights::PerOutput && h.loss.kind != LossKind::MeanSquaredError &&
        h.loss.kind != LossKind::Huber && h.loss.kind != LossKind::MeanAbsoluteError)
      throw ValueError("per-output loss weights (loss_mask) need loss \"mse\", \"huber\" or \"mae\"; got \"" +
                       h.loss.name + "\"");
    h.y_name = n_out == 1 ? "y" : "y '" + model_.output_names[i] + "'";
    h.w_name = n_out == 1 ? "sample_weight" : "sample_weight '" + model_.output_names[i] + "'";
  }
  // The output shapes from a forward graph; the training and evaluation
  // graphs are built and planned on first use (evaluation alone never builds
  // the backward pass). Its arena and the staging buffers are a lower bound
  // of what the first step needs: a batch that cannot fit is refused before
  // anything of its size is allocated.
  {
    // The inputs alone, before any graph is built (shapes of that many rows
    // might not even be representable).
    uint64_t input_bytes = 0, row_bytes = 0;
    for (const InputSpec& in : model_.inputs) row_bytes += 4u * uint64_t(in.shape.numel());
    if (__builtin_mul_overflow(uint64_t(options_.capacity), row_bytes, &input_bytes)) input_bytes = UINT64_MAX;
    check_fits_in_memory(input_bytes, "batch_size " + std::to_string(b) + " (its inputs alone)", "lower batch_size");
  }
  {
    Graph g;
    std::vector<Value> xs;
    uint64_t staging = uint64_t(b) * 4u;
    for (const InputSpec& in : model_.inputs) {
      xs.push_back(g.input(in.name, in.shape.with_batch(b), in.dtype));
      staging += uint64_t(b) * 4u * uint64_t(in.shape.numel());
    }
    const std::vector<Value> outs = model_.forward(g, xs, true);  // training: dropout shows in the graph
    if (outs.size() != n_out)
      throw ValueError("OptimizerContext: the forward function returned " + std::to_string(outs.size()) +
                       " outputs for " + std::to_string(n_out) + " output names");
    for (size_t i = 0; i < n_out; ++i) {
      Head& h = heads_[i];
      h.shape = g.shape(outs[i]);
      if (h.shape.rank() < 2 || h.shape[0] != b)
        throw ShapeError("output '" + model_.output_names[i] + "' must be {batch, ...} to take a loss; got " +
                         h.shape.str());
      h.outputs = h.shape.row_size();
      const bool ce = h.loss.kind == LossKind::CategoricalCrossentropy ||
                      h.loss.kind == LossKind::SparseCategoricalCrossentropy;
      if (h.loss.kind == LossKind::BinaryCrossentropy) cross_entropy_logits(g, outs[i], model_.output_names[i], h.loss);
      if (ce && h.shape.rank() != 2)
        throw ShapeError(h.loss.name + " on output '" + model_.output_names[i] +
                         "' needs {batch, classes}; got " + h.shape.str() + " (add Flatten or Dense before the output)");
      if (ce) cross_entropy_logits(g, outs[i], model_.output_names[i], h.loss);
      if (h.loss.kind == LossKind::Custom)
        custom_loss_rows(g, h.loss, g.input("y", h.shape), outs[i], model_.output_names[i], b);
      staging += uint64_t(b) * 8u * uint64_t(h.outputs);
    }
    check_fits_in_memory(plan_memory(g, outs).arena_bytes + staging, "batch_size " + std::to_string(b),
                         "lower batch_size");
  }
  for (Head& h : heads_) {
    if (h.loss.kind == LossKind::SparseCategoricalCrossentropy) h.labels_i32 = Tensor::zeros(Shape{b}, DType::Int32);
    if (options_.weights != LossWeights::None)
      h.ones = Tensor::full(options_.weights == LossWeights::PerOutput ? Shape{b, h.outputs} : Shape{b}, 1.0f);
  }
  size_t n_metrics = 0;
  for (const Head& h : heads_) n_metrics += h.metrics.size();
  metric_sums_.assign(n_metrics, 0.0);
  x_staging_.resize(model_.inputs.size());
  for (const InputSpec& in : model_.inputs)
    x_names_.push_back(model_.inputs.size() == 1 ? std::string("x") : "x '" + in.name + "'");
  output_losses_.assign(n_out, 0.0f);
}

OptimizerContext::~OptimizerContext() = default;

size_t OptimizerContext::n_outputs() const { return heads_.size(); }

const std::vector<std::pair<std::string, MetricKind>>& OptimizerContext::metrics(size_t output) const {
  if (output >= heads_.size())
    throw IndexError("output " + std::to_string(output) + " of a model with " + std::to_string(heads_.size()) +
                     " outputs");
  return heads_[output].metrics;
}

namespace {
// acc += grad. A gradient that is a plain matrix product (a Dense layer's
// X^T dY) is added by the GEMM itself (AccumulateGrad's product form, beta
// 1), which saves writing the product and reading it back: OpenBLAS's
// {784, 500} over k = 250 in 64-row blocks took 2.8-3.5 ms so against
// 3.4-4.6 ms as product then add (one thread, AVX2 EPYC), and the
// data-parallel MLP epoch 1.228 against 1.255 s (medians of 6 paired runs).
// The MatMul node is then left unused and unscheduled unless something else
// reads it.
Value accumulate_gradient(Graph& g, Value acc, Value grad) {
  const Node& n = g.node(grad);
  if (n.role == NodeRole::Op && n.op == OpKind::MatMul && n.n_inputs == 2 && n.shape.rank() == 2 &&
      !(n.attrs.flags & kReluOutput)) {
    const Value a = n.inputs[0], b = n.inputs[1];
    const OpAttrs at = n.attrs;  // a copy: apply may move the nodes
    return g.apply(OpKind::AccumulateGrad, {acc, a, b}, at);
  }
  return g.apply(OpKind::AccumulateGrad, {acc, grad});
}
}  // namespace

// The optimizer's part of the training graph, after the loss: gradients of
// plan->total (into persistent accumulators when the period is longer than
// one step or when clipping needs them complete), then clipping, then the
// tick and one update op per parameter (DESIGN.md: the hook stage's order is
// reduction across ranks, clipping, user hooks, update).
void OptimizerContext::build_update(Graph& g, OptimizerPlan* plan, std::vector<Value>& results) {
  const OptimizerSpec& spec = options_.optimizer;
  const std::vector<Value> params = g.trainable_parameters();
  if (params.empty()) throw ValueError("the model has no trainable weights: nothing to optimise");
  lay_out_gradients(*state_, g, params, device());
  // The seed is set per step (accumulation_scale_), so that contexts of short
  // micro-batches share the plan with the full ones. Data-parallel training
  // accumulates row-sums straight into the flat buffer it reduces.
  const bool data_parallel = distributed();
  if (period_ > 1 || data_parallel) plan->accumulation_scale = g.input("optimizer/accumulation_scale", Shape{});
  std::vector<Value> grads = plan->accumulation_scale.valid()
                                 ? g.gradients(plan->total, params, plan->accumulation_scale)
                                 : g.gradients(plan->total, params);
  const bool clipping = spec.clipnorm > 0.0f || spec.global_clipnorm > 0.0f || spec.clipvalue > 0.0f;
  plan->persistent_grads = period_ > 1 || clipping || data_parallel;
  if (plan->persistent_grads) state_->gradients_accumulate = true;
  const bool momentum = spec.momentum > 0.0f;  // SGD and RMSprop: a momentum buffer
  std::vector<Value> sources(params.size()), accumulators(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    if (!grads[i].valid()) continue;
    // Copies, not a reference: adding nodes below may move the graph's nodes.
    const Shape shape = g.node(params[i]).shape;
    const std::string name = g.node(params[i]).name;
    OptimizerState::Slots& slot = state_->slots[g.node(params[i]).bound.raw()];
    // The optimizer's state, made once and shared by every context of the
    // model, on the model's device.
    const Device dev = device();
    auto zeros = [&](const Shape& s) { return Tensor::zeros(s, DType::Float32, dev); };
    switch (spec.kind) {
      case OptimizerSpec::Kind::AdamW:
        if (!slot.m.defined()) slot.m = zeros(shape);
        if (!slot.v.defined()) slot.v = zeros(shape);
        break;
      case OptimizerSpec::Kind::SGD:
        if (momentum && !slot.momentum.defined()) slot.momentum = zeros(shape);
        break;
      case OptimizerSpec::Kind::RMSprop:
        if (!slot.v.defined()) slot.v = zeros(shape);
        if (spec.centered && !slot.m.defined()) slot.m = zeros(shape);
        if (momentum && !slot.momentum.defined()) slot.momentum = zeros(shape);
        break;
      case OptimizerSpec::Kind::Adagrad:
        if (!slot.v.defined()) slot.v = Tensor::full(shape, spec.initial_accumulator_value).to(dev);
        break;
    }
    if (plan->persistent_grads) {
      // The accumulator is the weight's range of the flat gradient buffer.
      const int64_t offset = state_->gradient_layout[i].offset;
      Tensor view = state_->gradients.rows(offset, offset + shape.numel()).reshape(shape);
      if (!slot.acc.defined()) view.fill(0.0f);  // the hook stage of a graph without accumulation may have used it
      else if (slot.acc.raw() != view.raw()) view.copy_from(slot.acc);  // restored by a checkpoint before the buffer
      slot.acc = view;
      accumulators[i] = g.state(slot.acc, name + "/grad");
      sources[i] = accumulate_gradient(g, accumulators[i], grads[i]);
    } else {
      sources[i] = grads[i];
      results.push_back(grads[i]);  // readable by the hook stage
    }
  }
  plan->split = g.size();
  // Clipping, in place on the complete gradients (Keras' rules; global as
  // PyTorch's clip_grad_norm_).
  if (clipping) {
    OpAttrs at;
    if (spec.clipvalue > 0.0f) {
      at.clip = spec.clipvalue;
      for (size_t i = 0; i < params.size(); ++i)
        if (sources[i].valid()) sources[i] = g.apply(OpKind::ClipValue, {accumulators[i]}, at);
    } else if (spec.clipnorm > 0.0f) {
      at.clip = spec.clipnorm;
      at.flags = kNonFiniteNormToNaN;
      for (size_t i = 0; i < params.size(); ++i)
        if (sources[i].valid())
          sources[i] = g.apply(OpKind::ClipNorm, {accumulators[i], g.apply(OpKind::SquaredNorm, {accumulators[i]})}, at);
    } else {
      Value total;  // SquaredNorm's pair, each gradient's squares added in double
      for (size_t i = 0; i < params.size(); ++i)
        if (sources[i].valid())
          total = total.valid() ? g.apply(OpKind::SquaredNorm, {accumulators[i], total})
                                : g.apply(OpKind::SquaredNorm, {accumulators[i]});
      at.clip = spec.global_clipnorm;
      at.flags = kClipNormEps | kNonFiniteNormToNaN;
      for (size_t i = 0; i < params.size(); ++i)
        if (sources[i].valid()) sources[i] = g.apply(OpKind::ClipNorm, {accumulators[i], total}, at);
    }
  }
  plan->clip_end = g.size();
  std::vector<Value> tick_in{g.state(state_->hyper, "optimizer/hyper"), g.state(state_->step, "optimizer/iterations")};
  OpAttrs tick_at;
  if (state_->learning_rate_schedule) {
    tick_at.flags = schedule_kind(*state_->learning_rate_schedule);
    tick_in.push_back(g.state(state_->schedule_steps, "optimizer/schedule_steps"));
    tick_in.push_back(g.state(state_->schedule_values, "optimizer/schedule_values"));
  }
  Value tick = g.apply(OpKind::OptimizerTick, tick_in, tick_at);
  OpAttrs at;
  at.zero_grad = plan->persistent_grads;
  if (!spec.decoupled_weight_decay) at.flags |= kL2WeightDecay;
  if (momentum) at.flags |= kUseMomentum;
  if (spec.nesterov) at.flags |= kNesterov;
  if (spec.centered) at.flags |= kCentered;
  if (spec.epsilon_inside_sqrt) at.flags |= kEpsInsideSqrt;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!sources[i].valid()) continue;
    const OptimizerState::Slots& slot = state_->slots[g.node(params[i]).bound.raw()];
    const Value grad = sources[i];
    switch (spec.kind) {
      case OptimizerSpec::Kind::AdamW:
        g.apply(OpKind::AdamWUpdate, {params[i], grad, g.state(slot.m, "m"), g.state(slot.v, "v"), tick}, at);
        break;
      case OptimizerSpec::Kind::SGD:
        if (momentum) g.apply(OpKind::SgdUpdate, {params[i], grad, g.state(slot.momentum, "momentum"), tick}, at);
        else g.apply(OpKind::SgdUpdate, {params[i], grad, tick}, at);
        break;
      case OptimizerSpec::Kind::RMSprop: {
        std::vector<Value> in{params[i], grad, g.state(slot.v, "mean_square")};
        if (spec.centered) in.push_back(g.state(slot.m, "mean_grad"));
        if (momentum) in.push_back(g.state(slot.momentum, "momentum"));
        in.push_back(tick);
        g.apply(OpKind::RmspropUpdate, in, at);
        break;
      }
      case OptimizerSpec::Kind::Adagrad:
        g.apply(OpKind::AdagradUpdate, {params[i], grad, g.state(slot.v, "sum_squares"), tick}, at);
        break;
    }
  }
  for (size_t i = 0; i < params.size(); ++i)
    if (sources[i].valid()) {
      plan->named.emplace_back(g.node(params[i]).name, plan->persistent_grads ? accumulators[i] : sources[i]);
      plan->named_offset.push_back(state_->gradient_layout[i].offset);
    }
}

std::vector<Value> OptimizerContext::build_graph(Graph& g, int64_t b, GraphKind kind, OptimizerPlan* plan) {
  g.set_rng_counter(state_->rng_counter);  // one dropout stream per model: every context continues it
  for (const InputSpec& in : model_.inputs) plan->x.push_back(g.input(in.name, in.shape.with_batch(b), in.dtype));
  const std::vector<Value> outs = model_.forward(g, plan->x, kind != GraphKind::kEvaluation);
  std::vector<Value> results;
  plan->out.resize(heads_.size());
  for (size_t i = 0; i < heads_.size(); ++i) {
    const Head& h = heads_[i];
    OptimizerPlan::Output& o = plan->out[i];
    const std::string& name = model_.output_names[i];
    if (g.shape(outs[i]) != h.shape.with_rows(b))
      throw ShapeError("output '" + name + "' changed shape between graphs: " + h.shape.with_rows(b).str() + " then " +
                       g.shape(outs[i]).str());
    const Shape flat{b, h.outputs};
    Value out = h.shape.rank() == 2 ? outs[i] : g.reshape(outs[i], flat);
    if (options_.weights != LossWeights::None)
      o.w = g.input(name + "/sample_weight", options_.weights == LossWeights::PerSample ? Shape{b} : flat);
    switch (h.loss.kind) {
      case LossKind::SparseCategoricalCrossentropy:
      case LossKind::CategoricalCrossentropy: {
        const bool sparse = h.loss.kind == LossKind::SparseCategoricalCrossentropy;
        o.y = sparse ? g.input(name + "/y", Shape{b}, DType::Int32) : g.input(name + "/y", flat);
        o.loss = g.softmax_cross_entropy(cross_entropy_logits(g, outs[i], name, h.loss), o.y, o.w);
        break;
      }
      case LossKind::BinaryCrossentropy: {
        o.y = g.input(name + "/y", flat);
        const Value logits = cross_entropy_logits(g, outs[i], name, h.loss);
        o.loss = g.binary_cross_entropy(g.shape(logits) == flat ? logits : g.reshape(logits, flat), o.y, o.w);
        break;
      }
      case LossKind::MeanSquaredError:
        o.y = g.input(name + "/y", flat);
        o.loss = g.mse_loss(out, o.y, o.w);
        break;
      case LossKind::MeanAbsoluteError:
        o.y = g.input(name + "/y", flat);
        o.loss = g.mae_loss(out, o.y, o.w);
        break;
      case LossKind::Huber:
        o.y = g.input(name + "/y", flat);
        o.loss = g.huber_loss(out, o.y, 1.0f, o.w);
        break;
      case LossKind::Custom: {
        o.y = g.input(name + "/y", h.shape.with_rows(b));
        const Value rows = custom_loss_rows(g, h.loss, o.y, outs[i], name, b);
        // Keras' sum over batch size: weighted per-row losses, summed, over the row count.
        o.loss = g.scale(g.sum(o.w.valid() ? g.mul(rows, o.w) : rows), 1.0f / float(b));
        break;
      }
    }
    results.push_back(o.loss);
    // Metrics on the output as predict returns it (probabilities), summed over rows.
    const Value y_flat = h.loss.kind == LossKind::Custom ? g.reshape(o.y, flat) : o.y;
    for (const auto& [metric_name, kind] : h.metrics) {
      Value v;
      OpAttrs at;
      switch (kind) {
        case MetricKind::CategoricalAccuracy:
        case MetricKind::SparseCategoricalAccuracy: v = g.apply(OpKind::Accuracy, {out, y_flat}); break;
        case MetricKind::TopKCategoricalAccuracy:
        case MetricKind::SparseTopKCategoricalAccuracy:
          at.k = 5;
          v = g.apply(OpKind::TopKAccuracy, {out, y_flat}, at);
          break;
        case MetricKind::BinaryAccuracy:
          at.threshold = 0.5f;
          v = g.scale(g.apply(OpKind::BinaryAccuracy, {out, y_flat}, at), 1.0f / float(h.outputs));
          break;
        case MetricKind::MeanAbsoluteError: v = g.mae_loss(out, y_flat); break;  // means: times the rows in run()
        case MetricKind::MeanSquaredError:
        case MetricKind::RootMeanSquaredError: v = g.mse_loss(out, y_flat); break;
      }
      o.metrics.push_back(v);
      results.push_back(v);
    }
  }
  plan->total = plan->out[0].loss;
  if (heads_.size() > 1 || heads_[0].weight != 1.0f) {
    plan->total = Value{};
    for (size_t i = 0; i < heads_.size(); ++i) {
      const Value part = heads_[i].weight == 1.0f ? plan->out[i].loss : g.scale(plan->out[i].loss, heads_[i].weight);
      plan->total = plan->total.valid() ? g.add(plan->total, part) : part;
    }
    results.push_back(plan->total);
  }
  if (kind == GraphKind::kTraining) build_update(g, plan, results);
  return results;
}

std::shared_ptr<OptimizerPlan> OptimizerContext::build(GraphKind kind) {
  // Planned for the capacity and run at any batch up to it, when the graph
  // scales with its batch (learnt from a second construction at capacity - 1);
  // otherwise planned for exactly this context's batch.
  const int64_t b = options_.batch_size, cap = options_.capacity;
  auto plan = std::make_shared<OptimizerPlan>();
  auto g = std::make_unique<Graph>();
  std::vector<Value> results = build_graph(*g, cap, kind, plan.get());
  BatchRule rule;
  if (cap >= 3) {
    Graph probe;
    OptimizerPlan unused;
    build_graph(probe, cap - 1, kind, &unused);
    try {
      rule = make_batch_rule(*g, cap, probe, cap - 1);
    } catch (const ValueError&) {
      rule = BatchRule{};
    }
  }
  if (rule.max_rows == 0 && cap != b) {  // no rule (or no probe below 3 rows): exactly this batch
    plan = std::make_shared<OptimizerPlan>();
    g = std::make_unique<Graph>();
    results = build_graph(*g, b, kind, plan.get());
  }
  plan->exe = std::make_unique<Executable>(std::move(*g), results, std::move(rule), options_.backend, options_.fusion);
  if (kind != GraphKind::kTraining) {
    const Graph& built = plan->exe->graph();
    for (const Node& n : built.nodes()) {
      if (n.role != NodeRole::Op || !op_info(n.op).in_place) continue;
      const Tensor& target = built.node(n.inputs[0]).bound;
      if (!target.defined()) continue;
      const bool seen = std::any_of(plan->kept_state.begin(), plan->kept_state.end(),
                                    [&](const auto& kept) { return kept.first.raw() == target.raw(); });
      if (!seen) plan->kept_state.emplace_back(target, target.clone());
    }
  }
  return plan;
}

void OptimizerContext::check_kernels(const Backend& backend) {
  if (!retired_.empty()) throw StateError("check_kernels: " + retired_);
  // The training forward's ops are a subset of the training step's.
  for (GraphKind kind : {GraphKind::kEvaluation, GraphKind::kTraining}) {
    Graph g;
    OptimizerPlan unused;
    build_graph(g, std::min<int64_t>(options_.batch_size, 2), kind, &unused);
    backend.check_kernels(g);
  }
}

OptimizerPlan& OptimizerContext::acquire(GraphKind kind) {
  std::shared_ptr<OptimizerPlan>* slot = nullptr;
  switch (kind) {
    case GraphKind::kEvaluation: slot = &eval_; break;
    case GraphKind::kTrainingForward: slot = &train_forward_; break;
    case GraphKind::kTraining: slot = &train_; break;
  }
  if (!slot)
    throw ValueError("OptimizerContext: graph kind " + std::to_string(int(kind)) +
                     " is none of evaluation (0), training forward (1) or training (2)");
  std::shared_ptr<OptimizerPlan>& mine = *slot;
  const bool train = kind == GraphKind::kTraining;
  if (!mine) {
    const int64_t b = options_.batch_size;
    auto runs_b = [b](const OptimizerPlan& p) { return p.exe->max_rows() >= b || p.exe->rows() == b; };
    std::shared_ptr<OptimizerPlan>* shared =
        options_.plans ? &options_.plans->plans_[{options_.capacity, int(kind)}] : nullptr;
    if (shared && *shared && runs_b(**shared)) mine = *shared;
    if (!mine) {
      mine = build(kind);
      if (shared && mine->exe->max_rows() > 0) *shared = mine;
    }
    if (train) {
      // What the hooks see: views of the flat buffer; without accumulation
      // the gradients themselves are outputs in the arena, copied in and out
      // around the hooks.
      buffer_.flat_ = state_->gradients;
      buffer_.tensors_.clear();
      arena_grads_.clear();
      for (size_t k = 0; k < mine->named.size(); ++k) {
        const auto& [name, v] = mine->named[k];
        const Shape& shape = mine->exe->graph().node(v).shape;
        const int64_t offset = mine->named_offset[k];
        buffer_.tensors_.push_back({name, state_->gradients.rows(offset, offset + shape.numel()).reshape(shape)});
        arena_grads_.push_back(mine->persistent_grads ? Tensor{} : mine->exe->output(v));
      }
    }
  }
  if (mine->exe->rows() != options_.batch_size) mine->exe->set_rows(options_.batch_size);
  return *mine;
}

int64_t OptimizerContext::planned_rows() const {
  if (!train_) return 0;
  return train_->exe->max_rows() > 0 ? train_->exe->max_rows() : train_->exe->rows();
}

size_t OptimizerPlans::arena_bytes() const {
  size_t total = 0;
  for (const auto& [key, plan] : plans_)
    if (plan) total += plan->exe->arena_bytes();
  return total;
}

size_t OptimizerPlans::count() const { return plans_.size(); }

void OptimizerContext::check_targets(size_t output, const Tensor& y, const Tensor& w, int64_t rows) const {
  const Head& h = heads_.at(output);
  check_rows(y, rows, h.y_name.c_str());
  const int64_t n = y.shape()[0];
  const int64_t outputs = h.outputs;
  const char* loss = h.loss.name.c_str();  // a std::string here would allocate on every step
  switch (h.loss.kind) {
    case LossKind::SparseCategoricalCrossentropy: {
      if (y.shape().rank() > 2 || (y.shape().rank() == 2 && y.shape()[1] != 1))
        throw ShapeError("sparse_categorical_crossentropy takes one class id per row ({" + std::to_string(n) +
                         "} or {" + std::to_string(n) + ", 1}); got " + y.shape().str() +
                         ", which looks like one-hot rows: use categorical_crossentropy for those");
      for (int64_t i = 0; i < n; ++i) {
        int64_t id;
        if (y.dtype() == DType::Int32) {
          id = y.data<int32_t>()[i];
        } else {
          const float v = y.data<float>()[i];
          if (!std::isfinite(v) || v != std::floor(v))
            throw ValueError("class ids must be whole numbers; " + h.y_name + " row " + std::to_string(i) +
                             " holds " + std::to_string(v));
          if (v < 0.0f || v >= float(outputs)) {  // before converting: int64_t(1e30f) is undefined
            char buf[32];
            std::snprintf(buf, sizeof buf, std::fabs(v) < 1e15f ? "%.0f" : "%g", double(v));
            throw IndexError(std::string("class id ") + buf + " at " + h.y_name + " row " + std::to_string(i) +
                             " is outside [0, " + std::to_string(outputs) + "): the model has " +
                             std::to_string(outputs) + " classes");
          }
          id = int64_t(v);
        }
        if (id < 0 || id >= outputs)
          throw IndexError("class id " + std::to_string(id) + " at " + h.y_name + " row " + std::to_string(i) +
                           " is outside [0, " + std::to_string(outputs) + "): the model has " +
                           std::to_string(outputs) + " classes");
      }
      break;
    }
    case LossKind::CategoricalCrossentropy:
    case LossKind::MeanSquaredError:
    case LossKind::MeanAbsoluteError:
    case LossKind::Huber:
    case LossKind::BinaryCrossentropy:
    case LossKind::Custom: {
      const bool ce = h.loss.kind == LossKind::CategoricalCrossentropy;
      if (y.dtype() != DType::Float32)
        throw TypeError(std::string(loss) + " takes float32 " + (ce ? "one-hot rows" : "targets") + "; got " +
                        dtype_name(y.dtype()) + (ce ? " class ids: use sparse_categorical_crossentropy for those" : ""));
      if (y.shape().row_size() != outputs || (ce && outputs > 1 && y.shape().rank() != 2))
        throw ShapeError(std::string(loss) + " takes " + (ce ? "one-hot rows" : "targets") + " of shape " +
                         h.shape.with_rows(n).str() + " (the model has " + std::to_string(outputs) +
                         " outputs per row); got " + y.shape().str() +
                         (ce && y.shape().row_size() == 1 ? ": class ids need sparse_categorical_crossentropy" : ""));
      check_finite(y, h.y_name.c_str());
      if (h.loss.kind == LossKind::BinaryCrossentropy) {
        const float* t = y.data<float>();
        for (int64_t i = 0; i < y.numel(); ++i)
          if (t[i] < 0.0f || t[i] > 1.0f)
            throw ValueError("binary_crossentropy takes targets in [0, 1] (labels or probabilities); " + h.y_name +
                             " element " + std::to_string(i) + " holds " + std::to_string(t[i]));
      }
      break;
    }
  }
  if (options_.weights == LossWeights::None) {
    if (w.defined())
      throw ValueError("sample_weight given, but this context was built without loss weights; build it with "
                       "LossWeights::PerSample (or PerOutput for a per-output mask)");
    return;
  }
  if (!w.defined()) return;
  check_rows(w, n, h.w_name.c_str());
  if (w.dtype() != DType::Float32)
    throw TypeError(h.w_name + " must be float32; got " + dtype_name(w.dtype()));
  const bool per_sample = options_.weights == LossWeights::PerSample;
  if (per_sample ? w.numel() != n : (w.shape().rank() != 2 || w.shape()[1] != outputs))
    throw ShapeError(h.w_name + " must be " +
                     (per_sample ? "{" + std::to_string(n) + "} or {" + std::to_string(n) + ", 1} (one per sample)"
                                 : "{" + std::to_string(n) + ", " + std::to_string(outputs) + "} (one per output)") +
                     "; got " + w.shape().str());
  check_finite(w, h.w_name.c_str());
  const float* pw = w.data<float>();
  for (int64_t i = 0; i < w.numel(); ++i)
    if (pw[i] < 0.0f)
      throw ValueError(h.w_name + " must be >= 0 (a negative weight makes training raise that row's loss); element " +
                       std::to_string(i) + " holds " + std::to_string(pw[i]));
}

void OptimizerContext::stage(OptimizerPlan& plan, std::span<const Tensor> x, std::span<const Tensor> y,
                             std::span<const Tensor> w) {
  const int64_t b = options_.batch_size;
  const size_t n_in = model_.inputs.size(), n_out = heads_.size();
  if (x.size() != n_in || y.size() != n_out || (w.size() > 1 && w.size() != n_out)) {
    auto names = [](const std::vector<std::string>& v) {
      std::string s;
      for (const std::string& n : v) s += (s.empty() ? "" : ", ") + n;
      return s;
    };
    std::vector<std::string> in_names;
    for (const InputSpec& in : model_.inputs) in_names.push_back(in.name);
    throw ShapeError("the model has " + std::to_string(n_in) + " input(s) (" + names(in_names) + ") and " +
                     std::to_string(n_out) + " output(s) (" + names(model_.output_names) + "); got " +
                     std::to_string(x.size()) + " x tensor(s), " + std::to_string(y.size()) + " y tensor(s) and " +
                     std::to_string(w.size()) + " sample_weight tensor(s) (give none, one for all outputs, or one per output)");
  }
  for (size_t i = 0; i < n_in; ++i) {
    const InputSpec& in = model_.inputs[i];
    plan.exe->bind(plan.x[i], in.check(x[i], b, x_names_[i], &x_staging_[i]));
  }
  for (size_t i = 0; i < n_out; ++i) {
    const Head& h = heads_[i];
    const OptimizerPlan::Output& o = plan.out[i];
    const Tensor none;
    const Tensor& wi = w.empty() ? none : w.size() == 1 ? w[0] : w[i];
    check_targets(i, y[i], wi, b);
    if (h.loss.kind == LossKind::SparseCategoricalCrossentropy) {
      int32_t* ids = h.labels_i32.data<int32_t>();
      if (y[i].dtype() == DType::Int32) std::memcpy(ids, y[i].raw(), size_t(b) * sizeof(int32_t));
      else
        for (int64_t r = 0; r < b; ++r) ids[r] = int32_t(y[i].data<float>()[r]);
      plan.exe->bind(o.y, h.labels_i32);
    } else {
      const Shape want = h.loss.kind == LossKind::Custom ? h.shape : Shape{b, h.outputs};
      plan.exe->bind(o.y, y[i].shape() == want ? y[i] : y[i].reshape(want));
    }
    if (options_.weights == LossWeights::None) continue;
    const Shape& want = h.ones.shape();
    plan.exe->bind(o.w, !wi.defined() ? h.ones : wi.shape() == want ? wi : wi.reshape(want));
  }
}

StepResult OptimizerContext::run(OptimizerPlan& plan, std::span<const Tensor> x, std::span<const Tensor> y,
                                 std::span<const Tensor> w, bool train) {
  stage(plan, x, y, w);
  StepResult r;
  r.rows = options_.batch_size;
  if (train) {
    if (plan.accumulation_scale.valid())
      plan.exe->bind(plan.accumulation_scale, distributed() ? row_sum_seed_ : accumulation_scale_);
    plan.exe->run(0, plan.split);
    ++n_steps_;
    if (++state_->micro_step >= period_) {
      apply_update(plan, float(period_ == 1 ? options_.batch_size : options_.nbatch_logical));
      r.updated = true;
    }
  } else {
    for (auto& [state, copy] : plan.kept_state) copy.copy_from(state);
    struct PutBack {  // even when a kernel throws
      std::vector<std::pair<Tensor, Tensor>>& kept;
      ~PutBack() {
        for (auto& [state, copy] : kept) state.copy_from(copy);
      }
    } put_back{plan.kept_state};
    plan.exe->run();
  }
  size_t k = 0;
  for (size_t i = 0; i < heads_.size(); ++i) {
    output_losses_[i] = plan.exe->scalar(plan.out[i].loss);
    for (size_t m = 0; m < plan.out[i].metrics.size(); ++m) {
      const MetricKind kind = heads_[i].metrics[m].second;
      const bool mean = kind == MetricKind::MeanAbsoluteError || kind == MetricKind::MeanSquaredError ||
                        kind == MetricKind::RootMeanSquaredError;
      metric_sums_[k++] = double(plan.exe->scalar(plan.out[i].metrics[m])) * (mean ? double(r.rows) : 1.0);
    }
  }
  r.loss = plan.exe->scalar(plan.total);
  for (size_t m = 0; m < heads_[0].metrics.size() && r.correct < 0; ++m)
    if (heads_[0].metrics[m].second == MetricKind::CategoricalAccuracy ||
        heads_[0].metrics[m].second == MetricKind::SparseCategoricalAccuracy)
      r.correct = int64_t(metric_sums_[m]);
  r.output_losses = output_losses_;
  r.metric_sums = metric_sums_;
  return r;
}

void OptimizerContext::retire(const std::string& why) {
  retired_ = why.empty() ? "retired" : why;
  train_.reset();
  eval_.reset();
  train_forward_.reset();
  // Nothing of the model stays reachable: its layers (and weights) and the
  // optimizer moments go with the last live owner.
  model_ = ModelFunction{};
  state_.reset();
  options_.model_hooks.reset();
  options_.plans.reset();
  // The views of the flat buffer and the arena go too; during the hook stage
  // (a hook retired this context) apply_update drops them once the hooks
  // that may still hold them are done.
  if (!in_hook_stage_) release_gradient_views();
}

void OptimizerContext::release_gradient_views() {
  buffer_.flat_ = Tensor{};
  buffer_.tensors_.clear();
  arena_grads_.clear();
}

// Clipping, the hooks and the optimizer update over the period's complete
// gradients (the second half of a training step).
void OptimizerContext::apply_update(OptimizerPlan& plan, float rows) {
  // A hook may change the model (compile, free, freeze_bn_stats, ...),
  // which retires this context: the plan, the state and the hook lists
  // are held here until the hooks are done, and the update is then not
  // applied. Copies of shared_ptrs: no allocation.
  const std::shared_ptr<OptimizerState> state = state_;
  const std::shared_ptr<const std::vector<AnyGradientHook>> model_hooks = options_.model_hooks;
  dist::Communicator* const comm = distributed() ? state->communicator.get() : nullptr;
  // Without accumulation or clipping the gradients are arena outputs: with
  // hooks or ranks to reduce over, they are copied into the flat buffer and
  // back for the update (two backend copies per update, only then); else
  // nothing touches them.
  const bool copy_through =
      !plan.persistent_grads && (comm || (model_hooks && !model_hooks->empty()) || !hooks_.empty());
  auto call = [this](const AnyGradientHook& hook) {
    if (const GradientHook* h = std::get_if<GradientHook>(&hook)) (*h)(buffer_.tensors());
    else std::get<GradientBucketHook>(hook)(buffer_);
  };
  in_hook_stage_ = true;
  try {
    if (copy_through)
      for (size_t k = 0; k < arena_grads_.size(); ++k) buffer_.tensors_[k].grad.copy_from(arena_grads_[k]);
    // The hook stage's order (DESIGN.md): the reduction across ranks, then
    // clipping (graph ops over the accumulators; none without them), then
    // the user's hooks.
    // A plan with a seed accumulated row-sums (the seed was the rows); else
    // the buffer holds means.
    if (comm) reduce_over_ranks(*comm, rows, plan.accumulation_scale.valid());
    plan.exe->run(plan.split, plan.clip_end);
    if (model_hooks)
      for (size_t i = 0; i < model_hooks->size() && retired_.empty(); ++i) call((*model_hooks)[i]);
    for (size_t i = 0; i < hooks_.size() && retired_.empty(); ++i) call(hooks_[i]);
  } catch (...) {
    in_hook_stage_ = false;
    // The period's gradients are dropped, so the next period starts clean.
    state->micro_step = 0;
    if ((plan.persistent_grads || state->gradients_accumulate) && retired_.empty()) state->gradients.fill(0.0f);
    if (!retired_.empty()) release_gradient_views();
    throw;
  }
  in_hook_stage_ = false;
  if (!retired_.empty()) {
    release_gradient_views();
    state->micro_step = 0;
    throw StateError("a gradient hook changed the model during a step (" + retired_ +
                     "): this step's update was not applied; change the model between steps");
  }
  if (copy_through) {
    for (size_t k = 0; k < arena_grads_.size(); ++k) arena_grads_[k].copy_from(buffer_.tensors_[k].grad);
    // Another graph of the model accumulates into the buffer: leave it zero.
    if (state->gradients_accumulate) state->gradients.fill(0.0f);
  }
  plan.exe->run(plan.clip_end);
  state_->micro_step = 0;
}

bool OptimizerContext::distributed() const {
  return state_ && state_->communicator && state_->communicator->size() > 1;
}

bool OptimizerContext::apply_pending_update() {
  if (!retired_.empty())
    throw StateError("this optimizer context is stale: " + retired_ + "; get a new one from optimizer_context()");
  if (period_ == 1 || state_->micro_step == 0) return false;
  acquire(GraphKind::kTraining);
  const std::shared_ptr<OptimizerPlan> keep = train_;
  apply_update(*keep, float(options_.nbatch_logical));
  return true;
}

StepResult OptimizerContext::join_step() {
  if (!retired_.empty())
    throw StateError("this optimizer context is stale: " + retired_ + "; get a new one from optimizer_context()");
  if (!state_->communicator)
    throw StateError("join_step() is for data-parallel training: this model has no communicator (set "
                     "FitOptions::communicator or TrainerOptions::communicator)");
  acquire(GraphKind::kTraining);
  const std::shared_ptr<OptimizerPlan> keep = train_;
  ++n_steps_;
  StepResult r;
  std::fill(output_losses_.begin(), output_losses_.end(), 0.0f);
  std::fill(metric_sums_.begin(), metric_sums_.end(), 0.0);
  r.output_losses = output_losses_;
  r.metric_sums = metric_sums_;
  if (++state_->micro_step >= period_) {
    // Without accumulation the arena holds the last step's gradients, not
    // this rank's (none): the flat buffer gets zeros instead.
    if (!keep->persistent_grads)
      for (Tensor& g : arena_grads_) g.fill(0.0f);
    apply_update(*keep, period_ == 1 ? 0.0f : float(options_.nbatch_logical));
    r.updated = true;
  }
  return r;
}

// The data-parallel reduction (issue 14), over the flat buffer holding this
// rank's gradient over `rows` rows, as a row-sum s_r (`row_sums`) or a mean
// g_r (then made the row-sum rows * g_r first): every rank sends s_r and
// its rows, bucket by bucket, the rows riding in the last bucket's message;
// the sums come back identical on every rank (reduced onto rank 0 and
// broadcast), and the gradient becomes sum(s_r) / sum(rows_r): the mean
// over the global batch, a short one included.
void OptimizerContext::reduce_over_ranks(dist::Communicator& comm, float rows, bool row_sums) {
  Tensor& message = state_->gradients_with_rows;
  if (message.device() != Device::CPU)
    throw StateError("data-parallel training reduces gradients on the CPU; this model's are on " +
                     std::string(device_name(message.device())) + " (device collectives are not built yet)");
  float* p = message.data<float>();
  const size_t n = size_t(message.numel()) - 1;
  if (!row_sums)
    for (size_t i = 0; i < n; ++i) p[i] *= rows;
  p[n] = rows;
  const size_t per_bucket = buffer_.bucket_bytes() / sizeof(float);
  for (size_t begin = 0; begin < n; begin += per_bucket) {
    const size_t end = std::min(n, begin + per_bucket);
    comm.reduce_broadcast(std::span<float>(p + begin, (end == n ? n + 1 : end) - begin));
  }
  const float total = p[n];
  if (!(total > 0.0f))
    throw StateError("data-parallel update with no rows on any rank: every rank joined without a batch");
  const float inv = 1.0f / total;
  for (size_t i = 0; i < n; ++i) p[i] *= inv;
}

StepResult OptimizerContext::step(std::span<const Tensor> x, std::span<const Tensor> y,
                                  std::span<const Tensor> sample_weight) {
  if (!retired_.empty())
    throw StateError("this optimizer context is stale: " + retired_ + "; get a new one from optimizer_context()");
  acquire(GraphKind::kTraining);
  const std::shared_ptr<OptimizerPlan> keep = train_;  // alive even if a hook retires this context
  return run(*keep, x, y, sample_weight, true);
}

StepResult OptimizerContext::step(const Tensor& x, const Tensor& y, const Tensor& sample_weight) {
  return step(std::span<const Tensor>(&x, 1), std::span<const Tensor>(&y, 1),
              sample_weight.defined() ? std::span<const Tensor>(&sample_weight, 1) : std::span<const Tensor>());
}

StepResult OptimizerContext::evaluate(std::span<const Tensor> x, std::span<const Tensor> y,
                                      std::span<const Tensor> sample_weight, const EvalOptions& options) {
  if (!retired_.empty())
    throw StateError("this optimizer context is stale: " + retired_ + "; get a new one from optimizer_context()");
  return run(acquire(options.training ? GraphKind::kTrainingForward : GraphKind::kEvaluation), x, y, sample_weight,
             false);
}

StepResult OptimizerContext::evaluate(const Tensor& x, const Tensor& y, const Tensor& sample_weight,
                                      const EvalOptions& options) {
  return evaluate(std::span<const Tensor>(&x, 1), std::span<const Tensor>(&y, 1),
                  sample_weight.defined() ? std::span<const Tensor>(&sample_weight, 1) : std::span<const Tensor>(),
                  options);
}

void OptimizerContext::add_gradient_hook(GradientHook hook) {
  if (!hook) throw ValueError("add_gradient_hook: empty hook");
  hooks_.emplace_back(std::in_place_type<GradientHook>, std::move(hook));
}

void OptimizerContext::add_gradient_bucket_hook(GradientBucketHook hook) {
  if (!hook) throw ValueError("add_gradient_bucket_hook: empty hook");
  hooks_.emplace_back(std::in_place_type<GradientBucketHook>, std::move(hook));
}

void OptimizerContext::set_gradient_bucket_bytes(size_t bytes) {
  check_gradient_bucket_bytes(bytes, "gradient_bucket_bytes");
  options_.gradient_bucket_bytes = bytes;
  buffer_.bucket_bytes_ = bytes;
}

void check_gradient_bucket_bytes(size_t bytes, const char* where) {
  if (bytes == 0 || bytes % 4 != 0)
    throw ValueError(std::string(where) + " must be a positive multiple of 4 (buckets hold whole float32 "
                     "gradients; the default is 25 MiB, " + std::to_string(kDefaultGradientBucketBytes) +
                     " bytes); got " + std::to_string(bytes));
}

std::pair<int64_t, int64_t> GradientBuffer::bucket_range(size_t k) const {
  const size_t n = n_buckets();
  if (k >= n)
    throw IndexError("gradient bucket " + std::to_string(k) + " is out of range: the buffer of " +
                     std::to_string(bytes()) + " bytes has " + std::to_string(n) + " bucket(s) of at most " +
                     std::to_string(bucket_bytes_) + " bytes (0 before the first step); use k < n_buckets()");
  const int64_t per = int64_t(bucket_bytes_ / 4);
  const int64_t begin = int64_t(k) * per;
  return {begin, std::min(begin + per, flat_.numel())};
}

Tensor GradientBuffer::bucket(size_t k) const {
  const auto [begin, end] = bucket_range(k);
  return flat_.rows(begin, end);
}

void OptimizerContext::set_learning_rate(float lr) {
  if (!retired_.empty())
    throw StateError("this optimizer context is stale: " + retired_ + "; get a new one from optimizer_context()");
  state_->set_learning_rate(lr);
}

float OptimizerContext::learning_rate() const {
  if (!retired_.empty())
    throw StateError("this optimizer context is stale: " + retired_ + "; get a new one from optimizer_context()");
  return float(state_->learning_rate());
}

}  // namespace tensorgrad
