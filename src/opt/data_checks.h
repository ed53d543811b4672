#pragma once
// The checks a model's data passes before any of it is read, written once
// for every entry point (Keras 3's data adapters check cardinality and
// shapes once; here the optimizer context's steps and the model's
// fit / evaluate / predict / train_on_batch, through nn's data adapter,
// call the same functions). The per-tensor checks of inputs are
// InputSpec::check (shape, dtype, finite values, token ids), those of
// targets OptimizerContext::check_targets; these are the ones around them.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tensorgrad/core/tensor.h"
#include "tensorgrad/opt/optimizer.h"

namespace tensorgrad::detail {

/// Throws ValueError naming the row and column of t's first NaN or
/// infinity (t float32). `what` names t.
void check_finite(const Tensor& t, const char* what);

/// t must be defined (ValueError) with a batch dimension (ShapeError) of
/// exactly `rows` rows when rows >= 0 (ShapeError: "must have exactly N
/// rows (the batch size)").
void check_rows(const Tensor& t, int64_t rows, const char* what);

/// What the data checks name in messages: the call ("fit", "evaluate",
/// "step") and the model's inputs (by their specs, or by name where the
/// caller has no specs at hand) and outputs. Only references: making one
/// allocates nothing, so a step can check every batch.
struct DataNames {
  const char* call;
  std::span<const InputSpec> input_specs;
  std::span<const std::string> input_names;  // used when input_specs is empty
  std::span<const std::string> outputs;
  /// What the per-row weights are called ("validation_sample_weight").
  const char* weight = "sample_weight";
  /// The model's names from its contract.
  static DataNames of(const char* call, const ModelFunction& model, const char* weight = "sample_weight") {
    return {call, model.inputs, {}, model.output_names, weight};
  }
  size_t inputs() const { return input_specs.empty() ? input_names.size() : input_specs.size(); }
  const std::string& input(size_t i) const { return input_specs.empty() ? input_names[i] : input_specs[i].name; }
  /// "x" for one input, else "x 'name'"; the same for y.
  std::string x(size_t i) const;
  std::string y(size_t i) const;
};

/// Which tensors a call must give: targets (fit, evaluate, the batches) or
/// not (predict), and whether sample_weight may hold one tensor per output
/// (the optimizer context) or one for all (the model's calls).
struct DataRules {
  bool targets = true;
  bool weight_per_output = false;
};

/// The counts and rows of one call's tensors: one x per input (ShapeError
/// "<call>: the model has N input(s) (names); got k x tensor(s)"), one y per
/// output when rules.targets ("... output(s) (names); got k target
/// tensor(s)"), no sample_weight, one, or (rules.weight_per_output) one per
/// output. Every tensor defined (ValueError) with a batch dimension
/// (ShapeError); with rows >= 0 (a context planned for exactly that many)
/// each must have exactly `rows` (check_rows' message), else all must have
/// x's first input's rows (ShapeError naming both counts: "inputs differ in
/// rows", "x has N rows but y has M; give one label row per input row").
/// Returns the rows.
int64_t check_data(const DataNames& names, std::span<const Tensor> x, std::span<const Tensor> y,
                   std::span<const Tensor> sample_weight, int64_t rows, DataRules rules = {});

/// Names for messages: "a, b, c".
std::string joined(const std::vector<std::string>& names);

}  // namespace tensorgrad::detail
