// io::load_onnx (io/onnx.h): an ONNX graph read with libonnx's protobuf
// classes, each node made one layer ("OnnxNode") of a functional model. A
// node's operands are the model's activations (symbolic tensors) or the
// file's constants (initializers, Constant nodes), which the layer holds as
// weights; one lowering function per op writes the node with Builder ops,
// and serves both the layer's shape rule (on a scratch graph) and its call.
#include "tensorgrad/io/onnx.h"

#include "tensorgrad/core/error.h"

#ifdef TENSORGRAD_WITH_ONNX

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tensorgrad/graph/graph.h"
#include "tensorgrad/nn/layers.h"

namespace tensorgrad::io {

namespace {

// What the reader accepts before allocating: a file or a tensor beyond these
// is refused as malformed rather than allocated.
constexpr int64_t kMaxFileBytes = int64_t(1) << 31;
constexpr int64_t kMaxElements = int64_t(1) << 31;
constexpr int kMinOpset = 7, kMaxOpset = 17;

const char* const kSupported =
    "Add, AveragePool, BatchNormalization, Clip, Concat, Constant, Conv, Div, Dropout, Elu, Erf, Exp, Flatten, Gemm, "
    "GlobalAveragePool, Identity, LeakyRelu, Log, LogSoftmax, MatMul, MaxPool, Mul, Neg, Pow, ReduceMax, ReduceMean, "
    "ReduceSum, Relu, Reshape, Sigmoid, Softmax, Softplus, Sqrt, Squeeze, Sub, Tanh, Transpose, Unsqueeze";

// The ops that read an image in ONNX's NCHW and run here on the engine's
// NHWC (channels last): their input is converted once, and their output
// stays NHWC for the ops that do not care (element-wise ones) until an op
// that reads the layout needs NCHW again.
const std::set<std::string> kImageOps = {"Conv", "MaxPool", "AveragePool", "GlobalAveragePool",
                                         "BatchNormalization"};
// The ops that give the same result in either layout (the constants they
// read are converted to NHWC at import).
const std::set<std::string> kLayoutFree = {"Relu", "Sigmoid", "Tanh", "Erf", "Exp", "Log", "Sqrt", "LeakyRelu",
                                           "Elu", "Identity", "Dropout", "Neg", "Softplus", "Clip", "Pow",
                                           "Add", "Sub", "Mul", "Div"};

// One ONNX attribute, as the lowerings read it.
struct Attr {
  int64_t i = 0;
  float f = 0.0f;
  std::string s;
  std::vector<int64_t> ints;
  bool set = false;
};

// A node as a layer: its op, attributes, and for each ONNX input slot either
// the next activation (weight index -1) or a constant held as a weight.
struct NodeSpec {
  std::string op_type, node_name;
  int opset = 0;
  std::map<std::string, Attr> attrs;
  std::vector<int> slots;  // per ONNX input: index into weights, or -1 for an activation
  std::vector<std::pair<std::string, Tensor>> weights;  // ONNX name, value
  std::vector<bool> weight_trainable;
  // int64 constant inputs (Reshape's shape, Squeeze's axes from opset 13),
  // by ONNX input slot: read as attributes, not operands.
  std::map<int, std::vector<int64_t>> int_inputs;
  std::map<int, size_t> weight_at;  // ONNX input slot -> index into weights
  float scalar_input(int slot, float fallback) const {
    auto it = weight_at.find(slot);
    return it == weight_at.end() ? fallback : weights[it->second].second.data<float>()[0];
  }

