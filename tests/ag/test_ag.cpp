// The eager API's tensors, backward, in-place ops and errors (ag/tensor.h,
// ag/functional.h). Values are checked against answers computed by hand or in
// double in the test; gradients of every op are checked against finite
// differences in test_ag_gradcheck.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <limits>
#include <string>
#include <vector>

#include "tensorgrad/ag/data.h"
#include "tensorgrad/ag/functional.h"
#include "tensorgrad/ag/optim.h"
#include "tensorgrad/ag/tensor.h"
#include "tensorgrad/core/error.h"
#include "test_support.h"

using namespace tensorgrad;
namespace ag = tensorgrad::ag;

namespace {


}  // namespace

TEST(Ag, FactoriesHoldTheirValues) {
  EXPECT_EQ(ag::zeros(Shape{2, 3}).to_vector(), std::vector<float>(6, 0.0f));
  EXPECT_EQ(ag::ones(Shape{4}).to_vector(), std::vector<float>(4, 1.0f));
  EXPECT_EQ(ag::full(Shape{2}, 2.5f).to_vector(), (std::vector<float>{2.5f, 2.5f}));
  EXPECT_EQ(ag::arange(5).to_vector(), (std::vector<float>{0, 1, 2, 3, 4}));
  EXPECT_EQ(ag::arange(1, 2, 0.25).to_vector(), (std::vector<float>{1, 1.25f, 1.5f, 1.75f}));
  EXPECT_EQ(ag::arange(3, 0, -1, {DType::Int32}).to_vector(), (std::vector<float>{3, 2, 1}));
  EXPECT_EQ(ag::arange(3, 0, -1, {DType::Int32}).dtype(), DType::Int32);
  ag::Tensor t = ag::tensor({1, 2, 3, 4, 5, 6}, Shape{2, 3});
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.size(-1), 3);
  EXPECT_EQ(t.dim(), 2);
  EXPECT_FLOAT_EQ(ag::tensor({7}, Shape{}).item(), 7.0f);

  ag::Generator g1(5), g2(5);
  EXPECT_EQ(ag::randn(Shape{8}, {}, &g1).to_vector(), ag::randn(Shape{8}, {}, &g2).to_vector());
  std::vector<float> u = ag::rand(Shape{1000}, {}, &g1).to_vector();
  for (float v : u) ASSERT_TRUE(v >= 0.0f && v < 1.0f);
}

TEST(Ag, FromBlobAndEngineTensorsShareMemory) {
  std::vector<float> buffer{1, 2, 3, 4};
  ag::Tensor t = ag::Tensor::from_blob(buffer.data(), Shape{2, 2});
  buffer[3] = 40.0f;
  EXPECT_FLOAT_EQ(t.to_vector()[3], 40.0f);
  t.mul_(2.0f);
  EXPECT_FLOAT_EQ(buffer[0], 2.0f);
  tensorgrad::Tensor engine = tensorgrad::Tensor::full(Shape{3}, 1.0f);
  ag::Tensor wrapped(engine);
  wrapped.add_(1.0f);
  EXPECT_FLOAT_EQ(engine.item(2), 2.0f);
}

TEST(Ag, BackwardOfAProductGivesTheOtherFactor) {
  ag::Tensor x = ag::tensor({1, -2, 3}, Shape{3}, {.requires_grad = true});
  ag::Tensor w = ag::tensor({0.5f, 4, -1}, Shape{3}, {.requires_grad = true});
  ag::Tensor loss = ag::sum(x * w);
  EXPECT_TRUE(loss.requires_grad());
  EXPECT_FALSE(loss.is_leaf());
  EXPECT_EQ(loss.grad_fn_name(), "sum");
  EXPECT_FLOAT_EQ(loss.item(), 0.5f - 8.0f - 3.0f);
  loss.backward();
  EXPECT_EQ(x.grad().to_vector(), w.to_vector());
  EXPECT_EQ(w.grad().to_vector(), x.to_vector());
}

TEST(Ag, GradientsAccumulateUntilReset) {
  ag::Tensor x = ag::tensor({1, 2}, Shape{2}, {.requires_grad = true});
  ag::sum(x * x).backward();
  ag::sum(x * 3.0f).backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{2 + 3, 4 + 3}));
  x.grad().zero_();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{0, 0}));
  x.set_grad(ag::Tensor());
  EXPECT_FALSE(x.grad().defined());
  ag::sum(x).backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{1, 1}));
}

