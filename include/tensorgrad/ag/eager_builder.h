#pragma once
// A Builder that runs every op at once on ag tensors (DESIGN.md: "the same
// ops run at once through the same Builder interface"), so code written
// against Builder (the layers of tensorgrad::nn, gradient rules, a user's
// own model functions) runs eagerly and records for ag's backward.
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
/// Dropout applied through it draws its mask from `rng_counter()` (the
/// counter that a graph's run of the same ops passes its Dropout kernels),
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

  /// The counter Dropout ops read (0 at construction).
  uint64_t rng_counter() const { return rng_counter_; }
  void set_rng_counter(uint64_t counter) { rng_counter_ = counter; }

 private:
  std::vector<Tensor> values_;
  std::vector<std::pair<std::string, Tensor>> parameters_;
  std::unordered_map<const void*, Value> parameter_values_;
  uint64_t rng_counter_ = 0;
};

}  // namespace tensorgrad::ag
