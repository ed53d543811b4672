// keras.Model: compile, fit, evaluate, predict and the rest, written once
// for every model (functional or Sequential) on the optimizer context.
#include "tensorgrad/nn/model.h"
#include "tensorgrad/nn/data_parallel.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <numeric>
#include <set>

#include "core/host_copy.h"
#include "nn/data_adapter.h"
#include "nn/functional.h"
#include "nn/loading.h"
#include "tensorgrad/core/error.h"
#include "tensorgrad/core/logging.h"
#include "tensorgrad/core/random.h"
#include "tensorgrad/nn/normalization.h"
#include "tensorgrad/nn/training_loop.h"

namespace tensorgrad::nn {


struct Model::PredictPlan {
  std::unique_ptr<Executable> exe;
  std::vector<Value> x, out;
  std::vector<InputSpec> inputs;
  std::vector<std::string> x_names;
  std::vector<Tensor> staging;  // per input: float32 token ids converted to int32
};

using tensorgrad::detail::joined;

namespace {
// Every layer of a graph, nested models' layers included, each once.
void for_each_layer(const FunctionalGraph& g, const std::function<void(Layer&)>& f, std::set<const Layer*>& seen) {
  for (const auto& l : g.layers) {
    if (!seen.insert(l.get()).second) continue;
    f(*l);
    if (auto* nested = dynamic_cast<const ModelLayer*>(l.get())) for_each_layer(nested->graph(), f, seen);
  }
}

}  // namespace

Model::Model(const std::vector<SymbolicTensor>& inputs, const std::vector<SymbolicTensor>& outputs,
             const std::string& name)
    : graph_(std::make_shared<FunctionalGraph>(inputs, outputs)) {
  state_.name = name.empty() ? unique_name("functional") : name;
  if (graph_->order.empty())
    throw ValueError("Model: no layer lies between the inputs and the outputs (an output is an input itself); "
                     "call layers on the inputs first");
  for (const std::string& n : graph_->output_names)
    if (n == "loss" || n == "val" || n.rfind("val_", 0) == 0)
      throw ValueError("Model: output '" + n + "' would make History keys ambiguous (\"val_\" marks validation, "
                       "\"loss\" the total): set_name() the layer that makes it");
  new_structure_id();
}

Model::Model(const SymbolicTensor& input, const SymbolicTensor& output, const std::string& name)
    : Model(std::vector<SymbolicTensor>{input}, std::vector<SymbolicTensor>{output}, name) {}

Model::Model(const std::string& name) {
  state_.name = name;
  new_structure_id();
}

Model::~Model() = default;
Model::Model(Model&& other) noexcept { *this = std::move(other); }

Model& Model::operator=(Model&& other) noexcept {
  if (this == &other) return *this;
  graph_ = std::exchange(other.graph_, nullptr);
  // The moved-from model is released, with an identity of its own, so that
  // nothing cached against it (a Trainer's update_target) can reach the
  // memory that moved away; it still answers backend().
  State released;
  released.released = true;
  released.backend = other.state_.backend;
  state_ = std::exchange(other.state_, std::move(released));
  other.new_structure_id();
  return *this;
}

void Model::new_structure_id() {
  static std::atomic<uint64_t> next{1};
  state_.structure_id = next++;
}

void Model::check_live(const char* call) const {
  if (state_.released || !graph_)
    throw StateError(std::string(call) + ": this model has been freed (released); use a live model or snapshot");
}

void Model::retire_contexts(const char* why) {
  for (auto& [key, ctx] : state_.contexts) {
    ctx->retire(why);
    state_.retired_contexts.push_back(std::move(ctx));
  }
  state_.contexts.clear();
  state_.plan_pools.clear();
}

namespace {
// The rows a batch's graphs are planned for: the next power of two, so that
// any number of batch sizes shares a logarithmic number of plans.
int64_t capacity_for(int64_t rows) {
  int64_t c = 1;
  while (c < rows && c <= (int64_t(1) << 61)) c *= 2;
  return c < rows ? rows : c;  // beyond 2^62 rows: no rounding (the memory check refuses it anyway)
}
}  // namespace

size_t Model::arena_bytes() const {
  size_t total = 0;
  for (const auto& [key, pool] : state_.plan_pools) total += pool->arena_bytes();
  for (const auto& [rows, plan] : state_.predict_plans) total += plan->exe->arena_bytes();
  return total;
}

size_t Model::plan_count() const {
  size_t n = state_.predict_plans.size();
  for (const auto& [key, pool] : state_.plan_pools) n += pool->count();
  return n;
}

void Model::set_graph(const std::vector<SymbolicTensor>& inputs, const std::vector<SymbolicTensor>& outputs,
                      const char* why) {
  graph_ = std::make_shared<FunctionalGraph>(inputs, outputs);
  state_.as_layer.reset();
  new_structure_id();
  // A changed graph needs new graphs; the optimizer state stays with compile.
  retire_contexts(why);
  state_.predict_plans.clear();
  if (state_.compiled) state_.changed_after_compile = true;
  state_.compiled = false;
}

std::string Model::not_compiled_message(const char* call) const {
  if (state_.changed_after_compile)
    return std::string(call) + ": the model changed after compile() (add() was called): call compile() again";
  return std::string(call) + " before compile(): call compile(optimizer, loss) first";
}

ModelFunction Model::model_function() const {
  check_live("model_function()");
  ModelFunction f;
  const FunctionalGraph& g = *graph_;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const LayerCall* in = g.inputs[i].call().get();
    // The layers that read this input directly check its values (token ids);
    // an input read only by Embeddings is bound as int32.
    std::vector<std::shared_ptr<Layer>> readers;
    bool all_take_ids = true;
    for (const LayerCall* c : g.order)
      for (const SymbolicTensor& t : c->inputs)
        if (t.call().get() == in) {
          readers.push_back(c->layer);
          all_take_ids = all_take_ids && c->layer->takes_token_ids();
        }
    InputSpec spec;
    spec.name = in->name;
    spec.shape = in->shape;
    spec.dtype = in->dtype == DType::Int32 || (!readers.empty() && all_take_ids) ? DType::Int32 : DType::Float32;
    if (!readers.empty())
      spec.validate = [readers](const Tensor& x) {
        for (const auto& l : readers) l->validate_input(x);
      };
    f.inputs.push_back(std::move(spec));
  }
  f.output_names = g.output_names;
  f.forward = [graph = graph_](Builder& b, std::span<const Value> xs, bool training) {
    return graph->forward(b, xs, CallOptions{training, false});
  };
  bool any_masked = false;
  for (const SymbolicTensor& o : g.outputs) any_masked = any_masked || (o.index() == 0 && o.call()->masked);
  if (any_masked) {
    for (const SymbolicTensor& o : g.outputs) f.masked_outputs.push_back(o.index() == 0 && o.call()->masked);
    f.forward_with_masks = [graph = graph_](Builder& b, std::span<const Value> xs, bool training,
                                            std::vector<Value>& masks) {
      return graph->forward(b, xs, CallOptions{training, false}, &masks);
    };
  }
  return f;
}