  int64_t int_attr(const std::string& name, int64_t fallback) const {
    auto it = attrs.find(name);
    return it != attrs.end() && it->second.set ? it->second.i : fallback;
  }
  float float_attr(const std::string& name, float fallback) const {
    auto it = attrs.find(name);
    return it != attrs.end() && it->second.set ? it->second.f : fallback;
  }
  // A list attribute, or (from the opsets that moved it to an input) the
  // int64 constant at input `slot`; `found` says whether either was given.
  std::vector<int64_t> ints(const std::string& name, int slot, bool* found = nullptr) const {
    if (auto it = attrs.find(name); it != attrs.end() && it->second.set) {
      if (found) *found = true;
      return it->second.ints;
    }
    if (auto it = int_inputs.find(slot); it != int_inputs.end()) {
      if (found) *found = true;
      return it->second;
    }
    if (found) *found = false;
    return {};
  }
  std::string where() const {
    return op_type + " node '" + node_name + "' (opset " + std::to_string(opset) + ")";
  }
};

ValueError unsupported(const NodeSpec& n, const std::string& what) {
  return ValueError("load_onnx: " + n.where() + ": " + what + ". The ops read so far: " + kSupported);
}

// The node written with Builder ops on `operands` (slot order, activations
// and bound weights mixed as the file has them).
Value lower(const NodeSpec& n, Builder& b, std::span<const Value> x) {
  const std::string& op = n.op_type;
  auto unary = [&](OpKind kind, float param = 0.0f) { return b.unary(kind, x[0], param); };
  if (op == "Relu") return b.relu(x[0]);
  if (op == "Sigmoid") return b.sigmoid(x[0]);
  if (op == "Tanh") return b.tanh(x[0]);
  if (op == "Erf") return unary(OpKind::Erf);
  if (op == "Exp") return b.exp(x[0]);
  if (op == "Log") return b.log(x[0]);
  if (op == "Sqrt") return b.sqrt(x[0]);
  if (op == "LeakyRelu") return unary(OpKind::LeakyRelu, n.float_attr("alpha", 0.01f));
  if (op == "Elu") return unary(OpKind::Elu, n.float_attr("alpha", 1.0f));
  if (op == "Identity" || op == "Dropout") return x[0];
  if (op == "Neg") return b.scale(x[0], -1.0f);
  if (op == "Softplus") return unary(OpKind::Softplus);
  if (op == "Pow") return b.pow(x[0], n.scalar_input(1, 1.0f));
  if (op == "Clip")
    return b.clamp(x[0], n.scalar_input(1, n.float_attr("min", -INFINITY)),
                   n.scalar_input(2, n.float_attr("max", INFINITY)));
  const Shape s0 = b.shape(x[0]);
  const int rank = s0.rank();
  auto axis_of = [&](int64_t a, int r) {
    const int64_t ax = a < 0 ? a + r : a;
    if (ax <= 0 || ax >= r)
      throw unsupported(n, "axis " + std::to_string(a) + " of a rank-" + std::to_string(r) +
                               " tensor (axis 0 is the batch, which an op may not change)");
    return int(ax);
  };
  if (op == "Reshape") {
    const std::vector<int64_t> target = n.ints("shape", 1);
    std::vector<int64_t> dims;
    int64_t known = 1, infer = -1;
    for (size_t i = 0; i < target.size(); ++i) {
      // The first entry is the batch, whatever the exporter wrote there.
      int64_t d = i == 0 ? s0[0] : target[i] == 0 && n.int_attr("allowzero", 0) == 0 ? s0[int(i)] : target[i];
      if (d == -1) infer = int64_t(i);
      else known *= d;
      dims.push_back(d);
    }
    if (infer >= 0) dims[size_t(infer)] = known > 0 ? s0.numel() / known : 0;
    return b.reshape(x[0], Shape(dims));
  }
  if (op == "Squeeze" || op == "Unsqueeze") {
    const std::vector<int64_t> axes = n.ints("axes", 1);
    std::vector<int64_t> dims;
    for (int d = 0; d < rank; ++d) dims.push_back(s0[d]);
    if (op == "Squeeze") {
      std::set<int> drop;
      for (int64_t a : axes) drop.insert(axis_of(a, rank));
      if (axes.empty())
        for (int d = 1; d < rank; ++d)
          if (s0[d] == 1) drop.insert(d);
      std::vector<int64_t> out;
      for (int d = 0; d < rank; ++d)
        if (!drop.count(d)) out.push_back(dims[size_t(d)]);
        else if (dims[size_t(d)] != 1) throw unsupported(n, "squeezing an axis whose size is not 1");
      return b.reshape(x[0], Shape(out));
    }
    const int out_rank = rank + int(axes.size());
    std::set<int> add;
    for (int64_t a : axes) add.insert(axis_of(a, out_rank));
    std::vector<int64_t> out;
    size_t next = 0;
    for (int d = 0; d < out_rank; ++d) out.push_back(add.count(d) ? 1 : dims[next++]);
    return b.reshape(x[0], Shape(out));
  }
  if (op == "Transpose") {
    std::vector<int64_t> perm = n.ints("perm", -1);
    if (perm.empty())
      for (int d = rank - 1; d >= 0; --d) perm.push_back(d);
    if (int(perm.size()) != rank || perm[0] != 0)
      throw unsupported(n, "a permutation that moves the batch axis (perm[0] must be 0)");
    // The permutation as swaps of two axes, from the first axis on.
    std::vector<int64_t> at(static_cast<size_t>(rank));  // at[i]: which input axis sits at position i
    for (int d = 0; d < rank; ++d) at[size_t(d)] = d;
    Value y = x[0];
    for (int i = 1; i < rank; ++i) {
      int j = i;
      while (at[size_t(j)] != perm[size_t(i)]) ++j;
      if (j != i) {
        y = b.transpose(y, i, j);
        std::swap(at[size_t(i)], at[size_t(j)]);
      }
    }
    return y;
  }
  if (op == "Concat") return b.concat(x, axis_of(n.int_attr("axis", 0), rank));
  if (op == "ReduceMean" || op == "ReduceSum" || op == "ReduceMax") {
    bool given = false;
    std::vector<int64_t> axes = n.ints("axes", 1, &given);
    if (!given || (axes.empty() && n.int_attr("noop_with_empty_axes", 0) == 0))
      throw unsupported(n, "a reduction over every axis, the batch's included (a model computes row by row)");
    const bool keep = n.int_attr("keepdims", 1) != 0;
    std::vector<int> sorted;
    for (int64_t a : axes) sorted.push_back(axis_of(a, rank));
    std::sort(sorted.rbegin(), sorted.rend());  // the highest first, so the others keep their index
    Value y = x[0];
    for (int a : sorted)
      y = op == "ReduceMean" ? b.mean_axis(y, a, keep) : op == "ReduceSum" ? b.sum_axis(y, a, keep) : b.max_axis(y, a, keep);
    return y;
  }
  if (op == "Add") return b.add(x[0], x[1]);
  if (op == "Sub") return b.sub(x[0], x[1]);
  if (op == "Mul") return b.mul(x[0], x[1]);
  if (op == "Div") return b.div(x[0], x[1]);
  if (op == "Conv" || op == "MaxPool" || op == "AveragePool") {
    // x is NHWC here; a Conv weight was made {kh, kw, C, F} at import.
    const std::vector<int64_t> k =
        op == "Conv" ? std::vector<int64_t>{b.shape(x[1])[0], b.shape(x[1])[1]} : n.ints("kernel_shape", -1);
    const std::vector<int64_t> st = n.ints("strides", -1), dl = n.ints("dilations", -1), pd = n.ints("pads", -1);
    OpAttrs at;
    at.window.kh = k.at(0);
    at.window.kw = k.at(1);
    if (st.size() == 2) at.window.sh = st[0], at.window.sw = st[1];
    if (dl.size() == 2) at.window.dh = dl[0], at.window.dw = dl[1];
    if (pd.size() == 4) at.window.pad_top = pd[0], at.window.pad_left = pd[1], at.window.pad_bottom = pd[2],
                        at.window.pad_right = pd[3];
    if (op != "Conv") return b.windowed(op == "MaxPool" ? OpKind::MaxPool2D : OpKind::AvgPool2D, x[0], at.window);
    if (x.size() > 2) return b.apply(OpKind::Conv2D, {x[0], x[1], x[2]}, at);
    return b.apply(OpKind::Conv2D, {x[0], x[1]}, at);
  }
  if (op == "GlobalAveragePool") return b.mean_axis(b.mean_axis(x[0], 1, true), 2, true);
  if (op == "BatchNormalization") {
    // Inference form, per channel (the last axis here): (x - mean) / sqrt(var + eps) * scale + bias.
    const float eps = n.float_attr("epsilon", 1e-5f);
    const Value inv = b.apply(OpKind::Rsqrt, {b.add(x[4], b.fill({}, eps))});
    return b.add(b.mul(b.sub(x[0], x[3]), b.mul(inv, x[1])), x[2]);
  }
  if (op == "Softmax" || op == "LogSoftmax") {
    const Shape s = b.shape(x[0]);
    // Before opset 13 the axis (default 1) flattens the input into 2-D at
    // that axis: at the last axis, the same softmax as from opset 13.
    const int64_t axis = n.int_attr("axis", n.opset < 13 ? 1 : -1);
    const int64_t last = s.rank() - 1;
    if (axis != -1 && axis != last)
      throw unsupported(n, "a softmax over axis " + std::to_string(axis) + " of a rank-" + std::to_string(s.rank()) +
                               " input (only the last axis is read)");
    return op == "Softmax" ? b.softmax(x[0]) : b.log_softmax(x[0]);
  }
  if (op == "Flatten") {
    if (n.int_attr("axis", 1) != 1) throw unsupported(n, "Flatten with axis != 1 (the batch stays the first axis)");
    const Shape s = b.shape(x[0]);
    return b.reshape(x[0], Shape{s[0], s.numel() / std::max<int64_t>(s[0], 1)});
  }
  if (op == "MatMul") {
    // Activations {..., K} by a weight {K, N}: the leading axes as rows.
    const Shape s = b.shape(x[0]), w = b.shape(x[1]);
    const int64_t k = s[s.rank() - 1];
    const Value rows = s.rank() == 2 ? x[0] : b.reshape(x[0], Shape{s.numel() / std::max<int64_t>(k, 1), k});
    Value y = b.matmul(rows, x[1]);
    if (s.rank() == 2) return y;
    Shape out = s;
    out.set(s.rank() - 1, w[1]);
    return b.reshape(y, out);
  }
  if (op == "Gemm") {
    const bool trans_b = n.int_attr("transB", 0) != 0;
    const float alpha = n.float_attr("alpha", 1.0f), beta = n.float_attr("beta", 1.0f);
    Value y = b.matmul(x[0], x[1], false, trans_b);
    if (alpha != 1.0f) y = b.scale(y, alpha);
    if (x.size() > 2) {
      Value c = x[2];
      if (beta != 1.0f) c = b.scale(c, beta);
      y = b.add(y, c);
    }
    return y;
  }
  throw unsupported(n, "this op is not read");
}

// Checks the node's operands at import (what the lowering assumes).
void check_node(const NodeSpec& n) {
  const std::string& op = n.op_type;
  auto activation = [&](size_t i) { return i < n.slots.size() && n.slots[i] < 0; };
  auto weight = [&](size_t i) { return i < n.slots.size() && n.slots[i] >= 0; };
  static const std::set<std::string> unary = {"Relu",    "Sigmoid", "Tanh",      "Erf",     "Exp",     "Log",
                                              "Sqrt",    "LeakyRelu", "Elu",     "Identity", "Softmax", "LogSoftmax",
                                              "Flatten", "Neg",     "Softplus",  "Transpose"};
  // Ops whose later inputs are int64 constants (shapes, axes), held apart.
  static const std::set<std::string> shaped = {"Reshape", "Squeeze", "Unsqueeze", "ReduceMean", "ReduceSum",
                                               "ReduceMax"};
  static const std::set<std::string> binary = {"Add", "Sub", "Mul", "Div"};
  if (op == "Conv" || op == "MaxPool" || op == "AveragePool") {
    auto it = n.attrs.find("auto_pad");
    if (it != n.attrs.end() && it->second.set && it->second.s != "NOTSET" && it->second.s != "VALID")
      throw unsupported(n, "auto_pad = " + it->second.s + " (give explicit pads)");
  }
  if (unary.count(op)) {
    if (n.slots.size() != 1 || !activation(0)) throw unsupported(n, "expected one input computed by the model");
  } else if (shaped.count(op)) {
    if (n.slots.empty() || !activation(0) || n.slots.size() > 1)
      throw unsupported(n, "expected its data computed by the model and its shape or axes as int64 constants");
    if (op == "Reshape" && !n.int_inputs.count(1)) throw unsupported(n, "Reshape needs its target shape as a constant");
  } else if (op == "Concat") {
    for (size_t i = 0; i < n.slots.size(); ++i)
      if (!activation(i)) throw unsupported(n, "Concat of a constant (only tensors computed by the model are joined)");
  } else if (op == "Pow" || op == "Clip") {
    if (n.slots.empty() || !activation(0)) throw unsupported(n, "expected its input computed by the model");
    for (size_t i = 1; i < n.slots.size(); ++i)
      if (!weight(i)) throw unsupported(n, "its exponent or bounds must be constants of the file");
    for (const auto& [slot, w] : n.weight_at)
      if (n.weights[w].second.numel() != 1) throw unsupported(n, "its exponent or bounds must be scalars");
    if (op == "Pow" && !n.weight_at.count(1)) throw unsupported(n, "Pow needs its exponent");
  } else if (op == "Conv") {
    if (n.slots.size() < 2 || !activation(0) || !weight(1) || (n.slots.size() > 2 && !weight(2)))
      throw unsupported(n, "Conv is read as an image computed by the model and weights of the file");
    if (n.int_attr("group", 1) != 1) throw unsupported(n, "a grouped convolution (group != 1)");
    if (n.weights[size_t(n.slots[1])].second.shape().rank() != 4) throw unsupported(n, "a convolution that is not 2-D");
  } else if (op == "MaxPool" || op == "AveragePool") {
    if (n.slots.size() != 1 || !activation(0)) throw unsupported(n, "expected one input computed by the model");
    if (n.ints("kernel_shape", -1).size() != 2) throw unsupported(n, "a pooling that is not 2-D");
    if (n.int_attr("ceil_mode", 0) != 0) throw unsupported(n, "ceil_mode = 1");
    if (n.int_attr("storage_order", 0) != 0) throw unsupported(n, "storage_order = 1");
    if (op == "AveragePool")
      for (int64_t p : n.ints("pads", -1))
        if (p != 0) throw unsupported(n, "an AveragePool with padding (its count_include_pad rule is not read)");
  } else if (op == "GlobalAveragePool") {
    if (n.slots.size() != 1 || !activation(0)) throw unsupported(n, "expected one input computed by the model");
  } else if (op == "BatchNormalization") {
    if (n.slots.size() != 5 || !activation(0))
      throw unsupported(n, "expected an input computed by the model and scale, bias, mean and variance of the file");
    for (size_t i = 1; i < 5; ++i)
      if (!weight(i)) throw unsupported(n, "its scale, bias, mean and variance must be weights of the file");
    if (n.int_attr("training_mode", 0) != 0) throw unsupported(n, "training_mode = 1");
  } else if (op == "Dropout") {
    if (n.slots.empty() || !activation(0)) throw unsupported(n, "expected its data input computed by the model");
  } else if (binary.count(op)) {
    if (n.slots.size() != 2 || (!activation(0) && !activation(1)))
      throw unsupported(n, "expected two inputs, at least one computed by the model");
  } else if (op == "MatMul") {
    if (n.slots.size() != 2 || !activation(0) || !weight(1) ||
        n.weights[size_t(n.slots[1])].second.shape().rank() != 2)
      throw unsupported(n, "MatMul is read as activations times a 2-D weight of the file");
  } else if (op == "Gemm") {
    if (n.slots.size() < 2 || !activation(0) || !weight(1) || (n.slots.size() > 2 && !weight(2)))
      throw unsupported(n, "Gemm is read as activations times a weight of the file, plus a bias of the file");
    if (n.int_attr("transA", 0) != 0) throw unsupported(n, "Gemm with transA = 1 (the batch must be the rows)");
  } else {
    throw unsupported(n, "this op is not read");
  }
}

class OnnxNode final : public nn::Layer {
 public:
  explicit OnnxNode(std::shared_ptr<const NodeSpec> spec) : Layer("onnx_node"), spec_(std::move(spec)) {}
  const char* type() const override { return "OnnxNode"; }

