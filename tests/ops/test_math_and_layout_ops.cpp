// The ops added for the eager API (Div, Exp, Log, Sqrt, Erf, Pow, Clamp, SumAxis,
// MeanAxis, MaxAxis, Transpose, batched MatMul, n-ary Concat, Dropout with a
// counter input): forward values against known answers or a reference loop
// written here, the backward routing rules that finite differences cannot
// see (max ties, clamp bounds), and the errors of bad input (type and words).
// The gradients themselves are checked by finite differences in
// test_gradients.cpp (GradCheckMathAndLayoutOps).
#include <gtest/gtest.h>

#include "test_support.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "tensorgrad/ag/functional.h"
#include "tensorgrad/backend/executable.h"
#include "tensorgrad/graph/graph.h"

using namespace tensorgrad;
using test_support::throws;
using test_support::ulps;
using test_support::uniform;

namespace {

// A graph whose inputs are bound to fixed tensors; eval runs it once and
// returns the requested outputs as float vectors.
struct Runner {
  Graph g;
  std::vector<std::pair<Value, Tensor>> binds;

  Value in(const Tensor& t) {
    Value v = g.input("in" + std::to_string(binds.size()), t.shape(), t.dtype());
    binds.push_back({v, t});
    return v;
  }
  Value in(std::vector<float> v, const Shape& s) { return in(Tensor::from_vector(v, s)); }
  // A trainable parameter (for reading gradients).
  Value param(std::vector<float> v, const Shape& s) {
    params.push_back(Tensor::from_vector(v, s));
    return g.parameter(params.back(), ("p" + std::to_string(params.size())).c_str(), true);
  }
  std::vector<std::vector<float>> eval(const std::vector<Value>& outs, uint64_t counter = 0) {
    Executable exe(std::move(g), outs);
    for (auto& [v, t] : binds) exe.bind(v, t);
    exe.set_rng_counter(counter);
    exe.run();
    std::vector<std::vector<float>> r;
    for (Value v : outs) r.push_back(exe.output(v).to_vector());
    return r;
  }
  std::vector<Tensor> params;
};

std::vector<float> iota(int64_t n, float start = 0.0f, float step = 1.0f) {
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + step * float(i);
  return v;
}

Tensor int32_tensor(const std::vector<int32_t>& v, const Shape& s) {
  return Tensor::from_vector(std::span<const int32_t>(v), s);
}

// ---------------------------------------------------------------------------
// Element-wise ops.

TEST(MathAndLayoutOpsForward, DivBroadcastsLikeAdd) {
  Runner r;
  Value a = r.in({1, 2, 3, 4, 5, 6}, {2, 3});
  Value b = r.in({1, 2, 4}, {3});
  Value col = r.in({2, -1}, {2, 1});
  Value y = r.g.div(a, b), z = r.g.div(col, b), w = r.g.div(b, r.in({0}, {}));
  EXPECT_EQ(r.g.shape(y), (Shape{2, 3}));
  EXPECT_EQ(r.g.shape(z), (Shape{2, 3}));
  auto out = r.eval({y, z, w});
  EXPECT_EQ(out[0], (std::vector<float>{1, 1, 0.75f, 4, 2.5f, 1.5f}));
  EXPECT_EQ(out[1], (std::vector<float>{2, 1, 0.5f, -1, -0.5f, -0.25f}));
  for (float v : out[2]) EXPECT_EQ(v, INFINITY);  // IEEE: x / 0 = inf for x > 0
}

TEST(MathAndLayoutOpsForward, ExpLogSqrtPowKnownValues) {
  Runner r;
  Value x = r.in({0, 1, 4, -1, -8, 0.25f}, {6});
  Value e = r.g.exp(x), l = r.g.log(x), s = r.g.sqrt(x);
  Value p2 = r.g.pow(x, 2.0f), p3 = r.g.pow(x, 3.0f), ph = r.g.pow(x, 0.5f), p0 = r.g.pow(x, 0.0f);
  auto out = r.eval({e, l, s, p2, p3, ph, p0});
  const float ex[] = {1.0f, float(M_E), std::exp(4.0f), std::exp(-1.0f), std::exp(-8.0f), std::exp(0.25f)};
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(out[0][size_t(i)], ex[i]) << "exp element " << i;
  EXPECT_EQ(out[1][0], -INFINITY);
  EXPECT_FLOAT_EQ(out[1][1], 0.0f);
  EXPECT_FLOAT_EQ(out[1][2], std::log(4.0f));
  EXPECT_TRUE(std::isnan(out[1][3]));
  EXPECT_FLOAT_EQ(out[1][5], std::log(0.25f));
  EXPECT_EQ(out[2][0], 0.0f);
  EXPECT_EQ(out[2][1], 1.0f);
  EXPECT_EQ(out[2][2], 2.0f);
  EXPECT_TRUE(std::isnan(out[2][3]));
  EXPECT_EQ(out[2][5], 0.5f);
  EXPECT_EQ(out[3], (std::vector<float>{0, 1, 16, 1, 64, 0.0625f}));
  EXPECT_EQ(out[4], (std::vector<float>{0, 1, 64, -1, -512, 0.015625f}));
  // x^0.5: NaN for negative x (std::pow, torch.pow); x^0 = 1 everywhere, 0^0 included.
  EXPECT_EQ(out[5][2], 2.0f);
  EXPECT_TRUE(std::isnan(out[5][3]));
  EXPECT_TRUE(std::isnan(out[5][4]));
  EXPECT_EQ(out[6], (std::vector<float>(6, 1.0f)));
}

// Inputs over the whole float range of a smooth function of one variable:
// zeros of both signs, tiny values (where erf and GELU are linear), the bend
// around 1, the tails where erf saturates to +-1 (past 3.9) and GELU to x or
// 0, huge and infinite values of both signs, and NaN last.
std::vector<float> spread_of_inputs() {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x{0.0f, -0.0f, 1e-30f, -1e-30f, 1e-6f, -1e-6f};
  for (int i = -48; i <= 48; ++i) x.push_back(0.125f * float(i));  // [-6, 6] by 1/8
  for (float v : {7.5f, 10.0f, 30.0f, 100.0f, 1e10f, 3e38f, inf}) x.push_back(v), x.push_back(-v);
  x.push_back(std::numeric_limits<float>::quiet_NaN());
  return x;
}

std::vector<uint32_t> float_bits(const std::vector<float>& v) {
  std::vector<uint32_t> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * sizeof(float));
  return out;
}

