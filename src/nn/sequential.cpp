#include "tensorgrad/nn/sequential.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <numeric>
#include <sstream>

#include "nn/progress.h"
#include "tensorgrad/nn/normalization.h"
#include "tensorgrad/core/error.h"
#include "tensorgrad/core/random.h"

namespace tensorgrad::nn {

const std::vector<double>& History::operator[](const std::string& key) const {
  auto it = history.find(key);
  if (it == history.end()) {
    std::string keys;
    for (auto& [k, v] : history) keys += (keys.empty() ? "" : ", ") + k;
    throw IndexError("history has no '" + key + "'; it has: " + keys);
  }
  return it->second;
}

struct Sequential::PredictPlan {
  std::unique_ptr<Executable> exe;
  Value x, out;
  Tensor x_staging;  // float32 token ids converted to int32
};

namespace {
// Copies rows `index[0..count)` of src into the first rows of dst.
void gather_rows(const Tensor& src, const int64_t* index, int64_t count, const Tensor& dst) {
  const size_t row_bytes = size_t(src.shape().row_size()) * dtype_size(src.dtype());
  const char* s = static_cast<const char*>(src.raw());
  char* d = static_cast<char*>(dst.raw());
  for (int64_t i = 0; i < count; ++i) std::memcpy(d + size_t(i) * row_bytes, s + size_t(index[i]) * row_bytes, row_bytes);
}

// "(None, 28, 28, 1)", as Keras prints shapes with an unknown batch.
std::string keras_shape(const Shape& s) {
  std::string out = "(None";
  for (int64_t d : s) out += ", " + std::to_string(d);
  return out + ")";
}

// One weight per row: {rows} or {rows, 1}, as Keras' sample_weight; returns it as {rows}.
Tensor check_sample_weight(const Tensor& w, int64_t rows, const char* what) {
  const Shape& ws = w.shape();
  if (ws.rank() == 0 || ws[0] != rows)
    throw ShapeError(std::string(what) + " must have one weight per row of x (" + std::to_string(rows) + "); got " +
                     ws.str());
  if (ws.numel() != rows)
    throw ValueError(std::string(what) + " must be one weight per row ({" + std::to_string(rows) + "} or {" +
                     std::to_string(rows) + ", 1}), as in Keras; got " + ws.str() +
                     ". For one weight per output element, use a Trainer with loss_mask = outputs");
  if (w.dtype() != DType::Float32) throw TypeError(std::string(what) + " must be float32; got " + dtype_name(w.dtype()));
  return w.reshape(Shape{rows});
}

std::string metrics_text(const std::map<std::string, double>& m) {
  std::string out;
  char buf[64];
  for (const char* key : {"loss", "accuracy", "val_loss", "val_accuracy"}) {
    auto it = m.find(key);
    if (it == m.end()) continue;
    std::snprintf(buf, sizeof buf, "%s%s: %.4f", out.empty() ? "" : " - ", key, it->second);
    out += buf;
  }
  return out;
}
}  // namespace

Sequential::Sequential(const Shape& input_shape) : input_shape_(input_shape), output_shape_(input_shape) {
  if (input_shape.rank() == 0 || input_shape.numel() <= 0)
    throw ShapeError("Sequential: input_shape (without the batch) must be non-empty with positive sizes; got " +
                     input_shape.str());
  rebuild_model_function();
  new_structure_id();
}
Sequential::~Sequential() = default;
Sequential::Sequential(Sequential&& other) noexcept { *this = std::move(other); }

Sequential& Sequential::operator=(Sequential&& other) noexcept {
  if (this == &other) return *this;
  input_shape_ = other.input_shape_;
  output_shape_ = other.output_shape_;
  model_ = std::move(other.model_);
  layers_ = std::move(other.layers_);
  layer_shapes_ = std::move(other.layer_shapes_);
  compiled_ = other.compiled_;
  changed_after_compile_ = other.changed_after_compile_;
  released_ = other.released_;
  structure_id_ = other.structure_id_;
  optimizer_ = other.optimizer_;
  loss_ = other.loss_;
  accuracy_metric_ = other.accuracy_metric_;
  opt_state_ = std::move(other.opt_state_);
  contexts_ = std::move(other.contexts_);
  retired_contexts_ = std::move(other.retired_contexts_);
  predict_plans_ = std::move(other.predict_plans_);
  // The moved-from model is released, with an identity of its own, so that
  // nothing cached against it (a Trainer's update_target) can reach the memory
  // that moved away.
  other.layers_.clear();
  other.contexts_.clear();
  other.compiled_ = false;
  other.released_ = true;
  other.new_structure_id();
  return *this;
}

void Sequential::retire_contexts(const char* why) {
  for (auto& [key, ctx] : contexts_) {
    ctx->retire(why);
    retired_contexts_.push_back(std::move(ctx));
  }
  contexts_.clear();
}

Sequential& Sequential::add(std::shared_ptr<Layer> layer) {
  check_live("add()");
  if (!layer) throw ValueError("Sequential::add: null layer");
  if (!layers_.empty() && std::string(layer->type()) == "Embedding")
    throw ValueError("Embedding '" + layer->name() +
                     "' must be the first layer: it reads token ids from the model input, where they are checked");
  output_shape_ = layer->build_once(output_shape_);
  layers_.push_back(std::move(layer));
  layer_shapes_.push_back(output_shape_);
  rebuild_model_function();
  new_structure_id();
  // A changed stack needs new graphs; the optimizer state stays with compile.
  retire_contexts("add() changed the model after this context was made");
  predict_plans_.clear();
  if (compiled_) changed_after_compile_ = true;
  compiled_ = false;
  return *this;
}

ModelFunction Sequential::model_function() const { return model_; }

std::string Sequential::not_compiled_message(const char* call) const {
  if (changed_after_compile_)
    return std::string(call) + ": the model changed after compile() (add() was called): call compile() again";
  return std::string(call) + " before compile(): call compile(optimizer, loss) first";
}

void Sequential::rebuild_model_function() {
  model_.input_shape = input_shape_;
  model_.forward = [layers = layers_](Builder& b, Value x, bool training, bool logits) {
    for (size_t i = 0; i < layers.size(); ++i)
      x = layers[i]->call(b, x, CallOptions{training, logits && i + 1 == layers.size()});
    return x;
  };
  model_.validate_input = nullptr;
  model_.input_dtype = !layers_.empty() && std::string(layers_.front()->type()) == "Embedding" ? DType::Int32
                                                                                              : DType::Float32;
  if (!layers_.empty())
    model_.validate_input = [first = layers_.front()](const Tensor& x) { first->validate_input(x); };
}

void Sequential::compile(const OptimizerSpec& optimizer, const std::string& loss,
                         const std::vector<std::string>& metrics) {
  check_live("compile()");
  if (layers_.empty()) throw StateError("compile: the model has no layers; add() some first");
  // Validate everything before changing anything: a failed compile leaves the model as it was.
  optimizer.validate();
  const LossKind kind = loss_from_name(loss);
  bool accuracy = false;
  for (const std::string& m : metrics) {
    if (m != "accuracy" && m != "acc") throw ValueError("unknown metric '" + m + "'; supported: \"accuracy\"");
    if (kind == LossKind::MeanSquaredError)
      throw ValueError("metric \"accuracy\" needs a cross-entropy loss; the model is compiled with \"mse\"");
    accuracy = true;
  }
  if (kind != LossKind::MeanSquaredError) {
    const char* last = layers_.back()->output_activation();
    if (last && std::string(last) != "softmax" && std::string(last) != "linear")
      throw ValueError(std::string(loss_name(kind)) + " needs a final softmax (folded into the loss) or a linear output " +
                       "(taken as logits); the last layer '" + layers_.back()->name() + "' ends in " + last +
                       ". Use activation \"softmax\", or \"mse\" for other outputs");
  }
  loss_ = kind;
  accuracy_metric_ = accuracy;
  changed_after_compile_ = false;
  optimizer_ = optimizer;
  opt_state_ = std::make_shared<OptimizerState>(optimizer);
  retire_contexts("compile() was called again");
  compiled_ = true;
}

OptimizerContext& Sequential::optimizer_context(int64_t batch_size, int64_t nbatch_logical, LossWeights weights) {
  check_live("optimizer_context()");
  if (!compiled_) throw StateError(not_compiled_message("optimizer_context()"));
  auto key = std::make_tuple(batch_size, nbatch_logical, int(weights));
  auto& slot = contexts_[key];
  if (!slot) {
    OptimizerContextOptions o;
    o.batch_size = batch_size;
    o.nbatch_logical = nbatch_logical;
    o.loss = loss_;
    o.weights = weights;
    o.optimizer = optimizer_;
    try {
      slot = std::make_unique<OptimizerContext>(model_function(), o, opt_state_);
    } catch (...) {
      contexts_.erase(key);
      throw;
    }
  }
  return *slot;
}

History Sequential::fit(const Tensor& x_in, const Tensor& y, const FitOptions& opt) {
  check_live("fit()");
  if (!compiled_) throw StateError(not_compiled_message("fit()"));
  if (opt.verbose < 0 || opt.verbose > 2)
    throw ValueError("verbose must be 0 (silent), 1 (progress bar) or 2 (one line per epoch); got " +
                     std::to_string(opt.verbose));
  if (opt.epochs < 0) throw ValueError("epochs must be >= 0; got " + std::to_string(opt.epochs));
  if (opt.batch_size < 1) throw ValueError("batch_size must be at least 1; got " + std::to_string(opt.batch_size));
  if (!(opt.validation_split >= 0.0 && opt.validation_split < 1.0))
    throw ValueError("validation_split must be in [0, 1); got " + std::to_string(opt.validation_split));
  const Tensor x = model_.check_input(x_in, -1, "x");
  const int64_t n = x.shape()[0];
  if (n == 0) throw ValueError("fit: x has no rows; give at least one training row");
  if (!y.defined() || y.shape().rank() == 0 || y.shape()[0] != n)
    throw ShapeError("x has " + std::to_string(n) + " rows but y has " +
                     (y.defined() && y.shape().rank() ? std::to_string(y.shape()[0]) : std::string("none")) +
                     "; give one label row per input row");
  const bool weighted = opt.sample_weight.defined();
  const Tensor w_all = weighted ? check_sample_weight(opt.sample_weight, n, "sample_weight") : Tensor{};
  const LossWeights wmode = weighted ? LossWeights::PerSample : LossWeights::None;
  if (opt.validation_sample_weight.defined() && !opt.validation_data)
    throw ValueError("validation_sample_weight is given without validation_data; pass validation_data too (with "
                     "validation_split the weights are split from sample_weight)");

  int64_t n_train = n;
  Tensor xv, yv, wv;  // wv: the validation rows' weights, as Keras splits them with the rows
  if (opt.validation_data) {
    xv = model_.check_input(opt.validation_data->first, -1, "validation x");
    yv = opt.validation_data->second;
    if (!yv.defined() || yv.shape().rank() == 0 || yv.shape()[0] != xv.shape()[0])
      throw ShapeError("validation_data: x has " + std::to_string(xv.shape()[0]) + " rows but y has " +
                       (yv.defined() && yv.shape().rank() ? std::to_string(yv.shape()[0]) : std::string("none")) +
                       "; give one label row per input row");
    if (xv.shape()[0] == 0) throw ValueError("validation_data has no rows; give some or leave it out");
    if (opt.validation_sample_weight.defined())
      wv = check_sample_weight(opt.validation_sample_weight, xv.shape()[0], "validation_sample_weight");
  } else if (opt.validation_split > 0.0) {
    n_train = int64_t(double(n) * (1.0 - opt.validation_split));
    if (n_train < n) {
      xv = x.rows(n_train, n);
      yv = y.rows(n_train, n);
      if (weighted) wv = w_all.rows(n_train, n);
    }
  }
  if (n_train < 1) throw ValueError("no rows left to train on after validation_split");

  if (opt.nbatch_logical > 0 && opt.batch_size > n_train)
    throw ValueError("batch_size " + std::to_string(opt.batch_size) + " is more than the " + std::to_string(n_train) +
                     " training rows; with nbatch_logical the batch cannot shrink to fit. Lower batch_size");
  const int64_t bs = std::min(opt.batch_size, n_train);
  OptimizerContext& ctx = optimizer_context(bs, opt.nbatch_logical, wmode);
  ctx.check_targets(y, weighted ? opt.sample_weight : Tensor{}, -1);
  if (xv.defined())
    optimizer_context(std::min(bs, xv.shape()[0]), 0, wv.defined() ? LossWeights::PerSample : LossWeights::None)
        .check_targets(yv, wv, -1);
  // Whole logical batches only when accumulating (as ggml_opt_fit): a part
  // period would carry its gradients into the next epoch's first update.
  const int64_t period = ctx.accumulation_period();
  const int64_t rem = n_train % bs;
  const bool use_rem = rem > 0 && period == 1;
  OptimizerContext* ctx_rem = use_rem ? &optimizer_context(rem, 0, wmode) : nullptr;
  const int64_t steps = period == 1 ? n_train / bs + (use_rem ? 1 : 0) : n_train / bs / period * period;
  if (steps == 0)
    throw ValueError("nbatch_logical " + std::to_string(opt.nbatch_logical) + " is more than the " +
                     std::to_string(n_train) + " training rows: no whole logical batch fits");

  // Batch staging, filled by gathering shuffled rows.
  Tensor xb = Tensor::empty(input_shape_.with_batch(bs), model_.input_dtype);
  Shape ys = y.shape();
  ys.set(0, bs);
  Tensor yb = Tensor::empty(ys, y.dtype());
  Tensor wb = weighted ? Tensor::empty(Shape{bs}) : Tensor{};
  Tensor xr, yr, wr;
  if (use_rem) {
    xr = xb.rows(0, rem);
    yr = yb.rows(0, rem);
    if (weighted) wr = wb.rows(0, rem);
  }

  std::vector<int64_t> order(static_cast<size_t>(n_train));
  History hist;
  ProgressPrinter progress(opt.verbose, opt.epochs);
  const bool report_acc = accuracy_metric_;
  for (int epoch = 0; epoch < opt.epochs; ++epoch) {
    if (opt.learning_rate_schedule) ctx.set_learning_rate(opt.learning_rate_schedule(epoch, ctx.learning_rate()));
    std::iota(order.begin(), order.end(), int64_t(0));
    if (opt.shuffle) std::shuffle(order.begin(), order.end(), global_generator());
    progress.begin_epoch(epoch, steps);
    double loss_sum = 0;
    int64_t correct = 0, seen = 0;
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t start = s * bs, rows = std::min(bs, n_train - start);
      const bool full = rows == bs;
      gather_rows(x, &order[size_t(start)], rows, xb);
      gather_rows(y, &order[size_t(start)], rows, yb);
      if (weighted) gather_rows(w_all, &order[size_t(start)], rows, wb);
      StepResult r = full ? ctx.step(xb, yb, wb) : ctx_rem->step(xr, yr, wr);
      loss_sum += double(r.loss) * double(rows);
      correct += r.correct;
      seen += rows;
      if (opt.verbose == 1) {
        std::map<std::string, double> m{{"loss", loss_sum / double(seen)}};
        if (report_acc) m["accuracy"] = double(correct) / double(seen);
        progress.step(s + 1, metrics_text(m));
      }
    }
    std::map<std::string, double> logs{{"loss", seen ? loss_sum / double(seen) : 0.0}};
    if (report_acc) logs["accuracy"] = seen ? double(correct) / double(seen) : 0.0;
    if (xv.defined()) {
      for (auto& [k, v] : evaluate_rows(xv, yv, wv, bs)) logs["val_" + k] = v;
    }
    hist.epoch.push_back(epoch);
    for (auto& [k, v] : logs) hist.history[k].push_back(v);
    progress.end_epoch(metrics_text(logs));
  }
  return hist;
}

