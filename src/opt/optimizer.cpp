#include "tensorgrad/opt/optimizer.h"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "tensorgrad/core/error.h"
#include "tensorgrad/core/memory.h"
#include "tensorgrad/graph/graph.h"

namespace tensorgrad {

LossKind loss_from_name(const std::string& name) {
  if (name == "mse" || name == "mean_squared_error") return LossKind::MeanSquaredError;
  if (name == "categorical_crossentropy") return LossKind::CategoricalCrossentropy;
  if (name == "sparse_categorical_crossentropy") return LossKind::SparseCategoricalCrossentropy;
  throw ValueError("unknown loss '" + name +
                   "'; expected \"mse\", \"categorical_crossentropy\" or \"sparse_categorical_crossentropy\"");
}

const char* loss_name(LossKind loss) {
  switch (loss) {
    case LossKind::MeanSquaredError: return "mse";
    case LossKind::CategoricalCrossentropy: return "categorical_crossentropy";
    case LossKind::SparseCategoricalCrossentropy: return "sparse_categorical_crossentropy";
  }
  return "?";
}

OptimizerSpec OptimizerSpec::adamw(float learning_rate, float weight_decay) {
  OptimizerSpec s;
  s.learning_rate = learning_rate;
  s.weight_decay = weight_decay;
  return s;
}
OptimizerSpec OptimizerSpec::adam(float learning_rate) { return adamw(learning_rate, 0.0f); }
OptimizerSpec OptimizerSpec::sgd(float learning_rate, float weight_decay) {
  OptimizerSpec s;
  s.kind = Kind::SGD;
  s.learning_rate = learning_rate;
  s.weight_decay = weight_decay;
  return s;
}

void OptimizerSpec::validate() const {
  if (!(learning_rate > 0.0f) || !std::isfinite(learning_rate))
    throw ValueError("learning_rate must be a positive finite number; got " + std::to_string(learning_rate));
  if (!(beta_1 >= 0.0f && beta_1 < 1.0f) || !(beta_2 >= 0.0f && beta_2 < 1.0f))
    throw ValueError("beta_1 and beta_2 must be in [0, 1); got " + std::to_string(beta_1) + " and " +
                     std::to_string(beta_2));
  if (!(epsilon > 0.0f)) throw ValueError("epsilon must be > 0; got " + std::to_string(epsilon));
  if (!(weight_decay >= 0.0f && weight_decay <= 1.0f))
    throw ValueError("weight_decay must be in [0, 1]; got " + std::to_string(weight_decay));
}

OptimizerState::OptimizerState(const OptimizerSpec& spec) {
  spec.validate();
  hyper = Tensor::zeros(Shape{kHyperSize});
  float* h = hyper.data<float>();
  h[kLr] = spec.learning_rate;
  h[kBeta1] = spec.beta_1;
  h[kBeta2] = spec.beta_2;
  h[kEps] = spec.epsilon;
  h[kWeightDecay] = spec.weight_decay;
  h[kBiasCorrection1] = h[kBiasCorrection2] = 1.0f;
  step = Tensor::zeros(Shape{1}, DType::Int64);
}

int64_t OptimizerState::iterations() const { return *step.data<int64_t>(); }

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
                   "; remove or impute non-finite values before training");
}

void check_rows(const Tensor& t, int64_t rows, const char* what) {
  if (!t.defined()) throw ValueError(std::string(what) + " is an undefined tensor");
  if (t.shape().rank() == 0) throw ShapeError(std::string(what) + " must have a batch dimension; got a scalar");
  if (rows >= 0 && t.shape()[0] != rows)
    throw ShapeError(std::string(what) + " must have exactly " + std::to_string(rows) + " rows (the batch size); got " +
                     std::to_string(t.shape()[0]) + ". Pass batches of exactly that size or build for another batch size");
}
}  // namespace