  Shape build(const Shape& input_shape) override { return build_inputs({&input_shape, 1}); }
  Shape build_inputs(std::span<const Shape> shapes) override {
    if (ids_.empty())
      for (size_t i = 0; i < spec_->weights.size(); ++i) {
        const Tensor value = spec_->weights[i].second;
        ids_.push_back(add_weight({spec_->weights[i].first, value.shape(),
                                   [value](const Shape&) { return value.clone(); },
                                   spec_->weight_trainable[i], value.dtype()}));
      }
    // The shape rule is the lowering's, run on a scratch graph of one row.
    Graph g;
    std::vector<Value> operands;
    size_t next = 0;
    for (int slot : spec_->slots) {
      if (slot >= 0) {
        operands.push_back(g.parameter(spec_->weights[size_t(slot)].second, "w", false));
      } else {
        Shape s = shapes[next];
        std::vector<int64_t> dims{1};
        for (int d = 0; d < s.rank(); ++d) dims.push_back(s[d]);
        operands.push_back(g.input("x" + std::to_string(next), Shape(dims)));
        ++next;
      }
    }
    const Shape out = g.shape(lower(*spec_, g, operands));
    if (out.rank() < 1) throw unsupported(*spec_, "its result has no batch dimension");
    std::vector<int64_t> dims;
    for (int d = 1; d < out.rank(); ++d) dims.push_back(out[d]);
    return Shape(dims);
  }
  Value call(Builder& b, Value x, const nn::CallOptions& options) override { return call_inputs(b, {&x, 1}, options); }
  Value call_inputs(Builder& b, std::span<const Value> inputs, const nn::CallOptions&) override {
    std::vector<Value> operands;
    size_t next = 0;
    for (int slot : spec_->slots) operands.push_back(slot >= 0 ? bind_weight(b, ids_[size_t(slot)]) : inputs[next++]);
    return lower(*spec_, b, operands);
  }
  std::shared_ptr<nn::Layer> clone() const override { return nn::clone_layer(*this); }
  nn::LayerConfig config() const override {
    nn::LayerConfig c(type());
    c.set("op_type", spec_->op_type).set("onnx_node", spec_->node_name);
    return c;
  }

