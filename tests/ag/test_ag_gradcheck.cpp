// ag::gradcheck (include/tensorgrad/ag/gradcheck.h): first the checker itself
// (it passes right gradients, rejects a gradient 5% off and reports the worst
// element, rejects a vacuous check, refuses bad inputs, leaves the inputs as
// it found them), then every eager op of ag/functional.h that has a gradient
// checked through it. The method and its tolerances are those of
// tests/ops/test_gradients.cpp (float32, step 1e-2, |num - ana| <= 1e-3 + 1e-2 |num|).
//
// Inputs come from std::mt19937 with fixed seeds, at small shapes; inputs of
// ops with kinks (relu, leaky_relu, elu, max, min, max-pool, l1, huber) are
// kept more than the step away from them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "tensorgrad/ag/functional.h"
#include "tensorgrad/ag/gradcheck.h"
#include "tensorgrad/ag/tensor.h"
#include "tensorgrad/core/error.h"
#include "test_support.h"

using namespace tensorgrad;
namespace ag = tensorgrad::ag;

namespace {

using Inputs = std::span<const ag::Tensor>;
using test_support::away_from_zero;
using test_support::uniform;

// A leaf that requires grad / a fixed tensor, over an engine tensor's values.
ag::Tensor leaf(const tensorgrad::Tensor& t) { return ag::Tensor(t, /*requires_grad=*/true); }
ag::Tensor fixed(const tensorgrad::Tensor& t) { return ag::Tensor(t, /*requires_grad=*/false); }

std::vector<uint32_t> bits(const ag::Tensor& t) {
  std::vector<uint32_t> out(size_t(t.numel()));
  std::memcpy(out.data(), t.data().data<float>(), out.size() * sizeof(float));
  return out;
}

// gradcheck(fn, inputs) passes, and every input is left as it was: values bit
// for bit, version, and no gradient stored.
::testing::AssertionResult gradients_match(const std::function<ag::Tensor(Inputs)>& fn,
                                           const std::vector<ag::Tensor>& inputs) {
  std::vector<std::vector<uint32_t>> before;
  std::vector<uint64_t> versions;
  for (const ag::Tensor& x : inputs) before.push_back(bits(x)), versions.push_back(x.version());
  ag::GradcheckResult r = ag::gradcheck(fn, inputs);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (bits(inputs[i]) != before[i]) return ::testing::AssertionFailure() << "input " << i << " was not restored";
    if (inputs[i].version() != versions[i]) return ::testing::AssertionFailure() << "input " << i << " version moved";
    if (inputs[i].grad().defined()) return ::testing::AssertionFailure() << "input " << i << " got a grad()";
  }
  if (!r.ok) return ::testing::AssertionFailure() << r.message;
  if (!(r.error <= 1.0) || r.index < 0)
    return ::testing::AssertionFailure() << "ok, but the worst element is " << r.index << " at " << r.error;
  return ::testing::AssertionSuccess();
}

// Values k * spacing for k in [0, n), shuffled and centred: all distinct, at
// least `spacing` apart (for max / max-pool, whose ties are kinks).
tensorgrad::Tensor distinct(const Shape& s, std::mt19937& rng, float spacing = 0.1f) {
  std::vector<float> v(size_t(s.numel()));
  for (size_t k = 0; k < v.size(); ++k) v[k] = (float(k) - float(v.size()) / 2) * spacing;
  std::shuffle(v.begin(), v.end(), rng);
  return tensorgrad::Tensor::from_vector(v, s);
}

ag::Tensor ids(std::initializer_list<int32_t> values, const Shape& shape) {
  std::vector<int32_t> v(values);
  return ag::tensor(std::span<const int32_t>(v), shape);
}

}  // namespace

// ---------------------------------------------------------------------------
// The checker itself.

