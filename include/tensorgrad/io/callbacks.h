#pragma once
// The callbacks of Model::fit that write files (Keras 3's
// keras.callbacks.BackupAndRestore and ModelCheckpoint). They live in io,
// above nn, because they save through io/saving.h; the interface is
// nn/callback.h.
#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tensorgrad/nn/callback.h"
#include "tensorgrad/nn/callbacks.h"

namespace tensorgrad::io {

/// How often a callback saves: Keras' save_freq, "epoch" or a number of
/// batches. Only "epoch" is built; the callbacks refuse a number of batches
/// (and any other string) with ValueError, as not implemented.
struct SaveFreq {
  /// "epoch".
  ///@{
  SaveFreq(const char* when) : when(when) {}
  SaveFreq(std::string when) : when(std::move(when)) {}
  ///@}
  /// Every `batches` batches (refused: not built).
  ///@{
  SaveFreq(int batches) : batches(batches) {}
  SaveFreq(int64_t batches) : batches(batches) {}
  ///@}
  std::string when;               ///< "epoch", or empty when a count was given
  std::optional<int64_t> batches;  ///< the count of batches, when one was given
};

/// BackupAndRestore's arguments by Keras' names and with its constructor's
/// defaults: `BackupAndRestore({.backup_dir = "backup", .delete_checkpoint = false})`.
/// Designated initializers must keep the order of the fields: backup_dir,
/// save_freq, delete_checkpoint (Keras' order, without double_checkpoint).
struct BackupAndRestoreOptions {
  /// The folder of the backup; required (an empty one is a ValueError).
  std::string backup_dir{};
  SaveFreq save_freq = "epoch";   ///< when to back up; only "epoch" is built
  bool delete_checkpoint = true;  ///< delete the backup when a fit ends normally
};

/// Backs up the whole training state at the end of every epoch and, when a
/// fit starts and a backup exists, restores it and resumes at the epoch
/// after it (keras.callbacks.BackupAndRestore): after a crash, the same fit
/// (same model, same data, same callbacks) run again continues where the
/// backup was made, bit for bit as the run that was not interrupted (at the
/// same thread count).
///
/// What a backup holds (io::save_checkpoint of the model, one file
/// `backup_dir`/backup.gguf): the weights, the optimizer state (moments, step
/// counter, learning rate), the model's random stream (the next epochs'
/// shuffles) and dropout counter, the number of epochs completed, and the
/// state (Callback::get_state) of every callback listed *before* this one in
/// fit's callbacks, found through Callback::fit_callbacks(): EarlyStopping's
/// wait and best, ReduceLROnPlateau's wait and cooldown, ... The order is
/// what makes that exact: this callback's on_train_begin restores their state
/// after their own on_train_begin reset it, and its on_epoch_end saves it
/// after they updated it. So a callback that keeps state
/// (Callback::keeps_state()) placed after this one is a ValueError at
/// on_train_begin naming it. Keras 3 restores weights and optimizer only.
///
/// The backup is written crash-safely (GGUFWriter::write: the file holds the
/// old backup or the whole new one), so no previous copy is kept as Keras
/// keeps one. On a fit that ends normally (early stopping included), the
/// backup file is deleted when delete_checkpoint, and `backup_dir` too when
/// it is left empty (Keras removes the whole folder; this removes only what
/// it wrote). A fit left by an exception keeps it.
///
/// In data-parallel training (FitOptions::communicator) rank 0 writes the
/// backups and every rank restores from the same file at on_train_begin
/// (one machine, or a folder every machine sees), then fit broadcasts rank
/// 0's state, so every rank resumes at the same epoch.
///
/// Exact for fit on in-memory data (the shuffles come from the model's
/// stream). A fit from a generator resumes at the right epoch with the right
/// model, but where the generator's own data stands is the generator's to
/// restore.
class BackupAndRestore : public nn::Callback {
 public:
  /// Throws ValueError for an empty backup_dir, and for a save_freq other
  /// than "epoch" (a number of batches is not built: a backup in the middle
  /// of an epoch would need the batch source's position).
  explicit BackupAndRestore(const BackupAndRestoreOptions& options);
  /// The same arguments by position (BackupAndRestoreOptions' order and
  /// defaults).
  /// (A template only so that a braced list, `({.backup_dir = "b"})`, picks the
  /// options form: GCC 12 would also try it on std::string's constructors.)
  template <std::convertible_to<std::string> Dir>
  explicit BackupAndRestore(Dir backup_dir, SaveFreq save_freq = "epoch", bool delete_checkpoint = true)
      : BackupAndRestore(BackupAndRestoreOptions{.backup_dir = std::string(std::move(backup_dir)),
                                                 .save_freq = std::move(save_freq),
                                                 .delete_checkpoint = delete_checkpoint}) {}
  const char* type() const override { return "BackupAndRestore"; }
  /// Restores the backup if there is one and moves fit's first epoch to the
  /// epoch after it (Model::set_initial_epoch). Throws ValueError for a
  /// stateful callback placed after this one, and as io::load_checkpoint for
  /// a backup that does not fit this model or these callbacks.
  void on_train_begin(nn::Logs& logs) override;
  /// Writes the backup (creating backup_dir if needed); IOError when it
  /// cannot be written, and the backup of the epoch before is kept.
  void on_epoch_end(int epoch, nn::Logs& logs) override;
  /// Deletes the backup when delete_checkpoint.
  void on_train_end(nn::Logs& logs) override;
  /// `backup_dir`/backup.gguf.
  std::string backup_path() const;