LossKind Model::loss() const { return state_.losses.empty() ? LossKind::MeanSquaredError : state_.losses[0].kind; }

std::vector<std::string> Model::metrics() const {
  return state_.metrics.empty() ? std::vector<std::string>{} : state_.metrics[0];
}

std::vector<std::vector<std::string>> Model::output_metrics() const { return state_.metrics; }

void Model::set_compiled(const OptimizerSpec& optimizer, std::vector<Loss> losses, std::vector<float> loss_weights,
                         std::vector<std::vector<std::string>> metrics, std::shared_ptr<const Backend> backend) {
  check_live("compile()");
  if (graph_->order.empty()) throw StateError("compile: the model has no layers; add() some first");
  if (!backend) throw ValueError("compile: a null backend; pass backend(Device::CPU) or a device");
  // Validate everything before changing anything: a failed compile leaves the model as it was.
  optimizer.validate();
  const size_t n_out = graph_->outputs.size();
  if (metrics.empty()) metrics.assign(n_out, {});
  OptimizerContextOptions o;
  o.batch_size = 1;
  o.losses = losses;
  o.loss_weights = loss_weights;
  o.metrics = metrics;
  o.optimizer = optimizer;
  OptimizerContext probe(model_function(), o);  // the loss heads' checks (counts, folding, shapes, metrics)
  if (backend != cpu_backend()) probe.check_kernels(*backend);  // the CPU has every kernel
  place_weights_on(backend->device());  // may run out of device memory: before anything changes
  state_.losses = losses.size() == 1 ? std::vector<Loss>(n_out, losses[0]) : std::move(losses);
  state_.loss_weights = loss_weights.empty() ? std::vector<float>(n_out, 1.0f) : std::move(loss_weights);
  state_.metrics = metrics.size() == 1 ? std::vector<std::vector<std::string>>(n_out, metrics[0]) : std::move(metrics);
  state_.changed_after_compile = false;
  state_.backend = std::move(backend);
  state_.optimizer = optimizer;
  const std::shared_ptr<OptimizerState> earlier = state_.opt_state;
  state_.opt_state = std::make_shared<OptimizerState>(optimizer, state_.backend->device());
  state_.trainable_at_compile.clear();
  std::set<const Layer*> seen;
  for_each_layer(*graph_, [&](Layer& l) { state_.trainable_at_compile.emplace_back(&l, l.trainable); }, seen);
  // The model's own random stream, drawn once from the global seed: fit's
  // shuffles no longer depend on what else uses the global generator.
  // Dropout masks draw nothing here: a mask is hash(the layer's seed, the
  // counter), and the counter counts the model's training steps (from 0, on
  // across a recompile), so masks do not depend on what else was compiled
  // or trained in the process (Keras' seed generators live in the layers).
  // (Loading restores both from the file, drawing nothing.)
  if (!detail::LoadingScope::active()) {
    state_.rng.seed(global_generator()());
    if (earlier)
      tensorgrad::detail::write_element(state_.opt_state->rng_counter, 0,
                                        tensorgrad::detail::read_element<int64_t>(earlier->rng_counter, 0));
  }
  retire_contexts("compile() was called again");
  state_.predict_plans.clear();  // fused for the earlier compile's target
  state_.fusion = FusionOptions{};
  state_.compiled = true;
}