 private:
  std::shared_ptr<const NodeSpec> spec_;
  std::vector<nn::WeightId> ids_;
};

int64_t checked_elements(const google::protobuf::RepeatedField<int64_t>& dims, const std::string& what) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0 || (d > 0 && n > kMaxElements / d))
      throw FormatError("load_onnx: " + what + " has an impossible shape (a dimension " + std::to_string(d) +
                        ", or more than 2^31 elements)");
    n *= d;
  }
  return n;
}

// A float32 initializer or Constant value as a Tensor (raw_data or
// float_data, little-endian as ONNX writes it).
Tensor read_tensor(const onnx::TensorProto& t, const std::string& what) {
  if (t.data_location() == onnx::TensorProto::EXTERNAL)
    throw ValueError("load_onnx: " + what + " keeps its data in an external file, which is not read yet");
  const int64_t n = checked_elements(t.dims(), what);
  std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
  if (t.data_type() == onnx::TensorProto::DOUBLE)
    throw TypeError("load_onnx: " + what + " is float64; only float32 weights are read so far");
  if (t.data_type() != onnx::TensorProto::FLOAT)
    throw TypeError("load_onnx: " + what + " has ONNX data type " + std::to_string(t.data_type()) +
                    "; only float32 tensors are read so far");
  Tensor out = Tensor::empty(Shape(dims));
  float* p = out.data<float>();
  if (!t.raw_data().empty()) {
    if (int64_t(t.raw_data().size()) != n * 4)
      throw FormatError("load_onnx: " + what + " holds " + std::to_string(t.raw_data().size()) +
                        " bytes of data for " + std::to_string(n) + " float32 elements");
    std::memcpy(p, t.raw_data().data(), size_t(n) * 4);
  } else {
    if (t.float_data_size() != n)
      throw FormatError("load_onnx: " + what + " holds " + std::to_string(t.float_data_size()) + " floats for " +
                        std::to_string(n) + " elements");
    for (int64_t i = 0; i < n; ++i) p[i] = t.float_data(int(i));
  }
  return out;
}

