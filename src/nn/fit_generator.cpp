// Training and evaluation from a generator (the seed's ggml_fit_opt_gen in
// R/fit_generator.R): batches pulled one at a time, optionally prefetched on
// a producer thread, through the same optimizer contexts as the in-memory fit.
#include <cmath>
#include <condition_variable>
#include <deque>
#include <exception>
#include <limits>
#include <mutex>
#include <thread>

#include "nn/callback_run.h"
#include "nn/functional.h"
#include "tensorgrad/core/logging.h"
#include "tensorgrad/nn/model.h"

namespace tensorgrad::nn {

namespace {
// Calls a generator one epoch at a time: inline (depth 0), or on a producer
// thread at most `depth` batches ahead. Never calls past the end of an epoch
// (a nullopt, an exception, or `limit` calls); the next epoch's calls start
// at start_epoch. The generator is called exactly as often either way.
class BatchFeed {
 public:
  BatchFeed(const Generator& generator, int depth, const char* what)
      : generator_(generator), depth_(depth), what_(what) {
    if (depth_ > 0) producer_ = std::thread([this] { produce(); });
  }
  ~BatchFeed() { stop(); }
  BatchFeed(const BatchFeed&) = delete;
  BatchFeed& operator=(const BatchFeed&) = delete;

  void start_epoch(int64_t limit, int epoch) {
    std::lock_guard<std::mutex> lock(mu_);
    calls_ = 0;
    limit_ = limit;
    epoch_ = epoch;
    done_ = false;
    items_.clear();
    cv_.notify_all();
  }

  /// The epoch's next batch, or nullopt at its end. An exception from the
  /// generator is rethrown here, as the same object, after a warning.
  std::optional<Batch> next() {
    Item item;
    if (depth_ == 0) {
      if (done_) return std::nullopt;
      item = call(++calls_);
      finish(item);
    } else {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return !items_.empty() || (done_ && !busy_); });
      if (items_.empty()) return std::nullopt;
      item = std::move(items_.front());
      items_.pop_front();
      cv_.notify_all();
    }
    if (item.error) {
      log_message(LogLevel::Warning, std::string(what_) + " threw at batch " + std::to_string(item.number) +
                                         (epoch_ >= 0 ? " of epoch " + std::to_string(epoch_ + 1) : std::string()) +
                                         "; training stops and the exception is rethrown");
      std::rethrow_exception(item.error);
    }
    return std::move(item.batch);
  }

  /// Waits for a call in progress and ends the producer; the generator is
  /// not called again.
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (producer_.joinable()) producer_.join();
  }

 private:
  struct Item {
    std::optional<Batch> batch;
    std::exception_ptr error;
    int64_t number = 0;
  };
  Item call(int64_t number) {
    Item item;
    item.number = number;
    try {
      item.batch = generator_();
    } catch (...) {
      item.error = std::current_exception();
    }
    return item;
  }
  // Under the lock (or inline): whether this call ended the epoch.
  void finish(const Item& item) {
    if (!item.batch || item.error || (limit_ > 0 && calls_ >= limit_)) done_ = true;
  }
  void produce() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stopping_ || (!done_ && items_.size() < size_t(depth_)); });
      if (stopping_) return;
      const int64_t number = ++calls_;
      busy_ = true;
      lock.unlock();
      Item item = call(number);
      lock.lock();
      busy_ = false;
      finish(item);
      items_.push_back(std::move(item));
      cv_.notify_all();
    }
  }

  const Generator& generator_;
  const int depth_;
  const char* what_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> items_;
  std::thread producer_;
  int64_t calls_ = 0, limit_ = 0;
  int epoch_ = -1;
  bool done_ = true;  // no epoch started yet
  bool busy_ = false, stopping_ = false;
};

// Rethrows the exception in flight with `prefix` before its message, as the same type.
[[noreturn]] void rethrow_prefixed(const std::string& prefix) {
  try {
    throw;
  } catch (const ShapeError& e) {
    throw ShapeError(prefix + e.what());
  } catch (const TypeError& e) {
    throw TypeError(prefix + e.what());
  } catch (const IndexError& e) {
    throw IndexError(prefix + e.what());
  } catch (const ValueError& e) {
    throw ValueError(prefix + e.what());
  }
}
}  // namespace

