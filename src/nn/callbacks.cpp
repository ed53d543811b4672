#include "tensorgrad/nn/callbacks.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>

#include "nn/progress.h"
#include "tensorgrad/core/error.h"
#include "tensorgrad/core/logging.h"
#include "tensorgrad/nn/model.h"

namespace tensorgrad::nn {

namespace {
bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Keras 3 resolves "auto" from the metric's direction: losses and errors
// fall, everything else (accuracies) rises.
bool maximizes(const std::string& monitor, MonitorMode mode) {
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
  throw ValueError("unknown MonitorMode");
}

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

EarlyStopping::EarlyStopping(std::string monitor, double min_delta, int patience, MonitorMode mode,
                             std::optional<double> baseline, bool restore_best_weights, int start_from_epoch)
    : monitor_(std::move(monitor)),
      min_delta_(std::fabs(min_delta)),
      patience_(patience),
      maximize_(maximizes(monitor_, mode)),
      baseline_(baseline),
      restore_best_weights_(restore_best_weights),
      start_from_epoch_(start_from_epoch) {
  if (patience < 0) throw ValueError("EarlyStopping: patience must be >= 0; got " + std::to_string(patience));
  if (start_from_epoch < 0)
    throw ValueError("EarlyStopping: start_from_epoch must be >= 0; got " + std::to_string(start_from_epoch));
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

// ---- ReduceLROnPlateau ----

ReduceLROnPlateau::ReduceLROnPlateau(std::string monitor, double factor, int patience, MonitorMode mode,
                                     double min_delta, int cooldown, double min_lr)
    : monitor_(std::move(monitor)),
      factor_(factor),
      patience_(patience),
      maximize_(maximizes(monitor_, mode)),
      min_delta_(min_delta),
      cooldown_(cooldown),
      min_lr_(min_lr) {
  if (!(factor > 0.0 && factor < 1.0))
    throw ValueError("ReduceLROnPlateau: factor must be in (0, 1) (it multiplies the rate); got " +
                     std::to_string(factor));
  if (patience < 0 || cooldown < 0 || !(min_lr >= 0.0))
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

CSVLogger::CSVLogger(std::string filename, char separator, bool append)
    : filename_(std::move(filename)), separator_(separator), append_(append) {}

CSVLogger::~CSVLogger() {
  if (file_) std::fclose(file_);
}

void CSVLogger::on_train_begin(Logs&) {
  if (file_) std::fclose(file_);
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
  if (!printer_) printer_ = std::make_unique<ProgressPrinter>(verbose_, epochs_);
  printer_->begin_epoch(epoch, steps_);
}

void ProgbarLogger::on_train_batch_end(int64_t batch, Logs& logs) {
  if (verbose_ == 1 && printer_) printer_->step(batch + 1, metrics_text(logs));
}

void ProgbarLogger::on_epoch_end(int, Logs& logs) {
  if (printer_) printer_->end_epoch(metrics_text(logs));
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