TEST(AgGradcheck, ACorrectGradientPasses) {
  std::mt19937 rng(1);
  ag::Tensor x = leaf(uniform({3, 4}, rng, -1.5f, 1.5f));
  ag::Tensor y = leaf(uniform({3, 4}, rng, -1.5f, 1.5f));
  ag::GradcheckResult r = ag::gradcheck([](Inputs in) { return ag::tanh(in[0]) * in[1]; }, {x, y});
  EXPECT_TRUE(r.ok) << r.message;
  EXPECT_EQ(r.message, "");
  EXPECT_EQ(r.checked_inputs, (std::vector<size_t>{0, 1}));
  ASSERT_EQ(r.inputs.size(), 2u);
  EXPECT_EQ(r.inputs[0].numeric.size(), 12u);
  EXPECT_LE(r.error, 1.0);
  EXPECT_GE(r.index, 0);
  EXPECT_LT(r.index, 12);
  EXPECT_GT(r.max_abs_grad, 0.05);
  // d/dy sum(tanh(x) * y * w) = tanh(x) * w, so |numeric| <= 1 for input 1.
  for (float v : r.inputs[1].numeric) EXPECT_LE(std::fabs(v), 1.0f + 1e-3f);
}

TEST(AgGradcheck, AGradient5PercentOffIsRejectedAndItsWorstElementReported) {
  for (float off : {0.05f, -0.05f}) {
    SCOPED_TRACE(off);
    std::mt19937 rng(2);
    ag::Tensor x = leaf(uniform({4, 5}, rng, -1.0f, 1.0f));
    // Forward is x * (1 + off); the recorded history is x's alone, so the
    // analytic gradient is w where the numeric one is (1 + off) w.
    auto fn = [off](Inputs in) { return in[0] + (in[0] * off).detach(); };
    ag::GradcheckResult r = ag::gradcheck(fn, {x});
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.input, 0u);
    ASSERT_GE(r.index, 0);
    ASSERT_LT(r.index, 20);
    EXPECT_NEAR(r.numeric / r.analytic, 1.0 + off, 2e-3) << "numeric " << r.numeric << ", analytic " << r.analytic;
    EXPECT_GT(r.error, 1.0);
    EXPECT_NEAR(r.error, std::fabs(r.numeric - r.analytic) / (1e-3 + 1e-2 * std::fabs(r.numeric)), 1e-3 * r.error);
    // The worst element is the one whose weight (= analytic gradient) is largest.
    const std::vector<float>& num = r.inputs[0].numeric;
    const auto largest = std::max_element(num.begin(), num.end(), [](float a, float b) {
      return std::fabs(a) < std::fabs(b);
    });
    EXPECT_EQ(r.index, largest - num.begin());
    EXPECT_NE(r.message.find("input 0 {4, 5}"), std::string::npos) << r.message;
    EXPECT_NE(r.message.find("gradient mismatch, worst at element " + std::to_string(r.index)), std::string::npos)
        << r.message;
    // raise_exception throws the same message.
    ag::GradcheckOptions opt;
    opt.raise_exception = true;
    EXPECT_TRUE(test_support::throws<ValueError>([&] { ag::gradcheck(fn, {x}, opt); },
                                                 {"gradcheck failed", "gradient mismatch", "input 0"}));
  }
}

