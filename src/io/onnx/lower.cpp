// Each ONNX op written with Builder ops (io/onnx/node.h). One function serves
// a node's shape rule (on a scratch graph of one row), its call in the model,
// and the folding of constant nodes (on an eager builder).
#ifdef TENSORGRAD_WITH_ONNX

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

#include "io/onnx/held.h"
#include "io/onnx/node.h"
#include "tensorgrad/ops/gradients.h"

namespace tensorgrad::io::onnx_import {

const char* const kSupported =
    "Abs, Add, AveragePool, BatchNormalization, Cast, Celu, Clip, Concat, Constant, ConstantOfShape, Conv, Div, "
    "Dropout, Elu, Erf, Exp, Expand, Flatten, Gather, Gemm, GlobalAveragePool, GlobalMaxPool, HardSigmoid, "
    "HardSwish, Identity, LayerNormalization, LeakyRelu, Log, LogSoftmax, MatMul, Max, MaxPool, Mean, Min, Mul, "
    "Neg, Pad, Pow, PRelu, Range, Reciprocal, ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp, ReduceMax, "
    "ReduceMean, ReduceMin, ReduceSum, ReduceSumSquare, Relu, Reshape, Selu, Shape, Sigmoid, Size, Slice, Softmax, "
    "Softplus, Softsign, Split, Sqrt, Squeeze, Sub, Sum, Tanh, Transpose, Unsqueeze, and on masks (bool tensors, "
    "held as float32 0/1) And, Equal, Greater, GreaterOrEqual, Less, LessOrEqual, Not, Or, Where, Xor";

ValueError unsupported(const NodeSpec& n, const std::string& what) {
  return ValueError("load_onnx: " + n.where() + ": " + what + ". The ops read so far: " + kSupported);
}

namespace {

// The operand kinds each op takes, for check_node.
const std::set<std::string> kUnary = {"Relu",          "Sigmoid",    "Tanh",       "Erf",      "Exp",
                                      "Log",           "Sqrt",       "LeakyRelu",  "Elu",      "Identity",
                                      "Softmax",       "LogSoftmax", "Flatten",    "Neg",      "Softplus",
                                      "Transpose",     "Abs",        "Reciprocal", "Softsign", "HardSigmoid",
                                      "HardSwish",     "Selu",       "Celu",       "Cast",     "GlobalAveragePool",
                                      "GlobalMaxPool", "MaxPool",    "AveragePool"};
// Ops whose later inputs are int64 constants (shapes, axes, pads), held apart.
const std::set<std::string> kShaped = {
    "Reshape",  "Squeeze",      "Unsqueeze",       "ReduceMean",      "ReduceSum", "ReduceMax", "ReduceMin", "ReduceL1",
    "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "Slice",     "Split",     "Expand",    "Gather"};
const std::set<std::string> kVariadic = {"Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Mean"};
// is_mask_op's, with their operand counts.
const std::map<std::string, size_t> kMaskOps = {
    {"Equal", 2}, {"Less", 2}, {"Greater", 2}, {"LessOrEqual", 2}, {"GreaterOrEqual", 2},
    {"Not", 1},   {"And", 2},  {"Or", 2},      {"Xor", 2},         {"Where", 3}};

// x with its axes permuted (out axis i = in axis perm[i]), as swaps of two axes.
Value permute(Builder& b, Value x, const std::vector<int64_t>& perm) {
  const int rank = int(perm.size());
  std::vector<int64_t> at(static_cast<size_t>(rank));  // at[i]: which input axis sits at position i
  std::iota(at.begin(), at.end(), 0);
  for (int i = 0; i < rank; ++i) {
    int j = i;
    while (at[size_t(j)] != perm[size_t(i)]) ++j;
    if (j != i) {
      x = b.transpose(x, i, j);
      std::swap(at[size_t(i)], at[size_t(j)]);
    }
  }
  return x;
}

// Any number of values joined along `axis`, in groups of the most one Concat takes.
Value concat_all(Builder& b, std::vector<Value> parts, int axis) {
  while (parts.size() > 1) {
    std::vector<Value> next;
    for (size_t i = 0; i < parts.size(); i += kMaxOpInputs) {
      const size_t n = std::min<size_t>(kMaxOpInputs, parts.size() - i);
      next.push_back(n == 1 ? parts[i] : b.concat(std::span<const Value>(parts.data() + i, n), axis));
    }
    parts = std::move(next);
  }
  return parts.at(0);
}

// The axes of s before `axis`, then the rest as one (LayerNormalization's
// and opset < 13 Softmax's view of their input).
std::vector<int64_t> flattened_from(const Shape& s, int axis) {
  std::vector<int64_t> flat;
  int64_t rest = 1;
  for (int i = 0; i < s.rank(); ++i)
    if (i < axis)
      flat.push_back(s[i]);
    else
      rest *= s[i];
  flat.push_back(rest);
  return flat;
}

std::vector<int64_t> dims_of(const Shape& s) {
  std::vector<int64_t> d;
  for (int i = 0; i < s.rank(); ++i) d.push_back(s[i]);
  return d;
}

// ONNX's Slice bounds (NumPy's, clamped) for one axis of size `dim`, step 1.
std::pair<int64_t, int64_t> slice_bounds(int64_t start, int64_t end, int64_t dim) {
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  start = std::clamp<int64_t>(start, 0, dim);
  end = std::clamp<int64_t>(end, 0, dim);
  return {start, std::max(start, end)};
}

}  // namespace

bool is_mask_op(const std::string& op) { return kMaskOps.count(op) != 0; }

std::vector<Value> lower(const NodeSpec& n, Builder& b, std::span<const Value> x) {
  const std::string& op = n.op_type;
  auto shape_of = [&](const std::vector<int64_t>& dims) {
    if (dims.size() > size_t(Shape::kMaxRank))
      throw unsupported(n, "a tensor of rank " + std::to_string(dims.size()) + " (at most " +
                               std::to_string(Shape::kMaxRank) + " dimensions are read)");
    return Shape(dims);
  };
  // Operand counts, checked here too: folding reaches this without check_node.
  static const std::map<std::string, std::pair<size_t, size_t>> kOperands = {{"PRelu", {2, 2}},
                                                                             {"MatMul", {2, 2}},
                                                                             {"Gemm", {2, 3}},
                                                                             {"Conv", {2, 3}},
                                                                             {"BatchNormalization", {5, 5}},
                                                                             {"LayerNormalization", {2, 3}}};
  if (x.empty()) throw unsupported(n, "a node without a tensor input");
  if (auto it = kOperands.find(op);
      it != kOperands.end() && (x.size() < it->second.first || x.size() > it->second.second))
    throw FormatError("load_onnx: " + n.where() + ": " + std::to_string(x.size()) + " tensor inputs; expected " +
                      std::to_string(it->second.first) + " to " + std::to_string(it->second.second));
  auto one = [](Value v) { return std::vector<Value>{v}; };
  auto unary = [&](OpKind kind, float param = 0.0f) { return b.unary(kind, x[0], param); };
  auto abs = [&](Value v) { return b.add(b.relu(v), b.relu(b.scale(v, -1.0f))); };
  const Shape s0 = b.shape(x[0]);
  const int rank = s0.rank();
  // A non-negative axis of a rank-r tensor; the batch axis is refused unless folding constants.
  auto axis_of = [&](int64_t a, int r) {
    const int64_t ax = a < 0 ? a + r : a;
    if (ax < 0 || ax >= r || (ax == 0 && !n.constant_fold))
      throw unsupported(n, "axis " + std::to_string(a) + " of a rank-" + std::to_string(r) +
                               " tensor (axis 0 is the batch, which an op may not change)");
    return int(ax);
  };
  // A shape given as int64 values: the batch marker (first entry only) is the batch.
  auto target_dims = [&](const std::vector<int64_t>& t) {
    std::vector<int64_t> d = t;
    for (size_t i = 0; i < d.size(); ++i)
      if (is_batch(d[i])) {
        if (i != 0 || d[i] != kBatch || n.constant_fold)
          throw unsupported(n, "a shape that moves the batch size off the first axis");
        d[i] = s0[0];
      }
    return d;
  };
  if (op == "Relu") return one(b.relu(x[0]));
  if (op == "Sigmoid") return one(b.sigmoid(x[0]));
  if (op == "Tanh") return one(b.tanh(x[0]));
  if (op == "Erf") return one(unary(OpKind::Erf));
  if (op == "Exp") return one(b.exp(x[0]));
  if (op == "Log") return one(b.log(x[0]));
  if (op == "Sqrt") return one(b.sqrt(x[0]));
  if (op == "LeakyRelu") return one(unary(OpKind::LeakyRelu, n.float_attr("alpha", 0.01f)));
  if (op == "Elu") return one(unary(OpKind::Elu, n.float_attr("alpha", 1.0f)));
  if (op == "Selu")
    return one(b.scale(unary(OpKind::Elu, n.float_attr("alpha", 1.67326319217681884765625f)),
                       n.float_attr("gamma", 1.05070102214813232421875f)));
  if (op == "Celu") {
    const float alpha = n.float_attr("alpha", 1.0f);
    return one(b.scale(b.unary(OpKind::Elu, b.scale(x[0], 1.0f / alpha), 1.0f), alpha));
  }
  if (op == "Cast" && n.int_attr("to", 1) == 9) {  // to bool: x != 0 (NaN too) as a 0/1 mask
    const Value zero = b.fill({}, 0.0f);
    const Value is_zero = b.mul(b.apply(OpKind::GreaterEqual, {x[0], zero}), b.apply(OpKind::GreaterEqual, {zero, x[0]}));
    return one(b.masked_fill(b.fill({}, 1.0f), is_zero, 0.0f));
  }
  if (op == "Identity" || op == "Dropout" || op == "Cast") return one(x[0]);
  if (op == "Neg") return one(b.scale(x[0], -1.0f));
  if (op == "Abs") return one(abs(x[0]));
  if (op == "Reciprocal") return one(b.div(b.fill({}, 1.0f), x[0]));
  if (op == "Softsign") return one(b.div(x[0], b.add(abs(x[0]), b.fill({}, 1.0f))));
  if (op == "HardSigmoid" || op == "HardSwish") {
    const float alpha = op == "HardSwish" ? 1.0f / 6.0f : n.float_attr("alpha", 0.2f);
    const float beta = op == "HardSwish" ? 0.5f : n.float_attr("beta", 0.5f);
    const Value h = b.clamp(b.add(b.scale(x[0], alpha), b.fill({}, beta)), 0.0f, 1.0f);
    return one(op == "HardSwish" ? b.mul(x[0], h) : h);
  }
  if (op == "Softplus") return one(unary(OpKind::Softplus));
  if (op == "Pow") return one(b.pow(x[0], n.scalar_input(1, 1.0f)));
  if (op == "Clip")
    return one(b.clamp(x[0], n.scalar_input(1, n.float_attr("min", -INFINITY)),
                       n.scalar_input(2, n.float_attr("max", INFINITY))));
  if (kVariadic.count(op) || op == "PRelu" || is_mask_op(op)) {
    // A constant as long as an activation along the batch axis would read
    // rows of its own: the scratch graph of one row cannot tell.
    int act_rank = 0;
    for (size_t i = 0; i < x.size(); ++i)
      if (n.slots[i] < 0) act_rank = std::max(act_rank, b.shape(x[i]).rank());
    for (size_t i = 0; i < x.size() && !n.constant_fold; ++i)
      if (n.slots[i] >= 0 && b.shape(x[i]).rank() >= act_rank && b.shape(x[i])[0] != 1)
        throw unsupported(n, "a constant of shape " + b.shape(x[i]).str() + " that spans the batch axis");
  }
  if (op == "PRelu") return one(b.sub(b.relu(x[0]), b.mul(x[1], b.relu(b.scale(x[0], -1.0f)))));
  if (is_mask_op(op)) {
    if (x.size() != kMaskOps.at(op))
      throw FormatError("load_onnx: " + n.where() + ": " + std::to_string(x.size()) + " inputs; expected " +
                        std::to_string(kMaskOps.at(op)));
    // Masks are 0/1 floats; a >= b is the one comparison kernel, and the
    // strict ones are built so that a NaN compares false, as IEEE's.
    auto ge = [&](Value l, Value r) { return b.apply(OpKind::GreaterEqual, {l, r}); };
    auto negate = [&](Value m) { return b.masked_fill(b.fill({}, 1.0f), m, 0.0f); };
    if (op == "Not") return one(negate(x[0]));
    if (op == "Equal") return one(b.mul(ge(x[0], x[1]), ge(x[1], x[0])));
    if (op == "GreaterOrEqual") return one(ge(x[0], x[1]));
    if (op == "LessOrEqual") return one(ge(x[1], x[0]));
    if (op == "Greater") return one(b.masked_fill(ge(x[0], x[1]), ge(x[1], x[0]), 0.0f));
    if (op == "Less") return one(b.masked_fill(ge(x[1], x[0]), ge(x[0], x[1]), 0.0f));
    if (op == "And") return one(b.mul(x[0], x[1]));
    if (op == "Or") return one(b.maximum(x[0], x[1]));
    if (op == "Xor") return one(b.masked_fill(b.maximum(x[0], x[1]), b.mul(x[0], x[1]), 0.0f));
    // Where: a scalar constant branch (masked_fill's pattern, -inf for
    // attention) is one masked_fill; otherwise both branches masked and added.
    auto scalar = [&](size_t i) { return n.slots[i] >= 0 && n.weights[size_t(n.slots[i])].second.numel() == 1; };
    auto value = [&](size_t i) { return n.weights[size_t(n.slots[i])].second.data<float>()[0]; };
    if (scalar(1) && !scalar(2)) return one(b.masked_fill(x[2], x[0], value(1)));
    if (scalar(2) && !scalar(1)) return one(b.masked_fill(x[1], negate(x[0]), value(2)));
    return one(b.where(x[0], x[1], x[2]));
  }
  if (kVariadic.count(op)) {
    std::vector<Value> xs(x.begin(), x.end());
    if (n.opset < 7 && n.int_attr("broadcast", 0) != 0 && xs.size() == 2 && n.has_attr("axis")) {
      // Before opset 7: the second operand's axes line up from `axis` on.
      const Shape sb = b.shape(xs[1]);
      const int64_t axis = n.int_attr("axis", 0) < 0 ? n.int_attr("axis", 0) + rank : n.int_attr("axis", 0);
      std::vector<int64_t> d = dims_of(sb);
      for (int64_t i = axis + sb.rank(); i < rank; ++i) d.push_back(1);
      xs[1] = b.reshape(xs[1], shape_of(d));
    }
    Value y = xs[0];
    for (size_t i = 1; i < xs.size(); ++i)
      y = op == "Add" || op == "Sum" || op == "Mean" ? b.add(y, xs[i])
          : op == "Sub"                              ? b.sub(y, xs[i])
          : op == "Mul"                              ? b.mul(y, xs[i])
          : op == "Div"                              ? b.div(y, xs[i])
          : op == "Max"                              ? b.maximum(y, xs[i])
                                                     : b.minimum(y, xs[i]);
    if (op == "Mean" && x.size() > 1) y = b.scale(y, 1.0f / float(x.size()));
    return one(y);
  }
  if (op == "Reshape") {
    const std::vector<int64_t> target = n.ints("shape", 1);
    if (target.empty()) throw unsupported(n, "a reshape to a scalar");
    std::vector<int64_t> dims;
    int64_t known = 1, infer = -1;
    for (size_t i = 0; i < target.size(); ++i) {
      if (target[i] == 0 && n.int_attr("allowzero", 0) == 0 && int(i) >= rank)
        throw FormatError("load_onnx: " + n.where() + ": a 0 (copy) at axis " + std::to_string(i) +
                          ", past its input's rank " + std::to_string(rank));
      int64_t d = target[i] == 0 && n.int_attr("allowzero", 0) == 0 ? s0[int(i)] : target[i];
      if (i == 0 && !n.constant_fold) d = s0[0];  // the batch: checked below
      if (is_batch(d)) throw unsupported(n, "a shape that moves the batch size off the first axis");
      if (d == -1)
        infer = int64_t(i);
      else
        known = checked_mul(known, d, n);
      dims.push_back(d);
    }
    if (!n.constant_fold && target[0] != kBatch && target[0] != 0) {
      // A literal first entry (an export traced at one batch size) is the
      // batch when the other entries keep each row's elements together.
      int64_t rest = 1;
      bool rest_infers = false;
      for (size_t i = 1; i < dims.size(); ++i)
        rest_infers |= dims[i] == -1, rest = checked_mul(rest, dims[i] == -1 ? 1 : dims[i], n);
      const int64_t row = s0.numel() / std::max<int64_t>(s0[0], 1);
      if (rest_infers ? row % std::max<int64_t>(rest, 1) != 0 : rest != row)
        throw unsupported(n, "a Reshape whose target moves elements between rows of the batch");
    }
    if (infer >= 0) dims[size_t(infer)] = known > 0 ? s0.numel() / known : 0;
    for (int64_t d : dims)
      if (d == 0) throw unsupported(n, "a shape with a dimension of size 0 (empty tensors are not read)");
    return one(b.reshape(x[0], shape_of(dims)));
  }
  if (op == "Flatten") {
    int64_t axis = n.int_attr("axis", 1);
    if (axis < 0) axis += rank;
    if (axis < 0 || axis > rank) throw unsupported(n, "axis " + std::to_string(axis) + " out of range");
    int64_t rows = 1;
    for (int d = 0; d < axis; ++d) rows *= s0[d];
    if (!n.constant_fold && (axis == 0 || rows != s0[0]))
      throw unsupported(n, "a Flatten that merges the batch with another axis (axis " + std::to_string(axis) + ")");
    return one(b.reshape(x[0], Shape{rows, rows > 0 ? s0.numel() / rows : 0}));
  }
  if (op == "Squeeze" || op == "Unsqueeze") {
    const std::vector<int64_t> axes = n.ints("axes", 1);
    std::vector<int64_t> dims = dims_of(s0);
    if (op == "Squeeze") {
      std::set<int> drop;
      for (int64_t a : axes) drop.insert(axis_of(a, rank));
      if (axes.empty())
        for (int d = n.constant_fold ? 0 : 1; d < rank; ++d)
          if (s0[d] == 1) drop.insert(d);
      std::vector<int64_t> out;
      for (int d = 0; d < rank; ++d)
        if (!drop.count(d))
          out.push_back(dims[size_t(d)]);
        else if (dims[size_t(d)] != 1)
          throw unsupported(n, "squeezing an axis whose size is not 1");
      return one(b.reshape(x[0], Shape(out)));
    }
    const int out_rank = rank + int(axes.size());
    std::set<int> add;
    for (int64_t a : axes) add.insert(axis_of(a, out_rank));
    std::vector<int64_t> out;
    size_t next = 0;
    for (int d = 0; d < out_rank; ++d) out.push_back(add.count(d) ? 1 : dims[next++]);
    return one(b.reshape(x[0], shape_of(out)));
  }
  if (op == "Transpose") {
    const std::vector<int64_t> perm = transpose_perm(n, rank);
    if (perm[0] != 0 && !n.constant_fold)
      throw unsupported(n, "a permutation that moves the batch axis (perm[0] must be 0)");
    return one(permute(b, x[0], perm));
  }
  if (op == "Expand") {
    const std::vector<int64_t> target = target_dims(n.ints("shape", 1));
    // NumPy's broadcasting of the input against the target.
    const int r = std::max<int>(rank, int(target.size()));
    std::vector<int64_t> out(static_cast<size_t>(r));
    for (int i = 0; i < r; ++i) {
      const int ia = i - (r - rank), it = i - (r - int(target.size()));
      const int64_t a = ia >= 0 ? s0[ia] : 1, t = it >= 0 ? target[size_t(it)] : 1;
      if (a != t && a != 1 && t != 1) throw unsupported(n, "a target shape that does not broadcast with its input");
      out[size_t(i)] = a == 1 ? t : a;
    }
    if (!n.constant_fold && out[0] != s0[0]) throw unsupported(n, "an Expand along the batch axis");
    return one(b.broadcast_to(x[0], shape_of(out)));
  }
  if (op == "Concat")
    return one(concat_all(b, std::vector<Value>(x.begin(), x.end()), axis_of(n.int_attr("axis", 0), rank)));
  if (op == "Slice") {
    const auto [starts, ends, axes, steps] = slice_params(n);
    Value y = x[0];
    for (size_t i = 0; i < starts.size(); ++i) {
      if (!steps.empty() && steps[i] != 1) throw unsupported(n, "a Slice with a step other than 1");
      const int64_t a = axes[i] < 0 ? axes[i] + rank : axes[i];
      if (a < 0 || a >= rank) throw unsupported(n, "axis " + std::to_string(axes[i]) + " out of range");
      if (a == 0 && !n.constant_fold) {
        // The batch axis only whole, whatever the batch size.
        if (starts[i] != 0 || (ends[i] < (int64_t(1) << 31) && !is_batch(ends[i])))
          throw unsupported(n, "a Slice of part of the batch axis");
        continue;
      }
      const auto [lo, hi] = slice_bounds(starts[i], ends[i], s0[int(a)]);
      if (lo == 0 && hi == s0[int(a)]) continue;
      y = b.slice(y, int(a), lo, hi - lo);
    }
    return one(y);
  }
  if (op == "Split") {
    const int axis = axis_of(n.int_attr("axis", 0), rank);
    std::vector<int64_t> sizes = n.ints("split", 1);
    if (sizes.empty()) {
      if (s0[axis] % n.n_outputs != 0)
        throw unsupported(n, "an axis of size " + std::to_string(s0[axis]) + " split into " +
                                 std::to_string(n.n_outputs) + " unequal parts without sizes");
      sizes.assign(size_t(n.n_outputs), s0[axis] / n.n_outputs);
    }
    for (int64_t len : sizes)
      if (len < 0 || len > s0[axis]) throw unsupported(n, "a split size outside the axis");
    if (int(sizes.size()) != n.n_outputs || std::accumulate(sizes.begin(), sizes.end(), int64_t(0)) != s0[axis])
      throw unsupported(n, "split sizes that do not add up to the axis, one per output");
    std::vector<Value> out;
    int64_t at = 0;
    for (int64_t len : sizes) {
      out.push_back(b.slice(x[0], axis, at, len));
      at += len;
    }
    return out;
  }
  if (op == "Gather" && n.slots[0] >= 0 && !n.int_inputs.count(1)) {
    // An embedding: rows of a table of the file picked by the model's token ids.
    if (n.int_attr("axis", 0) != 0 || b.shape(x[0]).rank() != 2)
      throw unsupported(n, "a Gather of a constant that is not rows of a 2-D table (axis 0)");
    return one(b.apply(OpKind::Gather, {x[0], x[1]}));
  }
  if (op == "Gather") {
    // Constant indices along a non-batch axis of the data: the picked slices joined.
    const int axis = axis_of(n.int_attr("axis", 0), rank);
    const IntValue& idx = n.int_inputs.at(1);
    std::vector<Value> parts;
    for (int64_t i : idx.v) {
      const int64_t k = i < 0 ? i + s0[axis] : i;
      if (k < 0 || k >= s0[axis])
        throw unsupported(n, "index " + std::to_string(i) + " outside an axis of size " + std::to_string(s0[axis]));
      parts.push_back(b.slice(x[0], axis, k, 1));
    }
    if (parts.empty()) throw unsupported(n, "a Gather of no indices");
    Value y = concat_all(b, parts, axis);
    std::vector<int64_t> dims;
    for (int d = 0; d < axis; ++d) dims.push_back(s0[d]);
    dims.insert(dims.end(), idx.dims.begin(), idx.dims.end());
    for (int d = axis + 1; d < rank; ++d) dims.push_back(s0[d]);
    return one(b.reshape(y, shape_of(dims)));
  }
  if (op == "Pad") {
    // Opset 11 moved pads and the constant value from attributes to inputs.
    const std::string mode = n.string_attr("mode", "constant");
    if (mode != "constant") throw unsupported(n, "Pad mode '" + mode + "' (only 'constant' is read)");
    std::vector<int64_t> pads = n.ints(n.opset < 11 ? "pads" : "paddings", 1);
    if (n.opset < 11 && pads.empty()) pads = n.ints("pads", -1);
    const float value = n.opset < 11 ? n.float_attr("value", 0.0f) : n.scalar_input(2, 0.0f);
    std::vector<int64_t> axes = n.ints("axes", 3);
    if (axes.empty())
      for (int d = 0; d < rank; ++d) axes.push_back(d);
    if (pads.size() != 2 * axes.size()) throw unsupported(n, "pads that are not a begin and an end per axis");
    Value y = x[0];
    for (size_t i = 0; i < axes.size(); ++i) {
      const int64_t before = pads[i], after = pads[i + axes.size()];
      if (before == 0 && after == 0) continue;
      if (before < 0 || after < 0) throw unsupported(n, "negative pads (cropping)");
      const int a = axis_of(axes[i], rank);
      std::vector<Value> parts;
      Shape ps = b.shape(y);
      if (before > 0) {
        ps.set(a, before);
        parts.push_back(b.fill(ps, value));
      }
      parts.push_back(y);
      if (after > 0) {
        ps.set(a, after);
        parts.push_back(b.fill(ps, value));
      }
      y = b.concat(parts, a);
    }
    return one(y);
  }
  if (op.rfind("Reduce", 0) == 0) {
    bool given = false;
    std::vector<int64_t> axes = n.ints("axes", 1, &given);
    if (!given || axes.empty()) {
      if (given && n.int_attr("noop_with_empty_axes", 0) != 0) return one(x[0]);
      if (!n.constant_fold)
        throw unsupported(n, "a reduction over every axis, the batch's included (a model computes row by row)");
      axes.resize(size_t(rank));
      std::iota(axes.begin(), axes.end(), 0);
    }
    const bool keep = n.int_attr("keepdims", 1) != 0;
    std::vector<int> sorted;
    for (int64_t a : axes) sorted.push_back(axis_of(a, rank));
    std::sort(sorted.rbegin(), sorted.rend());  // the highest first, so the others keep their index
    Value y = x[0];
    if (op == "ReduceL1") y = abs(y);
    if (op == "ReduceL2" || op == "ReduceSumSquare") y = b.mul(y, y);
    if (op == "ReduceMin") y = b.scale(y, -1.0f);
    if (op == "ReduceLogSumExp") {
      // Shifted by the maximum, so that large inputs do not overflow.
      Value m = y;
      for (int a : sorted) m = b.max_axis(m, a, true);
      y = b.exp(b.sub(y, m));
      for (int a : sorted) y = b.sum_axis(y, a, true);
      y = b.add(b.log(y), m);
      if (keep) return one(y);
      std::vector<int64_t> d = dims_of(b.shape(y));
      for (int a : sorted) d.erase(d.begin() + a);
      return one(b.reshape(y, Shape(d)));
    }
    for (int a : sorted)
      y = op == "ReduceMean"                       ? b.mean_axis(y, a, keep)
          : op == "ReduceMax" || op == "ReduceMin" ? b.max_axis(y, a, keep)
                                                   : b.sum_axis(y, a, keep);
    if (op == "ReduceMin") y = b.scale(y, -1.0f);
    if (op == "ReduceL2") y = b.sqrt(y);
    if (op == "ReduceLogSum") y = b.log(y);
    return one(y);
  }
  if (op == "Conv" || op == "MaxPool" || op == "AveragePool") {
    // x is NHWC here; a Conv weight was made {kh, kw, C, F} at import.
    const std::vector<int64_t> k =
        op == "Conv" ? std::vector<int64_t>{b.shape(x[1])[0], b.shape(x[1])[1]} : n.ints("kernel_shape", -1);
    const std::vector<int64_t> st = n.ints("strides", -1), dl = n.ints("dilations", -1), pd = n.ints("pads", -1);
    Window2D w;
    w.kh = k.at(0);
    w.kw = k.at(1);
    if (st.size() == 2) w.sh = st[0], w.sw = st[1];
    if (dl.size() == 2) w.dh = dl[0], w.dw = dl[1];
    if (pd.size() == 4) w.pad_top = pd[0], w.pad_left = pd[1], w.pad_bottom = pd[2], w.pad_right = pd[3];
    constexpr int64_t kMaxWindow = int64_t(1) << 20;
    for (int64_t v : {w.kh, w.kw, w.sh, w.sw, w.dh, w.dw})
      if (v < 1 || v > kMaxWindow)
        throw FormatError("load_onnx: " + n.where() + ": a kernel size, stride or dilation of " + std::to_string(v) +
                          " (expected 1 to 2^20)");
    for (int64_t v : {w.pad_top, w.pad_left, w.pad_bottom, w.pad_right})
      if (v < 0 || v > kMaxWindow)
        throw FormatError("load_onnx: " + n.where() + ": a padding of " + std::to_string(v) + " (expected 0 to 2^20)");
    const std::string auto_pad = n.string_attr("auto_pad", "NOTSET");
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      // The output has ceil(size / stride) pixels; the odd pixel of padding
      // goes after (SAME_UPPER, as Keras' "same") or before.
      auto same = [&](int64_t size, int64_t kk, int64_t s, int64_t d, int64_t& lo, int64_t& hi) {
        const int64_t total = std::max<int64_t>(((size + s - 1) / s - 1) * s + (kk - 1) * d + 1 - size, 0);
        lo = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
        hi = total - lo;
      };
      same(s0[1], w.kh, w.sh, w.dh, w.pad_top, w.pad_bottom);
      same(s0[2], w.kw, w.sw, w.dw, w.pad_left, w.pad_right);
    }
    if (n.int_attr("ceil_mode", 0) != 0) {
      // The last window may start in the padding: padding after, which pooling leaves out.
      auto ceil_pad = [](int64_t size, int64_t kk, int64_t s, int64_t d, int64_t lo, int64_t& hi) {
        const int64_t span = size + lo + hi - (kk - 1) * d - 1;
        int64_t out = (span + s - 1) / s + 1;
        if ((out - 1) * s >= size + lo) --out;  // a window must start inside the input or its left padding
        hi = std::max<int64_t>(hi, (out - 1) * s + (kk - 1) * d + 1 - size - lo);
      };
      ceil_pad(s0[1], w.kh, w.sh, w.dh, w.pad_top, w.pad_bottom);
      ceil_pad(s0[2], w.kw, w.sw, w.dw, w.pad_left, w.pad_right);
    }
    if (op == "AveragePool" && n.int_attr("count_include_pad", 0) != 0 &&
        (w.pad_top || w.pad_left || w.pad_bottom || w.pad_right)) {
      // Zeros that count: padded first, then averaged without padding.
      Value y = x[0];
      const int64_t p[2][2] = {{w.pad_top, w.pad_bottom}, {w.pad_left, w.pad_right}};
      for (int a = 1; a <= 2; ++a) {
        std::vector<Value> parts;
        Shape ps = b.shape(y);
        if (p[a - 1][0]) ps.set(a, p[a - 1][0]), parts.push_back(b.fill(ps, 0.0f));
        parts.push_back(y);
        if (p[a - 1][1]) ps.set(a, p[a - 1][1]), parts.push_back(b.fill(ps, 0.0f));
        if (parts.size() > 1) y = b.concat(parts, a);
      }
      w.pad_top = w.pad_left = w.pad_bottom = w.pad_right = 0;
      return one(b.windowed(OpKind::AvgPool2D, y, w));
    }
    if (op != "Conv") return one(b.windowed(op == "MaxPool" ? OpKind::MaxPool2D : OpKind::AvgPool2D, x[0], w));
    w.groups = n.int_attr("group", 1);  // checked against the weight's filters at import
    if (s0[3] != b.shape(x[1])[2] * w.groups)
      throw FormatError("load_onnx: " + n.where() + ": its input has " + std::to_string(s0[3]) +
                        " channels, but its weight W {F, C/group, kh, kw} with group " + std::to_string(w.groups) +
                        " takes " + std::to_string(b.shape(x[1])[2] * w.groups));
    OpAttrs at;
    at.window = w;
    if (x.size() > 2) return one(b.apply(OpKind::Conv2D, {x[0], x[1], x[2]}, at));
    return one(b.apply(OpKind::Conv2D, {x[0], x[1]}, at));
  }
  if (op == "GlobalAveragePool") return one(b.mean_axis(b.mean_axis(x[0], 1, true), 2, true));
  if (op == "GlobalMaxPool") return one(b.max_axis(b.max_axis(x[0], 1, true), 2, true));
  if (op == "BatchNormalization") {
    // Inference form, per channel (the last axis here): (x - mean) / sqrt(var + eps) * scale + bias.
    const float eps = n.float_attr("epsilon", 1e-5f);
    const Value inv = b.apply(OpKind::Rsqrt, {b.add(x[4], b.fill({}, eps))});
    return one(b.add(b.mul(b.sub(x[0], x[3]), b.mul(inv, x[1])), x[2]));
  }
  if (op == "LayerNormalization") {
    // Over the axes from `axis` to the last, flattened into one.
    int64_t axis = n.int_attr("axis", -1);
    if (axis < 0) axis += rank;
    if (axis < (n.constant_fold ? 0 : 1) || axis >= rank)
      throw unsupported(n, "axis " + std::to_string(n.int_attr("axis", -1)) + " of a rank-" + std::to_string(rank) +
                               " input (the batch is not normalized over)");
    const std::vector<int64_t> flat = flattened_from(s0, int(axis));
    const int64_t d = flat.back();
    const float eps = n.float_attr("epsilon", 1e-5f);
    const Value xf = b.reshape(x[0], Shape(flat));
    const Value gamma = b.reshape(x[1], Shape{d});
    const Value beta = x.size() > 2 ? b.reshape(x[2], Shape{d}) : Value{};
    std::vector<Value> out{b.reshape(b.layer_norm(xf, eps, gamma, beta), s0)};
    if (n.n_outputs > 1) {
      // Mean and 1 / standard deviation, with the normalized axes kept as size 1.
      std::vector<int64_t> kept = dims_of(s0);
      for (int i = int(axis); i < rank; ++i) kept[size_t(i)] = 1;
      const Value mean = b.mean_axis(xf, int(flat.size()) - 1, true);
      const Value centered = b.sub(xf, mean);
      const Value var = b.mean_axis(b.mul(centered, centered), int(flat.size()) - 1, true);
      out.push_back(b.reshape(mean, Shape(kept)));
      out.push_back(b.reshape(b.apply(OpKind::Rsqrt, {b.add(var, b.fill({}, eps))}), Shape(kept)));
    }
    return out;
  }
  if (op == "Softmax" || op == "LogSoftmax") {
    auto soft = [&](Value v) { return op == "Softmax" ? b.softmax(v) : b.log_softmax(v); };
    if (n.opset < 13) {
      // Before opset 13 the axis (default 1) flattens the input into 2-D there.
      int64_t axis = n.int_attr("axis", 1);
      if (axis < 0) axis += rank;
      if (axis == rank - 1) return one(soft(x[0]));
      if (axis < (n.constant_fold ? 0 : 1) || axis >= rank) throw unsupported(n, "a softmax over the batch axis");
      return one(b.reshape(soft(b.reshape(x[0], Shape(flattened_from(s0, int(axis))))), s0));
    }
    const int axis = axis_of(n.int_attr("axis", -1), rank);
    if (axis == rank - 1) return one(soft(x[0]));
    return one(b.transpose(soft(b.transpose(x[0], axis, rank - 1)), axis, rank - 1));
  }
  if (op == "MatMul") {
    const Shape a = s0, w = b.shape(x[1]);
    if (n.slots[1] >= 0 && w.rank() == 2) {
      // Activations {..., K} by a weight {K, N}: the leading axes as rows.
      const int64_t k = a[a.rank() - 1];
      const Value rows = a.rank() == 2 ? x[0] : b.reshape(x[0], Shape{a.numel() / std::max<int64_t>(k, 1), k});
      const Value y = b.matmul(rows, x[1]);
      if (a.rank() == 2) return one(y);
      Shape out = a;
      out.set(a.rank() - 1, w[1]);
      return one(b.reshape(y, out));
    }
    if (n.slots[0] >= 0 && a.rank() == 2) {
      // A weight {M, K} by activations {B, ..., K, N}: (X^T W^T)^T, row by row.
      const int r = w.rank();
      const int64_t k = w[r - 2], cols = w[r - 1];
      const Value xt = b.transpose(x[1], r - 2, r - 1);  // {B, ..., N, K}
      const Value y = b.matmul(b.reshape(xt, Shape{w.numel() / std::max<int64_t>(k, 1), k}), x[0], false, true);
      Shape mid = w;
      mid.set(r - 2, cols);
      mid.set(r - 1, a[0]);
      return one(b.transpose(b.reshape(y, mid), r - 2, r - 1));
    }
    // Two batched operands {..., M, K} x {..., K, N} with the same leading axes.
    const int r = a.rank();
    if (w.rank() != r || r < 3)
      throw unsupported(n, "a MatMul of operands of ranks " + std::to_string(r) + " and " + std::to_string(w.rank()) +
                               " (read: activations times a 2-D "
                               "weight, or two operands of one rank >= 3)");
    int64_t lead = 1;
    for (int i = 0; i < r - 2; ++i) {
      if (a[i] != w[i])
        throw unsupported(n, "batched operands whose leading axes differ (" + a.str() + ", " + w.str() + ")");
      lead *= a[i];
    }
    const Value y =
        b.matmul(b.reshape(x[0], Shape{lead, a[r - 2], a[r - 1]}), b.reshape(x[1], Shape{lead, w[r - 2], w[r - 1]}));
    Shape out = a;
    out.set(r - 1, w[r - 1]);
    return one(b.reshape(y, out));
  }
  if (op == "LSTM" || op == "GRU") {
    // Weights per direction as recurrent_weights made them; x[0] is {B, T, I}.
    const bool lstm = op == "LSTM";
    const int per_dir = lstm ? 3 : 4;
    const int dirs = int(x.size() - 1) / per_dir;
    const std::string direction = n.string_attr("direction", "forward");
    const int64_t batch = s0[0], steps = s0[1], inputs = s0[2];
    const int64_t h = b.shape(x[2])[0];
    auto reversed = [&](Value v) {  // along the time axis
      if (steps == 1) return v;
      std::vector<Value> parts;
      for (int64_t t = steps - 1; t >= 0; --t) parts.push_back(b.slice(v, 1, t, 1));
      return concat_all(b, parts, 1);
    };
    std::vector<Value> ys, hs, cs;
    for (int d = 0; d < dirs; ++d) {
      const Value* w = &x[size_t(1 + d * per_dir)];
      const bool reverse = direction == "reverse" || d == 1;
      Value xw = b.reshape(b.matmul(b.reshape(x[0], Shape{batch * steps, inputs}), w[0]),
                           Shape{batch, steps, b.shape(w[0])[1]});
      xw = b.add(xw, w[2]);
      if (reverse) xw = reversed(xw);
      const Value seq =
          lstm ? b.apply(OpKind::LstmSequence, {xw, w[1]}) : b.apply(OpKind::GruSequence, {xw, w[1], w[3]});
      Value hy = b.slice(seq, 2, 0, h), cy = lstm ? b.slice(seq, 2, h, h) : Value{};
      // The final state is the last step the direction ran.
      hs.push_back(b.slice(hy, 1, steps - 1, 1));
      if (lstm) cs.push_back(b.slice(cy, 1, steps - 1, 1));
      if (reverse) hy = reversed(hy);
      ys.push_back(b.reshape(hy, Shape{batch, steps, 1, h}));
    }
    auto joined = [&](const std::vector<Value>& v, int axis) { return concat_all(b, v, axis); };
    std::vector<Value> out{joined(ys, 2), joined(hs, 1)};  // Y {B, T, dirs, H}, Y_h {B, dirs, H}
    if (lstm) out.push_back(joined(cs, 1));
    return out;
  }
  if (op == "Gemm") {
    const bool trans_a = n.int_attr("transA", 0) != 0, trans_b = n.int_attr("transB", 0) != 0;
    const float alpha = n.float_attr("alpha", 1.0f), beta = n.float_attr("beta", 1.0f);
    // A tensor held with its rows on several axes (the importer keeps the
    // batch apart from the axes merged with it): every axis but the last are rows.
    const int64_t k = s0[rank - 1];
    const Value a = rank == 2 || trans_a ? x[0] : b.reshape(x[0], Shape{s0.numel() / std::max<int64_t>(k, 1), k});
    Value y = b.matmul(a, x[1], trans_a, trans_b);
    if (alpha != 1.0f) y = b.scale(y, alpha);
    if (x.size() > 2) {
      Value c = x[2];
      if (beta != 1.0f) c = b.scale(c, beta);
      y = b.add(y, c);
    }
    if (rank > 2 && !trans_a) {
      Shape out = s0;
      out.set(rank - 1, b.shape(y)[1]);
      y = b.reshape(y, out);
    }
    return one(y);
  }
  throw unsupported(n, "this op is not read");
}

std::vector<int64_t> transpose_perm(const NodeSpec& n, int64_t rank) {
  std::vector<int64_t> perm = n.ints("perm", -1);
  if (perm.empty())
    for (int64_t d = rank - 1; d >= 0; --d) perm.push_back(d);
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t d = 0; d < int64_t(sorted.size()); ++d)
    if (sorted[size_t(d)] != d || int64_t(perm.size()) != rank)
      throw FormatError("load_onnx: " + n.where() + ": perm is not a permutation of its input's axes");
  return perm;
}