void Model::place_weights_on(Device device) {
  // Replacing the layer's tensor is enough: graphs bind weights when they
  // are built, and compile retires every built one. Every copy is made
  // before any is placed, so a device that runs out of memory halfway
  // leaves every weight where it was.
  std::vector<std::pair<Tensor*, Tensor>> moved;
  std::set<const Layer*> seen;
  for_each_layer(*graph_, [&](Layer& l) {
    for (Tensor* t : l.weight_slots())
      if (t->defined() && t->device() != device) moved.emplace_back(t, t->to(device));
  }, seen);
  for (auto& [slot, copy] : moved) *slot = std::move(copy);
}

void Model::compile(const OptimizerSpec& optimizer, const Loss& loss, const std::vector<std::string>& metrics,
                    CompileTarget target) {
  check_live("compile()");
  compile(optimizer, loss, metrics, tensorgrad::backend(target.device, target.policy));
  state_.fusion = target.fusion;
}

void Model::compile(const OptimizerSpec& optimizer, const Loss& loss, const std::vector<std::string>& metrics,
                    std::shared_ptr<const Backend> backend) {
  check_live("compile()");
  set_compiled(optimizer, {loss}, {}, std::vector<std::vector<std::string>>(graph_->outputs.size(), metrics),
               std::move(backend));
}

void Model::compile(const OptimizerSpec& optimizer, const std::vector<Loss>& losses,
                    const std::vector<float>& loss_weights, const std::vector<std::vector<std::string>>& metrics,
                    CompileTarget target) {
  check_live("compile()");
  compile(optimizer, losses, loss_weights, metrics, tensorgrad::backend(target.device, target.policy));
  state_.fusion = target.fusion;
}

void Model::compile(const OptimizerSpec& optimizer, const std::vector<Loss>& losses,
                    const std::vector<float>& loss_weights, const std::vector<std::vector<std::string>>& metrics,
                    std::shared_ptr<const Backend> on) {
  check_live("compile()");
  const size_t n_out = graph_->outputs.size();
  auto count = [&](const char* what, size_t got) {
    throw ValueError(std::string("compile: the model has ") + std::to_string(n_out) + " outputs (" +
                     joined(graph_->output_names) + "); give one " + what + " per output; got " + std::to_string(got));
  };
  if (losses.size() != n_out) count("loss", losses.size());
  if (!loss_weights.empty() && loss_weights.size() != n_out) count("loss weight", loss_weights.size());
  if (!metrics.empty() && metrics.size() != n_out) count("metric list", metrics.size());
  set_compiled(optimizer, losses, loss_weights, metrics, std::move(on));
}

void Model::compile(const OptimizerSpec& optimizer, const std::map<std::string, Loss>& losses,
                    const std::map<std::string, float>& loss_weights,
                    const std::map<std::string, std::vector<std::string>>& metrics, CompileTarget target) {
  check_live("compile()");
  std::shared_ptr<const Backend> on = tensorgrad::backend(target.device, target.policy);
  const std::vector<std::string>& names = graph_->output_names;
  auto check_names = [&](const auto& map, const char* what) {
    for (const auto& [k, v] : map)
      if (std::find(names.begin(), names.end(), k) == names.end())
        throw ValueError(std::string("compile: ") + what + " names '" + k + "', which is no output; the outputs are (" +
                         joined(names) + ")");
  };
  check_names(losses, "a loss");
  check_names(loss_weights, "a loss weight");
  check_names(metrics, "a metric list");
  std::vector<Loss> l;
  std::vector<float> w;
  std::vector<std::vector<std::string>> m;
  for (const std::string& n : names) {
    auto it = losses.find(n);
    if (it == losses.end())
      throw ValueError("compile: no loss for output '" + n + "'; give one for each of (" + joined(names) + ")");
    l.push_back(it->second);
    auto wi = loss_weights.find(n);
    w.push_back(wi == loss_weights.end() ? 1.0f : wi->second);
    auto mi = metrics.find(n);
    m.push_back(mi == metrics.end() ? std::vector<std::string>{} : mi->second);
  }
  set_compiled(optimizer, std::move(l), std::move(w), std::move(m), std::move(on));
  state_.fusion = target.fusion;
}

void Model::to(Device device) {
  check_live("to()");
  if (!state_.compiled)
    throw StateError("to(" + device.str() + "): the model is not compiled; compile it for that device instead "
                     "(compile(..., Device(\"" + device.str() + "\")))");
  std::shared_ptr<const Backend> on = tensorgrad::backend(device, state_.backend->dtype_policy());
  if (on == state_.backend) return;
  const TrainingState kept = training_state();  // copies: the model's own state is replaced below
  const FusionOptions fusion = state_.fusion;
  {
    detail::LoadingScope no_draws;  // the random streams come back from `kept`
    set_compiled(state_.optimizer, state_.losses, state_.loss_weights, state_.metrics, std::move(on));
  }
  set_training_state(kept);
  state_.fusion = fusion;
}