// `op` through a graph, and `eager` (its ag:: function) on the same inputs:
// both run the op's one kernel, so they give the same bits.
std::vector<float> graph_equals_eager(OpKind op, const std::vector<float>& x,
                                      const std::function<ag::Tensor(const ag::Tensor&)>& eager) {
  Runner r;
  const Shape s{int64_t(x.size())};
  const std::vector<float> y = r.eval({r.g.apply(op, {r.in(x, s)})})[0];
  EXPECT_EQ(float_bits(y), float_bits(eager(ag::tensor(std::span<const float>(x), s)).to_vector()));
  return y;
}

// torch.erf is the error function: against std::erf in double, within one
// float32 ulp (SLEEF's erff8_u10 and glibc's erff are both faithful), with
// erf(-0) = -0 and NaN passing through.
TEST(MathAndLayoutOpsForward, ErfIsTheErrorFunctionWithinOneUlp) {
  const std::vector<float> x = spread_of_inputs();
  const std::vector<float> y = graph_equals_eager(OpKind::Erf, x, [](const ag::Tensor& t) { return ag::erf(t); });
  for (size_t i = 0; i < x.size(); ++i) {
    SCOPED_TRACE("x = " + std::to_string(x[i]));
    if (std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(y[i]));
      continue;
    }
    EXPECT_LE(ulps(y[i], std::erf(double(x[i]))), 1.0) << y[i] << " against " << std::erf(double(x[i]));
    EXPECT_EQ(std::signbit(y[i]), std::signbit(x[i]));
  }
}

// torch.nn.functional.gelu(x, approximate="tanh") is documented as
// 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))); in double that is
// evaluated as x / (1 + exp(-2u)), the same function without 1 + tanh's
// cancellation (double loses it all past x = -5 too).
double gelu_tanh_reference(double v) {
  const double u = std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v);
  return v / (1.0 + std::exp(-2.0 * u));
}

