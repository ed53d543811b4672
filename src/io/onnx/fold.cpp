// Nodes whose inputs are all constants, computed at import (io/onnx/node.h):
// the shape computations exporters write (Shape, Gather, Concat, Unsqueeze,
// Range, ConstantOfShape ...) become the static shapes and axes the lowerings
// read, with the batch size kept as a marker; float nodes of constants run
// once on an eager builder, through the same lowerings as the model's nodes.
#ifdef TENSORGRAD_WITH_ONNX

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <set>

#include "io/onnx/held.h"
#include "io/onnx/node.h"
#include "tensorgrad/ag/eager_builder.h"
#include "tensorgrad/graph/graph.h"

namespace tensorgrad::io::onnx_import {

namespace {

// What the folder computes with: small int64 tensors (shapes and indices).
constexpr int64_t kMaxFolded = int64_t(1) << 24;

// The element count of `dims`, or more than kMaxFolded when it is beyond
// what is folded (without overflowing).
int64_t count(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) return kMaxFolded + 1;
    n = d > 0 && n > kMaxFolded / d ? kMaxFolded + 1 : n * d;
  }
  return n;
}

// The element count of `dims` as a message says it: exact, or "more than
// 2^63 - 1" when the product overflows.
std::string count_str(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims)
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return d < 0 ? "an impossible number of" : "more than 2^63 - 1";
  return std::to_string(n);
}

// The element count of a constant `n` computes at import, refused (before
// anything is allocated) over kMaxFolded, as ConstantOfShape's and Range's.
int64_t capped(const NodeSpec& n, const std::vector<int64_t>& dims) {
  const int64_t c = count(dims);
  if (c > kMaxFolded)
    throw FormatError("load_onnx: " + n.where() + ": its result, computed at import from constants, would hold " +
                      count_str(dims) +
                      " elements; constants computed at import hold at most 2^24 (16777216) elements (an absurd "
                      "size, refused before allocating)");
  return c;
}

// NumPy's broadcasting of two shapes; empty optional when they do not broadcast.
bool broadcast_dims(const std::vector<int64_t>& a, const std::vector<int64_t>& b, std::vector<int64_t>& out) {
  const size_t r = std::max(a.size(), b.size());
  out.assign(r, 1);
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i + a.size() >= r ? a[i + a.size() - r] : 1;
    const int64_t db = i + b.size() >= r ? b[i + b.size() - r] : 1;
    if (da != db && da != 1 && db != 1) return false;
    out[i] = da == 1 ? db : da;
  }
  return true;
}

// The flat index into a tensor of `dims` (broadcast to `out`) of the element at out's flat index i.
int64_t broadcast_index(int64_t i, const std::vector<int64_t>& out, const std::vector<int64_t>& dims) {
  int64_t idx = 0, stride = 1;
  for (size_t k = out.size(); k-- > 0;) {
    const int64_t coord = i % out[k];
    i /= out[k];
    const size_t j = k + dims.size();
    if (j >= out.size()) {
      const int64_t d = dims[j - out.size()];
      idx += (d == 1 ? 0 : coord) * stride;
      stride *= d;
    }
  }
  return idx;
}

}  // namespace

