// The loss and metric ops behind Keras' losses and metrics: Maximum, Minimum
// (and the GreaterEqual mask of their gradients), MaskedFill (and
// Builder::where over it), MaeLoss, HuberLoss,
// BinaryCrossEntropy, BinaryAccuracy, TopKAccuracy.
//
// Every op runs through the static path (Graph -> Graph::gradients ->
// Executable::run) and is checked against references written here in double:
//  * forward values, with no weights, weights {B} and weights {B, N};
//  * gradients against central finite differences (step h = 1e-2 on O(1)
//    inputs kept at least 0.1 = 10 h away from every kink, tolerance
//    1e-3 + 1e-2 * |numeric|, as tests/ops/test_gradients.cpp argues,
//    by tests/support/gradient_check.h), and against
//    the closed forms exactly where the rule is piecewise (ties of Maximum and
//    Minimum, MAE at pred == target, Huber on both sides of delta);
//  * binary cross-entropy at logits of +-1e4 and +-1e30 against the closed form;
//  * metrics on hand-made inputs, ties included;
//  * shape, dtype and value errors naming the op.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gradient_check.h"
#include "tensorgrad/backend/executable.h"
#include "tensorgrad/graph/graph.h"
#include "test_support.h"

using namespace tensorgrad;

namespace {

using test_support::throws;
using test_support::uniform;

// A graph with its bound data, run once or checked by finite differences
// (test_support::GradCheck with parameters named p0, p1, ... and data x0, ...).
struct OpTest : test_support::GradCheck {
  explicit OpTest(uint32_t seed = 1) : GradCheck(seed) {}

  // A trainable parameter: differentiated, and perturbed for finite differences.
  Value param(const Tensor& t) { return GradCheck::param(t, "p" + std::to_string(params())); }
  // Fixed data bound for every run.
  Value input(const Tensor& t) { return data(t, "x" + std::to_string(binds())); }

  // Runs the graph once; the values of `outputs`.
  std::vector<std::vector<float>> eval(std::vector<Value> outputs) {
    Executable exe(std::move(g), outputs);
    bind_data(exe);
    exe.run();
    std::vector<std::vector<float>> out;
    for (Value v : outputs) out.push_back(exe.output(v).to_vector());
    return out;
  }

  // d(loss)/d(every parameter) from the gradient rules, checked element by
  // element against (L(x + h) - L(x - h)) / (2 h) within 1e-3 + 1e-2 |numeric|,
  // and the numeric gradient of every parameter above 1e-2 somewhere. Returns
  // the analytic gradients.
  std::vector<std::vector<float>> check_gradients(Value loss, float h = 1e-2f) {
    test_support::CheckOptions opt;
    opt.step = h, opt.atol = 1e-3, opt.rtol = 1e-2, opt.min_grad = 1e-2;
    const test_support::CheckResult r = check(loss, opt);
    EXPECT_TRUE(r.ok) << r.message;
    for (size_t i = 0; i < r.numeric.size(); ++i) {
      double largest = 0;
      for (float numeric : r.numeric[i]) largest = std::max(largest, std::fabs(double(numeric)));
      EXPECT_GT(largest, 1e-2) << "parameter " << i << ": gradient ~0 everywhere, the check would be vacuous";
    }
    return r.analytic;
  }
};

Tensor tensor(std::vector<float> v, const Shape& s) { return Tensor::from_vector(v, s); }
Tensor ids(std::vector<int32_t> v) {
  const int64_t n = int64_t(v.size());
  return Tensor::from_vector(std::span<const int32_t>(v), Shape{n});
}

// Flat index into `in` of element k of `out`, `in` broadcast to `out` (NumPy rules).
int64_t broadcast_index(const Shape& in, const Shape& out, int64_t k) {
  int64_t index = 0, stride = 1;
  for (int d = out.rank() - 1; d >= 0; --d) {
    const int64_t coord = k % out[d];
    k /= out[d];
    const int di = d - (out.rank() - in.rank());
    if (di < 0) continue;
    if (in[di] != 1) index += coord * stride;
    stride *= in[di];
  }
  return index;
}

// ---------------------------------------------------------------------------
// Maximum and Minimum.

struct BroadcastCase {
  Shape a, b;
};
const std::vector<BroadcastCase> kBroadcastCases = {
    {{2, 3}, {2, 3}}, {{2, 3}, {3}}, {{3}, {2, 3}}, {{2, 3}, {2, 1}},       {{2, 1}, {2, 3}},
    {{2, 1}, {1, 3}}, {{2, 3}, {}},  {{}, {2, 3}},  {{2, 2, 3}, {2, 1, 3}},
};

// Forward against max/min element by element, with the output shape NumPy gives.
TEST(MaxMinOps, ForwardBroadcasts) {
  for (OpKind op : {OpKind::Maximum, OpKind::Minimum})
    for (const BroadcastCase& c : kBroadcastCases) {
      SCOPED_TRACE(std::string(op_info(op).name) + " " + c.a.str() + " " + c.b.str());
      OpTest t(3);
      Tensor at = uniform(c.a, t.rng, -2.0f, 2.0f), bt = uniform(c.b, t.rng, -2.0f, 2.0f);
      Value y = op == OpKind::Maximum ? t.g.maximum(t.input(at), t.input(bt)) : t.g.minimum(t.input(at), t.input(bt));
      const Shape out = t.g.shape(y);
      ASSERT_EQ(out, broadcast_shapes(c.a, c.b, "test"));
      const std::vector<float> got = t.eval({y})[0], av = at.to_vector(), bv = bt.to_vector();
      ASSERT_EQ(int64_t(got.size()), out.numel());
      for (int64_t k = 0; k < out.numel(); ++k) {
        const float x = av[size_t(broadcast_index(c.a, out, k))], z = bv[size_t(broadcast_index(c.b, out, k))];
        EXPECT_EQ(got[size_t(k)], op == OpKind::Maximum ? std::max(x, z) : std::min(x, z)) << "element " << k;
      }
    }
}

TEST(MaxMinOps, NanPropagates) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  OpTest t;
  Value a = t.input(tensor({nan, 1.0f, nan}, {3})), b = t.input(tensor({1.0f, nan, nan}, {3}));
  auto out = t.eval({t.g.maximum(a, b), t.g.minimum(a, b)});
  for (const auto& v : out)
    for (size_t k = 0; k < 3; ++k) EXPECT_TRUE(std::isnan(v[k])) << "element " << k;
}

