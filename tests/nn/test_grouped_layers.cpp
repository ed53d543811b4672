// The mobile networks' layers: Conv2D(groups=) and Conv1D(groups=) (Keras
// 3), DepthwiseConv2D, SeparableConv2D and ZeroPadding2D (Keras), the
// activations relu6, hard_sigmoid and hard_swish, and the eager
// Conv2d(groups=) and relu6 / hardsigmoid / hardswish (PyTorch): shapes and
// weight layouts as Keras' and PyTorch's, values against plain loops in
// double here from the layers' own weights, gradients through a model
// against finite differences, and the errors of bad arguments.
#include <gtest/gtest.h>

#include "model_gradient_check.h"
#include "test_support.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "tensorgrad/ag/functional.h"
#include "tensorgrad/ag/nn/conv.h"
#include "tensorgrad/tensorgrad.h"

using namespace tensorgrad;
using nn::Sequential;

namespace {

Tensor random_tensor(const Shape& s, uint32_t seed) {
  std::mt19937 rng(seed);
  return test_support::uniform(s, rng, -1.0f, 1.0f);
}

// y[b, oy, ox, f] = sum over f's group's channels and the taps, in double;
// kernel {kh, kw, C/G, F}, TensorFlow's "same" pads.
std::vector<double> grouped_conv(const Tensor& x, const std::vector<float>& k, int64_t kh, int64_t kw, int64_t F,
                                 int64_t G, int64_t stride, bool same) {
  const Shape& s = x.shape();
  const int64_t B = s[0], H = s[1], W = s[2], C = s[3], Cg = C / G, Fg = F / G;
  auto pads = [&](int64_t n, int64_t kk, int64_t& out) {
    if (!same) {
      out = (n - kk) / stride + 1;
      return int64_t(0);
    }
    out = (n + stride - 1) / stride;
    return std::max<int64_t>((out - 1) * stride + kk - n, 0) / 2;
  };
  int64_t Ho, Wo;
  const int64_t pt = pads(H, kh, Ho), pl = pads(W, kw, Wo);
  const std::vector<float> xv = x.to_vector();
  std::vector<double> y(size_t(B * Ho * Wo * F), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t oy = 0; oy < Ho; ++oy)
      for (int64_t ox = 0; ox < Wo; ++ox)
        for (int64_t f = 0; f < F; ++f)
          for (int64_t ky = 0; ky < kh; ++ky)
            for (int64_t kx = 0; kx < kw; ++kx) {
              const int64_t iy = oy * stride - pt + ky, ix = ox * stride - pl + kx;
              if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
              for (int64_t c = 0; c < Cg; ++c)
                y[size_t(((b * Ho + oy) * Wo + ox) * F + f)] +=
                    double(xv[size_t(((b * H + iy) * W + ix) * C + f / Fg * Cg + c)]) *
                    k[size_t(((ky * kw + kx) * Cg + c) * F + f)];
            }
  return y;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-4 * (1 + std::fabs(want[i]))) << i;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST(GroupedLayers, Conv2DGroupsHasKeras3sKernelAndValues) {
  Sequential m(Shape{6, 5, 4});
  m.add(nn::Conv2D(6, {3, 3}, {1, 1}, "same", {1, 1}, "linear", false, 2));
  const std::vector<nn::Weight> w = m.weights();
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].value.shape(), (Shape{3, 3, 2, 6}));
  const Tensor x = random_tensor({2, 6, 5, 4}, 1);
  expect_close(m.predict(x).to_vector(), grouped_conv(x, w[0].value.to_vector(), 3, 3, 6, 2, 1, true));
}

TEST(GroupedLayers, Conv1DGroups) {
  Sequential m(Shape{9, 6});
  m.add(nn::Conv1D(3, 3, 2, "valid", 1, "linear", false, 3));
  const std::vector<nn::Weight> w = m.weights();
  EXPECT_EQ(w[0].value.shape(), (Shape{3, 2, 3}));  // {k, C/groups, filters}
  const Tensor x = random_tensor({2, 9, 6}, 2);
  const Tensor x4 = x.reshape({2, 1, 9, 6});
  expect_close(m.predict(x).to_vector(), grouped_conv(x4, w[0].value.to_vector(), 1, 3, 3, 3, 2, false));
}