TEST(AgGradcheck, AVacuousCheckFailsSayingSo) {
  std::mt19937 rng(3);
  ag::Tensor x = leaf(uniform({3}, rng, -1.0f, 1.0f));
  // The output does not depend on the input at all (it records nothing).
  ag::GradcheckResult r = ag::gradcheck([](Inputs) { return ag::ones(Shape{3}); }, {x});
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.max_abs_grad, 0.0);
  EXPECT_TRUE(r.inputs.at(0).vacuous);
  EXPECT_NE(r.message.find("vacuous"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("does not depend on this input"), std::string::npos) << r.message;

  // Input 1 is ignored; input 0 is fine: only input 1 is reported.
  ag::Tensor y = leaf(uniform({2}, rng, -1.0f, 1.0f));
  r = ag::gradcheck([](Inputs in) { return ag::sigmoid(in[0]); }, {x, y});
  EXPECT_FALSE(r.ok);
  EXPECT_FALSE(r.inputs.at(0).vacuous);
  EXPECT_TRUE(r.inputs.at(1).vacuous);
  EXPECT_EQ(r.message.find("input 0"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("input 1 {2}: gradient is ~0 everywhere"), std::string::npos) << r.message;
}

TEST(AgGradcheck, BadInputsAreRefused) {
  ag::Tensor x = ag::tensor({1, 2, 3}, Shape{3}, {.requires_grad = true});
  auto fn = [](Inputs in) { return in[0] * 2.0f; };
  EXPECT_TRUE(test_support::throws<TypeError>([&] { ag::gradcheck(fn, {x, ids({0, 1}, Shape{2})}); },
                                              {"input 1", "int32", "expected float32", "closure"}));
  EXPECT_TRUE(test_support::throws<ValueError>([&] { ag::gradcheck(fn, {x.detach()}); },
                                               {"none of the 1 inputs requires grad", "requires_grad_"}));
  EXPECT_TRUE(test_support::throws<StateError>([&] { ag::gradcheck(fn, {x, ag::Tensor()}); },
                                               {"input 1", "undefined"}));
  EXPECT_TRUE(test_support::throws<TypeError>(
      [&] { ag::gradcheck([](Inputs) { return ag::arange(3, {DType::Int32}); }, {x}); }, {"int32", "float32"}));
  EXPECT_TRUE(test_support::throws<StateError>(
      [&] {
        ag::NoGradGuard guard;
        ag::gradcheck(fn, {x});
      },
      {"NoGradGuard"}));
}

TEST(AgGradcheck, LeavesTheInputsGradAndHistoryAlone) {
  std::mt19937 rng(4);
  ag::Tensor x = leaf(uniform({2, 3}, rng, -1.0f, 1.0f));
  x.set_grad(ag::full(Shape{2, 3}, 7.0f));
  ag::Tensor z = x * 3.0f;  // a non-leaf input; its history stays usable
  ag::Tensor fixed_y = fixed(uniform({2, 3}, rng, -1.0f, 1.0f));
  const std::vector<uint32_t> xb = bits(x), yb = bits(fixed_y);
  ag::GradcheckResult r = ag::gradcheck([](Inputs in) { return ag::sigmoid(in[0]) * in[1] + in[2]; },
                                        {z, fixed_y, x});
  EXPECT_TRUE(r.ok) << r.message;
  EXPECT_EQ(r.checked_inputs, (std::vector<size_t>{0, 2}));
  EXPECT_EQ(bits(x), xb);
  EXPECT_EQ(bits(fixed_y), yb);
  EXPECT_EQ(x.grad().to_vector(), std::vector<float>(6, 7.0f));
  ag::sum(z).backward();  // z's recorded op is still valid
  EXPECT_EQ(x.grad().to_vector(), std::vector<float>(6, 10.0f));
}

TEST(AgGradcheck, BuffersAreComparedAndRestored) {
  // loss = sum(v_k^2 * c_k) has gradient 2 v_k c_k.
  std::vector<float> v{0.5f, -1.25f, 2.0f}, c{1.0f, -0.5f, 0.25f}, grad(3);
  for (size_t k = 0; k < 3; ++k) grad[k] = 2 * v[k] * c[k];
  const std::vector<float> saved = v;
  auto loss = [&] {
    double s = 0;
    for (size_t k = 0; k < 3; ++k) s += double(v[k]) * v[k] * c[k];
    return s;
  };
  ag::GradcheckBuffer buf{v, grad, "v"};
  ag::GradcheckResult r = ag::gradcheck_buffers(loss, {&buf, 1});
  EXPECT_TRUE(r.ok) << r.message;
  EXPECT_EQ(v, saved);
  for (size_t k = 0; k < 3; ++k) EXPECT_NEAR(r.inputs[0].numeric[k], grad[k], 1e-4);
  grad[1] = -grad[1];
  r = ag::gradcheck_buffers(loss, {&buf, 1});
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.index, 1);
  std::vector<float> short_grad(2);
  ag::GradcheckBuffer bad{v, short_grad, "v"};
  EXPECT_TRUE(test_support::throws<ShapeError>([&] { ag::gradcheck_buffers(loss, {&bad, 1}); },
                                               {"3 values", "analytic gradient of 2"}));
}

// ---------------------------------------------------------------------------
// Every eager op with a gradient.

TEST(AgGradcheckOps, AddSubMulWithBroadcasting) {
  std::mt19937 rng(10);
  for (auto [sa, sb] : std::vector<std::pair<Shape, Shape>>{{{3, 4}, {3, 4}}, {{3, 4}, {4}}, {{2, 1, 4}, {3, 1}}}) {
    SCOPED_TRACE(sa.str() + " with " + sb.str());
    ag::Tensor a = leaf(uniform(sa, rng, -1.5f, 1.5f)), b = leaf(uniform(sb, rng, -1.5f, 1.5f));
    EXPECT_TRUE(gradients_match([](Inputs in) { return ag::add(in[0], in[1]); }, {a, b}));
    EXPECT_TRUE(gradients_match([](Inputs in) { return in[0] - in[1]; }, {a, b}));
    EXPECT_TRUE(gradients_match([](Inputs in) { return ag::mul(in[0], in[1]); }, {a, b}));
  }
}

