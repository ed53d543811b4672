// The fused ops of the LLaMA family's layers, through the graph path
// (Builder -> Graph -> Executable on the CPU):
// - RmsNorm: values against x / sqrt(mean(x^2) + eps) * w in double (with
//   and without the weight, D off the vector width), gradients of x and w
//   against central finite differences.
// - Rope: values against the rotation written out in double (both pairings,
//   dims < D, scaling_factor != 1, positions not starting at 0), the
//   gradient against finite differences, the inverse flag undoing it.
// - Attention with fewer key-value rows (grouped-query attention): values
//   and gradients equal to the same op on k and v repeated explicitly (query
//   row n reads row n / group), causal and masked, and finite differences.
// - Bad input: typed errors naming what was expected.
// Tolerances: the CPU's float32 sums against double, 1e-5 relative plus
// 1e-6 absolute (rows of at most 70 terms of size 1); the rope's angles are
// double on both sides, so only the final float32 products differ (1e-6).
// The finite differences use gradient_check.h's step 1e-2, |num - ana| <=
// 1e-3 + 1e-2 |num|, as tests/ops/test_attention_op.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gradient_check.h"
#include "tensorgrad/backend/executable.h"
#include "tensorgrad/graph/graph.h"
#include "test_support.h"

using namespace tensorgrad;
using test_support::throws;
using test_support::uniform;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

Tensor positions_of(const std::vector<int32_t>& p) {
  return Tensor::from_vector(std::span<const int32_t>(p), Shape{int64_t(p.size())});
}

// Runs a one-output graph with its inputs bound, returns the output's values.
std::vector<float> run(Graph&& g, Value y, const std::vector<std::pair<Value, Tensor>>& binds) {
  Executable exe(std::move(g), {y});
  for (const auto& [v, t] : binds) exe.bind(v, t);
  exe.run();
  return exe.output(y).to_vector();
}

// x {..., D} normalized per row in double.
std::vector<double> rms_reference(const Tensor& x, const Tensor& w, float eps) {
  const int64_t d = x.shape()[-1], rows = x.numel() / d;
  const float* p = x.data<float>();
  std::vector<double> out(size_t(x.numel()));
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t j = 0; j < d; ++j) ss += double(p[r * d + j]) * p[r * d + j];
    const double inv = 1.0 / std::sqrt(ss / double(d) + double(eps));
    for (int64_t j = 0; j < d; ++j)
      out[size_t(r * d + j)] = p[r * d + j] * inv * (w.defined() ? double(w.data<float>()[j]) : 1.0);
  }
  return out;
}

// x {B, T, H, D} rotated in double: pair i = (lo, hi) by p_t / scaling theta^(-2i / dims).
std::vector<double> rope_reference(const Tensor& x, const std::vector<int32_t>& pos, const RopeOptions& o) {
  const Shape& s = x.shape();
  const int64_t d = s[3], dims = o.dims ? o.dims : d, half = dims / 2;
  const float* p = x.data<float>();
  std::vector<double> out(p, p + x.numel());
  for (int64_t b = 0; b < s[0]; ++b)
    for (int64_t t = 0; t < s[1]; ++t)
      for (int64_t h = 0; h < s[2]; ++h) {
        const int64_t row = ((b * s[1] + t) * s[2] + h) * d;
        for (int64_t i = 0; i < half; ++i) {
          const double angle =
              double(pos[size_t(t)]) / double(o.scaling_factor) * std::pow(double(o.theta), -2.0 * double(i) / double(dims));
          const int64_t lo = o.pairing == RopePairing::Halves ? i : 2 * i;
          const int64_t hi = o.pairing == RopePairing::Halves ? i + half : 2 * i + 1;
          const double a = p[row + lo], c = p[row + hi];
          out[size_t(row + lo)] = a * std::cos(angle) - c * std::sin(angle);
          out[size_t(row + hi)] = a * std::sin(angle) + c * std::cos(angle);
        }
      }
  return out;
}

void expect_near_all(const std::vector<float>& got, const std::vector<double>& want, double rtol, double atol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got[i], want[i], atol + rtol * std::abs(want[i])) << "element " << i;
}

}  // namespace

