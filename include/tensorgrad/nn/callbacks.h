#pragma once
// Built-in callbacks of Model::fit, each with the arguments and behaviour of
// Keras 3's implementation (keras/src/callbacks/*.py) unless a comment says
// otherwise. The interface is nn/callback.h.
#include <concepts>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tensorgrad/core/tensor.h"
#include "tensorgrad/nn/callback.h"
#include "tensorgrad/nn/history.h"

namespace tensorgrad::nn {

class ProgressPrinter;

/// Which way a monitored value improves. Auto: "min" for keys ending in
/// "loss" (and for errors: mae, mse, rmse), "max" otherwise (accuracies),
/// as Keras 3 infers it from the metric.
enum class MonitorMode { Auto, Min, Max };

/// Whether `monitor` improves upward under `mode` (Auto resolved as above);
/// shared with io::ModelCheckpoint.
bool monitor_maximizes(const std::string& monitor, MonitorMode mode);

/// EarlyStopping's arguments by Keras' names and with its constructor's
/// defaults, to be named where they are given:
/// `EarlyStopping({.monitor = "val_loss", .patience = 3, .restore_best_weights = true})`.
/// Designated initializers must keep the order of the fields: monitor,
/// min_delta, patience, mode, baseline, restore_best_weights,
/// start_from_epoch (Keras' order, without verbose). The meaning of each is
/// EarlyStopping's below.
struct EarlyStoppingOptions {
  std::string monitor = "val_loss";               ///< the log key watched
  double min_delta = 0.0;                         ///< the least change that counts as an improvement
  int patience = 0;                               ///< epochs without improvement before stopping, >= 0
  MonitorMode mode = MonitorMode::Auto;           ///< which way `monitor` improves
  std::optional<double> baseline = std::nullopt;  ///< a value to beat within `patience` epochs
  bool restore_best_weights = false;              ///< put the best epoch's weights back at the end
  int start_from_epoch = 0;                       ///< epochs not looked at first, >= 0
};

/// Stops training when `monitor` has not improved by more than `min_delta`
/// for `patience` epochs (keras.callbacks.EarlyStopping). Epochs before
/// `start_from_epoch` are not looked at. With `baseline`, training stops
/// unless the value beats it within `patience` epochs. With
/// `restore_best_weights`, the weights (trainable and not, batch-norm
/// statistics included) of the best epoch are put back when training ends,
/// whether it stopped early or not. A key missing from the logs is warned
/// about once per fit (naming the keys there are) and changes nothing.
class EarlyStopping : public Callback {
 public:
  /// Throws ValueError for a negative patience or start_from_epoch.
  explicit EarlyStopping(const EarlyStoppingOptions& options);
  /// Keras' defaults (EarlyStoppingOptions{}).
  EarlyStopping() : EarlyStopping(EarlyStoppingOptions{}) {}
  /// The same arguments by position (EarlyStoppingOptions' order and defaults).
  /// (A template only so that a braced list, `({.patience = 3})`, picks the
  /// options form: GCC 12 would also try it on std::string's constructors.)
  template <std::convertible_to<std::string> Monitor>
  explicit EarlyStopping(Monitor monitor, double min_delta = 0.0, int patience = 0,
                         MonitorMode mode = MonitorMode::Auto, std::optional<double> baseline = std::nullopt,
                         bool restore_best_weights = false, int start_from_epoch = 0)
      : EarlyStopping(EarlyStoppingOptions{.monitor = std::string(std::move(monitor)),
                                           .min_delta = min_delta,
                                           .patience = patience,
                                           .mode = mode,
                                           .baseline = baseline,
                                           .restore_best_weights = restore_best_weights,
                                           .start_from_epoch = start_from_epoch}) {}
  const char* type() const override { return "EarlyStopping"; }
  /// Resets the wait count, the best value and the stopped epoch (a second
  /// fit starts afresh, as Keras).
  void on_train_begin(Logs& logs) override;
  void on_epoch_end(int epoch, Logs& logs) override;
  /// Puts the best epoch's weights back (with restore_best_weights).
  void on_train_end(Logs& logs) override;
  /// The epoch training stopped at (0 when it ran to the end) and the best one.
  ///@{
  int stopped_epoch() const { return stopped_epoch_; }
  int best_epoch() const { return best_epoch_; }
  ///@}
  /// values "wait", "stopped_epoch", "best_epoch" and "best" (absent before
  /// a value was seen); with restore_best_weights, the best epoch's weights
  /// as tensors "best_weights/0", "best_weights/1", ... (weights() order).
  CallbackState get_state() const override;
  void set_state(const CallbackState& state) override;