// One batch through an optimizer context of the model: checks it against the
// model and the limits of the run, then steps (or evaluates) it.
class GeneratorEpoch {
 public:
  GeneratorEpoch(Model& model, int64_t batch_size, int64_t nbatch_logical, bool train)
      : model_(model), batch_size_(batch_size), nbatch_logical_(nbatch_logical), train_(train) {
    const size_t n_out = model.graph_->outputs.size();
    out_loss_.assign(n_out, 0.0);
  }

  // number: 1-based within the epoch; epoch: 0-based, or -1 outside fit.
  void run(const Batch& b, int64_t number, int epoch) {
    const std::string where = (train_ ? "generator batch " : "validation batch ") + std::to_string(number) +
                              (epoch >= 0 ? " of epoch " + std::to_string(epoch + 1) : std::string()) + ": ";
    const FunctionalGraph& g = *model_.graph_;
    StepResult r;
    int64_t rows = 0;
    try {
      if (b.y.size() != g.outputs.size())
        throw ShapeError("the model has " + std::to_string(g.outputs.size()) + " output(s); the batch has " +
                         std::to_string(b.y.size()) + " target tensor(s)");
      const std::vector<Tensor> x = model_.check_inputs(b.x, -1, "batch");
      rows = x[0].shape()[0];
      if (rows == 0) throw ValueError("the batch has no rows");
      if (rows > batch_size_)
        throw ShapeError("the batch has " + std::to_string(rows) + " rows, more than batch_size " +
                         std::to_string(batch_size_) + " (graphs are planned for it): raise batch_size");
      if (nbatch_logical_ > 0 && rows != batch_size_)
        throw ShapeError("the batch has " + std::to_string(rows) + " rows; with nbatch_logical every batch needs "
                         "batch_size " + std::to_string(batch_size_) + " rows");
      for (size_t i = 0; i < b.y.size(); ++i)
        if (!b.y[i].defined() || b.y[i].shape().rank() == 0 || b.y[i].shape()[0] != rows)
          throw ShapeError("x has " + std::to_string(rows) + " rows but target " + std::to_string(i) + " has " +
                           (b.y[i].defined() && b.y[i].shape().rank() ? std::to_string(b.y[i].shape()[0])
                                                                      : std::string("none")));
      Tensor w;
      if (b.sample_weight.defined()) {
        if (b.sample_weight.numel() != rows)
          throw ShapeError("sample_weight must have one weight per row (" + std::to_string(rows) + "); got " +
                           b.sample_weight.shape().str());
        w = b.sample_weight.reshape(Shape{rows});
      }
      const LossWeights mode = w.defined() ? LossWeights::PerSample : LossWeights::None;
      OptimizerContext& ctx = model_.optimizer_context(rows, train_ ? nbatch_logical_ : 0, mode);
      const std::span<const Tensor> ws = w.defined() ? std::span<const Tensor>(&w, 1) : std::span<const Tensor>();
      r = train_ ? ctx.step(x, b.y, ws) : ctx.evaluate(x, b.y, ws);
    } catch (const Error&) {
      rethrow_prefixed(where);
    }
    model_.check_live("fit() (during training: a gradient hook freed or moved the model)");
    loss_sum_ += double(r.loss) * double(rows);
    for (size_t i = 0; i < out_loss_.size(); ++i) out_loss_[i] += double(r.output_losses[i]) * double(rows);
    metric_sum_.resize(r.metric_sums.size(), 0.0);
    for (size_t m = 0; m < r.metric_sums.size(); ++m) metric_sum_[m] += r.metric_sums[m];
    rows_ += rows;
    ++batches_;
  }

  int64_t batches() const { return batches_; }
  // The means so far; NaN for every key when no batch ran (the seed's NA).
  Logs logs() const {
    Logs l = model_.metric_logs(loss_sum_, out_loss_, metric_sum_, std::max<int64_t>(rows_, 1));
    if (rows_ == 0)
      for (auto& [k, v] : l) v = std::numeric_limits<double>::quiet_NaN();
    return l;
  }