TEST(Ag, AValueUsedTwiceSumsBothPaths) {
  ag::Tensor x = ag::tensor({2}, Shape{1}, {.requires_grad = true});
  ag::Tensor y = x * x + x * 5.0f;  // dy/dx = 2x + 5
  y.backward();
  EXPECT_FLOAT_EQ(x.grad().item(), 9.0f);
}

TEST(Ag, BackwardWithAGradientArgument) {
  ag::Tensor x = ag::tensor({1, 2, 3}, Shape{3}, {.requires_grad = true});
  ag::Tensor y = x * 3.0f;
  y.backward(ag::tensor({1, 10, 100}, Shape{3}));
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{3, 30, 300}));
  EXPECT_TRUE(test_support::throws<ValueError>([&] { (x * 2.0f).backward(); }, {"one element", "{3}"}));
  EXPECT_TRUE(test_support::throws<ShapeError>([&] { (x * 2.0f).backward(ag::ones(Shape{2})); }, {"{3}", "{2}"}));
}

TEST(Ag, SecondBackwardNeedsRetainGraph) {
  ag::Tensor x = ag::tensor({1, 2}, Shape{2}, {.requires_grad = true});
  ag::Tensor loss = ag::sum(ag::tanh(x));
  loss.backward({}, /*retain_graph=*/true);
  const std::vector<float> once = x.grad().to_vector();
  loss.backward();
  for (size_t i = 0; i < once.size(); ++i) EXPECT_FLOAT_EQ(x.grad().to_vector()[i], 2 * once[i]);
  EXPECT_TRUE(test_support::throws<StateError>([&] { loss.backward(); }, {"freed", "retain_graph"}));
}

TEST(Ag, BackwardOfATensorWithoutHistoryIsRefused) {
  ag::Tensor x = ag::ones(Shape{2});
  EXPECT_TRUE(test_support::throws<StateError>([&] { ag::sum(x).backward(); }, {"does not require grad"}));
  ag::Tensor w = ag::ones(Shape{2}, {.requires_grad = true});
  ag::Tensor y;
  {
    ag::NoGradGuard guard;
    y = ag::sum(w * 2.0f);
  }
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE(ag::grad_enabled());
  EXPECT_TRUE(test_support::throws<StateError>([&] { y.backward(); }, {"does not require grad"}));
}

TEST(Ag, ItemOfSeveralElementsIsRefused) {
  EXPECT_TRUE(test_support::throws<ValueError>([] { ag::ones(Shape{2, 2}).item(); }, {"item", "{2, 2}"}));
}

TEST(Ag, AnInPlaceChangeOfASavedTensorMakesBackwardThrow) {
  ag::Tensor x = ag::tensor({1, 2}, Shape{2});
  ag::Tensor w = ag::tensor({3, 4}, Shape{2}, {.requires_grad = true});
  ag::Tensor loss = ag::sum(x * w);  // the gradient of w is x: x is saved
  EXPECT_EQ(x.version(), 0u);
  x.add_(1.0f);
  EXPECT_EQ(x.version(), 1u);
  EXPECT_TRUE(test_support::throws<StateError>([&] { loss.backward(); },
                          {"mul", "changed in place", "version 1", "version 0"}));
  // A view shares the version counter of the memory it shows.
  ag::Tensor v = ag::reshape(x, Shape{1, 2});
  ag::Tensor loss2 = ag::sum(v * w);
  x.mul_(2.0f);
  EXPECT_EQ(v.version(), 2u);
  EXPECT_TRUE(test_support::throws<StateError>([&] { loss2.backward(); }, {"changed in place"}));
}