SliceParams slice_params(const NodeSpec& n) {
  // Opset 10 moved starts, ends, axes and steps from attributes to inputs.
  SliceParams p{n.ints("starts", 1), n.ints("ends", 2), n.ints("axes", 3), n.ints("steps", 4)};
  if (p.axes.empty())
    for (size_t i = 0; i < p.starts.size(); ++i) p.axes.push_back(int64_t(i));
  if (p.ends.size() != p.starts.size() || p.axes.size() != p.starts.size() ||
      (!p.steps.empty() && p.steps.size() != p.starts.size()))
    throw FormatError("load_onnx: " + n.where() + ": starts, ends, axes and steps of different lengths");
  return p;
}

void check_attributes(const NodeSpec& n) {
  // The attributes each op's lowering (or folding) reads; ONNX's checker
  // refuses an attribute its schema does not define, and one it defines
  // that is not read here would be silently dropped.
  static const std::vector<std::string> kReduce = {"axes", "keepdims", "noop_with_empty_axes"};
  static const std::vector<std::string> kLegacyBroadcast = {"broadcast", "axis"};
  static const std::vector<std::string> kRecurrent = {"direction",        "hidden_size",      "layout",
                                                      "activations",      "activation_alpha", "activation_beta",
                                                      "clip",             "input_forget",     "linear_before_reset"};
  static const std::map<std::string, std::vector<std::string>> kRead = {
      {"Abs", {}},
      {"Add", kLegacyBroadcast},
      {"And", {}},
      {"AveragePool", {"auto_pad", "kernel_shape", "pads", "strides", "ceil_mode", "count_include_pad"}},
      {"BatchNormalization", {"epsilon", "momentum", "training_mode", "spatial", "is_test"}},
      {"Cast", {"to"}},
      {"Celu", {"alpha"}},
      {"Clip", {"min", "max"}},
      {"Concat", {"axis"}},
      {"Constant", {"value", "value_float", "value_floats", "value_int", "value_ints"}},
      {"ConstantOfShape", {"value"}},
      {"Conv", {"auto_pad", "kernel_shape", "pads", "strides", "dilations", "group"}},
      {"Div", kLegacyBroadcast},
      {"Dropout", {"ratio", "is_test", "seed"}},
      {"Elu", {"alpha"}},
      {"Equal", {}},
      {"Erf", {}},
      {"Exp", {}},
      {"Expand", {}},
      {"Flatten", {"axis"}},
      {"Gather", {"axis"}},
      {"Gemm", {"alpha", "beta", "transA", "transB", "broadcast"}},
      {"GlobalAveragePool", {}},
      {"GlobalMaxPool", {}},
      {"Greater", {}},
      {"GreaterOrEqual", {}},
      {"GRU", kRecurrent},
      {"HardSigmoid", {"alpha", "beta"}},
      {"HardSwish", {}},
      {"Identity", {}},
      {"LayerNormalization", {"axis", "epsilon", "stash_type"}},
      {"LeakyRelu", {"alpha"}},
      {"Less", {}},
      {"LessOrEqual", {}},
      {"Log", {}},
      {"LogSoftmax", {"axis"}},
      {"LSTM", kRecurrent},
      {"MatMul", {}},
      {"Max", {}},
      {"MaxPool", {"auto_pad", "kernel_shape", "pads", "strides", "dilations", "ceil_mode", "storage_order"}},
      {"Mean", {}},
      {"Min", {}},
      {"Mul", kLegacyBroadcast},
      {"Neg", {}},
      {"Not", {}},
      {"Or", {}},
      {"Pad", {"mode", "pads", "paddings", "value"}},
      {"Pow", kLegacyBroadcast},
      {"PRelu", {}},
      {"Range", {}},
      {"Reciprocal", {}},
      {"ReduceL1", kReduce},
      {"ReduceL2", kReduce},
      {"ReduceLogSum", kReduce},
      {"ReduceLogSumExp", kReduce},
      {"ReduceMax", kReduce},
      {"ReduceMean", kReduce},
      {"ReduceMin", kReduce},
      {"ReduceSum", kReduce},
      {"ReduceSumSquare", kReduce},
      {"Relu", {}},
      {"Reshape", {"allowzero", "shape"}},
      {"Selu", {"alpha", "gamma"}},
      {"Shape", {"start", "end"}},
      {"Sigmoid", {}},
      {"Size", {}},
      {"Slice", {"starts", "ends", "axes"}},
      {"Softmax", {"axis"}},
      {"Softplus", {}},
      {"Softsign", {}},
      {"Split", {"axis", "split"}},
      {"Sqrt", {}},
      {"Squeeze", {"axes"}},
      {"Sub", kLegacyBroadcast},
      {"Sum", {}},
      {"Tanh", {}},
      {"Transpose", {"perm"}},
      {"Unsqueeze", {"axes"}},
      {"Where", {}},
      {"Xor", kLegacyBroadcast}};
  const auto it = kRead.find(n.op_type);
  if (it == kRead.end()) return;  // an op not read: refused by name where it is lowered or folded
  // Broadcasting by attributes ended at opset 7.
  const bool legacy = it->second == kLegacyBroadcast || n.op_type == "Gemm";
  auto gone = [&](const std::string& name) {
    return n.opset >= 7 && legacy && (name == "broadcast" || (name == "axis" && n.op_type != "Gemm"));
  };
  for (const auto& [name, attr] : n.attrs) {
    if (!gone(name) && std::find(it->second.begin(), it->second.end(), name) != it->second.end()) continue;
    std::string read;
    for (const std::string& r : it->second)
      if (!gone(r)) read += (read.empty() ? "" : ", ") + r;
    throw unsupported(n, "attribute '" + name + "', which " + n.op_type + " does not read here (it reads " +
                             (read.empty() ? std::string("none") : read) + ")");
  }
  if (n.op_type == "BatchNormalization" && n.int_attr("spatial", 1) != 1)
    throw unsupported(n, "spatial = 0 (statistics per element rather than per channel)");
}

