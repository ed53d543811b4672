// The ONNX exporter's inner parts (io::save_onnx, io/onnx.h): a model's
// inference graph, built from its layers at two batch sizes so that every
// dimension is known as a size or a multiple of the batch, written node by
// node as ONNX nodes, one emitter per op (io/onnx/emit.cpp).
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tensorgrad/graph/graph.h"

namespace tensorgrad::io::onnx_export {

// A dimension as the exporter knows it: a size (>= 0), or -k for k times the
// batch size.
using Dims = std::vector<int64_t>;

// What the emitters write through: the ONNX graph, the ONNX name of every
// node's value, and the dimensions of every node and of its attrs.shape.
class Writer {
 public:
  Writer(onnx::GraphProto& graph, const Graph& g, std::vector<Dims> dims, std::vector<Dims> attr_dims,
         std::vector<std::string> owners);

  const Graph& graph() const { return g_; }
  // The layer that made node v ("" for the model's inputs), for messages and node names.
  const std::string& owner(Value v) const { return owners_[size_t(v.id)]; }
  // The dimensions of node v's value, and of its attrs.shape.
  const Dims& dims(Value v) const { return dims_[size_t(v.id)]; }
  const Dims& attr_dims(Value v) const { return attr_dims_[size_t(v.id)]; }
  // The ONNX name of node v's value (set once its node is written).
  const std::string& name(Value v) const { return names_[size_t(v.id)]; }
  void set_name(Value v, std::string name) { names_[size_t(v.id)] = std::move(name); }
  // An LSTM's or GRU's fused output {B, T, k H} written as its hidden
  // states {B, T, H} only (ONNX's LSTM and GRU give no gates): H, else 0.
  int64_t hidden_only(Value v) const { return hidden_only_[size_t(v.id)]; }
  void set_hidden_only(Value v, int64_t units) { hidden_only_[size_t(v.id)] = units; }

  // Appends a node of `op_type` on `inputs` ("" for an absent optional
  // input) with `n_outputs` fresh outputs named after the node being
  // written; returns the node (its outputs are output(0), ...).
  onnx::NodeProto& add(const std::string& op_type, const std::vector<std::string>& inputs, int n_outputs = 1);
  // add(...) and its first output's name.
  std::string op(const std::string& op_type, const std::vector<std::string>& inputs);
  // Attributes of a node.
  static void attr(onnx::NodeProto& n, const std::string& name, int64_t v);
  static void attr(onnx::NodeProto& n, const std::string& name, float v);
  static void attr(onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& v);

  // Initializers: an int64 tensor {v.size()} (or a scalar), a float32
  // scalar, a float32 tensor; each returns its name.
  std::string ints(const std::vector<int64_t>& v, bool scalar = false);
  std::string scalar(float v);
  std::string tensor(const Tensor& t, const std::string& name = "");
  // An int64 {rank} shape for `d`: a constant when no dimension depends on
  // the batch, else computed from the first input's batch size.
  std::string shape(const Dims& d);
  // A Reshape's target for `d`: -1 for its one batch-dependent dimension,
  // else as shape().
  std::string reshape_target(const Dims& d);

  // Throws ValueError naming the node's layer and what it cannot write.
  [[noreturn]] void refuse(const std::string& what) const;

  // Sets the node being written (names and messages refer to it).
  void begin(Value v) { current_ = v; }
  Value current() const { return current_; }
  // The first model input's name (the batch size is read from it).
  void set_batch_source(std::string name) { batch_source_ = std::move(name); }

 private:
  std::string fresh(const std::string& hint);

  onnx::GraphProto& graph_;
  const Graph& g_;
  std::vector<Dims> dims_, attr_dims_;
  std::vector<std::string> owners_, names_;
  std::vector<int64_t> hidden_only_;
  Value current_{0};
  std::string batch_source_, batch_;
  int64_t counter_ = 0;
};

// Writes node v (an op) through `w`, setting its value's name.
void emit(Writer& w, Value v);

}  // namespace tensorgrad::io::onnx_export