TEST(RmsNormOp, ForwardMatchesTheDoubleReference) {
  uint32_t seed = 1;
  for (const Shape& s : {Shape{1, 1}, Shape{3, 5}, Shape{2, 4, 37}, Shape{5, 64}, Shape{2, 70}})
    for (bool weighted : {false, true}) {
      SCOPED_TRACE(s.str() + (weighted ? " weighted" : ""));
      std::mt19937 rng(seed++);
      const Tensor x = uniform(s, rng, -2, 2), w = weighted ? uniform({s[-1]}, rng, -1.5, 1.5) : Tensor();
      Graph g;
      const Value xv = g.input("x", s), wv = weighted ? g.input("w", w.shape()) : Value{};
      const Value y = g.rms_norm(xv, 1e-5f, wv);
      ASSERT_EQ(g.shape(y), s);
      std::vector<std::pair<Value, Tensor>> binds{{xv, x}};
      if (weighted) binds.push_back({wv, w});
      expect_near_all(run(std::move(g), y, binds), rms_reference(x, w, 1e-5f), 1e-5, 1e-6);
    }
  // A zero row gives 0, finite (eps keeps the root away from 0).
  Graph g;
  const Value xv = g.input("x", {1, 4});
  const Value y = g.rms_norm(xv, 1e-6f);
  EXPECT_EQ(run(std::move(g), y, {{xv, Tensor::zeros({1, 4})}}), (std::vector<float>{0, 0, 0, 0}));
}

TEST(RmsNormOp, GradientsMatchFiniteDifferences) {
  uint32_t seed = 10;
  for (const Shape& s : {Shape{3, 5}, Shape{2, 2, 19}})
    for (bool weighted : {false, true}) {
      SCOPED_TRACE(s.str() + (weighted ? " weighted" : ""));
      test_support::GradCheck t(seed++);
      std::mt19937 rng(seed++);
      const Value x = t.param(uniform(s, rng, -2, 2), "x");
      const Value w = weighted ? t.param(uniform({s[-1]}, rng, -1.5, 1.5), "w") : Value{};
      const Value y = t.g.rms_norm(x, 1e-3f, w);
      const test_support::CheckResult r = t.check(t.project(y));
      EXPECT_TRUE(r.ok) << r.message;
    }
}

TEST(RopeOp, ForwardMatchesTheDoubleReference) {
  struct Case {
    Shape x;
    RopeOptions o;
    std::vector<int32_t> pos;
  };
  const std::vector<Case> cases = {
      {{2, 3, 2, 8}, {0, 10000.0f, 1.0f, RopePairing::Halves}, {0, 1, 2}},
      {{2, 3, 2, 8}, {0, 10000.0f, 1.0f, RopePairing::Adjacent}, {0, 1, 2}},
      {{1, 4, 3, 10}, {6, 500.0f, 1.0f, RopePairing::Halves}, {7, 3, 12, 100}},      // dims < D, not from 0
      {{1, 4, 3, 10}, {6, 500.0f, 1.0f, RopePairing::Adjacent}, {7, 3, 12, 100}},
      {{2, 5, 1, 16}, {16, 10000.0f, 4.0f, RopePairing::Halves}, {5, 6, 7, 8, 9}},   // linear scaling
      {{2, 5, 1, 16}, {8, 1e6f, 2.5f, RopePairing::Adjacent}, {1000, 0, 2047, 3, 9}},  // LLaMA 3's base
  };
  uint32_t seed = 30;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.x.str() + " dims " + std::to_string(c.o.dims) + " pairing " + std::to_string(int(c.o.pairing)) +
                 " scaling " + std::to_string(c.o.scaling_factor));
    std::mt19937 rng(seed++);
    const Tensor x = uniform(c.x, rng, -1, 1), pos = positions_of(c.pos);
    Graph g;
    const Value xv = g.input("x", c.x), pv = g.input("positions", pos.shape(), DType::Int32);
    const Value y = g.rotary_embedding(xv, pv, c.o);
    ASSERT_EQ(g.shape(y), c.x);
    expect_near_all(run(std::move(g), y, {{xv, x}, {pv, pos}}), rope_reference(x, c.pos, c.o), 1e-6, 1e-6);
  }
}