bool reads_int_constant(const std::string& op, size_t slot) {
  // Ops whose inputs are all float32 here (or of one type T, which the
  // model's computed float32 tensors fix), by the slots where an int64
  // shape, axes, indices or pads are read instead.
  static const std::map<std::string, std::set<size_t>> kIntSlots = {
      {"Reshape", {1}},         {"Expand", {1}},          {"Squeeze", {1}},         {"Unsqueeze", {1}},
      {"ReduceMean", {1}},      {"ReduceSum", {1}},       {"ReduceMax", {1}},       {"ReduceMin", {1}},
      {"ReduceL1", {1}},        {"ReduceL2", {1}},        {"ReduceLogSum", {1}},    {"ReduceLogSumExp", {1}},
      {"ReduceSumSquare", {1}}, {"Slice", {1, 2, 3, 4}},  {"Split", {1}},           {"Pad", {1, 3}},
      {"LSTM", {4}},            {"GRU", {4}},             {"Abs", {}},              {"Add", {}},
      {"AveragePool", {}},      {"BatchNormalization", {}}, {"Celu", {}},           {"Clip", {}},
      {"Concat", {}},           {"Conv", {}},             {"Div", {}},              {"Dropout", {1, 2}},
      {"Elu", {}},              {"Erf", {}},              {"Exp", {}},              {"Flatten", {}},
      {"Gemm", {}},             {"GlobalAveragePool", {}}, {"GlobalMaxPool", {}},   {"HardSigmoid", {}},
      {"HardSwish", {}},        {"LayerNormalization", {}}, {"LeakyRelu", {}},      {"Log", {}},
      {"LogSoftmax", {}},       {"MatMul", {}},           {"Max", {}},              {"MaxPool", {}},
      {"Mean", {}},             {"Min", {}},              {"Mul", {}},              {"Neg", {}},
      {"PRelu", {}},            {"Reciprocal", {}},       {"Relu", {}},             {"Selu", {}},
      {"Sigmoid", {}},          {"Softmax", {}},          {"Softplus", {}},         {"Softsign", {}},
      {"Sqrt", {}},             {"Sub", {}},              {"Sum", {}},              {"Tanh", {}},
      {"Transpose", {}}};
  const auto it = kIntSlots.find(op);
  return it == kIntSlots.end() || it->second.count(slot) != 0;
}