// Gradients against finite differences, inputs at least 0.1 apart in every
// broadcast pair (no step crosses a tie), both branches taken.
TEST(MaxMinOps, GradientsMatchFiniteDifferences) {
  for (OpKind op : {OpKind::Maximum, OpKind::Minimum})
    for (const BroadcastCase& c : kBroadcastCases) {
      SCOPED_TRACE(std::string(op_info(op).name) + " " + c.a.str() + " " + c.b.str());
      OpTest t(11);
      const Shape out = broadcast_shapes(c.a, c.b, "test");
      Tensor at, bt;
      int a_wins = 0;
      bool apart = false;
      for (int attempt = 0; attempt < 1000 && !apart; ++attempt) {
        at = uniform(c.a, t.rng, -1.5f, 1.5f);
        bt = uniform(c.b, t.rng, -1.5f, 1.5f);
        const std::vector<float> av = at.to_vector(), bv = bt.to_vector();
        apart = true;
        a_wins = 0;
        for (int64_t k = 0; k < out.numel(); ++k) {
          const float x = av[size_t(broadcast_index(c.a, out, k))], z = bv[size_t(broadcast_index(c.b, out, k))];
          apart = apart && std::fabs(x - z) >= 0.1f;
          a_wins += x > z;
        }
        apart = apart && a_wins > 0 && a_wins < out.numel();
      }
      ASSERT_TRUE(apart) << "no inputs away from ties found";
      Value a = t.param(at), b = t.param(bt);
      Value y = t.g.apply(op, {a, b});
      t.check_gradients(t.project(y));
    }
}

// The tie rule exactly: the gradient goes to a where a >= b (Maximum) or
// a <= b (Minimum), to b elsewhere, each summed back to its own shape.
TEST(MaxMinOps, TiesGoToTheFirstInput) {
  const Tensor a_val = tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor up = tensor({0.5f, 0.25f, 1, 2, 4, 8}, {2, 3});  // exact binary fractions: the sums are exact
  struct Case {
    OpKind op;
    Tensor b;
    std::vector<float> y, da, db;
  };
  const std::vector<Case> cases = {
      // b {3} = (1, 5, 4): ties at (0,0) and (1,1)
      {OpKind::Maximum, tensor({1, 5, 4}, {3}), {1, 5, 4, 4, 5, 6}, {0.5f, 0, 0, 2, 4, 8}, {0, 0.25f, 1}},
      {OpKind::Minimum, tensor({1, 5, 4}, {3}), {1, 2, 3, 1, 5, 4}, {0.5f, 0.25f, 1, 0, 4, 0}, {2, 0, 8}},
      // b {2,1} = (2, 5): ties at (0,1) and (1,1)
      {OpKind::Maximum, tensor({2, 5}, {2, 1}), {2, 2, 3, 5, 5, 6}, {0, 0.25f, 1, 0, 4, 8}, {0.5f, 2}},
      {OpKind::Minimum, tensor({2, 5}, {2, 1}), {1, 2, 2, 4, 5, 5}, {0.5f, 0.25f, 0, 2, 4, 0}, {1, 8}},
      // same shape, every element tied: all of the gradient to a
      {OpKind::Maximum, a_val.clone(), {1, 2, 3, 4, 5, 6}, {0.5f, 0.25f, 1, 2, 4, 8}, {0, 0, 0, 0, 0, 0}},
      {OpKind::Minimum, a_val.clone(), {1, 2, 3, 4, 5, 6}, {0.5f, 0.25f, 1, 2, 4, 8}, {0, 0, 0, 0, 0, 0}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(op_info(c.op).name) + " with b " + c.b.shape().str());
    OpTest t;
    Value a = t.param(a_val.clone()), b = t.param(c.b.clone());
    Value y = t.g.apply(c.op, {a, b});
    Value loss = t.g.sum(t.g.mul(y, t.input(up)));
    std::vector<Value> wrt{a, b};
    std::vector<Value> d = t.g.gradients(loss, wrt);
    auto out = t.eval({y, d[0], d[1]});
    EXPECT_EQ(out[0], c.y);
    EXPECT_EQ(out[1], c.da);
    EXPECT_EQ(out[2], c.db);
  }
}

