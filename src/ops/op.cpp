#include "tensorgrad/ops/op.h"

#include <array>
#include <cmath>
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
    {"maximum", 2, 2, false},
    {"minimum", 2, 2, false},
    {"greater_equal", 2, 2, false},
    {"scale", 1, 1, false},
    {"relu", 1, 1, false},
    {"sigmoid", 1, 1, false},
    {"tanh", 1, 1, false},
    {"softmax", 1, 1, false},
    {"log_softmax", 1, 1, false},
    {"softmax_cross_entropy", 2, 3, false},
    {"mse_loss", 2, 3, false},
    {"mae_loss", 2, 3, false},
    {"huber_loss", 2, 3, false},
    {"binary_cross_entropy", 2, 3, false},
    {"dropout", 1, 1, false},
    {"sum", 1, 1, false},
    {"mean", 1, 1, false},
    {"sum_to", 1, 1, false},
    {"broadcast_to", 1, 1, false},
    {"reshape", 1, 1, false, true},
    {"rsqrt", 1, 1, false},
    {"gelu", 1, 1, false},
    {"silu", 1, 1, false},
    {"elu", 1, 1, false},
    {"leaky_relu", 1, 1, false},
    {"softplus", 1, 1, false},
    {"mean_last_axis", 1, 1, false},
    {"slice", 1, 1, false},
    {"concat", 2, 2, false},
    {"gather", 2, 2, false},
    {"to_index", 1, 1, false},
    {"im2col", 1, 1, false},
    {"col2im", 1, 1, false},
    {"max_pool2d", 1, 1, false},
    {"avg_pool2d", 1, 1, false},
    {"conv2d", 2, 2, false},
    {"batch_norm_stats", 1, 1, false},
    {"batch_norm", 4, 4, false},
    {"relu_backward", 2, 2, false},
    {"sigmoid_backward", 2, 2, false},
    {"tanh_backward", 2, 2, false},
    {"softmax_backward", 2, 2, false},
    {"log_softmax_backward", 2, 2, false},
    {"softmax_cross_entropy_backward", 3, 4, false},
    {"mse_loss_backward", 3, 4, false},
    {"mae_loss_backward", 3, 4, false},
    {"huber_loss_backward", 3, 4, false},
    {"binary_cross_entropy_backward", 3, 4, false},
    {"rsqrt_backward", 2, 2, false},
    {"gelu_backward", 2, 2, false},
    {"silu_backward", 2, 2, false},
    {"elu_backward", 2, 2, false},
    {"leaky_relu_backward", 2, 2, false},
    {"softplus_backward", 2, 2, false},
    {"slice_backward", 1, 1, false},
    {"gather_backward", 2, 2, false},
    {"max_pool2d_backward", 2, 2, false},
    {"avg_pool2d_backward", 1, 1, false},
    {"conv2d_backward_input", 2, 2, false},
    {"conv2d_backward_filter", 2, 2, false},
    {"batch_norm_param_grad", 3, 3, false},
    {"batch_norm_backward", 5, 5, false},
    {"accuracy", 2, 2, false},
    {"binary_accuracy", 2, 2, false},
    {"top_k_accuracy", 2, 2, false},
    {"accumulate_grad", 2, 2, true},
    {"optimizer_tick", 2, 4, true},
    {"adamw_update", 5, 5, true},
    {"sgd_update", 3, 4, true},
    {"rmsprop_update", 4, 6, true},
    {"adagrad_update", 4, 4, true},
    {"clip_value", 1, 1, true},
    {"squared_norm", 1, 1, false},
    {"clip_norm", 2, 2, true},
    {"moving_average", 2, 2, true},
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