 private:
  Model& model_;
  int64_t batch_size_, nbatch_logical_;
  bool train_;
  double loss_sum_ = 0;
  std::vector<double> out_loss_, metric_sum_;
  int64_t rows_ = 0, batches_ = 0;
};

namespace {
Logs evaluate_feed(Model& model, BatchFeed& feed, int64_t steps, int64_t batch_size, int epoch) {
  feed.start_epoch(steps, epoch);
  GeneratorEpoch run(model, batch_size, 0, /*train=*/false);
  while (steps == 0 || run.batches() < steps) {
    std::optional<Batch> b = feed.next();
    if (!b) break;
    run.run(*b, run.batches() + 1, epoch);
  }
  return run.logs();
}
}  // namespace

History Model::fit(const Generator& generator, const GeneratorFitOptions& opt) {
  check_live("fit()");
  if (!compiled_) throw StateError(not_compiled_message("fit()"));
  if (!generator) throw ValueError("fit: the generator is empty; give a callable returning std::optional<Batch>");
  if (opt.steps_per_epoch < 0)
    throw ValueError("steps_per_epoch must be >= 0 (0: until the generator returns nothing); got " +
                     std::to_string(opt.steps_per_epoch));
  if (opt.validation_steps < 0)
    throw ValueError("validation_steps must be >= 0 (0: until the validation generator returns nothing); got " +
                     std::to_string(opt.validation_steps));
  if (opt.prefetch < 0)
    throw ValueError("prefetch must be >= 0 batches (0: call the generator on this thread); got " +
                     std::to_string(opt.prefetch));
  if (opt.epochs < 0) throw ValueError("epochs must be >= 0; got " + std::to_string(opt.epochs));
  if (opt.initial_epoch < 0 || (opt.epochs > 0 && opt.initial_epoch >= opt.epochs))
    throw ValueError("initial_epoch must be in [0, epochs) = [0, " + std::to_string(opt.epochs) + "); got " +
                     std::to_string(opt.initial_epoch) + " (epochs initial_epoch .. epochs - 1 run, as Keras)");
  if (opt.batch_size < 1) throw ValueError("batch_size must be at least 1; got " + std::to_string(opt.batch_size));
  if (opt.verbose < 0 || opt.verbose > 2)
    throw ValueError("verbose must be 0 (silent), 1 (progress bar) or 2 (one line per epoch); got " +
                     std::to_string(opt.verbose));
  if (opt.validation_steps > 0 && !opt.validation_generator)
    throw ValueError("validation_steps is given without a validation_generator");
  if (opt.nbatch_logical > 0) optimizer_context(opt.batch_size, opt.nbatch_logical);  // checks the multiple

  CallbackRun callbacks(*this, opt.callbacks, opt.verbose, opt.epochs, opt.steps_per_epoch);
  BatchFeed feed(generator, opt.prefetch, "the generator");
  std::optional<BatchFeed> validation;
  if (opt.validation_generator) validation.emplace(opt.validation_generator, 0, "the validation generator");
  Logs train_logs;
  callbacks.train_begin(train_logs);
  check_live("fit() (after on_train_begin)");
  bool diverged = false;
  for (int epoch = opt.initial_epoch; epoch < opt.epochs && !stop_training_; ++epoch) {
    Logs logs;
    callbacks.epoch_begin(epoch, logs);
    check_live("fit() (after on_epoch_begin)");
    feed.start_epoch(opt.steps_per_epoch, epoch);
    GeneratorEpoch run(*this, opt.batch_size, opt.nbatch_logical, /*train=*/true);
    while (!stop_training_ && (opt.steps_per_epoch == 0 || run.batches() < opt.steps_per_epoch)) {
      std::optional<Batch> b = feed.next();
      if (!b) {
        if (opt.steps_per_epoch > 0 && run.batches() > 0)
          log_message(LogLevel::Warning,
                      "epoch " + std::to_string(epoch + 1) + ": the generator returned nothing after " +
                          std::to_string(run.batches()) + " of " + std::to_string(opt.steps_per_epoch) +
                          " requested batches. The epoch is short; if the source can end on its own, leave "
                          "steps_per_epoch at 0 and let nothing close the epoch");
        break;
      }
      Logs batch_logs;
      callbacks.batch_begin(run.batches(), batch_logs);
      check_live("fit() (after on_train_batch_begin)");
      run.run(*b, run.batches() + 1, epoch);
      batch_logs = run.logs();
      callbacks.batch_end(run.batches() - 1, batch_logs);
    }
    if (run.batches() == 0) {
      if (!stop_training_)
        log_message(LogLevel::Warning,
                    "epoch " + std::to_string(epoch + 1) + ": the generator returned nothing at its first call; "
                    "trained " + std::to_string(epoch - opt.initial_epoch) + " of " +
                    std::to_string(opt.epochs - opt.initial_epoch) +
                    " epochs. If the source is finite and now exhausted, lower epochs; if it was meant to "
                    "restart, reset its state before returning nothing");
      break;
    }
    for (auto& [k, v] : run.logs()) logs[k] = v;
    warn_if_diverged(logs, epoch, diverged);
    if (validation) {
      Logs test_logs;
      callbacks.test_begin(test_logs);
      check_live("fit() (after on_test_begin)");
      test_logs = evaluate_feed(*this, *validation, opt.validation_steps, opt.batch_size, epoch);
      callbacks.test_end(test_logs);
      for (auto& [k, v] : test_logs) logs["val_" + k] = v;
    }
    callbacks.epoch_end(epoch, logs);
    check_live("fit() (after on_epoch_end)");
    train_logs = logs;
  }
  feed.stop();
  callbacks.train_end(train_logs);
  return callbacks.history;
}