TEST(AgGradcheckOps, MaximumMinimumOfDistinctValues) {
  std::mt19937 rng(11);
  // b {4} broadcast against a {3, 4}: every a[i][j] at least 0.05 from b[j].
  tensorgrad::Tensor bt = uniform({4}, rng, -1.0f, 1.0f);
  std::vector<float> av(12);
  std::uniform_real_distribution<float> d(-1.5f, 1.5f);
  for (size_t k = 0; k < av.size(); ++k) {
    do av[k] = d(rng);
    while (std::fabs(av[k] - bt.item(int64_t(k % 4))) < 0.05f);
  }
  ag::Tensor a = leaf(tensorgrad::Tensor::from_vector(av, Shape{3, 4})), b = leaf(bt);
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::maximum(in[0], in[1]); }, {a, b}));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::minimum(in[0], in[1]); }, {a, b}));
}

TEST(AgGradcheckOps, OperatorsWithScalars) {
  std::mt19937 rng(12);
  ag::Tensor x = leaf(uniform({2, 3}, rng, -1.0f, 1.0f));
  EXPECT_TRUE(gradients_match([](Inputs in) { return in[0] + 2.0f; }, {x}));
  EXPECT_TRUE(gradients_match([](Inputs in) { return 2.0f + in[0]; }, {x}));
  EXPECT_TRUE(gradients_match([](Inputs in) { return in[0] - 1.5f; }, {x}));
  EXPECT_TRUE(gradients_match([](Inputs in) { return 1.5f - in[0]; }, {x}));
  EXPECT_TRUE(gradients_match([](Inputs in) { return in[0] * -1.7f; }, {x}));
  EXPECT_TRUE(gradients_match([](Inputs in) { return 3.0f * in[0]; }, {x}));
  EXPECT_TRUE(gradients_match([](Inputs in) { return -in[0]; }, {x}));
}

TEST(AgGradcheckOps, Matmul) {
  std::mt19937 rng(13);
  ag::Tensor a = leaf(uniform({3, 4}, rng, -1.0f, 1.0f)), b = leaf(uniform({4, 5}, rng, -1.0f, 1.0f));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::matmul(in[0], in[1]); }, {a, b}));
}

TEST(AgGradcheckOps, ElementwiseFunctions) {
  std::mt19937 rng(14);
  // Kinked functions: |x| >= 0.1 = 10 steps, both sides present.
  ag::Tensor k = leaf(away_from_zero({3, 4}, rng, 0.1f, 1.5f));
  ag::Tensor s = leaf(uniform({3, 4}, rng, -2.0f, 2.0f));
  ag::Tensor p = leaf(uniform({3, 4}, rng, 0.5f, 2.0f));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::relu(in[0]); }, {k}));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::elu(in[0]); }, {k}));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::elu(in[0], 0.5f); }, {k}));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::leaky_relu(in[0]); }, {k}));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::leaky_relu(in[0], 0.2f); }, {k}));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::sigmoid(in[0]); }, {s}));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::tanh(in[0]); }, {s}));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::gelu(in[0]); }, {s}));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::gelu(in[0], "tanh"); }, {s}));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::silu(in[0]); }, {s}));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::softplus(in[0]); }, {s}));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::rsqrt(in[0]); }, {p}));
}

TEST(AgGradcheckOps, SoftmaxAndLogSoftmax) {
  std::mt19937 rng(15);
  ag::Tensor x = leaf(uniform({3, 5}, rng, -2.0f, 2.0f));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::softmax(in[0]); }, {x}));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::log_softmax(in[0], 1); }, {x}));
}

