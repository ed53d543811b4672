// Grouped and depthwise convolutions (Window2D::groups; kernels/grouped_conv.cpp),
// in the kernels' binaries, so also on the -march=haswell build of the kernels:
//  * the Conv2D op and its two gradients against a plain loop in double
//    here (groups 1, 2, C with depth multipliers 1 and 2; strides 2,
//    dilation 2, "same" and "valid" pads), on the calling thread and on the
//    pool (shapes above the executable's threading threshold);
//  * the gradients of x, the kernel and the bias against central finite
//    differences (tests/support/gradient_check.h; its defaults: step 1e-2,
//    |num - ana| <= 1e-3 + 1e-2 |num|, exact up to rounding here, since the
//    loss is bilinear in x and the kernel);
//  * the fused forms (bias and ReLU in the pass) against the separate ops,
//    bit for bit, and the same bits at one and two threads;
//  * bad groups and kernels: typed errors with the numbers.
#include <gtest/gtest.h>

#include "gradient_check.h"
#include "test_support.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tensorgrad/core/threads.h"

using namespace tensorgrad;
using namespace test_support;

namespace {

struct GroupCase {
  const char* name;
  Shape x;         // {B, H, W, C}
  int64_t filters;
  int64_t groups;
  Window2D w;
};

Window2D grouped(Window2D w, int64_t groups) {
  w.groups = groups;
  return w;
}

// The cases of the brief: groups 1, 2 and C (depth multiplier 1 and 2),
// strides 2, dilation 2, "same" and "valid" padding.
std::vector<GroupCase> cases() {
  return {
      {"groups1_3x3_same", {2, 5, 6, 4}, 6, 1, window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1)},
      {"groups2_3x3_same", {2, 5, 6, 4}, 6, 2, window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1)},
      {"groups2_3x3_valid_s2", {1, 7, 6, 4}, 4, 2, window(3, 3, 2, 2)},
      {"depthwise_m1_3x3_same", {2, 5, 6, 4}, 4, 4, window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1)},
      {"depthwise_m2_3x3_same", {2, 5, 6, 3}, 6, 3, window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1)},
      {"depthwise_m1_3x3_s2_same_pads0011", {1, 6, 6, 5}, 5, 5, window(3, 3, 2, 2, 1, 1, 0, 0, 1, 1)},
      {"depthwise_m2_3x3_s2_valid", {2, 7, 7, 2}, 4, 2, window(3, 3, 2, 2)},
      {"depthwise_m1_3x3_dilation2_same", {1, 6, 7, 3}, 3, 3, window(3, 3, 1, 1, 2, 2, 2, 2, 2, 2)},
      {"depthwise_m2_3x3_dilation2_valid", {1, 6, 7, 2}, 4, 2, window(3, 3, 1, 1, 2, 2)},
      {"groups3_2x3_mixed", {1, 6, 7, 6}, 9, 3, window(2, 3, 2, 1, 1, 2, 1, 0, 0, 2)},
      {"depthwise_1x3_conv1d", {2, 1, 9, 4}, 4, 4, window(1, 3, 1, 1, 1, 1, 0, 1, 0, 1)},
      // Whole registers of channels and a tail (16 + 5 with AVX-512, 8 + 8 + 5 with AVX2).
      {"depthwise_m1_21_channels_same", {2, 5, 6, 21}, 21, 21, window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1)},
      {"depthwise_m1_21_channels_s2", {1, 7, 6, 21}, 21, 21, window(3, 3, 2, 2, 1, 1, 1, 1, 1, 1)},
      // More taps than the depthwise loops take (7x7): the general loops.
      {"depthwise_m1_9x9_same", {1, 9, 9, 3}, 3, 3, window(9, 9, 1, 1, 1, 1, 4, 4, 4, 4)},
  };
}

// y = conv(x, k) in double: y[b, oy, ox, f] = sum over the taps and the
// channels c of f's group of x[b, iy, ix, g Cg + c] k[ky, kx, c, f].
struct Reference {
  std::vector<double> y, dx, dk;  // dx, dk: the gradients of sum(y * w)
};

Reference reference(const Shape& xs, const std::vector<float>& x, const std::vector<float>& k, int64_t F,
                    const Window2D& w, const std::vector<float>& weights) {
  const int64_t B = xs[0], H = xs[1], W = xs[2], C = xs[3], G = w.groups, Cg = C / G, Fg = F / G;
  const int64_t Ho = w.out_h(H), Wo = w.out_w(W);
  Reference r;
  r.y.assign(size_t(B * Ho * Wo * F), 0.0);
  r.dx.assign(x.size(), 0.0);
  r.dk.assign(k.size(), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t oy = 0; oy < Ho; ++oy)
      for (int64_t ox = 0; ox < Wo; ++ox)
        for (int64_t f = 0; f < F; ++f) {
          const int64_t g = f / Fg, yi = ((b * Ho + oy) * Wo + ox) * F + f;
          for (int64_t ky = 0; ky < w.kh; ++ky)
            for (int64_t kx = 0; kx < w.kw; ++kx) {
              const int64_t iy = oy * w.sh - w.pad_top + ky * w.dh, ix = ox * w.sw - w.pad_left + kx * w.dw;
              if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
              for (int64_t c = 0; c < Cg; ++c) {
                const int64_t xi = ((b * H + iy) * W + ix) * C + g * Cg + c, ki = ((ky * w.kw + kx) * Cg + c) * F + f;
                r.y[size_t(yi)] += double(x[size_t(xi)]) * k[size_t(ki)];
                r.dx[size_t(xi)] += double(weights[size_t(yi)]) * k[size_t(ki)];
                r.dk[size_t(ki)] += double(weights[size_t(yi)]) * x[size_t(xi)];
              }
            }
        }
  return r;
}

