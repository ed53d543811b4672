#include "tensorgrad/nn/sequential.h"

#include "nn/functional.h"
#include "tensorgrad/core/error.h"

namespace tensorgrad::nn {

namespace {
Shape checked_input_shape(const Shape& input_shape) {
  if (input_shape.rank() == 0 || input_shape.numel() <= 0)
    throw ShapeError("Sequential: input_shape (without the batch) must be non-empty with positive sizes; got " +
                     input_shape.str());
  return input_shape;
}
}  // namespace

Sequential::Sequential(const Shape& input_shape)
    : Model(unique_name("sequential")), input_(Input(checked_input_shape(input_shape))), output_(input_) {
  set_graph({input_}, {output_}, "the model changed");
}

Sequential::Sequential(Sequential&& other) noexcept
    : Model(std::move(other)),
      input_(std::move(other.input_)),
      output_(std::move(other.output_)),
      layers_(std::move(other.layers_)) {
  other.layers_.clear();
  other.input_ = other.output_ = SymbolicTensor();
}

Sequential& Sequential::operator=(Sequential&& other) noexcept {
  if (this == &other) return *this;
  Model::operator=(std::move(other));
  input_ = std::move(other.input_);
  output_ = std::move(other.output_);
  layers_ = std::move(other.layers_);
  other.layers_.clear();
  other.input_ = other.output_ = SymbolicTensor();
  return *this;
}

Sequential& Sequential::add(std::shared_ptr<Layer> layer) {
  check_live("add()");
  if (!layer) throw ValueError("Sequential::add: null layer");
  if (!layers_.empty() && layer->takes_token_ids())
    throw ValueError("Embedding '" + layer->name() +
                     "' must be the first layer: it reads token ids from the model input, where they are checked");
  SymbolicTensor out = (*layer)(output_);
  set_graph({input_}, {out}, "add() changed the model after this context was made");
  output_ = std::move(out);
  layers_.push_back(std::move(layer));
  return *this;
}

Sequential Sequential::clone() const {
  check_live("clone()");
  return Sequential(Model::clone());
}

namespace {
// `model` when its graph is a chain of one-input calls, else ValueError.
Model&& chain(Model&& model) {
  const std::vector<SymbolicTensor>& inputs = model.inputs();
  const std::vector<SymbolicTensor>& outputs = model.outputs();
  if (inputs.size() != 1 || outputs.size() != 1)
    throw ValueError("Sequential(Model&&): the model '" + model.name() + "' has " + std::to_string(inputs.size()) +
                     " inputs and " + std::to_string(outputs.size()) +
                     " outputs; a Sequential has one of each. Keep it as a Model");
  const LayerCall* previous = inputs[0].call().get();
  for (const LayerCall* c : model.layer_calls()) {
    if (c->inputs.size() != 1 || c->inputs[0].call().get() != previous || c->inputs[0].index() != 0)
      throw ValueError("Sequential(Model&&): in the model '" + model.name() + "', the call of layer '" + c->name +
                       "' does not take the previous call's only output, so the graph is not a chain of layers; "
                       "keep it as a Model");
    previous = c;
  }
  if (outputs[0].call().get() != previous)
    throw ValueError("Sequential(Model&&): the output of the model '" + model.name() +
                     "' is not its last layer's; keep it as a Model");
  return std::move(model);
}
}  // namespace

Sequential::Sequential(Model&& model) : Model(chain(std::move(model))) {
  input_ = graph_->inputs[0];
  output_ = graph_->outputs[0];
  for (const LayerCall* c : graph_->order) layers_.push_back(c->layer);
}

void Sequential::free() {
  Model::free();
  layers_.clear();
  input_ = output_ = SymbolicTensor();  // the symbolic graph holds the layers too
}

}  // namespace tensorgrad::nn