OptimizerContext& Model::optimizer_context(int64_t batch_size, int64_t nbatch_logical, LossWeights weights,
                                           int64_t micro_batch) {
  check_live("optimizer_context()");
  if (!state_.compiled) throw StateError(not_compiled_message("optimizer_context()"));
  for (const auto& [layer, trainable] : state_.trainable_at_compile)
    if (layer->trainable != trainable)
      throw StateError("layer '" + layer->name() + "' was made trainable = " + (layer->trainable ? "true" : "false") +
                       " after compile(); call compile() again for it to take effect (as Keras)");
  if (micro_batch == batch_size) micro_batch = 0;  // one context for both spellings
  auto key = std::make_tuple(batch_size, nbatch_logical, int(weights), micro_batch);
  auto& slot = state_.contexts[key];
  if (!slot) {
    OptimizerContextOptions o;
    o.batch_size = batch_size;
    o.nbatch_logical = nbatch_logical;
    o.micro_batch = micro_batch;
    o.losses = state_.losses;
    o.loss_weights = state_.loss_weights;
    o.metrics = state_.metrics;
    o.weights = weights;
    o.optimizer = state_.optimizer;
    o.model_hooks = state_.hooks;
    o.backend = state_.backend;
    o.fusion = state_.fusion;
    o.gradient_bucket_bytes = state_.gradient_bucket_bytes;
    o.capacity = batch_size >= 1 ? capacity_for(batch_size) : 0;
    const int64_t micro = micro_batch > 0 ? micro_batch : batch_size;
    const int64_t period = nbatch_logical > 0 && micro > 0 ? nbatch_logical / micro : 1;
    std::shared_ptr<OptimizerPlans>& pool = state_.plan_pools[{period, int(weights)}];
    if (!pool) pool = std::make_shared<OptimizerPlans>();
    o.plans = pool;
    try {
      slot = std::make_unique<OptimizerContext>(model_function(), o, state_.opt_state);
    } catch (...) {
      state_.contexts.erase(key);
      throw;
    }
  }
  return *slot;
}

namespace {
// Tensors given by name, in the order of `names` ("input"/"output" in messages).
std::vector<Tensor> by_name(const std::map<std::string, Tensor>& given, const std::vector<std::string>& names,
                            const char* kind, const char* tensor) {
  std::vector<Tensor> out;
  for (const std::string& n : names) {
    auto it = given.find(n);
    if (it == given.end())
      throw ValueError(std::string("no ") + tensor + " for " + kind + " '" + n + "'; the model's " + kind + "s are (" +
                       joined(names) + ")");
    out.push_back(it->second);
  }
  for (const auto& [k, v] : given)
    if (std::find(names.begin(), names.end(), k) == names.end())
      throw ValueError("'" + k + "' is no " + kind + " of the model; its " + kind + "s are (" + joined(names) + ")");
  return out;
}
}  // namespace

std::vector<Tensor> Model::ordered_inputs(const std::map<std::string, Tensor>& x) const {
  check_live("inputs by name");
  return by_name(x, graph_->input_names, "input", "tensor");
}

std::vector<Tensor> Model::ordered_targets(const std::map<std::string, Tensor>& y) const {
  check_live("targets by name");
  return by_name(y, graph_->output_names, "output", "target");
}

std::map<std::string, double> Model::metric_logs(double loss_sum, std::span<const double> output_loss_sums,
                                                 std::span<const double> metric_sums, int64_t rows) const {
  const double n = rows ? double(rows) : 1.0;
  std::map<std::string, double> logs{{"loss", rows ? loss_sum / n : 0.0}};
  const size_t n_out = graph_->outputs.size();
  size_t k = 0;
  for (size_t i = 0; i < n_out; ++i) {
    const std::string prefix = n_out == 1 ? "" : graph_->output_names[i] + "_";
    if (n_out > 1) logs[prefix + "loss"] = rows ? output_loss_sums[i] / n : 0.0;
    for (const std::string& m : state_.metrics[i]) {
      const double mean = rows && k < metric_sums.size() ? metric_sums[k] / n : 0.0;
      ++k;
      logs[prefix + m] = metric_from_name(m, state_.losses[i].kind) == MetricKind::RootMeanSquaredError ? std::sqrt(mean) : mean;
    }
  }
  return logs;
}

History Model::fit(const Tensor& x, const Tensor& y, const FitOptions& options) {
  return fit(std::span<const Tensor>(&x, 1), std::span<const Tensor>(&y, 1), options);
}

History Model::fit(const std::map<std::string, Tensor>& x, const std::map<std::string, Tensor>& y,
                   const FitOptions& options) {
  return fit(ordered_inputs(x), ordered_targets(y), options);
}