std::map<std::string, double> Model::evaluate(const Generator& generator, int64_t steps, int64_t batch_size) {
  check_live("evaluate()");
  if (!compiled_) throw StateError(not_compiled_message("evaluate()"));
  if (!generator) throw ValueError("evaluate: the generator is empty; give a callable returning std::optional<Batch>");
  if (steps < 0)
    throw ValueError("steps must be >= 0 (0: until the generator returns nothing); got " + std::to_string(steps));
  if (batch_size < 1) throw ValueError("batch_size must be at least 1; got " + std::to_string(batch_size));
  BatchFeed feed(generator, 0, "the generator");
  return evaluate_feed(*this, feed, steps, batch_size, -1);
}

std::vector<Tensor> Model::predict(const Generator& generator, int64_t steps) {
  check_live("predict()");
  if (!generator) throw ValueError("predict: the generator is empty; give a callable returning std::optional<Batch>");
  if (steps < 0)
    throw ValueError("steps must be >= 0 (0: until the generator returns nothing); got " + std::to_string(steps));
  BatchFeed feed(generator, 0, "the generator");
  feed.start_epoch(steps, -1);
  std::vector<std::vector<Tensor>> parts;
  int64_t rows = 0;
  while (steps == 0 || int64_t(parts.size()) < steps) {
    std::optional<Batch> b = feed.next();
    if (!b) break;
    try {
      parts.push_back(predict(std::span<const Tensor>(b->x), 256));
    } catch (const Error&) {
      rethrow_prefixed("predict batch " + std::to_string(parts.size() + 1) + ": ");
    }
    rows += parts.back()[0].shape()[0];
  }
  if (parts.empty()) throw ValueError("predict: the generator gave no batch");
  std::vector<Tensor> out;
  for (size_t o = 0; o < parts[0].size(); ++o) {
    Tensor t = Tensor::empty(parts[0][o].shape().with_rows(rows));
    int64_t at = 0;
    for (const auto& p : parts) {
      const int64_t r = p[o].shape()[0];
      t.rows(at, at + r).copy_from(p[o]);
      at += r;
    }
    out.push_back(t);
  }
  return out;
}

}  // namespace tensorgrad::nn
