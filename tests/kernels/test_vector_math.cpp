// The vectorised transcendental kernels (exp, log, tanh, erf, sigmoid, GELU and its tanh form,
// SiLU through SLEEF's 1.0-ulp functions where built: kernels/vector_math.h)
// against double-precision references, in ulps of the float result, over a
// dense grid of each function's useful range; and the edges (overflow to
// infinity and to zero, log of 0 and of negatives, NaN) as the scalar
// formulas give them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "tensorgrad/backend/executable.h"
#include "tensorgrad/graph/graph.h"
#include "test_support.h"

using namespace tensorgrad;
using test_support::ulps;

namespace {

std::vector<float> run_op(OpKind op, const std::vector<float>& x) {
  Graph g;
  Value in = g.input("x", Shape{int64_t(x.size())});
  Value y = g.apply(op, {in});
  Executable exe(std::move(g), {y});
  const Tensor bound = Tensor::from_vector(x, Shape{int64_t(x.size())});  // bind keeps a view: alive until run
  exe.bind(in, bound);
  exe.run();
  return exe.output(y).to_vector();
}

// PyTorch's approximate="tanh", 0.5 x (1 + tanh(u)) with u = sqrt(2 / pi) (x + 0.044715 x^3), in double
// as x / (1 + exp(-2u)), the same function: 1 + tanh(u) cancels to 0 in double too, past x = -5.
double gelu_tanh_reference(double v) {
  const double u = std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v);
  return v / (1.0 + std::exp(-2.0 * u));
}

struct Case {
  OpKind op;
  const char* name;
  double lo, hi;
  std::function<double(double)> reference;
  double max_ulps;
};

// Worst error over 200,001 points, below the bound the kernel's formula
// allows: 1 ulp for exp, log, tanh and erf (SLEEF's u10, std's below), about
// 2.5 for the compositions (an exp, an add and a division each rounding).
TEST(VectorMath, WithinTheirUlpBoundsOverTheRange) {
  const std::vector<Case> cases = {
      {OpKind::Exp, "exp", -87.0, 88.0, [](double v) { return std::exp(v); }, 1.0},
      {OpKind::Log, "log", 1e-30, 1e30, [](double v) { return std::log(v); }, 1.0},
      {OpKind::Tanh, "tanh", -10.0, 10.0, [](double v) { return std::tanh(v); }, 1.0},
      {OpKind::Erf, "erf", -5.0, 5.0, [](double v) { return std::erf(v); }, 1.0},
      {OpKind::Sigmoid, "sigmoid", -30.0, 30.0, [](double v) { return 1.0 / (1.0 + std::exp(-v)); }, 3.0},
      {OpKind::Silu, "silu", -30.0, 30.0, [](double v) { return v / (1.0 + std::exp(-v)); }, 3.0},
      // GELU as x erfc(-x / sqrt 2) / 2: no cancellation in the negative
      // tail (the tail's own test is below).
      {OpKind::Gelu, "gelu", -2.0, 8.0, [](double v) { return 0.5 * v * std::erfc(-v / std::sqrt(2.0)); }, 8.0},
      // GELU's tanh form: an exp, a division and the rounding of u, scaled by |u| (the tail's test is below).
      {OpKind::GeluTanh, "gelu_tanh", -2.0, 8.0, gelu_tanh_reference, 8.0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const int n = 200001;
    std::vector<float> x(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      const double t = double(i) / double(n - 1);
      // log: a geometric grid over the decades; the rest: a linear one.
      x[size_t(i)] = c.op == OpKind::Log ? float(c.lo * std::pow(c.hi / c.lo, t)) : float(c.lo + (c.hi - c.lo) * t);
    }
    const std::vector<float> y = run_op(c.op, x);
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double want = c.reference(double(x[i]));
      if (want == 0.0) continue;
      const double e = ulps(y[i], want);
      if (!(e <= worst)) worst = e, at = i;
    }
    std::printf("[ info ] %-8s worst %.2f ulp (at x = %g)\n", c.name, worst, double(x[at]));
    EXPECT_LE(worst, c.max_ulps) << "worst at x = " << x[at] << ": " << y[at] << " against " << c.reference(x[at]);
  }
}

