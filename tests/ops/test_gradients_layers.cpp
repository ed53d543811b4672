// Gradient checks for the layer ops (Reshape, Rsqrt, the activations Gelu,
// GeluTanh, Silu, Elu, LeakyRelu, Softplus, the error function Erf, MeanLastAxis, Slice, Concat, Gather,
// Conv2D, MaxPool2D, AvgPool2D) and compositions of them (layer
// normalisation, a small CNN), against
// central finite differences, through the real static path: Graph ->
// Graph::gradients -> Executable::run, by tests/support/gradient_check.h's
// check (how it works is written there), as tests/ops/test_gradients.cpp.
//
// Precision (float32; as in test_gradients.cpp, after ggml's test-backend-ops;
// CheckOptions' defaults):
//  * step h = 1e-2 on inputs of magnitude O(1). The central difference's
//    truncation error is h^2/6 * |f'''|: zero for the linear ops (reshape,
//    slice, concat, gather, pooling away from a switch of the argmax,
//    the bilinear convolution), ~2e-5 for gelu/silu/softplus/elu with O(1)
//    arguments, and at most ~4e-4 for rsqrt on [0.5, 2] (|f'''| = 15/8 x^-3.5
//    <= 21 at x = 0.5), against gradients of magnitude >= 0.1 there.
//  * every loss is kept O(1..10); one float32 forward carries a relative
//    rounding error of a few ulps, and only the outputs a perturbed element
//    touches change between the two runs (the rest round identically: the runs
//    are deterministic on one thread), so the quotient's noise is ~1e-5.
//  * tolerance, per element: |num - ana| <= atol + rtol * |num| with
//    atol = 1e-3 and rtol = 1e-2: a 5% error is caught in any element above
//    0.025, and every check must have some gradient above 1e-2 (min_grad),
//    else it is vacuous and fails.
//  * kinks: elu (alpha != 1) and leaky_relu change slope at 0, so their inputs
//    satisfy |x| >= 0.1 = 10 h. Max pooling switches its argmax when two
//    window entries cross; its inputs are a permutation of distinct values
//    spaced 0.05 > 2 h apart, so no step of h reorders a window.
//
// All inputs come from std::mt19937 with fixed seeds; the graphs are small
// enough to run on the calling thread, so every run is deterministic.
#include <gtest/gtest.h>

#include "gradient_check.h"
#include "test_support.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "tensorgrad/backend/executable.h"
#include "tensorgrad/core/threads.h"
#include "tensorgrad/graph/graph.h"

using namespace tensorgrad;

namespace {

using test_support::away_from_zero;
using test_support::GradCheck;
using test_support::uniform;

// Distinct values: a random permutation of 0..n-1, times `spacing`, centred.
Tensor distinct(const Shape& s, std::mt19937& rng, float spacing) {
  std::vector<int> perm(size_t(s.numel()));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<float> v(perm.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = (float(perm[i]) - float(v.size()) / 2.0f) * spacing;
  return Tensor::from_vector(v, s);
}

using test_support::window;
using test_support::window_str;
using test_support::for_each_tap;
using test_support::WinogradGuard;

const std::vector<Shape> kShapes = {{5}, {3, 4}, {2, 3, 4}};

// ---------------------------------------------------------------------------
// Reshape (a view), forward and in its gradient.

TEST(LayerOpGrad, Reshape) {
  const std::vector<std::pair<Shape, Shape>> cases = {{{2, 3, 4}, {6, 4}}, {{3, 4}, {12}}, {{12}, {2, 2, 3}}};
  for (const auto& [from, to] : cases) {
    SCOPED_TRACE(from.str() + " -> " + to.str());
    GradCheck c(1000);
    Value x = c.param(uniform(from, c.rng, -1.5f, 1.5f), "x");
    // A reshape of a parameter and a reshape of an intermediate, consumed by
    // a nonlinear op after it (so the reshaped gradient is not just w).
    Value y = c.g.add(c.g.tanh(c.g.reshape(x, to)), c.g.reshape(c.g.mul(x, x), to));
    ASSERT_EQ(c.g.shape(y), to);
    EXPECT_EQ(c.check(c.project(c.g.sigmoid(y))).message, "");
  }
}

// ---------------------------------------------------------------------------
// Elementwise activations.

TEST(LayerOpGrad, Rsqrt) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(s.str());
    GradCheck c(1001);
    Value x = c.param(uniform(s, c.rng, 0.5f, 2.0f), "x");
    EXPECT_EQ(c.check(c.project(c.g.apply(OpKind::Rsqrt, {x}))).message, "");
  }
}

TEST(LayerOpGrad, SmoothActivations) {
  for (OpKind op : {OpKind::Gelu, OpKind::GeluTanh, OpKind::Silu, OpKind::Softplus})
    for (const Shape& s : kShapes) {
      SCOPED_TRACE(std::string(op_info(op).name) + " " + s.str());
      GradCheck c(1002 + uint32_t(op));
      Value x = c.param(uniform(s, c.rng, -3.0f, 3.0f), "x");
      EXPECT_EQ(c.check(c.project(c.g.unary(op, x))).message, "");
    }
}

// erf's slope is below 2e-3 past |x| = 2.5: on [-3, 3] a draw can be all flat (a vacuous check), so
// its inputs stay in [-1.5, 1.5], where every element's slope is above 0.1.
TEST(LayerOpGrad, Erf) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(s.str());
    GradCheck c(1003);
    Value x = c.param(uniform(s, c.rng, -1.5f, 1.5f), "x");
    EXPECT_EQ(c.check(c.project(c.g.unary(OpKind::Erf, x))).message, "");
  }
}

TEST(LayerOpGrad, EluAndLeakyRelu) {
  const std::vector<std::pair<OpKind, float>> cases = {
      {OpKind::Elu, 1.0f}, {OpKind::Elu, 0.5f}, {OpKind::LeakyRelu, 0.2f}};
  for (const auto& [op, param] : cases)
    for (const Shape& s : kShapes) {
      SCOPED_TRACE(std::string(op_info(op).name) + " " + std::to_string(param) + " " + s.str());
      GradCheck c(1010 + uint32_t(op));
      Tensor xt = away_from_zero(s, c.rng, 0.1f, 2.0f);  // |x| >= 10 h: no step crosses the kink at 0
      int neg = 0;
      for (float v : xt.to_vector()) neg += v < 0;
      EXPECT_GT(neg, 0);  // both branches exercised
      EXPECT_LT(neg, int(xt.numel()));
      Value x = c.param(xt, "x");
      EXPECT_EQ(c.check(c.project(c.g.unary(op, x, param))).message, "");
    }
}

// ---------------------------------------------------------------------------
// Reductions and layout ops.

TEST(LayerOpGrad, MeanLastAxis) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(s.str());
    GradCheck c(1020);
    Value x = c.param(uniform(s, c.rng, -1.5f, 1.5f), "x");
    Value m = c.g.apply(OpKind::MeanLastAxis, {x});
    Shape want = s;
    want.set(-1, 1);
    ASSERT_EQ(c.g.shape(m), want);
    // Both the plain mean and the mean of a nonlinear function.
    Value y = c.g.add(m, c.g.apply(OpKind::MeanLastAxis, {c.g.mul(x, x)}));
    EXPECT_EQ(c.check(c.g.scale(c.project(y), 2.0f)).message, "");
  }
}

TEST(LayerOpGrad, Slice) {
  const Shape s{3, 4, 5};
  struct Case {
    int axis;
    int64_t start, length;
  };
  for (Case k : {Case{0, 1, 2}, Case{0, 0, 1}, Case{1, 1, 2}, Case{1, 3, 1}, Case{2, 0, 3}, Case{2, 2, 3}}) {
    SCOPED_TRACE("axis " + std::to_string(k.axis) + " [" + std::to_string(k.start) + ", +" +
                 std::to_string(k.length) + ")");
    GradCheck c(1030 + uint32_t(k.axis));
    Value x = c.param(uniform(s, c.rng, -1.5f, 1.5f), "x");
    Value y = c.g.slice(c.g.tanh(x), k.axis, k.start, k.length);
    Shape want = s;
    want.set(k.axis, k.length);
    ASSERT_EQ(c.g.shape(y), want);
    EXPECT_EQ(c.check(c.project(y)).message, "");
  }
}

TEST(LayerOpGrad, Concat) {
  for (int axis : {0, 1, 2}) {
    SCOPED_TRACE("axis " + std::to_string(axis));
    GradCheck c(1040 + uint32_t(axis));
    Shape sa{2, 3, 4}, sb{2, 3, 4};
    sb.set(axis, axis + 1);  // the second operand differs along the axis
    Value a = c.param(uniform(sa, c.rng, -1.5f, 1.5f), "a");
    Value b = c.param(uniform(sb, c.rng, -1.5f, 1.5f), "b");
    Value y = c.g.concat(c.g.tanh(a), c.g.mul(b, b), axis);
    Shape want = sa;
    want.set(axis, sa[axis] + sb[axis]);
    ASSERT_EQ(c.g.shape(y), want);
    EXPECT_EQ(c.check(c.project(y)).message, "");
  }
}

TEST(LayerOpGrad, GatherRepeatedIds) {
  const std::vector<int32_t> ids = {1, 3, 1, 5, 0, 3, 3, 2};  // repeats; row 4 unused
  for (bool float_ids : {false, true}) {
    SCOPED_TRACE(float_ids ? "float ids through to_index" : "int32 ids");
    GradCheck c(1050);
    Value table = c.param(uniform({6, 4}, c.rng, -1.5f, 1.5f), "table");
    Value id;
    if (float_ids) {
      std::vector<float> f(ids.begin(), ids.end());
      id = c.g.apply(OpKind::ToIndex, {c.data(Tensor::from_vector(f, {2, 4}), "ids")});
    } else {
      id = c.data(Tensor::from_vector(std::span<const int32_t>(ids), Shape{2, 4}), "ids");
    }
    Value y = c.g.apply(OpKind::Gather, {table, id});
    ASSERT_EQ(c.g.shape(y), (Shape{2, 4, 4}));
    EXPECT_EQ(c.check(c.project(c.g.tanh(y))).message, "");
  }
}

// ---------------------------------------------------------------------------
// Windows over x {B, H, W, C} for the convolution and pooling checks.

