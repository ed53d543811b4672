// Each op of an inference graph written as ONNX nodes (opset 17), one
// emitter per op in OpKind order (checked at compile time, as the kernel
// tables are), or the reason it has no ONNX form.
#ifdef TENSORGRAD_WITH_ONNX

#include "io/onnx/emit.h"

#include <array>
#include <cmath>
#include <numeric>

#include "ops/op_table.h"
#include "tensorgrad/core/error.h"

namespace tensorgrad::io::onnx_export {

namespace {

using onnx::TensorProto;

// The ONNX names of node n's inputs.
std::vector<std::string> inputs_of(const Writer& w, const Node& n) {
  std::vector<std::string> x;
  for (Value v : n.input_values()) x.push_back(w.name(v));
  return x;
}

// One node of `op_type` on x with one attribute.
template <class T>
std::string with_attr(Writer& w, const char* op_type, const std::vector<std::string>& x, const char* name, T value) {
  onnx::NodeProto& n = w.add(op_type, x);
  Writer::attr(n, name, value);
  return n.output(0);
}

// y, or Relu(y) when the op fused a ReLU into its output.
std::string relu_if(Writer& w, const Node& n, const std::string& y) {
  return n.attrs.flags & kReluOutput ? w.op("Relu", {y}) : y;
}

// NHWC -> NCHW and back, around ONNX's image ops.
std::string to_nchw(Writer& w, const std::string& x) {
  return with_attr(w, "Transpose", {x}, "perm", std::vector<int64_t>{0, 3, 1, 2});
}
std::string to_nhwc(Writer& w, const std::string& x) {
  return with_attr(w, "Transpose", {x}, "perm", std::vector<int64_t>{0, 2, 3, 1});
}

// A Reduce* node over `axes` (ReduceSum takes them as an input from opset
// 13, the others as an attribute until opset 18).
std::string reduce(Writer& w, const std::string& op_type, const std::string& x, const std::vector<int64_t>& axes,
                   bool keepdims) {
  onnx::NodeProto& r = op_type == "ReduceSum" ? w.add(op_type, {x, w.ints(axes)}) : w.add(op_type, {x});
  if (op_type != "ReduceSum") Writer::attr(r, "axes", axes);
  Writer::attr(r, "keepdims", int64_t(keepdims));
  return r.output(0);
}

// An op whose axis must not be the batch's (nothing in a model computes
// across rows at inference).
void not_across_batch(const Writer& w, Value v, int axis) {
  const Dims& d = w.dims(w.graph().node(v).inputs[0]);
  if (axis >= 0 && size_t(axis) < d.size() && d[size_t(axis)] < 0)
    w.refuse("a " + std::string(op_info(w.graph().node(v).op).name) + " along the batch axis");
}

// SumAxis, MeanAxis and MaxAxis: one Reduce* over attrs.axis.
std::string along_axis(Writer& w, Value v, const Node& n, const char* op_type, const std::vector<std::string>& x) {
  not_across_batch(w, v, n.attrs.axis);
  return reduce(w, op_type, x[0], {n.attrs.axis}, n.attrs.keepdim);
}

using Emit = std::string (*)(Writer& w, Value v, const Node& n, const std::vector<std::string>& x);

struct Form {
  OpKind kind;
  Emit emit;        // null: no ONNX form at inference
  const char* why;  // then, what the op is
};

std::string same(Writer& w, const char* op_type, const std::vector<std::string>& x) { return w.op(op_type, x); }

// The fused LSTM and GRU ops as ONNX's LSTM and GRU over xw = x W + b (the
// input projection the layer computed), with an identity W: gates reordered
// into ONNX's, the recurrent kernel transposed. The value written is the
// hidden states {B, T, H}; Slice checks nothing reads the rest.
std::string recurrent(Writer& w, Value v, const Node& n, const std::vector<std::string>& x, bool lstm) {
  const int64_t gates = lstm ? 4 : 3;
  const Shape u = w.graph().node(n.inputs[1]).shape;  // U {H, gates H}
  const int64_t h = u[0], gh = gates * h;
  // ONNX's gate k is the engine's gate from[k]: LSTM i, o, f, c from i, f, c, o; GRU z, r, h alike.
  const std::vector<int64_t> from = lstm ? std::vector<int64_t>{0, 3, 1, 2} : std::vector<int64_t>{0, 1, 2};
  std::vector<int64_t> rows(static_cast<size_t>(gh));
  for (int64_t k = 0; k < gates; ++k)
    for (int64_t i = 0; i < h; ++i) rows[size_t(k * h + i)] = from[size_t(k)] * h + i;
  Tensor identity = Tensor::zeros({1, gh, gh});
  for (int64_t r = 0; r < gh; ++r) identity.data<float>()[r * gh + rows[size_t(r)]] = 1.0f;
  const std::string W = w.tensor(identity);
  onnx::NodeProto& ut = w.add("Transpose", {x[1]});
  Writer::attr(ut, "perm", std::vector<int64_t>{1, 0});
  onnx::NodeProto& g = w.add("Gather", {ut.output(0), w.ints(rows)});
  Writer::attr(g, "axis", int64_t(0));
  const std::string R = w.op("Unsqueeze", {g.output(0), w.ints({0})});
  std::string B;
  if (!lstm) {  // [input bias (in xw already) | recurrent bias]
    onnx::NodeProto& c = w.add("Concat", {w.tensor(Tensor::zeros({gh})), x[2]});
    Writer::attr(c, "axis", int64_t(0));
    B = w.op("Unsqueeze", {c.output(0), w.ints({0})});
  }
  onnx::NodeProto& seq = w.add("Transpose", {x[0]});
  Writer::attr(seq, "perm", std::vector<int64_t>{1, 0, 2});  // {T, B, gates H}
  const size_t first_state = lstm ? 2 : 3;
  auto state = [&](size_t i) { return i < x.size() ? w.op("Unsqueeze", {x[i], w.ints({0})}) : std::string(); };
  std::vector<std::string> in{seq.output(0), W, R, B, "", state(first_state)};
  if (lstm) in.push_back(state(first_state + 1));
  while (!in.empty() && in.back().empty()) in.pop_back();
  onnx::NodeProto& r = w.add(lstm ? "LSTM" : "GRU", in);
  Writer::attr(r, "hidden_size", h);
  if (!lstm) Writer::attr(r, "linear_before_reset", int64_t(1));
  const std::string y = w.op("Squeeze", {r.output(0), w.ints({1})});  // {T, 1, B, H} -> {T, B, H}
  onnx::NodeProto& t = w.add("Transpose", {y});
  Writer::attr(t, "perm", std::vector<int64_t>{1, 0, 2});
  w.set_hidden_only(v, h);
  return t.output(0);
}

std::string window_op(Writer& w, const Node& n, const std::string& op_type, const std::vector<std::string>& x) {
  const Window2D& k = n.attrs.window;
  std::vector<std::string> in{to_nchw(w, x[0])};
  if (op_type == "Conv") {
    onnx::NodeProto& wt = w.add("Transpose", {x[1]});  // {kh, kw, C, F} -> {F, C, kh, kw}
    Writer::attr(wt, "perm", std::vector<int64_t>{3, 2, 0, 1});
    in.push_back(wt.output(0));
    if (x.size() > 2) in.push_back(x[2]);
  }
  onnx::NodeProto& p = w.add(op_type, in);
  if (op_type != "Conv") Writer::attr(p, "kernel_shape", std::vector<int64_t>{k.kh, k.kw});
  Writer::attr(p, "strides", std::vector<int64_t>{k.sh, k.sw});
  Writer::attr(p, "pads", std::vector<int64_t>{k.pad_top, k.pad_left, k.pad_bottom, k.pad_right});
  if (op_type != "AveragePool") Writer::attr(p, "dilations", std::vector<int64_t>{k.dh, k.dw});
  // The kernel {kh, kw, C/G, F} transposed above is ONNX's grouped {F, C/G, kh, kw}.
  if (op_type == "Conv" && k.groups != 1) Writer::attr(p, "group", k.groups);
  if (op_type == "AveragePool" && (k.dh != 1 || k.dw != 1))
    w.refuse("a dilated average pooling (ONNX's AveragePool has no dilations before opset 19)");
  return relu_if(w, n, to_nhwc(w, p.output(0)));
}

// A Slice of a fused recurrent op's output reads its hidden states only.
std::string slice(Writer& w, Value v, const Node& n, const std::vector<std::string>& x) {
  const Dims& d = w.dims(n.inputs[0]);
  const int64_t units = w.hidden_only(n.inputs[0]);
  if (units > 0) {
    if (n.attrs.axis == 2 && n.attrs.start + n.attrs.length > units)
      w.refuse("it reads an LSTM's or GRU's cell state or gates (ONNX's LSTM and GRU give the hidden states only)");
    if (n.attrs.axis != 2) w.set_hidden_only(v, units);
  }
  if (d[size_t(n.attrs.axis)] < 0) {
    if (n.attrs.start != 0 || w.dims(v)[size_t(n.attrs.axis)] != d[size_t(n.attrs.axis)])
      w.refuse("a slice of part of the batch axis");
    return w.op("Identity", {x[0]});
  }
  return w.op("Slice", {x[0], w.ints({n.attrs.start}), w.ints({n.attrs.start + n.attrs.length}),
                        w.ints({int64_t(n.attrs.axis)})});
}

// Attention composed of ONNX ops (its fused form is a memory saving ONNX
// runtimes make their own way): the scores, their softmax times v, and the
// log-sum-exp column. A query that sees no key is NaN here, not 0.
std::string attention(Writer& w, Value, const Node& n, const std::vector<std::string>& x) {
  if (n.attrs.rate > 0.0f) w.refuse("attention dropout at inference (random, so no file computes it)");
  const Shape& q = w.graph().node(n.inputs[0]).shape;
  const Shape& k = w.graph().node(n.inputs[1]).shape;
  const int64_t lq = q[1], lk = k[1], group = q[0] / k[0];
  // Grouped-query attention: q viewed as {Nkv, G, Lq, D} against k and v as {Nkv, 1, Lk, D}, so that MatMul's
  // broadcasting shares each key-value row with its group (no copy in the file either); the mask alike.
  std::string qs = x[0], ks = x[1], vs = x[2];
  if (group > 1) {
    qs = w.op("Reshape", {x[0], w.ints({-1, group, lq, q[2]})});
    ks = w.op("Unsqueeze", {x[1], w.ints({1})});
    vs = w.op("Unsqueeze", {x[2], w.ints({1})});
  }
  const std::vector<int64_t> perm = group > 1 ? std::vector<int64_t>{0, 1, 3, 2} : std::vector<int64_t>{0, 2, 1};
  const std::string kt = with_attr(w, "Transpose", {ks}, "perm", perm);
  std::string s = w.op("Mul", {w.op("MatMul", {qs, kt}), w.scalar(n.attrs.factor)});
  if (n.attrs.flags & kAttentionMask) {
    const Shape& m = w.graph().node(n.inputs[3]).shape;
    std::string mask = x[3];
    if (group > 1)  // {Nm, Lqm, Lk} -> {Nkv or 1, G or 1, Lqm, Lk}
      mask = m[0] == 1 ? w.op("Unsqueeze", {x[3], w.ints({0})}) : w.op("Reshape", {x[3], w.ints({-1, group, m[1], lk})});
    s = w.op("Add", {s, mask});
  }
  if (n.attrs.flags & kCausal) {
    Tensor hide = Tensor::zeros({lq, lk});
    for (int64_t i = 0; i < lq; ++i)
      for (int64_t j = i + lk - lq + 1; j < lk; ++j) hide.data<float>()[i * lk + j] = -INFINITY;
    s = w.op("Add", {s, w.tensor(hide)});
  }
  const std::string o = w.op("MatMul", {with_attr(w, "Softmax", {s}, "axis", int64_t(-1)), vs});
  onnx::NodeProto& lse = w.add("ReduceLogSumExp", {s});
  Writer::attr(lse, "axes", std::vector<int64_t>{-1});
  Writer::attr(lse, "keepdims", int64_t(1));
  const std::string y = with_attr(w, "Concat", {o, lse.output(0)}, "axis", int64_t(-1));
  if (group == 1) return y;
  const int64_t dv = w.graph().node(n.inputs[2]).shape[2];
  return w.op("Reshape", {y, w.ints({-1, lq, dv + 1})});
}

// RMS normalization composed of ONNX ops (RMSNormalization is opset 23's):
// x / sqrt(mean(x^2, -1) + eps) [* weight].
std::string rms_norm(Writer& w, Value, const Node& n, const std::vector<std::string>& x) {
  const std::string ms = reduce(w, "ReduceMean", w.op("Mul", {x[0], x[0]}), {-1}, true);
  const std::string y = w.op("Div", {x[0], w.op("Sqrt", {w.op("Add", {ms, w.scalar(n.attrs.eps)})})});
  return x.size() > 1 ? w.op("Mul", {y, x[1]}) : y;
}

// Every op, in OpKind order.
constexpr std::array<Form, size_t(OpKind::Count)> kForms = {{
    {OpKind::Leaf, nullptr, "a leaf (written as an input or initializer)"},
    {OpKind::Fill,
     [](Writer& w, Value v, const Node& n, const std::vector<std::string>&) {
       onnx::NodeProto& c = w.add("ConstantOfShape", {w.shape(w.attr_dims(v))});
       onnx::AttributeProto* a = c.add_attribute();
       a->set_name("value");
       a->set_type(onnx::AttributeProto::TENSOR);
       onnx::TensorProto* t = a->mutable_t();
       t->set_data_type(TensorProto::FLOAT);
       t->add_dims(1);
       t->add_float_data(n.attrs.value);
       return c.output(0);
     },
     nullptr},
    {OpKind::MatMul,
     [](Writer& w, Value, const Node& n, const std::vector<std::string>& x) {
       auto last_two = [&](const std::string& s, Value of) {
         const int r = w.graph().node(of).shape.rank();
         std::vector<int64_t> perm(static_cast<size_t>(r));
         std::iota(perm.begin(), perm.end(), 0);
         std::swap(perm[size_t(r - 1)], perm[size_t(r - 2)]);
         return with_attr(w, "Transpose", {s}, "perm", perm);
       };
       const std::string a = n.attrs.trans_a ? last_two(x[0], n.inputs[0]) : x[0];
       const std::string b = n.attrs.trans_b ? last_two(x[1], n.inputs[1]) : x[1];
       std::string y = w.op("MatMul", {a, b});
       if (x.size() > 2) y = w.op("Add", {y, x[2]});
       return relu_if(w, n, y);
     },
     nullptr},
    {OpKind::Add,
     [](Writer& w, Value, const Node& n, const std::vector<std::string>& x) {
       return relu_if(w, n, w.op("Add", x));
     },
     nullptr},
    {OpKind::Sub, [](Writer& w, Value, const Node&, const std::vector<std::string>& x) { return same(w, "Sub", x); },
     nullptr},
    {OpKind::Mul, [](Writer& w, Value, const Node&, const std::vector<std::string>& x) { return same(w, "Mul", x); },
     nullptr},
    {OpKind::Maximum,
     [](Writer& w, Value, const Node&, const std::vector<std::string>& x) { return same(w, "Max", x); }, nullptr},
    {OpKind::Minimum,
     [](Writer& w, Value, const Node&, const std::vector<std::string>& x) { return same(w, "Min", x); }, nullptr},
    {OpKind::GreaterEqual,
     [](Writer& w, Value, const Node&, const std::vector<std::string>& x) {
       return with_attr(w, "Cast", {w.op("GreaterOrEqual", x)}, "to", int64_t(TensorProto::FLOAT));
     },
     nullptr},
    {OpKind::MaskedFill,
     [](Writer& w, Value, const Node& n, const std::vector<std::string>& x) {
       onnx::NodeProto& c = w.add("Cast", {x[1]});
       Writer::attr(c, "to", int64_t(TensorProto::BOOL));
       return w.op("Where", {c.output(0), w.scalar(n.attrs.value), x[0]});
     },
     nullptr},
    {OpKind::Scale,
     [](Writer& w, Value, const Node& n, const std::vector<std::string>& x) {
       return w.op("Mul", {x[0], w.scalar(n.attrs.factor)});
     },
     nullptr},
    {OpKind::Relu, [](Writer& w, Value, const Node&, const std::vector<std::string>& x) { return same(w, "Relu", x); },
     nullptr},
    {OpKind::Sigmoid,
     [](Writer& w, Value, const Node&, const std::vector<std::string>& x) { return same(w, "Sigmoid", x); }, nullptr},
    {OpKind::Tanh, [](Writer& w, Value, const Node&, const std::vector<std::string>& x) { return same(w, "Tanh", x); },
     nullptr},
    {OpKind::Softmax,
     [](Writer& w, Value, const Node&, const std::vector<std::string>& x) {
       return with_attr(w, "Softmax", x, "axis", int64_t(-1));
     },
     nullptr},
    {OpKind::LogSoftmax,
     [](Writer& w, Value, const Node&, const std::vector<std::string>& x) {
       return with_attr(w, "LogSoftmax", x, "axis", int64_t(-1));
     },
     nullptr},
    {OpKind::SoftmaxCrossEntropy, nullptr, "a loss"},
    {OpKind::MseLoss, nullptr, "a loss"},
    {OpKind::MaeLoss, nullptr, "a loss"},
    {OpKind::HuberLoss, nullptr, "a loss"},
    {OpKind::BinaryCrossEntropy, nullptr, "a loss"},
    {OpKind::Dropout, nullptr, "dropout at inference (random, so no file computes it)"},
    {OpKind::Sum,
     [](Writer& w, Value v, const Node&, const std::vector<std::string>& x) {
       not_across_batch(w, v, 0);
       return with_attr(w, "ReduceSum", {x[0]}, "keepdims", int64_t(0));
     },
     nullptr},
    {OpKind::Mean,
     [](Writer& w, Value v, const Node&, const std::vector<std::string>& x) {
       not_across_batch(w, v, 0);
       return with_attr(w, "ReduceMean", {x[0]}, "keepdims", int64_t(0));
     },
     nullptr},
    {OpKind::SumTo,
     [](Writer& w, Value v, const Node& n, const std::vector<std::string>& x) {
       const Dims& in = w.dims(n.inputs[0]);
       const Dims& to = w.attr_dims(v);
       std::vector<int64_t> axes;
       for (size_t i = 0; i < in.size(); ++i) {
         const size_t j = i + to.size();
         if (j < in.size() || to[j - in.size()] != in[i]) {
           if (in[i] < 0) w.refuse("a sum over the batch axis");
           axes.push_back(int64_t(i));
         }
       }
       const std::string r = axes.empty() ? x[0] : reduce(w, "ReduceSum", x[0], axes, true);
       return w.op("Reshape", {r, w.reshape_target(to)});
     },
     nullptr},
    {OpKind::BroadcastTo,
     [](Writer& w, Value v, const Node& n, const std::vector<std::string>& x) {
       // A batch-dependent target size the input already has is written as 1 (Expand keeps it).
       const Dims& in = w.dims(n.inputs[0]);
       Dims to = w.attr_dims(v);
       for (size_t i = 0; i < to.size(); ++i) {
         const size_t off = to.size() - in.size();
         if (to[i] < 0 && i >= off && in[i - off] == to[i]) to[i] = 1;
       }
       return w.op("Expand", {x[0], w.shape(to)});
     },
     nullptr},
    {OpKind::Reshape,
     [](Writer& w, Value v, const Node&, const std::vector<std::string>& x) {
       return w.op("Reshape", {x[0], w.reshape_target(w.attr_dims(v))});
     },
     nullptr},
    {OpKind::Rsqrt,
     [](Writer& w, Value, const Node&, const std::vector<std::string>& x) {
       return w.op("Reciprocal", {w.op("Sqrt", x)});
     },
     nullptr},
    {OpKind::Gelu,  // x (1 + erf(x / sqrt 2)) / 2
     [](Writer& w, Value, const Node&, const std::vector<std::string>& x) {
       const std::string e = w.op("Erf", {w.op("Mul", {x[0], w.scalar(float(M_SQRT1_2))})});
       return w.op("Mul", {w.op("Mul", {x[0], w.scalar(0.5f)}), w.op("Add", {e, w.scalar(1.0f)})});
     },
     nullptr},
    {OpKind::GeluTanh,  // x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) / 2
     [](Writer& w, Value, const Node&, const std::vector<std::string>& x) {
       const std::string cube = w.op("Mul", {w.op("Mul", {x[0], x[0]}), x[0]});
       const std::string inner = w.op("Add", {x[0], w.op("Mul", {cube, w.scalar(0.044715f)})});
       const std::string t = w.op("Tanh", {w.op("Mul", {inner, w.scalar(float(std::sqrt(2.0 / M_PI)))})});
       return w.op("Mul", {w.op("Mul", {x[0], w.scalar(0.5f)}), w.op("Add", {t, w.scalar(1.0f)})});
     },
     nullptr},
    {OpKind::Silu,
     [](Writer& w, Value, const Node&, const std::vector<std::string>& x) {
       return w.op("Mul", {x[0], w.op("Sigmoid", x)});
     },
     nullptr},
    {OpKind::Elu,
     [](Writer& w, Value, const Node& n, const std::vector<std::string>& x) {
       return with_attr(w, "Elu", x, "alpha", n.attrs.alpha);
     },
     nullptr},
    {OpKind::LeakyRelu,
     [](Writer& w, Value, const Node& n, const std::vector<std::string>& x) {
       return with_attr(w, "LeakyRelu", x, "alpha", n.attrs.negative_slope);
     },
     nullptr},
    {OpKind::Softplus,
     [](Writer& w, Value, const Node&, const std::vector<std::string>& x) { return same(w, "Softplus", x); }, nullptr},
    {OpKind::MeanLastAxis,
     [](Writer& w, Value v, const Node& n, const std::vector<std::string>& x) {
       not_across_batch(w, v, w.graph().node(n.inputs[0]).shape.rank() - 1);
       return reduce(w, "ReduceMean", x[0], {-1}, true);
     },
     nullptr},
    {OpKind::Slice, slice, nullptr},
    {OpKind::Concat,
     [](Writer& w, Value v, const Node& n, const std::vector<std::string>& x) {
       not_across_batch(w, v, n.attrs.axis);
       return with_attr(w, "Concat", x, "axis", int64_t(n.attrs.axis));
     },
     nullptr},
    {OpKind::Gather,
     [](Writer& w, Value, const Node&, const std::vector<std::string>& x) {
       return with_attr(w, "Gather", x, "axis", int64_t(0));
     },
     nullptr},
    {OpKind::ToIndex,
     [](Writer& w, Value, const Node&, const std::vector<std::string>& x) {
       return with_attr(w, "Cast", x, "to", int64_t(TensorProto::INT32));
     },
     nullptr},
    {OpKind::MaxPool2D,
     [](Writer& w, Value, const Node& n, const std::vector<std::string>& x) { return window_op(w, n, "MaxPool", x); },
     nullptr},
    {OpKind::AvgPool2D,
     [](Writer& w, Value, const Node& n, const std::vector<std::string>& x) {
       return window_op(w, n, "AveragePool", x);
     },
     nullptr},
    {OpKind::Conv2D,
     [](Writer& w, Value, const Node& n, const std::vector<std::string>& x) { return window_op(w, n, "Conv", x); },
     nullptr},
    {OpKind::BatchNormStats, nullptr, "batch statistics (training only)"},
    {OpKind::AttachedBatchStats, nullptr, "batch statistics (training only)"},
    {OpKind::BatchNorm,  // (x - mean) gamma / sqrt(var + eps) + beta, over the last axis
     [](Writer& w, Value, const Node& n, const std::vector<std::string>& x) {
       if (n.attrs.own_stats) w.refuse("batch normalization by the batch's own statistics (training only)");
       auto row = [&](int64_t i) {
         return with_attr(w, "Gather", {x[1], w.ints({i}, true)}, "axis", int64_t(0));
       };
       const std::string scale = w.op("Div", {x[2], w.op("Sqrt", {w.op("Add", {row(1), w.scalar(n.attrs.eps)})})});
       std::string y = w.op("Add", {w.op("Mul", {w.op("Sub", {x[0], row(0)}), scale}), x[3]});
       if (x.size() > 4) y = w.op("Add", {y, x[4]});
       return relu_if(w, n, y);
     },
     nullptr},
    {OpKind::Div, [](Writer& w, Value, const Node&, const std::vector<std::string>& x) { return same(w, "Div", x); },
     nullptr},
    {OpKind::Exp, [](Writer& w, Value, const Node&, const std::vector<std::string>& x) { return same(w, "Exp", x); },
     nullptr},
    {OpKind::Log, [](Writer& w, Value, const Node&, const std::vector<std::string>& x) { return same(w, "Log", x); },
     nullptr},
    {OpKind::Sqrt, [](Writer& w, Value, const Node&, const std::vector<std::string>& x) { return same(w, "Sqrt", x); },
     nullptr},
    {OpKind::Erf, [](Writer& w, Value, const Node&, const std::vector<std::string>& x) { return same(w, "Erf", x); },
     nullptr},
    {OpKind::Pow,
     [](Writer& w, Value, const Node& n, const std::vector<std::string>& x) {
       return w.op("Pow", {x[0], w.scalar(n.attrs.exponent)});
     },
     nullptr},
    {OpKind::Clamp,
     [](Writer& w, Value, const Node& n, const std::vector<std::string>& x) {
       const float lo = n.attrs.clamp_min, hi = n.attrs.clamp_max;
       std::vector<std::string> in{x[0], std::isinf(lo) ? "" : w.scalar(lo), std::isinf(hi) ? "" : w.scalar(hi)};
       while (in.back().empty()) in.pop_back();
       return w.op("Clip", in);
     },
     nullptr},
    {OpKind::SumAxis,
     [](Writer& w, Value v, const Node& n, const std::vector<std::string>& x) {
       return along_axis(w, v, n, "ReduceSum", x);
     },
     nullptr},
    {OpKind::MeanAxis,
     [](Writer& w, Value v, const Node& n, const std::vector<std::string>& x) {
       return along_axis(w, v, n, "ReduceMean", x);
     },
     nullptr},
    {OpKind::MaxAxis,
     [](Writer& w, Value v, const Node& n, const std::vector<std::string>& x) {
       return along_axis(w, v, n, "ReduceMax", x);
     },
     nullptr},
    {OpKind::Transpose,
     [](Writer& w, Value v, const Node& n, const std::vector<std::string>& x) {
       std::vector<int64_t> perm(w.dims(v).size());
       std::iota(perm.begin(), perm.end(), 0);
       std::swap(perm[size_t(n.attrs.axis)], perm[size_t(n.attrs.axis2)]);
       return with_attr(w, "Transpose", x, "perm", perm);
     },
     nullptr},
    {OpKind::LstmSequence,
     [](Writer& w, Value v, const Node& n, const std::vector<std::string>& x) { return recurrent(w, v, n, x, true); },
     nullptr},
    {OpKind::GruSequence,
     [](Writer& w, Value v, const Node& n, const std::vector<std::string>& x) { return recurrent(w, v, n, x, false); },
     nullptr},
    {OpKind::Attention, attention, nullptr},
    {OpKind::RmsNorm, rms_norm, nullptr},
    {OpKind::Rope, nullptr,
     "a rotary position embedding (ONNX's RotaryEmbedding is opset 23's, and this exporter writes opset 17)"},
    {OpKind::ReluBackward, nullptr, "a backward op"},
    {OpKind::SigmoidBackward, nullptr, "a backward op"},
    {OpKind::TanhBackward, nullptr, "a backward op"},
    {OpKind::SoftmaxBackward, nullptr, "a backward op"},
    {OpKind::LogSoftmaxBackward, nullptr, "a backward op"},
    {OpKind::SoftmaxCrossEntropyBackward, nullptr, "a backward op"},
    {OpKind::MseLossBackward, nullptr, "a backward op"},
    {OpKind::MaeLossBackward, nullptr, "a backward op"},
    {OpKind::HuberLossBackward, nullptr, "a backward op"},
    {OpKind::BinaryCrossEntropyBackward, nullptr, "a backward op"},
    {OpKind::RsqrtBackward, nullptr, "a backward op"},
    {OpKind::GeluBackward, nullptr, "a backward op"},
    {OpKind::GeluTanhBackward, nullptr, "a backward op"},
    {OpKind::SiluBackward, nullptr, "a backward op"},
    {OpKind::EluBackward, nullptr, "a backward op"},
    {OpKind::LeakyReluBackward, nullptr, "a backward op"},
    {OpKind::SoftplusBackward, nullptr, "a backward op"},
    {OpKind::ErfBackward, nullptr, "a backward op"},
    {OpKind::SliceBackward, nullptr, "a backward op"},
    {OpKind::GatherBackward, nullptr, "a backward op"},
    {OpKind::MaxPool2DBackward, nullptr, "a backward op"},
    {OpKind::AvgPool2DBackward, nullptr, "a backward op"},
    {OpKind::Conv2DBackwardInput, nullptr, "a backward op"},
    {OpKind::Conv2DBackwardFilter, nullptr, "a backward op"},
    {OpKind::BatchNormParamGrad, nullptr, "a backward op"},
    {OpKind::BatchNormBackward, nullptr, "a backward op"},
    {OpKind::ClampBackward, nullptr, "a backward op"},
    {OpKind::MaxAxisBackward, nullptr, "a backward op"},
    {OpKind::LstmSequenceBackward, nullptr, "a backward op"},
    {OpKind::GruSequenceBackward, nullptr, "a backward op"},
    {OpKind::AttentionBackward, nullptr, "a backward op"},
    {OpKind::RmsNormBackward, nullptr, "a backward op"},
    {OpKind::Accuracy, nullptr, "a metric"},
    {OpKind::BinaryAccuracy, nullptr, "a metric"},
    {OpKind::TopKAccuracy, nullptr, "a metric"},
    {OpKind::AccumulateGrad, nullptr, "an optimizer op"},
    {OpKind::OptimizerTick, nullptr, "an optimizer op"},
    {OpKind::AdamWUpdate, nullptr, "an optimizer op"},
    {OpKind::SgdUpdate, nullptr, "an optimizer op"},
    {OpKind::RmspropUpdate, nullptr, "an optimizer op"},
    {OpKind::AdagradUpdate, nullptr, "an optimizer op"},
    {OpKind::ClipValue, nullptr, "an optimizer op"},
    {OpKind::SquaredNorm, nullptr, "an optimizer op"},
    {OpKind::ClipNorm, nullptr, "an optimizer op"},
    {OpKind::MovingAverage, nullptr, "a state update (training only)"},
    {OpKind::AdvanceCounter, nullptr, "a state update (training only)"},
    {OpKind::PolyakUpdate, nullptr, "a state update (training only)"},
    {OpKind::Assign, nullptr, "a state update (training only)"},
}};
static_assert(indexed_by_op_kind(kForms), "kForms must list every OpKind once, in enum order");

}  // namespace

void emit(Writer& w, Value v) {
  const Node& n = w.graph().node(v);
  const Form& f = kForms[size_t(n.op)];
  if (!f.emit) w.refuse(std::string("op '") + op_info(n.op).name + "', " + f.why + ", which has no ONNX form");
  for (Value in : n.input_values())
    if (w.hidden_only(in) > 0 && n.op != OpKind::Slice)
      w.refuse("it reads an LSTM's or GRU's fused output other than by its hidden states");
  w.set_name(v, f.emit(w, v, n, inputs_of(w, n)));
}

}  // namespace tensorgrad::io::onnx_export

#endif  // TENSORGRAD_WITH_ONNX