TEST(Ag, InPlaceOnATensorThatRequiresGradOnlyWithoutRecording) {
  ag::Tensor w = ag::tensor({1, 2}, Shape{2}, {.requires_grad = true});
  EXPECT_TRUE(test_support::throws<StateError>([&] { w.add_(1.0f); }, {"add_", "requires grad", "NoGradGuard"}));
  ag::sum(w * w).backward();
  {
    ag::NoGradGuard guard;
    w.add_(w.grad(), -0.1f);  // SGD: w -= 0.1 * 2w
  }
  EXPECT_FLOAT_EQ(w.to_vector()[0], 1.0f - 0.1f * 2.0f);
  EXPECT_FLOAT_EQ(w.to_vector()[1], 2.0f - 0.1f * 4.0f);
  EXPECT_TRUE(w.requires_grad());
}

TEST(Ag, InPlaceOps) {
  ag::Tensor t = ag::tensor({1, -2, 3, -4}, Shape{2, 2});
  t.add_(ag::tensor({10, 20}, Shape{2}));
  EXPECT_EQ(t.to_vector(), (std::vector<float>{11, 18, 13, 16}));
  t.mul_(ag::tensor({1, 0.5f}, Shape{2}));
  EXPECT_EQ(t.to_vector(), (std::vector<float>{11, 9, 13, 8}));
  t.clamp_(9.0f, 12.0f);
  EXPECT_EQ(t.to_vector(), (std::vector<float>{11, 9, 12, 9}));
  t.copy_(ag::tensor({5, 6}, Shape{2}));
  EXPECT_EQ(t.to_vector(), (std::vector<float>{5, 6, 5, 6}));
  t.fill_(2.0f);
  EXPECT_EQ(t.to_vector(), std::vector<float>(4, 2.0f));
  t.zero_();
  EXPECT_EQ(t.to_vector(), std::vector<float>(4, 0.0f));
  EXPECT_EQ(t.version(), 6u);
  EXPECT_TRUE(test_support::throws<ShapeError>([&] { t.add_(ag::ones(Shape{3})); }, {"add", "{2, 2}", "{3}"}));
  EXPECT_TRUE(test_support::throws<ValueError>([&] { t.clamp_(2.0f, 1.0f); },
                          {"clamp", "clamp_min <= clamp_max", "2.0", "1.0"}));
  EXPECT_TRUE(test_support::throws<TypeError>([&] { t.copy_(ag::zeros(Shape{2, 2}, {DType::Int32})); },
                          {"copy_", "int32"}));
}

TEST(Ag, DetachSharesValuesWithoutHistory) {
  ag::Tensor w = ag::tensor({1, 2}, Shape{2}, {.requires_grad = true});
  ag::Tensor y = w * 2.0f;
  ag::Tensor d = y.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
  EXPECT_EQ(d.data().raw(), y.data().raw());
  d.add_(1.0f);  // y's memory changed: its version moves with d's
  EXPECT_EQ(y.version(), 1u);
}

TEST(Ag, ShapeAndDtypeErrorsNameTheOpAndBothShapes) {
  ag::Tensor a = ag::ones(Shape{2, 3}), b = ag::ones(Shape{4});
  EXPECT_TRUE(test_support::throws<ShapeError>([&] { ag::add(a, b); }, {"add", "{2, 3}", "{4}"}));
  EXPECT_TRUE(test_support::throws<ShapeError>([&] { ag::matmul(a, ag::ones(Shape{4, 2})); },
                          {"matmul", "{2, 3}", "{4, 2}"}));
  EXPECT_TRUE(test_support::throws<TypeError>([&] { ag::mul(a, ag::zeros(Shape{2, 3}, {DType::Int32})); },
                          {"mul", "int32"}));
  EXPECT_TRUE(test_support::throws<StateError>([&] { ag::relu(ag::Tensor()); }, {"undefined"}));
  EXPECT_TRUE(test_support::throws<ValueError>([] { ag::zeros(Shape{2}, {DType::Int32, true}); }, {"float32"}));
  EXPECT_TRUE(test_support::throws<ValueError>([&] { ag::softmax(a, 0); }, {"softmax", "last dimension"}));
  const ag::Tensor ids02 = ag::tensor(std::vector<int32_t>{0, 2}, Shape{2});
  const ag::Tensor ids03 = ag::tensor(std::vector<int32_t>{0, 3}, Shape{2});
  // The gather kernels' text, which a device's kernel reports too (tests/backend/vulkan).
  EXPECT_TRUE(test_support::throws<IndexError>([&] { ag::index_select(a, ids02); },
                           {"gather: id 2 at position 1 is outside the table of 2 rows [0, 2)", "index_select"}));
  EXPECT_TRUE(test_support::throws<IndexError>([&] { ag::embedding(ids03, ag::ones(Shape{3, 2})); },
                           {"gather: id 3 at position 1 is outside the table of 3 rows [0, 3)", "embedding"}));
  EXPECT_TRUE(test_support::throws<IndexError>([&] { ag::cross_entropy(a, ids03); },
                           {"cross_entropy", "3", "[0, 3)"}));
  EXPECT_TRUE(test_support::throws<TypeError>([&] { ag::cross_entropy(a, ag::zeros(Shape{2})); },
                          {"cross_entropy: class ids", "{2}", "must be int32; got float32", "probabilities", "{2, 3}"}));
  EXPECT_TRUE(test_support::throws<ShapeError>([&] { ag::mse_loss(a, ag::ones(Shape{3, 2})); },
                          {"mse_loss", "{2, 3}", "{3, 2}"}));
}