// Within 8 float32 ulps where u is moderate; in the negative tail, relative
// (8 |u| + 4) 2^-24, as the rounding of u moves exp(-2u) by 2 |u| times its
// relative error; below 4e-38 (x < -9.5, where exp(-2u) overflows) -0.
// -inf gives NaN, as the formula does in double (-inf times 0).
TEST(MathAndLayoutOpsForward, GeluTanhIsPyTorchsTanhFormula) {
  const std::vector<float> x = spread_of_inputs();
  const std::vector<float> y =
      graph_equals_eager(OpKind::GeluTanh, x, [](const ag::Tensor& t) { return ag::gelu(t, "tanh"); });
  for (size_t i = 0; i < x.size(); ++i) {
    SCOPED_TRACE("x = " + std::to_string(x[i]));
    const double v = x[i], want = gelu_tanh_reference(v);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(y[i]));
      continue;
    }
    if (std::isinf(want)) {
      EXPECT_EQ(double(y[i]), want);
      continue;
    }
    const double u = std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v);
    if (v >= -3.0)
      EXPECT_LE(ulps(y[i], want), 8.0) << y[i] << " against " << want;
    else
      EXPECT_LE(std::fabs(double(y[i]) - want), (8.0 * std::fabs(u) + 4.0) * std::ldexp(1.0, -24) * std::fabs(want) + 4e-38)
          << y[i] << " against " << want;
  }
  // The approximation stays within 5e-4 of the exact form (Hendrycks & Gimpel's figure) on [-6, 6].
  const std::vector<float> exact = graph_equals_eager(OpKind::Gelu, x, [](const ag::Tensor& t) { return ag::gelu(t); });
  for (size_t i = 0; i < x.size(); ++i)
    if (std::fabs(x[i]) <= 6.0f) EXPECT_NEAR(y[i], exact[i], 5e-4f) << "x = " << x[i];
}

TEST(MathAndLayoutOpsForward, GeluApproximateTakesNoneOrTanh) {
  const ag::Tensor x = ag::tensor({-1.5f, 0.25f, 2.0f}, Shape{3});
  EXPECT_EQ(float_bits(ag::gelu(x, "none").to_vector()), float_bits(ag::gelu(x).to_vector()));
  EXPECT_NE(float_bits(ag::gelu(x, "tanh").to_vector()), float_bits(ag::gelu(x).to_vector()));
  for (const char* bad : {"exact", "Tanh", "", "true"})
    EXPECT_TRUE(throws<ValueError>([&] { ag::gelu(x, bad); },
                                   {"gelu: approximate must be \"none\"", "\"tanh\"", std::string("got \"") + bad + "\""}));
}

// The slope of PyTorch's formula, in double: s + x s (1 - s) dt/dx with t = 2u, s = sigmoid(t).
double gelu_tanh_slope(double v) {
  const double k = std::sqrt(2.0 / M_PI), t = 2.0 * k * (v + 0.044715 * v * v * v);
  const double e = std::exp(-std::fabs(t)), s = t >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
  return e == 0.0 ? s : s + v * e / ((1.0 + e) * (1.0 + e)) * 2.0 * k * (1.0 + 3.0 * 0.044715 * v * v);
}

// The backward op on the spread of inputs: the slope within 1e-6 + 1e-5 relative; 1 and 0 far out,
// infinities and huge |x| included (no 0 * inf from x^2's overflow); NaN stays NaN.
TEST(MathAndLayoutOpsBackward, GeluTanhSlopeOverTheWholeRange) {
  const std::vector<float> x = spread_of_inputs();
  const Shape s{int64_t(x.size())};
  ag::Tensor leaf = ag::tensor(std::span<const float>(x), s);
  leaf.requires_grad_();
  ag::sum(ag::gelu(leaf, "tanh")).backward();
  const std::vector<float> dx = leaf.grad().to_vector();
  for (size_t i = 0; i < x.size(); ++i) {
    SCOPED_TRACE("x = " + std::to_string(x[i]));
    if (std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(dx[i]));
      continue;
    }
    const double want = gelu_tanh_slope(x[i]);
    EXPECT_NEAR(double(dx[i]), want, 1e-6 + 1e-5 * std::fabs(want));
  }
}

TEST(MathAndLayoutOpsForward, ClampBothSidedAndOneSided) {
  Runner r;
  Value x = r.in({-2, -0.5f, 0, 0.5f, 2, NAN}, {6});
  Value both = r.g.clamp(x, -0.5f, 0.5f), lo = r.g.clamp(x, 0.0f, INFINITY), hi = r.g.clamp(x, -INFINITY, 1.0f);
  auto out = r.eval({both, lo, hi});
  const std::vector<std::vector<float>> want = {
      {-0.5f, -0.5f, 0, 0.5f, 0.5f}, {0, 0, 0, 0.5f, 2}, {-2, -0.5f, 0, 0.5f, 1}};
  for (size_t k = 0; k < 3; ++k) {
    for (size_t i = 0; i < 5; ++i) EXPECT_EQ(out[k][i], want[k][i]) << "clamp " << k << " element " << i;
    EXPECT_TRUE(std::isnan(out[k][5])) << "clamp " << k << ": NaN stays NaN";
  }
}

