#pragma once
// A Builder that runs every op at once on ag tensors (the same ops as a
// Graph's, through the same Builder interface), so code written against
// Builder (the layers of tensorgrad::nn, gradient rules, a user's own model
// functions) runs eagerly and records for ag's backward.
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tensorgrad/ag/tensor.h"
#include "tensorgrad/ops/builder.h"

namespace tensorgrad::ag {

/// Runs ops as they are applied. Its Values index the ag tensors it holds:
/// the ones given to `input` and every result. `parameter` wraps an engine
/// tensor (a layer's weight) as a leaf without a copy, one leaf per memory
/// (a shared layer gives one leaf whose grad() sums both uses), requiring
/// grad when trainable.
///
/// Dropout applied through it draws its mask from counter_value() (what a
/// graph's dropout reads from its advanced counter in a run),
/// so the same layers with the same weights, inputs and counter give
/// bit-identical outputs and gradients eagerly and as a graph at one thread.
class EagerBuilder final : public Builder {
 public:
  /// A value for an ag tensor (no copy; its history is kept).
  Value input(const Tensor& tensor);
  /// The ag tensor of a value. Throws IndexError for a value this builder did not make.
  const Tensor& tensor(Value v) const;

  /// Runs `op` now (throws what its shape rule throws) and records it when an input requires grad.
  Value apply(OpKind op, std::span<const Value> inputs, const OpAttrs& attrs) override;
  using Builder::apply;
  Value parameter(const tensorgrad::Tensor& tensor, const char* name, bool trainable) override;
  Shape shape(Value v) const override { return tensor(v).shape(); }
  DType dtype(Value v) const override { return tensor(v).dtype(); }

  /// The leaves made by `parameter`, with their names, in first-use order.
  const std::vector<std::pair<std::string, Tensor>>& parameters() const { return parameters_; }

  /// The counter Dropout ops read, as an int64 {1} value holding
  /// counter_value() (a graph's advanced counter, eagerly).
  Value rng_counter() override;
  /// The counter's value (0 at construction); set it before the ops that use it.
  ///@{
  uint64_t counter_value() const { return counter_; }
  void set_counter_value(uint64_t counter);
  ///@}

 private:
  std::vector<Tensor> values_;
  std::vector<std::pair<std::string, Tensor>> parameters_;
  std::unordered_map<const void*, Value> parameter_values_;
  uint64_t counter_ = 0;
  Value counter_value_;  // the value rng_counter() handed out for counter_
};

}  // namespace tensorgrad::ag
