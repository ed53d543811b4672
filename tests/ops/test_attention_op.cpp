// The fused attention op (Attention, AttentionBackward): forward values and
// log-sum-exp against an unfused reference in double (masks, causal
// alignment, dropout, several tiles of queries and keys), gradients against
// central finite differences (the log-sum-exp column's included), NaN
// propagation, fully hidden rows, typed errors, and the planner's arena
// growing linearly with the sequence (no {L, L} matrix stored).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gradient_check.h"
#include "tensorgrad/backend/executable.h"
#include "tensorgrad/core/random.h"
#include "tensorgrad/graph/graph.h"
#include "test_support.h"

using namespace tensorgrad;
using test_support::throws;
using test_support::uniform;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// The random stream's counter, an int64 {1} holding c.
Tensor counter_of(int64_t c) {
  Tensor t = Tensor::empty(Shape{1}, DType::Int64);
  t.data<int64_t>()[0] = c;
  return t;
}

struct Case {
  int64_t n, lq, lk, d, dv;
  bool causal = false;
  Shape mask;  // empty: none
  float rate = 0.0f;
};

// The reference: per (b, i) the scores in double, softmax, dropout factors
// from core/random.h's hash, the weighted sum and the log-sum-exp.
std::vector<double> reference(const Case& c, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                              float scale, uint64_t seed, int64_t counter) {
  std::vector<double> out(size_t(c.n * c.lq * (c.dv + 1)));
  const uint64_t key = hash_random(seed, uint64_t(counter));
  for (int64_t b = 0; b < c.n; ++b)
    for (int64_t i = 0; i < c.lq; ++i) {
      std::vector<double> s(size_t(c.lk));
      double m = -INFINITY;
      for (int64_t j = 0; j < c.lk; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < c.d; ++e)
          dot += double(q.data<float>()[(b * c.lq + i) * c.d + e]) * double(k.data<float>()[(b * c.lk + j) * c.d + e]);
        double sc = double(float(dot) * scale);
        if (mask.defined()) {
          const Shape& ms = mask.shape();
          sc += mask.data<float>()[((ms[0] == 1 ? 0 : b) * ms[1] + (ms[1] == 1 ? 0 : i)) * c.lk + j];
        }
        if (c.causal && j > i + c.lk - c.lq) sc = -INFINITY;
        s[size_t(j)] = sc;
        m = std::max(m, sc);
      }
      double* o = out.data() + (b * c.lq + i) * (c.dv + 1);
      if (m == -INFINITY) {
        o[c.dv] = -INFINITY;
        continue;
      }
      double l = 0;
      for (double x : s) l += std::exp(x - m);
      for (int64_t j = 0; j < c.lk; ++j) {
        double w = std::exp(s[size_t(j)] - m) / l;
        if (c.rate > 0)
          w *= hash_uniform(key, uint64_t((b * c.lq + i) * c.lk + j)) >= c.rate ? 1.0 / (1.0 - c.rate) : 0.0;
        for (int64_t e = 0; e < c.dv; ++e) o[e] += w * v.data<float>()[(b * c.lk + j) * c.dv + e];
      }
      o[c.dv] = m + std::log(l);
    }
  return out;
}

OpAttrs attrs_of(const Case& c, float scale, uint64_t seed) {
  OpAttrs at;
  at.factor = scale;
  at.rate = c.rate;
  at.seed = seed;
  at.flags = (c.causal ? kCausal : 0u) | (c.mask.rank() ? kAttentionMask : 0u);
  return at;
}

// An additive mask of `s`: mostly 0, some -inf, some small biases.
Tensor mask_of(const Shape& s, std::mt19937& rng) {
  Tensor m = Tensor::empty(s);
  for (int64_t i = 0; i < m.numel(); ++i) {
    const uint32_t r = rng() % 8;
    m.data<float>()[i] = r == 0 ? -kInf : r == 1 ? 0.5f : 0.0f;
  }
  return m;
}

const std::vector<Case> kCases = {
    {3, 5, 7, 4, 3},
    {2, 130, 70, 8, 5},                       // several query tiles and key tiles
    {2, 6, 6, 4, 4, true},                    // causal, square
    {2, 3, 9, 4, 2, true},                    // causal with the queries last (a key-value cache)
    {2, 70, 130, 3, 6, true},                 // causal across tiles
    {3, 4, 6, 5, 3, false, Shape{1, 1, 6}},   // one mask for all
    {3, 4, 6, 5, 3, false, Shape{3, 1, 6}},   // a padding mask per n
    {3, 4, 6, 5, 3, true, Shape{3, 4, 6}},    // a full mask with causal
    {2, 66, 67, 4, 4, false, Shape{}, 0.3f},  // dropout
};

}  // namespace