TEST(Ag, LossesMatchTheirDefinitions) {
  ag::Tensor z = ag::tensor({0.5f, -1, 2, 0.1f, 0.3f, -0.7f}, Shape{2, 3});
  std::vector<float> zv = z.to_vector();
  // cross_entropy with ids and with one-hot probabilities, against log-softmax in double.
  const int ids[2] = {2, 0};
  double want = 0;
  for (int r = 0; r < 2; ++r) {
    double m = -1e9, s = 0;
    for (int c = 0; c < 3; ++c) m = std::max(m, double(zv[size_t(r * 3 + c)]));
    for (int c = 0; c < 3; ++c) s += std::exp(double(zv[size_t(r * 3 + c)]) - m);
    want += -(double(zv[size_t(r * 3 + ids[r])]) - m - std::log(s)) / 2;
  }
  EXPECT_NEAR(ag::cross_entropy(z, ag::tensor(std::vector<int32_t>{2, 0}, Shape{2})).item(), want, 1e-6);
  EXPECT_NEAR(ag::cross_entropy(z, ag::tensor({0, 0, 1, 1, 0, 0}, Shape{2, 3})).item(), want, 1e-6);
  // mse, l1, huber and bce over a rank-1 pair.
  ag::Tensor p = ag::tensor({0.5f, 3, -1}, Shape{3}), t = ag::tensor({0, 1, -1.5f}, Shape{3});
  EXPECT_NEAR(ag::mse_loss(p, t).item(), (0.25 + 4 + 0.25) / 3, 1e-6);
  EXPECT_NEAR(ag::l1_loss(p, t).item(), (0.5 + 2 + 0.5) / 3, 1e-6);
  EXPECT_NEAR(ag::huber_loss(p, t, 1.0f).item(), (0.125 + 1.5 + 0.125) / 3, 1e-6);
  ag::Tensor y = ag::tensor({1, 0, 1}, Shape{3});
  double bce = 0;
  for (int i = 0; i < 3; ++i) {
    const double zi = p.to_vector()[size_t(i)], yi = y.to_vector()[size_t(i)];
    bce += -(yi * std::log(1 / (1 + std::exp(-zi))) + (1 - yi) * std::log(1 - 1 / (1 + std::exp(-zi)))) / 3;
  }
  EXPECT_NEAR(ag::binary_cross_entropy_with_logits(p, y).item(), bce, 1e-6);
}

TEST(Ag, IndexSelectAddsTheGradientsOfRepeatedRows) {
  ag::Tensor x = ag::tensor({1, 2, 3, 4, 5, 6}, Shape{3, 2}, {.requires_grad = true});
  ag::Tensor rows = ag::index_select(x, ag::tensor(std::vector<int32_t>{2, 0, 2}, Shape{3}));
  EXPECT_EQ(rows.to_vector(), (std::vector<float>{5, 6, 1, 2, 5, 6}));
  ag::sum(rows).backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<float>{1, 1, 0, 0, 2, 2}));
}

