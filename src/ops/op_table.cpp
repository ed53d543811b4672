// The ops half of the op table (ops/op_table.h): per op its name, arity,
// flags, shape rule and gradient rule, each gradient rule with its formula,
// as tinygrad's gradient.py keeps every rule on one screen. In the rules,
// x = inputs, y = output, g = d(loss)/dy, dx = the results.
#include "ops/op_table.h"

#include <array>
#include <cmath>
#include <string>

#include "tensorgrad/core/error.h"
#include "tensorgrad/ops/gradients.h"

namespace tensorgrad {

namespace {

OpAttrs with_shape(OpAttrs at, const Shape& shape) {
  at.shape = shape;
  return at;
}

// ---- Gradient rules shared by several ops ----

// The gradient through y = max(x, 0) (Relu, and the ops with kReluOutput): g
// where y > 0. The fusion pass (graph/fuse) folds it into the op that made
// g where that op can mask instead.
Value relu_gradient(Builder& b, Value y, Value g) { return b.apply(OpKind::ReluBackward, {y, g}); }

// Backward, metric and optimizer ops: nothing differentiates through them
// today, so reaching one in a backward walk is a bug in the caller.
void no_gradient(const GradientCall& d) {
  throw Error(std::string("op '") + op_info(d.op).name + "' has no gradient rule");
}

// Piecewise constant or integer-valued: the gradient is zero everywhere it
// exists, so the walk stops here.
void zero_gradient(const GradientCall&) {}

// m is a 0/1 mask, so g m and g - g m are exact.
void select_gradient(const GradientCall& d, Value m) {
  Value ga = d.b.mul(d.g, m);
  if (d.need(0)) d.dx[0] = d.b.sum_to(ga, d.b.shape(d.x[0]));
  if (d.need(1)) d.dx[1] = d.b.sum_to(d.b.sub(d.g, ga), d.b.shape(d.x[1]));
}

// Losses whose kernel gives dpred and whose target gradient is -dpred.
void regression_loss_gradient(const GradientCall& d, OpKind backward) {
  Value d_pred = d.x.size() == 3 ? d.b.apply(backward, {d.x[0], d.x[1], d.x[2], d.g}, d.at)
                                 : d.b.apply(backward, {d.x[0], d.x[1], d.g}, d.at);
  if (d.need(0)) d.dx[0] = d_pred;
  if (d.need(1)) d.dx[1] = d.b.scale(d_pred, -1.0f);
}

// Losses whose labels (or targets) and weights take no gradient.
void logits_loss_gradient(const GradientCall& d, OpKind backward) {
  d.dx[0] = d.x.size() == 3 ? d.back(backward, {d.x[0], d.x[1], d.x[2], d.g}) : d.back(backward, {d.x[0], d.x[1], d.g});
}

// ---- Shape rules shared by several ops ----

OpSignature no_shape_rule(OpKind, Shapes, DTypes, const OpAttrs&) { throw Error("leaf nodes have no shape rule"); }

// Backward ops whose output shape the gradient rule passes in attrs.shape.
OpSignature attrs_shape(OpKind, Shapes, DTypes, const OpAttrs& a) { return {a.shape}; }

OpSignature broadcast_binary(OpKind op, Shapes s, DTypes t, const OpAttrs&) {
  expect_float(op, t, 0, "lhs");
  expect_float(op, t, 1, "rhs");
  return {broadcast_shapes(s[0], s[1], op_info(op).name)};
}

OpSignature float_elementwise(OpKind op, Shapes s, DTypes t, const OpAttrs&) {
  expect_float(op, t, 0, "input");
  return {s[0]};
}

OpSignature float_last_axis(OpKind op, Shapes s, DTypes t, const OpAttrs&) {
  expect_float(op, t, 0, "input");
  if (s[0].rank() < 1) shape_fail(op, "needs at least one dimension; got a scalar");
  if (s[0][-1] == 0)
    shape_fail(op, "needs at least one element along the last axis; got " + s[0].str());
  return {s[0]};
}

OpSignature float_to_scalar(OpKind op, Shapes, DTypes t, const OpAttrs&) {
  expect_float(op, t, 0, "input");
  return {Shape{}};
}

OpSignature loss(OpKind op, Shapes s, DTypes t, const OpAttrs& a) {
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
  if (op == OpKind::HuberLoss && !(a.delta > 0.0f && std::isfinite(a.delta)))
    throw ValueError("huber_loss: delta (attrs.delta) must be finite and > 0; got " + std::to_string(a.delta));
  return {Shape{}};
}

// Conv2D's groups against its channels and filters (filters 0: not known
// yet, the kernel's shape is checked after).
void check_groups(OpKind op, int64_t groups, int64_t channels, int64_t filters) {
  if (groups < 1 || channels % groups != 0 || (filters > 0 && filters % groups != 0))
    throw ValueError(std::string(op_info(op).name) + ": groups must be >= 1 and divide the input channels (" +
                     std::to_string(channels) + ") and the filters (" + std::to_string(filters) + "); got groups " +
                     std::to_string(groups));
}

// Pooling and Conv2D: a window over {B, H, W, C}.
OpSignature windowed(OpKind op, Shapes s, DTypes t, const OpAttrs& a) {
  expect_float(op, t, 0, "input");
  expect_rank(op, s[0], 4, "input {batch, height, width, channels}");
  const Window2D& w = a.window;
  if (op != OpKind::Conv2D && w.groups != 1)
    throw ValueError(std::string(op_info(op).name) + ": groups is a convolution's; a pooling window has groups 1, got " +
                     std::to_string(w.groups));
  if (op == OpKind::Conv2D) {
    expect_float(op, t, 1, "kernel");
    check_groups(op, w.groups, s[0][3], s[1].rank() == 4 ? s[1][3] : 0);
    const int64_t per_group = s[0][3] / w.groups;
    if (s[1] != Shape{w.kh, w.kw, per_group, s[1].rank() == 4 ? s[1][3] : 0} || s[1][3] < 1)
      shape_fail(op, "kernel must be {" + std::to_string(w.kh) + ", " + std::to_string(w.kw) + ", " +
                         std::to_string(per_group) + ", filters} (input channels " + std::to_string(s[0][3]) +
                         " / groups " + std::to_string(w.groups) + ") for input " + s[0].str() + "; got " +
                         s[1].str());
    if (s.size() == 3) {
      expect_float(op, t, 2, "bias");
      if (s[2] != Shape{s[1][3]})
        shape_fail(op, "the bias must be {" + std::to_string(s[1][3]) + "}, one value per filter; got " + s[2].str());
    }
  }
  if (w.kh < 1 || w.kw < 1 || w.sh < 1 || w.sw < 1 || w.dh < 1 || w.dw < 1 || w.pad_top < 0 || w.pad_left < 0 ||
      w.pad_bottom < 0 || w.pad_right < 0)
    throw ValueError(std::string(op_info(op).name) + ": window sizes, strides and dilations must be >= 1 and pads >= 0");
  const int64_t span_h = w.dh * (w.kh - 1) + 1, span_w = w.dw * (w.kw - 1) + 1;
  const int64_t padded_h = s[0][1] + w.pad_top + w.pad_bottom, padded_w = s[0][2] + w.pad_left + w.pad_right;
  if (span_h > padded_h || span_w > padded_w)
    shape_fail(op, "a " + std::to_string(span_h) + "x" + std::to_string(span_w) +
                       " window (dilation included) is larger than its padded input " + std::to_string(padded_h) +
                       "x" + std::to_string(padded_w) + " (input " + s[0].str() + ")");
  const int64_t ho = w.out_h(s[0][1]), wo = w.out_w(s[0][2]);
  if (op == OpKind::Conv2D) return {Shape{s[0][0], ho, wo, s[1][3]}};
  return {Shape{s[0][0], ho, wo, s[0][3]}};
}

OpSignature conv2d_backward(OpKind op, Shapes s, DTypes t, const OpAttrs& a) {
  for (size_t i = 0; i < s.size(); ++i) expect_float(op, t, i, "input");
  const bool input = op == OpKind::Conv2DBackwardInput;
  const Shape& x = input ? a.shape : s[0];
  const Shape& kernel = input ? s[1] : a.shape;
  const Shape& g = input ? s[0] : s[1];
  const Window2D& w = a.window;
  if (x.rank() == 4 && kernel.rank() == 4) check_groups(op, w.groups, x[3], kernel[3]);
  if (x.rank() != 4 || kernel.rank() != 4 || kernel[0] != w.kh || kernel[1] != w.kw || kernel[2] * w.groups != x[3])
    shape_fail(op, "input " + x.str() + " and kernel " + kernel.str() + " do not fit a " + std::to_string(w.kh) +
                       "x" + std::to_string(w.kw) + " window in " + std::to_string(w.groups) + " groups");
  const Shape want{x[0], w.out_h(x[1]), w.out_w(x[2]), kernel[3]};
  if (g != want) shape_fail(op, "gradient must be " + want.str() + "; got " + g.str());
  // Conv2DBackwardInput's extra inputs: the addend, then with kMaskNonPositive the ReLU output y.
  const bool masked = input && (a.flags & kMaskNonPositive);
  if (input && s.size() == 4 && !masked)
    shape_fail(op, "a fourth input (the ReLU output that masks dx) needs the kMaskNonPositive flag");
  if (masked && s.size() < 3)
    shape_fail(op, "the kMaskNonPositive flag needs the ReLU output that masks dx as the last input");
  for (size_t i = 2; i < s.size(); ++i) {
    if (s[i] == a.shape) continue;
    std::string message = masked && i + 1 == s.size() ? "the ReLU output that masks dx" : "the added term";
    message.append(" must be the result's shape ").append(a.shape.str()).append("; got ").append(s[i].str());
    shape_fail(op, message);
  }
  return {a.shape};
}

// BatchNorm (x, stats, gamma, beta [, residual]), BatchNormParamGrad (x,
// stats, g [, gamma, beta]) and BatchNormBackward (x, stats, gamma, g,
// param_grad [, beta]); the optional gamma and beta of the two backward ops
// come exactly with kReluOutput (they recompute the forward's mask).
OpSignature batch_norm_family(OpKind op, Shapes s, DTypes t, const OpAttrs& a) {
  for (size_t i = 0; i < s.size(); ++i) expect_float(op, t, i, "input");
  const Shape& x = s[0];
  if (x.rank() < 1) shape_fail(op, "input must have a channel axis; got a scalar");
  const Shape channels{x[-1]};
  const bool relu = (a.flags & kReluOutput) != 0;
  if (s[1] != Shape{2, x[-1]}) shape_fail(op, "stats must be " + Shape{2, x[-1]}.str() + "; got " + s[1].str());
  if (op != OpKind::BatchNormParamGrad && s[2] != channels)
    shape_fail(op, "gamma must be " + channels.str() + "; got " + s[2].str());
  if (op == OpKind::BatchNorm && s[3] != channels) shape_fail(op, "beta must be " + channels.str() + "; got " + s[3].str());
  if (op == OpKind::BatchNorm && s.size() == 5 && s[4] != x)
    shape_fail(op, "residual must be the input's shape " + x.str() + "; got " + s[4].str());
  const Shape& g = op == OpKind::BatchNormParamGrad ? s[2] : op == OpKind::BatchNormBackward ? s[3] : x;
  if (g != x) shape_fail(op, "gradient " + g.str() + " and input " + x.str() + " differ");
  if (op == OpKind::BatchNormBackward && s[4] != s[1])
    shape_fail(op, "parameter gradients must be " + s[1].str() + "; got " + s[4].str());
  // The backward ops' forward parameters for the ReLU mask.
  const size_t forward_params = op == OpKind::BatchNormParamGrad ? 3 : op == OpKind::BatchNormBackward ? 5 : 0;
  if (forward_params) {
    const size_t want = forward_params + (relu ? (op == OpKind::BatchNormParamGrad ? 2 : 1) : 0);
    if (s.size() != want)
      shape_fail(op, std::string("takes ") + std::to_string(want) + " inputs " +
                         (relu ? "with" : "without") + " kReluOutput; got " + std::to_string(s.size()));
    for (size_t i = forward_params; i < s.size(); ++i)
      if (s[i] != channels)
        shape_fail(op, "gamma and beta must be " + channels.str() + "; got " + s[i].str());
  }
  if (!(a.eps > 0.0f)) throw ValueError(std::string(op_info(op).name) + ": epsilon (attrs.eps) must be > 0");
  if (op == OpKind::BatchNormParamGrad) return {s[1]};
  return {x};
}

// BatchNormStats and AttachedBatchStats: x{batch, ..., C} -> {2, C}.
OpSignature batch_stats(OpKind op, Shapes s, DTypes t, const OpAttrs&) {
  expect_float(op, t, 0, "input");
  if (s[0].rank() < 2) shape_fail(op, "input must be {batch, ..., channels}; got " + s[0].str());
  return {Shape{2, s[0][-1]}};
}

// mean = sum(x) / N, var = sum((x - mean)^2) / N:
// dx = g_mean / N + 2 g_var (x - mean) / N
void batch_stats_gradient(const GradientCall& d) {
  Builder& b = d.b;
  const Shape xs = b.shape(d.x[0]);
  const int64_t c = xs[-1];
  const float inv_n = float(c) / float(xs.numel());
  Value g_mean = b.reshape(b.slice(d.g, 0, 0, 1), Shape{c});
  Value g_var = b.reshape(b.slice(d.g, 0, 1, 1), Shape{c});
  Value mean = b.reshape(b.slice(d.y, 0, 0, 1), Shape{c});
  Value centered = b.sub(d.x[0], mean);
  d.dx[0] = b.add(b.scale(b.mul(centered, b.scale(g_var, 2.0f)), inv_n), b.scale(g_mean, inv_n));
}

// LstmSequence (xw{B,T,4H}, U{H,4H} [, h0, c0]) -> {B,T,6H} and GruSequence
// (xw{B,T,3H}, U{H,3H}, rb{3H} [, h0]) -> {B,T,5H}, initial states {B,H};
// their backward ops (y, U, g [, c0 or h0]) -> {B,T,4H}, or {B,T+1,4H} with
// the initial states' gradients as step T. The gates per unit (4 or 3) and
// the values a step keeps (6 or 5) name the op.
// Attention and its backward op: q, k, v [, y, g] [, mask] [, counter], as the op list says.
OpSignature attention(OpKind op, Shapes s, DTypes t, const OpAttrs& a) {
  const bool backward = op == OpKind::AttentionBackward;
  const char* roles[] = {"queries", "keys", "values"};
  for (size_t i = 0; i < 3; ++i) {
    expect_float(op, t, i, roles[i]);
    expect_rank(op, s[i], 3, roles[i]);
  }
  const int64_t n = s[0][0], lq = s[0][1], d = s[0][2], nkv = s[1][0], lk = s[1][1], dv = s[2][2];
  if (s[2][0] != nkv || s[1][2] != d || s[2][1] != lk)
    shape_fail(op, "queries {N, Lq, D}, keys {Nkv, Lk, D} and values {Nkv, Lk, Dv} do not fit: " + s[0].str() + ", " +
                       s[1].str() + ", " + s[2].str());
  if (lq < 1 || lk < 1 || d < 1 || dv < 1 || n < 1 || nkv < 1)
    shape_fail(op, "needs at least one row, one query, one key and one feature; got " + s[0].str() + ", " +
                       s[1].str() + " and " + s[2].str());
  if (n % nkv != 0)
    shape_fail(op, "the keys' and values' " + std::to_string(nkv) + " rows must divide the queries' " +
                       std::to_string(n) + " (grouped-query attention: each key-value row serves N / Nkv query rows); "
                       "got queries " + s[0].str() + ", keys " + s[1].str() + ", values " + s[2].str());
  const int64_t group = n / nkv;
  if (!std::isfinite(a.factor)) throw ValueError("attention: the scale must be finite; got " + std::to_string(a.factor));
  if (!(a.rate >= 0.0f && a.rate < 1.0f))
    throw ValueError("attention: the dropout rate must be in [0, 1); got " + std::to_string(a.rate));
  size_t next = 3;
  const Shape y{n, lq, dv + 1};
  if (backward) {
    for (size_t i = 3; i < 5; ++i) {
      expect_float(op, t, i, i == 3 ? "output" : "gradient");
      if (s[i] != y) shape_fail(op, std::string(i == 3 ? "output" : "gradient") + " must be " + y.str() + "; got " + s[i].str());
    }
    next = 5;
  }
  if (a.flags & kAttentionMask) {
    if (next >= s.size()) shape_fail(op, "flags say a mask follows; none was given");
    expect_float(op, t, next, "mask");
    const Shape& m = s[next];
    if (m.rank() != 3 || (m[0] != 1 && m[0] != n) || (m[1] != 1 && m[1] != lq) || m[2] != lk)
      shape_fail(op, "the mask must be {1 or N, 1 or Lq, Lk} = {1 or " + std::to_string(n) + ", 1 or " +
                         std::to_string(lq) + ", " + std::to_string(lk) + "}; got " + m.str());
    ++next;
  }
  if (a.rate > 0.0f) {
    if (next >= s.size() || t[next] != DType::Int64 || s[next] != Shape{1})
      shape_fail(op, "dropout needs the random stream's counter (int64 {1}) as its last input");
    ++next;
  }
  if (next != s.size())
    shape_fail(op, std::to_string(s.size()) + " inputs, " + std::to_string(next) +
                       " expected from its flags (kAttentionMask) and dropout rate");
  if (backward) return {Shape{nkv, group * lq * d + lk * d + lk * dv}};
  return {y};
}

// RmsNorm (x [, weight]) and RmsNormBackward (x, g [, weight]).
OpSignature rms_norm_family(OpKind op, Shapes s, DTypes t, const OpAttrs& a) {
  const bool backward = op == OpKind::RmsNormBackward;
  for (size_t i = 0; i < s.size(); ++i) expect_float(op, t, i, i == 0 ? "input" : backward && i == 1 ? "gradient" : "weight");
  const Shape& x = s[0];
  if (x.rank() < 1) shape_fail(op, "needs at least one dimension (the normalized last axis); got a scalar");
  if (x[-1] < 1) shape_fail(op, "needs at least one element along the last axis; got " + x.str());
  if (backward && s[1] != x) shape_fail(op, "gradient " + s[1].str() + " and input " + x.str() + " differ");
  const size_t weight = backward ? 2 : 1;
  if (s.size() > weight && s[weight] != Shape{x[-1]})
    shape_fail(op, "the weight must be {" + std::to_string(x[-1]) + "}, one value per feature of the last axis of " +
                       x.str() + "; got " + s[weight].str());
  if (!(a.eps > 0.0f) || !std::isfinite(a.eps))
    throw ValueError(std::string(op_info(op).name) + ": epsilon must be finite and > 0 (it keeps a zero row finite); got " +
                     std::to_string(a.eps));
  return {x};
}

// Rope (x{B,T,H,D}, positions int32{T}).
OpSignature rope(OpKind op, Shapes s, DTypes t, const OpAttrs& a) {
  expect_float(op, t, 0, "input");
  if (t[1] != DType::Int32)
    throw TypeError(std::string("rope: positions must be int32 {T}; got ") + dtype_name(t[1]) +
                    " (convert float positions with to_index)");
  const Shape& x = s[0];
  if (x.rank() != 4)
    shape_fail(op, "input must be {batch, steps, heads, head features} (rank 4); got " + x.str());
  if (s[1] != Shape{x[1]})
    shape_fail(op, "positions must be {" + std::to_string(x[1]) + "}, one per step of input " + x.str() + "; got " +
                       s[1].str());
  const RopeOptions& o = a.rope;
  if (o.dims < 0 || o.dims % 2 != 0)
    throw ValueError("rope: dims (the features rotated) must be even and >= 0 (0: all of them), as features turn in "
                     "pairs; got " + std::to_string(o.dims));
  if (o.dims > x[3])
    shape_fail(op, "dims " + std::to_string(o.dims) + " is more than the " + std::to_string(x[3]) +
                       " head features of input " + x.str());
  if (o.dims == 0 && x[3] % 2 != 0)
    shape_fail(op, "rotating all " + std::to_string(x[3]) + " head features of input " + x.str() +
                       " needs an even count (features turn in pairs); set dims to an even count <= D");
  if (!(o.theta > 0.0f) || !std::isfinite(o.theta))
    throw ValueError("rope: theta (the wavelength base) must be finite and > 0; got " + std::to_string(o.theta));
  if (!(o.scaling_factor > 0.0f) || !std::isfinite(o.scaling_factor))
    throw ValueError("rope: scaling_factor must be finite and > 0; got " + std::to_string(o.scaling_factor));
  if (o.pairing != RopePairing::Halves && o.pairing != RopePairing::Adjacent)
    throw ValueError("rope: pairing must be RopePairing::Halves or RopePairing::Adjacent; got " +
                     std::to_string(int(o.pairing)));
  return {x};
}

OpSignature recurrent_sequence(OpKind op, Shapes s, DTypes t, const OpAttrs&) {
  for (size_t i = 0; i < s.size(); ++i) expect_float(op, t, i, "input");
  const bool lstm = op == OpKind::LstmSequence || op == OpKind::LstmSequenceBackward;
  const bool backward = op == OpKind::LstmSequenceBackward || op == OpKind::GruSequenceBackward;
  const int64_t gates = lstm ? 4 : 3, kept = lstm ? 6 : 5;
  const Shape& u = s[1];
  if (u.rank() != 2 || u[1] != gates * u[0])
    shape_fail(op, "recurrent kernel must be {units, " + std::to_string(gates) + " * units}; got " + u.str());
  const int64_t h = u[0];
  const Shape& x = s[0];
  if (x.rank() != 3 || x[2] != (backward ? kept : gates) * h)
    shape_fail(op, std::string(backward ? "output" : "input projection") + " must be {batch, steps, " +
                       std::to_string(backward ? kept : gates) + " * " + std::to_string(h) + "}; got " + x.str());
  if (backward && s[2] != x) shape_fail(op, "gradient must be " + x.str() + " (the output's shape); got " + s[2].str());
  if (op == OpKind::GruSequence && s[2] != Shape{3 * h})
    shape_fail(op, "recurrent bias must be {" + std::to_string(3 * h) + "}; got " + s[2].str());
  // The initial states follow the op's own inputs: LSTM's h0 and c0 together, the GRU's h0.
  const size_t first_state = backward ? 3 : lstm ? 2 : 3;
  if (op == OpKind::LstmSequence && s.size() == 3)
    shape_fail(op, "takes both initial states h0 and c0, or neither; got one");
  for (size_t i = first_state; i < s.size(); ++i)
    if (s[i] != Shape{x[0], h})
      shape_fail(op, "initial state " + std::to_string(i - first_state) + " must be {batch, units} = " +
                         Shape{x[0], h}.str() + "; got " + s[i].str());
  if (backward) return {Shape{x[0], s.size() > 3 ? x[1] + 1 : x[1], 4 * h}};
  return {Shape{x[0], x[1], kept * h}};
}

// The hidden states each step started from, {B*T, H}: h0 (zeros when not
// valid), then h_0 .. h_{T-2} (the first H columns of a sequence op's output y).
Value previous_states(Builder& b, Value y, int64_t h, Value h0) {
  const Shape s = b.shape(y);
  const int64_t batch = s[0], steps = s[1];
  Value first = h0.valid() ? b.reshape(h0, Shape{batch, 1, h}) : b.fill(Shape{batch, 1, h}, 0.0f);
  if (steps == 1) return b.reshape(first, Shape{batch, h});
  Value earlier = b.slice(b.slice(y, 1, 0, steps - 1), 2, 0, h);
  return b.reshape(b.concat(first, earlier, 1), Shape{batch * steps, h});
}

// Initial state k's gradient {B, H} from a sequence backward op's last step
// (its output with initial states: [dh0 | dc0 | ...] at step T).
Value initial_state_gradient(Builder& b, Value all, int64_t k, int64_t h) {
  const Shape s = b.shape(all);
  return b.reshape(b.slice(b.slice(all, 1, s[1] - 1, 1), 2, k * h, h), Shape{s[0], h});
}

// Backward ops of (y, g): the forward op's output and its gradient.
OpSignature output_and_gradient(OpKind op, Shapes s, DTypes, const OpAttrs&) {
  if (s[0] != s[1]) shape_fail(op, "output " + s[0].str() + " and gradient " + s[1].str() + " differ");
  return {s[0]};
}

// Backward ops of (x, g) (RsqrtBackward's x is its output y; the message
// has always said "input").
OpSignature input_and_gradient(OpKind op, Shapes s, DTypes, const OpAttrs&) {
  if (s[0] != s[1]) shape_fail(op, "input " + s[0].str() + " and gradient " + s[1].str() + " differ");
  return {s[0]};
}

// SumAxis, MeanAxis, MaxAxis: x with attrs.axis dropped (or kept as 1 with attrs.keepdim).
Shape reduced_shape(OpKind op, const Shape& x, const OpAttrs& a) {
  if (x.rank() == 0) shape_fail(op, "needs at least one dimension; got a scalar " + x.str());
  if (a.axis < 0 || a.axis >= x.rank())
    shape_fail(op, "axis " + std::to_string(a.axis) + " is outside " + x.str() + " (expected 0.." +
                       std::to_string(x.rank() - 1) + ")");
  if (a.keepdim) {
    Shape out = x;
    out.set(a.axis, 1);
    return out;
  }
  int64_t dims[Shape::kMaxRank];
  int r = 0;
  for (int i = 0; i < x.rank(); ++i)
    if (i != a.axis) dims[r++] = x[i];
  return Shape(std::span<const int64_t>(dims, size_t(r)));
}

OpSignature reduce_axis(OpKind op, Shapes s, DTypes t, const OpAttrs& a) {
  expect_float(op, t, 0, "input");
  Shape out = reduced_shape(op, s[0], a);
  if (op == OpKind::MaxAxis && s[0][a.axis] == 0)
    shape_fail(op, "axis " + std::to_string(a.axis) + " of " + s[0].str() + " is empty: it has no maximum");
  return {out};
}

// Clamp and ClampBackward: the bounds must be ordered (either may be infinite).
void check_clamp_bounds(OpKind op, const OpAttrs& a) {
  if (std::isnan(a.clamp_min) || std::isnan(a.clamp_max) || a.clamp_min > a.clamp_max)
    throw ValueError(std::string(op_info(op).name) + ": expected clamp_min <= clamp_max; got min " +
                     std::to_string(a.clamp_min) + " and max " + std::to_string(a.clamp_max));
}

// The broadcast of g (reshaped to keepdim form) back to x's shape: the gradient of SumAxis.
Value broadcast_along_axis(const GradientCall& d) {
  Builder& b = d.b;
  const Shape xs = b.shape(d.x[0]);
  Shape kept = xs;
  kept.set(d.at.axis, 1);
  return b.broadcast_to(b.reshape(d.g, kept), xs);
}

OpSignature loss_backward(OpKind op, Shapes s, DTypes, const OpAttrs&) {
  if (s.back().numel() != 1) shape_fail(op, "the incoming gradient must be a scalar; got " + s.back().str());
  return {s[0]};
}

// The updates: (param, [state...], hyper), the optional state inputs there
// exactly when their flags say so.
OpSignature optimizer_update(OpKind op, Shapes s, DTypes t, const OpAttrs& a) {
  const bool momentum = a.flags & kUseMomentum, centered = a.flags & kCentered;
  const size_t want = op == OpKind::AdamWUpdate    ? 5
                      : op == OpKind::SgdUpdate    ? 3 + size_t(momentum)
                      : op == OpKind::AdagradUpdate ? 4
                                                    : 4 + size_t(centered) + size_t(momentum);
  if (s.size() != want)
    shape_fail(op, "expected " + std::to_string(want) + " inputs for its flags (momentum " + (momentum ? "on" : "off") +
                       ", centered " + (centered ? "on" : "off") + "); got " + std::to_string(s.size()));
  if ((a.flags & kNesterov) && !momentum) shape_fail(op, "Nesterov momentum needs kUseMomentum");
  for (size_t i = 0; i < s.size(); ++i) expect_float(op, t, i, i == 0 ? "the parameter" : "every input");
  for (size_t i = 1; i + 1 < s.size(); ++i)
    if (s[i] != s[0]) shape_fail(op, "state " + s[i].str() + " does not match parameter " + s[0].str());
  if (s.back() != Shape{kHyperSize})
    shape_fail(op, "hyper-parameter tensor must be {" + std::to_string(kHyperSize) + "}; got " + s.back().str());
  return {s[0]};
}

// ---- Flop rules (op_list.h's flops column) ----

// One per output element: element-wise ops and reductions, whose bytes are their cost.
double flops_elementwise(OpKind, const OpAttrs&, Shapes, const Shape& out) { return double(out.numel()); }

// Twice the multiply-adds of a product; 0 (then one per output element, in
// op_flops) for an empty one.
double flops_matmul(OpKind, const OpAttrs& at, Shapes in, const Shape& out) {
  const Shape& a = in[0];
  return 2.0 * double(out.numel()) * double(at.trans_a ? a[a.rank() - 2] : a[a.rank() - 1]);
}

// The product form (acc, A, B) counts as MatMul; (acc, g) as an element-wise sum.
double flops_accumulate_grad(OpKind op, const OpAttrs& at, Shapes in, const Shape& out) {
  if (in.size() != 3) return 0.0;
  return flops_matmul(op, at, in.subspan(1), out);
}

// The recurrent sequences: a {B, H} x U{H, gates*H} product a step, B*T steps' rows in all.
double flops_recurrent(OpKind, const OpAttrs&, Shapes in, const Shape& out) {
  return 2.0 * double(out[0]) * double(out[1]) * double(in[1].numel());
}

// A convolution and its gradients: 2 (the forward's outputs) kh kw C.
// Attention: the two products of every (query, key) pair, 2 N Lq Lk (D + Dv); its backward about 2.5 times that.
double flops_attention(OpKind op, const OpAttrs&, Shapes in, const Shape&) {
  const double f = 2.0 * double(in[0][0]) * double(in[0][1]) * double(in[1][1]) * double(in[0][2] + in[2][2]);
  return op == OpKind::AttentionBackward ? 2.5 * f : f;
}

double flops_conv2d(OpKind, const OpAttrs&, Shapes in, const Shape& out) {
  return 2.0 * double(out.numel()) * double(in[1].numel() / in[1][3]);
}
double flops_conv2d_backward_input(OpKind, const OpAttrs&, Shapes in, const Shape&) {
  return 2.0 * double(in[0].numel()) * double(in[1].numel() / in[1][3]);
}
double flops_conv2d_backward_filter(OpKind, const OpAttrs&, Shapes in, const Shape& out) {
  return 2.0 * double(in[1].numel()) * double(out.numel() / out[3]);
}

// ---- The list's facts, by OpKind ----

constexpr auto kInfos = std::to_array<OpInfo>({
#define TG_OP(kind, name, lo, hi, effect, param, batch, flops) \
  {name, lo, hi, OpEffect::effect == OpEffect::InPlace, OpEffect::effect == OpEffect::View, param, BatchScaling::batch},
#include "tensorgrad/ops/op_list.h"
#undef TG_OP
});

using FlopRule = double (*)(OpKind op, const OpAttrs& at, Shapes in, const Shape& out);
constexpr auto kFlopRules = std::to_array<FlopRule>({
#define TG_OP(kind, name, lo, hi, effect, param, batch, flops) flops_##flops,
#include "tensorgrad/ops/op_list.h"
#undef TG_OP
});
static_assert(kInfos.size() == size_t(OpKind::Count) && kFlopRules.size() == size_t(OpKind::Count));

// ---- The table of rules ----

constexpr auto kOps = std::to_array<OpDef>({
    {OpKind::Leaf, no_shape_rule, zero_gradient},  // leaves end the walk
    {OpKind::Fill, attrs_shape, zero_gradient},    // a constant has no inputs

    // C = op(A) op(B): dA = g op(B)^T, dB = op(A)^T g, each transposed back when its operand was
    // (batched: the same per batch entry, the transposes being of the last two axes);
    // with kReluOutput, C = max(op(A) op(B) [+ bias], 0): g masked by C > 0 first
    {OpKind::MatMul,
     [](OpKind op, Shapes s, DTypes t, const OpAttrs& a) -> OpSignature {
       expect_float(op, t, 0, "A");
       expect_float(op, t, 1, "B");
       const int r = s[0].rank();
       if (s.size() == 3) {  // C = op(A) op(B) + bias, the bias {N} on every row
         expect_float(op, t, 2, "bias");
         expect_rank(op, s[0], 2, "A (with a bias)");
         expect_rank(op, s[1], 2, "B (with a bias)");
         const int64_t n = a.trans_b ? s[1][0] : s[1][1];
         if (s[2] != Shape{n})
           shape_fail(op, "the bias must be {" + std::to_string(n) + "}, one value per output column; got " +
                              s[2].str());
       }
       if (r == 3 || s[1].rank() == 3) {
         if (r != 3 || s[1].rank() != 3)
           shape_fail(op, "batched operands must both have rank 3 {batch, rows, cols}; got " + s[0].str() + " and " +
                              s[1].str());
         if (s[0][0] != s[1][0])
           shape_fail(op, "batch sizes differ: " + s[0].str() + " and " + s[1].str());
       } else {
         expect_rank(op, s[0], 2, "A");
         expect_rank(op, s[1], 2, "B");
       }
       // The last two axes are the matrices; trans_a / trans_b transpose them.
       int64_t m = a.trans_a ? s[0][-1] : s[0][-2], k = a.trans_a ? s[0][-2] : s[0][-1];
       int64_t k2 = a.trans_b ? s[1][-1] : s[1][-2], n = a.trans_b ? s[1][-2] : s[1][-1];
       if (k != k2)
         shape_fail(op, "inner dimensions differ: " + s[0].str() + (a.trans_a ? "^T" : "") + " x " + s[1].str() +
                            (a.trans_b ? "^T" : "") + " (" + std::to_string(k) + " vs " + std::to_string(k2) + ")");
       return {r == 3 ? Shape{s[0][0], m, n} : Shape{m, n}};
     },
     [](const GradientCall& d) {
       Builder& b = d.b;
       const bool ta = d.at.trans_a, tb = d.at.trans_b;
       const Value g = d.at.flags & kReluOutput ? relu_gradient(b, d.y, d.g) : d.g;
       if (d.need(0)) d.dx[0] = ta ? b.matmul(d.x[1], g, tb, true) : b.matmul(g, d.x[1], false, !tb);
       if (d.need(1)) d.dx[1] = tb ? b.matmul(g, d.x[0], true, ta) : b.matmul(d.x[0], g, !ta, false);
       if (d.need(2)) d.dx[2] = b.sum_to(g, b.shape(d.x[2]));  // the bias: g summed over the rows
     }},

    // y = a + b: da = sum_to(g), db = sum_to(g), summed over the broadcast axes;
    // with kReluOutput, y = max(a + b, 0): g masked by y > 0 first
    {OpKind::Add, broadcast_binary,
     [](const GradientCall& d) {
       const Value g = d.at.flags & kReluOutput ? relu_gradient(d.b, d.y, d.g) : d.g;
       if (d.need(0)) d.dx[0] = d.b.sum_to(g, d.b.shape(d.x[0]));
       if (d.need(1)) d.dx[1] = d.b.sum_to(g, d.b.shape(d.x[1]));
     }},
    // y = a - b: da = sum_to(g), db = -sum_to(g)
    {OpKind::Sub, broadcast_binary,
     [](const GradientCall& d) {
       if (d.need(0)) d.dx[0] = d.b.sum_to(d.g, d.b.shape(d.x[0]));
       if (d.need(1)) d.dx[1] = d.b.scale(d.b.sum_to(d.g, d.b.shape(d.x[1])), -1.0f);
     }},
    // y = a b: da = sum_to(g b), db = sum_to(g a)
    {OpKind::Mul, broadcast_binary,
     [](const GradientCall& d) {
       if (d.need(0)) d.dx[0] = d.b.sum_to(d.b.mul(d.g, d.x[1]), d.b.shape(d.x[0]));
       if (d.need(1)) d.dx[1] = d.b.sum_to(d.b.mul(d.g, d.x[0]), d.b.shape(d.x[1]));
     }},
    // m = [a >= b]: da = g m, db = g (1 - m) (ties go to a, as TensorFlow)
    {OpKind::Maximum, broadcast_binary,
     [](const GradientCall& d) { select_gradient(d, d.back(OpKind::GreaterEqual, {d.x[0], d.x[1]})); }},
    // m = [a <= b] = [b >= a]: da = g m, db = g (1 - m)
    {OpKind::Minimum, broadcast_binary,
     [](const GradientCall& d) { select_gradient(d, d.back(OpKind::GreaterEqual, {d.x[1], d.x[0]})); }},
    // piecewise constant: no gradient
    {OpKind::GreaterEqual, broadcast_binary, zero_gradient},
    // y = v where m != 0, else x: dx = sum_to(g where m == 0, else 0); the mask takes none
    {OpKind::MaskedFill, broadcast_binary,
     [](const GradientCall& d) {
       if (d.need(0)) d.dx[0] = d.b.sum_to(d.b.masked_fill(d.g, d.x[1], 0.0f), d.b.shape(d.x[0]));
     }},

    // y = s x: dx = s g
    {OpKind::Scale, float_elementwise,
     [](const GradientCall& d) { d.dx[0] = d.b.scale(d.g, d.at.factor); }},
    // y = max(x, 0): dx = g [y > 0]
    {OpKind::Relu, float_elementwise,
     [](const GradientCall& d) { d.dx[0] = relu_gradient(d.b, d.y, d.g); }},
    // y = 1 / (1 + e^-x): dx = g y (1 - y)
    {OpKind::Sigmoid, float_elementwise,
     [](const GradientCall& d) { d.dx[0] = d.back(OpKind::SigmoidBackward, {d.y, d.g}); }},
    // y = tanh(x): dx = g (1 - y^2)
    {OpKind::Tanh, float_elementwise,
     [](const GradientCall& d) { d.dx[0] = d.back(OpKind::TanhBackward, {d.y, d.g}); }},
    // y = softmax(x) along the last axis: dx = y (g - sum(g y))
    {OpKind::Softmax, float_last_axis,
     [](const GradientCall& d) { d.dx[0] = d.back(OpKind::SoftmaxBackward, {d.y, d.g}); }},
    // y = x - logsumexp(x): dx = g - e^y sum(g)
    {OpKind::LogSoftmax, float_last_axis,
     [](const GradientCall& d) { d.dx[0] = d.back(OpKind::LogSoftmaxBackward, {d.y, d.g}); }},

    // dlogits = w (softmax(z) sum(t) - t) g / B; labels and weights take no gradient
    {OpKind::SoftmaxCrossEntropy, loss,
     [](const GradientCall& d) { logits_loss_gradient(d, OpKind::SoftmaxCrossEntropyBackward); }},
    // dpred = 2 w (p - t) g / (B N), dtarget = -dpred
    {OpKind::MseLoss, loss,
     [](const GradientCall& d) { regression_loss_gradient(d, OpKind::MseLossBackward); }},
    // dpred = w sign(p - t) g / (B N), dtarget = -dpred
    {OpKind::MaeLoss, loss,
     [](const GradientCall& d) { regression_loss_gradient(d, OpKind::MaeLossBackward); }},
    // dpred = w clip(p - t, -delta, delta) g / (B N), dtarget = -dpred
    {OpKind::HuberLoss, loss,
     [](const GradientCall& d) { regression_loss_gradient(d, OpKind::HuberLossBackward); }},
    // dlogits = w (sigmoid(z) - y) g / (B N); targets and weights take no gradient
    {OpKind::BinaryCrossEntropy, loss,
     [](const GradientCall& d) { logits_loss_gradient(d, OpKind::BinaryCrossEntropyBackward); }},

    // y = x mask / (1 - rate): dx = g mask / (1 - rate), the same key and counter giving the same
    // mask; the counter takes no gradient
    {OpKind::Dropout,
     [](OpKind op, Shapes s, DTypes t, const OpAttrs& a) -> OpSignature {
       expect_float(op, t, 0, "input");
       if (t[1] != DType::Int64)
         throw TypeError(std::string("dropout: the counter must be int64; got ") + dtype_name(t[1]));
       if (s[1] != Shape{1}) shape_fail(op, "the counter must be an int64 tensor {1}; got " + s[1].str());
       if (!(a.rate >= 0.0f && a.rate < 1.0f))
         throw ValueError("dropout: rate must be in [0, 1); got " + std::to_string(a.rate));
       return {s[0]};
     },
     [](const GradientCall& d) {
       if (!d.need(0)) return;
       d.dx[0] = d.b.apply(OpKind::Dropout, {d.g, d.x[1]}, d.at);
     }},

    // y = sum(x): dx = broadcast(g)
    {OpKind::Sum, float_to_scalar,
     [](const GradientCall& d) { d.dx[0] = d.b.broadcast_to(d.g, d.b.shape(d.x[0])); }},
    // y = sum(x) / n: dx = broadcast(g) / n
    {OpKind::Mean, float_to_scalar,
     [](const GradientCall& d) {
       d.dx[0] = d.b.scale(d.b.broadcast_to(d.g, d.b.shape(d.x[0])), 1.0f / float(d.b.shape(d.x[0]).numel()));
     }},
    // dx = broadcast(g) to x's shape
    {OpKind::SumTo,
     [](OpKind op, Shapes s, DTypes, const OpAttrs& a) -> OpSignature {
       if (!broadcasts_to(a.shape, s[0])) shape_fail(op, "cannot reduce " + s[0].str() + " to " + a.shape.str());
       return {a.shape};
     },
     [](const GradientCall& d) { d.dx[0] = d.b.broadcast_to(d.g, d.b.shape(d.x[0])); }},
    // dx = sum_to(g) over the broadcast axes
    {OpKind::BroadcastTo,
     [](OpKind op, Shapes s, DTypes, const OpAttrs& a) -> OpSignature {
       if (!broadcasts_to(s[0], a.shape)) shape_fail(op, "cannot broadcast " + s[0].str() + " to " + a.shape.str());
       return {a.shape};
     },
     [](const GradientCall& d) { d.dx[0] = d.b.sum_to(d.g, d.b.shape(d.x[0])); }},
    // dx = g viewed as x's shape
    {OpKind::Reshape,
     [](OpKind op, Shapes s, DTypes t, const OpAttrs& a) -> OpSignature {
       if (a.shape.numel() != s[0].numel())
         shape_fail(op, "cannot view " + s[0].str() + " (" + std::to_string(s[0].numel()) + " elements) as " +
                            a.shape.str() + " (" + std::to_string(a.shape.numel()) + ")");
       return {a.shape, t[0]};
     },
     [](const GradientCall& d) { d.dx[0] = d.b.reshape(d.g, d.b.shape(d.x[0])); }},
    // y = x^-1/2: dx = -g y^3 / 2
    {OpKind::Rsqrt, float_elementwise,
     [](const GradientCall& d) { d.dx[0] = d.back(OpKind::RsqrtBackward, {d.y, d.g}); }},
    // y = x Phi(x): dx = g (Phi(x) + x phi(x))
    {OpKind::Gelu, float_elementwise,
     [](const GradientCall& d) { d.dx[0] = d.b.apply(OpKind::GeluBackward, {d.x[0], d.g}, d.at); }},
    // y = x s, s = sigmoid(2u) = (1 + tanh u) / 2, u = sqrt(2 / pi) (x + 0.044715 x^3):
    // dx = g (s + x s (1 - s) 2 du/dx)
    {OpKind::GeluTanh, float_elementwise,
     [](const GradientCall& d) { d.dx[0] = d.b.apply(OpKind::GeluTanhBackward, {d.x[0], d.g}, d.at); }},
    // y = x sigmoid(x): dx = g s (1 + x (1 - s)), s = sigmoid(x)
    {OpKind::Silu, float_elementwise,
     [](const GradientCall& d) { d.dx[0] = d.b.apply(OpKind::SiluBackward, {d.x[0], d.g}, d.at); }},
    // y = x if x > 0 else alpha (e^x - 1): dx = g if x > 0 else g alpha e^x
    {OpKind::Elu, float_elementwise,
     [](const GradientCall& d) { d.dx[0] = d.b.apply(OpKind::EluBackward, {d.x[0], d.g}, d.at); }},
    // y = x if x > 0 else slope x: dx = g if x > 0 else g slope
    {OpKind::LeakyRelu, float_elementwise,
     [](const GradientCall& d) { d.dx[0] = d.b.apply(OpKind::LeakyReluBackward, {d.x[0], d.g}, d.at); }},
    // y = log(1 + e^x): dx = g sigmoid(x)
    {OpKind::Softplus, float_elementwise,
     [](const GradientCall& d) { d.dx[0] = d.b.apply(OpKind::SoftplusBackward, {d.x[0], d.g}, d.at); }},
    // y = sum(x, -1) / N: dx = broadcast(g) / N
    {OpKind::MeanLastAxis,
     [](OpKind op, Shapes s, DTypes t, const OpAttrs&) -> OpSignature {
       expect_float(op, t, 0, "input");
       if (s[0].rank() < 1) shape_fail(op, "needs at least one dimension; got a scalar");
       Shape out = s[0];
       out.set(-1, 1);
       return {out};
     },
     [](const GradientCall& d) {
       d.dx[0] = d.b.scale(d.b.broadcast_to(d.g, d.b.shape(d.x[0])), 1.0f / float(d.b.shape(d.x[0])[-1]));
     }},
    // dx = zeros of x's shape with g placed at the slice
    {OpKind::Slice,
     [](OpKind op, Shapes s, DTypes t, const OpAttrs& a) -> OpSignature {
       const int r = s[0].rank();
       if (a.axis < 0 || a.axis >= r) shape_fail(op, "axis " + std::to_string(a.axis) + " is outside " + s[0].str());
       if (a.start < 0 || a.length < 0 || a.start > s[0][a.axis] || a.length > s[0][a.axis] - a.start)
         shape_fail(op, std::to_string(a.length) + " entries from " + std::to_string(a.start) +
                            " are outside axis " + std::to_string(a.axis) + " of " + s[0].str());
       Shape out = s[0];
       out.set(a.axis, a.length);
       return {out, t[0]};
     },
     [](const GradientCall& d) {
       d.dx[0] = d.b.apply(OpKind::SliceBackward, {d.g}, with_shape(d.at, d.b.shape(d.x[0])));
     }},
    // y = [x0 x1 ...] along axis: dx_i = the slice of g at x_i's place
    {OpKind::Concat,
     [](OpKind op, Shapes s, DTypes t, const OpAttrs& a) -> OpSignature {
       auto all = [&] {
         std::string list;
         for (size_t i = 0; i < s.size(); ++i) list += (i ? ", " : "") + s[i].str();
         return list;
       };
       if (a.axis < 0 || a.axis >= s[0].rank())
         shape_fail(op, "cannot join " + all() + " along axis " + std::to_string(a.axis));
       Shape out = s[0];
       for (size_t j = 1; j < s.size(); ++j) {
         if (s[j].rank() != s[0].rank())
           shape_fail(op, "cannot join " + all() + " along axis " + std::to_string(a.axis) + ": ranks differ");
         for (int i = 0; i < s[0].rank(); ++i)
           if (i != a.axis && s[0][i] != s[j][i])
             shape_fail(op, s[0].str() + " and " + s[j].str() + " differ outside axis " + std::to_string(a.axis));
         if (t[j] != t[0])
           throw TypeError(std::string("concat: every input must have the same dtype; got ") + dtype_name(t[0]) +
                           " and " + dtype_name(t[j]));
         out.set(a.axis, out[a.axis] + s[j][a.axis]);
       }
       return {out, t[0]};
     },
     [](const GradientCall& d) {
       int64_t start = 0;
       for (size_t i = 0; i < d.x.size(); ++i) {
         const int64_t n = d.b.shape(d.x[i])[d.at.axis];
         if (d.need(i)) d.dx[i] = d.b.slice(d.g, d.at.axis, start, n);
         start += n;
       }
     }},
    // y = table[ids]: dtable = g's rows summed per id; ids take no gradient
    {OpKind::Gather,
     [](OpKind op, Shapes s, DTypes t, const OpAttrs&) -> OpSignature {
       expect_float(op, t, 0, "table");
       expect_rank(op, s[0], 2, "table");
       if (t[1] != DType::Int32) throw TypeError("gather: ids must be int32; got float32 (convert with to_index)");
       if (s[1].rank() + 1 > Shape::kMaxRank) shape_fail(op, "ids " + s[1].str() + " have too many dimensions");
       int64_t dims[Shape::kMaxRank];
       for (int i = 0; i < s[1].rank(); ++i) dims[i] = s[1][i];
       dims[s[1].rank()] = s[0][1];
       return {Shape(std::span<const int64_t>(dims, size_t(s[1].rank() + 1)))};
     },
     [](const GradientCall& d) {
       d.dx[0] = d.b.apply(OpKind::GatherBackward, {d.g, d.x[1]}, with_shape(d.at, d.b.shape(d.x[0])));
     }},
    // ids are not differentiable
    {OpKind::ToIndex,
     [](OpKind op, Shapes s, DTypes t, const OpAttrs&) -> OpSignature {
       expect_float(op, t, 0, "input");
       return {s[0], DType::Int32};
     },
     zero_gradient},
    // dx = g routed to each window's first maximum
    {OpKind::MaxPool2D, windowed,
     [](const GradientCall& d) { d.dx[0] = d.b.apply(OpKind::MaxPool2DBackward, {d.x[0], d.g}, d.at); }},
    // dx = g spread evenly over each window's unpadded pixels
    {OpKind::AvgPool2D, windowed,
     [](const GradientCall& d) {
       d.dx[0] = d.b.apply(OpKind::AvgPool2DBackward, {d.g}, with_shape(d.at, d.b.shape(d.x[0])));
     }},
    // y = conv(x, k): dx = conv^T(g, k), dk = filter gradient(x, g). Each of the
    // three ops is linear in both arguments, so the rules close over the three.
    // with kReluOutput, y = max(conv, 0): g masked by y > 0 first
    {OpKind::Conv2D, windowed,
     [](const GradientCall& d) {
       Builder& b = d.b;
       const Value g = d.at.flags & kReluOutput ? relu_gradient(b, d.y, d.g) : d.g;
       OpAttrs at = d.at;
       at.flags = 0;
       if (d.need(0)) d.dx[0] = b.apply(OpKind::Conv2DBackwardInput, {g, d.x[1]}, with_shape(at, b.shape(d.x[0])));
       if (d.need(1)) d.dx[1] = b.apply(OpKind::Conv2DBackwardFilter, {d.x[0], g}, with_shape(at, b.shape(d.x[1])));
       if (d.need(2)) d.dx[2] = b.sum_to(g, b.shape(d.x[2]));  // the bias: g summed over batch and pixels
     }},
    {OpKind::BatchNormStats, batch_stats, batch_stats_gradient},
    // The statistics a Conv2D wrote beside its output: BatchNormStats's rules.
    {OpKind::AttachedBatchStats, batch_stats, batch_stats_gradient},
    // y = xhat gamma + beta [+ residual], xhat = (x - mean) inv, inv = (var + eps)^-1/2:
    // dgamma = sum(g xhat), dbeta = sum(g), dx by BatchNormBackward, dresidual = g;
    // with given statistics dmean = -sum(g) gamma inv, dvar = -sum(g xhat) gamma inv^2 / 2.
    // With the batch's own statistics (attrs.own_stats) their gradient is inside dx.
    // With kReluOutput, y = max(that, 0): g masked by y > 0 first; without a
    // residual the two backward ops mask g themselves (kReluOutput, gamma and
    // beta as inputs: y > 0 exactly where the recomputed x a + b > 0), so
    // the masked gradient is never written out.
    {OpKind::BatchNorm, batch_norm_family,
     [](const GradientCall& d) {
       Builder& b = d.b;
       OpAttrs at = d.at;
       at.flags = 0;
       const bool residual = d.x.size() == 5;
       const bool mask_inside = (d.at.flags & kReluOutput) && !residual;
       const Value g = (d.at.flags & kReluOutput) && residual ? relu_gradient(b, d.y, d.g) : d.g;
       std::span<const Value> x = d.x;
       OpAttrs backward_at = at;
       if (mask_inside) backward_at.flags = kReluOutput;
       // With the mask inside, the backward ops also take gamma and beta (the last two, or the last one).
       const Value param_in[5] = {x[0], x[1], g, x[2], x[3]};
       Value sums = b.apply(OpKind::BatchNormParamGrad, std::span<const Value>(param_in, mask_inside ? 5 : 3),
                            backward_at);
       const int64_t c = b.shape(x[2])[0];
       const Value dx_in[6] = {x[0], x[1], x[2], g, sums, x[3]};
       if (d.need(0))
         d.dx[0] = b.apply(OpKind::BatchNormBackward, std::span<const Value>(dx_in, mask_inside ? 6 : 5), backward_at);
       if (d.need(2)) d.dx[2] = b.reshape(b.slice(sums, 0, 0, 1), Shape{c});
       if (d.need(3)) d.dx[3] = b.reshape(b.slice(sums, 0, 1, 1), Shape{c});
       if (residual && d.need(4)) d.dx[4] = g;
       if (d.need(1) && !at.own_stats) {
         Value var = b.reshape(b.slice(x[1], 0, 1, 1), Shape{c});
         Value inv = b.apply(OpKind::Rsqrt, {b.add(var, b.fill(Shape{}, at.eps))});
         Value k = b.mul(x[2], inv);
         Value d_mean = b.scale(b.mul(b.reshape(b.slice(sums, 0, 1, 1), Shape{c}), k), -1.0f);
         Value d_var = b.scale(b.mul(b.reshape(b.slice(sums, 0, 0, 1), Shape{c}), b.mul(k, inv)), -0.5f);
         OpAttrs cat;
         cat.axis = 0;
         d.dx[1] = b.apply(OpKind::Concat, {b.reshape(d_mean, Shape{1, c}), b.reshape(d_var, Shape{1, c})}, cat);
       }
     }},

    // y = a / b: da = sum_to(g / b), db = sum_to(-g y / b)
    {OpKind::Div, broadcast_binary,
     [](const GradientCall& d) {
       Builder& b = d.b;
       if (d.need(0)) d.dx[0] = b.sum_to(b.div(d.g, d.x[1]), b.shape(d.x[0]));
       if (d.need(1)) d.dx[1] = b.sum_to(b.scale(b.div(b.mul(d.g, d.y), d.x[1]), -1.0f), b.shape(d.x[1]));
     }},
    // y = e^x: dx = g y
    {OpKind::Exp, float_elementwise,
     [](const GradientCall& d) { d.dx[0] = d.b.mul(d.g, d.y); }},
    // y = log(x): dx = g / x
    {OpKind::Log, float_elementwise,
     [](const GradientCall& d) { d.dx[0] = d.b.div(d.g, d.x[0]); }},
    // y = sqrt(x): dx = g / (2 y)
    {OpKind::Sqrt, float_elementwise,
     [](const GradientCall& d) { d.dx[0] = d.b.div(d.b.scale(d.g, 0.5f), d.y); }},
    // y = erf(x): dx = g 2 / sqrt(pi) e^(-x^2), one pass over x and g
    {OpKind::Erf, float_elementwise,
     [](const GradientCall& d) { d.dx[0] = d.b.apply(OpKind::ErfBackward, {d.x[0], d.g}, d.at); }},
    // y = x^p: dx = g p x^(p-1); p = 0: dx = 0 (as torch.pow, not 0 x^-1)
    {OpKind::Pow, float_elementwise,
     [](const GradientCall& d) {
       Builder& b = d.b;
       const float p = d.at.exponent;
       d.dx[0] = p == 0.0f ? b.fill(b.shape(d.x[0]), 0.0f) : b.mul(d.g, b.scale(b.pow(d.x[0], p - 1.0f), p));
     }},
    // y = min(max(x, lo), hi): dx = g where lo <= x <= hi, else 0 (PyTorch's rule: g passes at the bounds)
    {OpKind::Clamp,
     [](OpKind op, Shapes s, DTypes t, const OpAttrs& a) -> OpSignature {
       expect_float(op, t, 0, "input");
       check_clamp_bounds(op, a);
       return {s[0]};
     },
     [](const GradientCall& d) { d.dx[0] = d.b.apply(OpKind::ClampBackward, {d.x[0], d.g}, d.at); }},
    // y = sum(x, axis): dx = broadcast(g with the axis kept as 1)
    {OpKind::SumAxis, reduce_axis,
     [](const GradientCall& d) { d.dx[0] = broadcast_along_axis(d); }},
    // y = sum(x, axis) / n: dx = broadcast(g with the axis kept as 1) / n
    {OpKind::MeanAxis, reduce_axis,
     [](const GradientCall& d) {
       d.dx[0] = d.b.scale(broadcast_along_axis(d), 1.0f / float(d.b.shape(d.x[0])[d.at.axis]));
     }},
    // y = max(x, axis): dx = g at the first maximal element of each slice, 0 elsewhere
    {OpKind::MaxAxis, reduce_axis,
     [](const GradientCall& d) { d.dx[0] = d.b.apply(OpKind::MaxAxisBackward, {d.x[0], d.g}, d.at); }},
    // y = x with two axes swapped: dx = g with the same two axes swapped
    {OpKind::Transpose,
     [](OpKind op, Shapes s, DTypes t, const OpAttrs& a) -> OpSignature {
       const int r = s[0].rank();
       if (r < 2)
         shape_fail(op, "input must have rank 2 to " + std::to_string(Shape::kMaxRank) + "; got " + s[0].str());
       if (a.axis < 0 || a.axis >= r || a.axis2 < 0 || a.axis2 >= r)
         shape_fail(op, "axes " + std::to_string(a.axis) + " and " + std::to_string(a.axis2) + " must be in [0, " +
                            std::to_string(r) + ") for " + s[0].str());
       Shape out = s[0];
       out.set(a.axis, s[0][a.axis2]);
       out.set(a.axis2, s[0][a.axis]);
       return {out, t[0]};
     },
     [](const GradientCall& d) { d.dx[0] = d.b.transpose(d.g, d.at.axis, d.at.axis2); }},
    // z_t = xw_t + h_{t-1} U (+ rb for the GRU's hn): LstmSequenceBackward gives
    // dz, the gradient of every step's pre-activations, through time; then
    // dxw = dz, dU = sum_t h_{t-1}^T dz_t (one matmul over every step). With
    // initial states, its step T holds dh0 and dc0.
    {OpKind::LstmSequence, recurrent_sequence,
     [](const GradientCall& d) {
       Builder& b = d.b;
       const bool states = d.x.size() == 4;
       const Value all = states ? b.apply(OpKind::LstmSequenceBackward, {d.y, d.x[1], d.g, d.x[3]})
                                : b.apply(OpKind::LstmSequenceBackward, {d.y, d.x[1], d.g});
       const Shape s = b.shape(d.y);
       const int64_t h = b.shape(d.x[1])[0];
       const Value dz = states ? b.slice(all, 1, 0, s[1]) : all;
       if (d.need(0)) d.dx[0] = dz;
       if (d.need(1))
         d.dx[1] = b.matmul(previous_states(b, d.y, h, states ? d.x[2] : Value{}),
                            b.reshape(dz, Shape{s[0] * s[1], 4 * h}), true, false);
       if (d.need(2)) d.dx[2] = initial_state_gradient(b, all, 0, h);
       if (d.need(3)) d.dx[3] = initial_state_gradient(b, all, 1, h);
     }},
    // GruSequenceBackward gives [dz | dr | dn | dhn] per step: dxw = [dz | dr | dn];
    // the recurrent product h U + rb gets [dz | dr | dhn], so dU = sum_t h_{t-1}^T
    // [dz | dr | dhn]_t and drb = its sum over rows and steps. With h0, its
    // step T holds dh0.
    {OpKind::GruSequence, recurrent_sequence,
     [](const GradientCall& d) {
       Builder& b = d.b;
       const bool state = d.x.size() == 4;
       const Value with_state = state ? b.apply(OpKind::GruSequenceBackward, {d.y, d.x[1], d.g, d.x[3]})
                                      : b.apply(OpKind::GruSequenceBackward, {d.y, d.x[1], d.g});
       const Shape s = b.shape(d.y);
       const int64_t h = b.shape(d.x[1])[0];
       const Value all = state ? b.slice(with_state, 1, 0, s[1]) : with_state;
       if (d.need(0)) d.dx[0] = b.slice(all, 2, 0, 3 * h);
       if (d.need(3)) d.dx[3] = initial_state_gradient(b, with_state, 0, h);
       if (!d.need(1) && !d.need(2)) return;
       Value dhu = b.reshape(b.concat(b.slice(all, 2, 0, 2 * h), b.slice(all, 2, 3 * h, h), 2),
                             Shape{s[0] * s[1], 3 * h});
       if (d.need(1)) d.dx[1] = b.matmul(previous_states(b, d.y, h, state ? d.x[3] : Value{}), dhu, true, false);
       if (d.need(2)) d.dx[2] = b.sum_to(dhu, Shape{3 * h});
     }},
    // One backward op gives [dq | dk | dv] per key-value row (dk, dv summed over its query rows); the mask and
    // the counter take none.
    {OpKind::Attention, attention,
     [](const GradientCall& d) {
       Builder& b = d.b;
       std::vector<Value> in{d.x[0], d.x[1], d.x[2], d.y, d.g};
       for (size_t i = 3; i < d.x.size(); ++i) in.push_back(d.x[i]);
       const Value all = b.apply(OpKind::AttentionBackward, in, d.at);
       const Shape q = b.shape(d.x[0]), k = b.shape(d.x[1]), v = b.shape(d.x[2]);
       // per key-value row: the G = N / Nkv query rows that read it, then its own dk and dv
       const int64_t sizes[3] = {q[0] / k[0] * q[1] * q[2], k[1] * k[2], v[1] * v[2]};
       const Shape shapes[3] = {q, k, v};
       int64_t start = 0;
       for (int i = 0; i < 3; ++i) {
         if (d.need(size_t(i))) d.dx[size_t(i)] = b.reshape(b.slice(all, 1, start, sizes[i]), shapes[i]);
         start += sizes[i];
       }
     }},
    // y = x r w, r = 1 / sqrt(mean(x^2) + eps): dx by RmsNormBackward; dw = sum over rows of g x r (the
    // unweighted normalization, recomputed by the fused op)
    {OpKind::RmsNorm, rms_norm_family,
     [](const GradientCall& d) {
       Builder& b = d.b;
       if (d.need(0)) d.dx[0] = d.x.size() == 2 ? b.apply(OpKind::RmsNormBackward, {d.x[0], d.g, d.x[1]}, d.at)
                                                : b.apply(OpKind::RmsNormBackward, {d.x[0], d.g}, d.at);
       if (d.need(1)) d.dx[1] = b.sum_to(b.mul(d.g, b.rms_norm(d.x[0], d.at.eps)), b.shape(d.x[1]));
     }},
    // y = R(p) x, a rotation per pair: dx = R(p)^T g = R(-p) g (kRopeInverse toggled); positions take none
    {OpKind::Rope, rope,
     [](const GradientCall& d) {
       if (!d.need(0)) return;
       OpAttrs at = d.at;
       at.flags ^= kRopeInverse;
       d.dx[0] = d.b.apply(OpKind::Rope, {d.g, d.x[1]}, at);
     }},

    // Backward ops. Gradients of gradients exist only where a rule is given
    // (slicing, the convolution adjoints); the rest throw.
    {OpKind::ReluBackward, output_and_gradient, no_gradient},
    {OpKind::SigmoidBackward, output_and_gradient, no_gradient},
    {OpKind::TanhBackward, output_and_gradient, no_gradient},
    {OpKind::SoftmaxBackward, output_and_gradient, no_gradient},
    {OpKind::LogSoftmaxBackward, output_and_gradient, no_gradient},
    {OpKind::SoftmaxCrossEntropyBackward, loss_backward, no_gradient},
    {OpKind::MseLossBackward, loss_backward, no_gradient},
    {OpKind::MaeLossBackward, loss_backward, no_gradient},
    {OpKind::HuberLossBackward, loss_backward, no_gradient},
    {OpKind::BinaryCrossEntropyBackward, loss_backward, no_gradient},
    {OpKind::RsqrtBackward, input_and_gradient, no_gradient},
    {OpKind::GeluBackward, input_and_gradient, no_gradient},
    {OpKind::GeluTanhBackward, input_and_gradient, no_gradient},
    {OpKind::SiluBackward, input_and_gradient, no_gradient},
    {OpKind::EluBackward, input_and_gradient, no_gradient},
    {OpKind::LeakyReluBackward, input_and_gradient, no_gradient},
    {OpKind::SoftplusBackward, input_and_gradient, no_gradient},
    {OpKind::ErfBackward, input_and_gradient, no_gradient},
    // linear in g: dg = slice(gy)
    {OpKind::SliceBackward, attrs_shape,
     [](const GradientCall& d) { d.dx[0] = d.b.slice(d.g, d.at.axis, d.at.start, d.at.length); }},
    {OpKind::GatherBackward, attrs_shape, no_gradient},
    {OpKind::MaxPool2DBackward,
     [](OpKind, Shapes s, DTypes, const OpAttrs&) -> OpSignature { return {s[0]}; }, no_gradient},
    {OpKind::AvgPool2DBackward,
     [](OpKind op, Shapes s, DTypes t, const OpAttrs& a) -> OpSignature {
       const bool masked = (a.flags & kMaskNonPositive) != 0;
       if (masked != (s.size() == 2))
         shape_fail(op, masked ? "the kMaskNonPositive flag needs the ReLU output that masks dx as the second input"
                               : "a second input (the ReLU output that masks dx) needs the kMaskNonPositive flag");
       if (masked) {
         expect_float(op, t, 1, "mask");
         if (s[1] != a.shape) {
           std::string message = "the ReLU output that masks dx must be the result's shape ";
           message.append(a.shape.str()).append("; got ").append(s[1].str());
           shape_fail(op, message);
         }
       }
       return {a.shape};
     },
     no_gradient},
    // y = conv^T(gy, k): dgy = conv(g, k), dk = filter gradient(g, gy)
    // with a third input, y = conv^T(gy, k) + addend: daddend = g
    // with kMaskNonPositive, y = that where r > 0 (r the last input): g
    // masked by r > 0 first; r's gradient is zero (a mask)
    {OpKind::Conv2DBackwardInput, conv2d_backward,
     [](const GradientCall& d) {
       Builder& b = d.b;
       const bool masked = (d.at.flags & kMaskNonPositive) != 0;
       const Value g = masked ? b.apply(OpKind::ReluBackward, {d.x.back(), d.g}) : d.g;
       OpAttrs at = d.at;
       at.flags = 0;
       if (d.need(0)) d.dx[0] = b.apply(OpKind::Conv2D, {g, d.x[1]}, at);
       if (d.need(1))
         d.dx[1] = b.apply(OpKind::Conv2DBackwardFilter, {g, d.x[0]}, with_shape(at, b.shape(d.x[1])));
       if (d.x.size() == (masked ? 4u : 3u) && d.need(2)) d.dx[2] = g;
     }},
    // y = filter gradient(x, gy): dx = conv^T(gy, g), dgy = conv(x, g)
    {OpKind::Conv2DBackwardFilter, conv2d_backward,
     [](const GradientCall& d) {
       Builder& b = d.b;
       if (d.need(0))
         d.dx[0] = b.apply(OpKind::Conv2DBackwardInput, {d.x[1], d.g}, with_shape(d.at, b.shape(d.x[0])));
       if (d.need(1)) d.dx[1] = b.apply(OpKind::Conv2D, {d.x[0], d.g}, d.at);
     }},
    {OpKind::BatchNormParamGrad, batch_norm_family, no_gradient},
    {OpKind::BatchNormBackward, batch_norm_family, no_gradient},
    {OpKind::ClampBackward,
     [](OpKind op, Shapes s, DTypes t, const OpAttrs& a) -> OpSignature {
       check_clamp_bounds(op, a);
       return input_and_gradient(op, s, t, a);
     },
     no_gradient},
    {OpKind::MaxAxisBackward,
     [](OpKind op, Shapes s, DTypes, const OpAttrs& a) -> OpSignature {
       const Shape want = reduced_shape(op, s[0], a);
       if (s[1] != want)
         shape_fail(op, "gradient must be " + want.str() + " for input " + s[0].str() + "; got " + s[1].str());
       return {s[0]};
     },
     no_gradient},
    {OpKind::LstmSequenceBackward, recurrent_sequence, no_gradient},
    {OpKind::GruSequenceBackward, recurrent_sequence, no_gradient},
    {OpKind::AttentionBackward, attention, no_gradient},
    {OpKind::RmsNormBackward, rms_norm_family, no_gradient},

    // Metrics: counts, never differentiated.
    {OpKind::Accuracy,
     [](OpKind op, Shapes s, DTypes, const OpAttrs&) -> OpSignature {
       expect_rank(op, s[0], 2, "predictions");
       if (s[1].rank() == 2 ? s[1] != s[0] : s[1].rank() != 1 || s[1][0] != s[0][0])
         shape_fail(op, "labels " + s[1].str() + " do not fit predictions " + s[0].str());
       return {Shape{}};
     },
     no_gradient},
    {OpKind::BinaryAccuracy,
     [](OpKind op, Shapes s, DTypes t, const OpAttrs&) -> OpSignature {
       expect_float(op, t, 0, "predictions");
       expect_float(op, t, 1, "targets");
       expect_rank(op, s[0], 2, "predictions");
       if (s[1] != s[0]) shape_fail(op, "targets " + s[1].str() + " must match predictions " + s[0].str());
       return {Shape{}};
     },
     no_gradient},
    {OpKind::TopKAccuracy,
     [](OpKind op, Shapes s, DTypes t, const OpAttrs& a) -> OpSignature {
       expect_float(op, t, 0, "scores");
       expect_rank(op, s[0], 2, "scores");
       check_labels(op, s[0], s[1], t[1]);
       if (a.k < 1) throw ValueError("top_k_accuracy: k (attrs.k) must be >= 1; got " + std::to_string(a.k));
       return {Shape{}};
     },
     no_gradient},

    // Optimizer and clipping ops: in-place updates of persistent state, never differentiated.
    {OpKind::AccumulateGrad,
     [](OpKind op, Shapes s, DTypes t, const OpAttrs& a) -> OpSignature {
       if (s.size() == 3) {
         if (s[1].rank() != 2 || s[2].rank() != 2)
           shape_fail(op, "the product form takes matrices A and B of rank 2; got " + s[1].str() + " and " + s[2].str());
         const Shape product = infer_signature(OpKind::MatMul, s.subspan(1), t.subspan(1), a).shape;
         if (s[0] != product)
           shape_fail(op, "accumulator " + s[0].str() + " and the product's shape " + product.str() + " differ");
         return {s[0]};
       }
       if (s[0] != s[1]) shape_fail(op, "accumulator " + s[0].str() + " and gradient " + s[1].str() + " differ");
       return {s[0]};
     },
     no_gradient},
    {OpKind::OptimizerTick,
     [](OpKind op, Shapes s, DTypes t, const OpAttrs& a) -> OpSignature {
       if (s[0] != Shape{kHyperSize})
         shape_fail(op, "hyper-parameter tensor must be {" + std::to_string(kHyperSize) + "}");
       if (s[1] != Shape{1} || t[1] != DType::Int64) shape_fail(op, "the step counter must be an int64 tensor {1}");
       check_schedule(op, s, t, a.flags);
       return {s[0]};
     },
     no_gradient},
    {OpKind::AdamWUpdate, optimizer_update, no_gradient},
    {OpKind::SgdUpdate, optimizer_update, no_gradient},
    {OpKind::RmspropUpdate, optimizer_update, no_gradient},
    {OpKind::AdagradUpdate, optimizer_update, no_gradient},
    {OpKind::ClipValue,
     [](OpKind op, Shapes s, DTypes t, const OpAttrs&) -> OpSignature {
       expect_float(op, t, 0, "the gradient");
       return {s[0]};
     },
     no_gradient},
    {OpKind::SquaredNorm,
     [](OpKind op, Shapes s, DTypes t, const OpAttrs&) -> OpSignature {
       expect_float(op, t, 0, "x");
       if (s.size() == 2) {
         expect_float(op, t, 1, "the running squared norm");
         if (s[1] != Shape{2}) shape_fail(op, "the running squared norm must be {2} (SquaredNorm's); got " + s[1].str());
       }
       return {Shape{2}};
     },
     no_gradient},
    {OpKind::ClipNorm,
     [](OpKind op, Shapes s, DTypes t, const OpAttrs&) -> OpSignature {
       expect_float(op, t, 0, "the gradient");
       expect_float(op, t, 1, "the squared norm");
       if (s[1] != Shape{2}) shape_fail(op, "the squared norm must be {2} (SquaredNorm's); got " + s[1].str());
       return {s[0]};
     },
     no_gradient},
    {OpKind::MovingAverage,
     [](OpKind op, Shapes s, DTypes, const OpAttrs&) -> OpSignature {
       if (s[0] != s[1]) shape_fail(op, "state " + s[0].str() + " and value " + s[1].str() + " differ");
       return {s[0]};
     },
     no_gradient},
    {OpKind::AdvanceCounter,
     [](OpKind op, Shapes s, DTypes t, const OpAttrs&) -> OpSignature {
       if (s[0] != Shape{1} || t[0] != DType::Int64) shape_fail(op, "the counter must be an int64 tensor {1}");
       return {s[0], DType::Int64};
     },
     no_gradient},
    // Copies between persistent tensors (target networks): in place, never differentiated.
    {OpKind::PolyakUpdate,
     [](OpKind op, Shapes s, DTypes t, const OpAttrs&) -> OpSignature {
       expect_float(op, t, 0, "the target");
       expect_float(op, t, 1, "the source");
       expect_float(op, t, 2, "tau");
       if (s[0] != s[1]) shape_fail(op, "target " + s[0].str() + " and source " + s[1].str() + " differ");
       if (s[2].rank() > 1 || s[2].numel() != 1) shape_fail(op, "tau must be a float32 tensor {} or {1}; got " + s[2].str());
       return {s[0]};
     },
     no_gradient},
    {OpKind::Assign,
     [](OpKind op, Shapes s, DTypes t, const OpAttrs&) -> OpSignature {
       if (s[0] != s[1]) shape_fail(op, "target " + s[0].str() + " and source " + s[1].str() + " differ");
       if (t[0] != t[1])
         throw TypeError(std::string("assign: the source must have the target's dtype ") + dtype_name(t[0]) +
                         "; got " + dtype_name(t[1]) + ". Convert it first");
       return {s[0], t[0]};
     },
     no_gradient},
});
static_assert(indexed_by_op_kind(kOps), "kOps must list every OpKind once, in enum order");
static_assert(
    [] {
      for (const OpInfo& info : kInfos)
        if (info.max_inputs > kMaxOpInputs) return false;
      return true;
    }(),
    "an op takes more than kMaxOpInputs inputs: raise it, and the graph's Node::kMaxInputs with it");

}  // namespace

// The public lookups. `at` keeps an out-of-range OpKind (Count) a thrown
// std::out_of_range, as before the table.

const OpInfo& op_info(OpKind op) { return kInfos.at(size_t(op)); }

OpAttrs op_param_attrs(OpKind op, float value) {
  OpAttrs at;
  const OpInfo& info = op_info(op);
  if (info.param)
    at.*info.param = value;
  else if (value != 0.0f)
    throw ValueError(std::string(info.name) + " takes no float parameter; got " + std::to_string(value));
  return at;
}

OpSignature infer_signature(OpKind op, Shapes s, DTypes t, const OpAttrs& a) {
  const OpInfo& info = op_info(op);
  if (int(s.size()) < info.min_inputs || int(s.size()) > info.max_inputs)
    shape_fail(op, "expected " + std::to_string(info.min_inputs) + ".." + std::to_string(info.max_inputs) +
                       " inputs; got " + std::to_string(s.size()));
  return kOps[size_t(op)].shape(op, s, t, a);
}

double op_flops(OpKind op, const OpAttrs& at, Shapes in, const Shape& out) {
  const double products = kFlopRules.at(size_t(op))(op, at, in, out);
  return products > 0.0 ? products : double(out.numel());
}

void gradient_rule(Builder& b, OpKind op, const OpAttrs& at, std::span<const Value> x, Value y, Value g,
                   std::span<const bool> needs, std::span<Value> dx) {
  kOps.at(size_t(op)).gradient(GradientCall{b, op, at, x, y, g, needs, dx});
}

}  // namespace tensorgrad
