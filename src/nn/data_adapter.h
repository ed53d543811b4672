#pragma once
// The data adapter (Keras 3's keras.src.trainers.data_adapters): the x, y
// and sample_weight a user gives fit, evaluate, predict, train_on_batch or
// test_on_batch, checked against the model once, in one place, and turned
// into the batches the training loop reads (a TensorSource). What is checked
// and the messages: opt/data_checks.h (counts, rows), InputSpec::check (each
// input's shape, dtype, values), OptimizerContext::check_targets (each
// target against its loss), and here the model-level rules (no rows, one
// weight per row, a batch within batch_size).
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "opt/data_checks.h"
#include "tensorgrad/nn/model.h"
#include "tensorgrad/nn/training_loop.h"

namespace tensorgrad::nn::detail {

/// Rows [begin, end) of every tensor of `batch` (views).
Batch rows_of(const Batch& batch, int64_t begin, int64_t end);

/// One call's data after the checks: x as the model's graphs take it
/// ({rows, input_shape...}, token ids as int32), y as given, sample_weight
/// {rows} float32 or undefined.
struct AdaptedData : Batch {
  int64_t rows = 0;
  /// Rows [begin, end) of every tensor (views).
  AdaptedData rows_of(int64_t begin, int64_t end) const;
  /// The batches of these rows (see TensorSource), `batch_size` at a time,
  /// shuffled from `shuffle_rng` when given.
  std::unique_ptr<TensorSource> source(int64_t batch_size, std::mt19937_64* shuffle_rng, std::string label) const;
};

/// Checks data for one model and one call ("fit", "evaluate", "predict",
/// "the batch"); the call names the data in every message.
class DataAdapter {
 public:
  DataAdapter(const Model& model, const char* call);

  /// In-memory data (fit, evaluate, validation data): one x per input, one y
  /// per output with x's rows, optional sample_weight one per row ({rows} or
  /// {rows, 1}; ValueError for more, pointing at the Trainer's loss_mask;
  /// TypeError unless float32), every input as InputSpec::check takes it.
  /// ValueError for no rows. `prefix` ("validation ") names the tensors in
  /// the per-input messages.
  AdaptedData arrays(std::span<const Tensor> x, std::span<const Tensor> y, const Tensor& sample_weight,
                     const char* prefix = "") const;
  /// Inputs alone (predict, calibrate_bn): counts, rows and each input's
  /// checks; no rows is allowed (nothing to run).
  AdaptedData inputs(std::span<const Tensor> x) const;
  /// Every target's values against its loss (class ids in range, finite,
  /// binary targets in [0, 1]) and the weights (finite, >= 0), through the
  /// loss heads of `ctx`, before a first step: a bad label is refused before
  /// anything trains.
  static void check_targets(const OptimizerContext& ctx, const AdaptedData& data);

 private:
  // The counts and rows (check_data) and the per-row weights, named `weight`.
  AdaptedData counted(std::span<const Tensor> x, std::span<const Tensor> y, const Tensor& sample_weight, bool targets,
                      const char* weight) const;
  ModelFunction model_;
  const char* call_;
};

/// One batch (train_on_batch, test_on_batch) named by `names`: the counts,
/// rows and sample_weight of DataAdapter::arrays (the weights viewed as
/// {rows} into `weight`, undefined when none), at least one row
/// (ValueError) and at most `max_rows` when > 0 (ShapeError: the graphs are
/// planned for it). The values are left to the optimizer context's step,
/// which checks them as it stages them (a batch is read once). Allocates
/// nothing unless it throws: a training step makes no allocation. Returns
/// the rows.
int64_t check_batch(const tensorgrad::detail::DataNames& names, const Batch& batch, int64_t max_rows, Tensor& weight);

/// fit's data: the training rows and the validation rows (none: rows 0).
struct FitData {
  AdaptedData train, validation;
};

/// fit's x, y and sample_weight and its validation data, through the
/// adapter (call "fit"; "validation_data" or "validation_x/validation_y"
/// for the validation data, its inputs named "validation x"): validation
/// data as given, or the last validation_split of the rows (their weights
/// with them), and class_weight times the training rows' sample_weight
/// (ValueError for a weight < 0 or not finite). ValueError when no
/// training row is left. The options themselves are fit's to check.
FitData fit_data(const Model& model, std::span<const Tensor> x, std::span<const Tensor> y, const FitOptions& opt);

}  // namespace tensorgrad::nn::detail