TEST(AttentionOp, ForwardMatchesTheUnfusedReference) {
  uint32_t seed = 1;
  for (const Case& c : kCases) {
    SCOPED_TRACE(std::to_string(c.n) + "x" + std::to_string(c.lq) + "x" + std::to_string(c.lk) + " causal " +
                 std::to_string(c.causal) + " mask " + c.mask.str() + " rate " + std::to_string(c.rate));
    std::mt19937 rng(seed++);
    const Tensor q = uniform({c.n, c.lq, c.d}, rng, -1, 1), k = uniform({c.n, c.lk, c.d}, rng, -1, 1),
                 v = uniform({c.n, c.lk, c.dv}, rng, -1, 1);
    const Tensor mask = c.mask.rank() ? mask_of(c.mask, rng) : Tensor();
    const float scale = 0.7f;
    Graph g;
    std::vector<Value> in{g.input("q", q.shape()), g.input("k", k.shape()), g.input("v", v.shape())};
    if (mask.defined()) in.push_back(g.input("mask", mask.shape()));
    const Tensor counter = counter_of(5);
    if (c.rate > 0) in.push_back(g.input("counter", Shape{1}, DType::Int64));
    const Value y = g.apply(OpKind::Attention, in, attrs_of(c, scale, 11));
    ASSERT_EQ(g.shape(y), (Shape{c.n, c.lq, c.dv + 1}));
    Executable exe(std::move(g), {y});
    exe.bind(in[0], q), exe.bind(in[1], k), exe.bind(in[2], v);
    if (mask.defined()) exe.bind(in[3], mask);
    if (c.rate > 0) exe.bind(in.back(), counter);
    exe.run();
    const std::vector<float> got = exe.output(y).to_vector();
    const std::vector<double> want = reference(c, q, k, v, mask, scale, 11, 5);
    for (size_t i = 0; i < want.size(); ++i) {
      if (std::isinf(want[i])) {
        EXPECT_EQ(got[i], float(want[i])) << "element " << i;
        continue;
      }
      EXPECT_NEAR(got[i], want[i], 1e-5 + 1e-5 * std::abs(want[i])) << "element " << i;
    }
  }
}

// Every weight of the forward's output (the log-sum-exp column included)
// against finite differences, for q, k and v, with masks, causal and dropout
// (the counter is a fixed input, so every run drops the same weights).
TEST(AttentionOp, GradientsMatchFiniteDifferences) {
  uint32_t seed = 20;
  for (const Case& c : {Case{2, 3, 4, 3, 2}, Case{2, 3, 5, 2, 3, true}, Case{2, 4, 3, 2, 2, false, Shape{2, 1, 3}},
                        Case{2, 3, 4, 2, 2, false, Shape{}, 0.4f}, Case{1, 66, 66, 2, 2, true}}) {
    SCOPED_TRACE(std::to_string(c.lq) + "x" + std::to_string(c.lk) + " causal " + std::to_string(c.causal) + " mask " +
                 c.mask.str() + " rate " + std::to_string(c.rate));
    test_support::GradCheck t(seed++);
    std::mt19937 rng(seed++);
    Value q = t.param(uniform({c.n, c.lq, c.d}, rng, -1, 1), "q");
    Value k = t.param(uniform({c.n, c.lk, c.d}, rng, -1, 1), "k");
    Value v = t.param(uniform({c.n, c.lk, c.dv}, rng, -1, 1), "v");
    std::vector<Value> in{q, k, v};
    if (c.mask.rank()) {
      Tensor m = Tensor::zeros(c.mask);
      m.data<float>()[1] = -kInf;  // one key hidden from the first rows
      m.data<float>()[0] = 0.25f;
      in.push_back(t.data(m, "mask"));
    }
    if (c.rate > 0) in.push_back(t.data(counter_of(3), "counter"));
    const Value y = t.g.apply(OpKind::Attention, in, attrs_of(c, 0.9f, 4));
    test_support::CheckOptions opt;
    opt.step = 1e-2, opt.atol = 1e-3, opt.rtol = 1e-2, opt.min_grad = 1e-2;
    const test_support::CheckResult r = t.check(t.project(y), opt);
    EXPECT_TRUE(r.ok) << r.message;
  }
}