TEST(AgGradcheckOps, ReductionsAndShapes) {
  std::mt19937 rng(16);
  ag::Tensor x = leaf(uniform({3, 4}, rng, -1.0f, 1.0f));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::sum(in[0]); }, {x}));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::mean(in[0]) * 4.0f; }, {x}));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::reshape(in[0], Shape{2, 6}); }, {x}));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::narrow(in[0], 1, 1, 2); }, {x}));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::narrow(in[0], 0, 2, 1); }, {x}));
  EXPECT_TRUE(gradients_match([](Inputs in) { return in[0].clone(); }, {x}));
  ag::Tensor x3 = leaf(uniform({2, 2, 3}, rng, -1.0f, 1.0f));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::flatten(in[0]); }, {x3}));
  ag::Tensor col = leaf(uniform({3, 1}, rng, -1.0f, 1.0f));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::broadcast_to(in[0], Shape{2, 3, 4}); }, {col}));
}

TEST(AgGradcheckOps, CatOfThreeTensors) {
  std::mt19937 rng(17);
  ag::Tensor a = leaf(uniform({2, 3}, rng, -1.0f, 1.0f)), b = leaf(uniform({1, 3}, rng, -1.0f, 1.0f)),
             c = leaf(uniform({3, 3}, rng, -1.0f, 1.0f));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::cat({in[0], in[1], in[2]}); }, {a, b, c}));
  ag::Tensor d = leaf(uniform({2, 1}, rng, -1.0f, 1.0f)), e = leaf(uniform({2, 4}, rng, -1.0f, 1.0f));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::cat(in, 1); }, {a, d, e}));
}

TEST(AgGradcheckOps, IndexSelectAndEmbeddingWithRepeatedIds) {
  std::mt19937 rng(18);
  ag::Tensor x = leaf(uniform({4, 3}, rng, -1.0f, 1.0f));
  const ag::Tensor rows = ids({0, 2, 2, 3, 0, 2}, Shape{6});
  EXPECT_TRUE(gradients_match([rows](Inputs in) { return ag::index_select(in[0], rows); }, {x}));
  ag::Tensor weight = leaf(uniform({5, 3}, rng, -1.0f, 1.0f));
  const ag::Tensor tokens = ids({1, 4, 1, 0, 3, 1}, Shape{2, 3});
  EXPECT_TRUE(gradients_match([tokens](Inputs in) { return ag::embedding(tokens, in[0]); }, {weight}));
}

TEST(AgGradcheckOps, Conv2dWithBiasStride2Padding1) {
  std::mt19937 rng(19);
  ag::Tensor x = leaf(uniform({2, 5, 5, 2}, rng, -1.0f, 1.0f));
  ag::Tensor w = leaf(uniform({3, 3, 2, 3}, rng, -0.5f, 0.5f));
  ag::Tensor b = leaf(uniform({3}, rng, -0.5f, 0.5f));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::conv2d(in[0], in[1], in[2], 2, 1); }, {x, w, b}));
}

TEST(AgGradcheckOps, Pooling) {
  std::mt19937 rng(20);
  ag::Tensor x = leaf(distinct({1, 4, 4, 2}, rng));  // distinct: no tie inside a window
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::max_pool2d(in[0], 2); }, {x}));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::max_pool2d(in[0], 3, 2, 1); }, {x}));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::avg_pool2d(in[0], 2); }, {x}));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::avg_pool2d(in[0], 3, 2, 1); }, {x}));
}

TEST(AgGradcheckOps, RegressionLossesBothOperands) {
  std::mt19937 rng(21);
  const Shape s{3, 4};
  ag::Tensor input = leaf(uniform(s, rng, -1.0f, 1.0f)), target = leaf(uniform(s, rng, -1.0f, 1.0f));
  // The losses are means over 12 elements: scaled so each element's gradient is O(0.1..1).
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::mse_loss(in[0], in[1]) * 8.0f; }, {input, target}));

  // l1: |input - target| >= 0.1, away from the tie.
  tensorgrad::Tensor diff = away_from_zero(s, rng, 0.1f, 1.0f);
  std::vector<float> tv = input.to_vector(), dv = diff.to_vector();
  for (size_t k = 0; k < tv.size(); ++k) tv[k] -= dv[k];
  ag::Tensor l1_target = leaf(tensorgrad::Tensor::from_vector(tv, s));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::l1_loss(in[0], in[1]) * 8.0f; }, {input, l1_target}));

  // huber (delta 1): half the differences in [0.1, 0.9], half in [1.1, 2]; signs mixed.
  std::uniform_real_distribution<float> small(0.1f, 0.9f), large(1.1f, 2.0f);
  std::vector<float> hv = input.to_vector();
  for (size_t k = 0; k < hv.size(); ++k) {
    const float d = (k % 2 ? large(rng) : small(rng)) * ((k / 2) % 2 ? -1.0f : 1.0f);
    hv[k] -= d;
  }
  ag::Tensor huber_target = leaf(tensorgrad::Tensor::from_vector(hv, s));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::huber_loss(in[0], in[1]) * 8.0f; }, {input, huber_target}));
}

