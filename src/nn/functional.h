#pragma once
// The graph of layer calls behind every Model (Keras' Functional): checked
// and sorted once, then walked in topological order to build a forward pass
// into any Builder. Private to the nn layer.
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "tensorgrad/nn/layers.h"

namespace tensorgrad::nn {

/// "prefix", "prefix_1", ... from the same counters as layer names
/// (clear_session resets them).
std::string unique_name(const char* prefix);

class FunctionalGraph {
 public:
  /// Takes the calls between `inputs` and `outputs`; throws as the Model
  /// constructor documents.
  FunctionalGraph(std::vector<SymbolicTensor> inputs, std::vector<SymbolicTensor> outputs);

  /// One value per output, {batch, shape...}, for inputs in order.
  // The outputs; with output_masks, also each output's mask (an invalid Value where it has none).
  std::vector<Value> forward(Builder& b, std::span<const Value> inputs, const CallOptions& options,
                             std::vector<Value>* output_masks = nullptr) const;
  using CloneMap = std::unordered_map<const Layer*, std::shared_ptr<Layer>>;
  /// A copy with every layer cloned once (tied layers stay tied, nested
  /// models' layers included: `cloned` maps originals to their copies).
  std::shared_ptr<const FunctionalGraph> clone(CloneMap* cloned = nullptr) const;

  std::vector<SymbolicTensor> inputs, outputs;
  std::vector<const LayerCall*> order;         // calls of layers, each after its inputs
  std::vector<std::shared_ptr<Layer>> layers;  // each once, in the order of first call
  std::vector<std::string> input_names, output_names;
};

/// A Model called on symbolic tensors: a layer running the model's graph,
/// sharing its layers (and so its weights). call_outputs gives every output;
/// call/call_inputs the first.
class ModelLayer : public Layer {
 public:
  ModelLayer(std::shared_ptr<const FunctionalGraph> graph, const std::string& name, const char* type);
  const char* type() const override { return type_; }
  Shape build(const Shape& input_shape) override;
  Shape build_inputs(std::span<const Shape> input_shapes) override;
  Value call(Builder& b, Value x, const CallOptions& options) override;
  Value call_inputs(Builder& b, std::span<const Value> inputs, const CallOptions& options) override;
  std::vector<Value> call_outputs(Builder& b, std::span<const Value> inputs, const CallOptions& options) override;
  std::vector<Weight> weights() const override;
  bool takes_token_ids() const override;
  void validate_input(const Tensor& x) const override;
  std::shared_ptr<Layer> clone() const override;
  /// A copy whose inner layers come from `cloned` where already copied.
  std::shared_ptr<Layer> clone(FunctionalGraph::CloneMap& cloned) const;
  const FunctionalGraph& graph() const { return *graph_; }

 private:
  std::shared_ptr<const FunctionalGraph> graph_;
  const char* type_;
};

}  // namespace tensorgrad::nn