TEST(MathAndLayoutOpsBackward, ClampGradientPassesAtTheBoundsOnly) {
  // PyTorch's rule: the gradient passes where min <= x <= max (the bounds
  // included), 0 outside and at NaN.
  Runner r;
  Value x = r.param({-2, -0.5f, 0, 0.5f, 2, NAN, -0.5000001f, 0.5000001f}, {8});
  Value w = r.in(iota(8, 1.0f), {8});
  Value loss = r.g.sum(r.g.mul(r.g.clamp(x, -0.5f, 0.5f), w));
  std::vector<Value> wrt{x};
  Value dx = r.g.gradients(loss, wrt).at(0);
  auto out = r.eval({dx});
  EXPECT_EQ(out[0], (std::vector<float>{0, 2, 3, 4, 0, 0, 0, 0}));
}

// ---------------------------------------------------------------------------
// Reductions along one axis.

// Reference: out[o, i] = reduce over j of x[o, j, i] around `axis`.
std::vector<float> reference_reduce(const std::vector<float>& x, const Shape& s, int axis, OpKind op) {
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= s[d];
  for (int d = axis + 1; d < s.rank(); ++d) inner *= s[d];
  const int64_t n = s[axis];
  std::vector<float> out(size_t(outer * inner));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double acc = op == OpKind::MaxAxis ? -INFINITY : 0.0;
      for (int64_t j = 0; j < n; ++j) {
        const double v = x[size_t((o * n + j) * inner + i)];
        acc = op == OpKind::MaxAxis ? std::max(acc, v) : acc + v;
      }
      if (op == OpKind::MeanAxis) acc /= double(n);
      out[size_t(o * inner + i)] = float(acc);
    }
  return out;
}

TEST(MathAndLayoutOpsForward, ReductionsAlongEachAxisMatchAReferenceLoop) {
  const Shape s{2, 3, 4};
  std::mt19937 rng(5);
  const std::vector<float> xv = uniform(s, rng, -2.0f, 2.0f).to_vector();
  for (OpKind op : {OpKind::SumAxis, OpKind::MeanAxis, OpKind::MaxAxis})
    for (int axis = 0; axis < 3; ++axis)
      for (bool keepdim : {false, true}) {
        SCOPED_TRACE(std::string(op_info(op).name) + " axis " + std::to_string(axis) + (keepdim ? " keepdim" : ""));
        Runner r;
        Value x = r.in(xv, s);
        OpAttrs at;
        at.axis = axis;
        at.keepdim = keepdim;
        Value y = r.g.apply(op, {x}, at);
        Shape want = keepdim ? Shape{axis == 0 ? 1 : 2, axis == 1 ? 1 : 3, axis == 2 ? 1 : 4}
                     : axis == 0 ? Shape{3, 4}
                     : axis == 1 ? Shape{2, 4}
                                 : Shape{2, 3};
        EXPECT_EQ(r.g.shape(y), want);
        const std::vector<float> got = r.eval({y})[0], ref = reference_reduce(xv, s, axis, op);
        ASSERT_EQ(got.size(), ref.size());
        for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-6) << "element " << i;
      }
}

TEST(MathAndLayoutOpsForward, KeepdimShapes) {
  Graph g;
  Value x = g.input("x", {2, 3, 4});
  EXPECT_EQ(g.shape(g.sum_axis(x, 1)), (Shape{2, 4}));
  EXPECT_EQ(g.shape(g.sum_axis(x, 1, true)), (Shape{2, 1, 4}));
  EXPECT_EQ(g.shape(g.mean_axis(x, 2, true)), (Shape{2, 3, 1}));
  EXPECT_EQ(g.shape(g.max_axis(x, 0)), (Shape{3, 4}));
  Value v = g.input("v", {5});
  EXPECT_EQ(g.shape(g.sum_axis(v, 0)), Shape{});
  EXPECT_EQ(g.shape(g.max_axis(v, 0, true)), (Shape{1}));
}

TEST(MathAndLayoutOpsForward, MaxAxisPropagatesNaN) {
  Runner r;
  Value x = r.in({1, NAN, 3, 4, 5, 6}, {2, 3});
  auto out = r.eval({r.g.max_axis(x, 1), r.g.max_axis(x, 0)});
  EXPECT_TRUE(std::isnan(out[0][0]));
  EXPECT_EQ(out[0][1], 6.0f);
  EXPECT_EQ(out[1][0], 4.0f);
  EXPECT_TRUE(std::isnan(out[1][1]));
  EXPECT_EQ(out[1][2], 6.0f);
}