TEST(AgGradcheckOps, CrossEntropyWithIdsAndProbabilities) {
  std::mt19937 rng(22);
  ag::Tensor logits = leaf(uniform({4, 5}, rng, -2.0f, 2.0f));
  const ag::Tensor labels = ids({0, 3, 4, 3}, Shape{4});
  EXPECT_TRUE(
      gradients_match([labels](Inputs in) { return ag::cross_entropy(in[0], labels) * 4.0f; }, {logits}));
  ag::Tensor probs = ag::softmax(fixed(uniform({4, 5}, rng, -2.0f, 2.0f)));  // fixed: takes no gradient
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::cross_entropy(in[0], in[1]) * 4.0f; }, {logits, probs}));
}

TEST(AgGradcheckOps, BinaryCrossEntropyWithLogits) {
  std::mt19937 rng(23);
  ag::Tensor z = leaf(uniform({3, 4}, rng, -2.0f, 2.0f));
  ag::Tensor y = fixed(uniform({3, 4}, rng, 0.0f, 1.0f));  // the target takes no gradient
  EXPECT_TRUE(
      gradients_match([](Inputs in) { return ag::binary_cross_entropy_with_logits(in[0], in[1]) * 8.0f; }, {z, y}));
}

// ---- the ops that joined the op table for the eager API ----

TEST(AgGradcheckOps, DivisionBothOperandsWithBroadcasting) {
  std::mt19937 rng(40);
  ag::Tensor a = leaf(uniform({3, 4}, rng, -1.0f, 1.0f));
  ag::Tensor b = leaf(away_from_zero({4}, rng, 0.5f, 1.5f));
  EXPECT_TRUE(gradients_match([](Inputs in) { return in[0] / in[1]; }, {a, b}));
  EXPECT_TRUE(gradients_match([](Inputs in) { return in[0] / 4.0f; }, {a}));
  EXPECT_TRUE(gradients_match([](Inputs in) { return 2.0f / in[0]; }, {b}));
}

TEST(AgGradcheckOps, ExpLogSqrtErfPow) {
  std::mt19937 rng(41);
  ag::Tensor s = leaf(uniform({3, 4}, rng, -1.5f, 1.5f));
  ag::Tensor p = leaf(uniform({3, 4}, rng, 0.5f, 2.0f));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::exp(in[0]); }, {s}));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::log(in[0]); }, {p}));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::sqrt(in[0]); }, {p}));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::erf(in[0]); }, {s}));
  for (float e : {2.0f, 3.0f, 0.5f, -1.0f})
    EXPECT_TRUE(gradients_match([e](Inputs in) { return ag::pow(in[0], e); }, {p})) << "exponent " << e;
}

TEST(AgGradcheckOps, ClampAwayFromItsBounds) {
  // Values at least 0.1 (10 steps) from both bounds, on both sides of each.
  ag::Tensor x = leaf(tensorgrad::Tensor::from_vector(std::vector<float>{-1.2f, -0.3f, 0.2f, 0.45f, 0.9f, 1.4f},
                                                      Shape{2, 3}));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::clamp(in[0], -0.5f, 0.7f); }, {x}));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::clamp(in[0], 0.0f, INFINITY); }, {x}));
}

TEST(AgGradcheckOps, ReductionsAlongADimension) {
  std::mt19937 rng(42);
  // Distinct values, so amax's maximum is unique in every slice.
  std::vector<float> v(24);
  std::iota(v.begin(), v.end(), 0.0f);
  std::shuffle(v.begin(), v.end(), rng);
  for (float& e : v) e = e * 0.1f - 1.2f;
  ag::Tensor x = leaf(tensorgrad::Tensor::from_vector(v, Shape{2, 3, 4}));
  for (int dim : {0, 1, -1})
    for (bool keepdim : {false, true}) {
      SCOPED_TRACE("dim " + std::to_string(dim) + (keepdim ? " keepdim" : ""));
      EXPECT_TRUE(gradients_match([=](Inputs in) { return ag::sum(in[0], dim, keepdim); }, {x}));
      EXPECT_TRUE(gradients_match([=](Inputs in) { return ag::mean(in[0], dim, keepdim); }, {x}));
      EXPECT_TRUE(gradients_match([=](Inputs in) { return ag::amax(in[0], dim, keepdim); }, {x}));
    }
}