std::vector<float> random_floats(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& e : v) e = u(rng);
  return v;
}

// The op's y and the gradients of sum(y * weights) against the reference.
void check_values(const GroupCase& cc) {
  SCOPED_TRACE(std::string(cc.name) + " " + cc.x.str() + " " + window_str(cc.w));
  const Window2D w = grouped(cc.w, cc.groups);
  const Shape ks{w.kh, w.kw, cc.x[3] / cc.groups, cc.filters};
  const Shape ys{cc.x[0], w.out_h(cc.x[1]), w.out_w(cc.x[2]), cc.filters};
  std::mt19937 rng(uint32_t(cc.x.numel() * 7 + cc.filters));
  const std::vector<float> xv = random_floats(size_t(cc.x.numel()), rng), kv = random_floats(size_t(ks.numel()), rng),
                           wv = random_floats(size_t(ys.numel()), rng);
  Graph g;
  Value x = g.parameter(Tensor::from_vector(xv, cc.x), "x", true);
  Value k = g.parameter(Tensor::from_vector(kv, ks), "k", true);
  Value weights = g.input("w", ys);
  OpAttrs at;
  at.window = w;
  Value y = g.apply(OpKind::Conv2D, {x, k}, at);
  ASSERT_EQ(g.shape(y), ys);
  Value loss = g.sum(g.mul(y, weights));
  const std::vector<Value> grads = g.gradients(loss, std::vector<Value>{x, k});
  Executable exe(std::move(g), {y, grads[0], grads[1]});
  exe.bind(weights, Tensor::from_vector(wv, ys));
  exe.run();
  const Reference want = reference(cc.x, xv, kv, cc.filters, w, wv);
  auto expect_near = [](const std::vector<float>& got, const std::vector<double>& ref, const char* what) {
    ASSERT_EQ(got.size(), ref.size()) << what;
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], ref[i], 1e-4 * (1.0 + std::fabs(ref[i]))) << what << " element " << i;
  };
  expect_near(exe.output(y).to_vector(), want.y, "y");
  expect_near(exe.output(grads[0]).to_vector(), want.dx, "dx");
  expect_near(exe.output(grads[1]).to_vector(), want.dk, "dkernel");
}

}  // namespace

TEST(GroupedConv, ValuesAndGradientsMatchThePlainLoop) {
  for (const GroupCase& c : cases()) check_values(c);
}

// Above the executable's 1e6-flop threshold: the rows spread over the pool.
TEST(GroupedConv, ValuesOnThePool) {
  check_values({"depthwise_m1_threaded", {8, 24, 24, 32}, 32, 32, window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1)});
  check_values({"depthwise_m1_s2_threaded", {8, 25, 24, 32}, 32, 32, window(3, 3, 2, 2, 1, 1, 0, 0, 1, 1)});
  check_values({"groups4_threaded", {4, 20, 20, 16}, 32, 4, window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1)});
}

TEST(GroupedConv, GradientsMatchFiniteDifferences) {
  for (const GroupCase& cc : cases()) {
    const Window2D w = grouped(cc.w, cc.groups);
    SCOPED_TRACE(std::string(cc.name) + " " + cc.x.str() + " " + window_str(w));
    GradCheck c(1300);
    Value x = c.param(uniform(cc.x, c.rng, -1.0f, 1.0f), "x");
    Value k = c.param(uniform({w.kh, w.kw, cc.x[3] / cc.groups, cc.filters}, c.rng, -0.5f, 0.5f), "K");
    Value bias = c.param(uniform({cc.filters}, c.rng, -0.5f, 0.5f), "bias");
    OpAttrs at;
    at.window = w;
    EXPECT_EQ(c.check(c.project(c.g.apply(OpKind::Conv2D, {x, k, bias}, at))).message, "");
  }
}