 private:
  std::vector<nn::Callback*> kept_callbacks(const char* call) const;
  std::string backup_dir_;
  bool delete_checkpoint_;
};

/// ModelCheckpoint's arguments by Keras' names and with its constructor's
/// defaults: `ModelCheckpoint({.filepath = "best.gguf", .save_best_only = true})`.
/// Designated initializers must keep the order of the fields: filepath,
/// monitor, verbose, save_best_only, save_weights_only, mode, save_freq,
/// initial_value_threshold (Keras' order). The meaning of each is
/// ModelCheckpoint's below.
struct ModelCheckpointOptions {
  /// The file to save to, with placeholders; required (an empty one is a
  /// ValueError).
  std::string filepath{};
  std::string monitor = "val_loss";              ///< the log key save_best_only watches
  int verbose = 0;                               ///< 1: print a line per save
  bool save_best_only = false;                   ///< save only when `monitor` improves
  bool save_weights_only = false;                ///< io::save_weights instead of io::save_model
  nn::MonitorMode mode = nn::MonitorMode::Auto;  ///< which way `monitor` improves
  SaveFreq save_freq = "epoch";                  ///< when to save; only "epoch" is built
  std::optional<double> initial_value_threshold = std::nullopt;  ///< the first best, when given
};

/// Saves the model or its weights after every epoch
/// (keras.callbacks.ModelCheckpoint), to `filepath` formatted with the
/// epoch's values: "{epoch}" is the 1-based epoch number, "{loss}",
/// "{val_loss}", ... any key of the epoch's logs; each may carry a Python
/// format spec ("{epoch:02d}", "{val_loss:.4f}": [sign][0][width][.precision]
/// and a type d, f, F, e, E, g, G or %; no type: Python's str of the
/// number), formatted as Python's str.format does, inf and nan included
/// ("{loss:08.3f}" of inf is "00000inf"; a NaN never shows a sign). "{{"
/// and "}}" are literal braces. A key not in the logs is a ValueError naming
/// it and the keys there are.
///
/// save_weights_only: io::save_weights, else io::save_model (GGUF whatever
/// the extension, which is not checked as Keras checks ".keras"). Every
/// write is crash-safe. The file's folder is created if needed.
/// save_best_only: saves only when `monitor` improves on the best so far
/// (strictly; `mode` as EarlyStopping's; initial_value_threshold is the
/// first best; a NaN is never a best), so a filepath without placeholders always holds the best
/// model; a monitor missing from the logs is warned about once per fit and
/// nothing is saved (Keras 2's rule; Keras 3 warns and saves). verbose 1
/// prints Keras' lines ("Epoch 3: val_loss improved from 0.51234 to
/// 0.49876, saving model to ...") to standard output.
class ModelCheckpoint : public nn::Callback {
 public:
  /// Throws ValueError for an empty filepath or one whose placeholders are
  /// malformed (an unclosed brace, an unknown format spec), a verbose other
  /// than 0 or 1, and a save_freq other than "epoch" (a number of batches is
  /// not built).
  explicit ModelCheckpoint(const ModelCheckpointOptions& options);
  /// The same arguments by position (ModelCheckpointOptions' order and
  /// defaults).
  /// (A template only so that a braced list, `({.filepath = "m.gguf"})`, picks the
  /// options form: GCC 12 would also try it on std::string's constructors.)
  template <std::convertible_to<std::string> Path>
  explicit ModelCheckpoint(Path filepath, std::string monitor = "val_loss", int verbose = 0,
                           bool save_best_only = false, bool save_weights_only = false,
                           nn::MonitorMode mode = nn::MonitorMode::Auto, SaveFreq save_freq = "epoch",
                           std::optional<double> initial_value_threshold = std::nullopt)
      : ModelCheckpoint(ModelCheckpointOptions{.filepath = std::string(std::move(filepath)),
                                               .monitor = std::move(monitor),
                                               .verbose = verbose,
                                               .save_best_only = save_best_only,
                                               .save_weights_only = save_weights_only,
                                               .mode = mode,
                                               .save_freq = std::move(save_freq),
                                               .initial_value_threshold = initial_value_threshold}) {}
  const char* type() const override { return "ModelCheckpoint"; }
  /// Re-arms the once-per-fit warning about a missing monitor (the best
  /// value carries over from one fit to the next, as Keras).
  void on_train_begin(nn::Logs& logs) override;
  /// Formats the path and saves (or, with save_best_only, saves if the
  /// monitored value improved). Throws ValueError as file_path, IOError when
  /// the folder or file cannot be written; the file keeps the model saved
  /// before, and best() stays that model's.
  void on_epoch_end(int epoch, nn::Logs& logs) override;
  /// The path for `epoch` (0-based; the file says epoch + 1) and `logs`.
  /// Throws ValueError for a placeholder key that is in neither, or a format
  /// that does not fit the value ('d' for a metric).
  std::string file_path(int epoch, const nn::Logs& logs) const;
  /// The best monitored value so far (save_best_only), if any.
  std::optional<double> best() const { return best_; }
  /// value "best", absent before the first one.
  nn::CallbackState get_state() const override;
  void set_state(const nn::CallbackState& state) override;
  /// With save_best_only (the best so far), or an initial_value_threshold.
  bool keeps_state() const override { return save_best_only_ || best_.has_value(); }

 private:
  std::string filepath_, monitor_;
  int verbose_;
  bool save_best_only_, save_weights_only_, maximize_;
  std::optional<double> best_;
  bool warned_ = false;
};

}  // namespace tensorgrad::io