std::map<std::string, double> Sequential::evaluate_rows(const Tensor& x, const Tensor& y, const Tensor& w,
                                                       int64_t batch_size) {
  const int64_t n = x.shape()[0];
  const LossWeights mode = w.defined() ? LossWeights::PerSample : LossWeights::None;
  double loss_sum = 0;
  int64_t correct = 0;
  for (int64_t start = 0; start < n; start += batch_size) {
    const int64_t rows = std::min(batch_size, n - start);
    StepResult r = optimizer_context(rows, 0, mode)
                       .evaluate(x.rows(start, start + rows), y.rows(start, start + rows),
                                 w.defined() ? w.rows(start, start + rows) : Tensor{});
    loss_sum += double(r.loss) * double(rows);
    correct += r.correct;
  }
  std::map<std::string, double> out{{"loss", n ? loss_sum / double(n) : 0.0}};
  if (accuracy_metric_) out["accuracy"] = n ? double(correct) / double(n) : 0.0;
  return out;
}

std::map<std::string, double> Sequential::evaluate(const Tensor& x_in, const Tensor& y, int64_t batch_size,
                                                  const Tensor& sample_weight) {
  check_live("evaluate()");
  if (!compiled_) throw StateError(not_compiled_message("evaluate()"));
  if (batch_size < 1) throw ValueError("batch_size must be at least 1; got " + std::to_string(batch_size));
  const Tensor x = model_.check_input(x_in, -1, "x");
  const int64_t n = x.shape()[0];
  if (!y.defined() || y.shape().rank() == 0 || y.shape()[0] != n)
    throw ShapeError("x has " + std::to_string(n) + " rows but y has " +
                     (y.defined() && y.shape().rank() ? std::to_string(y.shape()[0]) : std::string("none")) +
                     "; give one label row per input row");
  if (n == 0) throw ValueError("evaluate: x has no rows");
  const Tensor w = sample_weight.defined() ? check_sample_weight(sample_weight, n, "sample_weight") : Tensor{};
  optimizer_context(std::min(batch_size, n), 0, w.defined() ? LossWeights::PerSample : LossWeights::None)
      .check_targets(y, w, -1);
  return evaluate_rows(x, y, w, batch_size);
}

