#include "tensorgrad/nn/callbacks.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>

#include "nn/callback_state.h"
#include "nn/progress.h"
#include "tensorgrad/core/error.h"
#include "tensorgrad/core/logging.h"
#include "tensorgrad/nn/model.h"

namespace tensorgrad::nn {

namespace {
bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

// Keras 3 resolves "auto" from the metric's direction: losses and errors
// fall, everything else (accuracies) rises.
bool monitor_maximizes(const std::string& monitor, MonitorMode mode) {
  switch (mode) {
    case MonitorMode::Min: return false;
    case MonitorMode::Max: return true;
    case MonitorMode::Auto: {
      std::string key = monitor.rfind("val_", 0) == 0 ? monitor.substr(4) : monitor;
      for (const char* falls : {"loss", "mae", "mse", "rmse", "error"})
        if (ends_with(key, falls)) return false;
      return true;
    }
  }
  throw ValueError("unknown MonitorMode " + std::to_string(int(mode)) + "; give Auto, Min or Max");
}

namespace {

// The monitored value, or null after a warning (once per training run, as
// Keras warns: `warned` is the callback's flag, reset at on_train_begin).
const double* find(const Logs& logs, const std::string& key, const char* who, bool& warned) {
  auto it = logs.find(key);
  if (it != logs.end()) return &it->second;
  if (warned) return nullptr;
  warned = true;
  std::string keys;
  for (auto& [k, v] : logs) keys += (keys.empty() ? "" : ", ") + k;
  log_message(LogLevel::Warning, std::string(who) + " conditioned on '" + key +
                                     "', which is not in the logs (available: " + keys + "); skipping");
  return nullptr;
}
}  // namespace

Model& Callback::model() const {
  if (!model_) throw StateError("Callback::model(): the callback is not attached to a model (only inside fit)");
  return *model_;
}

const std::vector<Callback*>& Callback::fit_callbacks() const {
  static const std::vector<Callback*> none;
  return fit_callbacks_ ? *fit_callbacks_ : none;
}

// ---- History ----

const std::vector<double>& History::operator[](const std::string& key) const {
  auto it = history.find(key);
  if (it == history.end()) {
    std::string keys;
    for (auto& [k, v] : history) keys += (keys.empty() ? "" : ", ") + k;
    throw IndexError("history has no '" + key + "'; it has: " + keys);
  }
  return it->second;
}

void History::on_train_begin(Logs&) { epoch.clear(); }

void History::on_epoch_end(int e, Logs& logs) {
  epoch.push_back(e);
  for (auto& [k, v] : logs) history[k].push_back(v);
}

// ---- EarlyStopping ----

EarlyStopping::EarlyStopping(const EarlyStoppingOptions& options)
    : monitor_(options.monitor),
      min_delta_(std::fabs(options.min_delta)),
      patience_(options.patience),
      maximize_(monitor_maximizes(monitor_, options.mode)),
      baseline_(options.baseline),
      restore_best_weights_(options.restore_best_weights),
      start_from_epoch_(options.start_from_epoch) {
  if (patience_ < 0) throw ValueError("EarlyStopping: patience must be >= 0; got " + std::to_string(patience_));
  if (start_from_epoch_ < 0)
    throw ValueError("EarlyStopping: start_from_epoch must be >= 0; got " + std::to_string(start_from_epoch_));
}

bool EarlyStopping::improves(double value, double reference) const {
  return maximize_ ? value - min_delta_ > reference : value + min_delta_ < reference;
}

void EarlyStopping::on_train_begin(Logs&) {
  warned_ = false;
  wait_ = 0;
  stopped_epoch_ = 0;
  best_epoch_ = 0;
  best_.reset();
  best_weights_.clear();
}

void EarlyStopping::on_epoch_end(int epoch, Logs& logs) {
  const double* current = find(logs, monitor_, "EarlyStopping", warned_);
  if (!current || epoch < start_from_epoch_) return;
  auto snapshot = [&] {
    best_weights_ = model().get_weights();
    best_epoch_ = epoch;
  };
  if (restore_best_weights_ && best_weights_.empty()) snapshot();
  ++wait_;
  if (!best_ || improves(*current, *best_)) {
    best_ = *current;
    best_epoch_ = epoch;
    if (restore_best_weights_) snapshot();
    // The count restarts only when the value beats the baseline too.
    if (!baseline_ || improves(*current, *baseline_)) wait_ = 0;
    return;
  }
  if (wait_ >= patience_ && epoch > 0) {
    stopped_epoch_ = epoch;
    model().set_stop_training(true);
  }
}

void EarlyStopping::on_train_end(Logs&) {
  if (restore_best_weights_ && !best_weights_.empty()) model().set_weights(best_weights_);
}

CallbackState EarlyStopping::get_state() const {
  CallbackState s;
  s.values = {{"wait", wait_}, {"stopped_epoch", stopped_epoch_}, {"best_epoch", best_epoch_}};
  if (best_) s.values["best"] = *best_;
  for (size_t i = 0; i < best_weights_.size(); ++i)
    s.tensors.emplace_back("best_weights/" + std::to_string(i), best_weights_[i].clone());
  return s;
}

void EarlyStopping::set_state(const CallbackState& state) {
  detail::StateReader r(state, "EarlyStopping");
  const int wait = r.count("wait"), stopped = r.count("stopped_epoch"), best_epoch = r.count("best_epoch");
  const std::optional<double> best = r.optional("best");
  r.done(restore_best_weights_);
  std::vector<Tensor> weights;
  for (size_t i = 0; i < state.tensors.size(); ++i) {
    const auto& [name, t] = state.tensors[i];
    if (name != "best_weights/" + std::to_string(i) || !t.defined())
      throw ValueError("EarlyStopping.set_state: tensor " + std::to_string(i) + " of the state is '" + name +
                       "'" + (t.defined() ? "" : " (undefined)") + ", expected a defined 'best_weights/" +
                       std::to_string(i) + "'; give a state from EarlyStopping.get_state()");
    weights.push_back(t.clone());
  }
  wait_ = wait;
  stopped_epoch_ = stopped;
  best_epoch_ = best_epoch;
  best_ = best;
  best_weights_ = std::move(weights);
}

// ---- ReduceLROnPlateau ----

ReduceLROnPlateau::ReduceLROnPlateau(const ReduceLROnPlateauOptions& options)
    : monitor_(options.monitor),
      factor_(options.factor),
      patience_(options.patience),
      maximize_(monitor_maximizes(monitor_, options.mode)),
      min_delta_(options.min_delta),
      cooldown_(options.cooldown),
      min_lr_(options.min_lr) {
  if (!(factor_ > 0.0 && factor_ < 1.0))
    throw ValueError("ReduceLROnPlateau: factor must be in (0, 1) (it multiplies the rate); got " +
                     std::to_string(factor_));
  if (patience_ < 0 || cooldown_ < 0 || !(min_lr_ >= 0.0))
    throw ValueError("ReduceLROnPlateau: patience, cooldown and min_lr must be >= 0");
}

void ReduceLROnPlateau::on_train_begin(Logs&) {
  warned_ = false;
  wait_ = 0;
  cooldown_counter_ = 0;
  best_ = maximize_ ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
}

void ReduceLROnPlateau::on_epoch_end(int, Logs& logs) {
  logs["learning_rate"] = model().learning_rate();
  const double* current = find(logs, monitor_, "ReduceLROnPlateau", warned_);
  if (!current) return;
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    wait_ = 0;
  }
  const bool better = maximize_ ? *current > best_ + min_delta_ : *current < best_ - min_delta_;
  if (better) {
    best_ = *current;
    wait_ = 0;
  } else if (cooldown_counter_ == 0 && ++wait_ >= patience_) {  // the cooldown as it is after this epoch's tick
    const double old_lr = model().learning_rate();
    if (old_lr > double(float(min_lr_))) {
      model().set_learning_rate(std::max(old_lr * factor_, min_lr_));
      cooldown_counter_ = cooldown_;
      wait_ = 0;
    }
  }
}

CallbackState ReduceLROnPlateau::get_state() const {
  CallbackState s;
  s.values = {{"wait", wait_}, {"cooldown_counter", cooldown_counter_}, {"best", best_}};
  return s;
}

void ReduceLROnPlateau::set_state(const CallbackState& state) {
  detail::StateReader r(state, "ReduceLROnPlateau");
  const int wait = r.count("wait"), cooldown_counter = r.count("cooldown_counter");
  const double best = r.required("best");
  r.done();
  if (cooldown_counter > cooldown_)
    throw ValueError("ReduceLROnPlateau.set_state: 'cooldown_counter' is " + std::to_string(cooldown_counter) +
                     ", more than this callback's cooldown " + std::to_string(cooldown_) +
                     "; give a state from a ReduceLROnPlateau of the same arguments");
  wait_ = wait;
  cooldown_counter_ = cooldown_counter;
  best_ = best;
}

// ---- LearningRateScheduler ----

LearningRateScheduler::LearningRateScheduler(std::function<double(int, double)> schedule)
    : schedule_(std::move(schedule)) {
  if (!schedule_) throw ValueError("LearningRateScheduler: the schedule is empty");
}

void LearningRateScheduler::on_epoch_begin(int epoch, Logs&) {
  const double lr = schedule_(epoch, model().learning_rate());
  if (!(lr > 0.0) || !std::isfinite(lr))
    throw ValueError("LearningRateScheduler: the schedule returned " + std::to_string(lr) + " for epoch " +
                     std::to_string(epoch) + "; a learning rate must be positive and finite");
  model().set_learning_rate(lr);
}

void LearningRateScheduler::on_epoch_end(int, Logs& logs) { logs["learning_rate"] = model().learning_rate(); }

// ---- TerminateOnNaN ----

void TerminateOnNaN::on_train_batch_end(int64_t batch, Logs& logs) {
  auto it = logs.find("loss");
  if (it == logs.end() || std::isfinite(it->second)) return;
  log_message(LogLevel::Warning, "TerminateOnNaN: batch " + std::to_string(batch) + ": invalid loss (" +
                                     (std::isnan(it->second) ? "NaN" : "infinity") + "), terminating training");
  model().set_stop_training(true);
}

// ---- CSVLogger ----

CSVLogger::CSVLogger(const CSVLoggerOptions& options)
    : filename_(options.filename), separator_(options.separator), append_(options.append) {}

CSVLogger::~CSVLogger() {
  if (file_) std::fclose(file_);
}

void CSVLogger::on_train_begin(Logs&) {
  if (file_) std::fclose(file_);
  file_ = nullptr;
  if (rank() != 0) return;  // data-parallel: rank 0 writes the log
  write_header_ = true;
  if (append_) {
    if (std::FILE* existing = std::fopen(filename_.c_str(), "r")) {
      write_header_ = std::fgetc(existing) == EOF;
      std::fclose(existing);
    }
  }
  file_ = std::fopen(filename_.c_str(), append_ ? "a" : "w");
  if (!file_)
    throw IOError("CSVLogger: cannot open '" + filename_ + "' for writing: " + std::strerror(errno) +
                  "; check the directory exists and is writable");
  keys_.clear();
}

void CSVLogger::on_epoch_end(int epoch, Logs& logs) {
  if (!file_) return;
  if (keys_.empty()) {
    for (auto& [k, v] : logs) keys_.push_back(k);  // std::map: sorted, as Keras sorts them
    if (write_header_) {
      std::fprintf(file_, "epoch");
      for (const std::string& k : keys_) std::fprintf(file_, "%c%s", separator_, k.c_str());
      std::fprintf(file_, "\n");
    }
  }
  std::fprintf(file_, "%d", epoch);
  for (const std::string& k : keys_) {
    auto it = logs.find(k);
    if (it == logs.end()) std::fprintf(file_, "%cNA", separator_);
    else std::fprintf(file_, "%c%.17g", separator_, it->second);
  }
  std::fprintf(file_, "\n");
  std::fflush(file_);
}

void CSVLogger::on_train_end(Logs&) {
  if (file_) std::fclose(file_);
  file_ = nullptr;
}

// ---- LambdaCallback ----

LambdaCallback::LambdaCallback(const LambdaCallbackOptions& options)
    : on_train_begin_fn(options.on_train_begin),
      on_train_end_fn(options.on_train_end),
      on_epoch_begin_fn(options.on_epoch_begin),
      on_epoch_end_fn(options.on_epoch_end),
      on_train_batch_begin_fn(options.on_train_batch_begin),
      on_train_batch_end_fn(options.on_train_batch_end) {}

void LambdaCallback::on_train_begin(Logs& logs) {
  if (on_train_begin_fn) on_train_begin_fn(logs);
}
void LambdaCallback::on_train_end(Logs& logs) {
  if (on_train_end_fn) on_train_end_fn(logs);
}
void LambdaCallback::on_epoch_begin(int epoch, Logs& logs) {
  if (on_epoch_begin_fn) on_epoch_begin_fn(epoch, logs);
}
void LambdaCallback::on_epoch_end(int epoch, Logs& logs) {
  if (on_epoch_end_fn) on_epoch_end_fn(epoch, logs);
}
void LambdaCallback::on_train_batch_begin(int64_t batch, Logs& logs) {
  if (on_train_batch_begin_fn) on_train_batch_begin_fn(batch, logs);
}
void LambdaCallback::on_train_batch_end(int64_t batch, Logs& logs) {
  if (on_train_batch_end_fn) on_train_batch_end_fn(batch, logs);
}

// ---- ProgbarLogger ----

ProgbarLogger::ProgbarLogger(int verbose) : verbose_(verbose) {
  if (verbose < 0 || verbose > 2)
    throw ValueError("ProgbarLogger: verbose must be 0, 1 or 2; got " + std::to_string(verbose));
}
ProgbarLogger::~ProgbarLogger() = default;

void ProgbarLogger::set_params(int epochs, int64_t steps) {
  epochs_ = epochs;
  steps_ = steps;
  printer_ = std::make_unique<ProgressPrinter>(verbose_, epochs);
}

void ProgbarLogger::on_epoch_begin(int epoch, Logs&) {
  if (rank() != 0) return;  // data-parallel: rank 0 prints
  if (!printer_) printer_ = std::make_unique<ProgressPrinter>(verbose_, epochs_);
  printer_->begin_epoch(epoch, steps_);
}

void ProgbarLogger::on_train_batch_end(int64_t batch, Logs& logs) {
  if (verbose_ == 1 && printer_ && rank() == 0) printer_->step(batch + 1, metrics_text(logs));
}

void ProgbarLogger::on_epoch_end(int, Logs& logs) {
  if (printer_ && rank() == 0) printer_->end_epoch(metrics_text(logs));
}

std::string metrics_text(const Logs& m) {
  std::vector<std::string> keys;
  if (m.count("loss")) keys.push_back("loss");
  for (auto& [k, v] : m)
    if (k != "loss" && k.rfind("val_", 0) != 0) keys.push_back(k);
  if (m.count("val_loss")) keys.push_back("val_loss");
  for (auto& [k, v] : m)
    if (k != "val_loss" && k.rfind("val_", 0) == 0) keys.push_back(k);
  std::string out;
  char buf[160];
  for (const std::string& k : keys) {
    if (std::isnan(m.at(k)))  // printf's "-nan" depends on the sign bit
      std::snprintf(buf, sizeof buf, "%s%s: nan", out.empty() ? "" : " - ", k.c_str());
    else
      std::snprintf(buf, sizeof buf, "%s%s: %.4f", out.empty() ? "" : " - ", k.c_str(), m.at(k));
    out += buf;
  }
  return out;
}

}  // namespace tensorgrad::nn
