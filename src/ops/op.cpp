#include "tensorgrad/ops/op.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "ops/op_table.h"
#include "tensorgrad/core/error.h"
#include "tensorgrad/ops/builder.h"
#include "tensorgrad/ops/gradients.h"

namespace tensorgrad {

[[noreturn]] void shape_fail(OpKind op, const std::string& what) {
  throw ShapeError(std::string(op_info(op).name) + ": " + what);
}

void expect_float(OpKind op, DTypes dtypes, size_t i, const char* role) {
  if (dtypes[i] != DType::Float32)
    throw TypeError(std::string(op_info(op).name) + ": " + role + " must be float32; got " + dtype_name(dtypes[i]));
}

void expect_rank(OpKind op, const Shape& s, int rank, const char* role) {
  if (s.rank() != rank)
    shape_fail(op, std::string(role) + " must have rank " + std::to_string(rank) + "; got shape " + s.str());
}

// Labels for a {B, C} prediction: {B, C} float32 (one-hot or probabilities)
// or {B} int32 class ids.
void check_labels(OpKind op, const Shape& pred, const Shape& labels, DType ldtype) {
  if (labels.rank() == pred.rank()) {
    if (labels != pred) shape_fail(op, "labels " + labels.str() + " must match the predictions " + pred.str());
    if (ldtype != DType::Float32)
      throw TypeError(std::string(op_info(op).name) + ": one-hot labels " + labels.str() +
                      " must be float32; got int32 (class ids are a {batch} vector)");
  } else if (labels.rank() == 1) {
    if (labels[0] != pred[0])
      shape_fail(op, "labels have " + std::to_string(labels[0]) + " rows; predictions have " + std::to_string(pred[0]));
    if (ldtype != DType::Int32)
      throw TypeError(std::string(op_info(op).name) + ": class-id labels must be int32; got float32");
  } else {
    shape_fail(op, "labels must be {batch, classes} one-hot or {batch} class ids; got " + labels.str() +
                       " for predictions " + pred.str());
  }
}

void check_weights(OpKind op, const Shape& pred, const Shape& w, bool allow_elementwise) {
  bool per_row = w.rank() == 1 && w[0] == pred[0];
  bool per_element = allow_elementwise && w == pred;
  if (!per_row && !per_element)
    shape_fail(op, "weights must be {" + std::to_string(pred[0]) + "} (one per row)" +
                       (allow_elementwise ? " or " + pred.str() + " (one per element)" : std::string()) + "; got " +
                       w.str());
}

// OptimizerTick's schedule inputs: present exactly with a schedule kind, and
// as many steps and values as the kind reads (LrScheduleKind).
void check_schedule(OpKind op, Shapes s, DTypes t, uint32_t kind) {
  if (kind > kCosineDecayRestarts) shape_fail(op, "unknown learning-rate schedule kind " + std::to_string(kind));
  const size_t want_inputs = kind == kConstantLr ? 2 : 4;
  if (s.size() != want_inputs)
    shape_fail(op, "expected " + std::to_string(want_inputs) + " inputs for schedule kind " + std::to_string(kind) +
                       "; got " + std::to_string(s.size()));
  if (kind == kConstantLr) return;
  if (t[2] != DType::Int64 || t[3] != DType::Float32)
    throw TypeError(std::string(op_info(op).name) + ": the schedule's steps must be int64 and its values float32; got " +
                    dtype_name(t[2]) + " and " + dtype_name(t[3]));
  if (s[2].rank() != 1 || s[3].rank() != 1)
    shape_fail(op, "the schedule's steps and values must be vectors; got " + s[2].str() + " and " + s[3].str());
  const int64_t n = s[2][0], m = s[3][0];
  const bool fits = kind == kPiecewiseConstantDecay ? n >= 1 && m == n
                    : kind == kExponentialDecay    ? n == 2 && m == 2
                    : kind == kCosineDecay         ? n == 3 && m == 3
                                                   : n == 1 && m == 4;
  if (!fits)
    shape_fail(op, "schedule kind " + std::to_string(kind) + " does not read steps " + s[2].str() + " and values " +
                       s[3].str() + " (see LrScheduleKind)");
}

// Whether `small` can be broadcast to `big` (NumPy rules).
bool broadcasts_to(const Shape& small, const Shape& big) {
  if (small.rank() > big.rank()) return false;
  for (int i = 1; i <= small.rank(); ++i)
    if (small[-i] != 1 && small[-i] != big[-i]) return false;
  return true;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op_name) {
  int r = std::max(a.rank(), b.rank());
  std::array<int64_t, Shape::kMaxRank> dims{};
  for (int i = 1; i <= r; ++i) {
    int64_t da = i <= a.rank() ? a[-i] : 1, db = i <= b.rank() ? b[-i] : 1;
    if (da != db && da != 1 && db != 1)
      throw ShapeError(std::string(op_name) + ": shapes " + a.str() + " and " + b.str() +
                       " cannot be broadcast together (dimension " + std::to_string(-i) + ": " + std::to_string(da) +
                       " vs " + std::to_string(db) + ")");
    dims[size_t(r - i)] = da == 1 ? db : da;
  }
  return Shape(std::span<const int64_t>(dims.data(), size_t(r)));
}

// ---- Builder helpers ----

Value Builder::matmul(Value a, Value b, bool trans_a, bool trans_b) {
  OpAttrs at;
  at.trans_a = trans_a;
  at.trans_b = trans_b;
  return apply(OpKind::MatMul, {a, b}, at);
}

Value Builder::matmul(Value a, Value b, Value bias, bool trans_a, bool trans_b) {
  OpAttrs at;
  at.trans_a = trans_a;
  at.trans_b = trans_b;
  return apply(OpKind::MatMul, {a, b, bias}, at);
}

Value Builder::scale(Value x, float s) {
  OpAttrs at;
  at.factor = s;
  return apply(OpKind::Scale, {x}, at);
}

Value Builder::softmax_cross_entropy(Value logits, Value labels, Value weights) {
  return weights.valid() ? apply(OpKind::SoftmaxCrossEntropy, {logits, labels, weights})
                         : apply(OpKind::SoftmaxCrossEntropy, {logits, labels});
}

Value Builder::mse_loss(Value pred, Value target, Value weights) {
  return weights.valid() ? apply(OpKind::MseLoss, {pred, target, weights}) : apply(OpKind::MseLoss, {pred, target});
}

Value Builder::mae_loss(Value pred, Value target, Value weights) {
  return weights.valid() ? apply(OpKind::MaeLoss, {pred, target, weights}) : apply(OpKind::MaeLoss, {pred, target});
}

Value Builder::huber_loss(Value pred, Value target, float delta, Value weights) {
  OpAttrs at;
  at.delta = delta;
  return weights.valid() ? apply(OpKind::HuberLoss, {pred, target, weights}, at)
                         : apply(OpKind::HuberLoss, {pred, target}, at);
}

Value Builder::binary_cross_entropy(Value logits, Value targets, Value weights) {
  return weights.valid() ? apply(OpKind::BinaryCrossEntropy, {logits, targets, weights})
                         : apply(OpKind::BinaryCrossEntropy, {logits, targets});
}

Value Builder::dropout(Value x, float rate, uint64_t seed, Value counter) {
  OpAttrs at;
  at.rate = rate;
  at.seed = seed;
  return apply(OpKind::Dropout, {x, counter.valid() ? counter : rng_counter()}, at);
}

Value Builder::scaled_dot_product_attention(Value q, Value k, Value v, const AttentionOptions& o) {
  OpAttrs at;
  const Shape sq = shape(q);
  at.factor = std::isnan(o.scale) ? (sq.rank() == 3 ? 1.0f / std::sqrt(float(sq[2])) : 1.0f) : o.scale;
  at.rate = o.dropout;
  at.seed = o.seed;
  at.flags = (o.causal ? kCausal : 0u) | (o.mask.valid() ? kAttentionMask : 0u);
  std::vector<Value> in{q, k, v};
  if (o.mask.valid()) in.push_back(o.mask);
  if (o.dropout > 0.0f) in.push_back(rng_counter());
  const Value y = apply(OpKind::Attention, in, at);
  const Shape s = shape(y);
  return slice(y, 2, 0, s[2] - 1);
}

Value Builder::rms_norm(Value x, float eps, Value weight) {
  OpAttrs at;
  at.eps = eps;
  return weight.valid() ? apply(OpKind::RmsNorm, {x, weight}, at) : apply(OpKind::RmsNorm, {x}, at);
}

Value Builder::rotary_embedding(Value x, Value positions, const RopeOptions& options) {
  OpAttrs at;
  at.rope = options;
  return apply(OpKind::Rope, {x, positions}, at);
}

Value Builder::pow(Value x, float p) {
  OpAttrs at;
  at.exponent = p;
  return apply(OpKind::Pow, {x}, at);
}

Value Builder::masked_fill(Value x, Value mask, float value) {
  OpAttrs at;
  at.value = value;
  return apply(OpKind::MaskedFill, {x, mask}, at);
}

// a masked to 0 where cond is not set plus b masked to 0 where it is: each
// element is one of them plus an exact zero, and neither branch's inf or
// NaN survives its mask (cond * a + (1 - cond) * b would give 0 * inf).
Value Builder::where(Value cond, Value a, Value b) {
  const Value unset = masked_fill(fill(Shape{}, 1.0f), cond, 0.0f);
  return add(masked_fill(a, unset, 0.0f), masked_fill(b, cond, 0.0f));
}

Value Builder::clamp(Value x, float min, float max) {
  OpAttrs at;
  at.clamp_min = min;
  at.clamp_max = max;
  return apply(OpKind::Clamp, {x}, at);
}

namespace {
OpAttrs axis_attrs(int axis, bool keepdim) {
  OpAttrs at;
  at.axis = axis;
  at.keepdim = keepdim;
  return at;
}
}  // namespace

Value Builder::sum_axis(Value x, int axis, bool keepdim) {
  return apply(OpKind::SumAxis, {x}, axis_attrs(axis, keepdim));
}

Value Builder::mean_axis(Value x, int axis, bool keepdim) {
  return apply(OpKind::MeanAxis, {x}, axis_attrs(axis, keepdim));
}

Value Builder::max_axis(Value x, int axis, bool keepdim) {
  return apply(OpKind::MaxAxis, {x}, axis_attrs(axis, keepdim));
}

Value Builder::transpose(Value x, int axis, int axis2) {
  OpAttrs at;
  at.axis = axis;
  at.axis2 = axis2;
  return apply(OpKind::Transpose, {x}, at);
}

Value Builder::sum_to(Value x, const Shape& shape) {
  if (this->shape(x) == shape) return x;
  OpAttrs at;
  at.shape = shape;
  return apply(OpKind::SumTo, {x}, at);
}

Value Builder::broadcast_to(Value x, const Shape& shape) {
  if (this->shape(x) == shape) return x;
  OpAttrs at;
  at.shape = shape;
  return apply(OpKind::BroadcastTo, {x}, at);
}

Value Builder::reshape(Value x, const Shape& shape) {
  if (this->shape(x) == shape) return x;
  OpAttrs at;
  at.shape = shape;
  return apply(OpKind::Reshape, {x}, at);
}

Value Builder::slice(Value x, int axis, int64_t start, int64_t length) {
  OpAttrs at;
  at.axis = axis;
  at.start = start;
  at.length = length;
  return apply(OpKind::Slice, {x}, at);
}

Value Builder::concat(Value a, Value b, int axis) {
  OpAttrs at;
  at.axis = axis;
  return apply(OpKind::Concat, {a, b}, at);
}

Value Builder::concat(std::span<const Value> xs, int axis) {
  // More inputs than a node holds would fail before the shape rule, with a plainer error.
  if (xs.size() > size_t(kMaxOpInputs))
    shape_fail(OpKind::Concat,
               "expected 2.." + std::to_string(kMaxOpInputs) + " inputs; got " + std::to_string(xs.size()));
  OpAttrs at;
  at.axis = axis;
  return apply(OpKind::Concat, xs, at);
}

Value Builder::unary(OpKind op, Value x, float param) { return apply(op, {x}, op_param_attrs(op, param)); }

Value Builder::windowed(OpKind op, Value x, const Window2D& window) {
  OpAttrs at;
  at.window = window;
  return apply(op, {x}, at);
}

Value Builder::layer_norm(Value x, float eps, Value gamma, Value beta) {
  const Value centered = sub(x, apply(OpKind::MeanLastAxis, {x}));
  const Value var = apply(OpKind::MeanLastAxis, {mul(centered, centered)});
  const Value inv_std = apply(OpKind::Rsqrt, {add(var, fill(Shape{}, eps))});
  Value y = mul(centered, inv_std);
  if (gamma.valid()) y = mul(y, gamma);
  if (beta.valid()) y = add(y, beta);
  return y;
}

Value Builder::fill(const Shape& shape, float value) {
  OpAttrs at;
  at.shape = shape;
  at.value = value;
  return apply(OpKind::Fill, std::span<const Value>{}, at);
}

}  // namespace tensorgrad