struct WindowCase {
  const char* name;
  Shape x;
  Window2D w;
};

const std::vector<WindowCase> kWindowCases = {
    {"3x3_same", {2, 4, 5, 2}, window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1)},
    {"3x3_valid", {1, 5, 6, 1}, window(3, 3, 1, 1)},
    {"2x2_s2", {2, 4, 6, 3}, window(2, 2, 2, 2)},
    {"3x3_s2_pads0011", {1, 5, 6, 2}, window(3, 3, 2, 2, 1, 1, 0, 0, 1, 1)},
    {"3x3_dilation2_same", {1, 6, 6, 2}, window(3, 3, 1, 1, 2, 2, 2, 2, 2, 2)},
    {"3x3_dilation2_valid", {1, 6, 7, 1}, window(3, 3, 1, 1, 2, 2)},
    {"1x3_conv1d", {2, 1, 8, 3}, window(1, 3, 1, 1, 1, 1, 0, 1, 0, 1)},
    {"2x3_mixed", {1, 6, 7, 2}, window(2, 3, 2, 1, 1, 2, 1, 0, 0, 2)},
};

// The direct Conv2D op and its two backward ops (each has a gradient rule,
// so gradients of gradients work), over the windows above plus strided ones.
TEST(LayerOpGradConv2D, ImageAndKernel) {
  const int64_t f = 3;
  std::vector<WindowCase> cases = kWindowCases;
  // Rows wider than the kernel's 64-pixel block, stride 1 and 2.
  cases.push_back({"1x3_70_steps", {1, 1, 70, 2}, window(1, 3, 1, 1, 1, 1, 0, 1, 0, 1)});
  cases.push_back({"1x3_s2_140_steps", {1, 1, 140, 1}, window(1, 3, 1, 2, 1, 1, 0, 1, 0, 1)});
  for (const WindowCase& k : cases) {
    SCOPED_TRACE(std::string(k.name) + " " + k.x.str() + " " + window_str(k.w));
    GradCheck c(1250);
    Value x = c.param(uniform(k.x, c.rng, -1.0f, 1.0f), "x");
    Value kern = c.param(uniform({k.w.kh, k.w.kw, k.x[3], f}, c.rng, -0.5f, 0.5f), "K");
    OpAttrs at;
    at.window = k.w;
    Value y = c.g.apply(OpKind::Conv2D, {x, kern}, at);
    ASSERT_EQ(c.g.shape(y), (Shape{k.x[0], k.w.out_h(k.x[1]), k.w.out_w(k.x[2]), f}));
    EXPECT_EQ(c.check(c.project(y)).message, "");
  }
}

// The bias form, conv(x, K) + bias{F} in the kernel (a Conv2D layer with a
// bias): every operand's gradient, and the value against the separate add.
TEST(LayerOpGradConv2D, WithBias) {
  const int64_t f = 3;
  std::vector<WindowCase> cases = kWindowCases;
  cases.push_back({"1x3_70_steps", {1, 1, 70, 2}, window(1, 3, 1, 1, 1, 1, 0, 1, 0, 1)});
  for (const WindowCase& k : cases) {
    SCOPED_TRACE(std::string(k.name) + " " + k.x.str() + " " + window_str(k.w));
    GradCheck c(1260);
    const Tensor tx = uniform(k.x, c.rng, -1.0f, 1.0f), tk = uniform({k.w.kh, k.w.kw, k.x[3], f}, c.rng, -0.5f, 0.5f),
                 tb = uniform({f}, c.rng, -0.5f, 0.5f);
    Value x = c.param(tx, "x"), kern = c.param(tk, "K"), bias = c.param(tb, "bias");
    OpAttrs at;
    at.window = k.w;
    EXPECT_EQ(c.check(c.project(c.g.apply(OpKind::Conv2D, {x, kern, bias}, at))).message, "");

    Graph g;
    const Value gx = g.state(tx, "x"), gk = g.state(tk, "K"), gb = g.state(tb, "bias");
    const Value fused = g.apply(OpKind::Conv2D, {gx, gk, gb}, at), apart = g.add(g.apply(OpKind::Conv2D, {gx, gk}, at), gb);
    Executable exe(std::move(g), {fused, apart});
    exe.run();
    EXPECT_EQ(exe.output(fused).to_vector(), exe.output(apart).to_vector()) << "the same sum, in the same order";
  }
  Graph g;
  const Value x = g.input("x", {1, 4, 4, 2}), kern = g.input("K", {3, 3, 2, 5}), bias = g.input("b", {4});
  OpAttrs at;
  at.window = window(3, 3, 1, 1, 1, 1, 0, 0, 0, 0);
  EXPECT_TRUE(test_support::throws<ShapeError>([&] { g.apply(OpKind::Conv2D, {x, kern, bias}, at); },
                                               {"conv2d", "bias must be {5}", "{4}"}));
}

// The ReLU-output form, max(conv(x, K) [+ bias], 0) in the kernel (a Conv2D
// layer with activation "relu"), against the separate Relu whose parts are
// checked by finite differences above: the value and every operand's
// gradient bit-equal. (Finite differences of the fused op itself would step
// outputs across ReLU's kink: h = 1e-2 moves many of them across zero.)
TEST(LayerOpGradConv2D, WithReluOutput) {
  const int64_t f = 3;
  for (bool with_bias : {false, true})
    for (const WindowCase& k : kWindowCases) {
      SCOPED_TRACE(std::string(k.name) + " " + k.x.str() + " " + window_str(k.w) + (with_bias ? " bias" : ""));
      std::mt19937 rng(1261);
      Tensor tx = uniform(k.x, rng, -1.0f, 1.0f), tk = uniform({k.w.kh, k.w.kw, k.x[3], f}, rng, -0.5f, 0.5f),
             tb = uniform({f}, rng, -0.5f, 0.5f);
      std::vector<std::vector<float>> results[2];
      for (int fused = 0; fused < 2; ++fused) {
        Graph g;
        std::vector<Value> in{g.parameter(tx, "x", true), g.parameter(tk, "K", true)};
        if (with_bias) in.push_back(g.parameter(tb, "bias", true));
        OpAttrs at;
        at.window = k.w;
        at.flags = fused ? kReluOutput : 0;
        Value y = g.apply(OpKind::Conv2D, in, at);
        if (!fused) y = g.relu(y);
        std::mt19937 wrng(1262);  // the same projection for both
        Tensor tw = uniform(g.shape(y), wrng, -1.0f, 1.0f);
        const Value w = g.input("w", tw.shape());
        std::vector<Value> outputs = g.gradients(g.sum(g.mul(y, w)), in);
        outputs.push_back(y);
        // Unfused: the Relu stays a node of its own.
        Executable exe(std::move(g), outputs, BatchRule{}, nullptr, fused ? FusionOptions{} : FusionOptions::none());
        exe.bind(w, tw);
        exe.run();
        for (Value v : outputs) results[fused].push_back(exe.output(v).to_vector());
      }
      ASSERT_EQ(results[0].size(), results[1].size());
      for (size_t i = 0; i < results[0].size(); ++i) EXPECT_EQ(results[1][i], results[0][i]) << "output " << i;
      const std::vector<float>& y = results[1].back();
      EXPECT_TRUE(std::any_of(y.begin(), y.end(), [](float v) { return v == 0.0f; })) << "no output was cut";
      EXPECT_TRUE(std::any_of(y.begin(), y.end(), [](float v) { return v > 0.0f; })) << "every output was cut";
    }
}

TEST(LayerOpGradConv2D, BackwardOpsOwnRules) {
  const int64_t f = 2;
  for (size_t i : {size_t(0), size_t(3), size_t(7)}) {
    const WindowCase& k = kWindowCases[i];
    SCOPED_TRACE(std::string(k.name) + " " + k.x.str() + " " + window_str(k.w));
    const Shape gs{k.x[0], k.w.out_h(k.x[1]), k.w.out_w(k.x[2]), f}, ks{k.w.kh, k.w.kw, k.x[3], f};
    {
      GradCheck c(1260);
      Value g = c.param(uniform(gs, c.rng, -1.0f, 1.0f), "g");
      Value kern = c.param(uniform(ks, c.rng, -0.5f, 0.5f), "K");
      OpAttrs at;
      at.window = k.w;
      at.shape = k.x;
      EXPECT_EQ(c.check(c.project(c.g.apply(OpKind::Conv2DBackwardInput, {g, kern}, at))).message, "");
    }
    {
      GradCheck c(1270);
      Value x = c.param(uniform(k.x, c.rng, -1.0f, 1.0f), "x");
      Value g = c.param(uniform(gs, c.rng, -1.0f, 1.0f), "g");
      OpAttrs at;
      at.window = k.w;
      at.shape = ks;
      EXPECT_EQ(c.check(c.project(c.g.apply(OpKind::Conv2DBackwardFilter, {x, g}, at))).message, "");
    }
  }
}