Tensor check_input_shape(const Tensor& x, const Shape& input_shape, int64_t rows, const char* what) {
  check_rows(x, rows, what);
  const Shape full = input_shape.with_batch(x.shape()[0]);
  if (x.shape() == full) return x;
  const bool flattened = x.shape().rank() == 2 && x.shape()[1] == input_shape.numel();
  if (flattened) return x.reshape(full);
  const std::string flat = "{" + std::to_string(x.shape()[0]) + ", " + std::to_string(input_shape.numel()) + "}";
  throw ShapeError(std::string(what) + " must be " + full.str() + " ({rows, input_shape...} for the model's input_shape " +
                   input_shape.str() + ")" + (input_shape.rank() > 1 ? " or its flattened form " + flat : "") +
                   "; got " + x.shape().str() + ". Reshape it, or build the model for this input_shape");
}

Tensor check_features(const Tensor& x, const Shape& input_shape, int64_t rows, const char* what) {
  const Tensor shaped = check_input_shape(x, input_shape, rows, what);
  if (x.dtype() != DType::Float32)
    throw TypeError(std::string(what) + " must be float32; got " + dtype_name(x.dtype()));
  check_finite(shaped, what);
  return shaped;
}

Tensor ModelFunction::check_input(const Tensor& x, int64_t rows, const char* what, Tensor* staging) const {
  if (input_dtype == DType::Float32) {
    Tensor checked = check_features(x, input_shape, rows, what);
    if (validate_input) validate_input(checked);
    return checked;
  }
  // Token ids: int32 is bound as it is; float32 holding whole numbers is
  // checked, then converted into `staging` (kept by the caller, so a step
  // converts without allocating) or into a new tensor.
  const Tensor shaped = check_input_shape(x, input_shape, rows, what);
  if (x.dtype() == DType::Int32) {
    if (validate_input) validate_input(shaped);
    return shaped;
  }
  if (x.dtype() != DType::Float32)
    throw TypeError(std::string(what) + " holds token ids: int32, or float32 holding whole numbers; got " +
                    dtype_name(x.dtype()));
  check_finite(shaped, what);
  if (validate_input) validate_input(shaped);
  Tensor ids;
  if (staging && staging->defined() && staging->shape() == shaped.shape()) ids = *staging;
  else ids = Tensor::empty(shaped.shape(), DType::Int32);
  if (staging) *staging = ids;
  const float* src = shaped.data<float>();
  int32_t* dst = ids.data<int32_t>();
  for (int64_t i = 0; i < ids.numel(); ++i) dst[i] = int32_t(src[i]);
  return ids;
}

struct OptimizerContext::Head {
  std::unique_ptr<Executable> exe;
  Value x, y, w, loss, correct;
  size_t split = SIZE_MAX;
};