TEST(AttentionOp, NaNPropagatesAndHiddenRowsAreZero) {
  Graph g;
  Tensor q = Tensor::full({1, 2, 2}, 0.5f), k = Tensor::full({1, 3, 2}, 0.25f), v = Tensor::full({1, 3, 2}, 1.0f);
  q.data<float>()[0] = NAN;  // query 0
  Tensor mask = Tensor::zeros({1, 2, 3});
  for (int j = 0; j < 3; ++j) mask.data<float>()[3 + j] = -kInf;  // query 1 sees no key
  std::vector<Value> in{g.input("q", q.shape()), g.input("k", k.shape()), g.input("v", v.shape()),
                        g.input("m", mask.shape())};
  OpAttrs at;
  at.factor = 1.0f;
  at.flags = kAttentionMask;
  const Value y = g.apply(OpKind::Attention, in, at);
  Executable exe(std::move(g), {y});
  exe.bind(in[0], q), exe.bind(in[1], k), exe.bind(in[2], v), exe.bind(in[3], mask);
  exe.run();
  const std::vector<float> out = exe.output(y).to_vector();  // {1, 2, 3}
  for (int e = 0; e < 3; ++e) EXPECT_TRUE(std::isnan(out[size_t(e)])) << e;
  EXPECT_EQ(out[3], 0.0f);
  EXPECT_EQ(out[4], 0.0f);
  EXPECT_EQ(out[5], -kInf);
}

TEST(AttentionOp, BadShapesAndAttributesAreTypedErrors) {
  Graph g;
  const Value q = g.input("q", {2, 3, 4}), k = g.input("k", {2, 5, 4}), v = g.input("v", {2, 5, 6});
  OpAttrs at;
  at.factor = 1.0f;
  EXPECT_TRUE(throws<ShapeError>(
      [&] {
        g.apply(OpKind::Attention, {q, g.input("k2", {2, 5, 3}), v}, at);
      },
      {"attention", "{2, 3, 4}", "{2, 5, 3}"}));
  OpAttrs masked = at;
  masked.flags = kAttentionMask;
  EXPECT_TRUE(throws<ShapeError>(
      [&] {
        g.apply(OpKind::Attention, {q, k, v, g.input("m", {2, 3, 4})}, masked);
      },
      {"mask", "{1 or 2, 1 or 3, 5}", "{2, 3, 4}"}));
  EXPECT_TRUE(throws<ShapeError>([&] { g.apply(OpKind::Attention, {q, k, v}, masked); }, {"mask"}));
  OpAttrs drop = at;
  drop.rate = 1.0f;
  EXPECT_TRUE(throws<ValueError>([&] { g.apply(OpKind::Attention, {q, k, v}, drop); }, {"dropout", "[0, 1)"}));
  OpAttrs nan_scale = at;
  nan_scale.factor = NAN;
  EXPECT_TRUE(throws<ValueError>([&] { g.apply(OpKind::Attention, {q, k, v}, nan_scale); }, {"scale", "finite"}));
}

// Forward and backward of L = 256 and 1024 (N = 2, D = 32): the arena the
// planner lays out grows with L (4x), not with L^2, and at 1024 it is a
// fraction of the {N, L, L} weights one unfused softmax would hold.
TEST(AttentionOp, ArenaGrowsLinearlyWithTheSequence) {
  auto arena = [](int64_t l) {
    test_support::GradCheck t(1);
    std::mt19937 rng(2);
    Value q = t.param(uniform({2, l, 32}, rng, -1, 1), "q");
    Value k = t.param(uniform({2, l, 32}, rng, -1, 1), "k");
    Value v = t.param(uniform({2, l, 32}, rng, -1, 1), "v");
    Builder::AttentionOptions o;
    o.causal = true;
    const Value loss = t.g.sum(t.g.scaled_dot_product_attention(q, k, v, o));
    const std::vector<Value> wrt{q, k, v};
    std::vector<Value> outs = t.g.gradients(loss, wrt);
    outs.push_back(loss);
    return plan_memory(t.g, outs).arena_bytes;
  };
  const size_t a256 = arena(256), a1024 = arena(1024);
  const size_t scores1024 = size_t(2) * 1024 * 1024 * sizeof(float);
  EXPECT_LE(a1024, 5 * a256) << a256 << " bytes at 256, " << a1024 << " at 1024";
  EXPECT_LT(a1024, scores1024 / 4) << a1024 << " bytes against " << scores1024 << " for the {N, L, L} weights";
  RecordProperty("arena_256", int(a256));
  RecordProperty("arena_1024", int(a1024));
}