// The filter gradient against a direct sum in double, on shapes the
// finite-difference cases above are too small for: more than 64 channels
// (the batch-reduce GEMM's row blocks), batches over several slices,
// rows wider than 64 pixels, strides along the height only (the
// transposed-image form) and along the width (the patch-matrix form: taps
// every second or third column, dilated, fewer columns than the stride, few
// channels, the resnet's stride-2 shapes), and at 1 and 2 threads (the
// result must not depend on them).
TEST(LayerOpGradConv2D, FilterGradientMatchesDirectSum) {
  const std::vector<WindowCase> cases = {
      {"3x3_same_70ch", {20, 5, 6, 70}, window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1)},
      {"3x3_same_16ch", {9, 8, 8, 16}, window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1)},
      {"1x1", {3, 4, 5, 7}, window(1, 1, 1, 1)},
      {"3x3_sh2_pads", {2, 7, 6, 3}, window(3, 3, 2, 1, 1, 1, 1, 0, 1, 2)},
      {"3x3_s2", {3, 7, 8, 5}, window(3, 3, 2, 2, 1, 1, 1, 1, 1, 1)},
      {"2x3_dilation2", {2, 6, 9, 4}, window(2, 3, 1, 1, 2, 2, 1, 0, 0, 2)},
      {"1x3_wide", {2, 1, 75, 2}, window(1, 3, 1, 1, 1, 1, 0, 1, 0, 1)},
      {"3x3_s2_same_resnet", {2, 28, 28, 16}, window(3, 3, 2, 2, 1, 1, 0, 0, 1, 1)},
      {"1x1_s2_resnet", {2, 28, 28, 16}, window(1, 1, 2, 2)},
      {"2x3_s1x3_dilation2", {2, 5, 13, 9}, window(2, 3, 1, 3, 1, 2, 1, 1, 0, 2)},
      {"3x3_s2_few_channels", {3, 6, 9, 3}, window(3, 3, 2, 2, 1, 1, 1, 1, 1, 1)},
      {"1x1_s4_narrow", {2, 3, 3, 9}, window(1, 1, 4, 4)},
      // one channel (filter_gradient_one_channel at 16 filters; 17 take the other kernels): several slices
      // of the batch, strides, dilation, pads
      {"3x3_same_one_channel", {20, 9, 11, 1}, window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1)},
      {"3x2_s2x1_dilation_one_channel", {3, 9, 10, 1}, window(3, 2, 2, 1, 1, 2, 1, 0, 1, 2)},
  };
  for (const int64_t f : {17, 16})  // 16: the sixteen-wide kernel (rows16)
  for (const WindowCase& k : cases) {
    SCOPED_TRACE(std::string(k.name) + " " + k.x.str() + " " + window_str(k.w) + " filters " + std::to_string(f));
    const int64_t B = k.x[0], H = k.x[1], W = k.x[2], C = k.x[3];
    const int64_t Ho = k.w.out_h(H), Wo = k.w.out_w(W);
    std::mt19937 rng(1275);
    const Tensor tx = uniform(k.x, rng, -1.0f, 1.0f), tg = uniform({B, Ho, Wo, f}, rng, -1.0f, 1.0f);
    std::vector<double> expected(size_t(k.w.kh * k.w.kw * C * f), 0.0);
    const float *px = tx.data<float>(), *pg = tg.data<float>();
    for_each_tap(k.x, k.w, [&](int64_t tap, int64_t in, int64_t out) {
      for (int64_t c = 0; c < C; ++c)
        for (int64_t j = 0; j < f; ++j)
          expected[size_t((tap * C + c) * f + j)] += double(px[in * C + c]) * pg[out * f + j];
    });
    std::vector<std::vector<float>> got;
    const int saved_threads = num_threads();
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      Graph g;
      const Value x = g.input("x", k.x), gy = g.input("g", tg.shape());
      OpAttrs at;
      at.window = k.w;
      at.shape = Shape{k.w.kh, k.w.kw, C, f};
      const Value dk = g.apply(OpKind::Conv2DBackwardFilter, {x, gy}, at);
      Executable exe(std::move(g), {dk});
      exe.bind(x, tx);
      exe.bind(gy, tg);
      exe.run();
      got.push_back(exe.output(dk).to_vector());
    }
    set_num_threads(saved_threads);
    ASSERT_EQ(got[0].size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i)
      ASSERT_NEAR(got[0][i], expected[i], 1e-4 * (1.0 + std::abs(expected[i]))) << "element " << i;
    EXPECT_EQ(got[0], got[1]) << "the gradient depends on the thread count";
  }
}

// The convolution and its input gradient against direct sums in double
// where the product is sixteen wide (16 filters forward, 16 channels for
// the input gradient: the rows16 kernel on AVX2, the direct kernels with
// Winograd's off), over row lengths that
// leave every remainder of its six-row blocks, one input channel (the
// stem), and at 1 and 2 threads (the same bits).
TEST(LayerOpGradConv2D, SixteenWideProductsMatchDirectSums) {
  struct Case {
    Shape x;
    int64_t f;
    Window2D w;
  };
  const std::vector<Case> cases = {
      {{2, 3, 13, 16}, 16, window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1)}, {{2, 4, 6, 16}, 16, window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1)},
      {{1, 2, 5, 16}, 16, window(1, 3, 1, 1, 1, 1, 0, 1, 0, 1)},  {{3, 5, 5, 1}, 16, window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1)},
      {{2, 4, 4, 16}, 8, window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1)},   {{2, 3, 11, 16}, 16, window(2, 2, 1, 1, 2, 2, 1, 1, 0, 0)},
      // one channel: whole registers of filters (conv2d_one_channel; pixel blocks of 8 and a partial one,
      // strides, dilation and asymmetric pads), and fewer filters than a register (the batch-reduce products)
      {{1, 6, 17, 1}, 3, window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1)},   {{2, 9, 19, 1}, 32, window(3, 3, 2, 2, 2, 1, 2, 1, 1, 0)},
  };
  const WinogradGuard guard;
  set_winograd_convolutions(false);  // the 3x3 cases would run by Winograd (tests/kernels/test_winograd.cpp)
  const int saved_threads = num_threads();
  for (const Case& k : cases) {
    SCOPED_TRACE(k.x.str() + " -> " + std::to_string(k.f) + " " + window_str(k.w));
    const int64_t B = k.x[0], H = k.x[1], W = k.x[2], C = k.x[3], F = k.f;
    const int64_t Ho = k.w.out_h(H), Wo = k.w.out_w(W);
    std::mt19937 rng(1276);
    const Tensor tx = uniform(k.x, rng, -1.0f, 1.0f), tk = uniform({k.w.kh, k.w.kw, C, F}, rng, -0.5f, 0.5f),
                 tg = uniform({B, Ho, Wo, F}, rng, -1.0f, 1.0f);
    const float *px = tx.data<float>(), *pk = tk.data<float>(), *pg = tg.data<float>();
    std::vector<double> y(size_t(B * Ho * Wo * F), 0.0), dx(size_t(tx.numel()), 0.0);
    for_each_tap(k.x, k.w, [&](int64_t tap, int64_t in, int64_t out) {
      for (int64_t c = 0; c < C; ++c)
        for (int64_t j = 0; j < F; ++j) {
          const double kv = pk[(tap * C + c) * F + j];
          y[size_t(out * F + j)] += double(px[in * C + c]) * kv;
          dx[size_t(in * C + c)] += double(pg[out * F + j]) * kv;
        }
    });
    std::vector<std::vector<float>> got_y, got_dx;
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      Graph g;
      const Value x = g.input("x", k.x), kern = g.input("K", tk.shape()), gy = g.input("g", tg.shape());
      OpAttrs at;
      at.window = k.w;
      const Value out = g.apply(OpKind::Conv2D, {x, kern}, at);
      at.shape = k.x;
      const Value din = g.apply(OpKind::Conv2DBackwardInput, {gy, kern}, at);
      Executable exe(std::move(g), {out, din});
      exe.bind(x, tx);
      exe.bind(kern, tk);
      exe.bind(gy, tg);
      exe.run();
      got_y.push_back(exe.output(out).to_vector());
      got_dx.push_back(exe.output(din).to_vector());
    }
    set_num_threads(saved_threads);
    ASSERT_EQ(got_y[0].size(), y.size());
    for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(got_y[0][i], y[i], 1e-5 * (1.0 + std::abs(y[i]))) << "y " << i;
    ASSERT_EQ(got_dx[0].size(), dx.size());
    for (size_t i = 0; i < dx.size(); ++i) ASSERT_NEAR(got_dx[0][i], dx[i], 1e-5 * (1.0 + std::abs(dx[i]))) << "dx " << i;
    EXPECT_EQ(got_y[0], got_y[1]) << "the convolution depends on the thread count";
    EXPECT_EQ(got_dx[0], got_dx[1]) << "the input gradient depends on the thread count";
  }
}

// The input gradient of strided convolutions (by the strides' phases)
// against direct sums in double: the resnet's 3x3 and 1x1 stride-2 shapes
// with the folded addend, phases wider than the GEMM's 64-pixel block,
// strides unequal and larger than the kernel (pixels and whole rows no tap
// reaches, which must come out zero plus the addend), dilation with
// asymmetric pads, fewer columns than the stride; at 1 and 2 threads (the
// same bits).
TEST(LayerOpGradConv2D, StridedInputGradientMatchesDirectSums) {
  struct Case {
    Shape x;
    int64_t f;
    Window2D w;
    bool addend;
  };
  const std::vector<Case> cases = {
      {{2, 28, 28, 16}, 32, window(3, 3, 2, 2, 1, 1, 0, 0, 1, 1), true},
      {{2, 28, 28, 16}, 32, window(1, 1, 2, 2), true},
      {{1, 7, 150, 3}, 5, window(3, 3, 2, 2, 1, 1, 1, 1, 1, 1), false},
      {{2, 7, 11, 4}, 6, window(2, 2, 3, 3), true},
      {{2, 8, 11, 2}, 3, window(2, 3, 2, 3, 2, 1, 1, 0, 0, 2), false},
      {{1, 3, 3, 2}, 2, window(1, 1, 4, 4), true},
  };
  const int saved_threads = num_threads();
  for (const Case& k : cases) {
    SCOPED_TRACE(k.x.str() + " -> " + std::to_string(k.f) + " " + window_str(k.w) + (k.addend ? " addend" : ""));
    const int64_t B = k.x[0], H = k.x[1], W = k.x[2], C = k.x[3], F = k.f;
    const int64_t Ho = k.w.out_h(H), Wo = k.w.out_w(W);
    std::mt19937 rng(1277);
    const Tensor tk = uniform({k.w.kh, k.w.kw, C, F}, rng, -0.5f, 0.5f), tg = uniform({B, Ho, Wo, F}, rng, -1.0f, 1.0f),
                 ta = uniform(k.x, rng, -1.0f, 1.0f);
    const float *pk = tk.data<float>(), *pg = tg.data<float>(), *pa = ta.data<float>();
    std::vector<double> dx(size_t(k.x.numel()), 0.0);
    for_each_tap(k.x, k.w, [&](int64_t tap, int64_t in, int64_t out) {
      for (int64_t c = 0; c < C; ++c)
        for (int64_t j = 0; j < F; ++j) dx[size_t(in * C + c)] += double(pg[out * F + j]) * pk[(tap * C + c) * F + j];
    });
    if (k.addend)
      for (size_t i = 0; i < dx.size(); ++i) dx[i] += pa[i];
    std::vector<std::vector<float>> got;
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      Graph g;
      const Value kern = g.input("K", tk.shape()), gy = g.input("g", tg.shape()), add = g.input("a", k.x);
      OpAttrs at;
      at.window = k.w;
      at.shape = k.x;
      const Value din = k.addend ? g.apply(OpKind::Conv2DBackwardInput, {gy, kern, add}, at)
                                 : g.apply(OpKind::Conv2DBackwardInput, {gy, kern}, at);
      Executable exe(std::move(g), {din});
      exe.bind(kern, tk);
      exe.bind(gy, tg);
      if (k.addend) exe.bind(add, ta);
      exe.run();
      got.push_back(exe.output(din).to_vector());
    }
    set_num_threads(saved_threads);
    ASSERT_EQ(got[0].size(), dx.size());
    for (size_t i = 0; i < dx.size(); ++i) ASSERT_NEAR(got[0][i], dx[i], 1e-5 * (1.0 + std::abs(dx[i]))) << "dx " << i;
    EXPECT_EQ(got[0], got[1]) << "the input gradient depends on the thread count";
  }
}