OptimizerContext::OptimizerContext(const ModelFunction& model, const OptimizerContextOptions& options,
                                   std::shared_ptr<OptimizerState> state)
    : model_(model), options_(options), state_(std::move(state)) {
  if (options_.batch_size < 1)
    throw ValueError("batch_size must be at least 1; got " + std::to_string(options_.batch_size));
  if (options_.nbatch_logical == 0) options_.nbatch_logical = options_.batch_size;
  if (options_.nbatch_logical < options_.batch_size || options_.nbatch_logical % options_.batch_size != 0)
    throw ValueError("nbatch_logical must be a positive multiple of batch_size " + std::to_string(options_.batch_size) +
                     "; got " + std::to_string(options_.nbatch_logical));
  if (options_.weights == LossWeights::PerOutput && options_.loss != LossKind::MeanSquaredError)
    throw ValueError(std::string("per-output loss weights (loss_mask) need loss \"mse\"; got \"") +
                     loss_name(options_.loss) + "\"");
  options_.optimizer.validate();
  if (!model_.forward) throw ValueError("OptimizerContext: the ModelFunction has no forward function");
  period_ = options_.nbatch_logical / options_.batch_size;
  if (!state_) state_ = std::make_shared<OptimizerState>(options_.optimizer);
  // The output width from shapes alone; the graphs themselves are built and
  // planned on first use (evaluation alone never builds the backward pass).
  // The forward arena and the staging buffers are a lower bound of what the
  // first step needs: refuse a batch that cannot fit before allocating any.
  const int64_t b = options_.batch_size;
  {
    Graph g;
    const Value out = model_.forward(g, g.input("x", model_.input_shape.with_batch(b), model_.input_dtype), false,
                                     options_.loss != LossKind::MeanSquaredError);
    const Shape os = g.shape(out);
    if (os.rank() != 2)
      throw ShapeError("the model's output must be {batch, outputs} to take a loss; got " + os.str() +
                       " (add Flatten or Dense before the output)");
    outputs_ = os[1];
    const uint64_t staging = uint64_t(b) * 4u * uint64_t(1 + outputs_ + model_.input_shape.numel());
    check_fits_in_memory(plan_memory(g, std::vector<Value>{out}).arena_bytes + staging,
                         "batch_size " + std::to_string(b), "lower batch_size");
  }
  if (options_.loss == LossKind::SparseCategoricalCrossentropy) labels_i32_ = Tensor::zeros(Shape{b}, DType::Int32);
  if (options_.weights != LossWeights::None)
    ones_ = Tensor::full(options_.weights == LossWeights::PerOutput ? Shape{b, outputs_} : Shape{b}, 1.0f);
}

OptimizerContext::~OptimizerContext() = default;

std::unique_ptr<OptimizerContext::Head> OptimizerContext::build(bool train) {
  const int64_t b = options_.batch_size;
  const bool ce = options_.loss != LossKind::MeanSquaredError;
  auto head = std::make_unique<Head>();
  Graph g;
  head->x = g.input("x", model_.input_shape.with_batch(b), model_.input_dtype);
  Value out = model_.forward(g, head->x, train, ce);
  const Shape os = g.shape(out);
  if (os.rank() != 2 || os[0] != b)
    throw ShapeError("the model's output must be {batch, outputs} to take a loss; got " + os.str() +
                     " (add Flatten or Dense before the output)");
  outputs_ = os[1];
  head->y = options_.loss == LossKind::SparseCategoricalCrossentropy ? g.input("y", Shape{b}, DType::Int32)
                                                                       : g.input("y", os);
  if (options_.weights != LossWeights::None)
    head->w = g.input("sample_weight", options_.weights == LossWeights::PerSample ? Shape{b} : os);
  head->loss = ce ? g.softmax_cross_entropy(out, head->y, head->w) : g.mse_loss(out, head->y, head->w);
  std::vector<Value> outputs{head->loss};
  if (ce) {
    head->correct = g.apply(OpKind::Accuracy, {out, head->y});
    outputs.push_back(head->correct);
  }
  if (train) {
    const std::vector<Value> params = g.trainable_parameters();
    if (params.empty()) throw ValueError("the model has no trainable weights: nothing to optimise");
    std::vector<Value> grads = g.gradients(head->loss, params, 1.0f / float(period_));
    std::vector<Value> sources(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      if (!grads[i].valid()) continue;
      const Node& p = g.node(params[i]);
      OptimizerState::Slots& slot = state_->slots[p.bound.raw()];
      if (!slot.m.defined()) {
        slot.m = Tensor::zeros(p.shape);
        slot.v = Tensor::zeros(p.shape);
      }
      if (period_ > 1) {
        if (!slot.acc.defined()) slot.acc = Tensor::zeros(p.shape);
        sources[i] = g.apply(OpKind::AccumulateGrad, {g.state(slot.acc, p.name + "/grad"), grads[i]});
      } else {
        sources[i] = grads[i];
        outputs.push_back(grads[i]);  // readable by the hook stage
      }
    }
    head->split = g.size();
    Value tick = g.apply(OpKind::OptimizerTick,
                         {g.state(state_->hyper, "optimizer/hyper"), g.state(state_->step, "optimizer/iterations")});
    OpAttrs at;
    at.zero_grad = period_ > 1;
    for (size_t i = 0; i < params.size(); ++i) {
      if (!sources[i].valid()) continue;
      const OptimizerState::Slots& slot = state_->slots[g.node(params[i]).bound.raw()];
      if (options_.optimizer.kind == OptimizerSpec::Kind::AdamW)
        g.apply(OpKind::AdamWUpdate, {params[i], sources[i], g.state(slot.m, "m"), g.state(slot.v, "v"), tick}, at);
      else
        g.apply(OpKind::SgdUpdate, {params[i], sources[i], tick}, at);
    }
    std::vector<std::pair<std::string, Value>> named;
    for (size_t i = 0; i < params.size(); ++i)
      if (sources[i].valid())
        named.emplace_back(g.node(params[i]).name, period_ > 1 ? g.node(sources[i]).inputs[0] : sources[i]);
    head->exe = std::make_unique<Executable>(std::move(g), outputs);
    grads_.clear();
    for (auto& [name, v] : named) {
      const Node& n = head->exe->graph().node(v);
      grads_.push_back({name, n.role == NodeRole::State ? n.bound : head->exe->output(v)});
    }
  } else {
    head->exe = std::make_unique<Executable>(std::move(g), outputs);
  }
  return head;
}

