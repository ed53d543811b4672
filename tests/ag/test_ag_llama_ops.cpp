// The eager API of the LLaMA family's fused ops (ag/functional.h):
// rms_norm and rotary_embedding against their formulas in double and
// through ag::gradcheck (tolerances as tests/ag/test_ag_gradcheck.cpp's
// defaults: step 1e-2, |num - ana| <= 1e-3 + 1e-2 |num|), and
// scaled_dot_product_attention's enable_gqa against the same call on key
// and value repeated per head (repeat_interleave), values and gradients,
// causal and masked; without enable_gqa, unequal heads stay a ShapeError.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "tensorgrad/ag/functional.h"
#include "tensorgrad/ag/gradcheck.h"
#include "tensorgrad/ag/tensor.h"
#include "tensorgrad/core/error.h"
#include "test_support.h"

using namespace tensorgrad;
namespace ag = tensorgrad::ag;
using test_support::throws;
using test_support::uniform;

namespace {

ag::Tensor leaf(const tensorgrad::Tensor& t) { return ag::Tensor(t, /*requires_grad=*/true); }

ag::Tensor positions(std::vector<int32_t> p) {
  return ag::tensor(std::span<const int32_t>(p), Shape{int64_t(p.size())});
}

// {B, Hkv, S, E} -> {B, Hkv group, S, E}, head h of the result being head h / group (repeat_interleave on dim 1).
ag::Tensor repeat_heads(const ag::Tensor& k, int64_t group) {
  const Shape& s = k.shape();
  const ag::Tensor wide = ag::broadcast_to(ag::reshape(k, {s[0], s[1], 1, s[2], s[3]}), {s[0], s[1], group, s[2], s[3]});
  return ag::reshape(wide, {s[0], s[1] * group, s[2], s[3]});
}

}  // namespace

TEST(AgLlamaOps, RmsNormMatchesItsFormulaAndGradcheck) {
  std::mt19937 rng(5);
  const tensorgrad::Tensor x = uniform({2, 3, 7}, rng, -2, 2), w = uniform({7}, rng, -1.5, 1.5);
  for (bool weighted : {false, true}) {
    SCOPED_TRACE(weighted ? "weighted" : "no weight");
    const ag::Tensor y = ag::rms_norm(ag::Tensor(x), weighted ? ag::Tensor(w) : ag::Tensor(), 1e-5f);
    ASSERT_EQ(y.shape(), x.shape());
    const std::vector<float> got = y.to_vector();
    for (int64_t r = 0; r < 6; ++r) {
      double ss = 0;
      for (int64_t j = 0; j < 7; ++j) ss += double(x.data<float>()[r * 7 + j]) * x.data<float>()[r * 7 + j];
      const double inv = 1.0 / std::sqrt(ss / 7 + 1e-5);
      for (int64_t j = 0; j < 7; ++j) {
        const double want = x.data<float>()[r * 7 + j] * inv * (weighted ? w.data<float>()[j] : 1.0);
        EXPECT_NEAR(got[size_t(r * 7 + j)], want, 1e-6 + 1e-5 * std::abs(want)) << r << ", " << j;
      }
    }
    std::vector<ag::Tensor> in{leaf(x)};
    if (weighted) in.push_back(leaf(w));
    const ag::GradcheckResult r = ag::gradcheck(
        [&](std::span<const ag::Tensor> t) { return ag::rms_norm(t[0], t.size() > 1 ? t[1] : ag::Tensor(), 1e-3f); }, in);
    EXPECT_TRUE(r.ok) << r.message;
  }
  EXPECT_TRUE(throws<ValueError>([&] { ag::rms_norm(ag::Tensor(x), ag::Tensor(), -1.0f); }, {"rms_norm", "epsilon"}));
  EXPECT_TRUE(throws<ShapeError>([&] { ag::rms_norm(ag::Tensor(x), ag::ones({3})); }, {"rms_norm", "{7}", "{3}"}));
}