namespace {
// fit's options that need no data, in the order Keras checks them.
void check_fit_options(const FitOptions& opt, size_t n_in, size_t n_out, const std::vector<std::string>& outputs) {
  if (opt.verbose < 0 || opt.verbose > 2)
    throw ValueError("verbose must be 0 (silent), 1 (progress bar) or 2 (one line per epoch); got " +
                     std::to_string(opt.verbose));
  if (opt.epochs < 0) throw ValueError("epochs must be >= 0; got " + std::to_string(opt.epochs));
  if (opt.batch_size < 1) throw ValueError("batch_size must be at least 1; got " + std::to_string(opt.batch_size));
  if (!(opt.validation_split >= 0.0 && opt.validation_split < 1.0))
    throw ValueError("validation_split must be in [0, 1); got " + std::to_string(opt.validation_split));
  if (opt.validation_batch_size && *opt.validation_batch_size < 1)
    throw ValueError("validation_batch_size must be at least 1 (or none: batch_size); got " +
                     std::to_string(*opt.validation_batch_size));
  if (!opt.class_weight.empty() && n_out != 1)
    throw ValueError("class_weight is only supported for models with a single output; this one has " +
                     std::to_string(n_out) + " (" + joined(outputs) +
                     "). Give sample_weight instead (one weight per row for every output)");
  const bool explicit_lists = !opt.validation_x.empty() || !opt.validation_y.empty();
  if (explicit_lists && opt.validation_data)
    throw ValueError("give validation_data or validation_x/validation_y, not both");
  if (opt.validation_sample_weight.defined() && !opt.validation_data && !explicit_lists)
    throw ValueError("validation_sample_weight is given without validation_data; pass validation_data too (with "
                     "validation_split the weights are split from sample_weight)");
  if (opt.validation_batch_size && !opt.validation_data && !explicit_lists && opt.validation_split == 0.0)
    throw ValueError("validation_batch_size is given without validation data; pass validation_data, "
                     "validation_x/validation_y or validation_split too");
  if (opt.validation_data && (n_in != 1 || n_out != 1))
    throw ValueError("validation_data takes one input and one output; this model has " + std::to_string(n_in) +
                     " and " + std::to_string(n_out) + ". Use validation_x and validation_y (or validation_split)");
}
}  // namespace

History Model::fit(std::span<const Tensor> x, std::span<const Tensor> y, const FitOptions& opt) {
  check_live("fit()");
  if (!state_.compiled) throw StateError(not_compiled_message("fit()"));
  check_fit_options(opt, graph_->inputs.size(), graph_->outputs.size(), graph_->output_names);
  const auto [train, validation] = detail::fit_data(*this, x, y, opt);
  if (opt.nbatch_logical > 0 && opt.batch_size > train.rows)
    throw ValueError("batch_size " + std::to_string(opt.batch_size) + " is more than the " + std::to_string(train.rows) +
                     " training rows; with nbatch_logical the batch cannot shrink to fit. Lower batch_size");
  const int64_t bs = std::min(opt.batch_size, train.rows);
  // Validation batches: their own size when given (evaluation plans apart from training's).
  const int64_t validation_bs = opt.validation_batch_size ? *opt.validation_batch_size : bs;
  // This process's part of every batch: all of it, or (data-parallel) its share.
  const FitShare share = fit_share(opt.communicator, {train.rows, bs, opt.nbatch_logical, validation.rows, opt.shuffle,
                                                      train.sample_weight.defined(), validation_bs});
  const OptimizerContext& ctx = optimizer_context(
      share.batch_size, share.nbatch_logical,
      train.sample_weight.defined() ? LossWeights::PerSample : LossWeights::None);
  detail::DataAdapter::check_targets(ctx, train);
  if (validation.rows > 0)
    detail::DataAdapter::check_targets(
        optimizer_context(std::min(validation_bs, validation.rows), 0,
                          validation.sample_weight.defined() ? LossWeights::PerSample : LossWeights::None),
        validation);
  // Whole logical batches only when accumulating (as ggml_opt_fit): a part
  // period would carry its gradients into the next epoch's first update.
  const int64_t period = ctx.accumulation_period();
  const int64_t steps = period == 1 ? (train.rows + bs - 1) / bs : train.rows / bs / period * period;
  if (steps == 0)
    throw ValueError("nbatch_logical " + std::to_string(opt.nbatch_logical) + " is more than the " +
                     std::to_string(train.rows) + " training rows: no whole logical batch fits");
  const std::unique_ptr<BatchSource> train_source =
      share.source(train.source(bs, opt.shuffle ? &state_.rng : nullptr, "batch"));
  const std::unique_ptr<BatchSource> validation_source =
      validation.rows > 0 ? share.source(validation.source(validation_bs, nullptr, "validation batch")) : nullptr;
  LoopOptions loop;
  loop.epochs = opt.epochs;
  loop.initial_epoch = opt.initial_epoch;
  loop.steps_per_epoch = steps;
  loop.nbatch_logical = share.nbatch_logical;
  loop.verbose = opt.verbose;
  loop.callbacks = opt.callbacks;
  loop.group = share.group;
  return fit_loop(*this, *train_source, validation_source.get(), loop);
}

StepResult Model::train_on_batch(const Batch& batch, int64_t batch_size, int64_t nbatch_logical) {
  return run_batch(batch, batch_size, nbatch_logical, true);
}

StepResult Model::test_on_batch(const Batch& batch, int64_t batch_size) { return run_batch(batch, batch_size, 0, false); }

