#include "tensorgrad/nn/trainer.h"

#include <cmath>
#include <stdexcept>

#include "core/host_copy.h"
#include "tensorgrad/backend/executable.h"
#include "tensorgrad/core/error.h"
#include "tensorgrad/core/logging.h"
#include "tensorgrad/nn/data_parallel.h"

namespace tensorgrad::nn {

// update_target's graph for one target: PolyakUpdate (or Assign) per weight,
// tau a persistent {1} tensor written only when it changes.
struct Trainer::TargetUpdate {
  explicit TargetUpdate(Device device) : tau(Tensor::zeros(Shape{1}, DType::Float32, device)) {}
  Tensor tau;
  float last_tau = -1.0f;  // the value in `tau` (none yet)
  std::unique_ptr<Executable> exe;
};

namespace {
Model trainer_copy(const Model& model, const TrainerOptions& options) {
  if (model.released()) throw StateError("Trainer: the model has been freed (released)");
  if (!model.compiled()) throw StateError("Trainer: the model is not compiled; call compile(optimizer, loss) first");
  if (options.loss_mask != 0)
    for (const Loss& l : model.losses())
      if (l.kind != LossKind::MeanSquaredError && l.kind != LossKind::Huber && l.kind != LossKind::MeanAbsoluteError)
        throw ValueError("Trainer: loss_mask needs loss \"mse\", \"huber\" or \"mae\"; the model is compiled with \"" +
                         l.name + "\"");
  Model copy = model.clone();
  OptimizerSpec spec = model.optimizer();
  if (options.weight_decay) {
    if (!(*options.weight_decay >= 0.0f && *options.weight_decay <= 1.0f))
      throw ValueError("Trainer: weight_decay must be in [0, 1]; got " + std::to_string(*options.weight_decay));
    spec.weight_decay = *options.weight_decay;
  }
  copy.compile(spec, model.losses(), model.loss_weights(), model.output_metrics(), model.backend());
  if (options.gradient_bucket_bytes) {
    check_gradient_bucket_bytes(*options.gradient_bucket_bytes, "Trainer: gradient_bucket_bytes");
    copy.set_gradient_bucket_bytes(*options.gradient_bucket_bytes);
  }
  return copy;
}
}  // namespace

Trainer::Trainer(const Model& model, const TrainerOptions& options)
    : model_(trainer_copy(model, options)), options_(options) {
  if (options_.batch_size < 1)
    throw ValueError("Trainer: batch_size must be at least 1; got " + std::to_string(options_.batch_size));
  const int64_t outputs = model_.output_shape().numel();
  LossWeights weights = LossWeights::None;
  if (options_.loss_mask == 1) weights = LossWeights::PerSample;
  else if (options_.loss_mask == outputs && outputs > 1) weights = LossWeights::PerOutput;
  else if (options_.loss_mask != 0)
    throw ValueError("Trainer: loss_mask must be 0 (none), 1 (one weight per sample) or " + std::to_string(outputs) +
                     " (one weight per output); got " + std::to_string(options_.loss_mask));
  // compile() leaves the copy with the default fusion; the model's own holds
  // (as clone() and to() keep it).
  model_.state_.fusion = model.state_.fusion;
  ctx_ = &model_.optimizer_context(options_.batch_size, options_.nbatch_logical, weights);
  if (options_.communicator) {
    // The batch may differ between ranks (rows are weighed), the period not.
    check_ranks_agree(*options_.communicator,
                      {{"accumulation period (nbatch_logical / batch_size)", std::to_string(ctx_->accumulation_period())},
                       {"loss_mask", std::to_string(options_.loss_mask)}},
                      "trainers", "Make every rank's Trainer with the same options (the batch may differ)");
    broadcast_training_state(model_, *options_.communicator);  // every rank starts from rank 0's
    model_.set_communicator(options_.communicator);
  }
}

Trainer::~Trainer() = default;
// A moved-from trainer is released: it must not reach the context it handed on.
Trainer::Trainer(Trainer&& other) noexcept
    : model_(std::move(other.model_)),
      options_(other.options_),
      ctx_(other.ctx_),
      freed_(other.freed_),
      warned_non_finite_(other.warned_non_finite_),
      n_steps_offset_(other.n_steps_offset_),
      target_(other.target_),
      target_structure_(other.target_structure_),
      target_update_(std::move(other.target_update_)) {
  other.ctx_ = nullptr;
  other.freed_ = true;
}

Trainer& Trainer::operator=(Trainer&& other) noexcept {
  if (this != &other) {
    model_ = std::move(other.model_);
    options_ = other.options_;
    ctx_ = other.ctx_;
    freed_ = other.freed_;
    warned_non_finite_ = other.warned_non_finite_;
    n_steps_offset_ = other.n_steps_offset_;
    target_ = other.target_;
    target_structure_ = other.target_structure_;
    target_update_ = std::move(other.target_update_);
    other.ctx_ = nullptr;
    other.freed_ = true;
  }
  return *this;
}

void Trainer::check_weights_allowed(const Tensor& sample_weight) const {
  if (sample_weight.defined() && options_.loss_mask == 0)
    throw ValueError("sample_weight given, but this trainer was built without loss_mask; rebuild it with "
                     "TrainerOptions::loss_mask = 1 (one weight per sample) or = the number of outputs (one per output)");
}

void Trainer::check_live(const char* call) const {
  if (freed_) throw StateError(std::string("Trainer::") + call + ": this trainer has been freed (or moved from)");
}

float Trainer::step(const Tensor& x, const Tensor& y, const Tensor& sample_weight) {
  return step(std::span<const Tensor>(&x, 1), std::span<const Tensor>(&y, 1),
              sample_weight.defined() ? std::span<const Tensor>(&sample_weight, 1) : std::span<const Tensor>());
}

float Trainer::step(std::span<const Tensor> x, std::span<const Tensor> y, std::span<const Tensor> sample_weight) {
  check_live("step");
  float loss = 0.0f;
  if (options_.communicator) {
    try {
      for (const Tensor& w : sample_weight) check_weights_allowed(w);
      loss = ctx_->step(x, y, sample_weight).loss;
    } catch (const std::exception& e) {
      abort_job(*options_.communicator, "Trainer::step", e);
    } catch (...) {
      abort_job(*options_.communicator, "Trainer::step",
                std::runtime_error("an exception not derived from std::exception"));
    }
  } else {
    for (const Tensor& w : sample_weight) check_weights_allowed(w);
    loss = ctx_->step(x, y, sample_weight).loss;
  }
  if (!std::isfinite(loss) && !warned_non_finite_) {
    warned_non_finite_ = true;
    log_message(LogLevel::Warning, "Trainer: the loss is " + std::to_string(loss) + " at step " +
                                       std::to_string(n_steps()) +
                                       "; lower the learning rate or check the targets");
  }
  return loss;
}

void Trainer::join_step() {
  check_live("join_step");
  if (!options_.communicator)
    throw StateError("Trainer::join_step: this trainer has no communicator; join_step is for data-parallel training "
                     "(TrainerOptions::communicator)");
  try {
    ctx_->join_step();
  } catch (const std::exception& e) {
    abort_job(*options_.communicator, "Trainer::join_step", e);
  } catch (...) {
    abort_job(*options_.communicator, "Trainer::join_step",
              std::runtime_error("an exception not derived from std::exception"));
  }
}

float Trainer::eval(const Tensor& x, const Tensor& y, const Tensor& sample_weight, const EvalOptions& options) {
  return eval(std::span<const Tensor>(&x, 1), std::span<const Tensor>(&y, 1),
              sample_weight.defined() ? std::span<const Tensor>(&sample_weight, 1) : std::span<const Tensor>(),
              options);
}

float Trainer::eval(std::span<const Tensor> x, std::span<const Tensor> y, std::span<const Tensor> sample_weight,
                    const EvalOptions& options) {
  check_live("eval");
  for (const Tensor& w : sample_weight) check_weights_allowed(w);
  return ctx_->evaluate(x, y, sample_weight, options).loss;
}

Tensor Trainer::predict(const Tensor& x, int64_t batch_size) {
  check_live("predict");
  return model_.predict(x, batch_size > 0 ? batch_size : options_.batch_size);
}

void Trainer::predict(const Tensor& x, Tensor& out) {
  check_live("predict");
  model_.predict(x, out);
}

void Trainer::predict(std::span<const Tensor> x, std::span<Tensor> out) {
  check_live("predict");
  model_.predict(x, out);
}

Model Trainer::snapshot() const {
  check_live("snapshot");
  return model_.clone();
}

Model Trainer::model() const {
  check_live("model");
  return model_.clone();
}

void Trainer::update_target(Model& target, float tau) {
  check_live("update_target");
  if (!(tau >= 0.0f && tau <= 1.0f)) throw ValueError("update_target: tau must be in [0, 1]; got " + std::to_string(tau));
  if (target.released()) {
    if (&target == target_) target_update_.reset();  // let go of its weights now
    throw StateError("update_target: the target has been freed; pass a live snapshot (Trainer::snapshot())");
  }
  if (&target != target_ || target.structure_id() != target_structure_ || !target_update_) {
    const std::vector<Weight> mine = model_.weights(), theirs = target.weights();
    auto mismatch = [&](const std::string& why) {
      throw ValueError("update_target: the target must have the same weights as the trainer (names and shapes); " +
                       why + ". Make it with snapshot()");
    };
    if (mine.size() != theirs.size())
      mismatch("it has " + std::to_string(theirs.size()) + " weights, the trainer " + std::to_string(mine.size()));
    auto update = std::make_unique<TargetUpdate>(model_.backend()->device());
    Graph g;
    const Value tau_value = g.state(update->tau, "tau");
    for (size_t i = 0; i < mine.size(); ++i) {
      const Tensor &source = mine[i].value, &dest = theirs[i].value;
      if (mine[i].name != theirs[i].name || source.defined() != dest.defined() ||
          (source.defined() && (source.shape() != dest.shape() || source.dtype() != dest.dtype())))
        mismatch("weight " + std::to_string(i) + " is " + theirs[i].name + " " +
                 (dest.defined() ? dest.shape().str() : std::string("(unbuilt)")) + ", the trainer's " + mine[i].name +
                 " " + (source.defined() ? source.shape().str() : std::string("(unbuilt)")));
      if (!source.defined()) continue;
      const Value t = g.state(dest, "target/" + theirs[i].name), src = g.state(source, mine[i].name);
      // Running statistics are copied whatever tau is; the rest averaged (a copy at tau = 1).
      if (mine[i].averaged) g.apply(OpKind::PolyakUpdate, {t, src, tau_value});
      else g.apply(OpKind::Assign, {t, src});
    }
    update->exe = std::make_unique<Executable>(std::move(g), std::vector<Value>{}, BatchRule{}, model_.backend());
    target_update_ = std::move(update);
    target_ = &target;
    target_structure_ = target.structure_id();
  }
  // After the check, so that a wrong target fails at every tau: tau = 0
  // keeps the target as it is, statistics included.
  if (tau == 0.0f) return;
  TargetUpdate& u = *target_update_;
  if (tau != u.last_tau) {  // a host value into the persistent tau: one copy, only when it changes
    tensorgrad::detail::write_element(u.tau, 0, tau);
    u.last_tau = tau;
  }
  u.exe->run();
}

std::vector<Weight> Trainer::weights() const {
  check_live("weights");
  return model_.weights();
}

void Trainer::calibrate_bn(const Tensor& x) {
  check_live("calibrate_bn");
  model_.calibrate_bn(x);
}

void Trainer::add_gradient_hook(GradientHook hook) {
  check_live("add_gradient_hook");
  model_.add_gradient_hook(std::move(hook));
}

void Trainer::add_gradient_bucket_hook(GradientBucketHook hook) {
  check_live("add_gradient_bucket_hook");
  model_.add_gradient_bucket_hook(std::move(hook));
}

void Trainer::set_learning_rate(double lr) {
  check_live("set_learning_rate");
  ctx_->set_learning_rate(float(lr));
}

double Trainer::learning_rate() const {
  check_live("learning_rate");
  return ctx_->learning_rate();
}

int64_t Trainer::n_steps() const {
  check_live("n_steps");
  return ctx_->n_steps() + n_steps_offset_;
}

TrainingState Trainer::training_state() const {
  check_live("training_state");
  TrainingState state = model_.training_state();
  state.steps = n_steps();
  state.accumulation_period = ctx_->accumulation_period();
  return state;
}

void Trainer::set_training_state(const TrainingState& state) {
  check_live("set_training_state");
  const int64_t period = ctx_->accumulation_period();
  if (!state.compiled)
    throw ValueError("Trainer::set_training_state: the state has no optimizer state (it was taken from a model "
                     "not compiled); give a state from Trainer::training_state");
  // A period left open continues only with the same length: its gradients
  // are scaled by the period they were gathered for.
  if (state.micro_step > 0 && state.accumulation_period != 0 && state.accumulation_period != period)
    throw ValueError("Trainer::set_training_state: the state was taken " + std::to_string(state.micro_step) +
                     " micro-steps into an accumulation period of " + std::to_string(state.accumulation_period) +
                     " batches, but this trainer's period is " + std::to_string(period) +
                     " batches; make the trainer with the same nbatch_logical, or take the state at the end of "
                     "a period");
  if (state.micro_step >= period)
    throw ValueError("Trainer::set_training_state: the state was taken " + std::to_string(state.micro_step) +
                     " micro-steps into an accumulation period, but this trainer's period is " +
                     std::to_string(period) + " batches; make the trainer with the same nbatch_logical");
  if (state.steps < 0)
    throw ValueError("Trainer::set_training_state: the state's step count is " + std::to_string(state.steps) +
                     "; it must be >= 0");
  model_.set_training_state(state);
  n_steps_offset_ = state.steps - ctx_->n_steps();
}

const Model& Trainer::training_model() const {
  check_live("training_model");
  return model_;
}

void Trainer::free() {
  if (freed_) return;
  ctx_ = nullptr;
  model_.free();
  target_update_.reset();
  target_ = nullptr;
  freed_ = true;
}

}  // namespace tensorgrad::nn
