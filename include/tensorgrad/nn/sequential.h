#pragma once
// keras.Sequential in C++: a Model built a layer at a time.
#include <concepts>
#include <memory>
#include <vector>

#include "tensorgrad/nn/model.h"

namespace tensorgrad::nn {

/// A linear stack of layers (keras.Sequential), a Model whose graph grows by
/// add(). Layers are built as they are added, so each layer's weights exist
/// from then on (drawn from the global seed).
class Sequential : public Model {
 public:
  /// input_shape excludes the batch: {784} for flat images, {28, 28, 1} for
  /// images, {steps} of token ids before an Embedding. Throws ShapeError for
  /// an empty or non-positive shape.
  explicit Sequential(const Shape& input_shape);
  /// Takes over `model` when its graph is a chain: one input, one output,
  /// and each layer call taking the previous call's only output (what
  /// io::load_sequential makes of a saved Sequential's architecture). Throws
  /// ValueError naming the first call that breaks the chain otherwise, and
  /// `model` is then left as it was.
  explicit Sequential(Model&& model);
  /// As Model's moves: the moved-from model is released.
  ///@{
  Sequential(Sequential&&) noexcept;
  Sequential& operator=(Sequential&&) noexcept;
  ///@}

  /// Appends a layer and builds it for the current output shape (a layer
  /// already built, shared with another model, keeps its weights). Throws
  /// ShapeError when it does not fit, ValueError for an Embedding that is
  /// not first. After compile(), the model must be compiled again (as
  /// Keras); the optimizer state is then fresh.
  Sequential& add(std::shared_ptr<Layer> layer);
  /// Adds a copy of a layer given by value: model.add(Dense(10)).
  template <class L>
    requires std::derived_from<L, Layer>
  Sequential& add(L layer) {
    return add(std::shared_ptr<Layer>(std::make_shared<L>(std::move(layer))));
  }
  /// Adds a layer held by the caller (to share it, or to set trainable later).
  template <class L>
    requires std::derived_from<L, Layer>
  Sequential& add(std::shared_ptr<L> layer) {
    return add(std::shared_ptr<Layer>(std::move(layer)));
  }

  /// The layers in the order added (a layer added twice is listed twice).
  const std::vector<std::shared_ptr<Layer>>& layers() const { return layers_; }
  /// An independent copy (Model::clone), still a Sequential.
  Sequential clone() const;
  /// Model::free, and the layer list too.
  void free() override;
  const char* type() const override { return "Sequential"; }

 private:
  SymbolicTensor input_, output_;
  std::vector<std::shared_ptr<Layer>> layers_;
};

}  // namespace tensorgrad::nn