TEST(AgGradcheckOps, TransposeAndBatchedMatmul) {
  std::mt19937 rng(43);
  ag::Tensor m = leaf(uniform({3, 4}, rng, -1.0f, 1.0f));
  ag::Tensor x = leaf(uniform({2, 3, 4}, rng, -1.0f, 1.0f));
  ag::Tensor y = leaf(uniform({2, 4, 5}, rng, -1.0f, 1.0f));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::t(in[0]); }, {m}));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::transpose(in[0], 0, -1); }, {x}));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::matmul(in[0], in[1]); }, {x, y}));
  // Attention-style: x x^T per batch entry, through transpose.
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::matmul(in[0], ag::transpose(in[0], 1, 2)); }, {x}));
}

TEST(AgGradcheckOps, CatOfMoreTensorsThanOneOpTakes) {
  std::mt19937 rng(44);
  std::vector<ag::Tensor> parts;
  for (int i = 0; i < 8; ++i) parts.push_back(leaf(uniform({2, int64_t(1 + i % 3)}, rng, -1.0f, 1.0f)));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::cat(in, 1); }, parts));
  EXPECT_EQ(ag::cat(parts, 1).shape(), (Shape{2, 15}));
}

TEST(AgGradcheckOps, DropoutWithAFixedStream) {
  // gradcheck calls the function many times: a generator made inside it gives
  // the same key and counter, hence the same mask, on every call.
  std::mt19937 rng(45);
  ag::Tensor x = leaf(uniform({4, 8}, rng, -1.0f, 1.0f));
  EXPECT_TRUE(gradients_match(
      [](Inputs in) {
        ag::Generator g(9);
        return ag::dropout(in[0], 0.3f, true, &g);
      },
      {x}));
}

TEST(AgGradcheckOps, BatchNormWithBatchAndRunningStatistics) {
  std::mt19937 rng(46);
  ag::Tensor x = leaf(uniform({6, 3}, rng, -1.5f, 1.5f));
  ag::Tensor img = leaf(uniform({2, 3, 3, 2}, rng, -1.5f, 1.5f));
  ag::Tensor gamma = leaf(uniform({3}, rng, 0.5f, 1.5f)), beta = leaf(uniform({3}, rng, -0.5f, 0.5f));
  ag::Tensor g2 = leaf(uniform({2}, rng, 0.5f, 1.5f)), b2 = leaf(uniform({2}, rng, -0.5f, 0.5f));
  ag::Tensor mean = fixed(uniform({3}, rng, -0.2f, 0.2f)), var = fixed(uniform({3}, rng, 0.5f, 1.5f));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::batch_norm(in[0], in[1], in[2]); }, {x, gamma, beta}));
  EXPECT_TRUE(gradients_match([](Inputs in) { return ag::batch_norm(in[0], in[1], in[2]); }, {img, g2, b2}));
  EXPECT_TRUE(gradients_match(
      [](Inputs in) { return ag::batch_norm(in[0], in[1], in[2], false, in[3], in[4], 1e-3f); },
      {x, gamma, beta, mean, var}));
  // Evaluation against its formula.
  const std::vector<float> xv = x.to_vector(), y = ag::batch_norm(x, gamma, beta, false, mean, var, 1e-3f).to_vector();
  for (size_t i = 0; i < xv.size(); ++i) {
    const size_t c = i % 3;
    const double want = (xv[i] - mean.to_vector()[c]) / std::sqrt(double(var.to_vector()[c]) + 1e-3) *
                            gamma.to_vector()[c] + beta.to_vector()[c];
    EXPECT_NEAR(y[i], want, 1e-5) << i;
  }
  EXPECT_THROW(ag::batch_norm(x, gamma, beta, false), ValueError);
  EXPECT_EQ(ag::ge(x, ag::zeros(Shape{3})).to_vector()[0], xv[0] >= 0 ? 1.0f : 0.0f);
}