StepResult Model::run_batch(const Batch& b, int64_t batch_size, int64_t nbatch_logical, bool train) {
  const char* call = train ? "train_on_batch" : "test_on_batch";
  check_live(train ? "train_on_batch()" : "test_on_batch()");
  if (!state_.compiled) throw StateError(not_compiled_message(train ? "train_on_batch()" : "test_on_batch()"));
  if (batch_size < 0 || nbatch_logical < 0)
    throw ValueError("batch_size and nbatch_logical must be >= 0 (0: the batch's rows, no accumulation); got " +
                     std::to_string(batch_size) + " and " + std::to_string(nbatch_logical));
  if (b.x.empty() && b.y.empty() && state_.opt_state && state_.opt_state->communicator) {
    // Data-parallel: this rank has no rows for this batch (its share of a
    // short global batch, or its generator ended first).
    if (!train) return StepResult{};
    if (batch_size < 1)
      throw ValueError("train_on_batch: a batch without rows joins a data-parallel update through the context of "
                       "its batch_size; give batch_size");
    return optimizer_context(batch_size, nbatch_logical).join_step();
  }
  Tensor w;
  const int64_t rows = detail::check_batch({call, {}, graph_->input_names, graph_->output_names}, b, batch_size, w);
  const int64_t max_rows = batch_size > 0 ? batch_size : rows;
  const LossWeights mode = w.defined() ? LossWeights::PerSample : LossWeights::None;
  OptimizerContext& ctx = train && nbatch_logical > 0 ? optimizer_context(rows, nbatch_logical, mode, max_rows)
                                                      : optimizer_context(rows, train ? nbatch_logical : 0, mode);
  const std::span<const Tensor> ws = w.defined() ? std::span<const Tensor>(&w, 1) : std::span<const Tensor>();
  return train ? ctx.step(b.x, b.y, ws) : ctx.evaluate(b.x, b.y, ws);
}

std::map<std::string, double> Model::evaluate(const Tensor& x, const Tensor& y, int64_t batch_size,
                                              const Tensor& sample_weight) {
  return evaluate(std::span<const Tensor>(&x, 1), std::span<const Tensor>(&y, 1), batch_size, sample_weight);
}

std::map<std::string, double> Model::evaluate(const std::map<std::string, Tensor>& x,
                                              const std::map<std::string, Tensor>& y, int64_t batch_size,
                                              const Tensor& sample_weight) {
  return evaluate(ordered_inputs(x), ordered_targets(y), batch_size, sample_weight);
}

std::map<std::string, double> Model::evaluate(std::span<const Tensor> x, std::span<const Tensor> y,
                                              int64_t batch_size, const Tensor& sample_weight) {
  check_live("evaluate()");
  if (!state_.compiled) throw StateError(not_compiled_message("evaluate()"));
  if (batch_size < 1) throw ValueError("batch_size must be at least 1; got " + std::to_string(batch_size));
  const detail::AdaptedData d = detail::DataAdapter(*this, "evaluate").arrays(x, y, sample_weight);
  detail::DataAdapter::check_targets(
      optimizer_context(std::min(batch_size, d.rows), 0,
                        d.sample_weight.defined() ? LossWeights::PerSample : LossWeights::None),
      d);
  return test_epoch(*this, *d.source(batch_size, nullptr, "batch"));
}

Model::PredictPlan& Model::predict_plan(int64_t rows) {
  // Plans for powers of two run every batch up to them, so any number of row
  // counts shares a few plans; a graph that does not scale with its batch
  // gets one plan per row count (kept under -rows), at most 8 in all.
  constexpr size_t kMaxPlans = 8;
  const int64_t cap = capacity_for(rows);
  for (int64_t key : {cap, -rows}) {
    auto it = state_.predict_plans.find(key);
    if (it != state_.predict_plans.end() && (it->second->exe->max_rows() >= rows || it->second->exe->rows() == rows)) {
      if (it->second->exe->rows() != rows) it->second->exe->set_rows(rows);
      return *it->second;
    }
  }
  if (state_.predict_plans.size() >= kMaxPlans) state_.predict_plans.clear();
  const ModelFunction f = model_function();
  auto build = [&](int64_t planned, PredictPlan& plan, Graph& g) {
    for (const InputSpec& in : f.inputs) {
      plan.x.push_back(g.input(in.name, in.shape.with_batch(planned), in.dtype));
      plan.x_names.push_back(f.inputs.size() == 1 ? std::string("x") : "x '" + in.name + "'");
    }
    plan.out = f.forward(g, plan.x, false);
  };
  auto plan = std::make_unique<PredictPlan>();
  Graph g;
  build(cap, *plan, g);
  BatchRule rule;
  if (cap >= 3) {
    PredictPlan unused;
    Graph probe;
    build(cap - 1, unused, probe);
    try {
      rule = make_batch_rule(g, cap, probe, cap - 1);
    } catch (const ValueError&) {
      rule = BatchRule{};
    }
  }
  int64_t key = cap, planned = cap;
  if (rule.max_rows == 0 && cap != rows) {
    plan = std::make_unique<PredictPlan>();
    g = Graph();
    build(rows, *plan, g);
    key = -rows;
    planned = rows;
  }
  plan->exe = std::make_unique<Executable>(std::move(g), plan->out, std::move(rule), state_.backend, state_.fusion);
  plan->inputs = f.inputs;
  for (const InputSpec& in : plan->inputs)  // token ids converted into the rows of these
    plan->staging.push_back(in.dtype == DType::Int32 ? Tensor::empty(in.shape.with_batch(planned), DType::Int32)
                                                     : Tensor{});
  if (plan->exe->rows() != rows) plan->exe->set_rows(rows);
  auto& slot = state_.predict_plans[key];
  slot = std::move(plan);
  return *slot;
}

Tensor Model::predict(const Tensor& x, int64_t batch_size) {
  return predict(std::span<const Tensor>(&x, 1), batch_size)[0];
}

std::map<std::string, Tensor> Model::predict(const std::map<std::string, Tensor>& x, int64_t batch_size) {
  const std::vector<Tensor> out = predict(ordered_inputs(x), batch_size);
  std::map<std::string, Tensor> named;
  for (size_t i = 0; i < out.size(); ++i) named[graph_->output_names[i]] = out[i];
  return named;
}