// A rank-4 tensor with its axes permuted (out axis i = in axis perm[i]).
Tensor permuted(const Tensor& t, const std::array<int, 4>& perm) {
  const Shape s = t.shape();
  Shape out{s[perm[0]], s[perm[1]], s[perm[2]], s[perm[3]]};
  Tensor r = Tensor::empty(out);
  int64_t in_stride[4];
  in_stride[3] = 1;
  for (int d = 2; d >= 0; --d) in_stride[d] = in_stride[d + 1] * s[d + 1];
  const float* src = t.data<float>();
  float* dst = r.data<float>();
  int64_t i = 0;
  for (int64_t a = 0; a < out[0]; ++a)
    for (int64_t b = 0; b < out[1]; ++b)
      for (int64_t c = 0; c < out[2]; ++c)
        for (int64_t d = 0; d < out[3]; ++d)
          dst[i++] = src[a * in_stride[perm[0]] + b * in_stride[perm[1]] + c * in_stride[perm[2]] +
                         d * in_stride[perm[3]]];
  return r;
}

// A constant of rank <= 4 with leading 1s up to rank 4 (NumPy's
// broadcasting aligns it so against an NCHW image).
Tensor padded_to_4(const Tensor& t) {
  std::vector<int64_t> dims(size_t(4 - t.shape().rank()), 1);
  for (int d = 0; d < t.shape().rank(); ++d) dims.push_back(t.shape()[d]);
  return t.reshape(Shape(dims));
}