TEST(GroupedLayers, DepthwiseConv2DHasKerasLayoutAndValues) {
  for (int64_t multiplier : {1, 2}) {
    SCOPED_TRACE("depth_multiplier " + std::to_string(multiplier));
    Sequential m(Shape{7, 7, 3});
    m.add(nn::DepthwiseConv2D({3, 3}, {2, 2}, "same", multiplier));
    const std::vector<nn::Weight> w = m.weights();
    ASSERT_EQ(w.size(), 2u);
    EXPECT_EQ(w[0].name, "depthwise_conv2d" + std::string(multiplier == 1 ? "" : "_1") + "/kernel");
    EXPECT_EQ(w[0].value.shape(), (Shape{3, 3, 3, multiplier}));  // Keras' {kh, kw, C, depth_multiplier}
    EXPECT_EQ(w[1].value.shape(), (Shape{3 * multiplier}));
    Tensor(w[1].value).copy_from(random_tensor({3 * multiplier}, 9));
    EXPECT_EQ(m.output_shape(), (Shape{4, 4, 3 * multiplier}));
    const Tensor x = random_tensor({2, 7, 7, 3}, 3);
    // {kh, kw, C, M} is {kh, kw, 1, C M} in memory: output c M + m from channel c.
    std::vector<double> want = grouped_conv(x, w[0].value.to_vector(), 3, 3, 3 * multiplier, 3, 2, true);
    const std::vector<float> bias = w[1].value.to_vector();
    for (size_t i = 0; i < want.size(); ++i) want[i] += bias[i % bias.size()];
    expect_close(m.predict(x).to_vector(), want);
  }
}

TEST(GroupedLayers, SeparableConv2DIsDepthwiseThenPointwise) {
  Sequential m(Shape{6, 6, 2});
  m.add(nn::SeparableConv2D(4, {3, 3}, {1, 1}, "valid", 2, {1, 1}, "relu6"));
  const std::vector<nn::Weight> w = m.weights();
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[0].name, "separable_conv2d/depthwise_kernel");
  EXPECT_EQ(w[0].value.shape(), (Shape{3, 3, 2, 2}));
  EXPECT_EQ(w[1].name, "separable_conv2d/pointwise_kernel");
  EXPECT_EQ(w[1].value.shape(), (Shape{1, 1, 4, 4}));
  EXPECT_EQ(w[2].value.shape(), (Shape{4}));
  Tensor(w[2].value).copy_from(random_tensor({4}, 8));
  const Tensor x = random_tensor({2, 6, 6, 2}, 4);
  const std::vector<double> mid = grouped_conv(x, w[0].value.to_vector(), 3, 3, 4, 2, 1, false);
  std::vector<float> midf(mid.begin(), mid.end());
  const Tensor mt = Tensor::from_vector(midf, {2, 4, 4, 4});
  std::vector<double> want = grouped_conv(mt, w[1].value.to_vector(), 1, 1, 4, 1, 1, false);
  const std::vector<float> bias = w[2].value.to_vector();
  for (size_t i = 0; i < want.size(); ++i) want[i] = std::min(std::max(want[i] + bias[i % 4], 0.0), 6.0);
  expect_close(m.predict(x).to_vector(), want);
}

TEST(GroupedLayers, ZeroPadding2DPadsEachSide) {
  Sequential m(Shape{2, 3, 1});
  m.add(nn::ZeroPadding2D({{{1, 0}, {0, 2}}}));
  EXPECT_EQ(m.output_shape(), (Shape{3, 5, 1}));
  const Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {1, 2, 3, 1});
  EXPECT_EQ(m.predict(x).to_vector(), (std::vector<float>{0, 0, 0, 0, 0, 1, 2, 3, 0, 0, 4, 5, 6, 0, 0}));
  EXPECT_NE(message_of([] { nn::ZeroPadding2D({{{1, -1}, {0, 0}}}); }).find("padding must be >= 0"),
            std::string::npos);
}

TEST(GroupedLayers, HardActivationsByName) {
  const std::vector<float> xs{-5.0f, -3.0f, -1.5f, 0.0f, 0.5f, 3.0f, 5.0f, 7.0f};
  const Tensor x = Tensor::from_vector(xs, {1, 8});
  for (const char* name : {"relu6", "hard_sigmoid", "hard_swish"}) {
    SCOPED_TRACE(name);
    Sequential m(Shape{8});
    m.add(nn::ActivationLayer(name));
    const std::vector<float> got = m.predict(x).to_vector();
    for (size_t i = 0; i < xs.size(); ++i) {
      const double v = xs[i], r6 = std::min(std::max(v, 0.0), 6.0), hs = std::min(std::max(v + 3, 0.0), 6.0) / 6;
      const double want = std::string(name) == "relu6" ? r6 : std::string(name) == "hard_sigmoid" ? hs : v * hs;
      EXPECT_NEAR(got[i], want, 1e-6) << "x = " << v;
    }
    EXPECT_EQ(nn::activation_name(nn::activation_from_name(name)), std::string(name));
  }
  EXPECT_EQ(nn::activation_from_name("hard_silu"), nn::Activation::HardSwish);
}