// A Relu applied to a MatMul, BatchNorm, Add or Conv2D output folds into that op
// (kReluOutput, the fusion pass): against the graph as written
// (FusionOptions::relu off), whose parts are checked by finite differences
// elsewhere in this file, the value and every operand's gradient bit-equal;
// the folded schedule runs no Relu; a second consumer of the op's own
// output keeps it (both forms run), and the gradients then agree up to the
// order of their sums.
TEST(LayerOpGradReluFolding, FoldedEqualsTheGraphAsWritten) {
  const std::vector<std::string> kinds = {"batch_norm_train", "batch_norm_given_stats", "add", "add_broadcast",
                                          "conv2d", "matmul_bias", "matmul_batched_transposed"};
  for (const std::string& kind : kinds)
    for (bool second_consumer : {false, true}) {
      SCOPED_TRACE(kind + (second_consumer ? " with a second consumer" : ""));
      std::mt19937 rng(1290);
      const Shape xs{3, 4, 5, 6};
      const Tensor tx = uniform(xs, rng, -1.5f, 1.5f), tx2 = uniform(xs, rng, -1.0f, 1.0f),
                   tc = uniform({6}, rng, -1.0f, 1.0f), tgamma = uniform({6}, rng, 0.5f, 1.5f),
                   tbeta = uniform({6}, rng, -0.5f, 0.5f), tk = uniform({3, 3, 6, 6}, rng, -0.3f, 0.3f),
                   tw2 = uniform({30, 7}, rng, -0.4f, 0.4f), tb2 = uniform({7}, rng, -0.5f, 0.5f),
                   tw3 = uniform({3, 5, 6}, rng, -0.5f, 0.5f);
      Tensor tstats = uniform({2, 6}, rng, 0.2f, 1.0f);
      std::vector<std::vector<float>> results[2];
      int relus[2] = {0, 0};
      for (int fold = 0; fold < 2; ++fold) {
        FusionOptions fusion;
        fusion.relu = fold == 1;
        Graph g;
        std::vector<Value> params{g.parameter(tx, "x", true)};
        Value pre;
        if (kind == "batch_norm_train" || kind == "batch_norm_given_stats") {
          const bool train = kind == "batch_norm_train";
          params.push_back(g.parameter(tgamma, "gamma", true));
          params.push_back(g.parameter(tbeta, "beta", true));
          OpAttrs at;
          at.eps = 1e-3f;
          at.own_stats = train;
          Value stats = train ? g.apply(OpKind::BatchNormStats, {params[0]}) : g.parameter(tstats, "stats", true);
          if (!train) params.push_back(stats);
          pre = g.apply(OpKind::BatchNorm, {params[0], stats, params[1], params[2]}, at);
        } else if (kind == "matmul_bias") {  // a Dense layer's {12, 30} x {30, 7} + bias
          params.push_back(g.parameter(tw2, "W", true));
          params.push_back(g.parameter(tb2, "b", true));
          pre = g.matmul(g.reshape(params[0], Shape{12, 30}), params[1], params[2]);
        } else if (kind == "matmul_batched_transposed") {  // {3, 20, 6} x {3, 5, 6}^T
          params.push_back(g.parameter(tw3, "W", true));
          pre = g.matmul(g.reshape(params[0], Shape{3, 20, 6}), params[1], false, true);
        } else if (kind == "conv2d") {
          params.push_back(g.parameter(tk, "K", true));
          OpAttrs at;
          at.window = window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1);
          pre = g.apply(OpKind::Conv2D, {params[0], params[1]}, at);
        } else {
          params.push_back(kind == "add" ? g.parameter(tx2, "x2", true) : g.parameter(tc, "c", true));
          pre = g.add(params[0], params[1]);
        }
        const Value y = g.relu(pre);
        std::mt19937 wrng(1291);
        const Tensor tw = uniform(g.shape(y), wrng, -1.0f, 1.0f);
        const Value w = g.input("w", tw.shape());
        Value loss = g.sum(g.mul(y, w));
        if (second_consumer) loss = g.add(loss, g.sum(g.mul(pre, pre)));
        std::vector<Value> outputs = g.gradients(loss, params);
        outputs.push_back(y);
        fuse(g, fusion);
        for (int32_t id : plan_memory(g, outputs).schedule) relus[fold] += g.nodes()[size_t(id)].op == OpKind::Relu;
        Executable exe(std::move(g), outputs, BatchRule{}, nullptr, fusion);
        exe.bind(w, tw);
        exe.run();
        for (Value v : outputs) results[fold].push_back(exe.output(v).to_vector());
      }
      EXPECT_EQ(relus[0], 1) << "the graph as written runs its Relu";
      EXPECT_EQ(relus[1], 0) << "the folded graph runs no Relu";
      ASSERT_EQ(results[0].size(), results[1].size());
      for (size_t i = 0; i < results[0].size(); ++i) {
        if (!second_consumer) {
          EXPECT_EQ(results[1][i], results[0][i]) << "output " << i;
          continue;
        }
        // Two consumers: the folded graph runs the op's backward once per
        // form and adds the two gradients, the graph as written once on
        // their sum; equal up to the order of the additions.
        ASSERT_EQ(results[1][i].size(), results[0][i].size());
        for (size_t j = 0; j < results[0][i].size(); ++j)
          ASSERT_NEAR(results[1][i][j], results[0][i][j], 1e-4 * (1.0 + std::abs(results[0][i][j])))
              << "output " << i << " element " << j;
      }
      const std::vector<float>& y = results[1].back();
      EXPECT_TRUE(std::any_of(y.begin(), y.end(), [](float v) { return v == 0.0f; })) << "no output was cut";
      EXPECT_TRUE(std::any_of(y.begin(), y.end(), [](float v) { return v > 0.0f; })) << "every output was cut";
    }
}

// Fused batch normalization, against finite differences: with the batch's
// own statistics (the training form, whose gradient runs through the mean
// and variance), with given statistics (the inference form, statistics
// differentiated too), and the statistics op on its own.
TEST(LayerOpGradBatchNorm, BatchStatistics) {
  for (const Shape& xs : {Shape{6, 3}, Shape{2, 3, 2, 4}}) {
    SCOPED_TRACE(xs.str());
    GradCheck c(1280);
    const int64_t ch = xs[-1];
    Value x = c.param(uniform(xs, c.rng, -2.0f, 2.0f), "x");
    Value gamma = c.param(uniform({ch}, c.rng, 0.5f, 1.5f), "gamma");
    Value beta = c.param(uniform({ch}, c.rng, -0.5f, 0.5f), "beta");
    OpAttrs at;
    at.eps = 1e-3f;
    at.own_stats = true;
    Value stats = c.g.apply(OpKind::BatchNormStats, {x});
    EXPECT_EQ(c.check(c.project(c.g.apply(OpKind::BatchNorm, {x, stats, gamma, beta}, at))).message, "");
  }
}

TEST(LayerOpGradBatchNorm, GivenStatistics) {
  GradCheck c(1290);
  const Shape xs{5, 2, 3};
  Value x = c.param(uniform(xs, c.rng, -2.0f, 2.0f), "x");
  std::vector<float> sv = uniform({2, 3}, c.rng, -0.5f, 0.5f).to_vector();
  for (size_t i = 3; i < 6; ++i) sv[i] += 1.2f;  // variances in [0.7, 1.7]
  Value stats = c.param(Tensor::from_vector(sv, {2, 3}), "stats");
  Value gamma = c.param(uniform({3}, c.rng, 0.5f, 1.5f), "gamma");
  Value beta = c.param(uniform({3}, c.rng, -0.5f, 0.5f), "beta");
  OpAttrs at;
  at.eps = 1e-3f;
  EXPECT_EQ(c.check(c.project(c.g.apply(OpKind::BatchNorm, {x, stats, gamma, beta}, at))).message, "");
}

TEST(LayerOpGradBatchNorm, StatisticsOp) {
  GradCheck c(1300);
  Value x = c.param(uniform({4, 3, 2}, c.rng, -2.0f, 2.0f), "x");
  EXPECT_EQ(c.check(c.project(c.g.apply(OpKind::BatchNormStats, {x}))).message, "");
}

// The statistics kernel's values: mean and (biased) variance per channel
// against two-pass sums in double, for channel counts on and off its
// sixteen-channel vector blocks, over enough rows for several row slices
// (rank 2) and image by image (rank 4, the order a convolution that folds
// them in takes), with a mean far from zero (where E[x^2] - mean^2 loses
// digits in float); the same bits at 1 and 2 threads.
TEST(LayerOpGradBatchNorm, StatisticsEqualDoubleSumsForAnyChannelCount) {
  std::mt19937 rng(1310);
  for (int64_t C : {1, 15, 16, 20, 32, 37})
  for (bool images : {false, true}) {
    SCOPED_TRACE("channels " + std::to_string(C) + (images ? ", images" : ""));
    const Tensor x = uniform(images ? Shape{7, 5, 6, C} : Shape{5000, C}, rng, 2.0f, 4.0f);
    const std::vector<float> vx = x.to_vector();
    std::vector<std::vector<float>> got;
    for (int threads : {1, 2}) {
      const int saved = num_threads();
      set_num_threads(threads);
      Graph g;
      const Value in = g.input("x", x.shape());
      const Value stats = g.apply(OpKind::BatchNormStats, {in});
      Executable exe(std::move(g), {stats}, BatchRule{}, cpu_backend());
      exe.bind(in, x);
      exe.run();
      got.push_back(exe.output(stats).to_vector());
      set_num_threads(saved);
    }
    EXPECT_EQ(got[0], got[1]) << "the statistics differ between 1 and 2 threads";
    const std::vector<double> want = test_support::two_pass_stats(vx, C);
    for (int64_t c = 0; c < C; ++c) {
      EXPECT_NEAR(got[0][size_t(c)], want[size_t(c)], 1e-6 * want[size_t(c)]) << "mean of channel " << c;
      EXPECT_NEAR(got[0][size_t(C + c)], want[size_t(C + c)], 1e-5 * want[size_t(C + c)]) << "variance of channel " << c;
    }
  }
}