Sequential::PredictPlan& Sequential::predict_plan(int64_t rows) {
  // One plan (graph and arena) per row count; a caller cycling through many
  // row counts would otherwise grow memory without bound.
  constexpr size_t kMaxPlans = 8;
  if (predict_plans_.size() >= kMaxPlans && !predict_plans_.count(rows)) predict_plans_.clear();
  auto& slot = predict_plans_[rows];
  if (!slot) {
    auto plan = std::make_unique<PredictPlan>();
    Graph g;
    plan->x = g.input("x", input_shape_.with_batch(rows), model_.input_dtype);
    plan->out = model_function().forward(g, plan->x, false, false);
    plan->exe = std::make_unique<Executable>(std::move(g), std::vector<Value>{plan->out});
    slot = std::move(plan);
  }
  return *slot;
}

Tensor Sequential::predict(const Tensor& x_in, int64_t batch_size) {
  check_live("predict()");
  if (layers_.empty()) throw StateError("predict: the model has no layers");
  if (batch_size < 1) throw ValueError("batch_size must be at least 1; got " + std::to_string(batch_size));
  const Tensor x = model_.check_input(x_in, -1, "x");
  const int64_t n = x.shape()[0];
  Tensor out = Tensor::empty(output_shape_.with_batch(n));
  const size_t row_bytes = size_t(output_shape_.numel()) * sizeof(float);
  for (int64_t start = 0; start < n; start += batch_size) {
    const int64_t rows = std::min(batch_size, n - start);
    PredictPlan& plan = predict_plan(rows);
    plan.exe->bind(plan.x, x.rows(start, start + rows));
    plan.exe->run();
    std::memcpy(static_cast<char*>(out.raw()) + size_t(start) * row_bytes, plan.exe->data_ptr(plan.out),
                size_t(rows) * row_bytes);
  }
  return out;
}

