// The epoch and fit levels of the training loop (nn/training_loop.h), and
// the callback list they call. Both Model::fit overloads end here.
#include "tensorgrad/nn/training_loop.h"

#include <cmath>
#include <limits>
#include <stdexcept>

#include "nn/prefixed_error.h"
#include "tensorgrad/core/error.h"
#include "tensorgrad/core/logging.h"

namespace tensorgrad::nn {

CallbackList::CallbackList(Model& model, const std::vector<std::shared_ptr<Callback>>& callbacks, int verbose,
                           int epochs, int64_t steps, const LoopGroup* group) {
  ProgbarLogger* progbar = nullptr;
  for (size_t i = 0; i < callbacks.size(); ++i) {
    if (!callbacks[i]) throw ValueError("fit: callbacks[" + std::to_string(i) + "] is null");
    list_.push_back(callbacks[i].get());
    if (auto* p = dynamic_cast<ProgbarLogger*>(callbacks[i].get())) progbar = p;
  }
  list_.push_back(&history);
  if (!progbar && verbose > 0) {
    own_progbar_ = std::make_unique<ProgbarLogger>(verbose);
    progbar = own_progbar_.get();
    list_.push_back(progbar);
  }
  if (progbar) progbar->set_params(epochs, steps);
  for (Callback* c : list_) {
    c->set_model(&model);
    c->set_fit_callbacks(&list_);
    c->set_rank(group ? group->member() : 0, group ? group->members() : 1);
  }
  model.set_stop_training(false);
  model.take_initial_epoch();  // one set before this fit does not move it
}

CallbackList::~CallbackList() {
  for (Callback* c : list_) {
    c->set_model(nullptr);
    c->set_fit_callbacks(nullptr);
    c->set_rank(0, 1);
  }
}

void CallbackList::on_train_begin(Logs& logs) { for (Callback* c : list_) c->on_train_begin(logs); }
void CallbackList::on_train_end(Logs& logs) { for (Callback* c : list_) c->on_train_end(logs); }
void CallbackList::on_epoch_begin(int epoch, Logs& logs) { for (Callback* c : list_) c->on_epoch_begin(epoch, logs); }
void CallbackList::on_epoch_end(int epoch, Logs& logs) { for (Callback* c : list_) c->on_epoch_end(epoch, logs); }
void CallbackList::on_train_batch_begin(int64_t batch, Logs& logs) {
  for (Callback* c : list_) c->on_train_batch_begin(batch, logs);
}
void CallbackList::on_train_batch_end(int64_t batch, Logs& logs) {
  for (Callback* c : list_) c->on_train_batch_end(batch, logs);
}
void CallbackList::on_test_begin(Logs& logs) { for (Callback* c : list_) c->on_test_begin(logs); }
void CallbackList::on_test_end(Logs& logs) { for (Callback* c : list_) c->on_test_end(logs); }

EpochLogs::EpochLogs(const Model& model) : model_(&model) {
  if (!model.compiled())
    throw StateError("EpochLogs: the model is not compiled; its losses and metrics name the logs. Call compile() first");
  output_loss_sums_.assign(model.output_names().size(), 0.0);
  size_t metrics = 0;  // sized up front: every member's sums line up in add_up
  for (const auto& names : model.output_metrics()) metrics += names.size();
  metric_sums_.assign(metrics, 0.0);
}

void EpochLogs::add(const StepResult& r) {
  const double rows = double(r.rows);
  loss_sum_ += double(r.loss) * rows;
  for (size_t i = 0; i < output_loss_sums_.size() && i < r.output_losses.size(); ++i)
    output_loss_sums_[i] += double(r.output_losses[i]) * rows;
  if (r.metric_sums.size() > metric_sums_.size()) metric_sums_.resize(r.metric_sums.size(), 0.0);
  for (size_t m = 0; m < r.metric_sums.size(); ++m) metric_sums_[m] += r.metric_sums[m];
  rows_ += r.rows;
  ++batches_;
}

Logs EpochLogs::logs() const {
  Logs l = model_->metric_logs(loss_sum_, output_loss_sums_, metric_sums_, std::max<int64_t>(rows_, 1));
  if (rows_ == 0)
    for (auto& [k, v] : l) v = std::numeric_limits<double>::quiet_NaN();
  return l;
}

EpochLogs EpochLogs::reduced(LoopGroup& group) const {
  std::vector<double> sums{loss_sum_, double(rows_), double(batches_)};
  sums.insert(sums.end(), output_loss_sums_.begin(), output_loss_sums_.end());
  sums.insert(sums.end(), metric_sums_.begin(), metric_sums_.end());
  group.add_up(std::span<double>(sums));
  EpochLogs out(*this);
  out.loss_sum_ = sums[0];
  out.rows_ = int64_t(sums[1]);
  out.batches_ = int64_t(sums[2]);
  std::copy(sums.begin() + 3, sums.begin() + 3 + std::ptrdiff_t(output_loss_sums_.size()), out.output_loss_sums_.begin());
  std::copy(sums.end() - std::ptrdiff_t(metric_sums_.size()), sums.end(), out.metric_sums_.begin());
  return out;
}

namespace {
std::string batch_name(const BatchSource& source, int64_t number, int epoch) {
  return source.label() + " " + std::to_string(number) +
         (epoch >= 0 ? " of epoch " + std::to_string(epoch + 1) : std::string()) + ": ";
}

// Logs the divergence warning the first time an epoch's loss is not finite.
void warn_if_diverged(const Logs& logs, int epoch, bool& warned) {
  auto it = logs.find("loss");
  if (warned || it == logs.end() || std::isfinite(it->second)) return;
  warned = true;  // once per fit; Keras goes on silently
  log_message(LogLevel::Warning, "fit: the training loss is " + std::string(std::isnan(it->second) ? "NaN" : "infinite") +
                                     " in epoch " + std::to_string(epoch + 1) +
                                     ": training diverged. Lower the learning rate, scale the inputs, or clip the "
                                     "gradients (add_gradient_hook)");
}

// The hooks may compile, free or move the model: after each, fit goes on
// only with a live one.
void check_live_after(const Model& model, const char* hook) {
  if (model.released())
    throw StateError(std::string("fit(): the model was released (free() or a move) in ") + hook +
                     "; nothing more can run on it");
}
}  // namespace

EpochLogs train_epoch(Model& model, BatchSource& source, int epoch, CallbackList& callbacks,
                      const EpochOptions& options) {
  if (options.steps < 0) throw ValueError("train_epoch: steps must be >= 0; got " + std::to_string(options.steps));
  EpochLogs logs(model);
  LoopGroup* const group = options.group;
  source.start_epoch(epoch, options.steps);
  static const Batch no_rows;  // a member without a batch: train_on_batch joins the update
  while (group || !model.stop_training()) {
    // In a group, a member at its limit says "no batch" rather than leave
    // alone, so that no member waits for it in the agreement.
    const bool at_limit = options.steps > 0 && logs.batches() >= options.steps;
    if (at_limit && !group) break;
    const Batch* batch = at_limit || (group && model.stop_training()) ? nullptr : source.next();
    if (group) {
      bool more = batch != nullptr, stop = model.stop_training();
      group->agree(more, stop);
      if (stop) model.set_stop_training(true);
      if (stop || !more) break;
      if (!batch) batch = &no_rows;
    }
    if (!batch) break;
    Logs batch_logs;
    callbacks.on_train_batch_begin(logs.batches(), batch_logs);
    check_live_after(model, "on_train_batch_begin");
    if (!group && model.stop_training()) break;  // in a group: at the next agreement
    try {
      logs.add(model.train_on_batch(*batch, source.batch_size(), options.nbatch_logical));
    } catch (const Error&) {
      rethrow_prefixed(batch_name(source, logs.batches() + 1, epoch));
    }
    check_live_after(model, "a gradient hook");
    batch_logs = group ? logs.reduced(*group).logs() : logs.logs();
    callbacks.on_train_batch_end(logs.batches() - 1, batch_logs);
    check_live_after(model, "on_train_batch_end");
  }
  // A period the epoch left incomplete (a generator's batches need not fill
  // the last one) is applied now: no rows carry into the next epoch or fit.
  if (options.nbatch_logical > 0 && logs.batches() > 0)
    model.optimizer_context(source.batch_size(), options.nbatch_logical).apply_pending_update();
  return logs;
}

Logs test_epoch(Model& model, BatchSource& source, int64_t steps, int epoch, LoopGroup* group, bool* warned) {
  if (steps < 0) throw ValueError("test_epoch: steps must be >= 0; got " + std::to_string(steps));
  EpochLogs logs(model);
  source.start_epoch(epoch, steps);
  while (steps == 0 || logs.batches() < steps) {
    const Batch* batch = source.next();
    if (!batch) break;
    try {
      // The source's own option in the hint (a validation batch is not the training batch).
      const int64_t rows = batch->x.empty() ? 0 : batch->x[0].shape().rank() > 0 ? batch->x[0].shape()[0] : 0;
      if (rows > source.batch_size())
        throw ShapeError("the batch has " + std::to_string(rows) + " rows, more than " + source.batch_size_option() +
                         " " + std::to_string(source.batch_size()) + " (graphs are planned for it): raise " +
                         source.batch_size_option());
      if (!batch->x.empty() || !group) logs.add(model.test_on_batch(*batch, source.batch_size()));
    } catch (const Error&) {
      rethrow_prefixed(batch_name(source, logs.batches() + 1, epoch));
    }
  }
  if (steps > 0 && logs.batches() < steps && !(warned && *warned)) {
    if (warned) *warned = true;
    log_message(LogLevel::Warning,
                (epoch >= 0 ? "epoch " + std::to_string(epoch + 1) + ": " : std::string()) + "the " + source.noun() +
                    " returned nothing after " + std::to_string(logs.batches()) + " of " + std::to_string(steps) +
                    " requested batches; the means cover those only" +
                    (warned ? " (said once per fit). If the source can end on its own, leave validation_steps at 0"
                            : ". If the source can end on its own, leave steps at 0"));
  }
  return group ? logs.reduced(*group).logs() : logs.logs();
}

namespace {
// Whether any member asked to stop (every member gets the same answer).
bool any_stops(Model& model, LoopGroup* group) {
  if (!group) return model.stop_training();
  bool more = true, stop = model.stop_training();
  group->agree(more, stop);
  if (stop) model.set_stop_training(true);
  return stop;
}

History run_epochs(Model& model, BatchSource& train, BatchSource* validation, const LoopOptions& opt) {
  LoopGroup* const group = opt.group.get();
  CallbackList callbacks(model, opt.callbacks, opt.verbose, opt.epochs,
                         opt.steps_per_epoch > 0 ? opt.steps_per_epoch : train.batches_per_epoch(), group);
  Logs train_logs;
  callbacks.on_train_begin(train_logs);
  check_live_after(model, "on_train_begin");
  // A callback may have moved the start (io::BackupAndRestore resuming).
  int first_epoch = model.take_initial_epoch().value_or(opt.initial_epoch);
  if (group) group->start(model, first_epoch);  // every member from the first's state and epoch
  bool diverged = false, validation_short_warned = false;
  for (int epoch = first_epoch; epoch < opt.epochs && !any_stops(model, group); ++epoch) {
    Logs logs;
    callbacks.on_epoch_begin(epoch, logs);
    check_live_after(model, "on_epoch_begin");
    const EpochLogs run =
        train_epoch(model, train, epoch, callbacks, {opt.steps_per_epoch, opt.nbatch_logical, group});
    if (run.batches() == 0) {
      if (!model.stop_training())
        log_message(LogLevel::Warning,
                    "epoch " + std::to_string(epoch + 1) + ": the " + train.noun() + " returned nothing at its first call; trained " + std::to_string(epoch - first_epoch) +
                        " of " + std::to_string(opt.epochs - first_epoch) +
                        " epochs. If the source is finite and now exhausted, lower epochs; if it was meant to "
                        "restart, reset its state before returning nothing");
      break;
    }
    if (opt.steps_per_epoch > 0 && run.batches() < opt.steps_per_epoch && !model.stop_training())
      log_message(LogLevel::Warning,
                  "epoch " + std::to_string(epoch + 1) + ": the " + train.noun() + " returned nothing after " +
                      std::to_string(run.batches()) + " of " + std::to_string(opt.steps_per_epoch) +
                      " requested batches. The epoch is short; if the source can end on its own, leave "
                      "steps_per_epoch at 0 and let nothing close the epoch");
    for (auto& [k, v] : group ? run.reduced(*group).logs() : run.logs()) logs[k] = v;
    warn_if_diverged(logs, epoch, diverged);
    if (validation) {
      Logs test_logs;
      callbacks.on_test_begin(test_logs);
      check_live_after(model, "on_test_begin");
      test_logs = test_epoch(model, *validation, opt.validation_steps, epoch, group, &validation_short_warned);
      callbacks.on_test_end(test_logs);
      check_live_after(model, "on_test_end");
      for (auto& [k, v] : test_logs) logs["val_" + k] = v;
    }
    callbacks.on_epoch_end(epoch, logs);
    check_live_after(model, "on_epoch_end");
    train_logs = logs;
  }
  callbacks.on_train_end(train_logs);
  // Every member leaves together: the first's last writes (a backup, a log)
  // are done before any member can start reading them in a next fit.
  if (group) group->finish();
  return std::move(callbacks.history);
}
}  // namespace

History fit_loop(Model& model, BatchSource& train, BatchSource* validation, const LoopOptions& opt) {
  if (opt.epochs < 0) throw ValueError("epochs must be >= 0; got " + std::to_string(opt.epochs));
  if (opt.initial_epoch < 0 || (opt.epochs > 0 && opt.initial_epoch >= opt.epochs))
    throw ValueError("initial_epoch must be in [0, epochs) = [0, " + std::to_string(opt.epochs) + "); got " +
                     std::to_string(opt.initial_epoch) + " (epochs initial_epoch .. epochs - 1 run, as Keras)");
  if (opt.steps_per_epoch < 0)
    throw ValueError("steps_per_epoch must be >= 0 (0: until the source returns nothing); got " +
                     std::to_string(opt.steps_per_epoch));
  if (opt.validation_steps < 0)
    throw ValueError("validation_steps must be >= 0 (0: until the validation source returns nothing); got " +
                     std::to_string(opt.validation_steps));
  if (opt.verbose < 0 || opt.verbose > 2)
    throw ValueError("verbose must be 0 (silent), 1 (progress bar) or 2 (one line per epoch); got " +
                     std::to_string(opt.verbose));
  // Whatever leaves the loop, the sources' background work ends first.
  struct StopBoth {
    BatchSource& a;
    BatchSource* b;
    ~StopBoth() {
      a.stop();
      if (b) b->stop();
    }
  } stop{train, validation};
  if (!opt.group) return run_epochs(model, train, validation, opt);
  return opt.group->run(model, train, validation, opt, [&] { return run_epochs(model, train, validation, opt); });
}

}  // namespace tensorgrad::nn
