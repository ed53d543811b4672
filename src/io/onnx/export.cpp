// io::save_onnx (io/onnx.h): a model's inference graph, built from its
// layers (each node remembered with the layer that made it), its dimensions
// found by building it at two batch sizes, written as an ONNX model through
// the per-op emitters (io/onnx/emit.cpp), checked by ONNX's checker and
// shape inference, and saved atomically.
#include "tensorgrad/io/onnx.h"

#ifdef TENSORGRAD_WITH_ONNX

#include <onnx/checker.h>
#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <unordered_map>

#include "io/atomic_file.h"
#include "io/onnx/emit.h"
#include "nn/functional.h"
#include "tensorgrad/core/error.h"
#include "tensorgrad/core/version.h"

namespace tensorgrad::io {

using namespace onnx_export;

namespace onnx_export {

Writer::Writer(onnx::GraphProto& graph, const Graph& g, std::vector<Dims> dims, std::vector<Dims> attr_dims,
               std::vector<std::string> owners)
    : graph_(graph),
      g_(g),
      dims_(std::move(dims)),
      attr_dims_(std::move(attr_dims)),
      owners_(std::move(owners)),
      names_(g.size()),
      hidden_only_(g.size(), 0) {}

std::string Writer::fresh(const std::string& hint) {
  const std::string& layer = owner(current_);
  return (layer.empty() ? "" : layer + "/") + hint + "_" + std::to_string(counter_++);
}

onnx::NodeProto& Writer::add(const std::string& op_type, const std::vector<std::string>& inputs, int n_outputs) {
  onnx::NodeProto* n = graph_.add_node();
  n->set_op_type(op_type);
  const std::string out = fresh(op_type);
  n->set_name(out);
  for (const std::string& i : inputs) n->add_input(i);
  for (int k = 0; k < n_outputs; ++k) n->add_output(k == 0 ? out : out + ":" + std::to_string(k));
  return *n;
}

std::string Writer::op(const std::string& op_type, const std::vector<std::string>& inputs) {
  return add(op_type, inputs).output(0);
}

void Writer::attr(onnx::NodeProto& n, const std::string& name, int64_t v) {
  onnx::AttributeProto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}
void Writer::attr(onnx::NodeProto& n, const std::string& name, float v) {
  onnx::AttributeProto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}
void Writer::attr(onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& v) {
  onnx::AttributeProto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

std::string Writer::ints(const std::vector<int64_t>& v, bool scalar) {
  onnx::TensorProto* t = graph_.add_initializer();
  t->set_name(fresh("ints"));
  t->set_data_type(onnx::TensorProto::INT64);
  if (!scalar) t->add_dims(int64_t(v.size()));
  for (int64_t x : v) t->add_int64_data(x);
  return t->name();
}

std::string Writer::scalar(float v) {
  onnx::TensorProto* t = graph_.add_initializer();
  t->set_name(fresh("scalar"));
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_float_data(v);
  return t->name();
}

std::string Writer::tensor(const Tensor& value, const std::string& name) {
  const Tensor t = value.to(Device::CPU);
  onnx::TensorProto* p = graph_.add_initializer();
  p->set_name(name.empty() ? fresh("constant") : name);
  switch (t.dtype()) {
    case DType::Float32:
      p->set_data_type(onnx::TensorProto::FLOAT);
      break;
    case DType::Int32:
      p->set_data_type(onnx::TensorProto::INT32);
      break;
    case DType::Int64:
      p->set_data_type(onnx::TensorProto::INT64);
      break;
  }
  for (int d = 0; d < t.shape().rank(); ++d) p->add_dims(t.shape()[d]);
  p->set_raw_data(std::string(static_cast<const char*>(t.raw()), t.nbytes()));  // little-endian, as ONNX's raw_data
  return p->name();
}

std::string Writer::shape(const Dims& d) {
  if (std::none_of(d.begin(), d.end(), [](int64_t x) { return x < 0; })) return ints(d);
  if (batch_.empty()) {
    onnx::NodeProto& s = add("Shape", {batch_source_});
    attr(s, "start", int64_t(0));
    attr(s, "end", int64_t(1));
    batch_ = s.output(0);
  }
  onnx::NodeProto& c = add("Concat", {});
  for (int64_t x : d) c.add_input(x >= 0 ? ints({x}) : x == -1 ? batch_ : op("Mul", {batch_, ints({-x})}));
  attr(c, "axis", int64_t(0));
  return c.output(0);
}

std::string Writer::reshape_target(const Dims& d) {
  if (std::count_if(d.begin(), d.end(), [](int64_t x) { return x < 0; }) != 1) return shape(d);
  Dims t = d;
  for (int64_t& x : t) x = x < 0 ? -1 : x;
  return ints(t);
}

void Writer::refuse(const std::string& what) const {
  const std::string& layer = owner(current_);
  throw ValueError("save_onnx: " + (layer.empty() ? std::string("the model") : "layer '" + layer + "'") +
                   " cannot be written as ONNX: " + what +
                   ". save_onnx writes the graph predict() runs; give the layer an inference form (its call() with "
                   "options.training false) made of ops that have one, or export a model without it");
}

}  // namespace onnx_export

namespace {

// The inference graph of a model at one batch size, with the layer that
// made each node ("outer/inner" inside nested models).
struct Built {
  Graph g;
  std::vector<std::string> owners;
  std::vector<Value> inputs, outputs;
};

// Calls `order` (a model's or a nested model's layer calls) on `xs`, the
// values of its `inputs`; returns the values of `outputs`.
std::vector<Value> walk(Built& b, const std::vector<nn::SymbolicTensor>& inputs,
                        const std::vector<const nn::LayerCall*>& order, const std::vector<nn::SymbolicTensor>& outputs,
                        std::span<const Value> xs, const std::string& prefix) {
  std::unordered_map<const nn::LayerCall*, std::vector<Value>> values;
  for (size_t i = 0; i < inputs.size(); ++i) values[inputs[i].call().get()] = {xs[i]};
  auto value_of = [&](const nn::SymbolicTensor& t) { return values.at(t.call().get()).at(size_t(t.index())); };
  const nn::CallOptions inference{false, false};
  for (const nn::LayerCall* c : order) {
    std::vector<Value> args;
    for (const nn::SymbolicTensor& t : c->inputs) args.push_back(value_of(t));
    const std::string name = prefix + c->layer->name();
    if (c->masked)
      throw ValueError("save_onnx: layer '" + name + "' (" + c->layer->type() +
                       ") carries a mask (padding from an Embedding with mask_zero), which the ONNX graph would "
                       "not apply; export a model built with mask_zero = false and explicit padding-mask inputs");
    if (const auto* nested = dynamic_cast<const nn::ModelLayer*>(c->layer.get())) {
      const nn::FunctionalGraph& inner = nested->graph();
      std::vector<Value> out = walk(b, inner.inputs, inner.order, inner.outputs, args, name + "/");
      if (c->more_shapes.empty()) out.resize(1);
      values[c] = out;
      continue;
    }
    const size_t start = b.g.size();
    values[c] = c->more_shapes.empty() ? std::vector<Value>{c->layer->call_inputs(b.g, args, inference)}
                                       : c->layer->call_outputs(b.g, args, inference);
    b.owners.resize(b.g.size(), name);
    for (size_t i = start; i < b.g.size(); ++i)
      if (b.owners[i].empty()) b.owners[i] = name;
  }
  std::vector<Value> out;
  for (const nn::SymbolicTensor& o : outputs) out.push_back(value_of(o));
  return out;
}

Built build(const nn::Model& model, int64_t batch) {
  Built b;
  const ModelFunction f = model.model_function();
  for (const InputSpec& in : f.inputs) {
    std::vector<int64_t> d{batch};
    for (int i = 0; i < in.shape.rank(); ++i) d.push_back(in.shape[i]);
    b.inputs.push_back(b.g.input(in.name, Shape(d), in.dtype));
  }
  b.owners.assign(b.g.size(), "");
  b.outputs = walk(b, model.inputs(), model.layer_calls(), model.outputs(), b.inputs, "");
  b.owners.resize(b.g.size());
  return b;
}

// d1 (at batch 2) and d2 (at batch 3) as one dimension: a size, or -k for k B.
int64_t dimension(int64_t d1, int64_t d2, bool* ok) {
  if (d1 == d2) return d1;
  *ok = *ok && d1 % 2 == 0 && d1 / 2 * 3 == d2;
  return -(d1 / 2);
}

Dims dims_of(const Shape& s1, const Shape& s2, bool* ok) {
  Dims d;
  *ok = *ok && s1.rank() == s2.rank();
  for (int i = 0; *ok && i < s1.rank(); ++i) d.push_back(dimension(s1[i], s2[i], ok));
  return d;
}

onnx::TensorProto_DataType onnx_type(DType t) {
  switch (t) {
    case DType::Float32:
      return onnx::TensorProto::FLOAT;
    case DType::Int32:
      return onnx::TensorProto::INT32;
    case DType::Int64:
      return onnx::TensorProto::INT64;
  }
  return onnx::TensorProto::UNDEFINED;
}

void value_info(onnx::ValueInfoProto* v, const std::string& name, DType dtype, const Dims& d) {
  v->set_name(name);
  onnx::TypeProto_Tensor* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx_type(dtype));
  onnx::TensorShapeProto* s = t->mutable_shape();
  for (int64_t x : d) {
    onnx::TensorShapeProto_Dimension* dim = s->add_dim();
    if (x >= 0)
      dim->set_dim_value(x);
    else
      dim->set_dim_param(x == -1 ? "batch" : std::to_string(-x) + "*batch");
  }
}

// Whether the model reads input `in` only through a permutation to channels
// last ({N, C, H, W} to {N, H, W, C}, two swaps of axes: how an imported ONNX
// model reads its image input): the input is NCHW already.
bool read_as_nchw(const Graph& g, int32_t in) {
  auto consumers = [&](int32_t v) {
    std::vector<int32_t> out;
    for (size_t k = 0; k < g.size(); ++k)
      for (Value x : g.nodes()[k].input_values())
        if (x.id == v) out.push_back(int32_t(k));
    return out;
  };
  auto swaps = [&](int32_t k, int a, int b) {
    const Node& n = g.nodes()[size_t(k)];
    return n.op == OpKind::Transpose && std::min(n.attrs.axis, n.attrs.axis2) == a &&
           std::max(n.attrs.axis, n.attrs.axis2) == b;
  };
  const std::vector<int32_t> first = consumers(in);
  for (int32_t k : first) {
    const std::vector<int32_t> second = consumers(k);
    if (!swaps(k, 1, 2) || second.empty()) return false;
    for (int32_t k2 : second)
      if (!swaps(k2, 2, 3)) return false;
  }
  return !first.empty();
}

}  // namespace

void save_onnx(const nn::Model& model, const std::string& path, const OnnxExportOptions& options) {
  const Built b1 = build(model, 2), b2 = build(model, 3);
  const Graph& g = b1.g;
  // Every dimension a size or a multiple of the batch; the graphs alike but for them.
  std::vector<Dims> dims(g.size()), attr_dims(g.size());
  if (b2.g.size() != g.size())
    throw ValueError(
        "save_onnx: the model's graph differs between batch sizes (a layer builds other ops for "
        "other batches); it cannot be written with a symbolic batch");
  for (size_t i = 0; i < g.size(); ++i) {
    const Node &n1 = g.nodes()[i], &n2 = b2.g.nodes()[i];
    bool ok = n1.op == n2.op && n1.n_inputs == n2.n_inputs;
    dims[i] = dims_of(n1.shape, n2.shape, &ok);
    attr_dims[i] = dims_of(n1.attrs.shape, n2.attrs.shape, &ok);
    OpAttrs a1 = n1.attrs, a2 = n2.attrs;
    a1.shape = a2.shape = Shape{};
    if (n1.op == OpKind::Slice && n1.shape[n1.attrs.axis] != n2.shape[n1.attrs.axis]) a1.length = a2.length;
    ok = ok && a1 == a2;
    if (!ok) {
      const std::string& layer = b1.owners[i];
      throw ValueError("save_onnx: " + (layer.empty() ? std::string("the model") : "layer '" + layer + "'") +
                       " computes across the batch (its op '" + op_info(n1.op).name + "' is " + n1.shape.str() +
                       " at batch 2 and " + n2.shape.str() +
                       " at batch 3, or its attributes change with the batch); a file with a symbolic batch "
                       "cannot hold it");
    }
  }

  onnx::ModelProto proto;
  proto.set_ir_version(8);
  proto.set_producer_name("tensorgrad");
  proto.set_producer_version(version());
  onnx::OperatorSetIdProto* opset = proto.add_opset_import();
  opset->set_domain("");
  opset->set_version(17);
  onnx::GraphProto& graph = *proto.mutable_graph();
  graph.set_name(model.name());
  Writer w(graph, g, dims, attr_dims, b1.owners);

  // The values the outputs need; the rest (a random stream's counter) is not written.
  std::vector<bool> live(g.size(), false);
  for (Value o : b1.outputs) live[size_t(o.id)] = true;
  for (size_t i = g.size(); i-- > 0;)
    if (live[i])
      for (Value in : g.nodes()[i].input_values()) live[size_t(in.id)] = true;

  std::set<std::string> taken;
  for (size_t i = 0; i < g.size(); ++i) {
    const Value v{int32_t(i)};
    const Node& n = g.nodes()[i];
    w.begin(v);
    if (n.role == NodeRole::Input) {
      const bool nchw =
          options.image_layout == OnnxImageLayout::NCHW && n.shape.rank() == 4 && !read_as_nchw(g, int32_t(i));
      Dims d = dims[i];
      if (nchw) d = {d[0], d[3], d[1], d[2]};
      value_info(graph.add_input(), n.name, n.dtype, d);
      taken.insert(n.name);
      if (i == 0) w.set_batch_source(n.name);
      if (nchw) {
        onnx::NodeProto& t = w.add("Transpose", {n.name});
        Writer::attr(t, "perm", std::vector<int64_t>{0, 2, 3, 1});
        w.set_name(v, t.output(0));
      } else {
        w.set_name(v, n.name);
      }
    } else if (!live[i]) {
      continue;
    } else if (n.role == NodeRole::Parameter || n.role == NodeRole::State) {
      std::string name = n.name.empty() ? "weight" : n.name;
      for (int k = 1; taken.count(name); ++k) name = n.name + "_" + std::to_string(k);
      taken.insert(name);
      w.set_name(v, w.tensor(n.bound, name));
    } else {
      emit(w, v);
    }
  }
  const std::vector<std::string> out_names = model.output_names();
  for (size_t k = 0; k < b1.outputs.size(); ++k) {
    const Value o = b1.outputs[k];
    w.begin(o);
    if (w.hidden_only(o) > 0) w.refuse("an output is an LSTM's or GRU's fused output");
    onnx::NodeProto* id = graph.add_node();
    id->set_op_type("Identity");
    id->set_name(out_names[k] + "/output");
    id->add_input(w.name(o));
    id->add_output(out_names[k]);
    value_info(graph.add_output(), out_names[k], g.node(o).dtype, dims[size_t(o.id)]);
  }

  // A file ONNX's own checker or strict shape inference refuses is the exporter's bug, not the user's.
  try {
    onnx::checker::check_model(proto);
    onnx::ModelProto inferred = proto;
    onnx::ShapeInferenceOptions strict{true, 1, false};
    onnx::shape_inference::InferShapes(inferred, onnx::OpSchemaRegistry::Instance(), strict);
  } catch (const std::exception& e) {
    throw Error(std::string("save_onnx: the ONNX graph written for model '") + model.name() +
                "' fails ONNX's checker (a bug in tensorgrad's exporter; please report it): " + e.what());
  }
  std::string bytes;
  if (!proto.SerializeToString(&bytes))
    throw Error("save_onnx: the model does not serialize as a protobuf (over 2 GiB of weights?)");
  AtomicFile file(path);
  file.write(bytes.data(), bytes.size());
  file.commit();
}

}  // namespace tensorgrad::io

#else  // built without ONNX

#include "tensorgrad/core/error.h"

namespace tensorgrad::io {

void save_onnx(const nn::Model&, const std::string&, const OnnxExportOptions&) {
  throw StateError(
      "save_onnx: this build of tensorgrad has no ONNX support; install Debian's libonnx-dev (scripts/setup.sh does) "
      "and build again with TENSORGRAD_ONNX=AUTO or ON");
}

}  // namespace tensorgrad::io

#endif  // TENSORGRAD_WITH_ONNX