TEST(Ag, DropoutFollowsItsGenerator) {
  ag::Tensor x = ag::ones(Shape{4, 50});
  ag::Generator g1(3), g2(3);
  const std::vector<float> a = ag::dropout(x, 0.25f, true, &g1).to_vector();
  EXPECT_EQ(a, ag::dropout(x, 0.25f, true, &g2).to_vector());  // same key, same counter
  EXPECT_NE(a, ag::dropout(x, 0.25f, true, &g1).to_vector());  // the counter moved
  EXPECT_EQ(g1.dropout_counter(), 2u);
  size_t kept = 0;
  for (float v : a) {
    ASSERT_TRUE(v == 0.0f || v == 1.0f / 0.75f);
    kept += v != 0.0f;
  }
  EXPECT_GT(kept, 120u);
  EXPECT_LT(kept, 180u);
  EXPECT_EQ(ag::dropout(x, 0.25f, false).to_vector(), x.to_vector());
  EXPECT_TRUE(test_support::throws<ValueError>([&] { ag::dropout(x, 1.0f); }, {"dropout", "[0, 1)"}));
}

// torch.masked_fill and torch.where with float masks: -inf under a mask
// (attention's), and the gradient of where going to one branch per element.
TEST(Ag, MaskedFillAndWhere) {
  const float inf = std::numeric_limits<float>::infinity();
  ag::Tensor scores = ag::tensor({1, 2, 3, 4}, Shape{2, 2}, {.requires_grad = true});
  ag::Tensor causal = ag::tensor({0, 1, 0, 0}, Shape{2, 2});
  ag::Tensor masked = ag::masked_fill(scores, causal, -inf);
  EXPECT_EQ(masked.to_vector(), (std::vector<float>{1, -inf, 3, 4}));
  ag::Tensor p = ag::softmax(masked, -1);
  EXPECT_EQ(p.to_vector()[0], 1.0f);
  EXPECT_EQ(p.to_vector()[1], 0.0f);
  ag::sum(ag::masked_fill(scores, causal, 100.0f) * ag::tensor({1, 2, 3, 4}, Shape{2, 2})).backward();
  EXPECT_EQ(scores.grad().to_vector(), (std::vector<float>{1, 0, 3, 4}));

  ag::Tensor c = ag::tensor({1, 0}, Shape{2});
  ag::Tensor a = ag::tensor({inf, 5, 6, 7}, Shape{2, 2}, {.requires_grad = true});
  ag::Tensor b = ag::tensor({-1}, Shape{1}, {.requires_grad = true});
  ag::Tensor y = ag::where(c, a, b);
  EXPECT_EQ(y.to_vector(), (std::vector<float>{inf, -1, 6, -1}));
  ag::sum(y * ag::tensor({1, 2, 3, 4}, Shape{2, 2})).backward();
  EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{1, 0, 3, 0}));
  EXPECT_EQ(b.grad().to_vector(), (std::vector<float>{6}));
  EXPECT_TRUE(test_support::throws<ShapeError>([&] { ag::masked_fill(a, ag::ones(Shape{3}), 0.0f); },
                                               {"masked_fill", "{2, 2}", "{3}"}));
}