// The rotation keeps each pair's length, and the inverse flag turns it back.
TEST(RopeOp, InverseUndoesTheRotation) {
  std::mt19937 rng(3);
  const Tensor x = uniform({2, 3, 2, 6}, rng, -1, 1), pos = positions_of({4, 9, 30});
  for (RopePairing pairing : {RopePairing::Halves, RopePairing::Adjacent}) {
    Graph g;
    const Value xv = g.input("x", x.shape()), pv = g.input("positions", pos.shape(), DType::Int32);
    OpAttrs at;
    at.rope.pairing = pairing;
    at.rope.dims = 4;
    const Value turned = g.apply(OpKind::Rope, {xv, pv}, at);
    at.flags = kRopeInverse;
    const Value back = g.apply(OpKind::Rope, {turned, pv}, at);
    const std::vector<float> got = run(std::move(g), back, {{xv, x}, {pv, pos}}), want = x.to_vector();
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << i;
  }
}

TEST(RopeOp, GradientMatchesFiniteDifferences) {
  uint32_t seed = 50;
  for (RopePairing pairing : {RopePairing::Halves, RopePairing::Adjacent}) {
    test_support::GradCheck t(seed++);
    std::mt19937 rng(seed++);
    const Value x = t.param(uniform({2, 3, 2, 6}, rng, -1, 1), "x");
    const Value pos = t.data(positions_of({2, 0, 5}), "positions");
    RopeOptions o;
    o.dims = 4;
    o.theta = 100.0f;
    o.scaling_factor = 2.0f;
    o.pairing = pairing;
    const test_support::CheckResult r = t.check(t.project(t.g.rotary_embedding(x, pos, o)));
    EXPECT_TRUE(r.ok) << r.message;
  }
}

TEST(LlamaOps, BadInputIsATypedError) {
  Graph g;
  const Value x = g.input("x", {2, 3, 4, 8}), pos = g.input("p", {3}, DType::Int32);
  RopeOptions odd;
  odd.dims = 3;
  EXPECT_TRUE(throws<ValueError>([&] { g.rotary_embedding(x, pos, odd); }, {"rope", "even", "3"}));
  RopeOptions wide;
  wide.dims = 10;
  EXPECT_TRUE(throws<ShapeError>([&] { g.rotary_embedding(x, pos, wide); }, {"rope", "dims 10", "8", "{2, 3, 4, 8}"}));
  EXPECT_TRUE(throws<ShapeError>([&] { g.rotary_embedding(g.input("x5", {1, 3, 1, 5}), pos, {}); },
                                 {"rope", "5", "even"}));
  EXPECT_TRUE(throws<TypeError>([&] { g.rotary_embedding(x, g.input("pf", {3}), {}); }, {"positions", "int32", "float32"}));
  EXPECT_TRUE(throws<ShapeError>([&] { g.rotary_embedding(x, g.input("p4", {4}, DType::Int32), {}); },
                                 {"positions", "{3}", "{4}"}));
  EXPECT_TRUE(throws<ShapeError>([&] { g.rotary_embedding(g.input("x3", {3, 4, 8}), pos, {}); }, {"rope", "rank 4"}));
  RopeOptions base;
  base.theta = 0.0f;
  EXPECT_TRUE(throws<ValueError>([&] { g.rotary_embedding(x, pos, base); }, {"theta", "> 0"}));
  RopeOptions scaling;
  scaling.scaling_factor = -1.0f;
  EXPECT_TRUE(throws<ValueError>([&] { g.rotary_embedding(x, pos, scaling); }, {"scaling_factor", "> 0"}));

  EXPECT_TRUE(throws<ValueError>([&] { g.rms_norm(x, 0.0f); }, {"rms_norm", "epsilon", "> 0"}));
  EXPECT_TRUE(throws<ValueError>([&] { g.rms_norm(x, NAN); }, {"rms_norm", "epsilon"}));
  EXPECT_TRUE(throws<ShapeError>([&] { g.rms_norm(x, 1e-6f, g.input("w", {4})); }, {"rms_norm", "weight", "{8}", "{4}"}));
  EXPECT_TRUE(throws<ShapeError>([&] { g.rms_norm(g.input("s", Shape{}), 1e-6f); }, {"rms_norm", "scalar"}));
  EXPECT_TRUE(throws<TypeError>([&] { g.rms_norm(pos, 1e-6f); }, {"rms_norm"}));

  const Value q = g.input("q", {6, 3, 4}), k = g.input("k", {4, 5, 4}), v = g.input("v", {4, 5, 4});
  EXPECT_TRUE(throws<ShapeError>([&] { g.scaled_dot_product_attention(q, k, v); },
                                 {"attention", "4 rows", "must divide", "6", "{6, 3, 4}", "{4, 5, 4}"}));
  EXPECT_TRUE(throws<ShapeError>([&] { g.scaled_dot_product_attention(q, g.input("k3", {3, 5, 4}), v); },
                                 {"attention", "{3, 5, 4}"}));
}