// Below x = -2 GELU is tiny and steep: the rounding of -x / sqrt 2 alone
// moves erfc by up to 2 x^2 2^-24 relative (6e-6 at x = -10), so the bound is
// relative. 1 + erf(x / sqrt 2) would have cancelled to nothing there.
TEST(VectorMath, GeluNegativeTailKeepsItsDigits) {
  std::vector<float> x;
  for (int i = 0; i <= 8000; ++i) x.push_back(-10.0f + 8.0f * float(i) / 8000.0f);
  const std::vector<float> y = run_op(OpKind::Gelu, x);
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i], want = 0.5 * v * std::erfc(-v / std::sqrt(2.0));
    ASSERT_LE(std::fabs(double(y[i]) - want), 3.0 * v * v * std::ldexp(1.0, -24) * std::fabs(want) + 1e-40)
        << "x = " << x[i] << ": " << y[i] << " against " << want;
  }
}

// The same for the tanh form: exp(-2u) moves by 2 |u| times the relative
// rounding of u (a few 2^-24), and the quotient keeps the rest; until
// exp(-2u) overflows below x = -9.5 the result stays normal.
TEST(VectorMath, GeluTanhNegativeTailKeepsItsDigits) {
  std::vector<float> x;
  for (int i = 0; i <= 7500; ++i) x.push_back(-9.5f + 7.5f * float(i) / 7500.0f);
  const std::vector<float> y = run_op(OpKind::GeluTanh, x);
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i], u = std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v);
    const double want = gelu_tanh_reference(v);
    ASSERT_LE(std::fabs(double(y[i]) - want), (8.0 * std::fabs(u) + 4.0) * std::ldexp(1.0, -24) * std::fabs(want))
        << "x = " << x[i] << ": " << y[i] << " against " << want;
  }
}

TEST(VectorMath, EdgesAsTheScalarFormulas) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x{-1000.0f, -100.0f, 0.0f, 100.0f, 1000.0f, -inf, inf, nan};
  // All 8 at once (the 8-lane body), and one at a time (the scalar tail).
  for (bool lanes : {true, false}) {
    SCOPED_TRACE(lanes ? "8 lanes" : "one at a time");
    auto op = [&](OpKind k) {
      if (lanes) return run_op(k, x);
      std::vector<float> out;
      for (float v : x) out.push_back(run_op(k, {v})[0]);
      return out;
    };
    const std::vector<float> e = op(OpKind::Exp), s = op(OpKind::Sigmoid), t = op(OpKind::Tanh), l = op(OpKind::Log),
                             f = op(OpKind::Erf), gt = op(OpKind::GeluTanh);
    EXPECT_EQ(e[0], 0.0f);
    EXPECT_EQ(e[2], 1.0f);
    EXPECT_EQ(e[4], inf);
    EXPECT_EQ(e[5], 0.0f);
    EXPECT_EQ(s[0], 0.0f);
    EXPECT_EQ(s[2], 0.5f);
    EXPECT_EQ(s[4], 1.0f);
    EXPECT_EQ(t[1], -1.0f);
    EXPECT_EQ(t[3], 1.0f);
    EXPECT_EQ(t[6], 1.0f);
    EXPECT_TRUE(std::isnan(l[0]));
    EXPECT_EQ(l[2], -inf);
    EXPECT_EQ(l[6], inf);
    EXPECT_EQ(f[0], -1.0f);
    EXPECT_EQ(f[2], 0.0f);
    EXPECT_EQ(f[4], 1.0f);
    EXPECT_EQ(f[5], -1.0f);
    EXPECT_EQ(f[6], 1.0f);
    // GELU's tanh form: -0 far below (x / inf), x itself far above, NaN at -inf as the formula in double.
    EXPECT_EQ(gt[0], 0.0f);
    EXPECT_EQ(gt[1], 0.0f);
    EXPECT_EQ(gt[2], 0.0f);
    EXPECT_EQ(gt[3], 100.0f);
    EXPECT_EQ(gt[4], 1000.0f);
    EXPECT_TRUE(std::isnan(gt[5]));
    EXPECT_EQ(gt[6], inf);
    for (const std::vector<float>* v : {&e, &s, &t, &l, &f, &gt}) EXPECT_TRUE(std::isnan((*v)[7]));
  }
}

}  // namespace
