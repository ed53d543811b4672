// Functional models (DESIGN.md, "One model contract"; after Keras 3's
// Functional and Node): symbolic tensors record layer calls, and a
// FunctionalGraph takes the calls between a model's inputs and outputs,
// checks them once and walks them in topological order.
#include "nn/functional.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

#include "tensorgrad/core/error.h"
#include "tensorgrad/core/logging.h"

namespace tensorgrad::nn {

namespace {
const LayerCall& checked(const SymbolicTensor& t) {
  if (!t.defined()) throw StateError("an undefined symbolic tensor; make one with Input() or a layer call");
  return *t.call();
}

// "(None, 28, 28, 1)", as Keras prints a symbolic shape.
std::string keras_shape(const Shape& s) {
  std::string out = "(None";
  for (int64_t d : s) out += ", " + std::to_string(d);
  return out + ")";
}
}  // namespace

const Shape& SymbolicTensor::shape() const {
  const LayerCall& c = checked(*this);
  return index_ == 0 ? c.shape : c.more_shapes.at(size_t(index_ - 1));
}
DType SymbolicTensor::dtype() const { return checked(*this).dtype; }
const std::string& SymbolicTensor::name() const {
  const LayerCall& c = checked(*this);
  return c.output_names.empty() ? c.name : c.output_names.at(size_t(index_));
}

SymbolicTensor Input(const Shape& shape, DType dtype, const std::string& name) {
  if (shape.rank() == 0 || shape.numel() <= 0)
    throw ShapeError("Input: shape (without the batch) must be non-empty with positive sizes; got " + shape.str());
  if (dtype != DType::Float32 && dtype != DType::Int32)
    throw TypeError(std::string("Input: dtype must be float32 (features) or int32 (token ids); got ") +
                    dtype_name(dtype));
  auto call = std::make_shared<LayerCall>();
  call->shape = shape;
  call->dtype = dtype;
  call->name = name.empty() ? unique_name("input_layer") : name;
  return SymbolicTensor(std::move(call));
}

Shape Layer::build_inputs(std::span<const Shape> input_shapes) {
  if (input_shapes.size() != 1)
    throw ValueError("layer '" + name() + "' (" + type() + ") takes one input; it was called on " +
                     std::to_string(input_shapes.size()) + ". Merge them first (Concatenate, Add, ...)");
  return build_once(input_shapes[0]);
}

Value Layer::call_inputs(Builder& b, std::span<const Value> inputs, const CallOptions& options) {
  return call(b, inputs[0], options);
}

SymbolicTensor Layer::operator()(const SymbolicTensor& x) { return (*this)(std::vector<SymbolicTensor>{x}); }

SymbolicTensor Layer::operator()(const std::vector<SymbolicTensor>& inputs) {
  if (inputs.empty()) throw ValueError("layer '" + name() + "' called on no tensors");
  std::vector<Shape> shapes;
  for (const SymbolicTensor& t : inputs) {
    if (!t.defined())
      throw ValueError("layer '" + name() + "' called on an undefined symbolic tensor; make one with Input()");
    if (t.dtype() != DType::Float32 && !reads_token_ids(t.shape()))
      throw TypeError("layer '" + name() + "' (" + type() + ") takes float32; '" + t.name() + "' is " +
                      dtype_name(t.dtype()) + " (token ids go into an Embedding)");
    shapes.push_back(t.shape());
  }
  for (const SymbolicTensor& t : inputs)
    if (reads_token_ids(t.shape()) && t.call()->layer)
        throw TypeError("layer '" + name() + "' (" + type() + ") reads token ids from a model input, where they are "
                        "checked; it was called on the output of layer '" + t.name() +
                        "'. Give it an Input() (int32, or float32 holding whole numbers)");
  // A layer not held by a shared_ptr (a temporary) goes into the graph as a copy.
  std::shared_ptr<Layer> self = weak_from_this().lock();
  if (!self) {
    if (!graph_copy_) graph_copy_ = clone();
    self = graph_copy_;
  }
  std::vector<bool> masked;
  for (const SymbolicTensor& t : inputs) {
    masked.push_back(t.index() == 0 && t.call()->masked);
    if (masked.back() && !supports_masking())
      throw ValueError("layer '" + name() + "' (" + type() + ") does not support masking, but its input '" + t.name() +
                       "' carries a mask (padding marked by an Embedding with mask_zero = true), which it would read "
                       "as data. Use layers that keep or read the mask (Dense, Dropout, LayerNormalization, "
                       "activations, merges, MultiHeadAttention, TransformerEncoder, TransformerDecoder) after "
                       "the Embedding, or mask_zero = false");
  }
  auto call = std::make_shared<LayerCall>();
  try {
    call->shape = self->build_inputs(shapes);
  } catch (const ShapeError& e) {
    std::string came;
    for (const Shape& s : shapes) came += (came.empty() ? "" : ", ") + keras_shape(s);
    throw ShapeError("layer '" + name() + "' (" + type() + ") cannot take input shape " + came + ": " + e.what());
  }
  call->layer = std::move(self);
  call->inputs = inputs;
  call->dtype = DType::Float32;
  call->name = call->layer->name();
  call->masked = call->layer->produces_mask(masked);
  return SymbolicTensor(std::move(call));
}

bool Layer::produces_mask(const std::vector<bool>& input_masked) const {
  return supports_masking() && std::find(input_masked.begin(), input_masked.end(), true) != input_masked.end();
}

Value Layer::compute_mask(Builder&, std::span<const Value>, std::span<const Value> masks) {
  return masks.empty() ? Value{} : masks[0];
}

FunctionalGraph::FunctionalGraph(std::vector<SymbolicTensor> in, std::vector<SymbolicTensor> out)
    : inputs(std::move(in)), outputs(std::move(out)) {
  if (inputs.empty()) throw ValueError("Model: give at least one input (made by Input())");
  if (outputs.empty()) throw ValueError("Model: give at least one output");
  std::set<const LayerCall*> input_set;
  for (const SymbolicTensor& t : inputs) {
    const LayerCall& c = checked(t);
    if (c.layer)
      throw ValueError("Model: input '" + c.name + "' is the output of layer '" + c.layer->name() +
                       "', not an Input(); pass the Input() tensors the graph starts from");
    if (!input_set.insert(&c).second) throw ValueError("Model: input '" + c.name + "' is given twice");
    if (std::find(input_names.begin(), input_names.end(), c.name) != input_names.end())
      throw ValueError("Model: two inputs are named '" + c.name + "'; give each Input() a name of its own");
    input_names.push_back(c.name);
  }
  // Depth-first from the outputs: each call after its inputs.
  std::set<const LayerCall*> done, used_inputs, on_stack;
  std::map<std::string, const Layer*> by_name;
  struct Frame {
    const LayerCall* call;
    size_t next;
  };
  for (const SymbolicTensor& o : outputs) {
    std::vector<Frame> stack{{&checked(o), 0}};
    while (!stack.empty()) {
      Frame& f = stack.back();
      const LayerCall* c = f.call;
      if (!c->layer) {
        if (!input_set.count(c)) {
          const std::string needed_by = stack.size() > 1 ? stack[stack.size() - 2].call->name : std::string("");
          std::string given;
          for (const std::string& n : input_names) given += (given.empty() ? "" : ", ") + n;
          throw ValueError("Model: graph disconnected: output '" + o.name() + "' depends on input '" +
                           c->name + "'" + (needed_by.empty() ? "" : ", which layer '" + needed_by + "' needs,") +
                           " but the model's inputs are (" + given + "). Add '" + c->name + "' to the inputs");
        }
        used_inputs.insert(c);
        stack.pop_back();
        continue;
      }
      if (done.count(c)) {
        stack.pop_back();
        continue;
      }
      if (f.next == 0 && !on_stack.insert(c).second)
        throw ValueError("Model: the graph has a cycle through layer '" + c->name + "'; a layer call cannot depend on itself");
      if (f.next < c->inputs.size()) {
        stack.push_back({&checked(c->inputs[f.next++]), 0});
        continue;
      }
      on_stack.erase(c);
      done.insert(c);
      order.push_back(c);
      const Layer* l = c->layer.get();
      auto [it, fresh] = by_name.emplace(l->name(), l);
      if (!fresh && it->second != l)
        throw ValueError("Model: two different layers are named '" + l->name() +
                         "'; layer names must be unique (set_name one of them)");
      if (fresh) layers.push_back(c->layer);
      stack.pop_back();
    }
  }
  for (const SymbolicTensor& o : outputs) {
    const std::string& n = o.name();
    if (std::find(output_names.begin(), output_names.end(), n) != output_names.end())
      throw ValueError("Model: two outputs are named '" + n +
                       "'; outputs take their layer's name, so each must come from a different layer");
    output_names.push_back(n);
  }
  for (const SymbolicTensor& t : inputs)
    if (!used_inputs.count(t.call().get()))
      log_message(LogLevel::Warning, "Model: input '" + t.name() + "' is not used by any output");
}

std::vector<Value> FunctionalGraph::forward(Builder& b, std::span<const Value> xs, const CallOptions& options,
                                            std::vector<Value>* output_masks) const {
  std::unordered_map<const LayerCall*, std::vector<Value>> values;
  std::unordered_map<const LayerCall*, Value> masks;  // the masked calls' output masks (Keras' _keras_mask)
  for (size_t i = 0; i < inputs.size(); ++i) values[inputs[i].call().get()] = {xs[i]};
  auto value_of = [&](const SymbolicTensor& t) { return values.at(t.call().get()).at(size_t(t.index())); };
  auto mask_of = [&](const SymbolicTensor& t) {
    const auto it = masks.find(t.call().get());
    return t.index() == 0 && it != masks.end() ? it->second : Value{};
  };
  std::vector<Value> args, arg_masks;
  for (const LayerCall* c : order) {
    args.clear(), arg_masks.clear();
    bool any = false;
    for (const SymbolicTensor& t : c->inputs) {
      args.push_back(value_of(t));
      arg_masks.push_back(mask_of(t));
      any = any || arg_masks.back().valid();
    }
    CallOptions o = options;
    if (any) o.masks = arg_masks;
    values[c] = c->more_shapes.empty() ? std::vector<Value>{c->layer->call_inputs(b, args, o)}
                                       : c->layer->call_outputs(b, args, o);
    if (c->masked) masks[c] = c->layer->compute_mask(b, args, arg_masks);
  }
  std::vector<Value> out;
  for (const SymbolicTensor& o : outputs) {
    out.push_back(value_of(o));
    if (output_masks) output_masks->push_back(mask_of(o));
  }
  return out;
}

std::shared_ptr<const FunctionalGraph> FunctionalGraph::clone(CloneMap* shared) const {
  std::unordered_map<const LayerCall*, std::shared_ptr<LayerCall>> calls;
  CloneMap own;
  CloneMap& cloned = shared ? *shared : own;
  auto copy_of = [&](const SymbolicTensor& t) { return SymbolicTensor(calls.at(t.call().get()), t.index()); };
  std::vector<SymbolicTensor> new_inputs;
  for (const SymbolicTensor& t : inputs) {
    auto c = std::make_shared<LayerCall>(*t.call());
    calls[t.call().get()] = c;
    new_inputs.emplace_back(c);
  }
  for (const LayerCall* c : order) {
    auto n = std::make_shared<LayerCall>();
    std::shared_ptr<Layer> l = cloned[c->layer.get()];
    if (!l) {
      const auto* nested = dynamic_cast<const ModelLayer*>(c->layer.get());
      l = nested ? nested->clone(cloned) : c->layer->clone();
      cloned[c->layer.get()] = l;
    }
    n->layer = l;
    for (const SymbolicTensor& t : c->inputs) n->inputs.push_back(copy_of(t));
    n->shape = c->shape;
    n->dtype = c->dtype;
    n->name = c->name;
    n->more_shapes = c->more_shapes;
    n->output_names = c->output_names;
    n->masked = c->masked;
    calls[c] = n;
  }
  std::vector<SymbolicTensor> new_outputs;
  for (const SymbolicTensor& t : outputs) new_outputs.push_back(copy_of(t));
  return std::make_shared<FunctionalGraph>(std::move(new_inputs), std::move(new_outputs));
}

ModelLayer::ModelLayer(std::shared_ptr<const FunctionalGraph> graph, const std::string& name, const char* type)
    : Layer("functional"), graph_(std::move(graph)), type_(type) {
  set_name(name);
}

Shape ModelLayer::build(const Shape& input_shape) { return build_inputs(std::span<const Shape>(&input_shape, 1)); }

Shape ModelLayer::build_inputs(std::span<const Shape> shapes) {
  if (shapes.size() != graph_->inputs.size())
    throw ValueError("model '" + name() + "' takes " + std::to_string(graph_->inputs.size()) + " input(s); called on " +
                     std::to_string(shapes.size()));
  for (size_t i = 0; i < shapes.size(); ++i)
    if (shapes[i] != graph_->inputs[i].shape())
      throw ShapeError("model '" + name() + "' input '" + graph_->input_names[i] + "' needs shape " +
                       keras_shape(graph_->inputs[i].shape()) + "; got " + keras_shape(shapes[i]));
  return graph_->outputs[0].shape();
}

Value ModelLayer::call(Builder& b, Value x, const CallOptions& options) {
  return graph_->forward(b, std::span<const Value>(&x, 1), options)[0];
}

Value ModelLayer::call_inputs(Builder& b, std::span<const Value> inputs, const CallOptions& options) {
  return graph_->forward(b, inputs, options)[0];
}

std::vector<Value> ModelLayer::call_outputs(Builder& b, std::span<const Value> inputs, const CallOptions& options) {
  return graph_->forward(b, inputs, options);
}

std::vector<Weight> ModelLayer::weights() const {
  std::vector<Weight> out;
  for (const auto& l : graph_->layers)
    for (Weight& w : l->weights()) out.push_back(std::move(w));
  return out;
}

bool ModelLayer::takes_token_ids() const {
  for (const SymbolicTensor& t : graph_->inputs)
    if (t.dtype() == DType::Int32) return true;
  return false;
}

void ModelLayer::validate_input(const Tensor& x) const {
  for (const LayerCall* c : graph_->order)
    for (const SymbolicTensor& t : c->inputs)
      if (t.call() == graph_->inputs[0].call()) c->layer->validate_input(x);
}

std::shared_ptr<Layer> ModelLayer::clone() const {
  FunctionalGraph::CloneMap cloned;
  return clone(cloned);
}

std::shared_ptr<Layer> ModelLayer::clone(FunctionalGraph::CloneMap& cloned) const {
  return std::make_shared<ModelLayer>(graph_->clone(&cloned), name(), type_);
}

}  // namespace tensorgrad::nn