TEST(MathAndLayoutOpsBackward, MaxAxisTiesGoToTheFirstIndex) {
  // Rows {1, 3, 3} and {2, 2, 0} along axis 1: the gradient goes to index 1
  // of row 0 and index 0 of row 1. {5, 1; 5, 2} along axis 0: column 0 ties,
  // its gradient goes to row 0; column 1's to row 1.
  Runner r;
  Value x = r.param({1, 3, 3, 2, 2, 0}, {2, 3});
  Value w1 = r.in({10, 20}, {2});
  Value l1 = r.g.sum(r.g.mul(r.g.max_axis(x, 1), w1));
  Value y = r.param({5, 1, 5, 2}, {2, 2});  // column 0 ties between rows 0 and 1
  Value l0 = r.g.sum(r.g.max_axis(y, 0, true));
  std::vector<Value> wx{x}, wy{y};
  Value dx = r.g.gradients(l1, wx).at(0);
  Value dy = r.g.gradients(l0, wy).at(0);
  auto out = r.eval({dx, dy});
  EXPECT_EQ(out[0], (std::vector<float>{0, 10, 0, 20, 0, 0}));
  EXPECT_EQ(out[1], (std::vector<float>{1, 0, 0, 1}));
}

// ---------------------------------------------------------------------------
// Transpose.

TEST(MathAndLayoutOpsForward, TransposeMatchesIndexArithmetic) {
  const Shape s{2, 3, 4, 5};
  const std::vector<float> xv = iota(s.numel());
  for (auto [a0, a1] : {std::pair{0, 1}, std::pair{1, 3}, std::pair{0, 3}, std::pair{2, 2}}) {
    SCOPED_TRACE("axes " + std::to_string(a0) + ", " + std::to_string(a1));
    Runner r;
    Value y = r.g.transpose(r.in(xv, s), a0, a1);
    int64_t d[4] = {2, 3, 4, 5};
    std::swap(d[a0], d[a1]);
    ASSERT_EQ(r.g.shape(y), (Shape{d[0], d[1], d[2], d[3]}));
    const std::vector<float> got = r.eval({y})[0];
    int64_t idx[4];
    for (idx[0] = 0; idx[0] < d[0]; ++idx[0])
      for (idx[1] = 0; idx[1] < d[1]; ++idx[1])
        for (idx[2] = 0; idx[2] < d[2]; ++idx[2])
          for (idx[3] = 0; idx[3] < d[3]; ++idx[3]) {
            int64_t src[4] = {idx[0], idx[1], idx[2], idx[3]};
            std::swap(src[a0], src[a1]);
            const int64_t out_i = ((idx[0] * d[1] + idx[1]) * d[2] + idx[2]) * d[3] + idx[3];
            const int64_t in_i = ((src[0] * 3 + src[1]) * 4 + src[2]) * 5 + src[3];
            ASSERT_EQ(got[size_t(out_i)], xv[size_t(in_i)]) << "output element " << out_i;
          }
  }
}