 private:
  bool improves(double value, double reference) const;
  std::string monitor_;
  double min_delta_;
  int patience_;
  bool maximize_;
  std::optional<double> baseline_;
  bool restore_best_weights_;
  int start_from_epoch_;
  int wait_ = 0, stopped_epoch_ = 0, best_epoch_ = 0;
  bool warned_ = false;
  std::optional<double> best_;
  std::vector<Tensor> best_weights_;
};

/// ReduceLROnPlateau's arguments by Keras' names and with its constructor's
/// defaults: `ReduceLROnPlateau({.monitor = "val_loss", .factor = 0.5, .patience = 2})`.
/// Designated initializers must keep the order of the fields: monitor,
/// factor, patience, mode, min_delta, cooldown, min_lr (Keras' order,
/// without verbose). The meaning of each is ReduceLROnPlateau's below.
struct ReduceLROnPlateauOptions {
  std::string monitor = "val_loss";      ///< the log key watched
  double factor = 0.1;                   ///< the rate's multiplier, in (0, 1)
  int patience = 10;                     ///< epochs without improvement before a reduction, >= 0
  MonitorMode mode = MonitorMode::Auto;  ///< which way `monitor` improves
  double min_delta = 1e-4;               ///< the least change that counts as an improvement
  int cooldown = 0;                      ///< epochs after a reduction before waiting resumes, >= 0
  double min_lr = 0.0;                   ///< the rate is never reduced below this, >= 0
};

/// Multiplies the learning rate by `factor` when `monitor` has not improved
/// by more than `min_delta` for `patience` epochs, then waits `cooldown`
/// epochs, never going below `min_lr` (keras.callbacks.ReduceLROnPlateau).
/// Adds "learning_rate" to the epoch's logs.
class ReduceLROnPlateau : public Callback {
 public:
  /// Throws ValueError for a factor outside (0, 1), a negative patience,
  /// cooldown or min_lr.
  explicit ReduceLROnPlateau(const ReduceLROnPlateauOptions& options);
  /// Keras' defaults (ReduceLROnPlateauOptions{}).
  ReduceLROnPlateau() : ReduceLROnPlateau(ReduceLROnPlateauOptions{}) {}
  /// The same arguments by position (ReduceLROnPlateauOptions' order and
  /// defaults).
  /// (A template only so that a braced list, `({.patience = 3})`, picks the
  /// options form: GCC 12 would also try it on std::string's constructors.)
  template <std::convertible_to<std::string> Monitor>
  explicit ReduceLROnPlateau(Monitor monitor, double factor = 0.1, int patience = 10,
                             MonitorMode mode = MonitorMode::Auto, double min_delta = 1e-4, int cooldown = 0,
                             double min_lr = 0.0)
      : ReduceLROnPlateau(ReduceLROnPlateauOptions{.monitor = std::string(std::move(monitor)),
                                                   .factor = factor,
                                                   .patience = patience,
                                                   .mode = mode,
                                                   .min_delta = min_delta,
                                                   .cooldown = cooldown,
                                                   .min_lr = min_lr}) {}
  const char* type() const override { return "ReduceLROnPlateau"; }
  /// Resets the wait and cooldown counts and the best value.
  void on_train_begin(Logs& logs) override;
  void on_epoch_end(int epoch, Logs& logs) override;
  /// values "wait", "cooldown_counter" and "best" (±inf before a value was
  /// seen); the learning rate itself lives in the optimizer state.
  CallbackState get_state() const override;
  void set_state(const CallbackState& state) override;