TEST(MaxMinOps, GreaterEqualMask) {
  OpTest t;
  Value a = t.input(tensor({1, 2, 3, 4, 5, 6}, {2, 3})), b = t.input(tensor({1, 5, 4}, {3}));
  Value m = t.g.apply(OpKind::GreaterEqual, {a, b});
  ASSERT_EQ(t.g.shape(m), (Shape{2, 3}));
  EXPECT_EQ(t.eval({m})[0], (std::vector<float>{1, 0, 0, 1, 1, 1}));
}

// ---------------------------------------------------------------------------
// MaskedFill and Builder::where (torch.masked_fill, torch.where with a float mask).

// A 0/1 mask of shape s with both values present where s has two elements or
// more; a one-element mask is 0 (so a gradient passes).
Tensor random_mask(const Shape& s, std::mt19937& rng) {
  std::vector<float> v(size_t(s.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = float((rng() >> 7) & 1);
  v[0] = 0;
  if (v.size() >= 2) v[1] = 1;
  return tensor(v, s);
}

TEST(MaskedFillOp, ForwardBroadcastsAndReplacesWhateverIsMasked) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (const BroadcastCase& c : kBroadcastCases) {
    SCOPED_TRACE("x " + c.a.str() + " mask " + c.b.str());
    OpTest t(5);
    Tensor xt = uniform(c.a, t.rng, -2.0f, 2.0f), mt = random_mask(c.b, t.rng);
    if (xt.numel() >= 2) xt.data<float>()[0] = inf, xt.data<float>()[1] = nan;
    const Value y = t.g.masked_fill(t.input(xt), t.input(mt), -inf);
    const Shape out = t.g.shape(y);
    ASSERT_EQ(out, broadcast_shapes(c.a, c.b, "test"));
    const std::vector<float> got = t.eval({y})[0], xv = xt.to_vector(), mv = mt.to_vector();
    for (int64_t k = 0; k < out.numel(); ++k) {
      const float x = xv[size_t(broadcast_index(c.a, out, k))], m = mv[size_t(broadcast_index(c.b, out, k))];
      if (m != 0.0f)
        EXPECT_EQ(got[size_t(k)], -inf) << "element " << k;
      else if (std::isnan(x))
        EXPECT_TRUE(std::isnan(got[size_t(k)])) << "element " << k;
      else
        EXPECT_EQ(got[size_t(k)], x) << "element " << k;
    }
  }
}

TEST(MaskedFillOp, GradientsMatchFiniteDifferences) {
  for (const BroadcastCase& c : kBroadcastCases) {
    SCOPED_TRACE("x " + c.a.str() + " mask " + c.b.str());
    OpTest t(13);
    Value x = t.param(uniform(c.a, t.rng, -1.0f, 1.0f));
    Value y = t.g.masked_fill(x, t.input(random_mask(c.b, t.rng)), 3.0f);
    t.check_gradients(t.project(y));
  }
}

// where(c, a, b) exactly, gradients included: an infinity and a NaN in the
// branch not taken reach neither the value nor the gradients.
TEST(MaskedFillOp, WhereTakesEachElementFromOneBranchOnly) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  OpTest t;
  const Tensor up = tensor({0.5f, 0.25f, 1, 2, 4, 8}, {2, 3});
  Value c = t.input(tensor({1, 0, 1}, {3}));
  Value a = t.param(tensor({1, inf, 3, 4, nan, 6}, {2, 3})), b = t.param(tensor({-1, -inf}, {2, 1}));
  Value y = t.g.where(c, a, b);
  Value loss = t.g.sum(t.g.mul(y, t.input(up)));
  std::vector<Value> wrt{a, b};
  std::vector<Value> d = t.g.gradients(loss, wrt);
  auto out = t.eval({y, d[0], d[1]});
  const float ninf = -inf;
  EXPECT_EQ(out[0], (std::vector<float>{1, -1, 3, 4, ninf, 6}));
  EXPECT_EQ(out[1], (std::vector<float>{0.5f, 0, 1, 2, 0, 8}));
  EXPECT_EQ(out[2], (std::vector<float>{0.25f, 4}));
}