std::vector<Tensor> Model::predict(std::span<const Tensor> x_in, int64_t batch_size) {
  check_live("predict()");
  if (graph_->order.empty()) throw StateError("predict: the model has no layers");
  if (batch_size < 1) throw ValueError("batch_size must be at least 1; got " + std::to_string(batch_size));
  const detail::AdaptedData d = detail::DataAdapter(*this, "predict").inputs(x_in);
  const std::vector<Tensor>& x = d.x;
  const int64_t n = d.rows;
  std::vector<Tensor> out;
  for (const SymbolicTensor& o : graph_->outputs) out.push_back(Tensor::empty(o.shape().with_batch(n)));
  for (int64_t start = 0; start < n; start += batch_size) {
    const int64_t rows = std::min(batch_size, n - start);
    PredictPlan& plan = predict_plan(rows);
    for (size_t i = 0; i < x.size(); ++i) plan.exe->bind(plan.x[i], x[i].rows(start, start + rows));
    plan.exe->run();
    for (size_t i = 0; i < out.size(); ++i) plan.exe->copy_output(plan.out[i], out[i].rows(start, start + rows));
  }
  return out;
}

void Model::predict(const Tensor& x, Tensor& out) { predict(std::span<const Tensor>(&x, 1), std::span<Tensor>(&out, 1)); }

void Model::predict(std::span<const Tensor> x, std::span<Tensor> out) {
  check_live("predict()");
  const FunctionalGraph& g = *graph_;
  if (g.order.empty()) throw StateError("predict: the model has no layers");
  if (x.size() != g.inputs.size())
    throw ShapeError("predict: the model has " + std::to_string(g.inputs.size()) + " input(s) (" +
                     joined(g.input_names) + "); got " + std::to_string(x.size()) + " tensor(s)");
  if (out.empty() || out.size() > g.outputs.size())
    throw ShapeError("predict: give one out tensor per output (" + joined(g.output_names) + "), or one for the first; got " +
                     std::to_string(out.size()));
  const Tensor x0 = check_input_shape(x[0], g.inputs[0].shape(), -1, x.size() == 1 ? "x" : "x[0]");
  const int64_t n = x0.shape()[0];
  for (size_t i = 0; i < out.size(); ++i) {
    const Shape& os = g.outputs[i].shape();
    if (out[i].defined() && out[i].dtype() != DType::Float32)
      throw TypeError(std::string("predict: out must be float32; got ") + dtype_name(out[i].dtype()));
    if (!out[i].defined() || out[i].shape().rank() == 0 || out[i].shape()[0] != n || out[i].shape().row_size() != os.numel())
      throw ShapeError("predict: out must be a float32 tensor of shape " + os.with_batch(n).str() + "; got " +
                       (out[i].defined() ? out[i].shape().str() : std::string("an undefined tensor")));
  }
  if (n == 0) return;
  PredictPlan& plan = predict_plan(n);
  for (size_t i = 0; i < x.size(); ++i) {
    Tensor staging = plan.staging[i].defined() ? plan.staging[i].rows(0, n) : Tensor{};
    plan.exe->bind(plan.x[i], plan.inputs[i].check(x[i], n, plan.x_names[i], &staging));
  }
  plan.exe->run();
  for (size_t i = 0; i < out.size(); ++i) plan.exe->copy_output(plan.out[i], out[i]);
}

void Model::set_communicator(std::shared_ptr<dist::Communicator> comm) {
  check_live("set_communicator()");
  if (!state_.compiled || !state_.opt_state) throw StateError(not_compiled_message("set_communicator()"));
  state_.opt_state->communicator = std::move(comm);
}

std::shared_ptr<dist::Communicator> Model::communicator() const {
  return state_.opt_state ? state_.opt_state->communicator : nullptr;
}

void Model::add_gradient_hook(GradientHook hook) {
  check_live("add_gradient_hook()");
  if (!hook) throw ValueError("add_gradient_hook: empty hook");
  state_.hooks->emplace_back(std::in_place_type<GradientHook>, std::move(hook));
}

void Model::add_gradient_bucket_hook(GradientBucketHook hook) {
  check_live("add_gradient_bucket_hook()");
  if (!hook) throw ValueError("add_gradient_bucket_hook: empty hook");
  state_.hooks->emplace_back(std::in_place_type<GradientBucketHook>, std::move(hook));
}

void Model::set_gradient_bucket_bytes(size_t bytes) {
  check_live("set_gradient_bucket_bytes()");
  check_gradient_bucket_bytes(bytes, "Model::set_gradient_bucket_bytes: the bucket size in bytes");
  state_.gradient_bucket_bytes = bytes;
  for (auto& [key, ctx] : state_.contexts)
    if (ctx) ctx->set_gradient_bucket_bytes(bytes);
}

void Model::freeze_bn_stats(bool freeze) {
  check_live("freeze_bn_stats()");
  std::set<const Layer*> seen;
  for_each_layer(*graph_, [&](Layer& l) {
    if (auto* bn = dynamic_cast<BatchNormalization*>(&l)) bn->freeze_stats = freeze;
  }, seen);
  retire_contexts("freeze_bn_stats() changed the training graphs");
}