// A negative position reaches the CPU kernel (the shape rule cannot see
// data): a ValueError naming it and its step, nothing written.
TEST(RopeOp, NegativePositionIsAValueErrorOnTheCpu) {
  Graph g;
  const Value x = g.input("x", {1, 3, 1, 4}), pv = g.input("p", {3}, DType::Int32);
  const Value y = g.rotary_embedding(x, pv, {});
  Executable exe(std::move(g), {y});
  exe.bind(x, Tensor::zeros({1, 3, 1, 4}));
  exe.bind(pv, positions_of({0, -2, 1}));
  EXPECT_TRUE(throws<ValueError>([&] { exe.run(); }, {"position -2", "step 1", "negative"}));
}

namespace {

// k {Nkv, L, D} with each row repeated `group` times in place: row n of the result is row n / group.
Tensor repeat_rows(const Tensor& k, int64_t group) {
  const Shape& s = k.shape();
  Tensor out = Tensor::empty({s[0] * group, s[1], s[2]});
  const int64_t per = s[1] * s[2];
  for (int64_t n = 0; n < s[0] * group; ++n)
    std::copy_n(k.data<float>() + n / group * per, per, out.data<float>() + n * per);
  return out;
}

struct GqaCase {
  int64_t nkv, group, lq, lk, d, dv;
  bool causal = false;
  Shape mask;
};

// The output and the gradients of q, k, v of sum(attention(q, k, v) * w), through a graph.
std::vector<std::vector<float>> attention_and_gradients(const GqaCase& c, const Tensor& q, const Tensor& k,
                                                        const Tensor& v, const Tensor& mask, const Tensor& w) {
  Graph g;
  const Value qv = g.parameter(q, "q", true), kv = g.parameter(k, "k", true), vv = g.parameter(v, "v", true);
  Builder::AttentionOptions o;
  o.causal = c.causal;
  const Value mv = mask.defined() ? g.input("mask", mask.shape()) : Value{};
  o.mask = mv;
  const Value y = g.scaled_dot_product_attention(qv, kv, vv, o);
  const Value wv = g.input("w", w.shape());
  const Value loss = g.sum(g.mul(y, wv));
  std::vector<Value> outs{y};
  for (Value d : g.gradients(loss, std::vector<Value>{qv, kv, vv})) outs.push_back(d);
  Executable exe(std::move(g), outs);
  exe.bind(wv, w);
  if (mask.defined()) exe.bind(mv, mask);
  exe.run();
  std::vector<std::vector<float>> r;
  for (Value o : outs) r.push_back(exe.output(o).to_vector());
  return r;
}

}  // namespace

// Grouped-query attention: the same values and gradients as the op on k and
// v repeated row by row (dk and dv of the repeated ones summed over each
// group), without the copy.
TEST(AttentionOp, GroupedQueryAttentionEqualsRepeatedKeysAndValues) {
  const std::vector<GqaCase> cases = {
      {2, 3, 5, 7, 4, 3},
      {1, 4, 6, 6, 4, 4, true},
      {3, 2, 3, 9, 4, 2, true},                   // queries last (a key-value cache)
      {2, 2, 70, 66, 8, 5, true},                 // several tiles
      {2, 3, 4, 6, 5, 3, false, Shape{6, 1, 6}},  // a padding mask per query row
      {2, 2, 4, 6, 5, 3, true, Shape{1, 4, 6}},
  };
  uint32_t seed = 70;
  for (const GqaCase& c : cases) {
    SCOPED_TRACE("nkv " + std::to_string(c.nkv) + " group " + std::to_string(c.group) + " causal " +
                 std::to_string(c.causal) + " mask " + c.mask.str());
    std::mt19937 rng(seed++);
    const int64_t n = c.nkv * c.group;
    const Tensor q = uniform({n, c.lq, c.d}, rng, -1, 1), k = uniform({c.nkv, c.lk, c.d}, rng, -1, 1),
                 v = uniform({c.nkv, c.lk, c.dv}, rng, -1, 1), w = uniform({n, c.lq, c.dv}, rng, -1, 1);
    Tensor mask;
    if (c.mask.rank()) {
      mask = Tensor::zeros(c.mask);
      for (int64_t i = 0; i < mask.numel(); i += 4) mask.data<float>()[i] = -kInf;
    }
    const auto grouped = attention_and_gradients(c, q, k, v, mask, w);
    const auto repeated = attention_and_gradients(c, q, repeat_rows(k, c.group), repeat_rows(v, c.group), mask, w);
    expect_near_all(grouped[0], std::vector<double>(repeated[0].begin(), repeated[0].end()), 1e-6, 1e-6);
    expect_near_all(grouped[1], std::vector<double>(repeated[1].begin(), repeated[1].end()), 1e-5, 1e-6);
    for (int which = 2; which <= 3; ++which) {  // dk, dv: the repeated ones summed over each group
      const std::vector<float>& rep = repeated[size_t(which)];
      const size_t per = rep.size() / size_t(n);
      std::vector<double> want(per * size_t(c.nkv), 0.0);
      for (size_t r = 0; r < size_t(n); ++r)
        for (size_t e = 0; e < per; ++e) want[r / size_t(c.group) * per + e] += rep[r * per + e];
      expect_near_all(grouped[size_t(which)], want, 1e-5, 1e-6);
    }
  }
}

