// The epoch and fit levels of the training loop (nn/training_loop.h), and
// the callback list they call. Both Model::fit overloads end here.
#include "tensorgrad/nn/training_loop.h"

#include <cmath>
#include <limits>
#include <stdexcept>

#include "nn/prefixed_error.h"
#include "tensorgrad/nn/data_parallel.h"
#include "tensorgrad/core/error.h"
#include "tensorgrad/core/logging.h"

namespace tensorgrad::nn {

CallbackList::CallbackList(Model& model, const std::vector<std::shared_ptr<Callback>>& callbacks, int verbose,
                           int epochs, int64_t steps, const dist::Communicator* comm) {
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
    c->set_rank(comm ? comm->rank() : 0, comm ? comm->size() : 1);
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
  size_t metrics = 0;  // sized up front: every rank's sums line up in a reduction
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

EpochLogs EpochLogs::reduced(dist::Communicator& comm) const {
  std::vector<double> sums{loss_sum_, double(rows_), double(batches_)};
  sums.insert(sums.end(), output_loss_sums_.begin(), output_loss_sums_.end());
  sums.insert(sums.end(), metric_sums_.begin(), metric_sums_.end());
  comm.reduce_broadcast(std::span<double>(sums));
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
  dist::Communicator* const comm = options.communicator;
  source.start_epoch(epoch, options.steps);
  static const Batch no_rows;  // a rank's empty share: train_on_batch joins the update
  while (comm || !model.stop_training()) {
    // Data-parallel: a rank at its limit votes "no batch" rather than leave
    // alone, so that no rank waits for it in the vote.
    const bool at_limit = options.steps > 0 && logs.batches() >= options.steps;
    if (at_limit && !comm) break;
    const Batch* batch = at_limit || (comm && model.stop_training()) ? nullptr : source.next();
    if (comm) {
      // Whether any rank has a batch, and whether any asked to stop.
      double votes[2] = {batch ? 1.0 : 0.0, model.stop_training() ? 1.0 : 0.0};
      comm->reduce_broadcast(std::span<double>(votes, 2));
      if (votes[1] > 0.0) model.set_stop_training(true);
      if (votes[1] > 0.0 || votes[0] == 0.0) break;
      if (!batch) batch = &no_rows;
    }
    if (!batch) break;
    Logs batch_logs;
    callbacks.on_train_batch_begin(logs.batches(), batch_logs);
    check_live_after(model, "on_train_batch_begin");
    if (!comm && model.stop_training()) break;  // data-parallel: at the next agreement
    try {
      logs.add(model.train_on_batch(*batch, source.batch_size(), options.nbatch_logical));
    } catch (const Error&) {
      rethrow_prefixed(batch_name(source, logs.batches() + 1, epoch));
    }
    check_live_after(model, "a gradient hook");
    batch_logs = comm ? logs.reduced(*comm).logs() : logs.logs();
    callbacks.on_train_batch_end(logs.batches() - 1, batch_logs);
    check_live_after(model, "on_train_batch_end");
  }
  // A period the epoch left incomplete (a generator's batches need not fill
  // the last one) is applied now: no rows carry into the next epoch or fit.
  if (options.nbatch_logical > 0 && logs.batches() > 0)
    model.optimizer_context(source.batch_size(), options.nbatch_logical).apply_pending_update();
  return logs;
}

Logs test_epoch(Model& model, BatchSource& source, int64_t steps, int epoch, dist::Communicator* comm, bool* warned) {
  if (steps < 0) throw ValueError("test_epoch: steps must be >= 0; got " + std::to_string(steps));
  EpochLogs logs(model);
  source.start_epoch(epoch, steps);
  while (steps == 0 || logs.batches() < steps) {
    const Batch* batch = source.next();
    if (!batch) break;
    try {
      if (!batch->x.empty() || !comm) logs.add(model.test_on_batch(*batch, source.batch_size()));
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
  return comm ? logs.reduced(*comm).logs() : logs.logs();
}

namespace {
// Data-parallel: the loop's shape must be the same on every rank (else one
// rank would leave a loop the others go on with, and wait forever).
void check_same_loop(dist::Communicator& comm, const BatchSource& train, const BatchSource* validation,
                     const LoopOptions& opt) {
  check_ranks_agree(comm,
                    {{"epochs", std::to_string(opt.epochs)},
                     {"initial_epoch", std::to_string(opt.initial_epoch)},
                     {"steps_per_epoch", std::to_string(opt.steps_per_epoch)},
                     {"validation_steps", std::to_string(opt.validation_steps)},
                     {"validation data", validation ? "given" : "none"},
                     {"batches per epoch", std::to_string(train.batches_per_epoch())}},
                    "fits",
                    "Every rank must call fit with the same options and the same data (its share is taken from "
                    "the whole)");
}

// Data-parallel: whether any rank asked to stop (every rank gets the same answer).
bool any_rank_stops(Model& model, dist::Communicator* comm) {
  if (!comm) return model.stop_training();
  double stop = model.stop_training() ? 1.0 : 0.0;
  comm->reduce_broadcast(std::span<double>(&stop, 1));
  if (stop > 0.0) model.set_stop_training(true);
  return stop > 0.0;
}

History run_epochs(Model& model, BatchSource& train, BatchSource* validation, const LoopOptions& opt) {
  dist::Communicator* const comm = opt.communicator.get();
  CallbackList callbacks(model, opt.callbacks, opt.verbose, opt.epochs,
                         opt.steps_per_epoch > 0 ? opt.steps_per_epoch : train.batches_per_epoch(), comm);
  Logs train_logs;
  callbacks.on_train_begin(train_logs);
  check_live_after(model, "on_train_begin");
  // A callback may have moved the start (io::BackupAndRestore resuming).
  int first_epoch = model.take_initial_epoch().value_or(opt.initial_epoch);
  if (comm) {
    // Every rank starts from rank 0's state and epoch (after a restore too).
    broadcast_training_state(model, *comm);
    int64_t first = first_epoch;
    comm->broadcast_bytes(std::as_writable_bytes(std::span<int64_t>(&first, 1)), 0);
    first_epoch = int(first);
  }
  bool diverged = false, validation_short_warned = false;
  for (int epoch = first_epoch; epoch < opt.epochs && !any_rank_stops(model, comm); ++epoch) {
    Logs logs;
    callbacks.on_epoch_begin(epoch, logs);
    check_live_after(model, "on_epoch_begin");
    const EpochLogs run =
        train_epoch(model, train, epoch, callbacks, {opt.steps_per_epoch, opt.nbatch_logical, comm});
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
    for (auto& [k, v] : comm ? run.reduced(*comm).logs() : run.logs()) logs[k] = v;
    warn_if_diverged(logs, epoch, diverged);
    if (validation) {
      Logs test_logs;
      callbacks.on_test_begin(test_logs);
      check_live_after(model, "on_test_begin");
      test_logs = test_epoch(model, *validation, opt.validation_steps, epoch, comm, &validation_short_warned);
      callbacks.on_test_end(test_logs);
      check_live_after(model, "on_test_end");
      for (auto& [k, v] : test_logs) logs["val_" + k] = v;
    }
    callbacks.on_epoch_end(epoch, logs);
    check_live_after(model, "on_epoch_end");
    train_logs = logs;
  }
  callbacks.on_train_end(train_logs);
  // Every rank leaves together: rank 0's last writes (a backup, a log) are
  // done before any rank can start reading them in a next fit.
  if (comm) comm->barrier();
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
  if (!opt.communicator) return run_epochs(model, train, validation, opt);
  // Fits and models that differ are refused here, by every rank together (a
  // ValueError, not an abort); after on_train_begin the state is broadcast
  // again, as a restore may have changed it.
  check_same_loop(*opt.communicator, train, validation, opt);
  broadcast_training_state(model, *opt.communicator);
  try {
    // The model reduces its gradients over the ranks for this loop only.
    struct Distributed {
      Model& model;
      std::shared_ptr<dist::Communicator> before;
      ~Distributed() {
        if (!model.released() && model.compiled()) model.set_communicator(before);
      }
    } distributed{model, model.communicator()};
    model.set_communicator(opt.communicator);
    return run_epochs(model, train, validation, opt);
  } catch (const std::exception& e) {
    abort_job(*opt.communicator, "fit", e);
  } catch (...) {
    abort_job(*opt.communicator, "fit", std::runtime_error("an exception not derived from std::exception"));
  }
}

}  // namespace tensorgrad::nn