void check_node(const NodeSpec& n) {
  const std::string& op = n.op_type;
  auto activation = [&](size_t i) { return i < n.slots.size() && n.slots[i] < 0; };
  auto weight = [&](size_t i) { return i < n.slots.size() && n.slots[i] >= 0; };
  if (op == "Conv" || op == "MaxPool" || op == "AveragePool") {
    const std::string pad = n.string_attr("auto_pad", "NOTSET");
    if (pad != "NOTSET" && pad != "VALID" && pad != "SAME_UPPER" && pad != "SAME_LOWER")
      throw unsupported(n, "auto_pad = " + pad);
  }
  if (op == "Cast" && n.int_attr("to", 1) != 1 && n.int_attr("to", 1) != 9)
    throw unsupported(n, "a Cast of a computed tensor to ONNX type " + std::to_string(n.int_attr("to", 1)) +
                             " (computed tensors are float32, masks float32 0/1: float and bool are read)");
  const bool embedding = op == "Gather" && n.slots.size() == 2 && weight(0) && activation(1);
  if (op == "Gather" && !n.int_inputs.count(1) && !embedding)
    throw unsupported(n, "a Gather whose indices are not constants of the file, nor token ids of a model input");
  if (kUnary.count(op)) {
    if (n.slots.size() != 1 || !activation(0)) throw unsupported(n, "expected one input computed by the model");
  } else if (embedding) {
  } else if (kShaped.count(op)) {
    if (n.slots.empty() || !activation(0) || n.slots.size() > 1)
      throw unsupported(n,
                        "expected its data computed by the model and its shape, axes or indices as int64 "
                        "constants");
    if ((op == "Reshape" || op == "Expand") && !n.int_inputs.count(1))
      throw unsupported(n, op + " needs its target shape as a constant (or computed from shapes)");
  } else if (op == "Concat") {
    for (size_t i = 0; i < n.slots.size(); ++i)
      if (!activation(i)) throw unsupported(n, "Concat of a constant (only tensors computed by the model are joined)");
  } else if (op == "Pow" || op == "Clip" || op == "Pad") {
    if (n.slots.empty() || !activation(0)) throw unsupported(n, "expected its input computed by the model");
    for (size_t i = 1; i < n.slots.size(); ++i)
      if (!weight(i)) throw unsupported(n, "its exponent, bounds or pad value must be constants of the file");
    for (const auto& [slot, w] : n.weight_at)
      if (n.weights[w].second.numel() != 1) throw unsupported(n, "its exponent, bounds or pad value must be scalars");
    if (op == "Pow" && !n.weight_at.count(1)) throw unsupported(n, "Pow needs its exponent");
  } else if (op == "Conv") {
    if (n.slots.size() < 2 || !activation(0) || !weight(1) || (n.slots.size() > 2 && !weight(2)))
      throw unsupported(n, "Conv is read as an image computed by the model and weights of the file");
    const Shape w = n.weights[size_t(n.slots[1])].second.shape();
    if (w.rank() != 4) throw unsupported(n, "a convolution that is not 2-D");
    const int64_t group = n.int_attr("group", 1);
    if (group < 1 || w[0] % group != 0)
      throw FormatError("load_onnx: " + n.where() + ": group " + std::to_string(group) +
                        " must be >= 1 and divide the filters of its weight W " + w.str() + " ({F, C/group, kh, kw})");
    // ONNX Runtime refuses a kernel_shape other than W's spatial dims.
    if (n.has_attr("kernel_shape") && n.ints("kernel_shape", -1) != std::vector<int64_t>{w[2], w[3]})
      throw FormatError("load_onnx: " + n.where() + ": kernel_shape {" + [&] {
        std::string k;
        for (int64_t v : n.ints("kernel_shape", -1)) k += (k.empty() ? "" : ", ") + std::to_string(v);
        return k;
      }() + "} contradicts its weight W " + w.str() + " ({F, C, kh, kw})");
  } else if (op == "BatchNormalization") {
    if (n.slots.size() != 5 || !activation(0))
      throw unsupported(n, "expected an input computed by the model and scale, bias, mean and variance of the file");
    for (size_t i = 1; i < 5; ++i)
      if (!weight(i)) throw unsupported(n, "its scale, bias, mean and variance must be weights of the file");
    if (n.int_attr("training_mode", 0) != 0) throw unsupported(n, "training_mode = 1");
  } else if (op == "LayerNormalization") {
    if (n.slots.size() < 2 || !activation(0) || !weight(1) || (n.slots.size() > 2 && !weight(2)))
      throw unsupported(n, "expected an input computed by the model and scale (and bias) of the file");
  } else if (op == "Dropout") {
    if (n.slots.empty() || !activation(0)) throw unsupported(n, "expected its data input computed by the model");
  } else if (is_mask_op(op)) {
    if (n.slots.size() != kMaskOps.at(op) || std::count(n.slots.begin(), n.slots.end(), -1) == 0)
      throw unsupported(n, "expected " + std::to_string(kMaskOps.at(op)) + " inputs, one computed by the model");
  } else if (kVariadic.count(op) || op == "PRelu") {
    if (n.slots.empty() || (op == "PRelu" && (n.slots.size() != 2 || !activation(0))))
      throw unsupported(n, "expected its inputs");
  } else if (op == "MatMul") {
    if (n.slots.size() != 2) throw unsupported(n, "expected two inputs");
    if (weight(0) && weight(1)) throw unsupported(n, "two constants");
    if (weight(1) && n.weights[size_t(n.slots[1])].second.shape().rank() != 2)
      throw unsupported(n, "activations times a weight of rank other than 2");
    if (weight(0) && n.weights[size_t(n.slots[0])].second.shape().rank() != 2)
      throw unsupported(n, "a weight of rank other than 2 times activations");
  } else if (op == "LSTM" || op == "GRU") {
    if (!activation(0) || !n.weight_at.count(1) || !n.weight_at.count(2) ||
        std::count(n.slots.begin(), n.slots.end(), -1) != 1)
      throw unsupported(n,
                        "expected a sequence computed by the model, W and R of the file, and no initial "
                        "states but zeros");
    if (n.int_inputs.count(4) || n.weight_at.count(4))
      throw unsupported(n, "sequence_lens (sequences of one length are read)");
    if (n.weight_at.count(7)) throw unsupported(n, "peephole weights (P)");
    if (n.has_attr("activations") || n.has_attr("clip") || n.int_attr("input_forget", 0) != 0)
      throw unsupported(n, "activations, clip or input_forget other than the defaults");
    if (op == "GRU" && n.int_attr("linear_before_reset", 0) != 1)
      throw unsupported(n,
                        "linear_before_reset = 0 (the reset gate applied before the recurrent product; "
                        "PyTorch's export, linear_before_reset = 1, is read)");
    const std::string dir = n.string_attr("direction", "forward");
    if (dir != "forward" && dir != "reverse" && dir != "bidirectional") throw unsupported(n, "direction '" + dir + "'");
  } else if (op == "Gemm") {
    if (n.slots.size() < 2 || !activation(0) || !weight(1))
      throw unsupported(n, "Gemm is read as activations times a weight of the file (plus a bias)");
    if (n.int_attr("transA", 0) != 0) throw unsupported(n, "Gemm with transA = 1 (the batch must be the rows)");
  } else {
    throw unsupported(n, "this op is not read");
  }
  if ((op == "MaxPool" || op == "AveragePool") && n.ints("kernel_shape", -1).size() != 2)
    throw unsupported(n, "a pooling that is not 2-D");
  if (op == "MaxPool" && n.int_attr("storage_order", 0) != 0) throw unsupported(n, "storage_order = 1");
  if (op == "MaxPool" && n.n_outputs > 1) throw unsupported(n, "MaxPool's Indices output");
  if (op == "AveragePool" && n.int_attr("ceil_mode", 0) != 0 && n.int_attr("count_include_pad", 0) != 0)
    throw unsupported(n, "ceil_mode with count_include_pad");
}