TEST(MathAndLayoutOpsForward, TransposeOfInt32AndRankTwo) {
  Runner r;
  Value ids = r.in(int32_tensor({1, 2, 3, 4, 5, 6}, {2, 3}));
  Value t = r.g.transpose(ids, 0, 1);
  EXPECT_EQ(r.g.dtype(t), DType::Int32);
  Value m = r.g.transpose(r.in({1, 2, 3, 4, 5, 6}, {3, 2}), 1, 0);
  Executable exe(std::move(r.g), {t, m});
  for (auto& [v, tensor] : r.binds) exe.bind(v, tensor);
  exe.run();
  const int32_t* p = exe.output(t).data<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(p, p + 6), (std::vector<int32_t>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(exe.output(m).to_vector(), (std::vector<float>{1, 3, 5, 2, 4, 6}));
}

// ---------------------------------------------------------------------------
// Batched MatMul.

TEST(MathAndLayoutOpsForward, BatchedMatMulMatchesATripleLoop) {
  const int64_t batch = 3, m = 4, k = 5, n = 6;
  std::mt19937 rng(11);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(std::string(ta ? "At" : "A") + (tb ? "Bt" : "B"));
      const Shape sa = ta ? Shape{batch, k, m} : Shape{batch, m, k};
      const Shape sb = tb ? Shape{batch, n, k} : Shape{batch, k, n};
      const std::vector<float> av = uniform(sa, rng, -1, 1).to_vector(), bv = uniform(sb, rng, -1, 1).to_vector();
      Runner r;
      Value a = r.in(av, sa), b = r.in(bv, sb);
      Value c = r.g.matmul(a, b, ta, tb);
      ASSERT_EQ(r.g.shape(c), (Shape{batch, m, n}));
      // Each batch entry as its own rank-2 product: must agree bit for bit.
      std::vector<Value> per;
      for (int64_t i = 0; i < batch; ++i) {
        Value ai = r.g.reshape(r.g.slice(a, 0, i, 1), Shape{sa[1], sa[2]});
        Value bi = r.g.reshape(r.g.slice(b, 0, i, 1), Shape{sb[1], sb[2]});
        per.push_back(r.g.matmul(ai, bi, ta, tb));
      }
      std::vector<Value> outs{c};
      outs.insert(outs.end(), per.begin(), per.end());
      auto out = r.eval(outs);
      for (int64_t bi = 0; bi < batch; ++bi)
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double ref = 0;
            for (int64_t p = 0; p < k; ++p) {
              const float x = ta ? av[size_t((bi * k + p) * m + i)] : av[size_t((bi * m + i) * k + p)];
              const float y = tb ? bv[size_t((bi * n + j) * k + p)] : bv[size_t((bi * k + p) * n + j)];
              ref += double(x) * double(y);
            }
            const float got = out[0][size_t((bi * m + i) * n + j)];
            EXPECT_NEAR(got, ref, 1e-5) << "C[" << bi << "," << i << "," << j << "]";
            EXPECT_EQ(got, out[size_t(1 + bi)][size_t(i * n + j)]) << "batched and rank-2 products differ";
          }
    }
}

TEST(MathAndLayoutOpsForward, BatchedMatMulOnThreads) {
  // Large enough (> 1e6 flops) to run on the pool: with 3 threads a batch of
  // 4 spreads its entries over them, a batch of 2 spreads each entry's rows.
  const int previous = num_threads();
  set_num_threads(3);
  const int64_t m = 40, k = 70, n = 90;
  std::mt19937 rng(12);
  for (int64_t batch : {4, 2}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    const Shape sa{batch, k, m}, sb{batch, n, k};
    const std::vector<float> av = uniform(sa, rng, -1, 1).to_vector(), bv = uniform(sb, rng, -1, 1).to_vector();
    Runner r;
    Value c = r.g.matmul(r.in(av, sa), r.in(bv, sb), true, true);
    const std::vector<float> got = r.eval({c})[0];
    double worst = 0;
    for (int64_t bi = 0; bi < batch; ++bi)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double ref = 0;
          for (int64_t p = 0; p < k; ++p)
            ref += double(av[size_t((bi * k + p) * m + i)]) * double(bv[size_t((bi * n + j) * k + p)]);
          worst = std::max(worst, std::fabs(got[size_t((bi * m + i) * n + j)] - ref));
        }
    EXPECT_LT(worst, 1e-4);
  }
  set_num_threads(previous);
}

// ---------------------------------------------------------------------------
// n-ary Concat.

TEST(MathAndLayoutOpsForward, ConcatOfThreeAlongEachAxis) {
  Runner r;
  Value a = r.in({1, 2, 3, 4}, {2, 2}), b = r.in({5, 6}, {2, 1}), c = r.in({7, 8, 9, 10, 11, 12}, {2, 3});
  std::vector<Value> xs{a, b, c};
  Value y1 = r.g.concat(xs, 1);
  Value d = r.in({13, 14}, {1, 2});
  std::vector<Value> ys{a, d, a};
  Value y0 = r.g.concat(ys, 0);
  EXPECT_EQ(r.g.shape(y1), (Shape{2, 6}));
  EXPECT_EQ(r.g.shape(y0), (Shape{5, 2}));
  auto out = r.eval({y1, y0});
  EXPECT_EQ(out[0], (std::vector<float>{1, 2, 5, 7, 8, 9, 3, 4, 6, 10, 11, 12}));
  EXPECT_EQ(out[1], (std::vector<float>{1, 2, 3, 4, 13, 14, 1, 2, 3, 4}));
}