TEST(MaskedFillOp, WhereGradientsMatchFiniteDifferences) {
  OpTest t(17);
  Value c = t.input(random_mask(Shape{2, 1, 3}, t.rng));
  Value a = t.param(uniform(Shape{4, 3}, t.rng, -1.0f, 1.0f)), b = t.param(uniform(Shape{2, 4, 1}, t.rng, -1.0f, 1.0f));
  Value y = t.g.where(c, a, b);
  ASSERT_EQ(t.g.shape(y), (Shape{2, 4, 3}));
  t.check_gradients(t.project(y));
}

TEST(MaskedFillOp, Errors) {
  OpTest t;
  Value x = t.input(tensor({1, 2, 3, 4, 5, 6}, {2, 3}));
  EXPECT_TRUE(throws<ShapeError>(
      [&] {
        t.g.masked_fill(x, t.input(tensor({1, 0}, {2})), 0.0f);
      },
      {"masked_fill", "{2, 3}", "{2}"}));
  EXPECT_TRUE(throws<TypeError>([&] { t.g.masked_fill(x, t.input(ids({1, 0, 1})), 0.0f); }, {"masked_fill", "int32"}));
}

// ---------------------------------------------------------------------------
// The weighted element-wise losses: MAE, Huber, binary cross-entropy.

enum class Weighting { None, PerRow, PerElement };
const char* weighting_name(Weighting w) {
  return w == Weighting::None ? "no weights" : w == Weighting::PerRow ? "weights {B}" : "weights {B,N}";
}

// sum_k w_k e(p_k, t_k) / (B N), in double.
double reference_loss(const std::vector<float>& p, const std::vector<float>& t, const std::vector<float>& w,
                      Weighting form, int64_t cols, const std::function<double(double, double)>& e) {
  double total = 0;
  for (size_t k = 0; k < p.size(); ++k) {
    const double wk = form == Weighting::None ? 1.0 : form == Weighting::PerRow ? w[k / size_t(cols)] : w[k];
    total += wk * e(p[k], t[k]);
  }
  return total / double(p.size());
}

double mae(double p, double t) { return std::fabs(p - t); }
std::function<double(double, double)> huber(double delta) {
  return [delta](double p, double t) {
    const double d = std::fabs(p - t);
    return d <= delta ? 0.5 * d * d : delta * (d - 0.5 * delta);
  };
}
// -(y log s + (1 - y) log(1 - s)) with s = sigmoid(z), in the branch that does not overflow.
double bce(double z, double y) {
  return z >= 0 ? z * (1 - y) + std::log1p(std::exp(-z)) : -z * y + std::log1p(std::exp(z));
}

enum class LossKind { Mae, Huber, Bce };
struct LossCase {
  LossKind kind;
  float delta = 1.0f;
};
std::string loss_name(const LossCase& c) {
  return c.kind == LossKind::Mae ? "mae" : c.kind == LossKind::Huber ? "huber delta " + std::to_string(c.delta) : "bce";
}
Value build_loss(Graph& g, const LossCase& c, Value p, Value t, Value w) {
  switch (c.kind) {
    case LossKind::Mae:
      return g.mae_loss(p, t, w);
    case LossKind::Huber:
      return g.huber_loss(p, t, c.delta, w);
    case LossKind::Bce:
      return g.binary_cross_entropy(p, t, w);
  }
  return {};
}
std::function<double(double, double)> reference_of(const LossCase& c) {
  switch (c.kind) {
    case LossKind::Mae:
      return mae;
    case LossKind::Huber:
      return huber(c.delta);
    case LossKind::Bce:
      return bce;
  }
  return {};
}

const std::vector<LossCase> kLossCases = {
    {LossKind::Mae}, {LossKind::Huber, 1.0f}, {LossKind::Huber, 0.5f}, {LossKind::Huber, 2.0f}, {LossKind::Bce}};
const Weighting kWeightings[] = {Weighting::None, Weighting::PerRow, Weighting::PerElement};

// Predictions and targets {B, N}: for BCE logits in [-4, 4] and targets in
// [0, 1]; otherwise both in [-1.5, 1.5], pairs at least 0.1 from every kink
// (d = 0 for MAE, |d| = delta for Huber), both sides of delta present.
void make_inputs(const LossCase& c, int64_t b, int64_t n, std::mt19937& rng, Tensor& p, Tensor& t) {
  if (c.kind == LossKind::Bce) {
    p = uniform({b, n}, rng, -4.0f, 4.0f);
    t = uniform({b, n}, rng, 0.0f, 1.0f);
    return;
  }
  for (int attempt = 0; attempt < 1000; ++attempt) {
    p = uniform({b, n}, rng, -1.5f, 1.5f);
    t = uniform({b, n}, rng, -1.5f, 1.5f);
    const std::vector<float> pv = p.to_vector(), tv = t.to_vector();
    bool ok = true;
    int inside = 0;
    for (size_t k = 0; k < pv.size(); ++k) {
      const float d = std::fabs(pv[k] - tv[k]);
      const float kink = c.kind == LossKind::Mae ? 0.0f : c.delta;
      ok = ok && std::fabs(d - kink) >= 0.1f;
      inside += d < c.delta;
    }
    if (ok && (c.kind == LossKind::Mae || (inside > 0 && inside < int(pv.size())))) return;
  }
  FAIL() << "no inputs away from the kinks found";
}

