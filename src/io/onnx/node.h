// The ONNX importer's inner parts (io::load_onnx, io/onnx.h): a node as the
// importer holds it, the lowering of each op onto Builder ops, and the
// folding of nodes whose inputs are all constants (shape computations).
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tensorgrad/core/error.h"
#include "tensorgrad/core/tensor.h"
#include "tensorgrad/ops/builder.h"

namespace tensorgrad::io::onnx_import {

constexpr int kMinOpset = 6, kMaxOpset = 17;

// Stands for the batch size in a folded shape (the Shape of an activation):
// a model plans for any batch, so the importer never knows it. It may be
// moved around (Gather, Concat, Slice) but not computed with.
constexpr int64_t kBatch = std::numeric_limits<int64_t>::min() / 2;

// An int64 tensor known at import: a shape, axes, indices.
struct IntValue {
  std::vector<int64_t> dims;
  std::vector<int64_t> v;
};

// One ONNX attribute, as the lowerings read it (a tensor attribute: its
// first element, as ConstantOfShape's value).
struct Attr {
  int64_t i = 0;
  float f = 0.0f;
  std::string s;
  std::vector<int64_t> ints;
  bool tensor_is_int = false;
  double tensor_value = 0.0;
  int64_t tensor_int = 0;  // an int tensor's value exactly (a double holds 53 bits)
  bool set = false;
};

// A node as a layer: its op, attributes, and for each ONNX input slot either
// the next activation (weight index -1) or a constant held as a weight.
struct NodeSpec {
  std::string op_type, node_name;
  int opset = 0;
  // Set while folding constants: every axis is free (no batch).
  bool constant_fold = false;
  int n_outputs = 1;
  std::map<std::string, Attr> attrs;
  std::vector<int> slots;                               // per ONNX input: index into weights, or -1 for an activation
  std::vector<std::pair<std::string, Tensor>> weights;  // ONNX name, value
  std::vector<bool> weight_trainable;
  // int64 constant inputs (Reshape's shape, Squeeze's axes from opset 13),
  // by ONNX input slot: read as attributes, not operands.
  std::map<int, IntValue> int_inputs;
  std::map<int, size_t> weight_at;  // ONNX input slot -> index into weights

  float scalar_input(int slot, float fallback) const {
    auto it = weight_at.find(slot);
    if (it == weight_at.end()) return fallback;
    const Tensor& t = weights[it->second].second;
    if (t.numel() != 1)
      throw ValueError("load_onnx: " + where() + ": input " + std::to_string(slot) + " holds " +
                       std::to_string(t.numel()) + " values; a scalar is read");
    return t.data<float>()[0];
  }
  bool has_attr(const std::string& name) const {
    auto it = attrs.find(name);
    return it != attrs.end() && it->second.set;
  }
  int64_t int_attr(const std::string& name, int64_t fallback) const {
    return has_attr(name) ? attrs.at(name).i : fallback;
  }
  float float_attr(const std::string& name, float fallback) const {
    return has_attr(name) ? attrs.at(name).f : fallback;
  }
  std::string string_attr(const std::string& name, const std::string& fallback) const {
    return has_attr(name) ? attrs.at(name).s : fallback;
  }
  // A list attribute, or (from the opsets that moved it to an input) the
  // int64 constant at input `slot`; `found` says whether either was given.
  std::vector<int64_t> ints(const std::string& name, int slot, bool* found = nullptr) const {
    if (has_attr(name)) {
      if (found) *found = true;
      return attrs.at(name).ints;
    }
    if (auto it = int_inputs.find(slot); it != int_inputs.end()) {
      if (found) *found = true;
      return it->second.v;
    }
    if (found) *found = false;
    return {};
  }
  std::string where() const { return op_type + " node '" + node_name + "' (opset " + std::to_string(opset) + ")"; }
};

// a * b for sizes a file gives; FormatError on overflow (a malformed shape).
inline int64_t checked_mul(int64_t a, int64_t b, const NodeSpec& n) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r))
    throw FormatError("load_onnx: " + n.where() + ": sizes whose product overflows int64 (an absurd shape)");
  return r;
}

// The ops read, for error messages.
extern const char* const kSupported;

ValueError unsupported(const NodeSpec& n, const std::string& what);

// A Transpose's perm (the axes reversed when not given), checked to be a
// permutation of `rank` axes (FormatError otherwise).
std::vector<int64_t> transpose_perm(const NodeSpec& n, int64_t rank);

// A Slice's starts, ends, axes (0, 1, ... when not given) and steps (empty:
// all 1), from attributes before opset 10 and inputs after; FormatError
// unless they have one length.
struct SliceParams {
  std::vector<int64_t> starts, ends, axes, steps;
};
SliceParams slice_params(const NodeSpec& n);

// The comparisons, the logic ops and Where: the bool tensors they make and
// read are held as float32 0 and 1 (masks), so an int64 or bool constant
// beside a float operand is read as a float constant.
bool is_mask_op(const std::string& op);

// Checks the node's operands at import (what the lowering assumes).
void check_node(const NodeSpec& n);

// ValueError (through unsupported) for an attribute that the node's op is
// not read with (ONNX's checker refuses those its schema does not define;
// the others would be silently dropped).
void check_attributes(const NodeSpec& n);

// Whether `op` may read an int64 (or int32, bool) constant at input `slot`
// (a shape, axes, indices, pads): false where it reads float32 (ONNX's
// type constraints); true for ops not read here (refused by name later).
bool reads_int_constant(const std::string& op, size_t slot);

// The node written with Builder ops on `operands` (slot order, activations
// and bound weights mixed as the file has them): one value per output.
std::vector<Value> lower(const NodeSpec& n, Builder& b, std::span<const Value> operands);

// An LSTM or GRU node's W, R and B (ONNX's {directions, gates * H, ...},
// gates i, o, f, c and z, r, h) made the engine's per direction: kernel
// {I, gates * H}, recurrent kernel {H, gates * H}, bias {gates * H} (gates
// i, f, c, o and z, r, n) and, for GRU, the recurrent bias.
void recurrent_weights(NodeSpec& n);

// A constant at import: int64 (shapes, axes, indices) or float32.
struct Constant {
  bool is_int = false;
  IntValue ints;
  Tensor f;
};

// The outputs of a node whose inputs are all constants (by slot; null for an
// absent optional input), computed at import. Throws ValueError (through
// unsupported) for an op that is not folded.
std::vector<Constant> fold(const NodeSpec& n, std::span<const Constant* const> inputs);

}  // namespace tensorgrad::io::onnx_import