TEST(MathAndLayoutOpsForward, ConcatOfSixInt32Inputs) {
  Runner r;
  std::vector<Value> xs;
  for (int32_t i = 0; i < 6; ++i) xs.push_back(r.in(int32_tensor({i, 10 + i}, {2, 1})));
  Value y = r.g.concat(xs, 1);
  ASSERT_EQ(r.g.shape(y), (Shape{2, 6}));
  Executable exe(std::move(r.g), {y});
  for (auto& [v, t] : r.binds) exe.bind(v, t);
  exe.run();
  const int32_t* p = exe.output(y).data<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(p, p + 12), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15}));
}

// ---------------------------------------------------------------------------
// Dropout with a counter input.

TEST(DropoutOp, CounterInputDrawsTheMaskOfTheRunCounter) {
  const Shape s{8, 16};
  const std::vector<float> xv = iota(s.numel(), 1.0f);
  const uint64_t c = 41;
  // A graph run after set_rng_counter(c) runs with counter c + 1 (run()
  // advances it first); the op given counter c + 1 must draw the same mask,
  // whatever its own run's counter.
  Runner plain;
  Value y_plain = plain.g.dropout(plain.in(xv, s), 0.5f, /*seed=*/9);
  const std::vector<float> want = plain.eval({y_plain}, c)[0];
  auto with_counter = [&](int64_t counter_value) {
    Runner r;
    Tensor counter = Tensor::zeros({1}, DType::Int64);
    counter.data<int64_t>()[0] = counter_value;
    Value y = r.g.dropout(r.in(xv, s), 0.5f, 9, r.in(counter));
    return r.eval({y}, /*counter=*/1000)[0];
  };
  EXPECT_EQ(with_counter(int64_t(c + 1)), want);
  EXPECT_NE(with_counter(int64_t(c + 2)), want);  // the counter matters (the check above is not vacuous)
  int dropped = 0;
  for (float v : want) dropped += v == 0.0f;
  EXPECT_GT(dropped, 0);
  EXPECT_LT(dropped, int(want.size()));
}

// ---------------------------------------------------------------------------
// Bad input: the exception type and the words of its message.

TEST(MathAndLayoutOpsErrors, Div) {
  Graph g;
  Value a = g.input("a", {2, 3}), b = g.input("b", {4}), i = g.input("i", {2, 3}, DType::Int32);
  EXPECT_TRUE(throws<ShapeError>([&] { g.div(a, b); }, {"div", "{2, 3}", "{4}"}));
  EXPECT_TRUE(throws<TypeError>([&] { g.div(i, a); }, {"div", "float32", "int32"}));
}

TEST(MathAndLayoutOpsErrors, UnaryOpsNeedFloat) {
  Graph g;
  Value i = g.input("i", {3}, DType::Int32);
  EXPECT_TRUE(throws<TypeError>([&] { g.exp(i); }, {"exp", "float32", "int32"}));
  EXPECT_TRUE(throws<TypeError>([&] { g.log(i); }, {"log", "float32"}));
  EXPECT_TRUE(throws<TypeError>([&] { g.sqrt(i); }, {"sqrt", "float32"}));
  EXPECT_TRUE(throws<TypeError>([&] { g.pow(i, 2.0f); }, {"pow", "float32"}));
  EXPECT_TRUE(throws<TypeError>([&] { g.clamp(i, 0.0f, 1.0f); }, {"clamp", "float32"}));
}

TEST(MathAndLayoutOpsErrors, ClampBounds) {
  Graph g;
  Value x = g.input("x", {3});
  EXPECT_TRUE(throws<ValueError>([&] { g.clamp(x, 1.0f, -1.0f); }, {"clamp", "clamp_min <= clamp_max", "1.0", "-1.0"}));
  EXPECT_TRUE(throws<ValueError>([&] { g.clamp(x, NAN, 1.0f); }, {"clamp", "nan"}));
  EXPECT_NO_THROW(g.clamp(x, 1.0f, 1.0f));
  EXPECT_NO_THROW(g.clamp(x, -INFINITY, INFINITY));
}

TEST(MathAndLayoutOpsErrors, ReductionAxis) {
  Graph g;
  Value x = g.input("x", {2, 3, 4});
  EXPECT_TRUE(throws<ShapeError>([&] { g.max_axis(x, 3); }, {"max_axis", "axis 3", "{2, 3, 4}"}));
  EXPECT_TRUE(throws<ShapeError>([&] { g.sum_axis(x, -1); }, {"sum_axis", "axis -1", "{2, 3, 4}"}));
  EXPECT_TRUE(throws<ShapeError>([&] { g.mean_axis(g.input("s", {}), 0); }, {"mean_axis", "scalar"}));
  EXPECT_TRUE(throws<ShapeError>([&] { g.max_axis(g.input("e", {2, 0}), 1); }, {"max_axis", "empty", "{2, 0}"}));
  EXPECT_TRUE(throws<TypeError>([&] { g.sum_axis(g.input("i", {2}, DType::Int32), 0); }, {"sum_axis", "float32"}));
}