void recurrent_weights(NodeSpec& n) {
  const bool lstm = n.op_type == "LSTM";
  const int64_t gates = lstm ? 4 : 3;
  const Tensor W = n.weights[n.weight_at.at(1)].second, R = n.weights[n.weight_at.at(2)].second;
  const bool trainable = n.weight_trainable[n.weight_at.at(1)];
  const std::string name = n.weights[n.weight_at.at(1)].first;
  if (W.shape().rank() != 3 || R.shape().rank() != 3)
    throw FormatError("load_onnx: " + n.where() + ": W and R must be {directions, gates * hidden, ...}");
  const int64_t dirs = W.shape()[0], h = R.shape()[2], in = W.shape()[2];
  if (dirs != (n.string_attr("direction", "forward") == "bidirectional" ? 2 : 1) || W.shape()[1] != gates * h ||
      R.shape() != Shape{dirs, gates * h, h} || (n.has_attr("hidden_size") && n.int_attr("hidden_size", 0) != h))
    throw FormatError("load_onnx: " + n.where() + ": W " + W.shape().str() + " and R " + R.shape().str() +
                      " do not fit its direction and hidden size");
  Tensor B = Tensor::zeros({dirs, 2 * gates * h});
  if (n.weight_at.count(3)) {
    B = n.weights[n.weight_at.at(3)].second;
    if (B.shape() != Shape{dirs, 2 * gates * h})
      throw FormatError("load_onnx: " + n.where() + ": B is " + B.shape().str() + "; expected " +
                        Shape{dirs, 2 * gates * h}.str());
  }
  // The engine's gate k is ONNX's gate from[k]: LSTM i, f, c, o from i, o, f, c.
  const std::vector<int64_t> from = lstm ? std::vector<int64_t>{0, 2, 3, 1} : std::vector<int64_t>{0, 1, 2};
  // {rows, gates * h} from ONNX's {gates * h, cols} of direction d: transposed, gates reordered.
  auto kernel = [&](const Tensor& t, int64_t d, int64_t cols) {
    Tensor out = Tensor::empty({cols, gates * h});
    const float* src = t.data<float>() + d * gates * h * cols;
    float* dst = out.data<float>();
    for (int64_t g = 0; g < gates; ++g)
      for (int64_t u = 0; u < h; ++u)
        for (int64_t c = 0; c < cols; ++c) dst[c * gates * h + g * h + u] = src[(from[size_t(g)] * h + u) * cols + c];
    return out;
  };
  auto bias = [&](int64_t d, int64_t part) {  // part 0: Wb, 1: Rb
    Tensor out = Tensor::empty({gates * h});
    const float* src = B.data<float>() + d * 2 * gates * h + part * gates * h;
    for (int64_t g = 0; g < gates; ++g)
      for (int64_t u = 0; u < h; ++u) out.data<float>()[g * h + u] = src[from[size_t(g)] * h + u];
    return out;
  };
  n.weights.clear();
  n.weight_trainable.clear();
  n.weight_at.clear();
  n.slots = {-1};
  auto add = [&](const std::string& what, Tensor t) {
    n.slots.push_back(int(n.weights.size()));
    n.weights.emplace_back(what, std::move(t));
    n.weight_trainable.push_back(trainable);
  };
  for (int64_t d = 0; d < dirs; ++d) {
    const std::string dir = d == 0 && n.string_attr("direction", "forward") != "reverse" ? "forward" : "reverse";
    add(name + "." + dir + ".kernel", kernel(W, d, in));
    add(name + "." + dir + ".recurrent_kernel", kernel(R, d, h));
    if (lstm) {
      Tensor b = bias(d, 0);
      const Tensor rb = bias(d, 1);
      for (int64_t i = 0; i < gates * h; ++i) b.data<float>()[i] += rb.data<float>()[i];
      add(name + "." + dir + ".bias", b);
    } else {
      add(name + "." + dir + ".bias", bias(d, 0));
      add(name + "." + dir + ".recurrent_bias", bias(d, 1));
    }
  }
}

}  // namespace tensorgrad::io::onnx_import

#endif  // TENSORGRAD_WITH_ONNX