TEST(AttentionOp, GroupedQueryGradientsMatchFiniteDifferences) {
  uint32_t seed = 90;
  for (bool causal : {false, true}) {
    test_support::GradCheck t(seed++);
    std::mt19937 rng(seed++);
    const Value q = t.param(uniform({4, 3, 2}, rng, -1, 1), "q");
    const Value k = t.param(uniform({2, 4, 2}, rng, -1, 1), "k");
    const Value v = t.param(uniform({2, 4, 3}, rng, -1, 1), "v");
    Builder::AttentionOptions o;
    o.causal = causal;
    const test_support::CheckResult r = t.check(t.project(t.g.scaled_dot_product_attention(q, k, v, o)));
    EXPECT_TRUE(r.ok) << r.message;
  }
}

// Every kernel of the three splits its work so that each output element is
// summed by one thread in a fixed order: 1 and 2 threads give the same bits
// (shapes large enough for several tasks: rows of RmsNorm, rows of Rope,
// key-value rows of the grouped attention's backward).
TEST(LlamaOps, OneAndTwoThreadsGiveTheSameBits) {
  test_support::ThreadsGuard guard;
  std::mt19937 rng(12);
  const Tensor x = uniform({4, 64, 4, 64}, rng, -1, 1), w = uniform({64}, rng, -1, 1);
  std::vector<int32_t> p(64);
  for (size_t i = 0; i < p.size(); ++i) p[i] = int32_t(3 * i + 1);
  const Tensor pos = positions_of(p);
  const Tensor q = uniform({8, 80, 16}, rng, -1, 1), k = uniform({2, 80, 16}, rng, -1, 1), v = uniform({2, 80, 16}, rng, -1, 1);
  auto run_all = [&] {
    Graph g;
    const Value xv = g.parameter(x, "x", true), wv = g.parameter(w, "w", true);
    const Value pv = g.input("p", pos.shape(), DType::Int32);
    RopeOptions o;
    o.pairing = RopePairing::Adjacent;
    const Value y = g.rotary_embedding(g.rms_norm(xv, 1e-6f, wv), pv, o);
    const Value qv = g.parameter(q, "q", true), kv = g.parameter(k, "k", true), vv = g.parameter(v, "v", true);
    Builder::AttentionOptions ao;
    ao.causal = true;
    const Value a = g.scaled_dot_product_attention(qv, kv, vv, ao);
    const Value loss = g.add(g.sum(g.mul(y, y)), g.sum(g.mul(a, a)));
    std::vector<Value> outs{y, a};
    for (Value d : g.gradients(loss, std::vector<Value>{xv, wv, qv, kv, vv})) outs.push_back(d);
    Executable exe(std::move(g), outs);
    exe.bind(pv, pos);
    exe.run();
    std::vector<std::vector<float>> r;
    for (Value out : outs) r.push_back(exe.output(out).to_vector());
    return r;
  };
  set_num_threads(1);
  const auto one = run_all();
  set_num_threads(2);
  const auto two = run_all();
  ASSERT_EQ(one.size(), two.size());
  for (size_t i = 0; i < one.size(); ++i)
    EXPECT_EQ(std::memcmp(one[i].data(), two[i].data(), one[i].size() * sizeof(float)), 0) << "output " << i;
}