void Sequential::predict(const Tensor& x_in, Tensor& out) {
  check_live("predict()");
  if (layers_.empty()) throw StateError("predict: the model has no layers");
  const Tensor x = check_input_shape(x_in, input_shape_, -1, "x");
  const int64_t n = x.shape()[0];
  if (out.defined() && out.dtype() != DType::Float32)
    throw TypeError(std::string("predict: out must be float32; got ") + dtype_name(out.dtype()));
  if (!out.defined() || out.shape().rank() == 0 || out.shape()[0] != n ||
      out.shape().row_size() != output_shape_.numel())
    throw ShapeError("predict: out must be a float32 tensor of shape " + output_shape_.with_batch(n).str() + "; got " +
                     (out.defined() ? out.shape().str() : std::string("an undefined tensor")));
  if (n == 0) return;
  PredictPlan& plan = predict_plan(n);
  plan.exe->bind(plan.x, model_.check_input(x_in, n, "x", &plan.x_staging));
  plan.exe->run();
  std::memcpy(out.raw(), plan.exe->data_ptr(plan.out), out.nbytes());
}

void Sequential::freeze_bn_stats(bool freeze) {
  check_live("freeze_bn_stats()");
  for (auto& l : layers_)
    if (auto* bn = dynamic_cast<BatchNormalization*>(l.get())) bn->freeze_stats = freeze;
  retire_contexts("freeze_bn_stats() changed the training graphs");
}