TEST(GroupedLayers, GradientsThroughAModelMatchFiniteDifferences) {
  Sequential m(Shape{6, 6, 4});
  m.add(nn::DepthwiseConv2D({3, 3}, {1, 1}, "same", 2));
  m.add(nn::ZeroPadding2D({{{1, 0}, {0, 2}}}));
  m.add(nn::Conv2D(4, {3, 3}, {2, 2}, "valid", {1, 1}, "linear", true, 2));
  m.add(nn::SeparableConv2D(3, {2, 2}, {1, 1}, "same"));
  m.add(nn::Flatten());
  // Linear layers: the loss is bilinear in the weights and the input, so
  // the central differences are exact up to rounding.
  EXPECT_EQ(test_support::check_gradients(m, {random_tensor({2, 6, 6, 4}, 5)}, 6), "");
}

TEST(GroupedLayers, BadGroupsNameTheLayerAndTheNumbers) {
  EXPECT_NE(message_of([] { nn::Conv2D(6, {3, 3}, {1, 1}, "valid", {1, 1}, "linear", true, 4); })
                .find("groups must be >= 1 and divide filters (6); got groups 4"),
            std::string::npos);
  const std::string msg = message_of([] {
    Sequential m(Shape{5, 5, 6});
    m.add(nn::Conv2D(8, {3, 3}, {1, 1}, "valid", {1, 1}, "linear", true, 4));
  });
  EXPECT_NE(msg.find("conv2d"), std::string::npos) << msg;
  EXPECT_NE(msg.find("groups (4) must divide the input channels; got 6 channels"), std::string::npos) << msg;
  EXPECT_THROW(nn::DepthwiseConv2D({3, 3}, {1, 1}, "valid", 0), ValueError);
  EXPECT_THROW(nn::SeparableConv2D(0, {3, 3}), ValueError);
}

TEST(GroupedLayers, EagerConv2dGroupsHasPyTorchsLayout) {
  ag::manual_seed(3);
  ag::nn::Conv2d conv(4, 6, 3, 1, 1, 1, true, 2);
  EXPECT_EQ(conv.weight.shape(), (Shape{6, 2, 3, 3}));  // {out, in / groups, kh, kw}
  const Tensor x = random_tensor({2, 5, 5, 4}, 7);
  const ag::Tensor y = conv.forward(ag::Tensor(x));
  // The engine's {kh, kw, C/G, F} from PyTorch's {F, C/G, kh, kw}.
  const std::vector<float> w = conv.weight.data().to_vector(), bias = conv.bias.data().to_vector();
  std::vector<float> k(w.size());
  for (int64_t f = 0; f < 6; ++f)
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t t = 0; t < 9; ++t) k[size_t((t * 2 + c) * 6 + f)] = w[size_t((f * 2 + c) * 9 + t)];
  std::vector<double> want = grouped_conv(x, k, 3, 3, 6, 2, 1, true);
  for (size_t i = 0; i < want.size(); ++i) want[i] += bias[i % 6];
  expect_close(y.data().to_vector(), want);
  EXPECT_THROW(ag::nn::Conv2d(4, 6, 3, 1, 0, 1, true, 4), ValueError);
}

TEST(GroupedLayers, EagerHardActivations) {
  const ag::Tensor x(Tensor::from_vector(std::vector<float>{-4.0f, -1.0f, 0.0f, 2.0f, 4.0f, 8.0f}, {6}));
  const std::vector<float> r6 = ag::relu6(x).data().to_vector(), hs = ag::hardsigmoid(x).data().to_vector(),
                           hw = ag::hardswish(x).data().to_vector();
  const std::vector<float> xs = x.data().to_vector();
  for (size_t i = 0; i < xs.size(); ++i) {
    const double v = xs[i], h = std::min(std::max(v + 3, 0.0), 6.0) / 6;
    EXPECT_NEAR(r6[i], std::min(std::max(v, 0.0), 6.0), 1e-6);
    EXPECT_NEAR(hs[i], h, 1e-6);
    EXPECT_NEAR(hw[i], v * h, 1e-6);
  }
}