std::vector<Constant> fold(const NodeSpec& n, std::span<const Constant* const> in) {
  const std::string& op = n.op_type;
  auto input = [&](size_t i) -> const Constant& {
    if (i >= in.size() || !in[i]) throw unsupported(n, "input " + std::to_string(i) + " is missing");
    return *in[i];
  };
  auto ints_of = [&](size_t i) -> const IntValue& {
    const Constant& c = input(i);
    if (!c.is_int) throw unsupported(n, "input " + std::to_string(i) + " must be int64");
    return c.ints;
  };
  auto int_result = [](std::vector<int64_t> dims, std::vector<int64_t> v) {
    Constant c;
    c.is_int = true;
    c.ints = {std::move(dims), std::move(v)};
    return std::vector<Constant>{c};
  };
  auto no_batch = [&](const IntValue& v) {
    for (int64_t x : v.v)
      if (is_batch(x)) throw unsupported(n, "arithmetic on the batch size (a model plans for any batch)");
  };
  bool all_int = true;
  for (const Constant* c : in)
    if (c) all_int = all_int && c->is_int;

  if (op == "Shape" || op == "Size") {
    const Constant& c = input(0);
    std::vector<int64_t> dims = c.is_int ? c.ints.dims : [&] {
      std::vector<int64_t> d;
      for (int i = 0; i < c.f.shape().rank(); ++i) d.push_back(c.f.shape()[i]);
      return d;
    }();
    if (op == "Size") {  // the dims of a tensor held in memory: no overflow
      int64_t size = 1;
      for (int64_t d : dims) size *= d;
      return int_result({}, {size});
    }
    const int64_t r = int64_t(dims.size());
    int64_t start = n.int_attr("start", 0), end = n.int_attr("end", r);
    if (start < 0) start += r;
    if (end < 0) end += r;
    start = std::clamp<int64_t>(start, 0, r);
    end = std::clamp<int64_t>(end, start, r);
    std::vector<int64_t> v(dims.begin() + start, dims.begin() + end);
    return int_result({int64_t(v.size())}, v);
  }
  if (op == "ConstantOfShape") {
    const IntValue& shape = ints_of(0);
    no_batch(shape);
    for (int64_t d : shape.v)
      if (d < 0) throw FormatError("load_onnx: " + n.where() + ": a shape entry of " + std::to_string(d));
    const int64_t total = capped(n, shape.v);
    const Attr a = n.has_attr("value") ? n.attrs.at("value") : Attr{};
    if (a.tensor_is_int) return int_result(shape.v, std::vector<int64_t>(size_t(total), a.tensor_int));
    Constant c;
    c.f = Tensor::full(Shape(shape.v), float(a.tensor_value));
    return {c};
  }
  if (op == "Range") {
    const IntValue &s = ints_of(0), &l = ints_of(1), &d = ints_of(2);
    no_batch(s), no_batch(l), no_batch(d);
    if (s.v.size() != 1 || l.v.size() != 1 || d.v.size() != 1 || d.v[0] == 0)
      throw unsupported(n, "Range needs scalar start, limit and a non-zero delta");
    // ceil((limit - start) / delta), exactly: in 128 bits a file's int64 values cannot overflow.
    const __int128 diff = __int128(l.v[0]) - __int128(s.v[0]), delta = d.v[0];
    __int128 span = diff / delta;
    if (span * delta != diff && (diff > 0) == (delta > 0)) ++span;
    if (span > kMaxFolded)
      throw FormatError("load_onnx: " + n.where() + ": its result, computed at import from constants, would hold " +
                        (span <= std::numeric_limits<int64_t>::max() ? std::to_string(int64_t(span))
                                                                     : std::string("more than 2^63 - 1")) +
                        " elements; constants computed at import hold at most 2^24 (16777216) elements (an "
                        "absurd size, refused before allocating)");
    const int64_t steps = span > 0 ? int64_t(span) : 0;
    // Each value lies between start and limit, so the sums do not overflow.
    std::vector<int64_t> v(static_cast<size_t>(steps));
    for (int64_t i = 0, x = s.v[0]; i < steps; ++i) {
      v[size_t(i)] = x;
      if (i + 1 < steps) x += d.v[0];
    }
    return int_result({steps}, v);
  }
  if (op == "Cast") {
    const int64_t to = n.int_attr("to", 1);
    const Constant& c = input(0);
    if (to == 1) {  // to float32
      if (!c.is_int) return {c};
      no_batch(c.ints);
      std::vector<float> f(c.ints.v.begin(), c.ints.v.end());
      Constant r;
      r.f = Tensor::from_vector(std::span<const float>(f), Shape(c.ints.dims));
      return {r};
    }
    if (to != 6 && to != 7 && to != 9)  // int32, int64, bool: held as int64
      throw unsupported(n, "a Cast to ONNX type " + std::to_string(to));
    if (c.is_int) {
      if (to != 9) return {c};
      IntValue v = c.ints;
      no_batch(v);
      for (int64_t& x : v.v) x = x != 0;
      return int_result(v.dims, v.v);
    }
    std::vector<int64_t> dims, v;
    for (int i = 0; i < c.f.shape().rank(); ++i) dims.push_back(c.f.shape()[i]);
    for (int64_t i = 0; i < c.f.numel(); ++i) {
      const float x = c.f.data<float>()[i];
      // Out of int64's range (or NaN) the conversion is undefined: ONNX leaves it so, and it is refused.
      if (to != 9 && !(x > -9.2233720368547758e18f && x < 9.2233720368547758e18f))
        throw unsupported(n, "a Cast to an integer type of " + std::to_string(x) + " (outside int64's range)");
      v.push_back(to == 9 ? int64_t(x != 0.0f) : int64_t(x));
    }
    return int_result(dims, v);
  }
  if (!all_int) {
    // A float node of constants: the model's own lowering, run now, for the
    // ops whose lowering reads the file's layout as it is.
    static const std::set<std::string> kFoldable = {"Relu",
                                                    "Sigmoid",
                                                    "Tanh",
                                                    "Erf",
                                                    "Exp",
                                                    "Log",
                                                    "Sqrt",
                                                    "LeakyRelu",
                                                    "Elu",
                                                    "Selu",
                                                    "Celu",
                                                    "Identity",
                                                    "Dropout",
                                                    "Neg",
                                                    "Abs",
                                                    "Reciprocal",
                                                    "Softsign",
                                                    "HardSigmoid",
                                                    "HardSwish",
                                                    "Softplus",
                                                    "PRelu",
                                                    "Pow",
                                                    "Clip",
                                                    "Add",
                                                    "Sub",
                                                    "Mul",
                                                    "Div",
                                                    "Max",
                                                    "Min",
                                                    "Sum",
                                                    "Mean",
                                                    "Reshape",
                                                    "Flatten",
                                                    "Squeeze",
                                                    "Unsqueeze",
                                                    "Transpose",
                                                    "Expand",
                                                    "Concat",
                                                    "Slice",
                                                    "Split",
                                                    "Gather",
                                                    "Pad",
                                                    "ReduceMean",
                                                    "ReduceSum",
                                                    "ReduceMax",
                                                    "ReduceMin",
                                                    "ReduceL1",
                                                    "ReduceL2",
                                                    "ReduceLogSum",
                                                    "ReduceLogSumExp",
                                                    "ReduceSumSquare",
                                                    "Softmax",
                                                    "LogSoftmax",
                                                    "MatMul",
                                                    "Gemm",
                                                    "LayerNormalization"};
    if (!kFoldable.count(op) && !is_mask_op(op))
      throw unsupported(n, "a " + op + " of constants only (not folded at import)");
    if (!n.int_inputs.empty() && std::any_of(n.int_inputs.begin(), n.int_inputs.end(), [](const auto& e) {
          return std::any_of(e.second.v.begin(), e.second.v.end(), is_batch);
        }))
      throw unsupported(n, "a constant whose shape depends on the batch size");
    {
      // The results' sizes first, on a scratch graph: nothing is allocated yet.
      Graph g;
      std::vector<Value> operands;
      for (int slot : n.slots) operands.push_back(g.parameter(n.weights[size_t(slot)].second, "w", false));
      for (Value v : lower(n, g, operands)) {
        const Shape s = g.shape(v);
        std::vector<int64_t> dims;
        for (int i = 0; i < s.rank(); ++i) dims.push_back(s[i]);
        capped(n, dims);
      }
    }
    ag::EagerBuilder eager;
    std::vector<Value> operands;
    for (int slot : n.slots) operands.push_back(eager.input(ag::Tensor(n.weights[size_t(slot)].second)));
    std::vector<Constant> out;
    try {
      for (Value v : lower(n, eager, operands)) {
        Constant c;
        c.f = eager.tensor(v).data().clone();
        out.push_back(c);
      }
    } catch (const MemoryError&) {
      throw MemoryError("load_onnx: " + n.where() +
                        ": computing its result from the file's constants at import ran out of memory; free "
                        "memory or load a smaller model");
    }
    return out;
  }
  // int64 tensors (shapes, axes, indices) with NumPy's rules.
  const IntValue& a = ints_of(0);
  if (op == "Identity") return {input(0)};
  if (op == "Unsqueeze" || op == "Squeeze") {
    std::vector<int64_t> axes = n.ints("axes", 1);
    std::vector<int64_t> dims = a.dims;
    const int64_t out_rank = op == "Unsqueeze" ? int64_t(dims.size() + axes.size()) : int64_t(dims.size());
    for (int64_t& x : axes) x = x < 0 ? x + out_rank : x;
    std::sort(axes.begin(), axes.end());
    if (op == "Unsqueeze") {
      for (int64_t x : axes) {
        if (x < 0 || x > int64_t(dims.size())) throw unsupported(n, "an axis out of range");
        dims.insert(dims.begin() + x, 1);
      }
    } else {
      if (axes.empty())
        for (int64_t i = 0; i < int64_t(dims.size()); ++i)
          if (dims[size_t(i)] == 1) axes.push_back(i);
      for (size_t k = axes.size(); k-- > 0;) {
        if (axes[k] < 0 || axes[k] >= int64_t(dims.size()) || dims[size_t(axes[k])] != 1)
          throw unsupported(n, "squeezing an axis that is not of size 1");
        dims.erase(dims.begin() + axes[k]);
      }
    }
    return int_result(dims, a.v);
  }
  if (op == "Reshape") {
    std::vector<int64_t> t = ints_of(1).v;
    int64_t known = 1, infer = -1;
    for (size_t i = 0; i < t.size(); ++i) {
      if (t[i] == 0 && n.int_attr("allowzero", 0) == 0) {
        if (i >= a.dims.size()) throw FormatError("load_onnx: " + n.where() + ": a 0 (copy) past its input's rank");
        t[i] = a.dims[i];
      }
      if (t[i] == -1)
        infer = int64_t(i);
      else
        known = checked_mul(known, t[i], n);
    }
    if (infer >= 0 && known > 0) t[size_t(infer)] = int64_t(a.v.size()) / known;
    if (count(t) != int64_t(a.v.size())) throw unsupported(n, "a reshape that changes the element count");
    return int_result(t, a.v);
  }
  if (op == "Concat") {
    int64_t axis = n.int_attr("axis", 0);
    std::vector<int64_t> dims = a.dims;
    if (axis < 0) axis += int64_t(dims.size());
    if (axis < 0 || axis >= int64_t(dims.size())) throw unsupported(n, "an axis out of range");
    int64_t outer = 1;
    for (int64_t i = 0; i < axis; ++i) outer *= dims[size_t(i)];
    std::vector<int64_t> v;
    dims[size_t(axis)] = 0;
    for (size_t k = 0; k < in.size(); ++k) {
      const std::vector<int64_t>& d = ints_of(k).dims;
      for (size_t i = 0; i < a.dims.size(); ++i)
        if (d.size() != a.dims.size() || (int64_t(i) != axis && d[i] != a.dims[i]))
          throw FormatError("load_onnx: " + n.where() + ": inputs whose shapes differ off the axis");
      dims[size_t(axis)] += d[size_t(axis)];
      capped(n, dims);
    }
    for (int64_t o = 0; o < outer; ++o)
      for (size_t k = 0; k < in.size(); ++k) {
        const IntValue& p = ints_of(k);
        const int64_t inner = count(p.dims) / std::max<int64_t>(outer, 1);
        v.insert(v.end(), p.v.begin() + o * inner, p.v.begin() + (o + 1) * inner);
      }
    return int_result(dims, v);
  }
  if (op == "Gather") {
    const IntValue& idx = ints_of(1);
    int64_t axis = n.int_attr("axis", 0);
    if (axis < 0) axis += int64_t(a.dims.size());
    if (axis < 0 || axis >= int64_t(a.dims.size())) throw unsupported(n, "an axis out of range");
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < axis; ++i) outer *= a.dims[size_t(i)];
    for (size_t i = size_t(axis) + 1; i < a.dims.size(); ++i) inner *= a.dims[i];
    const int64_t dim = a.dims[size_t(axis)];
    std::vector<int64_t> v, dims(a.dims.begin(), a.dims.begin() + axis);
    dims.insert(dims.end(), idx.dims.begin(), idx.dims.end());
    dims.insert(dims.end(), a.dims.begin() + axis + 1, a.dims.end());
    capped(n, dims);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j : idx.v) {
        const int64_t k = j < 0 ? j + dim : j;
        if (k < 0 || k >= dim) throw unsupported(n, "an index outside its axis");
        v.insert(v.end(), a.v.begin() + (o * dim + k) * inner, a.v.begin() + (o * dim + k + 1) * inner);
      }
    return int_result(dims, v);
  }
  if (op == "Slice") {
    if (a.dims.size() != 1) throw unsupported(n, "a Slice of an int64 tensor of rank other than 1");
    const std::vector<int64_t> starts = n.ints("starts", 1), ends = n.ints("ends", 2), steps = n.ints("steps", 4);
    if (starts.size() != 1 || ends.size() != 1) throw unsupported(n, "one start and one end");
    const int64_t dim = a.dims[0], step = steps.empty() ? 1 : steps[0];
    if (step == 0) throw unsupported(n, "a step of 0");
    int64_t s = starts[0] < 0 ? starts[0] + dim : starts[0], e = ends[0] < 0 ? ends[0] + dim : ends[0];
    std::vector<int64_t> v;
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, dim), e = std::clamp<int64_t>(e, 0, dim);
      for (int64_t i = s; i < e; i += step) v.push_back(a.v[size_t(i)]);
    } else {
      s = std::clamp<int64_t>(s, -1, dim - 1), e = std::clamp<int64_t>(e, -1, dim - 1);
      for (int64_t i = s; i > e; i += step) v.push_back(a.v[size_t(i)]);
    }
    return int_result({int64_t(v.size())}, v);
  }
  using Fn = std::function<int64_t(int64_t, int64_t)>;
  // x op y, refused as malformed when it overflows int64.
  auto overflow = [&] { return FormatError("load_onnx: " + n.where() + ": an int64 overflow"); };
  // One checked op: `op` says whether x op y overflowed, writing it to r.
  auto checked = [&](bool (*op)(int64_t, int64_t, int64_t*)) {
    return Fn([&, op](int64_t x, int64_t y) {
      int64_t r;
      if (op(x, y, &r)) throw overflow();
      return r;
    });
  };
  const std::map<std::string, Fn> binary = {
      {"Add", checked([](int64_t x, int64_t y, int64_t* r) { return __builtin_add_overflow(x, y, r); })},
      {"Sub", checked([](int64_t x, int64_t y, int64_t* r) { return __builtin_sub_overflow(x, y, r); })},
      {"Mul", checked([](int64_t x, int64_t y, int64_t* r) { return __builtin_mul_overflow(x, y, r); })},
      {"Div",
       [&](int64_t x, int64_t y) {
         if (y == -1 && x == std::numeric_limits<int64_t>::min()) throw overflow();
         return y == 0 ? int64_t(0) : x / y;
       }},
      {"Equal", [](int64_t x, int64_t y) { return int64_t(x == y); }},
      {"Less", [](int64_t x, int64_t y) { return int64_t(x < y); }},
      {"Greater", [](int64_t x, int64_t y) { return int64_t(x > y); }},
      {"LessOrEqual", [](int64_t x, int64_t y) { return int64_t(x <= y); }},
      {"GreaterOrEqual", [](int64_t x, int64_t y) { return int64_t(x >= y); }},
      {"And", [](int64_t x, int64_t y) { return int64_t(x && y); }},
      {"Or", [](int64_t x, int64_t y) { return int64_t(x || y); }},
      {"Xor", [](int64_t x, int64_t y) { return int64_t((x != 0) != (y != 0)); }},
      {"Max", [](int64_t x, int64_t y) { return std::max(x, y); }},
      {"Min", [](int64_t x, int64_t y) { return std::min(x, y); }}};
  if (auto it = binary.find(op); it != binary.end()) {
    const IntValue& b = ints_of(1);
    // The batch size B may be multiplied by a positive number, the product
    // divided by a divisor of its factor, and compared with a multiple of B;
    // nothing else is known of it.
    auto with_batch = [&](int64_t x, int64_t y) -> int64_t {
      const bool bx = is_batch(x), by = is_batch(y);
      if (!bx && !by) return it->second(x, y);
      if (op == "Mul" && bx != by) {
        const int64_t k = batch_factor(bx ? x : y), c = bx ? y : x;
        if (c > 0 && c < kMaxBatchFactor / k) return batch_times(k * c);
      }
      if (op == "Div" && bx && !by && y > 0 && batch_factor(x) % y == 0) return batch_times(batch_factor(x) / y);
      if (op == "Equal" && bx && by) return int64_t(x == y);
      throw unsupported(n, "arithmetic on the batch size other than multiplying it (a model plans for any batch)");
    };
    if (op == "Div")
      for (int64_t y : b.v)
        if (y == 0) throw unsupported(n, "an int64 division by zero");
    std::vector<int64_t> dims;
    if (!broadcast_dims(a.dims, b.dims, dims)) throw unsupported(n, "shapes that do not broadcast");
    std::vector<int64_t> v(size_t(capped(n, dims)));
    for (int64_t i = 0; i < int64_t(v.size()); ++i)
      v[size_t(i)] =
          with_batch(a.v[size_t(broadcast_index(i, dims, a.dims))], b.v[size_t(broadcast_index(i, dims, b.dims))]);
    return int_result(dims, v);
  }
  if (op == "Not") {
    no_batch(a);
    std::vector<int64_t> v = a.v;
    for (int64_t& x : v) x = x == 0;
    return int_result(a.dims, v);
  }
  if (op == "Neg") {
    no_batch(a);
    std::vector<int64_t> v = a.v;
    for (int64_t& x : v)
      if (__builtin_sub_overflow(int64_t(0), x, &x)) throw overflow();
    return int_result(a.dims, v);
  }
  if (op == "Where") {
    const IntValue &x = ints_of(1), &y = ints_of(2);
    std::vector<int64_t> d1, dims;
    if (!broadcast_dims(a.dims, x.dims, d1) || !broadcast_dims(d1, y.dims, dims))
      throw unsupported(n, "shapes that do not broadcast");
    std::vector<int64_t> v(size_t(capped(n, dims)));
    for (int64_t i = 0; i < int64_t(v.size()); ++i)
      v[size_t(i)] = a.v[size_t(broadcast_index(i, dims, a.dims))] ? x.v[size_t(broadcast_index(i, dims, x.dims))]
                                                                   : y.v[size_t(broadcast_index(i, dims, y.dims))];
    return int_result(dims, v);
  }
  if (op == "Expand") {
    const IntValue& t = ints_of(1);
    no_batch(t);
    std::vector<int64_t> dims;
    for (int64_t d : t.v)
      if (d < 0) throw FormatError("load_onnx: " + n.where() + ": a shape entry of " + std::to_string(d));
    if (!broadcast_dims(a.dims, t.v, dims))
      throw unsupported(n, "a target shape that does not broadcast with its input");
    std::vector<int64_t> v(size_t(capped(n, dims)));
    for (int64_t i = 0; i < int64_t(v.size()); ++i) v[size_t(i)] = a.v[size_t(broadcast_index(i, dims, a.dims))];
    return int_result(dims, v);
  }
  throw unsupported(n, "int64 inputs (this op is read on float32 tensors only)");
}

}  // namespace tensorgrad::io::onnx_import

#endif  // TENSORGRAD_WITH_ONNX
