#include "tensorgrad/ops/op.h"

#include <array>
#include <string>

#include "tensorgrad/core/error.h"
#include "tensorgrad/ops/builder.h"

namespace tensorgrad {

namespace {
constexpr std::array<OpInfo, size_t(OpKind::Count)> kInfo = {{
    {"leaf", 0, 0, false},
    {"fill", 0, 0, false},
    {"matmul", 2, 2, false},
    {"add", 2, 2, false},
    {"sub", 2, 2, false},
    {"mul", 2, 2, false},
    {"scale", 1, 1, false},
    {"relu", 1, 1, false},
    {"sigmoid", 1, 1, false},
    {"tanh", 1, 1, false},
    {"softmax", 1, 1, false},
    {"log_softmax", 1, 1, false},
    {"softmax_cross_entropy", 2, 3, false},
    {"mse_loss", 2, 3, false},
    {"dropout", 1, 1, false},
    {"sum", 1, 1, false},
    {"mean", 1, 1, false},
    {"sum_to", 1, 1, false},
    {"broadcast_to", 1, 1, false},
    {"relu_backward", 2, 2, false},
    {"sigmoid_backward", 2, 2, false},
    {"tanh_backward", 2, 2, false},
    {"softmax_backward", 2, 2, false},
    {"log_softmax_backward", 2, 2, false},
    {"softmax_cross_entropy_backward", 3, 4, false},
    {"mse_loss_backward", 3, 4, false},
    {"accuracy", 2, 2, false},
    {"accumulate_grad", 2, 2, true},
    {"optimizer_tick", 1, 1, true},
    {"adamw_update", 5, 5, true},
    {"sgd_update", 3, 3, true},
}};

[[noreturn]] void shape_fail(OpKind op, const std::string& what) {
  throw ShapeError(std::string(op_info(op).name) + ": " + what);
}

void expect_float(OpKind op, std::span<const DType> dtypes, size_t i, const char* role) {
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

// Whether `small` can be broadcast to `big` (NumPy rules).
bool broadcasts_to(const Shape& small, const Shape& big) {
  if (small.rank() > big.rank()) return false;
  for (int i = 1; i <= small.rank(); ++i)
    if (small[-i] != 1 && small[-i] != big[-i]) return false;
  return true;
}
}  // namespace

const OpInfo& op_info(OpKind op) { return kInfo.at(size_t(op)); }

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

OpSignature infer_signature(OpKind op, std::span<const Shape> s, std::span<const DType> t, const OpAttrs& a) {
  const OpInfo& info = op_info(op);
  if (int(s.size()) < info.min_inputs || int(s.size()) > info.max_inputs)
    shape_fail(op, "expected " + std::to_string(info.min_inputs) + ".." + std::to_string(info.max_inputs) +
                       " inputs; got " + std::to_string(s.size()));
  switch (op) {
    case OpKind::Leaf:
      throw Error("leaf nodes have no shape rule");
    case OpKind::Fill:
      return {a.shape};
    case OpKind::MatMul: {
      expect_float(op, t, 0, "A");
      expect_float(op, t, 1, "B");
      expect_rank(op, s[0], 2, "A");
      expect_rank(op, s[1], 2, "B");
      int64_t m = a.trans_a ? s[0][1] : s[0][0], k = a.trans_a ? s[0][0] : s[0][1];
      int64_t k2 = a.trans_b ? s[1][1] : s[1][0], n = a.trans_b ? s[1][0] : s[1][1];
      if (k != k2)
        shape_fail(op, "inner dimensions differ: " + s[0].str() + (a.trans_a ? "^T" : "") + " x " + s[1].str() +
                           (a.trans_b ? "^T" : "") + " (" + std::to_string(k) + " vs " + std::to_string(k2) + ")");
      return {Shape{m, n}};
    }
    case OpKind::Add:
    case OpKind::Sub:
    case OpKind::Mul:
      expect_float(op, t, 0, "lhs");
      expect_float(op, t, 1, "rhs");
      return {broadcast_shapes(s[0], s[1], info.name)};
    case OpKind::Scale:
    case OpKind::Relu:
    case OpKind::Sigmoid:
    case OpKind::Tanh:
    case OpKind::Dropout:
      expect_float(op, t, 0, "input");
      if (op == OpKind::Dropout && !(a.scale >= 0.0f && a.scale < 1.0f))
        throw ValueError("dropout: rate must be in [0, 1); got " + std::to_string(a.scale));
      return {s[0]};
    case OpKind::Softmax:
    case OpKind::LogSoftmax:
      expect_float(op, t, 0, "input");
      if (s[0].rank() < 1) shape_fail(op, "needs at least one dimension; got a scalar");
      return {s[0]};
    case OpKind::SoftmaxCrossEntropy:
    case OpKind::MseLoss: {
      expect_float(op, t, 0, "predictions");
      expect_rank(op, s[0], 2, "predictions");
      if (op == OpKind::MseLoss) {
        if (s[1] != s[0]) shape_fail(op, "targets " + s[1].str() + " must match predictions " + s[0].str());
        expect_float(op, t, 1, "targets");
      } else {
        check_labels(op, s[0], s[1], t[1]);
      }
      if (s.size() == 3) {
        expect_float(op, t, 2, "weights");
        check_weights(op, s[0], s[2], op == OpKind::MseLoss);
      }
      return {Shape{}};
    }
    case OpKind::Sum:
    case OpKind::Mean:
      expect_float(op, t, 0, "input");
      return {Shape{}};
    case OpKind::SumTo:
      if (!broadcasts_to(a.shape, s[0])) shape_fail(op, "cannot reduce " + s[0].str() + " to " + a.shape.str());
      return {a.shape};
    case OpKind::BroadcastTo:
      if (!broadcasts_to(s[0], a.shape)) shape_fail(op, "cannot broadcast " + s[0].str() + " to " + a.shape.str());
      return {a.shape};
    case OpKind::ReluBackward:
    case OpKind::SigmoidBackward:
    case OpKind::TanhBackward:
    case OpKind::SoftmaxBackward:
    case OpKind::LogSoftmaxBackward:
      if (s[0] != s[1]) shape_fail(op, "output " + s[0].str() + " and gradient " + s[1].str() + " differ");
      return {s[0]};
    case OpKind::SoftmaxCrossEntropyBackward:
    case OpKind::MseLossBackward:
      if (s.back().numel() != 1) shape_fail(op, "the incoming gradient must be a scalar; got " + s.back().str());
      return {s[0]};
    case OpKind::Accuracy:
      expect_rank(op, s[0], 2, "predictions");
      if (s[1].rank() == 2 ? s[1] != s[0] : s[1].rank() != 1 || s[1][0] != s[0][0])
        shape_fail(op, "labels " + s[1].str() + " do not fit predictions " + s[0].str());
      return {Shape{}};
    case OpKind::AccumulateGrad:
      if (s[0] != s[1]) shape_fail(op, "accumulator " + s[0].str() + " and gradient " + s[1].str() + " differ");
      return {s[0]};
    case OpKind::OptimizerTick:
      if (s[0] != Shape{kHyperSize}) shape_fail(op, "hyper-parameter tensor must be {" + std::to_string(kHyperSize) + "}");
      return {s[0]};
    case OpKind::AdamWUpdate:
    case OpKind::SgdUpdate:
      for (size_t i = 1; i + 1 < s.size(); ++i)
        if (s[i] != s[0]) shape_fail(op, "state " + s[i].str() + " does not match parameter " + s[0].str());
      return {s[0]};
    case OpKind::Count:
      break;
  }
  throw Error("unknown op");
}

// ---- Builder helpers ----

Value Builder::matmul(Value a, Value b, bool trans_a, bool trans_b) {
  OpAttrs at;
  at.trans_a = trans_a;
  at.trans_b = trans_b;
  return apply(OpKind::MatMul, {a, b}, at);
}

Value Builder::scale(Value x, float s) {
  OpAttrs at;
  at.scale = s;
  return apply(OpKind::Scale, {x}, at);
}

Value Builder::softmax_cross_entropy(Value logits, Value labels, Value weights) {
  return weights.valid() ? apply(OpKind::SoftmaxCrossEntropy, {logits, labels, weights})
                         : apply(OpKind::SoftmaxCrossEntropy, {logits, labels});
}

Value Builder::mse_loss(Value pred, Value target, Value weights) {
  return weights.valid() ? apply(OpKind::MseLoss, {pred, target, weights}) : apply(OpKind::MseLoss, {pred, target});
}

Value Builder::dropout(Value x, float rate, uint64_t seed) {
  OpAttrs at;
  at.scale = rate;
  at.seed = seed;
  return apply(OpKind::Dropout, {x}, at);
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

Value Builder::fill(const Shape& shape, float value) {
  OpAttrs at;
  at.shape = shape;
  at.scale = value;
  return apply(OpKind::Fill, std::span<const Value>{}, at);
}

}  // namespace tensorgrad
