// keras.Model as a graph of layers: its layers, inputs and outputs, calling
// it as a layer of another model, and summary() as Keras prints it.
#include <algorithm>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "nn/functional.h"
#include "opt/data_checks.h"
#include "tensorgrad/backend/registry.h"
#include "tensorgrad/core/error.h"
#include "tensorgrad/nn/model.h"

namespace tensorgrad::nn {

using tensorgrad::detail::joined;

namespace {
// "(None, 28, 28, 1)", as Keras prints shapes with an unknown batch.
std::string keras_shape(const Shape& s) {
  std::string out = "(None";
  for (int64_t d : s) out += ", " + std::to_string(d);
  return out + ")";
}
}  // namespace

std::vector<std::shared_ptr<Layer>> Model::layers() const {
  check_live("layers()");
  return graph_->layers;
}

std::shared_ptr<Layer> Model::get_layer(const std::string& name) const {
  check_live("get_layer()");
  std::vector<std::string> names;
  for (const auto& l : graph_->layers) {
    if (l->name() == name) return l;
    names.push_back(l->name());
  }
  throw ValueError("no layer named '" + name + "'; the model's layers are (" + joined(names) + ")");
}

const std::vector<SymbolicTensor>& Model::inputs() const {
  check_live("inputs()");
  return graph_->inputs;
}
const std::vector<SymbolicTensor>& Model::outputs() const {
  check_live("outputs()");
  return graph_->outputs;
}
std::vector<std::string> Model::input_names() const {
  check_live("input_names()");
  return graph_->input_names;
}
std::vector<std::string> Model::output_names() const {
  check_live("output_names()");
  return graph_->output_names;
}
const Shape& Model::input_shape() const { return inputs()[0].shape(); }
const Shape& Model::output_shape() const { return outputs()[0].shape(); }

SymbolicTensor Model::operator()(const SymbolicTensor& x) const { return (*this)(std::vector<SymbolicTensor>{x}); }

SymbolicTensor Model::operator()(const std::vector<SymbolicTensor>& inputs) const {
  check_live("calling a model");
  if (graph_->outputs.size() != 1)
    throw ValueError("model '" + state_.name + "' has " + std::to_string(graph_->outputs.size()) +
                     " outputs; call_outputs(inputs) gives one symbolic tensor per output");
  return call_outputs(inputs)[0];
}

std::vector<SymbolicTensor> Model::call_outputs(const std::vector<SymbolicTensor>& inputs) const {
  check_live("calling a model");
  if (!state_.as_layer) state_.as_layer = std::make_shared<ModelLayer>(graph_, state_.name, type());
  const SymbolicTensor first = (*state_.as_layer)(inputs);  // checks the inputs and records the call
  const size_t n = graph_->outputs.size();
  if (n == 1) return {first};
  // The call was made here a moment ago and nothing else holds it yet.
  auto call = std::const_pointer_cast<LayerCall>(first.call());
  for (size_t k = 0; k < n; ++k) {
    if (k > 0) call->more_shapes.push_back(graph_->outputs[k].shape());
    call->output_names.push_back(state_.name + "/" + graph_->output_names[k]);
  }
  std::vector<SymbolicTensor> out;
  for (size_t k = 0; k < n; ++k) out.emplace_back(first.call(), int(k));
  return out;
}

std::string Model::summary() const {
  check_live("summary()");
  const bool functional = std::string(type()) != "Sequential";
  // The cells first, so that each column is as wide as its longest cell.
  std::vector<std::vector<std::string>> rows;
  if (functional)
    rows.push_back({"Layer (type)", "Output Shape", "Param #", "Connected to"});
  else
    rows.push_back({"Layer (type)", "Output Shape", "Param #"});
  int64_t trainable = 0, non_trainable = 0;
  std::set<const void*> counted;  // a weight shared by two layers counts once
  if (functional)
    for (const SymbolicTensor& in : graph_->inputs)
      rows.push_back({in.name() + " (InputLayer)", keras_shape(in.shape()), "0", "-"});
  for (const LayerCall* c : graph_->order) {
    int64_t params = 0;
    for (const Weight& w : c->layer->weights())
      if (w.value.defined() && counted.insert(w.value.raw()).second) {
        params += w.value.numel();
        (w.trainable ? trainable : non_trainable) += w.value.numel();
      }
    std::vector<std::string> row{c->layer->name() + " (" + c->layer->type() + ")", keras_shape(c->shape),
                                 std::to_string(params)};
    if (functional) {
      std::string connected;
      for (const SymbolicTensor& t : c->inputs) connected += (connected.empty() ? "" : ", ") + t.name();
      row.push_back(connected);
    }
    rows.push_back(std::move(row));
  }
  const size_t columns = rows[0].size();
  std::vector<size_t> width(columns, 0);
  for (const auto& r : rows)
    for (size_t i = 0; i < columns; ++i) width[i] = std::max(width[i], r[i].size());
  constexpr size_t kGap = 2;  // spaces between columns
  size_t line_length = 0;
  for (size_t i = 0; i < columns; ++i) line_length += width[i] + (i + 1 < columns ? kGap : 0);
  auto line = [&](const std::vector<std::string>& r) {
    std::string out;
    for (size_t i = 0; i < columns; ++i) {
      out += r[i];
      if (i + 1 < columns) out += std::string(width[i] - r[i].size() + kGap, ' ');
    }
    return out + "\n";
  };
  // "1,234,567", as Keras prints the totals.
  auto grouped = [](int64_t n) {
    std::string digits = std::to_string(n), out;
    for (size_t i = 0; i < digits.size(); ++i) {
      if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
      out += digits[i];
    }
    return out;
  };
  std::ostringstream s;
  s << "Model: \"" << state_.name << "\"\n";
  s << std::string(line_length, '_') << "\n" << line(rows[0]) << std::string(line_length, '=') << "\n";
  for (size_t i = 1; i < rows.size(); ++i) s << line(rows[i]);
  s << std::string(line_length, '=') << "\n";
  s << "Total params: " << grouped(trainable + non_trainable) << "\n";
  s << "Trainable params: " << grouped(trainable) << "\n";
  s << "Non-trainable params: " << grouped(non_trainable) << "\n";
  s << std::string(line_length, '_') << "\n";
  // The CPU is the default and goes unsaid, as in Keras; another device is named with what it is.
  if (state_.backend && state_.backend->device() != Device::CPU) {
    const Device d = state_.backend->device();
    std::string what;
    for (const DeviceInfo& info : devices())
      if (info.device == d) what = " (" + info.name + ", " + device_type_name(info.type) + ")";
    s << "Device: " << d.str() << what << "\n";
  }
  return s.str();
}

}  // namespace tensorgrad::nn