void Model::calibrate_bn(const Tensor& x) { calibrate_bn(std::span<const Tensor>(&x, 1)); }

void Model::calibrate_bn(std::span<const Tensor> x_in) {
  check_live("calibrate_bn()");
  const detail::AdaptedData d = detail::DataAdapter(*this, "calibrate_bn").inputs(x_in);
  const std::vector<Tensor>& x = d.x;
  const int64_t rows = std::min<int64_t>(d.rows, 1024);
  if (rows == 0) throw ValueError("calibrate_bn: x has no rows");
  const ModelFunction f = model_function();
  Graph g;
  std::vector<Value> in;
  for (const InputSpec& s : f.inputs) in.push_back(g.input(s.name, s.shape.with_batch(rows), s.dtype));
  const std::vector<Value> out = graph_->forward(g, in, CallOptions{false, true});
  Executable exe(std::move(g), out, BatchRule{}, state_.backend);
  for (size_t i = 0; i < x.size(); ++i) exe.bind(in[i], x[i].rows(0, rows));
  exe.run();
}

Model Model::clone() const {
  check_live("clone()");
  Model copy(state_.name);
  copy.graph_ = graph_->clone();
  copy.state_.backend = state_.backend;
  copy.state_.fusion = state_.fusion;
  if (state_.compiled) {
    copy.state_.optimizer = state_.optimizer;
    copy.state_.losses = state_.losses;
    copy.state_.loss_weights = state_.loss_weights;
    copy.state_.metrics = state_.metrics;

    std::set<const Layer*> seen;
    for_each_layer(*copy.graph_, [&](Layer& l) { copy.state_.trainable_at_compile.emplace_back(&l, l.trainable); }, seen);
    copy.state_.opt_state = std::make_shared<OptimizerState>(state_.optimizer, state_.backend->device());
    copy.state_.opt_state->rng_counter.copy_from(state_.opt_state->rng_counter);
    copy.state_.rng = state_.rng;
    copy.state_.compiled = true;
  }
  *copy.state_.hooks = *state_.hooks;
  copy.state_.gradient_bucket_bytes = state_.gradient_bucket_bytes;
  return copy;
}

void Model::free() {
  if (state_.released) return;
  retire_contexts("the model was freed");
  // Retired contexts hold no graph or state any more: the weights go now.
  state_.predict_plans.clear();
  graph_.reset();
  state_.as_layer.reset();
  state_.trainable_at_compile.clear();
  state_.opt_state.reset();
  state_.hooks->clear();
  state_.compiled = false;
  state_.released = true;
  new_structure_id();
}

std::vector<Weight> Model::weights() const {
  check_live("weights()");
  std::vector<Weight> out;
  std::set<const void*> seen;  // a layer used twice (or inside a nested model too) lists its weights once
  for (const auto& l : graph_->layers)
    for (Weight& w : l->weights())
      if (!w.value.defined() || seen.insert(w.value.raw()).second) out.push_back(std::move(w));
  return out;
}

std::vector<Tensor> Model::get_weights() const {
  std::vector<Tensor> out;
  for (const Weight& w : weights()) out.push_back(w.value.defined() ? w.value.clone() : Tensor{});
  return out;
}

void Model::set_weights(const std::vector<Tensor>& values) {
  const std::vector<Weight> ws = weights();
  if (values.size() != ws.size())
    throw ValueError("set_weights: the model has " + std::to_string(ws.size()) + " weights; got " +
                     std::to_string(values.size()) + " tensors (use get_weights() of the same architecture)");
  for (size_t i = 0; i < ws.size(); ++i)
    if (ws[i].value.defined() && (!values[i].defined() || values[i].shape() != ws[i].value.shape() ||
                                  values[i].dtype() != ws[i].value.dtype()))
      throw ShapeError("set_weights: weight '" + ws[i].name + "' is " + ws[i].value.shape().str() + " " +
                       dtype_name(ws[i].value.dtype()) + "; got " +
                       (values[i].defined() ? values[i].shape().str() + " " + dtype_name(values[i].dtype())
                                            : std::string("an undefined tensor")));
  for (size_t i = 0; i < ws.size(); ++i)
    if (ws[i].value.defined()) Tensor(ws[i].value).copy_from(values[i]);
}

void Model::set_initial_epoch(int epoch) {
  if (epoch < 0)
    throw ValueError("set_initial_epoch: the epoch must be >= 0 (epochs count from 0); got " + std::to_string(epoch));
  state_.initial_epoch = epoch;
}

double Model::learning_rate() const {
  check_live("learning_rate()");
  if (!state_.compiled || !state_.opt_state) throw StateError(not_compiled_message("learning_rate()"));
  return state_.opt_state->learning_rate();
}

void Model::set_learning_rate(double lr) {
  check_live("set_learning_rate()");
  if (!state_.compiled || !state_.opt_state) throw StateError(not_compiled_message("set_learning_rate()"));
  if (!(lr > 0.0) || !std::isfinite(lr) || !std::isfinite(float(lr)) || !(float(lr) > 0.0f))
    throw ValueError("learning rate must be a positive finite float32; got " + std::to_string(lr));
  state_.opt_state->set_learning_rate(float(lr));
}

}  // namespace tensorgrad::nn