// Gradients of gradients: the backward ops' own rules (a grouped Conv2D,
// Conv2DBackwardInput and Conv2DBackwardFilter of the same groups).
TEST(GroupedConv, SecondOrderGradientsMatchFiniteDifferences) {
  const GroupCase cc{"depthwise_m2", {1, 5, 5, 2}, 4, 2, window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1)};
  const Window2D w = grouped(cc.w, cc.groups);
  GradCheck c(1310);
  Value x = c.param(uniform(cc.x, c.rng, -1.0f, 1.0f), "x");
  Value k = c.param(uniform({3, 3, 1, 4}, c.rng, -0.5f, 0.5f), "K");
  OpAttrs at;
  at.window = w;
  Value y = c.g.apply(OpKind::Conv2D, {x, k}, at);
  // The first gradients (dx by Conv2DBackwardInput, linear in k; dk by
  // Conv2DBackwardFilter, linear in x) squared: their own gradients run
  // through those ops' rules. Quadratic, so the central differences are
  // exact up to rounding.
  const std::vector<Value> first = c.g.gradients(c.project(y), std::vector<Value>{x, k});
  Value loss = c.g.add(c.project(c.g.mul(first[0], first[0])), c.project(c.g.mul(first[1], first[1])));
  EXPECT_EQ(c.check(loss).message, "");
}

// The bias and the ReLU inside the pass give the separate Add's and Relu's bits.
TEST(GroupedConv, FusedBiasAndReluGiveTheSeparateOpsBits) {
  std::mt19937 rng(5);
  const Shape xs{2, 6, 6, 8};
  const Tensor xt = uniform(xs, rng, -1.0f, 1.0f), kt = uniform({3, 3, 1, 8}, rng, -1.0f, 1.0f),
               bt = uniform({8}, rng, -1.0f, 1.0f);
  Graph g;
  Value x = g.state(xt, "x"), k = g.state(kt, "k"), b = g.state(bt, "b");
  OpAttrs at;
  at.window = grouped(window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1), 8);
  Value apart = g.relu(g.add(g.apply(OpKind::Conv2D, {x, k}, at), b));
  OpAttrs fused_at = at;
  fused_at.flags = kReluOutput;
  Value fused = g.apply(OpKind::Conv2D, {x, k, b}, fused_at);
  Executable exe(std::move(g), {apart, fused});
  exe.run();
  EXPECT_EQ(exe.output(apart).to_vector(), exe.output(fused).to_vector());
}

TEST(GroupedConv, SameBitsOnOneAndTwoThreads) {
  std::mt19937 rng(7);
  const Shape xs{6, 20, 20, 24};
  const Tensor xt = uniform(xs, rng, -1.0f, 1.0f), kt = uniform({3, 3, 1, 48}, rng, -1.0f, 1.0f),
               k2 = uniform({3, 3, 6, 24}, rng, -1.0f, 1.0f);
  auto run = [&](int threads) {
    set_num_threads(threads);
    Graph g;
    Value x = g.parameter(xt.clone(), "x", true), k = g.parameter(kt.clone(), "k", true),
          kb = g.parameter(k2.clone(), "k2", true);
    OpAttrs dw, gr;
    dw.window = grouped(window(3, 3, 2, 2, 1, 1, 0, 0, 1, 1), 24);
    gr.window = grouped(window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1), 8);
    Value y = g.apply(OpKind::Conv2D, {g.apply(OpKind::Conv2D, {x, k}, dw), kb}, gr);
    Value loss = g.sum(g.mul(y, y));
    std::vector<Value> outs{loss};
    for (Value v : g.gradients(loss, std::vector<Value>{x, k, kb})) outs.push_back(v);
    Executable exe(std::move(g), outs);
    exe.run();
    std::vector<std::vector<float>> got;
    for (Value v : outs) got.push_back(exe.output(v).to_vector());
    return got;
  };
  const int saved = num_threads();
  const auto one = run(1), two = run(2);
  set_num_threads(saved);
  EXPECT_EQ(one, two);
}

TEST(GroupedConv, GroupsThatDoNotDivideAreRefusedWithTheNumbers) {
  Graph g;
  Value x = g.input("x", Shape{1, 5, 5, 6});
  OpAttrs at;
  at.window = grouped(window(3, 3, 1, 1), 4);
  // 4 groups do not divide 6 channels.
  Value k = g.parameter(Tensor::zeros({3, 3, 1, 4}), "k", false);
  try {
    g.apply(OpKind::Conv2D, {x, k}, at);
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("groups must be >= 1 and divide the input channels (6)"), std::string::npos)
        << e.what();
  }
  // 3 groups divide 6 channels but not 4 filters.
  at.window.groups = 3;
  Value k3 = g.parameter(Tensor::zeros({3, 3, 2, 4}), "k3", false);
  EXPECT_THROW(g.apply(OpKind::Conv2D, {x, k3}, at), ValueError);
  // A kernel whose channels disagree with groups: {3, 3, 6 / 3 = 2, F} expected.
  Value wrong = g.parameter(Tensor::zeros({3, 3, 6, 6}), "wrong", false);
  try {
    g.apply(OpKind::Conv2D, {x, wrong}, at);
    FAIL() << "no error";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("kernel must be {3, 3, 2, filters} (input channels 6 / groups 3)"),
              std::string::npos)
        << e.what();
  }
  // Pooling has no groups.
  OpAttrs pool;
  pool.window = grouped(window(2, 2, 2, 2), 2);
  EXPECT_THROW(g.windowed(OpKind::MaxPool2D, x, pool.window), ValueError);
}