// OptimizerTick's schedule inputs: present exactly with a schedule kind, and
// as many steps and values as the kind reads (LrScheduleKind).
void check_schedule(OpKind op, std::span<const Shape> s, std::span<const DType> t, uint32_t kind) {
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
    case OpKind::Maximum:
    case OpKind::Minimum:
    case OpKind::GreaterEqual:
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
    case OpKind::MseLoss:
    case OpKind::MaeLoss:
    case OpKind::HuberLoss:
    case OpKind::BinaryCrossEntropy: {
      const bool elementwise = op != OpKind::SoftmaxCrossEntropy;
      const char* pred_role = op == OpKind::BinaryCrossEntropy ? "logits" : "predictions";
      expect_float(op, t, 0, pred_role);
      expect_rank(op, s[0], 2, pred_role);
      if (elementwise) {
        if (s[1] != s[0]) shape_fail(op, "targets " + s[1].str() + " must match " + pred_role + " " + s[0].str());
        expect_float(op, t, 1, "targets");
      } else {
        check_labels(op, s[0], s[1], t[1]);
      }
      if (s.size() == 3) {
        expect_float(op, t, 2, "weights");
        check_weights(op, s[0], s[2], elementwise);
      }
      if (op == OpKind::HuberLoss && !(a.scale > 0.0f && std::isfinite(a.scale)))
        throw ValueError("huber_loss: delta (attrs.scale) must be finite and > 0; got " + std::to_string(a.scale));
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
    case OpKind::Reshape:
      if (a.shape.numel() != s[0].numel())
        shape_fail(op, "cannot view " + s[0].str() + " (" + std::to_string(s[0].numel()) + " elements) as " +
                           a.shape.str() + " (" + std::to_string(a.shape.numel()) + ")");
      return {a.shape, t[0]};
    case OpKind::Rsqrt:
    case OpKind::Gelu:
    case OpKind::Silu:
    case OpKind::Elu:
    case OpKind::LeakyRelu:
    case OpKind::Softplus:
      expect_float(op, t, 0, "input");
      return {s[0]};
    case OpKind::MeanLastAxis: {
      expect_float(op, t, 0, "input");
      if (s[0].rank() < 1) shape_fail(op, "needs at least one dimension; got a scalar");
      Shape out = s[0];
      out.set(-1, 1);
      return {out};
    }
    case OpKind::Slice: {
      const int r = s[0].rank();
      if (a.axis < 0 || a.axis >= r) shape_fail(op, "axis " + std::to_string(a.axis) + " is outside " + s[0].str());
      if (a.start < 0 || a.length < 0 || a.start + a.length > s[0][a.axis])
        shape_fail(op, "entries [" + std::to_string(a.start) + ", " + std::to_string(a.start + a.length) +
                           ") are outside axis " + std::to_string(a.axis) + " of " + s[0].str());
      Shape out = s[0];
      out.set(a.axis, a.length);
      return {out, t[0]};
    }
    case OpKind::Concat: {
      if (s[0].rank() != s[1].rank() || a.axis < 0 || a.axis >= s[0].rank())
        shape_fail(op, "cannot join " + s[0].str() + " and " + s[1].str() + " along axis " + std::to_string(a.axis));
      for (int d = 0; d < s[0].rank(); ++d)
        if (d != a.axis && s[0][d] != s[1][d])
          shape_fail(op, s[0].str() + " and " + s[1].str() + " differ outside axis " + std::to_string(a.axis));
      if (t[0] != t[1]) throw TypeError("concat: both inputs must have the same dtype");
      Shape out = s[0];
      out.set(a.axis, s[0][a.axis] + s[1][a.axis]);
      return {out, t[0]};
    }
    case OpKind::Gather: {
      expect_float(op, t, 0, "table");
      expect_rank(op, s[0], 2, "table");
      if (t[1] != DType::Int32) throw TypeError("gather: ids must be int32; got float32 (convert with to_index)");
      if (s[1].rank() + 1 > Shape::kMaxRank) shape_fail(op, "ids " + s[1].str() + " have too many dimensions");
      int64_t dims[Shape::kMaxRank];
      for (int d = 0; d < s[1].rank(); ++d) dims[d] = s[1][d];
      dims[s[1].rank()] = s[0][1];
      return {Shape(std::span<const int64_t>(dims, size_t(s[1].rank() + 1)))};
    }
    case OpKind::ToIndex:
      expect_float(op, t, 0, "input");
      return {s[0], DType::Int32};
    case OpKind::Im2Col:
    case OpKind::MaxPool2D:
    case OpKind::AvgPool2D:
    case OpKind::Conv2D: {
      expect_float(op, t, 0, "input");
      expect_rank(op, s[0], 4, "input {batch, height, width, channels}");
      const Window2D& w = a.window;
      if (op == OpKind::Conv2D) {
        expect_float(op, t, 1, "kernel");
        if (s[1] != Shape{w.kh, w.kw, s[0][3], s[1].rank() == 4 ? s[1][3] : 0} || s[1][3] < 1)
          shape_fail(op, "kernel must be {" + std::to_string(w.kh) + ", " + std::to_string(w.kw) + ", " +
                             std::to_string(s[0][3]) + ", filters} for input " + s[0].str() + "; got " + s[1].str());
      }
      if (w.kh < 1 || w.kw < 1 || w.sh < 1 || w.sw < 1 || w.dh < 1 || w.dw < 1 || w.pad_top < 0 || w.pad_left < 0 ||
          w.pad_bottom < 0 || w.pad_right < 0)
        throw ValueError(std::string(info.name) + ": window sizes, strides and dilations must be >= 1 and pads >= 0");
      const int64_t span_h = w.dh * (w.kh - 1) + 1, span_w = w.dw * (w.kw - 1) + 1;
      const int64_t padded_h = s[0][1] + w.pad_top + w.pad_bottom, padded_w = s[0][2] + w.pad_left + w.pad_right;
      if (span_h > padded_h || span_w > padded_w)
        shape_fail(op, "a " + std::to_string(span_h) + "x" + std::to_string(span_w) +
                           " window (dilation included) is larger than its padded input " + std::to_string(padded_h) +
                           "x" + std::to_string(padded_w) + " (input " + s[0].str() + ")");
      const int64_t ho = w.out_h(s[0][1]), wo = w.out_w(s[0][2]);
      if (op == OpKind::Im2Col) return {Shape{s[0][0] * ho * wo, w.kh * w.kw * s[0][3]}};
      if (op == OpKind::Conv2D) return {Shape{s[0][0], ho, wo, s[1][3]}};
      return {Shape{s[0][0], ho, wo, s[0][3]}};
    }
    case OpKind::Col2Im: {
      const Window2D& w = a.window;
      const Shape& x = a.shape;
      if (x.rank() != 4) shape_fail(op, "target shape must be {batch, height, width, channels}; got " + x.str());
      const Shape want{x[0] * w.out_h(x[1]) * w.out_w(x[2]), w.kh * w.kw * x[3]};
      if (s[0] != want) shape_fail(op, "columns must be " + want.str() + " for image " + x.str() + "; got " + s[0].str());
      return {x};
    }
    case OpKind::Conv2DBackwardInput:
    case OpKind::Conv2DBackwardFilter: {
      const bool input = op == OpKind::Conv2DBackwardInput;
      const Shape& x = input ? a.shape : s[0];
      const Shape& kernel = input ? s[1] : a.shape;
      const Shape& g = input ? s[0] : s[1];
      const Window2D& w = a.window;
      if (x.rank() != 4 || kernel.rank() != 4 || kernel[0] != w.kh || kernel[1] != w.kw || kernel[2] != x[3])
        shape_fail(op, "input " + x.str() + " and kernel " + kernel.str() + " do not fit a " + std::to_string(w.kh) +
                           "x" + std::to_string(w.kw) + " window");
      const Shape want{x[0], w.out_h(x[1]), w.out_w(x[2]), kernel[3]};
      if (g != want) shape_fail(op, "gradient must be " + want.str() + "; got " + g.str());
      return {a.shape};
    }
    case OpKind::BatchNormStats:
      expect_float(op, t, 0, "input");
      if (s[0].rank() < 2) shape_fail(op, "input must be {batch, ..., channels}; got " + s[0].str());
      return {Shape{2, s[0][-1]}};
    case OpKind::BatchNorm:
    case OpKind::BatchNormParamGrad:
    case OpKind::BatchNormBackward: {
      for (size_t i = 0; i < s.size(); ++i) expect_float(op, t, i, "input");
      const Shape& x = s[0];
      if (x.rank() < 1) shape_fail(op, "input must have a channel axis; got a scalar");
      const Shape channels{x[-1]};
      if (s[1] != Shape{2, x[-1]}) shape_fail(op, "stats must be " + Shape{2, x[-1]}.str() + "; got " + s[1].str());
      if (op != OpKind::BatchNormParamGrad && s[2] != channels)
        shape_fail(op, "gamma must be " + channels.str() + "; got " + s[2].str());
      if (op == OpKind::BatchNorm && s[3] != channels)
        shape_fail(op, "beta must be " + channels.str() + "; got " + s[3].str());
      const Shape& g = op == OpKind::BatchNormParamGrad ? s[2] : op == OpKind::BatchNormBackward ? s[3] : x;
      if (g != x) shape_fail(op, "gradient " + g.str() + " and input " + x.str() + " differ");
      if (op == OpKind::BatchNormBackward && s[4] != s[1])
        shape_fail(op, "parameter gradients must be " + s[1].str() + "; got " + s[4].str());
      if (!(a.scale > 0.0f)) throw ValueError(std::string(info.name) + ": epsilon (attrs.scale) must be > 0");
      if (op == OpKind::BatchNormParamGrad) return {s[1]};
      return {x};
    }
    case OpKind::RsqrtBackward:
    case OpKind::GeluBackward:
    case OpKind::SiluBackward:
    case OpKind::EluBackward:
    case OpKind::LeakyReluBackward:
    case OpKind::SoftplusBackward:
    case OpKind::MaxPool2DBackward:
      if (op != OpKind::MaxPool2DBackward && s[0] != s[1])
        shape_fail(op, "input " + s[0].str() + " and gradient " + s[1].str() + " differ");
      return {s[0]};
    case OpKind::SliceBackward:
    case OpKind::AvgPool2DBackward:
      return {a.shape};
    case OpKind::GatherBackward:
      return {a.shape};
    case OpKind::MovingAverage:
      if (s[0] != s[1]) shape_fail(op, "state " + s[0].str() + " and value " + s[1].str() + " differ");
      return {s[0]};
    case OpKind::ReluBackward:
    case OpKind::SigmoidBackward:
    case OpKind::TanhBackward:
    case OpKind::SoftmaxBackward:
    case OpKind::LogSoftmaxBackward:
      if (s[0] != s[1]) shape_fail(op, "output " + s[0].str() + " and gradient " + s[1].str() + " differ");
      return {s[0]};
    case OpKind::SoftmaxCrossEntropyBackward:
    case OpKind::MseLossBackward:
    case OpKind::MaeLossBackward:
    case OpKind::HuberLossBackward:
    case OpKind::BinaryCrossEntropyBackward:
      if (s.back().numel() != 1) shape_fail(op, "the incoming gradient must be a scalar; got " + s.back().str());
      return {s[0]};
    case OpKind::Accuracy:
      expect_rank(op, s[0], 2, "predictions");
      if (s[1].rank() == 2 ? s[1] != s[0] : s[1].rank() != 1 || s[1][0] != s[0][0])
        shape_fail(op, "labels " + s[1].str() + " do not fit predictions " + s[0].str());
      return {Shape{}};
    case OpKind::BinaryAccuracy:
      expect_float(op, t, 0, "predictions");
      expect_float(op, t, 1, "targets");
      expect_rank(op, s[0], 2, "predictions");
      if (s[1] != s[0]) shape_fail(op, "targets " + s[1].str() + " must match predictions " + s[0].str());
      return {Shape{}};
    case OpKind::TopKAccuracy:
      expect_float(op, t, 0, "scores");
      expect_rank(op, s[0], 2, "scores");
      check_labels(op, s[0], s[1], t[1]);
      if (a.length < 1)
        throw ValueError("top_k_accuracy: k (attrs.length) must be >= 1; got " + std::to_string(a.length));
      return {Shape{}};
    case OpKind::AccumulateGrad:
      if (s[0] != s[1]) shape_fail(op, "accumulator " + s[0].str() + " and gradient " + s[1].str() + " differ");
      return {s[0]};
    case OpKind::OptimizerTick:
      if (s[0] != Shape{kHyperSize}) shape_fail(op, "hyper-parameter tensor must be {" + std::to_string(kHyperSize) + "}");
      if (s[1] != Shape{1} || t[1] != DType::Int64) shape_fail(op, "the step counter must be an int64 tensor {1}");
      check_schedule(op, s, t, a.flags);
      return {s[0]};
    case OpKind::AdamWUpdate:
    case OpKind::SgdUpdate:
    case OpKind::RmspropUpdate:
    case OpKind::AdagradUpdate: {
      // The optional state inputs are there exactly when their flags say so.
      const bool momentum = a.flags & kUseMomentum, centered = a.flags & kCentered;
      const size_t want = op == OpKind::AdamWUpdate    ? 5
                          : op == OpKind::SgdUpdate    ? 3 + size_t(momentum)
                          : op == OpKind::AdagradUpdate ? 4
                                                        : 4 + size_t(centered) + size_t(momentum);
      if (s.size() != want)
        shape_fail(op, "expected " + std::to_string(want) + " inputs for its flags (momentum " +
                           (momentum ? "on" : "off") + ", centered " + (centered ? "on" : "off") + "); got " +
                           std::to_string(s.size()));
      if ((a.flags & kNesterov) && !momentum) shape_fail(op, "Nesterov momentum needs kUseMomentum");
      for (size_t i = 0; i < s.size(); ++i) expect_float(op, t, i, i == 0 ? "the parameter" : "every input");
      for (size_t i = 1; i + 1 < s.size(); ++i)
        if (s[i] != s[0]) shape_fail(op, "state " + s[i].str() + " does not match parameter " + s[0].str());
      if (s.back() != Shape{kHyperSize})
        shape_fail(op, "hyper-parameter tensor must be {" + std::to_string(kHyperSize) + "}; got " + s.back().str());
      return {s[0]};
    }
    case OpKind::ClipValue:
      expect_float(op, t, 0, "the gradient");
      return {s[0]};
    case OpKind::SquaredNorm:
      expect_float(op, t, 0, "x");
      return {Shape{}};
    case OpKind::ClipNorm:
      expect_float(op, t, 0, "the gradient");
      expect_float(op, t, 1, "the squared norm");
      if (s[1].numel() != 1) shape_fail(op, "the squared norm must be a scalar; got " + s[1].str());
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

Value Builder::mae_loss(Value pred, Value target, Value weights) {
  return weights.valid() ? apply(OpKind::MaeLoss, {pred, target, weights}) : apply(OpKind::MaeLoss, {pred, target});
}

Value Builder::huber_loss(Value pred, Value target, float delta, Value weights) {
  OpAttrs at;
  at.scale = delta;
  return weights.valid() ? apply(OpKind::HuberLoss, {pred, target, weights}, at)
                         : apply(OpKind::HuberLoss, {pred, target}, at);
}

Value Builder::binary_cross_entropy(Value logits, Value targets, Value weights) {
  return weights.valid() ? apply(OpKind::BinaryCrossEntropy, {logits, targets, weights})
                         : apply(OpKind::BinaryCrossEntropy, {logits, targets});
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

Value Builder::unary(OpKind op, Value x, float param) {
  OpAttrs at;
  at.scale = param;
  return apply(op, {x}, at);
}

Value Builder::windowed(OpKind op, Value x, const Window2D& window) {
  OpAttrs at;
  at.window = window;
  return apply(op, {x}, at);
}

Value Builder::fill(const Shape& shape, float value) {
  OpAttrs at;
  at.shape = shape;
  at.scale = value;
  return apply(OpKind::Fill, std::span<const Value>{}, at);
}

}  // namespace tensorgrad