void OptimizerContext::check_targets(const Tensor& y, const Tensor& w, int64_t rows) const {
  check_rows(y, rows, "y");
  const int64_t n = y.shape()[0];
  const char* loss = loss_name(options_.loss);  // a std::string here would allocate on every step
  switch (options_.loss) {
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
            throw ValueError("class ids must be whole numbers; y row " + std::to_string(i) + " holds " +
                             std::to_string(v));
          if (v < 0.0f || v >= float(outputs_)) {  // before converting: int64_t(1e30f) is undefined
            char buf[32];
            std::snprintf(buf, sizeof buf, std::fabs(v) < 1e15f ? "%.0f" : "%g", double(v));
            throw IndexError(std::string("class id ") + buf + " at y row " + std::to_string(i) + " is outside [0, " +
                             std::to_string(outputs_) + "): the model has " + std::to_string(outputs_) + " classes");
          }
          id = int64_t(v);
        }
        if (id < 0 || id >= outputs_)
          throw IndexError("class id " + std::to_string(id) + " at y row " + std::to_string(i) + " is outside [0, " +
                           std::to_string(outputs_) + "): the model has " + std::to_string(outputs_) + " classes");
      }
      break;
    }
    case LossKind::CategoricalCrossentropy:
    case LossKind::MeanSquaredError: {
      const bool ce = options_.loss == LossKind::CategoricalCrossentropy;
      if (y.dtype() != DType::Float32)
        throw TypeError(std::string(loss) + " takes float32 " + (ce ? "one-hot rows" : "targets") + "; got int32" +
                        (ce ? " class ids: use sparse_categorical_crossentropy for those" : ""));
      if (y.shape().row_size() != outputs_ || (ce && outputs_ > 1 && y.shape().rank() != 2))
        throw ShapeError(std::string(loss) + " takes " + (ce ? "one-hot rows" : "targets") + " of shape {" + std::to_string(n) +
                         ", " + std::to_string(outputs_) + "} (the model has " + std::to_string(outputs_) +
                         " outputs); got " + y.shape().str() +
                         (ce && y.shape().row_size() == 1 ? ": class ids need sparse_categorical_crossentropy" : ""));
      check_finite(y, "y");
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
  check_rows(w, n, "sample_weight");
  if (w.dtype() != DType::Float32) throw TypeError("sample_weight must be float32; got int32");
  const bool per_sample = options_.weights == LossWeights::PerSample;
  if (per_sample ? w.numel() != n : (w.shape().rank() != 2 || w.shape()[1] != outputs_))
    throw ShapeError("sample_weight must be " +
                     (per_sample ? "{" + std::to_string(n) + "} or {" + std::to_string(n) + ", 1} (one per sample)"
                                 : "{" + std::to_string(n) + ", " + std::to_string(outputs_) + "} (one per output)") +
                     "; got " + w.shape().str());
  check_finite(w, "sample_weight");
}