// The parameter-gradient sums (gamma's sum(g xhat), beta's sum(g)) against
// sums in double, for channel counts on and off the kernel's sixteen-channel
// vector blocks, plain and with the folded ReLU's mask (kReluOutput): the
// mask must be exactly the forward's y > 0, read here from the BatchNorm
// op's own output. The same bits at 1 and 2 threads.
TEST(LayerOpGradBatchNorm, ParamGradEqualsDoubleSumsForAnyChannelCount) {
  std::mt19937 rng(1315);
  const int saved_threads = num_threads();
  for (int64_t C : {3, 16, 20, 32, 37})
    for (bool relu : {false, true}) {
      SCOPED_TRACE("channels " + std::to_string(C) + (relu ? ", ReLU mask" : ""));
      const int64_t rows = 3000;
      const Tensor x = uniform({rows, C}, rng, -2.0f, 2.0f), gy = uniform({rows, C}, rng, -1.0f, 1.0f);
      std::vector<float> sv = uniform({2, C}, rng, -0.3f, 0.3f).to_vector();
      for (int64_t c = C; c < 2 * C; ++c) sv[size_t(c)] += 1.0f;  // variances in [0.7, 1.3]
      const Tensor stats = Tensor::from_vector(sv, {2, C}), gamma = uniform({C}, rng, 0.5f, 1.5f),
                   beta = uniform({C}, rng, -0.5f, 0.5f);
      std::vector<std::vector<float>> got;
      std::vector<float> y;
      for (int threads : {1, 2}) {
        set_num_threads(threads);
        Graph g;
        const Value vx = g.input("x", x.shape()), vg = g.input("g", gy.shape()), vs = g.input("stats", stats.shape()),
                    vgamma = g.input("gamma", gamma.shape()), vbeta = g.input("beta", beta.shape());
        OpAttrs at;
        at.eps = 1e-3f;
        OpAttrs masked = at;
        masked.flags = kReluOutput;
        const Value fwd = g.apply(OpKind::BatchNorm, {vx, vs, vgamma, vbeta}, masked);
        const Value sums = relu ? g.apply(OpKind::BatchNormParamGrad, {vx, vs, vg, vgamma, vbeta}, masked)
                                : g.apply(OpKind::BatchNormParamGrad, {vx, vs, vg}, at);
        Executable exe(std::move(g), {fwd, sums});
        exe.bind(vx, x);
        exe.bind(vg, gy);
        exe.bind(vs, stats);
        exe.bind(vgamma, gamma);
        exe.bind(vbeta, beta);
        exe.run();
        got.push_back(exe.output(sums).to_vector());
        y = exe.output(fwd).to_vector();
      }
      set_num_threads(saved_threads);
      EXPECT_EQ(got[0], got[1]) << "the sums depend on the thread count";
      const std::vector<float> vx = x.to_vector(), vg = gy.to_vector();
      int64_t cut = 0;
      for (int64_t c = 0; c < C; ++c) {
        double sum_gx = 0.0, sum_g = 0.0;
        for (int64_t r = 0; r < rows; ++r) {
          const size_t i = size_t(r * C + c);
          if (relu && !(y[i] > 0.0f)) {
            ++cut;
            continue;
          }
          sum_gx += double(vg[i]) * (double(vx[i]) - sv[size_t(c)]);
          sum_g += vg[i];
        }
        sum_gx /= std::sqrt(double(sv[size_t(C + c)]) + 1e-3);
        EXPECT_NEAR(got[0][size_t(c)], sum_gx, 1e-4 * (1.0 + std::abs(sum_gx))) << "sum(g xhat) of channel " << c;
        EXPECT_NEAR(got[0][size_t(C + c)], sum_g, 1e-4 * (1.0 + std::abs(sum_g))) << "sum(g) of channel " << c;
      }
      if (relu) EXPECT_GT(cut, rows * C / 10) << "the mask cut too little to be tested";
    }
}

// ---------------------------------------------------------------------------
// Add folding (FusionOptions::add): a residual add into the BatchNorm before it,
// a sum of gradients into Conv2DBackwardInput; and the ReLU folded into a
// BatchNorm masking its own backward ops.

// The new op forms against finite differences: BatchNorm with a residual
// (and the batch's statistics), Conv2DBackwardInput with an addend.
TEST(LayerOpGradAddFolding, FoldedFormsAgainstFiniteDifferences) {
  {
    GradCheck c(1320);
    const Shape xs{3, 2, 2, 5};
    Value x = c.param(uniform(xs, c.rng, -2.0f, 2.0f), "x");
    Value gamma = c.param(uniform({5}, c.rng, 0.5f, 1.5f), "gamma");
    Value beta = c.param(uniform({5}, c.rng, -0.5f, 0.5f), "beta");
    Value residual = c.param(uniform(xs, c.rng, -1.0f, 1.0f), "residual");
    OpAttrs at;
    at.eps = 1e-3f;
    at.own_stats = true;
    Value stats = c.g.apply(OpKind::BatchNormStats, {x});
    EXPECT_EQ(c.check(c.project(c.g.apply(OpKind::BatchNorm, {x, stats, gamma, beta, residual}, at))).message, "");
  }
  for (const Window2D& w : {window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1), window(3, 3, 2, 2, 1, 1, 1, 1, 1, 1)}) {
    SCOPED_TRACE(window_str(w));
    GradCheck c(1321);
    const Shape xs{2, 5, 5, 3};
    const Shape gs{2, w.out_h(5), w.out_w(5), 4};
    Value g = c.param(uniform(gs, c.rng, -1.0f, 1.0f), "g");
    Value kern = c.param(uniform({3, 3, 3, 4}, c.rng, -0.5f, 0.5f), "K");
    Value addend = c.param(uniform(xs, c.rng, -1.0f, 1.0f), "addend");
    OpAttrs at;
    at.window = w;
    at.shape = xs;
    EXPECT_EQ(c.check(c.project(c.g.apply(OpKind::Conv2DBackwardInput, {g, kern, addend}, at))).message, "");
    // Masked by a ReLU's output (kMaskNonPositive), with and without the addend.
    for (bool with_addend : {true, false}) {
      GradCheck m(1322);
      const Value mg = m.param(uniform(gs, m.rng, -1.0f, 1.0f), "g");
      const Value mk = m.param(uniform({3, 3, 3, 4}, m.rng, -0.5f, 0.5f), "K");
      const Value relu_out = m.data(uniform(xs, m.rng, -1.0f, 1.0f), "relu_out");
      at.flags = kMaskNonPositive;
      const Value dx = with_addend ? m.g.apply(OpKind::Conv2DBackwardInput,
                                               {mg, mk, m.param(uniform(xs, m.rng, -1.0f, 1.0f), "addend"), relu_out}, at)
                                   : m.g.apply(OpKind::Conv2DBackwardInput, {mg, mk, relu_out}, at);
      EXPECT_EQ(m.check(m.project(dx)).message, "") << (with_addend ? "masked, addend" : "masked");
      at.flags = 0;
    }
  }
}