TEST(MathAndLayoutOpsErrors, Transpose) {
  Graph g;
  Value x = g.input("x", {2, 3, 4});
  EXPECT_TRUE(throws<ShapeError>([&] { g.transpose(g.input("v", {5}), 0, 0); }, {"transpose", "rank 2", "{5}"}));
  EXPECT_TRUE(throws<ShapeError>([&] { g.transpose(x, 0, 3); }, {"transpose", "axes 0 and 3", "{2, 3, 4}"}));
  EXPECT_TRUE(throws<ShapeError>([&] { g.transpose(x, -1, 1); }, {"transpose", "-1", "{2, 3, 4}"}));
}

TEST(MathAndLayoutOpsErrors, BatchedMatMul) {
  Graph g;
  Value a = g.input("a", {2, 3, 4}), b = g.input("b", {3, 4, 5}), c = g.input("c", {4, 5});
  Value d = g.input("d", {2, 5, 5}), e = g.input("e", {2, 5, 4});
  EXPECT_TRUE(throws<ShapeError>([&] { g.matmul(a, b); }, {"matmul", "batch", "{2, 3, 4}", "{3, 4, 5}"}));
  EXPECT_TRUE(throws<ShapeError>([&] { g.matmul(a, c); }, {"matmul", "rank 3", "{2, 3, 4}", "{4, 5}"}));
  EXPECT_TRUE(throws<ShapeError>([&] { g.matmul(c, a); }, {"matmul", "{4, 5}", "{2, 3, 4}"}));
  EXPECT_TRUE(
      throws<ShapeError>([&] { g.matmul(a, d); }, {"matmul", "inner dimensions differ", "{2, 3, 4}", "{2, 5, 5}"}));
  EXPECT_EQ(g.shape(g.matmul(a, e, false, true)), (Shape{2, 3, 5}));
  EXPECT_EQ(g.shape(g.matmul(e, d, true, false)), (Shape{2, 4, 5}));
  EXPECT_TRUE(throws<ShapeError>([&] { g.matmul(g.input("r4", {1, 2, 3, 4}), g.input("r4b", {1, 2, 4, 3})); },
                                 {"matmul", "rank 2"}));
}

TEST(MathAndLayoutOpsErrors, Concat) {
  Graph g;
  Value a = g.input("a", {2, 3}), b = g.input("b", {2, 4}), i = g.input("i", {2, 3}, DType::Int32);
  std::vector<Value> mismatched{a, b, a};
  EXPECT_TRUE(throws<ShapeError>([&] { g.concat(mismatched, 0); }, {"concat", "{2, 3}", "{2, 4}", "axis 0"}));
  std::vector<Value> mixed{a, a, i};
  EXPECT_TRUE(throws<TypeError>([&] { g.concat(mixed, 0); }, {"concat", "dtype", "float32", "int32"}));
  std::vector<Value> one{a};
  EXPECT_TRUE(throws<ShapeError>([&] { g.concat(one, 0); }, {"concat", "2..7 inputs", "got 1"}));
  std::vector<Value> eight(8, a);
  EXPECT_TRUE(throws<ShapeError>([&] { g.concat(eight, 0); }, {"concat", "2..7 inputs", "got 8"}));
  std::vector<Value> ranks{a, g.input("v", {3}), a};
  EXPECT_TRUE(throws<ShapeError>([&] { g.concat(ranks, 0); }, {"concat", "{2, 3}", "{3}"}));
  std::vector<Value> three{a, a, a};
  EXPECT_TRUE(throws<ShapeError>([&] { g.concat(three, 2); }, {"concat", "axis 2"}));
}

TEST(MathAndLayoutOpsErrors, DropoutCounter) {
  Graph g;
  Value x = g.input("x", {2, 3});
  EXPECT_TRUE(throws<TypeError>([&] { g.dropout(x, 0.5f, 1, g.input("c32", {1}, DType::Int32)); },
                                {"dropout", "counter", "int64", "int32"}));
  EXPECT_TRUE(throws<ShapeError>([&] { g.dropout(x, 0.5f, 1, g.input("c2", {2}, DType::Int64)); },
                                 {"dropout", "counter", "{2}"}));
}

}  // namespace