// An int64 initializer or Constant (a shape, axes) as values.
std::vector<int64_t> read_ints(const onnx::TensorProto& t, const std::string& what) {
  if (t.data_location() == onnx::TensorProto::EXTERNAL)
    throw ValueError("load_onnx: " + what + " keeps its data in an external file, which is not read yet");
  const int64_t n = checked_elements(t.dims(), what);
  std::vector<int64_t> v(static_cast<size_t>(n));
  if (!t.raw_data().empty()) {
    if (int64_t(t.raw_data().size()) != n * 8)
      throw FormatError("load_onnx: " + what + " holds " + std::to_string(t.raw_data().size()) +
                        " bytes of data for " + std::to_string(n) + " int64 elements");
    std::memcpy(v.data(), t.raw_data().data(), size_t(n) * 8);
  } else {
    if (t.int64_data_size() != n)
      throw FormatError("load_onnx: " + what + " holds " + std::to_string(t.int64_data_size()) + " values for " +
                        std::to_string(n) + " elements");
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = t.int64_data(int(i));
  }
  return v;
}

std::string layer_name(const std::string& raw, std::set<std::string>& taken) {
  std::string s;
  for (char c : raw) s += (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.') ? c : '_';
  if (s.empty()) s = "onnx_node";
  std::string name = s;
  for (int k = 1; taken.count(name); ++k) name = s + "_" + std::to_string(k);
  taken.insert(name);
  return name;
}

}  // namespace

bool onnx_available() { return true; }