void Sequential::calibrate_bn(const Tensor& x_in) {
  check_live("calibrate_bn()");
  const Tensor x = model_.check_input(x_in, -1, "x");
  const int64_t rows = std::min<int64_t>(x.shape()[0], 1024);
  if (rows == 0) throw ValueError("calibrate_bn: x has no rows");
  Graph g;
  Value in = g.input("x", input_shape_.with_batch(rows), model_.input_dtype);
  Value out = in;
  for (auto& l : layers_) out = l->call(g, out, CallOptions{false, false, true});
  Executable exe(std::move(g), {out});
  exe.bind(in, x.rows(0, rows));
  exe.run();
}

void Sequential::new_structure_id() {
  static std::atomic<uint64_t> next{1};
  structure_id_ = next++;
}

void Sequential::check_live(const char* call) const {
  if (released_)
    throw StateError(std::string(call) + ": this model has been freed (released); use a live model or snapshot");
}

Sequential Sequential::clone() const {
  check_live("clone()");
  Sequential copy(input_shape_);
  // A layer used twice (tied weights) is cloned once and used twice again.
  std::map<const Layer*, std::shared_ptr<Layer>> cloned;
  for (const auto& layer : layers_) {
    std::shared_ptr<Layer>& c = cloned[layer.get()];
    if (!c) c = layer->clone();
    copy.layers_.push_back(c);
  }
  copy.output_shape_ = output_shape_;
  copy.layer_shapes_ = layer_shapes_;
  copy.rebuild_model_function();
  if (compiled_) {
    copy.optimizer_ = optimizer_;
    copy.loss_ = loss_;
    copy.accuracy_metric_ = accuracy_metric_;
    copy.opt_state_ = std::make_shared<OptimizerState>(optimizer_);
    copy.compiled_ = true;
  }
  return copy;
}