// A ReLU's backward folded into the convolution's input gradient that makes
// its gradient (kMaskNonPositive, the ReLU's output as the last input): bit-
// equal to ReluBackward after the unmasked op, on every kernel path (Winograd,
// direct, strided by phases, bfloat16's where the CPU has it), with and
// without the addend; a relu(x) -> conv graph's gradient then runs no
// ReluBackward; and the op refuses a fourth input without the flag, and the
// flag without the mask.
TEST(LayerOpGradConv2D, MaskedInputGradientEqualsReluBackward) {
  struct Case {
    Shape x;
    int64_t f;
    Window2D w;
  };
  const std::vector<Case> cases = {
      {{2, 9, 10, 16}, 16, window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1)},  // Winograd where on
      {{2, 6, 7, 5}, 3, window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1)},     // direct, unit stride
      {{2, 8, 8, 4}, 6, window(3, 3, 2, 2, 1, 1, 0, 0, 1, 1)},     // strided, by phases
  };
  const WinogradGuard guard;
  for (bool winograd : {true, false})
    for (bool bf16 : {false, true})
      for (const Case& k : cases)
        for (bool addend : {false, true}) {
          SCOPED_TRACE(k.x.str() + " " + window_str(k.w) + (winograd ? " winograd" : "") + (bf16 ? " bf16" : "") +
                       (addend ? " addend" : ""));
          set_winograd_convolutions(winograd);
          std::mt19937 rng(1278);
          const Shape gs{k.x[0], k.w.out_h(k.x[1]), k.w.out_w(k.x[2]), k.f};
          const Tensor tg = uniform(gs, rng, -1.0f, 1.0f), tk = uniform({k.w.kh, k.w.kw, k.x[3], k.f}, rng, -0.5f, 0.5f),
                       ta = uniform(k.x, rng, -1.0f, 1.0f), ty = uniform(k.x, rng, -1.0f, 1.0f);
          Graph g;
          const Value gy = g.input("g", gs), kern = g.input("K", tk.shape()), add = g.input("a", k.x),
                      y = g.input("y", k.x);
          OpAttrs at;
          at.window = k.w;
          at.shape = k.x;
          const Value plain = addend ? g.apply(OpKind::Conv2DBackwardInput, {gy, kern, add}, at)
                                     : g.apply(OpKind::Conv2DBackwardInput, {gy, kern}, at);
          const Value reference = g.apply(OpKind::ReluBackward, {y, plain});
          at.flags = kMaskNonPositive;
          const Value masked = addend ? g.apply(OpKind::Conv2DBackwardInput, {gy, kern, add, y}, at)
                                      : g.apply(OpKind::Conv2DBackwardInput, {gy, kern, y}, at);
          Executable exe(std::move(g), {reference, masked}, BatchRule{},
                         cpu_backend(bf16 ? DTypePolicy::kMixedBFloat16 : DTypePolicy::kFloat32),
                         FusionOptions::none());  // the reference stays unmasked
          exe.bind(gy, tg);
          exe.bind(kern, tk);
          exe.bind(y, ty);
          if (addend) exe.bind(add, ta);
          exe.run();
          const std::vector<float> want = exe.output(reference).to_vector(), got = exe.output(masked).to_vector();
          EXPECT_EQ(got, want);
          EXPECT_TRUE(std::any_of(got.begin(), got.end(), [](float v) { return v == 0.0f; })) << "nothing was masked";
          EXPECT_TRUE(std::any_of(got.begin(), got.end(), [](float v) { return v != 0.0f; })) << "everything was masked";
        }

  std::mt19937 rng(1279);
  Graph g;
  const Value x = g.parameter(uniform({2, 6, 6, 4}, rng, -1.0f, 1.0f), "x", true);
  const Value kern = g.parameter(uniform({3, 3, 4, 5}, rng, -0.5f, 0.5f), "K", true);
  OpAttrs at;
  at.window = window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1);
  const Value loss = g.sum(g.apply(OpKind::Conv2D, {g.relu(x), kern}, at));
  const std::vector<Value> grads = g.gradients(loss, std::vector<Value>{x});
  fuse(g);
  int relu_backward = 0, masked = 0;
  for (int32_t id : plan_memory(g, grads).schedule) {
    const Node& n = g.nodes()[size_t(id)];
    relu_backward += n.op == OpKind::ReluBackward;
    masked += n.op == OpKind::Conv2DBackwardInput && (n.attrs.flags & kMaskNonPositive);
  }
  EXPECT_EQ(relu_backward, 0);
  EXPECT_EQ(masked, 1);

  const Value gy = g.input("gy", {2, 6, 6, 5}), r = g.input("r", {2, 6, 6, 4});
  at.shape = Shape{2, 6, 6, 4};
  EXPECT_TRUE(test_support::throws<ShapeError>([&] { g.apply(OpKind::Conv2DBackwardInput, {gy, kern, r, r}, at); },
                                               {"conv2d_backward_input", "needs the kMaskNonPositive flag"}));
  at.flags = kMaskNonPositive;
  EXPECT_TRUE(test_support::throws<ShapeError>([&] { g.apply(OpKind::Conv2DBackwardInput, {gy, kern}, at); },
                                               {"conv2d_backward_input", "as the last input"}));
  EXPECT_TRUE(test_support::throws<ShapeError>(
      [&] { g.apply(OpKind::Conv2DBackwardInput, {gy, kern, g.input("small", {2, 6, 6, 3})}, at); },
      {"conv2d_backward_input", "the ReLU output that masks dx must be the result's shape {2, 6, 6, 4}", "{2, 6, 6, 3}"}));
}

// Two ResNet blocks (He et al. 2016): one with an identity shortcut, one
// with a strided 1x1 conv-BN projection (so both terms of its Add are batch
// norms, and the strided input gradient takes the addend), built with the
// folds and as written: the loss, the output and every parameter's gradient
// bit-equal (the folds add the same two floats, and the masks recompute the
// forward's bits), at 1 and 2 threads. The folded schedule runs no Add and
// no Relu, and one ReluBackward (the last block's output's, whose gradient
// no convolution makes; the first block's is masked in the convolution's
// input gradient that sums its two gradients), where the graph as written
// runs four (one a Relu).
TEST(LayerOpGradAddFolding, ResidualBlocksEqualTheGraphAsWritten) {
  const int saved_threads = num_threads();
  std::mt19937 rng(1330);
  const int64_t C = 8, F = 16;
  const Shape xs{4, 6, 6, C};
  const Tensor tx = uniform(xs, rng, -1.0f, 1.0f);
  std::vector<Tensor> kernels{uniform({3, 3, C, C}, rng, -0.3f, 0.3f), uniform({3, 3, C, C}, rng, -0.3f, 0.3f),
                              uniform({3, 3, C, F}, rng, -0.3f, 0.3f), uniform({3, 3, F, F}, rng, -0.3f, 0.3f),
                              uniform({1, 1, C, F}, rng, -0.5f, 0.5f)};
  std::vector<Tensor> gammas, betas;
  for (int64_t ch : {C, C, F, F, F}) {
    gammas.push_back(uniform({ch}, rng, 0.5f, 1.5f));
    betas.push_back(uniform({ch}, rng, -0.5f, 0.5f));
  }
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    std::vector<std::vector<float>> results[2];
    int counts[2][3] = {};  // Add, Relu, ReluBackward in the schedule
    for (int fold = 0; fold < 2; ++fold) {
      SCOPED_TRACE(std::string(fold ? "folded" : "as written") + ", threads " + std::to_string(threads));
      const FusionOptions fusion = fold == 1 ? FusionOptions{} : FusionOptions::none();
      Graph g;
      std::vector<Value> params{g.parameter(tx, "x", true)};
      auto conv_bn = [&](Value in, size_t i, int64_t stride) {
        const Value k = g.parameter(kernels[i], ("K" + std::to_string(i)).c_str(), true);
        const Value gamma = g.parameter(gammas[i], ("gamma" + std::to_string(i)).c_str(), true);
        const Value beta = g.parameter(betas[i], ("beta" + std::to_string(i)).c_str(), true);
        params.insert(params.end(), {k, gamma, beta});
        OpAttrs at;
        const int64_t size = kernels[i].shape()[0], pad = size / 2;
        at.window = window(size, size, stride, stride, 1, 1, pad, pad, pad, pad);
        const Value c = g.apply(OpKind::Conv2D, {in, k}, at);
        OpAttrs bn;
        bn.eps = 1e-3f;
        bn.own_stats = true;
        return g.apply(OpKind::BatchNorm, {c, g.apply(OpKind::BatchNormStats, {c}), gamma, beta}, bn);
      };
      const Value x = params[0];
      const Value h1 = g.relu(g.add(conv_bn(g.relu(conv_bn(x, 0, 1)), 1, 1), x));
      const Value h2 = g.relu(g.add(conv_bn(g.relu(conv_bn(h1, 2, 2)), 3, 1), conv_bn(h1, 4, 2)));
      std::mt19937 wrng(1331);
      const Tensor tw = uniform(g.shape(h2), wrng, -1.0f, 1.0f);
      const Value w = g.input("w", tw.shape());
      const Value loss = g.sum(g.mul(h2, w));
      std::vector<Value> outputs = g.gradients(loss, params);
      outputs.push_back(h2);
      outputs.push_back(loss);
      fuse(g, fusion);
      for (int32_t id : plan_memory(g, outputs).schedule) {
        const OpKind op = g.nodes()[size_t(id)].op;
        counts[fold][0] += op == OpKind::Add;
        counts[fold][1] += op == OpKind::Relu;
        counts[fold][2] += op == OpKind::ReluBackward;
      }
      Executable exe(std::move(g), outputs, BatchRule{}, nullptr, fusion);
      exe.bind(w, tw);
      exe.run();
      for (Value v : outputs) results[fold].push_back(exe.output(v).to_vector());
    }
    EXPECT_EQ(counts[0][0], 4) << "as written: two residual adds, two sums of the block inputs' gradients";
    EXPECT_EQ(counts[0][1], 4);
    EXPECT_EQ(counts[0][2], 4) << "as written: one ReluBackward a Relu";
    EXPECT_EQ(counts[1][0], 0) << "every Add folded";
    EXPECT_EQ(counts[1][1], 0) << "every Relu folded";
    EXPECT_EQ(counts[1][2], 1) << "one ReluBackward, the last block's output's";
    ASSERT_EQ(results[0].size(), results[1].size());
    for (size_t i = 0; i < results[0].size(); ++i) EXPECT_EQ(results[1][i], results[0][i]) << "output " << i;
    const std::vector<float>& y = results[1][results[1].size() - 2];
    EXPECT_TRUE(std::any_of(y.begin(), y.end(), [](float v) { return v == 0.0f; })) << "no output was cut";
    EXPECT_TRUE(std::any_of(y.begin(), y.end(), [](float v) { return v > 0.0f; })) << "every output was cut";
  }
  set_num_threads(saved_threads);
}

// A batch norm whose output another op reads: read before the Add, the Add
// does not fold (bit-equal to the graph as written, one BatchNorm runs);
// read only after it, both forms run, the values agree to the bit and the
// gradients up to the order of their sums.
TEST(LayerOpGradAddFolding, SecondConsumerOfTheBatchNormOutput) {
  std::mt19937 rng(1340);
  const Shape xs{5, 3, 3, 6};
  const Tensor tx = uniform(xs, rng, -1.5f, 1.5f), ts = uniform(xs, rng, -1.0f, 1.0f),
               tgamma = uniform({6}, rng, 0.5f, 1.5f), tbeta = uniform({6}, rng, -0.5f, 0.5f);
  for (bool read_before : {true, false}) {
    SCOPED_TRACE(read_before ? "read before the Add" : "read after the Add");
    std::vector<std::vector<float>> results[2];
    int bn_nodes[2] = {0, 0};
    for (int fold = 0; fold < 2; ++fold) {
      FusionOptions fusion;
      fusion.add = fold == 1;
      Graph g;
      std::vector<Value> params{g.parameter(tx, "x", true), g.parameter(tgamma, "gamma", true),
                                g.parameter(tbeta, "beta", true), g.parameter(ts, "s", true)};
      OpAttrs at;
      at.eps = 1e-3f;
      at.own_stats = true;
      const Value bn = g.apply(OpKind::BatchNorm,
                               {params[0], g.apply(OpKind::BatchNormStats, {params[0]}), params[1], params[2]}, at);
      Value square;
      if (read_before) square = g.sum(g.mul(bn, bn));
      const Value y = g.add(bn, params[3]);
      if (!read_before) square = g.sum(g.mul(bn, bn));
      const Value loss = g.add(g.sum(g.mul(y, y)), square);
      std::vector<Value> outputs = g.gradients(loss, params);
      outputs.push_back(y);
      fuse(g, fusion);
      for (int32_t id : plan_memory(g, outputs).schedule)
        bn_nodes[fold] += g.nodes()[size_t(id)].op == OpKind::BatchNorm;
      Executable exe(std::move(g), outputs, BatchRule{}, nullptr, fusion);
      exe.run();
      for (Value v : outputs) results[fold].push_back(exe.output(v).to_vector());
    }
    EXPECT_EQ(bn_nodes[0], 1);
    EXPECT_EQ(bn_nodes[1], read_before ? 1 : 2) << "read after: the folded form and the output read after it";
    EXPECT_EQ(results[1].back(), results[0].back()) << "the output";
    for (size_t i = 0; i + 1 < results[0].size(); ++i) {
      if (read_before) {
        EXPECT_EQ(results[1][i], results[0][i]) << "gradient " << i;
        continue;
      }
      ASSERT_EQ(results[1][i].size(), results[0][i].size());
      for (size_t j = 0; j < results[0][i].size(); ++j)
        ASSERT_NEAR(results[1][i][j], results[0][i][j], 1e-4 * (1.0 + std::abs(results[0][i][j])))
            << "gradient " << i << " element " << j;
    }
  }
}