 private:
  std::string monitor_;
  double factor_;
  int patience_;
  bool maximize_;
  double min_delta_;
  int cooldown_;
  double min_lr_;
  int wait_ = 0, cooldown_counter_ = 0;
  bool warned_ = false;
  double best_ = 0.0;
};

/// Sets the learning rate before every epoch to schedule(epoch, current
/// rate) (keras.callbacks.LearningRateScheduler); adds "learning_rate" to the
/// epoch's logs. The schedule must return a positive finite rate (ValueError
/// naming the epoch otherwise).
class LearningRateScheduler : public Callback {
 public:
  /// `schedule(epoch, lr)` gets the 0-based epoch and the current rate and
  /// returns the epoch's rate.
  explicit LearningRateScheduler(std::function<double(int epoch, double lr)> schedule);
  const char* type() const override { return "LearningRateScheduler"; }
  /// Sets the rate the schedule returns; throws ValueError for one that is
  /// not positive and finite.
  void on_epoch_begin(int epoch, Logs& logs) override;
  void on_epoch_end(int epoch, Logs& logs) override;

 private:
  std::function<double(int, double)> schedule_;
};

/// Stops training at the first batch whose running loss is NaN or infinite
/// (keras.callbacks.TerminateOnNaN), logging a warning that names the batch.
class TerminateOnNaN : public Callback {
 public:
  const char* type() const override { return "TerminateOnNaN"; }
  void on_train_batch_end(int64_t batch, Logs& logs) override;
};

/// CSVLogger's arguments by Keras' names and with its constructor's defaults:
/// `CSVLogger({.filename = "log.csv", .separator = ';', .append = true})`.
/// Designated initializers must keep the order of the fields: filename,
/// separator, append (Keras' order).
struct CSVLoggerOptions {
  /// The file to write; required (an empty name fails when training begins,
  /// as a file that cannot be opened).
  std::string filename{};
  char separator = ',';  ///< between the columns
  bool append = false;   ///< add rows to an existing file instead of replacing it
};

/// Writes one CSV row per epoch: "epoch" then every log key in sorted order
/// (keras.callbacks.CSVLogger). With `append`, rows go after an existing
/// file's, and the header is written only when the file is empty. Throws
/// IOError when the file cannot be opened (at on_train_begin).
class CSVLogger : public Callback {
 public:
  /// Opens nothing yet: the file is opened at on_train_begin.
  explicit CSVLogger(const CSVLoggerOptions& options);
  /// The same arguments by position (CSVLoggerOptions' order and defaults).
  /// (A template only so that a braced list, `({.filename = "log.csv"})`, picks the
  /// options form: GCC 12 would also try it on std::string's constructors.)
  template <std::convertible_to<std::string> Filename>
  explicit CSVLogger(Filename filename, char separator = ',', bool append = false)
      : CSVLogger(CSVLoggerOptions{
            .filename = std::string(std::move(filename)), .separator = separator, .append = append}) {}
  const char* type() const override { return "CSVLogger"; }
  /// Closes the file if a fit left it open.
  ~CSVLogger() override;
  /// Opens the file on rank 0 (IOError when it cannot be opened).
  void on_train_begin(Logs& logs) override;
  void on_epoch_end(int epoch, Logs& logs) override;
  /// Closes the file.
  void on_train_end(Logs& logs) override;