TEST(ElementwiseLosses, ForwardMatchesReference) {
  const int64_t b = 4, n = 3;
  for (const LossCase& c : kLossCases)
    for (Weighting form : kWeightings) {
      SCOPED_TRACE(loss_name(c) + ", " + weighting_name(form));
      OpTest t(21);
      Tensor pt, tt;
      make_inputs(c, b, n, t.rng, pt, tt);
      Tensor wt = form == Weighting::None     ? Tensor{}
                  : form == Weighting::PerRow ? uniform({b}, t.rng, 0.2f, 2.0f)
                                              : uniform({b, n}, t.rng, 0.2f, 2.0f);
      Value w = wt.defined() ? t.input(wt) : Value{};
      Value loss = build_loss(t.g, c, t.input(pt), t.input(tt), w);
      ASSERT_EQ(t.g.shape(loss), Shape{});
      const std::vector<float> wv = wt.defined() ? wt.to_vector() : std::vector<float>{};
      const double want = reference_loss(pt.to_vector(), tt.to_vector(), wv, form, n, reference_of(c));
      const float got = t.eval({loss})[0][0];
      EXPECT_NEAR(got, want, 1e-6 * std::fabs(want)) << "got " << got << ", want " << want;
    }
}

// Gradients with respect to the predictions (and, for MAE and Huber, the
// targets, which get the negated gradient) against finite differences, the
// loss scaled by 2.5 so that the incoming gradient is not 1.
TEST(ElementwiseLosses, GradientsMatchFiniteDifferences) {
  const int64_t b = 4, n = 3;
  for (const LossCase& c : kLossCases)
    for (Weighting form : kWeightings) {
      SCOPED_TRACE(loss_name(c) + ", " + weighting_name(form));
      OpTest t(31);
      Tensor pt, tt;
      make_inputs(c, b, n, t.rng, pt, tt);
      Value p = t.param(pt);
      Value target = c.kind == LossKind::Bce ? t.input(tt) : t.param(tt);
      Value w = form == Weighting::None     ? Value{}
                : form == Weighting::PerRow ? t.input(uniform({b}, t.rng, 0.2f, 2.0f))
                                            : t.input(uniform({b, n}, t.rng, 0.2f, 2.0f));
      t.check_gradients(t.g.scale(build_loss(t.g, c, p, target, w), 2.5f));
    }
}

// MAE's gradient exactly: w sign(p - t) g / (B N), 0 where p == t.
TEST(MaeLoss, GradientIsTheSignAndZeroAtTies) {
  const Tensor pt = tensor({1, 2, 3, -1, 0.5f, 7}, {2, 3}), tt = tensor({0, 2, 4, -1, 0.25f, 7}, {2, 3});
  const Tensor wt = tensor({2, 0.5f}, {2});
  OpTest t;
  Value p = t.param(pt), target = t.param(tt);
  Value loss = t.g.scale(t.g.mae_loss(p, target, t.input(wt)), 3.0f);
  std::vector<Value> wrt{p, target};
  std::vector<Value> d = t.g.gradients(loss, wrt);
  auto out = t.eval({loss, d[0], d[1]});
  // sum w |d| / 6 * 3 = (2 * (1 + 0 + 1) + 0.5 * (0 + 0.25 + 0)) / 2
  EXPECT_FLOAT_EQ(out[0][0], (2.0f * 2.0f + 0.5f * 0.25f) / 2.0f);
  const std::vector<float> want = {1.0f, 0.0f, -1.0f, 0.0f, 0.25f, 0.0f};  // 3 / 6 * w * sign
  for (size_t k = 0; k < want.size(); ++k) {
    EXPECT_EQ(out[1][k], want[k]) << "dpred element " << k;
    EXPECT_EQ(out[2][k], -want[k]) << "dtarget element " << k;
  }
}