// A residual block without batch norm followed by another convolution
// (y = x + conv2(relu(conv1(x))), z = conv3(y)): the Add of x's gradients
// folds into conv1's input gradient, never into conv3's, whose output
// conv2's backward also reads (folding there would run conv3's input
// gradient twice). Three input gradients run in both graphs, and the
// results are bit-equal.
TEST(LayerOpGradAddFolding, NeverIntoAnOutputAnotherOpReads) {
  std::mt19937 rng(1345);
  const Shape xs{2, 5, 5, 8};
  const Tensor tx = uniform(xs, rng, -1.0f, 1.0f), tk1 = uniform({3, 3, 8, 8}, rng, -0.3f, 0.3f),
               tk2 = uniform({3, 3, 8, 8}, rng, -0.3f, 0.3f), tk3 = uniform({3, 3, 8, 4}, rng, -0.3f, 0.3f);
  std::vector<std::vector<float>> results[2];
  int cbi[2] = {0, 0}, adds[2] = {0, 0};
  for (int fold = 0; fold < 2; ++fold) {
    const FusionOptions fusion = fold == 1 ? FusionOptions{} : FusionOptions::none();
    Graph g;
    const std::vector<Value> params{g.parameter(tx, "x", true), g.parameter(tk1, "K1", true),
                                    g.parameter(tk2, "K2", true), g.parameter(tk3, "K3", true)};
    OpAttrs at;
    at.window = window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1);
    const Value h = g.relu(g.apply(OpKind::Conv2D, {params[0], params[1]}, at));
    const Value y = g.add(params[0], g.apply(OpKind::Conv2D, {h, params[2]}, at));
    const Value z = g.apply(OpKind::Conv2D, {y, params[3]}, at);
    std::mt19937 wrng(1346);
    const Tensor tw = uniform(g.shape(z), wrng, -1.0f, 1.0f);
    const Value w = g.input("w", tw.shape());
    std::vector<Value> outputs = g.gradients(g.sum(g.mul(z, w)), params);
    outputs.push_back(z);
    fuse(g, fusion);
    for (int32_t id : plan_memory(g, outputs).schedule) {
      cbi[fold] += g.nodes()[size_t(id)].op == OpKind::Conv2DBackwardInput;
      adds[fold] += g.nodes()[size_t(id)].op == OpKind::Add;
    }
    Executable exe(std::move(g), outputs, BatchRule{}, nullptr, fusion);
    exe.bind(w, tw);
    exe.run();
    for (Value v : outputs) results[fold].push_back(exe.output(v).to_vector());
  }
  EXPECT_EQ(cbi[0], 3);
  EXPECT_EQ(cbi[1], 3) << "no input gradient runs twice";
  EXPECT_EQ(adds[0], 2) << "as written: the residual add and the sum of x's gradients";
  EXPECT_EQ(adds[1], 1) << "folded: the sum of x's gradients, into conv1's input gradient";
  ASSERT_EQ(results[0].size(), results[1].size());
  for (size_t i = 0; i < results[0].size(); ++i) EXPECT_EQ(results[1][i], results[0][i]) << "output " << i;
}

// What does not fold: a broadcast Add (a bias), an Add of a BatchNorm
// output that already ends in a ReLU, and one of an output another op
// already reads. The new inputs' shapes are checked, and the masked backward ops say which
// inputs kReluOutput needs.
TEST(LayerOpGradAddFolding, WhatDoesNotFoldAndTheShapeRules) {
  Graph g;
  const Value x = g.input("x", {2, 3, 6}), c = g.input("c", {6}), gamma = g.input("gamma", {6}),
              beta = g.input("beta", {6}), stats = g.input("stats", {2, 6});
  OpAttrs at;
  at.eps = 1e-3f;
  const Value bn = g.apply(OpKind::BatchNorm, {x, stats, gamma, beta}, at);
  const Value bias_add = g.add(bn, c);
  OpAttrs relu = at;
  relu.flags = kReluOutput;
  const Value bn_relu = g.apply(OpKind::BatchNorm, {x, stats, gamma, beta}, relu);
  const Value after_relu = g.add(bn_relu, x);
  const Value read_already = g.add(x, bn);
  const Value fresh = g.apply(OpKind::BatchNorm, {x, stats, gamma, beta}, at);
  const Value folded = g.add(x, fresh);
  fuse(g);
  EXPECT_EQ(g.node(bias_add).op, OpKind::Add) << "a broadcast add stays an Add";
  EXPECT_EQ(g.node(after_relu).op, OpKind::Add) << "add after the ReLU stays an Add";
  EXPECT_EQ(g.node(read_already).op, OpKind::Add) << "an output another op reads already stays as it is";
  EXPECT_EQ(g.node(folded).op, OpKind::BatchNorm);
  EXPECT_EQ(g.node(folded).n_inputs, 5);
  EXPECT_EQ(g.node(folded).inputs[4], x) << "the other term is the residual";

  EXPECT_TRUE(test_support::throws<ShapeError>(
      [&] { g.apply(OpKind::BatchNorm, {x, stats, gamma, beta, g.input("r", {2, 6})}, at); },
      {"batch_norm", "residual must be the input's shape {2, 3, 6}", "{2, 6}"}));
  const Value gy = g.input("g", {2, 3, 6});
  EXPECT_TRUE(test_support::throws<ShapeError>([&] { g.apply(OpKind::BatchNormParamGrad, {x, stats, gy}, relu); },
                                               {"batch_norm_param_grad", "takes 5 inputs with kReluOutput; got 3"}));
  EXPECT_TRUE(test_support::throws<ShapeError>(
      [&] { g.apply(OpKind::BatchNormParamGrad, {x, stats, gy, gamma, c}, at); },
      {"batch_norm_param_grad", "takes 3 inputs without kReluOutput; got 5"}));
  const Value sums = g.apply(OpKind::BatchNormParamGrad, {x, stats, gy}, at);
  EXPECT_TRUE(test_support::throws<ShapeError>(
      [&] { g.apply(OpKind::BatchNormBackward, {x, stats, gamma, gy, sums, g.input("b3", {3})}, relu); },
      {"batch_norm_backward", "gamma and beta must be {6}", "{3}"}));

  OpAttrs conv;
  conv.window = window(1, 1, 1, 1);
  conv.shape = Shape{2, 3, 6, 4};
  EXPECT_TRUE(test_support::throws<ShapeError>(
      [&] { g.apply(OpKind::Conv2DBackwardInput, {g.input("gy2", {2, 3, 6, 5}), g.input("k2", {1, 1, 4, 5}), x}, conv); },
      {"conv2d_backward_input", "the added term must be the result's shape {2, 3, 6, 4}", "{2, 3, 6}"}));
  EXPECT_TRUE(test_support::throws<TypeError>(
      [&] {
        g.apply(OpKind::Conv2DBackwardInput,
                {g.input("gy3", {2, 3, 6, 5}), g.input("k3", {1, 1, 4, 5}), g.input("ids", {2, 3, 6, 4}, DType::Int32)},
                conv);
      },
      {"conv2d_backward_input", "must be float32; got int32"}));
}

// ---------------------------------------------------------------------------
// Pooling.

TEST(LayerOpGradPool, MaxPool2D) {
  const std::vector<WindowCase> cases = {
      {"2x2_s2", {2, 4, 4, 3}, window(2, 2, 2, 2)},
      {"3x3_s1_pad1", {1, 5, 5, 2}, window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1)},
      {"3x3_s2", {2, 7, 7, 1}, window(3, 3, 2, 2)},
      {"3x3_s2_pads0011", {1, 6, 6, 2}, window(3, 3, 2, 2, 1, 1, 0, 0, 1, 1)},
  };
  for (const WindowCase& k : cases) {
    SCOPED_TRACE(std::string(k.name) + " " + k.x.str() + " " + window_str(k.w));
    GradCheck c(1300);
    // Distinct values 0.05 apart: a step of h = 0.01 never reorders a window.
    Value x = c.param(distinct(k.x, c.rng, 0.05f), "x");
    Value y = c.g.windowed(OpKind::MaxPool2D, x, k.w);
    ASSERT_EQ(c.g.shape(y), (Shape{k.x[0], k.w.out_h(k.x[1]), k.w.out_w(k.x[2]), k.x[3]}));
    EXPECT_EQ(c.check(c.project(y)).message, "");
  }
}

TEST(LayerOpGradPool, AvgPool2D) {
  const std::vector<WindowCase> cases = {
      {"2x2_s2_valid", {2, 4, 4, 3}, window(2, 2, 2, 2)},
      {"3x3_s1_pad1", {1, 5, 5, 2}, window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1)},  // counts 4, 6, 9
      {"3x3_s2_pads0011", {1, 6, 6, 2}, window(3, 3, 2, 2, 1, 1, 0, 0, 1, 1)},
      {"2x2_s1_pads0011", {2, 3, 4, 1}, window(2, 2, 1, 1, 1, 1, 0, 0, 1, 1)},
      {"3x3_s2_valid", {1, 7, 5, 2}, window(3, 3, 2, 2)},
  };
  for (const WindowCase& k : cases) {
    SCOPED_TRACE(std::string(k.name) + " " + k.x.str() + " " + window_str(k.w));
    GradCheck c(1400);
    Value x = c.param(uniform(k.x, c.rng, -1.5f, 1.5f), "x");
    Value y = c.g.windowed(OpKind::AvgPool2D, x, k.w);
    ASSERT_EQ(c.g.shape(y), (Shape{k.x[0], k.w.out_h(k.x[1]), k.w.out_w(k.x[2]), k.x[3]}));
    // Scaled by 2: pooled gradients are w / count, down to 1/9.
    EXPECT_EQ(c.check(c.g.scale(c.project(y), 2.0f)).message, "");
  }
}