 private:
  std::string filename_;
  char separator_;
  bool append_;
  std::FILE* file_ = nullptr;
  bool write_header_ = true;
  std::vector<std::string> keys_;
};

/// LambdaCallback's functions by Keras' argument names:
/// `LambdaCallback({.on_epoch_end = [](int epoch, Logs& logs) { ... }})`.
/// Designated initializers must keep the order of the fields: on_epoch_begin,
/// on_epoch_end, on_train_begin, on_train_end, on_train_batch_begin,
/// on_train_batch_end (Keras' order). Unset ones do nothing.
struct LambdaCallbackOptions {
  /// Called as Callback's hooks of the same names.
  ///@{
  std::function<void(int epoch, Logs& logs)> on_epoch_begin{}, on_epoch_end{};
  std::function<void(Logs& logs)> on_train_begin{}, on_train_end{};
  std::function<void(int64_t batch, Logs& logs)> on_train_batch_begin{}, on_train_batch_end{};
  ///@}
};

/// A callback made of functions (keras.callbacks.LambdaCallback); unset
/// ones do nothing. The functions are public members, to set one at a time.
class LambdaCallback : public Callback {
 public:
  /// Every function unset: a callback that does nothing until one is set.
  LambdaCallback() = default;
  /// Takes every function from `options` (the *_fn member of the same name).
  explicit LambdaCallback(const LambdaCallbackOptions& options);
  /// The functions the hooks of the same names (without _fn) call, when set.
  ///@{
  std::function<void(Logs&)> on_train_begin_fn, on_train_end_fn;
  std::function<void(int, Logs&)> on_epoch_begin_fn, on_epoch_end_fn;
  std::function<void(int64_t, Logs&)> on_train_batch_begin_fn, on_train_batch_end_fn;
  ///@}
  const char* type() const override { return "LambdaCallback"; }
  /// Each calls its *_fn member when it is set.
  ///@{
  void on_train_begin(Logs& logs) override;
  void on_train_end(Logs& logs) override;
  void on_epoch_begin(int epoch, Logs& logs) override;
  void on_epoch_end(int epoch, Logs& logs) override;
  void on_train_batch_begin(int64_t batch, Logs& logs) override;
  void on_train_batch_end(int64_t batch, Logs& logs) override;
  ///@}
};

/// fit's progress output (keras.callbacks.ProgbarLogger): verbose 1 a live
/// bar with ETA on a terminal (one line per epoch otherwise), 2 one line per
/// epoch. fit adds one for verbose > 0 unless one is given.
class ProgbarLogger : public Callback {
 public:
  /// `verbose` as FitOptions::verbose: 1 a live bar, 2 one line per epoch.
  explicit ProgbarLogger(int verbose = 1);
  const char* type() const override { return "ProgbarLogger"; }
  /// Out of line, where the progress printer's type is complete.
  ~ProgbarLogger() override;
  /// The epoch count and steps per epoch to show (fit sets them; 0 steps:
  /// unknown, as for a generator without steps_per_epoch).
  void set_params(int epochs, int64_t steps);
  /// Starts the epoch's line (its clock for the ETA) on rank 0.
  void on_epoch_begin(int epoch, Logs& logs) override;
  void on_train_batch_end(int64_t batch, Logs& logs) override;
  void on_epoch_end(int epoch, Logs& logs) override;

 private:
  int verbose_;
  int epochs_ = 0;
  int64_t steps_ = 0;
  std::unique_ptr<ProgressPrinter> printer_;
};

/// The gnuplot script plot_history sends: one panel per metric ("loss"
/// first), epochs (from 1) across, the training values and the validation
/// ones ("val_" keys) beside them, the data inline; NaN for missing values.
std::string history_gnuplot_script(const History& history, const std::string& png_path);
/// Draws the training curves of `history` into the PNG file `png_path` with
/// gnuplot (Debian's gnuplot-nox). Returns false, after a warning given once
/// per process, when gnuplot is not installed (nothing else happens: training
/// goes on). Throws ValueError for an empty history, IOError when gnuplot
/// fails or writes no file (a directory that does not exist, ...).
bool plot_history(const History& history, const std::string& png_path);

/// Redraws the training curves into `png_path` after every epoch (a picture
/// of the run so far, as plot_history draws it; tensorgrad's own callback,
/// Keras has none).
class PlotHistory : public Callback {
 public:
  /// Draws into `png_path`, replaced after every epoch.
  explicit PlotHistory(std::string png_path);
  const char* type() const override { return "PlotHistory"; }
  /// Starts a new epoch list, as History::on_train_begin (set_state after it
  /// puts back a resumed run's curves).
  void on_train_begin(Logs& logs) override;
  void on_epoch_end(int epoch, Logs& logs) override;
  /// The curves so far, so a resumed fit draws the whole run: value
  /// "{key}/{i}" is the i-th epoch's value of log key {key}, "epoch/{i}"
  /// its epoch number.
  CallbackState get_state() const override;
  void set_state(const CallbackState& state) override;
  /// True: the curves grow every epoch.
  bool keeps_state() const override { return true; }

 private:
  std::string path_;
  History recorded_;
};

/// Keras' text of metrics: "loss: 0.1234 - accuracy: 0.9000", keys sorted
/// with "loss" first and "val_" keys last.
std::string metrics_text(const Logs& logs);

}  // namespace tensorgrad::nn