// Huber on both sides of delta, value and gradient exactly, and Huber with
// delta = 1 equal to PyTorch's smooth_l1 (beta = 1).
TEST(HuberLoss, BothSidesOfDelta) {
  const std::vector<float> d = {-3.0f, -1.5f, -0.5f, 0.0f, 0.25f, 0.75f, 1.0f, 1.25f, 4.0f};
  const int64_t n = int64_t(d.size());
  for (float delta : {1.0f, 0.5f, 2.0f}) {
    SCOPED_TRACE("delta " + std::to_string(delta));
    OpTest t;
    Value p = t.param(tensor(d, {1, n})), target = t.input(Tensor::zeros({1, n}));
    Value loss = t.g.huber_loss(p, target, delta);
    std::vector<Value> wrt{p};
    Value dp = t.g.gradients(loss, wrt)[0];
    auto out = t.eval({loss, dp});
    double want = 0;
    for (size_t k = 0; k < d.size(); ++k) {
      const double a = std::fabs(d[k]);
      want += a <= delta ? 0.5 * a * a : delta * (a - 0.5 * delta);
      const float clipped = std::clamp(d[k], -delta, delta);
      EXPECT_FLOAT_EQ(out[1][k], clipped / float(n)) << "element " << k;
    }
    EXPECT_NEAR(out[0][0], want / double(n), 1e-6 * want / double(n));
    if (delta == 1.0f) {
      double smooth_l1 = 0;  // PyTorch: 0.5 d^2 / beta if |d| < beta else |d| - 0.5 beta
      for (float v : d) smooth_l1 += std::fabs(v) < 1.0 ? 0.5 * double(v) * v : std::fabs(v) - 0.5;
      EXPECT_NEAR(out[0][0], smooth_l1 / double(n), 1e-6);
    }
  }
}

// ---------------------------------------------------------------------------
// Binary cross-entropy at huge logits: finite and equal to the closed form.

TEST(BinaryCrossEntropy, ExactAtHugeLogits) {
  struct Case {
    float z, y;
    double loss, grad;  // closed forms: z>0: z (1 - y) + log1p(e^-z); z<0: -z y + log1p(e^z); sigmoid(z) - y
  };
  const double big = double(1e30f);  // 1.0000000150474662e30, the float nearest 1e30
  const std::vector<Case> cases = {
      {1e4f, 1.0f, 0.0, 0.0},
      {1e4f, 0.0f, 1e4, 1.0},
      {-1e4f, 0.0f, 0.0, 0.0},
      {-1e4f, 1.0f, 1e4, -1.0},
      {1e4f, 0.25f, 7.5e3, 0.75},
      {-1e4f, 0.75f, 7.5e3, -0.75},
      {1e30f, 0.0f, big, 1.0},
      {1e30f, 1.0f, 0.0, 0.0},
      {-1e30f, 1.0f, big, -1.0},
      {1e30f, 0.25f, 0.75 * big, 0.75},
      {-1e30f, 0.75f, 0.75 * big, -0.75},
      {0.0f, 1.0f, std::log(2.0), -0.5},
      {-30.0f, 0.0f, std::log1p(std::exp(-30.0)), 1.0 / (1.0 + std::exp(30.0))},
      // e^90 overflows float32: sigmoid(-90) = 8.2e-40 (subnormal) must come from e^-|z| / (1 + e^-|z|)
      {-90.0f, 0.0f, std::log1p(std::exp(-90.0)), 1.0 / (1.0 + std::exp(90.0))},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("z " + std::to_string(c.z) + ", y " + std::to_string(c.y));
    // the closed forms above are the reference's
    EXPECT_NEAR(bce(c.z, c.y), c.loss, 1e-12 * std::max(1.0, c.loss));
    OpTest t;
    Value z = t.param(tensor({c.z}, {1, 1}));
    Value loss = t.g.binary_cross_entropy(z, t.input(tensor({c.y}, {1, 1})));
    std::vector<Value> wrt{z};
    Value dz = t.g.gradients(loss, wrt)[0];
    auto out = t.eval({loss, dz});
    ASSERT_TRUE(std::isfinite(out[0][0]));
    ASSERT_TRUE(std::isfinite(out[1][0]));
    EXPECT_NEAR(out[0][0], c.loss, 1e-6 * c.loss + 1e-44);  // float32 rounding of the double result
    // relative, so exact where the closed form is 0 and tiny gradients keep their digits
    EXPECT_NEAR(out[1][0], c.grad, std::min(1e-7, 1e-4 * std::fabs(c.grad)));
  }
}

// A whole batch of huge logits, weighted: still finite and as the reference.
TEST(BinaryCrossEntropy, HugeLogitsInABatch) {
  const Tensor zt = tensor({1e4f, -1e4f, 1e30f, -1e30f, 3.0f, -2.0f}, {2, 3});
  const Tensor yt = tensor({0.5f, 0.5f, 1.0f, 0.0f, 0.2f, 0.9f}, {2, 3});
  const Tensor wt = tensor({1.0f, 0.5f, 2.0f, 1.5f, 0.25f, 3.0f}, {2, 3});
  OpTest t;
  Value z = t.param(zt);
  Value loss = t.g.binary_cross_entropy(z, t.input(yt), t.input(wt));
  std::vector<Value> wrt{z};
  Value dz = t.g.gradients(loss, wrt)[0];
  auto out = t.eval({loss, dz});
  const double want = reference_loss(zt.to_vector(), yt.to_vector(), wt.to_vector(), Weighting::PerElement, 3, bce);
  EXPECT_NEAR(out[0][0], want, 1e-6 * want);
  const std::vector<double> sig = {1, 0, 1, 0, 1 / (1 + std::exp(-3.0)), 1 / (1 + std::exp(2.0))};
  for (size_t k = 0; k < 6; ++k) {
    const double g = wt.to_vector()[k] * (sig[k] - yt.to_vector()[k]) / 6.0;
    EXPECT_NEAR(out[1][k], g, 1e-6) << "element " << k;
  }
}