// ---------------------------------------------------------------------------
// Chains.

// Layer normalisation over the last axis, with affine gamma/beta and a gelu:
// y = gelu(((x - m) * rsqrt(mean((x - m)^2) + eps)) * gamma + beta).
TEST(LayerOpGradChain, LayerNorm) {
  GradCheck c(1500);
  const int64_t rows = 3, n = 6;
  Value x = c.param(uniform({rows, n}, c.rng, -2.0f, 2.0f), "x");
  Value gamma = c.param(uniform({n}, c.rng, 0.5f, 1.5f), "gamma");
  Value beta = c.param(uniform({n}, c.rng, -0.5f, 0.5f), "beta");
  Value d = c.g.sub(x, c.g.apply(OpKind::MeanLastAxis, {x}));
  Value var = c.g.apply(OpKind::MeanLastAxis, {c.g.mul(d, d)});
  Value inv = c.g.apply(OpKind::Rsqrt, {c.g.add(var, c.g.fill({}, 1e-5f))});
  Value y = c.g.unary(OpKind::Gelu, c.g.add(c.g.mul(c.g.mul(d, inv), gamma), beta));
  EXPECT_EQ(c.check(c.project(y)).message, "");
}

// A small CNN: conv 3x3 'same' -> silu -> avg_pool 2x2 -> flatten, joined
// with an embedding lookup -> dense -> softplus -> slice -> mean.
TEST(LayerOpGradChain, SmallConvNet) {
  GradCheck c(1600);
  const int64_t b = 2, h = 4, w = 4, ch = 2, f = 3, emb = 4, units = 5;
  Value x = c.param(uniform({b, h, w, ch}, c.rng, -1.0f, 1.0f), "x");
  Value kern = c.param(uniform({3, 3, ch, f}, c.rng, -0.5f, 0.5f), "K");
  Value table = c.param(uniform({5, emb}, c.rng, -1.0f, 1.0f), "table");
  Value dense = c.param(uniform({(h / 2) * (w / 2) * f + emb, units}, c.rng, -0.5f, 0.5f), "W");
  Value ids = c.data(Tensor::from_vector(std::span<const int32_t>(std::vector<int32_t>{3, 1}), Shape{b}), "ids");
  const Window2D same = window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1);
  OpAttrs conv_at;
  conv_at.window = same;
  Value act = c.g.unary(OpKind::Silu, c.g.apply(OpKind::Conv2D, {x, kern}, conv_at));
  Value pooled = c.g.windowed(OpKind::AvgPool2D, act, window(2, 2, 2, 2));
  Value feats = c.g.concat(c.g.reshape(pooled, {b, (h / 2) * (w / 2) * f}), c.g.apply(OpKind::Gather, {table, ids}), 1);
  Value out = c.g.unary(OpKind::Softplus, c.g.matmul(feats, dense));
  Value y = c.g.apply(OpKind::MeanLastAxis, {c.g.slice(out, 1, 1, 3)});
  EXPECT_EQ(c.check(c.g.scale(c.project(y), 4.0f)).message, "");
}

}  // namespace

// ---------------------------------------------------------------------------
// The fused recurrent sequences (LstmSequence, GruSequence): every column of
// the output (hidden and cell states, the gates) enters the loss, so each
// part of the backward kernels' g is checked; one step and several. Inputs
// in [-1, 1] and a kernel of magnitude 0.5 keep the gates off saturation.
TEST(LayerOpGradRecurrent, LstmSequence) {
  for (int64_t steps : {1, 4}) {
    SCOPED_TRACE("steps " + std::to_string(steps));
    GradCheck c(1700 + uint32_t(steps));
    const int64_t b = 2, h = 3;
    Value xw = c.param(uniform({b, steps, 4 * h}, c.rng, -1.0f, 1.0f), "xw");
    // One step starts from h = 0: U gets no gradient, so it is data there.
    const Tensor ut = uniform({h, 4 * h}, c.rng, -0.5f, 0.5f);
    Value u = steps > 1 ? c.param(ut, "U") : c.data(ut, "U");
    Value y = c.g.apply(OpKind::LstmSequence, {xw, u});
    ASSERT_EQ(c.g.shape(y), (Shape{b, steps, 6 * h}));
    EXPECT_EQ(c.check(c.project(y)).message, "");
  }
}

TEST(LayerOpGradRecurrent, GruSequence) {
  for (int64_t steps : {1, 4}) {
    SCOPED_TRACE("steps " + std::to_string(steps));
    GradCheck c(1710 + uint32_t(steps));
    const int64_t b = 2, h = 3;
    Value xw = c.param(uniform({b, steps, 3 * h}, c.rng, -1.0f, 1.0f), "xw");
    const Tensor ut = uniform({h, 3 * h}, c.rng, -0.5f, 0.5f);
    Value u = steps > 1 ? c.param(ut, "U") : c.data(ut, "U");
    Value rb = c.param(uniform({3 * h}, c.rng, -0.5f, 0.5f), "rb");
    Value y = c.g.apply(OpKind::GruSequence, {xw, u, rb});
    ASSERT_EQ(c.g.shape(y), (Shape{b, steps, 5 * h}));
    EXPECT_EQ(c.check(c.project(y)).message, "");
  }
}

// From given initial states (the eager modules' h0, c0): their gradients come
// from the backward ops' extra step T, and U's from h0 as the first previous state.
TEST(LayerOpGradRecurrent, InitialStates) {
  for (int64_t steps : {1, 3}) {
    SCOPED_TRACE("steps " + std::to_string(steps));
    GradCheck c(1730 + uint32_t(steps));
    const int64_t b = 2, h = 3;
    Value xw = c.param(uniform({b, steps, 4 * h}, c.rng, -1.0f, 1.0f), "lstm xw");
    Value u = c.param(uniform({h, 4 * h}, c.rng, -0.5f, 0.5f), "lstm U");
    Value h0 = c.param(uniform({b, h}, c.rng, -1.0f, 1.0f), "h0");
    Value c0 = c.param(uniform({b, h}, c.rng, -1.0f, 1.0f), "c0");
    Value gxw = c.param(uniform({b, steps, 3 * h}, c.rng, -1.0f, 1.0f), "gru xw");
    Value gu = c.param(uniform({h, 3 * h}, c.rng, -0.5f, 0.5f), "gru U");
    Value rb = c.param(uniform({3 * h}, c.rng, -0.5f, 0.5f), "gru rb");
    Value gh0 = c.param(uniform({b, h}, c.rng, -1.0f, 1.0f), "gru h0");
    Value lstm = c.g.apply(OpKind::LstmSequence, {xw, u, h0, c0});
    Value gru = c.g.apply(OpKind::GruSequence, {gxw, gu, rb, gh0});
    ASSERT_EQ(c.g.shape(lstm), (Shape{b, steps, 6 * h}));
    EXPECT_EQ(c.check(c.g.add(c.project(lstm), c.project(gru))).message, "");
  }
}

// Only the hidden states reach the loss, as in the layers (the gradient of
// the other columns is then zero: the path the layers take).
TEST(LayerOpGradRecurrent, HiddenStatesOnly) {
  GradCheck c(1720);
  const int64_t b = 3, steps = 5, h = 4;
  Value xw = c.param(uniform({b, steps, 4 * h}, c.rng, -1.0f, 1.0f), "lstm xw");
  Value u = c.param(uniform({h, 4 * h}, c.rng, -0.5f, 0.5f), "lstm U");
  Value gxw = c.param(uniform({b, steps, 3 * h}, c.rng, -1.0f, 1.0f), "gru xw");
  Value gu = c.param(uniform({h, 3 * h}, c.rng, -0.5f, 0.5f), "gru U");
  Value rb = c.param(uniform({3 * h}, c.rng, -0.5f, 0.5f), "gru rb");
  Value lstm = c.g.slice(c.g.apply(OpKind::LstmSequence, {xw, u}), 2, 0, h);
  Value gru = c.g.slice(c.g.slice(c.g.apply(OpKind::GruSequence, {gxw, gu, rb}), 2, 0, h), 1, steps - 1, 1);
  EXPECT_EQ(c.check(c.g.add(c.project(lstm), c.g.scale(c.project(gru), 3.0f))).message, "");
}

TEST(LayerOpGradRecurrent, ShapeRulesSayWhatTheyExpect) {
  Graph g;
  Value u = g.input("U", Shape{3, 12});
  EXPECT_TRUE(test_support::throws<ShapeError>(
      [&] { g.apply(OpKind::LstmSequence, {g.input("xw", Shape{2, 4, 9}), u}); },
      {"lstm_sequence", "input projection must be {batch, steps, 4 * 3}", "{2, 4, 9}"}));
  EXPECT_TRUE(test_support::throws<ShapeError>(
      [&] { g.apply(OpKind::LstmSequence, {g.input("xw2", Shape{2, 4, 12}), g.input("U2", Shape{3, 9})}); },
      {"recurrent kernel must be {units, 4 * units}", "{3, 9}"}));
  EXPECT_TRUE(test_support::throws<ShapeError>(
      [&] {
        g.apply(OpKind::GruSequence, {g.input("xw3", Shape{2, 4, 9}), g.input("U3", Shape{3, 9}),
                                      g.input("rb", Shape{6})});
      },
      {"gru_sequence", "recurrent bias must be {9}", "{6}"}));
  const Value xw = g.input("xw4", Shape{2, 4, 12}), s = g.input("s", Shape{2, 3});
  EXPECT_TRUE(test_support::throws<ShapeError>([&] { g.apply(OpKind::LstmSequence, {xw, u, s}); },
                                               {"lstm_sequence", "h0 and c0", "got one"}));
  EXPECT_TRUE(test_support::throws<ShapeError>(
      [&] { g.apply(OpKind::LstmSequence, {xw, u, s, g.input("c0", Shape{3, 3})}); },
      {"initial state 1 must be {batch, units} = {2, 3}", "{3, 3}"}));
}