// F.scaled_dot_product_attention on {B, heads, L, E}: the fused op against
// softmax(q k^T / sqrt(E) + mask) v composed of ops, with PyTorch's bool mask
// (int32, 1 takes part) and is_causal; the gradients of both paths agree.
TEST(Ag, ScaledDotProductAttentionMatchesTheComposedFormula) {
  ag::manual_seed(4);
  ag::Tensor q = ag::randn({2, 3, 5, 4}, {.requires_grad = true}), k = ag::randn({2, 3, 6, 4}, {.requires_grad = true}),
             v = ag::randn({2, 3, 6, 2}, {.requires_grad = true});
  std::vector<int32_t> keep(5 * 6, 1);
  keep[1] = 0, keep[7] = 0;  // queries 0 and 1 do not see key 1
  const ag::Tensor mask = ag::tensor(std::span<const int32_t>(keep), Shape{5, 6});
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "masked");
    const ag::Tensor fused = ag::scaled_dot_product_attention(q, k, v, causal ? ag::Tensor() : mask, 0.0f, causal);
    std::vector<float> add(5 * 6, 0.0f);
    for (int i = 0; i < 5; ++i)
      for (int j = 0; j < 6; ++j)
        if (causal ? j > i + 1 : keep[size_t(i * 6 + j)] == 0) add[size_t(i * 6 + j)] = -INFINITY;
    const ag::Tensor scores = ag::matmul(ag::reshape(q, {6, 5, 4}), ag::transpose(ag::reshape(k, {6, 6, 4}), 1, 2));
    const ag::Tensor w = ag::softmax(scores * 0.5f + ag::tensor(std::span<const float>(add), Shape{5, 6}), -1);
    const ag::Tensor composed = ag::reshape(ag::matmul(w, ag::reshape(v, {6, 6, 2})), {2, 3, 5, 2});
    ASSERT_EQ(fused.shape(), (Shape{2, 3, 5, 2}));
    const std::vector<float> a = fused.to_vector(), b = composed.to_vector();
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5f) << i;
    const ag::Tensor proj = ag::randn({2, 3, 5, 2});
    q.set_grad({}), k.set_grad({}), v.set_grad({});
    ag::sum(fused * proj).backward();
    const std::vector<float> gq = q.grad().to_vector(), gk = k.grad().to_vector(), gv = v.grad().to_vector();
    q.set_grad({}), k.set_grad({}), v.set_grad({});
    ag::sum(composed * proj).backward();
    const std::vector<float> hq = q.grad().to_vector(), hk = k.grad().to_vector(), hv = v.grad().to_vector();
    for (size_t i = 0; i < gq.size(); ++i) EXPECT_NEAR(gq[i], hq[i], 1e-5f) << "dq " << i;
    for (size_t i = 0; i < gk.size(); ++i) EXPECT_NEAR(gk[i], hk[i], 1e-5f) << "dk " << i;
    for (size_t i = 0; i < gv.size(); ++i) EXPECT_NEAR(gv[i], hv[i], 1e-5f) << "dv " << i;
  }
  EXPECT_TRUE(test_support::throws<ShapeError>(
      [&] { ag::scaled_dot_product_attention(q, k, v, ag::ones({4, 6})); }, {"attn_mask", "L = 5", "{4, 6}"}));
}