// Targets and weights take no gradient (as softmax_cross_entropy's labels).
TEST(BinaryCrossEntropy, TargetsTakeNoGradient) {
  OpTest t;
  Value z = t.param(tensor({0.5f, -1.0f}, {1, 2})), y = t.param(tensor({1.0f, 0.0f}, {1, 2}));
  Value loss = t.g.binary_cross_entropy(z, y);
  std::vector<Value> wrt{z, y};
  std::vector<Value> d = t.g.gradients(loss, wrt);
  EXPECT_TRUE(d[0].valid());
  EXPECT_FALSE(d[1].valid());
}

// ---------------------------------------------------------------------------
// Metrics.

Value binary_accuracy(Graph& g, Value p, Value t, float threshold) {
  OpAttrs at;
  at.threshold = threshold;
  return g.apply(OpKind::BinaryAccuracy, {p, t}, at);
}
Value top_k_accuracy(Graph& g, Value scores, Value labels, int64_t k) {
  OpAttrs at;
  at.k = k;
  return g.apply(OpKind::TopKAccuracy, {scores, labels}, at);
}

TEST(BinaryAccuracy, CountsAgreementsAtTheThreshold) {
  {  // logits, threshold 0: a prediction of exactly 0 is negative, a target of exactly 0.5 too
    OpTest t;
    Value p = t.input(tensor({0.5f, -0.2f, 0.0f, 3.0f, -1.0f, 1e-4f, 2.0f, -2.0f}, {2, 4}));
    Value y = t.input(tensor({1.0f, 0.0f, 1.0f, 0.6f, 0.4f, 0.0f, 0.5f, 0.5f}, {2, 4}));
    //                        hit   hit   miss  hit   hit   miss  miss  hit
    EXPECT_EQ(t.eval({binary_accuracy(t.g, p, y, 0.0f)})[0][0], 5.0f);
  }
  {  // probabilities, threshold 0.5
    OpTest t;
    Value p = t.input(tensor({0.9f, 0.5f, 0.51f, 0.1f}, {2, 2}));
    Value y = t.input(tensor({1.0f, 1.0f, 1.0f, 1.0f}, {2, 2}));
    EXPECT_EQ(t.eval({binary_accuracy(t.g, p, y, 0.5f)})[0][0], 2.0f);
  }
}

// scores {4, 4} with ties; the label counts when fewer than k scores are strictly greater.
TEST(TopKAccuracy, TiesAtTheBoundaryAreInTheTopK) {
  const Tensor scores = tensor({0.1f, 0.5f, 0.5f, 0.2f,   // label 2, tied for first: in the top 1
                                0.9f, 0.3f, 0.3f, 0.3f,   // label 3: one greater, in the top 2
                                0.1f, 0.2f, 0.3f, 0.4f,   // label 0: three greater, in the top 4 only
                                1.0f, 1.0f, 1.0f, 1.0f},  // label 1: all tied, in the top 1
                               {4, 4});
  const std::vector<int32_t> label_ids = {2, 3, 0, 1};
  std::vector<float> one_hot(16, 0.0f);
  for (size_t i = 0; i < 4; ++i) one_hot[i * 4 + size_t(label_ids[i])] = 1.0f;
  const std::vector<std::pair<int64_t, float>> want = {{1, 2}, {2, 3}, {3, 3}, {4, 4}, {10, 4}};
  for (bool sparse : {true, false})
    for (auto [k, count] : want) {
      SCOPED_TRACE(std::string(sparse ? "int32 ids" : "one-hot") + ", k " + std::to_string(k));
      OpTest t;
      Value labels = t.input(sparse ? ids(label_ids) : tensor(one_hot, {4, 4}));
      EXPECT_EQ(t.eval({top_k_accuracy(t.g, t.input(scores), labels, k)})[0][0], count);
    }
}

// A non-finite score at the label, or a label outside the classes, is a miss (as TF's in_top_k).
TEST(TopKAccuracy, NonFiniteLabelScoreAndBadIdsMiss) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  OpTest t;
  Value scores = t.input(tensor({nan, 0.0f, inf, 1.0f, 1.0f, 2.0f, 1.0f, 2.0f, 1.0f, 2.0f}, {5, 2}));
  Value labels = t.input(ids({0, 0, 1, -1, 2}));
  // row 0 NaN at the label, row 1 inf at the label, row 2 a hit, rows 3 and 4 ids outside [0, 2)
  EXPECT_EQ(t.eval({top_k_accuracy(t.g, scores, labels, 1)})[0][0], 1.0f);
}

