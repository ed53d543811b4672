#pragma once
// The callbacks of one fit call, in Keras 3's order: the user's, then the
// History fit returns, then a progress printer unless the user gave one.
// Attached to the model while it lives. Private to the nn layer; both fits
// (in memory and from a generator) run their hooks through it.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "tensorgrad/core/error.h"
#include "tensorgrad/core/logging.h"
#include "tensorgrad/nn/callbacks.h"
#include "tensorgrad/nn/model.h"

namespace tensorgrad::nn {

class CallbackRun {
 public:
  /// steps: per epoch, for the progress bar (0: unknown). Throws ValueError
  /// naming a null callback.
  CallbackRun(Model& model, const std::vector<std::shared_ptr<Callback>>& given, int verbose, int epochs,
              int64_t steps) {
    ProgbarLogger* progbar = nullptr;
    for (size_t i = 0; i < given.size(); ++i) {
      if (!given[i]) throw ValueError("fit: callbacks[" + std::to_string(i) + "] is null");
      list_.push_back(given[i].get());
      if (auto* p = dynamic_cast<ProgbarLogger*>(given[i].get())) progbar = p;
    }
    list_.push_back(&history);
    if (!progbar && verbose > 0) {
      own_progbar_ = std::make_unique<ProgbarLogger>(verbose);
      progbar = own_progbar_.get();
      list_.push_back(progbar);
    }
    if (progbar) progbar->set_params(epochs, steps);
    for (Callback* c : list_) c->set_model(&model);
    model.set_stop_training(false);
  }
  ~CallbackRun() {
    for (Callback* c : list_) c->set_model(nullptr);
  }
  CallbackRun(const CallbackRun&) = delete;
  CallbackRun& operator=(const CallbackRun&) = delete;

  void train_begin(Logs& logs) { for (Callback* c : list_) c->on_train_begin(logs); }
  void train_end(Logs& logs) { for (Callback* c : list_) c->on_train_end(logs); }
  void epoch_begin(int epoch, Logs& logs) { for (Callback* c : list_) c->on_epoch_begin(epoch, logs); }
  void epoch_end(int epoch, Logs& logs) { for (Callback* c : list_) c->on_epoch_end(epoch, logs); }
  void batch_begin(int64_t batch, Logs& logs) { for (Callback* c : list_) c->on_train_batch_begin(batch, logs); }
  void batch_end(int64_t batch, Logs& logs) { for (Callback* c : list_) c->on_train_batch_end(batch, logs); }
  void test_begin(Logs& logs) { for (Callback* c : list_) c->on_test_begin(logs); }
  void test_end(Logs& logs) { for (Callback* c : list_) c->on_test_end(logs); }

  History history;

 private:
  std::vector<Callback*> list_;
  std::unique_ptr<ProgbarLogger> own_progbar_;
};

/// Logs the divergence warning the first time an epoch's loss is not finite.
inline void warn_if_diverged(const Logs& logs, int epoch, bool& warned) {
  auto it = logs.find("loss");
  if (warned || it == logs.end() || std::isfinite(it->second)) return;
  warned = true;  // once per fit; Keras goes on silently
  log_message(LogLevel::Warning, "fit: the training loss is " + std::string(std::isnan(it->second) ? "NaN" : "infinite") +
                                     " in epoch " + std::to_string(epoch + 1) +
                                     ": training diverged. Lower the learning rate, scale the inputs, or clip the "
                                     "gradients (add_gradient_hook)");
}

}  // namespace tensorgrad::nn