nn::Model load_onnx(const std::string& path, const OnnxOptions& options) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw IOError("load_onnx: cannot open '" + path + "'; check the path");
  const std::streamoff size = in.tellg();
  if (size < 0 || size > kMaxFileBytes)
    throw FormatError("load_onnx: '" + path + "' is " + std::to_string(size) +
                      " bytes; a model of more than 2 GiB keeps its weights in external data, not read yet");
  in.seekg(0);
  std::string bytes(size_t(size), '\0');
  if (!in.read(bytes.data(), size)) throw IOError("load_onnx: reading '" + path + "' failed");
  onnx::ModelProto model;
  if (!model.ParseFromString(bytes))
    throw FormatError("load_onnx: '" + path + "' is not an ONNX model (the protobuf is truncated or corrupt)");
  if (!model.has_graph()) throw FormatError("load_onnx: '" + path + "' has no graph");

  int opset = 0;
  for (const onnx::OperatorSetIdProto& o : model.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") opset = int(o.version());
  if (opset < kMinOpset || opset > kMaxOpset)
    throw ValueError("load_onnx: '" + path + "' uses opset " + std::to_string(opset) + "; opsets " +
                     std::to_string(kMinOpset) + " to " + std::to_string(kMaxOpset) +
                     " are read (export with opset_version in that range)");

  const onnx::GraphProto& graph = model.graph();
  std::map<std::string, Tensor> constants;  // initializers and Constant outputs
  std::map<std::string, std::vector<int64_t>> int_constants;  // int64 ones: shapes and axes
  std::set<std::string> from_file;          // the initializers (trainable unless frozen)
  for (const onnx::TensorProto& t : graph.initializer()) {
    if (t.data_type() == onnx::TensorProto::INT64) {
      int_constants[t.name()] = read_ints(t, "initializer '" + t.name() + "'");
      continue;
    }
    constants[t.name()] = read_tensor(t, "initializer '" + t.name() + "'");
    from_file.insert(t.name());
  }
  std::map<std::string, nn::SymbolicTensor> activations;
  std::vector<nn::SymbolicTensor> inputs;
  for (const onnx::ValueInfoProto& v : graph.input()) {
    if (constants.count(v.name())) continue;  // an initializer listed as an input (older exporters)
    const onnx::TypeProto_Tensor& tt = v.type().tensor_type();
    if (tt.elem_type() != onnx::TensorProto::FLOAT)
      throw TypeError("load_onnx: input '" + v.name() + "' has ONNX data type " + std::to_string(tt.elem_type()) +
                      "; only float32 inputs are read so far");
    const auto& dims = tt.shape().dim();
    if (dims.size() < 2)
      throw ValueError("load_onnx: input '" + v.name() + "' has " + std::to_string(dims.size()) +
                       " dimension(s); an input needs a batch dimension first and at least one more");
    std::vector<int64_t> shape;
    for (int d = 1; d < dims.size(); ++d) {
      if (!dims[d].has_dim_value() || dims[d].dim_value() <= 0)
        throw ValueError("load_onnx: input '" + v.name() + "' has a symbolic or empty dimension " + std::to_string(d) +
                         "; only the first (the batch) may be symbolic");
      shape.push_back(dims[d].dim_value());
    }
    nn::SymbolicTensor x = nn::Input(Shape(shape), DType::Float32, v.name());
    activations[v.name()] = x;
    inputs.push_back(x);
  }
  std::set<std::string> outputs_wanted;
  for (const onnx::ValueInfoProto& v : graph.output()) outputs_wanted.insert(v.name());

  std::set<std::string> taken;
  std::set<std::string> nhwc;  // activations held channels-last
  std::map<std::pair<std::string, bool>, nn::SymbolicTensor> converted;
  // `x` (activation `name`) in NHWC (to_nhwc) or NCHW, by one Transpose
  // layer made the first time it is asked for.
  auto to_layout = [&](const std::string& name, const nn::SymbolicTensor& x, bool to_nhwc,
                       const std::string& layer_as = "") {
    auto key = std::make_pair(name, to_nhwc);
    if (auto it = converted.find(key); it != converted.end()) return it->second;
    auto spec = std::make_shared<NodeSpec>();
    spec->op_type = "Transpose";
    spec->node_name = name + (to_nhwc ? "_to_nhwc" : "_to_nchw");
    spec->opset = opset;
    spec->attrs["perm"].set = true;
    spec->attrs["perm"].ints = to_nhwc ? std::vector<int64_t>{0, 2, 3, 1} : std::vector<int64_t>{0, 3, 1, 2};
    spec->slots.push_back(-1);
    auto layer = std::make_shared<OnnxNode>(spec);
    layer->set_name(layer_name(layer_as.empty() ? spec->node_name : layer_as, taken));
    return converted[key] = (*layer)(x);
  };
  for (int k = 0; k < graph.node_size(); ++k) {
    const onnx::NodeProto& node = graph.node(k);
    if (!node.domain().empty() && node.domain() != "ai.onnx")
      throw ValueError("load_onnx: node '" + node.name() + "' is in domain '" + node.domain() +
                       "'; only ONNX's default domain is read");
    auto spec = std::make_shared<NodeSpec>();
    spec->op_type = node.op_type();
    spec->node_name = node.name().empty() ? node.op_type() + "_" + std::to_string(k) : node.name();
    spec->opset = opset;
    for (const onnx::AttributeProto& a : node.attribute()) {
      Attr& at = spec->attrs[a.name()];
      at.set = true;
      at.i = a.i();
      at.f = a.f();
      at.ints.assign(a.ints().begin(), a.ints().end());
      at.s = a.s();
    }
    if (node.output_size() < 1) throw FormatError("load_onnx: " + spec->where() + " has no output");
    if (spec->op_type == "Constant") {
      if (!node.attribute_size() || !node.attribute(0).has_t())
        throw unsupported(*spec, "a Constant without a tensor value attribute ('value')");
      const onnx::TensorProto& t = node.attribute(0).t();
      if (t.data_type() == onnx::TensorProto::INT64)
        int_constants[node.output(0)] = read_ints(t, "Constant '" + node.output(0) + "'");
      else
        constants[node.output(0)] = read_tensor(t, "Constant '" + node.output(0) + "'");
      continue;
    }
    std::vector<nn::SymbolicTensor> args;
    std::vector<std::string> arg_names;
    int n_inputs = node.input_size();
    if (spec->op_type == "Dropout") n_inputs = 1;  // ratio and training_mode: inference only
    for (int i = 0; i < n_inputs; ++i) {
      const std::string& name = node.input(i);
      if (name.empty()) continue;  // an absent optional input
      if (auto c = int_constants.find(name); c != int_constants.end()) {
        spec->int_inputs[i] = c->second;
      } else if (auto c = constants.find(name); c != constants.end()) {
        spec->weight_at[i] = spec->weights.size();
        spec->slots.push_back(int(spec->weights.size()));
        spec->weights.emplace_back(name, c->second);
        spec->weight_trainable.push_back(options.trainable && from_file.count(name) != 0);
      } else if (auto a = activations.find(name); a != activations.end()) {
        spec->slots.push_back(-1);
        args.push_back(a->second);
        arg_names.push_back(name);
      } else {
        throw FormatError("load_onnx: " + spec->where() + " reads '" + name +
                          "', which no input, initializer or earlier node defines (the nodes must be in "
                          "topological order)");
      }
    }
    if (args.empty())
      throw unsupported(*spec, "all its inputs are constants (shape computations are not folded yet)");
    check_node(*spec);
    // Layouts: an image op reads NHWC; a layout-free op keeps NHWC when an
    // input has it (its other images and its constants are converted); any
    // other op reads the file's NCHW.
    const std::string& op = spec->op_type;
    bool any_nhwc = false;
    for (const std::string& a : arg_names) any_nhwc = any_nhwc || nhwc.count(a);
    const bool out_nhwc = kImageOps.count(op) || (kLayoutFree.count(op) && any_nhwc);
    for (size_t i = 0; i < args.size(); ++i) {
      const bool is_nhwc = nhwc.count(arg_names[i]) != 0;
      if (out_nhwc && !is_nhwc) {
        if (args[i].shape().rank() != 3)
          throw unsupported(*spec, "an image input that is not {N, C, H, W}");
        args[i] = to_layout(arg_names[i], args[i], true);
      } else if (!out_nhwc && is_nhwc) {
        args[i] = to_layout(arg_names[i], args[i], false);
      }
    }
    if (op == "Conv") {  // {F, C, kh, kw} -> the engine's {kh, kw, C, F}
      Tensor& w = spec->weights[size_t(spec->slots[1])].second;
      w = permuted(w, {2, 3, 1, 0});
    } else if (out_nhwc && kLayoutFree.count(op)) {
      for (auto& [name, w] : spec->weights)
        if (w.shape().rank() >= 1 && w.numel() > 1) w = permuted(padded_to_4(w), {0, 2, 3, 1});
    }
    auto layer = std::make_shared<OnnxNode>(spec);
    const bool is_output = outputs_wanted.count(node.output(0)) != 0;
    layer->set_name(layer_name(is_output && !out_nhwc ? node.output(0) : spec->node_name, taken));
    activations[node.output(0)] = args.size() == 1 ? (*layer)(args[0]) : (*layer)(args);
    if (out_nhwc) nhwc.insert(node.output(0));
  }
  std::vector<nn::SymbolicTensor> outputs;
  for (const onnx::ValueInfoProto& v : graph.output()) {
    auto a = activations.find(v.name());
    if (a == activations.end())
      throw ValueError("load_onnx: output '" + v.name() + "' is not computed from the inputs by a node read here");
    outputs.push_back(nhwc.count(v.name()) ? to_layout(v.name(), a->second, false, v.name()) : a->second);
  }
  if (inputs.empty() || outputs.empty())
    throw FormatError("load_onnx: '" + path + "' has no inputs or no outputs");
  return nn::Model(inputs, outputs, options.name.empty() ? graph.name() : options.name);
}

}  // namespace tensorgrad::io

#else  // built without ONNX

namespace tensorgrad::io {

bool onnx_available() { return false; }

nn::Model load_onnx(const std::string& path, const OnnxOptions&) {
  throw StateError("load_onnx('" + path +
                   "'): this build of tensorgrad has no ONNX support; install libonnx-dev (scripts/setup.sh does) "
                   "and configure again with -DTENSORGRAD_ONNX=AUTO or ON");
}

}  // namespace tensorgrad::io

#endif