TEST(MetricOps, HaveNoGradient) {
  OpTest t;
  Value p = t.param(tensor({0.5f, -1.0f}, {1, 2}));
  Value y = t.input(tensor({1.0f, 0.0f}, {1, 2}));
  std::vector<Value> wrt{p};
  Value m = binary_accuracy(t.g, p, y, 0.0f);
  EXPECT_TRUE(throws<Error>([&] { t.g.gradients(m, wrt); }, {"binary_accuracy", "no gradient"}));
  Value topk = top_k_accuracy(t.g, p, t.input(ids({1})), 1);
  EXPECT_TRUE(throws<Error>([&] { t.g.gradients(topk, wrt); }, {"top_k_accuracy", "no gradient"}));
}

// ---------------------------------------------------------------------------
// Errors name the op, what it expected and what came.

TEST(LossOpErrors, ShapesDtypesAndValues) {
  Graph g;
  Value x23 = g.input("x23", {2, 3}), y23 = g.input("y23", {2, 3}), x32 = g.input("x32", {3, 2});
  Value x4 = g.input("x4", {4});
  Value i23 = g.input("i23", {2, 3}, DType::Int32), w2 = g.input("w2", {2}), w3 = g.input("w3", {3});
  Value f2 = g.input("f2", {2}), i2 = g.input("i2", {2}, DType::Int32), i3 = g.input("i3", {3}, DType::Int32);

  EXPECT_TRUE(throws<ShapeError>([&] { g.maximum(x23, x4); }, {"maximum", "{2, 3}", "{4}"}));
  EXPECT_TRUE(throws<ShapeError>([&] { g.minimum(x4, x23); }, {"minimum", "cannot be broadcast"}));
  EXPECT_TRUE(throws<TypeError>([&] { g.maximum(x23, i23); }, {"maximum", "float32", "int32"}));

  EXPECT_TRUE(throws<ShapeError>([&] { g.mae_loss(x23, x32); }, {"mae_loss", "targets", "{3, 2}", "{2, 3}"}));
  EXPECT_TRUE(throws<ShapeError>([&] { g.mae_loss(x4, x4); }, {"mae_loss", "rank 2", "{4}"}));
  EXPECT_TRUE(throws<TypeError>([&] { g.mae_loss(x23, i23); }, {"mae_loss", "targets", "int32"}));
  EXPECT_TRUE(throws<ShapeError>([&] { g.huber_loss(x23, y23, 1.0f, w3); }, {"huber_loss", "weights", "{2}", "{3}"}));
  EXPECT_TRUE(throws<ValueError>([&] { g.huber_loss(x23, y23, 0.0f); }, {"huber_loss", "delta"}));
  EXPECT_TRUE(throws<ValueError>([&] { g.huber_loss(x23, y23, -1.0f); }, {"huber_loss", "delta"}));
  EXPECT_TRUE(throws<ValueError>([&] { g.huber_loss(x23, y23, std::numeric_limits<float>::quiet_NaN()); },
                                 {"huber_loss", "delta"}));
  EXPECT_TRUE(
      throws<ShapeError>([&] { g.binary_cross_entropy(x4, x4); }, {"binary_cross_entropy", "logits", "rank 2"}));
  EXPECT_TRUE(
      throws<TypeError>([&] { g.binary_cross_entropy(i23, x23); }, {"binary_cross_entropy", "logits", "int32"}));
  EXPECT_TRUE(throws<TypeError>([&] { g.binary_cross_entropy(x23, y23, g.input("wi", {2}, DType::Int32)); },
                                {"binary_cross_entropy", "weights", "int32"}));
  EXPECT_NO_THROW(g.binary_cross_entropy(x23, y23, w2));

  EXPECT_TRUE(throws<ShapeError>([&] { binary_accuracy(g, x23, x32, 0.0f); }, {"binary_accuracy", "{3, 2}", "{2, 3}"}));
  EXPECT_TRUE(throws<TypeError>([&] { binary_accuracy(g, x23, i23, 0.0f); }, {"binary_accuracy", "targets", "int32"}));
  EXPECT_TRUE(throws<TypeError>([&] { top_k_accuracy(g, x23, f2, 1); }, {"top_k_accuracy", "int32", "float32"}));
  EXPECT_TRUE(throws<ShapeError>([&] { top_k_accuracy(g, x23, i3, 1); }, {"top_k_accuracy", "3 rows", "2"}));
  EXPECT_TRUE(throws<ShapeError>([&] { top_k_accuracy(g, x23, x32, 1); }, {"top_k_accuracy", "{3, 2}", "{2, 3}"}));
  EXPECT_TRUE(throws<ValueError>([&] { top_k_accuracy(g, x23, i2, 0); }, {"top_k_accuracy", "k", "0"}));
  EXPECT_NO_THROW(top_k_accuracy(g, x23, i2, 5));
}

}  // namespace