TEST(AgLlamaOps, RotaryEmbeddingMatchesItsFormulaAndGradcheck) {
  std::mt19937 rng(6);
  const tensorgrad::Tensor x = uniform({1, 3, 2, 6}, rng, -1, 1);
  const std::vector<int32_t> pos{3, 10, 4};
  for (RopePairing pairing : {RopePairing::Halves, RopePairing::Adjacent}) {
    SCOPED_TRACE(pairing == RopePairing::Halves ? "halves" : "adjacent");
    RopeOptions o;
    o.dims = 4, o.theta = 50.0f, o.scaling_factor = 2.0f, o.pairing = pairing;
    const std::vector<float> got = ag::rotary_embedding(ag::Tensor(x), positions(pos), o).to_vector();
    for (int64_t t = 0; t < 3; ++t)
      for (int64_t h = 0; h < 2; ++h) {
        const int64_t row = (t * 2 + h) * 6;
        const float* a = x.data<float>() + row;
        for (int64_t i = 0; i < 2; ++i) {
          const double angle = pos[size_t(t)] / 2.0 * std::pow(50.0, -2.0 * double(i) / 4.0);
          const int64_t lo = pairing == RopePairing::Halves ? i : 2 * i, hi = pairing == RopePairing::Halves ? i + 2 : 2 * i + 1;
          EXPECT_NEAR(got[size_t(row + lo)], a[lo] * std::cos(angle) - a[hi] * std::sin(angle), 1e-6);
          EXPECT_NEAR(got[size_t(row + hi)], a[lo] * std::sin(angle) + a[hi] * std::cos(angle), 1e-6);
        }
        for (int64_t f = 4; f < 6; ++f) EXPECT_EQ(got[size_t(row + f)], a[f]);  // past dims: unchanged
      }
    const ag::Tensor p = positions(pos);
    const ag::GradcheckResult r =
        ag::gradcheck([&](std::span<const ag::Tensor> t) { return ag::rotary_embedding(t[0], p, o); }, {leaf(x)});
    EXPECT_TRUE(r.ok) << r.message;
  }
  EXPECT_TRUE(throws<TypeError>([&] { ag::rotary_embedding(ag::Tensor(x), ag::ones({3})); }, {"positions", "int32"}));
  EXPECT_TRUE(
      throws<ValueError>([&] { ag::rotary_embedding(ag::Tensor(x), positions({0, -1, 2})); }, {"position -1", "negative"}));
}

// PyTorch 2.5's enable_gqa: key and value with fewer heads equal the call on
// them repeated per head, values and all three gradients.
TEST(AgLlamaOps, EnableGqaEqualsRepeatedKeyValueHeads) {
  ag::manual_seed(8);
  const int64_t hq = 6, hkv = 2, group = hq / hkv;
  std::vector<int32_t> keep(4 * 5, 1);
  keep[2] = 0, keep[9] = 0;
  const ag::Tensor mask = ag::tensor(std::span<const int32_t>(keep), Shape{4, 5});
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "masked");
    ag::Tensor q = ag::randn({2, hq, 4, 3}, {.requires_grad = true}), k = ag::randn({2, hkv, 5, 3}, {.requires_grad = true}),
               v = ag::randn({2, hkv, 5, 2}, {.requires_grad = true});
    const ag::Tensor m = causal ? ag::Tensor() : mask;
    const ag::Tensor grouped = ag::scaled_dot_product_attention(q, k, v, m, 0.0f, causal, std::nullopt, nullptr, true);
    const ag::Tensor repeated =
        ag::scaled_dot_product_attention(q, repeat_heads(k, group), repeat_heads(v, group), m, 0.0f, causal);
    ASSERT_EQ(grouped.shape(), (Shape{2, hq, 4, 2}));
    const std::vector<float> a = grouped.to_vector(), b = repeated.to_vector();
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6f) << i;
    const ag::Tensor proj = ag::randn({2, hq, 4, 2});
    ag::sum(grouped * proj).backward();
    const std::vector<float> gq = q.grad().to_vector(), gk = k.grad().to_vector(), gv = v.grad().to_vector();
    ASSERT_EQ(k.grad().shape(), k.shape());
    q.set_grad({}), k.set_grad({}), v.set_grad({});
    ag::sum(repeated * proj).backward();
    const std::vector<float> hq_ = q.grad().to_vector(), hk = k.grad().to_vector(), hv = v.grad().to_vector();
    for (size_t i = 0; i < gq.size(); ++i) EXPECT_NEAR(gq[i], hq_[i], 1e-5f) << "dq " << i;
    for (size_t i = 0; i < gk.size(); ++i) EXPECT_NEAR(gk[i], hk[i], 1e-5f) << "dk " << i;
    for (size_t i = 0; i < gv.size(); ++i) EXPECT_NEAR(gv[i], hv[i], 1e-5f) << "dv " << i;
  }
  const ag::Tensor q = ag::randn({2, hq, 4, 3}), k = ag::randn({2, hkv, 5, 3}), v = ag::randn({2, hkv, 5, 2});
  EXPECT_TRUE(throws<ShapeError>([&] { ag::scaled_dot_product_attention(q, k, v); },
                                 {"scaled_dot_product_attention", "enable_gqa", "{2, 6, 4, 3}", "{2, 2, 5, 3}"}));
  const ag::Tensor k4 = ag::randn({2, 4, 5, 3}), v4 = ag::randn({2, 4, 5, 2});
  EXPECT_TRUE(throws<ShapeError>(
      [&] { ag::scaled_dot_product_attention(q, k4, v4, ag::Tensor(), 0.0f, false, std::nullopt, nullptr, true); },
      {"scaled_dot_product_attention", "divides", "{2, 4, 5, 3}"}));
}