void OptimizerContext::stage(Head& head, const Tensor& x, const Tensor& y, const Tensor& w) {
  const int64_t b = options_.batch_size;
  head.exe->bind(head.x, model_.check_input(x, b, "x", &x_staging_));
  check_targets(y, w, b);
  if (options_.loss == LossKind::SparseCategoricalCrossentropy) {
    int32_t* ids = labels_i32_.data<int32_t>();
    if (y.dtype() == DType::Int32) std::memcpy(ids, y.raw(), size_t(b) * sizeof(int32_t));
    else
      for (int64_t i = 0; i < b; ++i) ids[i] = int32_t(y.data<float>()[i]);
    head.exe->bind(head.y, labels_i32_);
  } else {
    head.exe->bind(head.y, y.shape().rank() == 2 ? y : y.reshape(Shape{b, outputs_}));
  }
  if (options_.weights == LossWeights::None) return;
  const Shape& want = ones_.shape();
  head.exe->bind(head.w, !w.defined() ? ones_ : w.shape() == want ? w : w.reshape(want));
}

StepResult OptimizerContext::run(Head& head, const Tensor& x, const Tensor& y, const Tensor& w, bool train) {
  stage(head, x, y, w);
  StepResult r;
  r.rows = options_.batch_size;
  if (train) {
    head.exe->run(0, head.split);
    ++n_steps_;
    if (++state_->micro_step >= period_) {
      try {
        for (auto& hook : hooks_) hook(grads_);
      } catch (...) {
        // The period's gradients are dropped, so the next period starts clean.
        state_->micro_step = 0;
        if (period_ > 1)
          for (NamedGradient& g : grads_) g.grad.fill(0.0f);
        throw;
      }
      head.exe->run(head.split);
      state_->micro_step = 0;
      r.updated = true;
    }
  } else {
    head.exe->run();
  }
  r.loss = head.exe->scalar(head.loss);
  if (head.correct.valid()) r.correct = int64_t(head.exe->scalar(head.correct));
  return r;
}

void OptimizerContext::retire(const std::string& why) {
  retired_ = why.empty() ? "retired" : why;
  train_.reset();
  eval_.reset();
  grads_.clear();
}

void OptimizerContext::set_rng_seed(uint64_t seed) {
  rng_seed_ = seed;
  if (train_) train_->exe->set_rng_counter(seed);
}

StepResult OptimizerContext::step(const Tensor& x, const Tensor& y, const Tensor& sample_weight) {
  if (!retired_.empty())
    throw StateError("this optimizer context is stale: " + retired_ + "; get a new one from optimizer_context()");
  if (!train_) {
    train_ = build(true);
    train_->exe->set_rng_counter(rng_seed_);
  }
  return run(*train_, x, y, sample_weight, true);
}

StepResult OptimizerContext::evaluate(const Tensor& x, const Tensor& y, const Tensor& sample_weight) {
  if (!retired_.empty())
    throw StateError("this optimizer context is stale: " + retired_ + "; get a new one from optimizer_context()");
  if (!eval_) eval_ = build(false);
  return run(*eval_, x, y, sample_weight, false);
}

void OptimizerContext::add_gradient_hook(GradientHook hook) {
  if (!hook) throw ValueError("add_gradient_hook: empty hook");
  hooks_.push_back(std::move(hook));
}

void OptimizerContext::set_learning_rate(float lr) {
  if (!(lr > 0.0f) || !std::isfinite(lr))
    throw ValueError("learning rate must be a positive finite number; got " + std::to_string(lr));
  state_->hyper.data<float>()[kLr] = lr;
}

float OptimizerContext::learning_rate() const { return state_->hyper.data<float>()[kLr]; }

}  // namespace tensorgrad