void Sequential::free() {
  if (released_) return;
  retire_contexts("the model was freed");
  predict_plans_.clear();
  layers_.clear();
  layer_shapes_.clear();
  opt_state_.reset();
  model_ = ModelFunction{};
  compiled_ = false;
  released_ = true;
  new_structure_id();
}

std::vector<Weight> Sequential::weights() const {
  check_live("weights()");
  std::vector<Weight> out;
  std::vector<const Layer*> seen;  // a layer used twice lists its weights once
  for (auto& l : layers_) {
    if (std::find(seen.begin(), seen.end(), l.get()) != seen.end()) continue;
    seen.push_back(l.get());
    for (auto& w : l->weights()) out.push_back(w);
  }
  return out;
}

std::string Sequential::summary() const {
  std::ostringstream s;
  s << "Layer (type)                                     Output shape        Param #\n";
  int64_t total = 0;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer* l = layers_[i].get();
    int64_t params = 0;
    for (auto& w : l->weights()) params += w.value.numel();
    total += params;
    char line[160];
    std::snprintf(line, sizeof line, "%-48s %-19s %lld\n", (l->name() + " (" + l->type() + ")").c_str(),
                  keras_shape(layer_shapes_[i]).c_str(),
                  (long long)params);
    s << line;
  }
  s << "Total params: " << total << "\n";
  return s.str();
}

}  // namespace tensorgrad::nn