TEST(Ag, DivSqrtPowReductionsClampAndBatchedMatmulValues) {
  ag::Tensor a = ag::tensor({1, 4, 9, 16}, Shape{2, 2});
  EXPECT_EQ((a / ag::tensor({1, 2}, Shape{2})).to_vector(), (std::vector<float>{1, 2, 9, 8}));
  EXPECT_EQ(ag::sqrt(a).to_vector(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(ag::pow(a, 0.5f).to_vector(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(ag::t(a).to_vector(), (std::vector<float>{1, 9, 4, 16}));
  EXPECT_EQ(ag::sum(a, 0).to_vector(), (std::vector<float>{10, 20}));
  EXPECT_EQ(ag::sum(a, 1, true).shape(), (Shape{2, 1}));
  EXPECT_EQ(ag::amax(a, -1).to_vector(), (std::vector<float>{4, 16}));
  EXPECT_EQ(ag::mean(a, 1).to_vector(), (std::vector<float>{2.5f, 12.5f}));
  EXPECT_FLOAT_EQ(ag::log(ag::exp(ag::tensor({0.5f}, Shape{1}))).item(), 0.5f);
  EXPECT_EQ(ag::clamp(a, 2, 10).to_vector(), (std::vector<float>{2, 4, 9, 10}));
  // Batched matmul: each batch entry its own product.
  ag::Tensor x = ag::tensor({1, 2, 3, 4, 5, 6, 7, 8}, Shape{2, 2, 2});
  ag::Tensor eye = ag::tensor({1, 0, 0, 1, 0, 1, 1, 0}, Shape{2, 2, 2});
  EXPECT_EQ(ag::matmul(x, eye).to_vector(), (std::vector<float>{1, 2, 3, 4, 6, 5, 8, 7}));
  EXPECT_TRUE(test_support::throws<ShapeError>([&] { ag::matmul(x, ag::ones(Shape{3, 2, 2})); },
                          {"matmul", "{2, 2, 2}", "{3, 2, 2}"}));
  EXPECT_TRUE(test_support::throws<IndexError>([&] { ag::sum(a, 2); }, {"sum", "dimension 2"}));
  EXPECT_TRUE(test_support::throws<ShapeError>([&] { ag::t(x); }, {"t:", "{2, 2, 2}"}));
}

TEST(Ag, ALongHistoryRunsBackwardAndFreesWithoutDeepRecursion) {
  // 200,000 recorded ops in one chain (an RL loop that forgot detach()):
  // backward and the release of the history are iterative, not recursive.
  ag::Tensor w = ag::tensor({1.0f}, Shape{1}, {.requires_grad = true});
  ag::Tensor h = w;
  for (int i = 0; i < 200000; ++i) h = h * 1.0f;
  h.backward();
  EXPECT_EQ(w.grad().item(), 1.0f);
  ag::Tensor kept = h;
  for (int i = 0; i < 200000; ++i) h = h + 0.0f;
  h = ag::Tensor();  // frees the second chain
  kept = ag::Tensor();
  EXPECT_TRUE(w.requires_grad());
}

TEST(Ag, EmptySoftmaxAxisAndOverflowingNarrowAreShapeErrors) {
  // Softmax over an empty last axis divided by zero in the kernel.
  EXPECT_TRUE(test_support::throws<ShapeError>([] { ag::softmax(ag::zeros(Shape{4, 0})); },
                                               {"softmax", "last axis", "{4, 0}"}));
  EXPECT_TRUE(test_support::throws<ShapeError>([] { ag::log_softmax(ag::zeros(Shape{4, 0})); }, {"log_softmax"}));
  // start + length overflowed past the bounds check and read beyond the buffer.
  EXPECT_TRUE(test_support::throws<ShapeError>([] { ag::narrow(ag::ones(Shape{2, 3}), 1, INT64_MAX, 2); },
                                               {"slice", "outside axis 1"}));
}

TEST(Ag, UndefinedGroupParameterIsAStateErrorAndAHugeBatchSizeIsOneBatch) {
  // An undefined tensor put into a parameter group by hand: a StateError at step, not a null dereference.
  ag::Tensor p = ag::ones(Shape{2}, {.requires_grad = true});
  ag::optim::SGD sgd(std::vector<ag::Tensor>{p}, 0.1, 0.9);
  sgd.param_groups()[0].params.push_back(ag::Tensor());
  EXPECT_TRUE(test_support::throws<StateError>([&] { sgd.step(); }, {"step", "undefined"}));
  // A batch larger than any count: one batch, not zero (n + b - 1 overflowed).
  ag::DataLoader loader(ag::ones(Shape{4, 2}), {.batch_size = INT64_MAX});
  EXPECT_EQ(loader.size(), 1u);
  size_t batches = 0;
  for (ag::Batch b : loader) batches += b.x.size(0) == 4;
  EXPECT_EQ(batches, 1u);
}

namespace {
std::string printed(const ag::Tensor& t) {
  std::ostringstream os;
  os << t;
  return os.str();
}
}  // namespace

TEST(Ag, PrintsAsPyTorchDoes) {
  EXPECT_EQ(printed(ag::tensor({1.0f, 2.0f, 3.0f, 4.5f}, {2, 2})),
            "tensor([[1.0000, 2.0000],\n        [3.0000, 4.5000]])");
  EXPECT_EQ(printed(ag::full({}, 2.5f, {.requires_grad = true})), "tensor(2.5000, requires_grad=True)");
  const ag::Tensor x = ag::ones({2}, {.requires_grad = true});
  EXPECT_EQ(printed(ag::mul(x, x)), "tensor([1.0000, 1.0000], grad_fn=<mul>)");
  const std::vector<int32_t> ids{3, -1};
  EXPECT_EQ(printed(ag::tensor(std::span<const int32_t>(ids), {2})), "tensor([3, -1], dtype=int32)");
  EXPECT_EQ(printed(ag::zeros({2, 1, 2})), "tensor([[[0.0000, 0.0000]],\n\n        [[0.0000, 0.0000]]])");
  EXPECT_EQ(printed(ag::arange(2000.0)),
            "tensor([0.0000, 1.0000, 2.0000, ..., 1997.0000, 1998.0000, 1999.0000])");
  EXPECT_EQ(printed(ag::Tensor()), "tensor(undefined)");
}
