// Forward values of the window and layout ops against naive references
// written here, independently of src/kernels:
//  * the Conv2D op (Keras kernel {kh, kw, Cin, Cout}) against a
//    direct nested-loop NHWC convolution in double, with strides, dilation,
//    TF 'same' and 'valid' padding and arbitrary pads;
//  * max and average pooling (average excludes padding from the count, as
//    Keras/TF 'same'; max ignores padding), and max pooling's gradient routing
//    (each window's gradient to its FIRST maximum in (ky, kx) order, as
//    PyTorch), checked by exact values;
//  * slice, concat, gather, to_index exactly; MovingAverage in place;
//  * the planner's aliasing of Reshape (a view that shares its input's memory).
#include <gtest/gtest.h>

#include "test_support.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tensorgrad/backend/executable.h"
#include "tensorgrad/core/threads.h"
#include "tensorgrad/graph/graph.h"

using namespace tensorgrad;

namespace {

std::vector<float> random_vec(size_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

using test_support::window;
using test_support::window_str;
using test_support::uniform;

// TensorFlow's padding rules for one spatial axis, written from the TF docs.
struct AxisPad {
  int64_t before, after, out;
};
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
AxisPad tf_same(int64_t in, int64_t k, int64_t s, int64_t d) {
  const int64_t out = ceil_div(in, s);
  const int64_t total = std::max<int64_t>((out - 1) * s + (k - 1) * d + 1 - in, 0);
  return {total / 2, total - total / 2, out};
}
AxisPad tf_valid(int64_t in, int64_t k, int64_t s, int64_t d) { return {0, 0, ceil_div(in - (k - 1) * d, s)}; }

// Naive references over x{B,H,W,C} (row-major NHWC), in double.
struct Image {
  int64_t b, h, w, c;
  const std::vector<float>& v;
  // Value at (n, y, x, ch), or nullopt-style flag for padding.
  bool inside(int64_t y, int64_t x) const { return y >= 0 && y < h && x >= 0 && x < w; }
  double at(int64_t n, int64_t y, int64_t x, int64_t ch) const { return v[size_t(((n * h + y) * w + x) * c + ch)]; }
};

// Direct convolution with Keras kernel {kh, kw, Cin, Cout}; `sum_abs` gets
// sum |x * k| per output (the scale of the float32 rounding).
std::vector<double> naive_conv(const Image& x, const std::vector<float>& k, int64_t cout, const Window2D& w,
                               int64_t ho, int64_t wo, std::vector<double>& sum_abs) {
  std::vector<double> y(size_t(x.b * ho * wo * cout), 0.0);
  sum_abs.assign(y.size(), 0.0);
  for (int64_t n = 0; n < x.b; ++n)
    for (int64_t oy = 0; oy < ho; ++oy)
      for (int64_t ox = 0; ox < wo; ++ox)
        for (int64_t f = 0; f < cout; ++f) {
          double s = 0, a = 0;
          for (int64_t ky = 0; ky < w.kh; ++ky)
            for (int64_t kx = 0; kx < w.kw; ++kx) {
              const int64_t iy = oy * w.sh + ky * w.dh - w.pad_top, ix = ox * w.sw + kx * w.dw - w.pad_left;
              if (!x.inside(iy, ix)) continue;
              for (int64_t ch = 0; ch < x.c; ++ch) {
                const double t = x.at(n, iy, ix, ch) * double(k[size_t(((ky * w.kw + kx) * x.c + ch) * cout + f)]);
                s += t;
                a += std::fabs(t);
              }
            }
          const size_t o = size_t(((n * ho + oy) * wo + ox) * cout + f);
          y[o] = s;
          sum_abs[o] = a;
        }
  return y;
}

std::vector<double> naive_pool(const Image& x, bool is_max, const Window2D& w, int64_t ho, int64_t wo) {
  std::vector<double> y;
  for (int64_t n = 0; n < x.b; ++n)
    for (int64_t oy = 0; oy < ho; ++oy)
      for (int64_t ox = 0; ox < wo; ++ox)
        for (int64_t ch = 0; ch < x.c; ++ch) {
          double acc = is_max ? -std::numeric_limits<double>::infinity() : 0.0;
          int count = 0;
          for (int64_t ky = 0; ky < w.kh; ++ky)
            for (int64_t kx = 0; kx < w.kw; ++kx) {
              const int64_t iy = oy * w.sh + ky * w.dh - w.pad_top, ix = ox * w.sw + kx * w.dw - w.pad_left;
              if (!x.inside(iy, ix)) continue;
              ++count;
              acc = is_max ? std::max(acc, x.at(n, iy, ix, ch)) : acc + x.at(n, iy, ix, ch);
            }
          y.push_back(is_max ? acc : acc / count);
        }
  return y;
}

// ---------------------------------------------------------------------------
// The Conv2D op vs the direct loop.

struct ConvCase {
  std::string name;
  int64_t b, h, w, cin, cout, kh, kw, sh, sw, dh, dw;
  enum Pad { Same, Valid, Explicit } pad;
  int64_t top = 0, left = 0, bottom = 0, right = 0;  // Explicit only
};

void check_conv(const ConvCase& cc) {
  SCOPED_TRACE(cc.name);
  Window2D w = window(cc.kh, cc.kw, cc.sh, cc.sw, cc.dh, cc.dw);
  int64_t ho, wo;
  if (cc.pad == ConvCase::Explicit) {
    w.pad_top = cc.top, w.pad_left = cc.left, w.pad_bottom = cc.bottom, w.pad_right = cc.right;
    ho = (cc.h + cc.top + cc.bottom - (cc.kh - 1) * cc.dh - 1) / cc.sh + 1;
    wo = (cc.w + cc.left + cc.right - (cc.kw - 1) * cc.dw - 1) / cc.sw + 1;
  } else {
    auto rule = cc.pad == ConvCase::Same ? tf_same : tf_valid;
    const AxisPad py = rule(cc.h, cc.kh, cc.sh, cc.dh), px = rule(cc.w, cc.kw, cc.sw, cc.dw);
    w.pad_top = py.before, w.pad_bottom = py.after, w.pad_left = px.before, w.pad_right = px.after;
    ho = py.out, wo = px.out;
  }
  SCOPED_TRACE(window_str(w));
  std::mt19937 rng(uint32_t(cc.h * 131 + cc.w * 17 + cc.kh * 5 + cc.sh));
  const std::vector<float> xv = random_vec(size_t(cc.b * cc.h * cc.w * cc.cin), rng);
  const std::vector<float> kv = random_vec(size_t(cc.kh * cc.kw * cc.cin * cc.cout), rng);
  Tensor xt = Tensor::from_vector(xv, {cc.b, cc.h, cc.w, cc.cin});
  Tensor kt = Tensor::from_vector(kv, {cc.kh, cc.kw, cc.cin, cc.cout});

  Graph g;
  Value x = g.input("x", xt.shape());
  Value k = g.parameter(kt, "kernel", false);
  OpAttrs at;
  at.window = w;
  Value y = g.apply(OpKind::Conv2D, {x, k}, at);
  ASSERT_EQ(g.shape(y), (Shape{cc.b, ho, wo, cc.cout}));
  Executable exe(std::move(g), {y});
  exe.bind(x, xt);
  exe.run();
  const std::vector<float> got = exe.output(y).to_vector();
  std::vector<double> sum_abs;
  const std::vector<double> want = naive_conv({cc.b, cc.h, cc.w, cc.cin, xv}, kv, cc.cout, w, ho, wo, sum_abs);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-5 * sum_abs[i] + 1e-7) << "output element " << i;
}

std::vector<ConvCase> conv_cases() {
  using P = ConvCase::Pad;
  return {
      // name, b, h, w, cin, cout, kh, kw, sh, sw, dh, dw, pad
      {"3x3 s1 same", 2, 5, 5, 2, 3, 3, 3, 1, 1, 1, 1, P::Same},
      {"3x3 s1 valid", 1, 6, 7, 3, 2, 3, 3, 1, 1, 1, 1, P::Valid},
      {"3x3 s2 same, even input (pads 0/1)", 2, 6, 6, 2, 4, 3, 3, 2, 2, 1, 1, P::Same},
      {"3x3 s2 same, odd input (pads 1/1)", 1, 7, 7, 1, 2, 3, 3, 2, 2, 1, 1, P::Same},
      {"2x2 s2 same (pads 0/1)", 1, 5, 5, 2, 2, 2, 2, 2, 2, 1, 1, P::Same},
      {"2x2 s2 valid", 2, 6, 4, 3, 2, 2, 2, 2, 2, 1, 1, P::Valid},
      {"5x5 s1 same", 1, 6, 5, 2, 3, 5, 5, 1, 1, 1, 1, P::Same},
      {"3x3 dilation 2 same", 1, 7, 7, 2, 2, 3, 3, 1, 1, 2, 2, P::Same},
      {"3x3 dilation 2 valid", 2, 7, 8, 1, 3, 3, 3, 1, 1, 2, 2, P::Valid},
      {"4x4 s3 same (pads 1/2)", 1, 10, 10, 2, 2, 4, 4, 3, 3, 1, 1, P::Same},
      {"1x3 conv1d same", 2, 1, 10, 3, 4, 1, 3, 1, 1, 1, 1, P::Same},
      {"1x3 conv1d s2 same", 2, 1, 9, 2, 3, 1, 3, 1, 2, 1, 1, P::Same},
      {"1x3 conv1d dilation 2 valid", 1, 1, 9, 2, 2, 1, 3, 1, 1, 1, 2, P::Valid},
      {"2x3 s(1,2) same", 1, 5, 8, 3, 2, 2, 3, 1, 2, 1, 1, P::Same},
      {"3x2 s(2,1) d(1,2) pads(2,0,1,3)", 2, 6, 5, 2, 3, 3, 2, 2, 1, 1, 2, P::Explicit, 2, 0, 1, 3},
      {"1x1 s2", 1, 5, 5, 4, 3, 1, 1, 2, 2, 1, 1, P::Valid},
      // Above the executable's 1e6-flop threshold: runs on the thread pool.
      {"3x3 s1 same, threaded", 4, 16, 16, 8, 16, 3, 3, 1, 1, 1, 1, P::Same},
      {"3x3 s2 same, threaded", 3, 17, 16, 8, 16, 3, 3, 2, 2, 1, 1, P::Same},
      // Rows wider than the direct kernel's 64-pixel block (a full block and a tail).
      {"1x5 conv1d, 150 steps", 2, 1, 150, 3, 5, 1, 5, 1, 1, 1, 1, P::Same},
      {"3x3 s2 same, 140 wide", 1, 3, 140, 2, 3, 3, 3, 2, 2, 1, 1, P::Same},
  };
}

TEST(WindowOpsConv, Conv2DOpMatchesDirectConvolution) {
  for (const ConvCase& cc : conv_cases()) check_conv(cc);
}

TEST(WindowOpsConv, TfSamePaddingRule) {
  // The reference's own padding rule, by hand (TF docs' examples).
  const AxisPad a = tf_same(6, 3, 2, 1), b = tf_same(7, 3, 2, 1), c = tf_same(10, 4, 3, 1), d = tf_same(7, 3, 1, 2);
  EXPECT_EQ(std::vector<int64_t>({a.before, a.after, a.out}), std::vector<int64_t>({0, 1, 3}));
  EXPECT_EQ(std::vector<int64_t>({b.before, b.after, b.out}), std::vector<int64_t>({1, 1, 4}));
  EXPECT_EQ(std::vector<int64_t>({c.before, c.after, c.out}), std::vector<int64_t>({1, 2, 4}));
  EXPECT_EQ(std::vector<int64_t>({d.before, d.after, d.out}), std::vector<int64_t>({2, 2, 7}));
  // Window2D's output size agrees with TF for 'same' pads.
  Window2D w = window(3, 3, 2, 2, 1, 1, 0, 0, 1, 1);
  EXPECT_EQ(w.out_h(6), 3);
  w = window(4, 4, 3, 3, 1, 1, 1, 1, 2, 2);
  EXPECT_EQ(w.out_h(10), 4);
}

// ---------------------------------------------------------------------------
// Pooling forward.

struct PoolCase {
  std::string name;
  Shape x;
  Window2D w;
};

TEST(WindowOpsPool, MaxAndAverageMatchNaive) {
  const std::vector<PoolCase> cases = {
      {"2x2 s2", {2, 4, 6, 3}, window(2, 2, 2, 2)},
      {"3x3 s1 pad 1", {1, 5, 5, 2}, window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1)},
      {"3x3 s2 same pads 0/1", {2, 6, 6, 2}, window(3, 3, 2, 2, 1, 1, 0, 0, 1, 1)},
      {"3x3 s2 valid", {1, 7, 5, 1}, window(3, 3, 2, 2)},
      {"2x2 s1 same pads 0/1", {1, 3, 4, 2}, window(2, 2, 1, 1, 1, 1, 0, 0, 1, 1)},
      {"2x3 s(1,2) pads(1,2,0,1)", {2, 4, 5, 2}, window(2, 3, 1, 2, 1, 1, 1, 2, 0, 1)},
      {"3x3 dilation 2", {1, 6, 6, 1}, window(3, 3, 1, 1, 2, 2, 1, 1, 1, 1)},
      // Above the executable's 1e6-flop threshold: runs on the thread pool.
      {"3x3 s1 pad 1, threaded", {16, 64, 64, 16}, window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1)},
      // Windows tiling the image, C a multiple of 8: max pooling's tiled form.
      {"2x2 s2, C 8 (tiled)", {2, 4, 6, 8}, window(2, 2, 2, 2)},
      {"3x3 s3, C 16 (tiled)", {2, 6, 9, 16}, window(3, 3, 3, 3)},
      {"2x2 s2, C 8 (tiled), threaded", {16, 32, 32, 8}, window(2, 2, 2, 2)},
  };
  for (const PoolCase& pc : cases) {
    SCOPED_TRACE(pc.name + " " + pc.x.str());
    std::mt19937 rng(77);
    // All negative: padding must be skipped by max pooling (a zero pad would win).
    for (float lo : {-1.0f, -3.0f}) {
      const std::vector<float> xv = random_vec(size_t(pc.x.numel()), rng, lo, lo + 2.0f);
      Tensor xt = Tensor::from_vector(xv, pc.x);
      Graph g;
      Value x = g.input("x", pc.x);
      Value mx = g.windowed(OpKind::MaxPool2D, x, pc.w), av = g.windowed(OpKind::AvgPool2D, x, pc.w);
      const int64_t ho = pc.w.out_h(pc.x[1]), wo = pc.w.out_w(pc.x[2]);
      ASSERT_EQ(g.shape(mx), (Shape{pc.x[0], ho, wo, pc.x[3]}));
      Executable exe(std::move(g), {mx, av});
      exe.bind(x, xt);
      exe.run();
      const Image img{pc.x[0], pc.x[1], pc.x[2], pc.x[3], xv};
      const std::vector<double> want_max = naive_pool(img, true, pc.w, ho, wo);
      const std::vector<double> want_avg = naive_pool(img, false, pc.w, ho, wo);
      const std::vector<float> got_max = exe.output(mx).to_vector(), got_avg = exe.output(av).to_vector();
      ASSERT_EQ(got_max.size(), want_max.size());
      for (size_t i = 0; i < got_max.size(); ++i) {
        EXPECT_EQ(double(got_max[i]), want_max[i]) << "max element " << i;
        EXPECT_NEAR(got_avg[i], want_avg[i], 4e-6) << "avg element " << i;
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Max pooling's gradient routing, exact values.

// dx for loss = sum(max_pool(x) * gw), x a trainable parameter.
std::vector<float> max_pool_grad(const std::vector<float>& xv, const Shape& xs, const Window2D& w,
                                 const std::vector<float>& gw) {
  Tensor xt = Tensor::from_vector(xv, xs);
  Graph g;
  Value x = g.parameter(xt, "x", true);
  Value y = g.windowed(OpKind::MaxPool2D, x, w);
  Tensor gt = Tensor::from_vector(gw, g.shape(y));
  Value gin = g.input("g", gt.shape());
  Value loss = g.sum(g.mul(y, gin));
  Value dx = g.gradients(loss, std::vector<Value>{x}).at(0);
  Executable exe(std::move(g), {dx});
  exe.bind(gin, gt);
  exe.run();
  return exe.output(dx).to_vector();
}

// Reference routing: the first maximum in (ky, kx) scan order, padding skipped.
std::vector<float> first_max_routing(const std::vector<float>& xv, const Shape& xs, const Window2D& w,
                                     const std::vector<float>& gw) {
  const int64_t h = xs[1], wd = xs[2], c = xs[3], ho = w.out_h(h), wo = w.out_w(wd);
  std::vector<float> dx(xv.size(), 0.0f);
  for (int64_t n = 0; n < xs[0]; ++n)
    for (int64_t oy = 0; oy < ho; ++oy)
      for (int64_t ox = 0; ox < wo; ++ox)
        for (int64_t ch = 0; ch < c; ++ch) {
          int64_t best = -1;
          for (int64_t ky = 0; ky < w.kh; ++ky)
            for (int64_t kx = 0; kx < w.kw; ++kx) {
              const int64_t iy = oy * w.sh + ky * w.dh - w.pad_top, ix = ox * w.sw + kx * w.dw - w.pad_left;
              if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
              const int64_t at = ((n * h + iy) * wd + ix) * c + ch;
              if (best < 0 || xv[size_t(at)] > xv[size_t(best)]) best = at;  // strictly greater: first wins
            }
          dx[size_t(best)] += gw[size_t(((n * ho + oy) * wo + ox) * c + ch)];
        }
  return dx;
}

TEST(WindowOpsMaxPoolTies, AllEqualWindowRoutesToFirst) {
  // x = all ones, one 2x2 window: the whole gradient goes to (0, 0).
  EXPECT_EQ(max_pool_grad({1, 1, 1, 1}, {1, 2, 2, 1}, window(2, 2, 2, 2), {3.0f}),
            (std::vector<float>{3, 0, 0, 0}));
  // Two equal maxima at (0, 1) and (1, 0): the first in scan order, (0, 1), takes it.
  EXPECT_EQ(max_pool_grad({0, 5, 5, 1}, {1, 2, 2, 1}, window(2, 2, 2, 2), {2.0f}),
            (std::vector<float>{0, 2, 0, 0}));
  // Per channel: channel 0 ties at (1, 0) and (1, 1); channel 1 at (0, 0) and (1, 1).
  // x{1,2,2,2} laid out (y, x, c).
  EXPECT_EQ(max_pool_grad({0, 4, 1, 0, 7, 2, 7, 4}, {1, 2, 2, 2}, window(2, 2, 2, 2), {1.5f, -2.0f}),
            (std::vector<float>{0, -2, 0, 0, 1.5f, 0, 0, 0}));
}

TEST(WindowOpsMaxPoolTies, OverlappingWindowsAccumulate) {
  // 3x3 stride 1 over an all-ones 4x4 image: four windows, each routes its
  // gradient to its own top-left corner.
  std::vector<float> g4 = {1, 2, 4, 8};
  std::vector<float> want(16, 0.0f);
  want[0] = 1, want[1] = 2, want[4] = 4, want[5] = 8;
  EXPECT_EQ(max_pool_grad(std::vector<float>(16, 1.0f), {1, 4, 4, 1}, window(3, 3, 1, 1), g4), want);
  // One strict maximum at (1, 1) shared by all four windows: it gets the sum.
  std::vector<float> x(16, 0.0f);
  x[5] = 9.0f;
  want.assign(16, 0.0f);
  want[5] = 15.0f;
  EXPECT_EQ(max_pool_grad(x, {1, 4, 4, 1}, window(3, 3, 1, 1), g4), want);
  // All ones 3x3 with 'same' pads 1: window (oy, ox) starts at (oy-1, ox-1);
  // its first valid entry is (max(oy-1,0), max(ox-1,0)). Gradients 2^k.
  std::vector<float> g9 = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  std::vector<float> want9 = {1 + 2 + 8 + 16, 4 + 32, 0, 64 + 128, 256, 0, 0, 0, 0};
  EXPECT_EQ(max_pool_grad(std::vector<float>(9, 1.0f), {1, 3, 3, 1}, window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1), g9), want9);
}

TEST(WindowOpsMaxPoolTies, MatchesReferenceOnManyTies) {
  // Values from {0, 1, 2}: ties everywhere; overlapping, strided, padded and
  // dilated windows, several channels; gradients are small integers (exact sums).
  const std::vector<PoolCase> cases = {
      {"3x3 s1 pad 1", {2, 5, 5, 2}, window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1)},
      {"3x3 s2 pads 0/1", {1, 6, 6, 3}, window(3, 3, 2, 2, 1, 1, 0, 0, 1, 1)},
      {"2x2 s1", {1, 4, 5, 2}, window(2, 2, 1, 1)},
      {"3x3 d2 pad 2", {1, 6, 6, 1}, window(3, 3, 1, 1, 2, 2, 2, 2, 2, 2)},
      {"3x3 s1 pad 1, threaded", {8, 64, 64, 8}, window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1)},
      {"2x2 s2, C 8 (tiled)", {2, 4, 6, 8}, window(2, 2, 2, 2)},
      {"3x3 s3, C 16 (tiled)", {2, 6, 9, 16}, window(3, 3, 3, 3)},
      {"2x2 s2, C 16 (tiled), threaded", {16, 32, 32, 16}, window(2, 2, 2, 2)},
  };
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> val(0, 2), gv(-4, 4);
  for (const PoolCase& pc : cases) {
    SCOPED_TRACE(pc.name);
    std::vector<float> xv(size_t(pc.x.numel()));
    for (float& v : xv) v = float(val(rng));
    const Shape ys{pc.x[0], pc.w.out_h(pc.x[1]), pc.w.out_w(pc.x[2]), pc.x[3]};
    std::vector<float> gw(size_t(ys.numel()));
    for (float& v : gw) v = float(gv(rng));
    EXPECT_EQ(max_pool_grad(xv, pc.x, pc.w, gw), first_max_routing(xv, pc.x, pc.w, gw));
  }
}

// ReLU then max-pool (the CNN's conv, ReLU, pool): the fusion pass hands
// the mask to the pool's backward (kMaskNonPositive) instead of running
// ReluBackward. dx must equal the reference routing over relu(x), masked by
// relu(x) > 0, and the schedule must hold no ReluBackward; when the ReLU's
// output also feeds something else (`also_summed`), its gradient is a sum and
// the unfused path runs.
std::vector<float> relu_pool_grad(const std::vector<float>& xv, const Shape& xs, const Window2D& w,
                                  const std::vector<float>& gw, const std::vector<float>& g2, bool also_summed,
                                  bool* fused) {
  Tensor xt = Tensor::from_vector(xv, xs);
  Graph g;
  Value x = g.parameter(xt, "x", true);
  Value r = g.relu(x);
  Value y = g.windowed(OpKind::MaxPool2D, r, w);
  Tensor gt = Tensor::from_vector(gw, g.shape(y));
  Value gin = g.input("g", gt.shape());
  Value loss = g.sum(g.mul(y, gin));
  Tensor g2t = Tensor::from_vector(g2, xs);
  Value g2in;
  if (also_summed) {
    g2in = g.input("g2", xs);
    loss = g.add(loss, g.sum(g.mul(r, g2in)));
  }
  Value dx = g.gradients(loss, std::vector<Value>{x}).at(0);
  fuse(g);
  int relu_backward = 0, masked_pool = 0;
  for (int32_t id : plan_memory(g, std::vector<Value>{dx}).schedule) {
    const Node& n = g.node(Value{id});
    relu_backward += n.op == OpKind::ReluBackward;
    masked_pool += n.op == OpKind::MaxPool2DBackward && (n.attrs.flags & kMaskNonPositive);
  }
  *fused = relu_backward == 0 && masked_pool == 1;
  Executable exe(std::move(g), {dx});
  exe.bind(gin, gt);
  if (also_summed) exe.bind(g2in, g2t);
  exe.run();
  return exe.output(dx).to_vector();
}

TEST(WindowOpsMaxPoolTies, ReluThenPoolMasksInThePoolBackward) {
  const std::vector<PoolCase> cases = {
      {"2x2 s2, C 8 (tiled)", {2, 6, 8, 8}, window(2, 2, 2, 2)},
      {"2x2 s2, C 3 (scalar)", {2, 6, 8, 3}, window(2, 2, 2, 2)},
      {"3x3 s1 pad 1, C 8", {1, 5, 5, 8}, window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1)},
      {"2x2 s2, threaded", {16, 32, 32, 8}, window(2, 2, 2, 2)},
  };
  std::mt19937 rng(6);
  std::uniform_int_distribution<int> val(-2, 2), gv(-4, 4);
  for (const PoolCase& pc : cases)
    for (bool also_summed : {false, true}) {
      SCOPED_TRACE(pc.name + (also_summed ? ", ReLU output also summed" : ""));
      std::vector<float> xv(size_t(pc.x.numel())), rv(xv.size()), g2(xv.size());
      for (size_t i = 0; i < xv.size(); ++i) {
        xv[i] = float(val(rng));  // ties, zeros and all-negative windows
        rv[i] = std::max(xv[i], 0.0f);
        g2[i] = float(gv(rng));
      }
      const Shape ys{pc.x[0], pc.w.out_h(pc.x[1]), pc.w.out_w(pc.x[2]), pc.x[3]};
      std::vector<float> gw(size_t(ys.numel()));
      for (float& v : gw) v = float(gv(rng));
      std::vector<float> want = first_max_routing(rv, pc.x, pc.w, gw);
      for (size_t i = 0; i < want.size(); ++i) want[i] = rv[i] > 0.0f ? want[i] + (also_summed ? g2[i] : 0.0f) : 0.0f;
      bool fused = false;
      EXPECT_EQ(relu_pool_grad(xv, pc.x, pc.w, gw, g2, also_summed, &fused), want);
      EXPECT_EQ(fused, !also_summed);
    }
}

// ReLU then average pooling (a ResNet's last block, then global average
// pooling): the fusion pass hands the mask to the pool's backward
// (kMaskNonPositive, the ReLU's output as its second input). dx must equal
// ReluBackward after the unmasked kernel, bit for bit, on global, strided
// and overlapping padded windows, at 1 and 2 threads; the schedule must
// hold no ReluBackward; the op refuses the mask without the flag and the
// flag without the mask.
TEST(WindowOpsAvgPool, ReluThenPoolMasksInThePoolBackward) {
  const std::vector<PoolCase> cases = {
      {"global 7x7, C 32", {3, 7, 7, 32}, window(7, 7, 7, 7)},
      {"2x2 s2, C 3", {2, 6, 8, 3}, window(2, 2, 2, 2)},
      {"3x3 s1 pad 1, C 8", {2, 5, 5, 8}, window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1)},
  };
  std::mt19937 rng(7);
  const int saved_threads = num_threads();
  for (const PoolCase& pc : cases)
    for (int threads : {1, 2}) {
      SCOPED_TRACE(pc.name + ", threads " + std::to_string(threads));
      set_num_threads(threads);
      const Tensor xt = uniform(pc.x, rng, -1.0f, 1.0f);
      const Shape ys{pc.x[0], pc.w.out_h(pc.x[1]), pc.w.out_w(pc.x[2]), pc.x[3]};
      const Tensor gt = uniform(ys, rng, -1.0f, 1.0f);
      // The fused graph: the gradient of sum(avg_pool(relu(x)) * g).
      Graph g;
      const Value x = g.parameter(xt, "x", true), gin = g.input("g", ys);
      const Value r = g.relu(x);
      const Value dx = g.gradients(g.sum(g.mul(g.windowed(OpKind::AvgPool2D, r, pc.w), gin)), std::vector<Value>{x})[0];
      fuse(g);
      int relu_backward = 0, masked_pool = 0;
      for (int32_t id : plan_memory(g, std::vector<Value>{dx}).schedule) {
        const Node& n = g.node(Value{id});
        relu_backward += n.op == OpKind::ReluBackward;
        masked_pool += n.op == OpKind::AvgPool2DBackward && (n.attrs.flags & kMaskNonPositive);
      }
      EXPECT_EQ(relu_backward, 0);
      EXPECT_EQ(masked_pool, 1);
      // The reference: the unmasked kernel, then ReluBackward.
      OpAttrs at;
      at.window = pc.w;
      at.shape = pc.x;
      const Value plain = g.apply(OpKind::AvgPool2DBackward, {gin}, at);
      const Value reference = g.apply(OpKind::ReluBackward, {r, plain});
      Executable exe(std::move(g), {dx, reference}, BatchRule{}, nullptr, FusionOptions::none());  // dx fused above
      exe.bind(gin, gt);
      exe.run();
      const std::vector<float> got = exe.output(dx).to_vector();
      EXPECT_EQ(got, exe.output(reference).to_vector());
      EXPECT_TRUE(std::any_of(got.begin(), got.end(), [](float v) { return v == 0.0f; })) << "nothing was masked";
      EXPECT_TRUE(std::any_of(got.begin(), got.end(), [](float v) { return v != 0.0f; })) << "everything was masked";
    }
  set_num_threads(saved_threads);

  Graph g;
  const Value gin = g.input("g", {2, 1, 1, 4}), y = g.input("y", {2, 3, 3, 4});
  OpAttrs at;
  at.window = window(3, 3, 3, 3);
  at.shape = Shape{2, 3, 3, 4};
  EXPECT_TRUE(test_support::throws<ShapeError>([&] { g.apply(OpKind::AvgPool2DBackward, {gin, y}, at); },
                                               {"avg_pool2d_backward", "needs the kMaskNonPositive flag"}));
  at.flags = kMaskNonPositive;
  EXPECT_TRUE(test_support::throws<ShapeError>([&] { g.apply(OpKind::AvgPool2DBackward, {gin}, at); },
                                               {"avg_pool2d_backward", "as the second input"}));
  EXPECT_TRUE(test_support::throws<ShapeError>(
      [&] { g.apply(OpKind::AvgPool2DBackward, {gin, g.input("small", {2, 3, 3, 2})}, at); },
      {"avg_pool2d_backward", "must be the result's shape {2, 3, 3, 4}", "{2, 3, 3, 2}"}));
}

// ---------------------------------------------------------------------------
// Slice, concat, gather, to_index: exact forward values.

// Flattened index of (i, j, k) in a {d0, d1, d2} tensor.
size_t idx3(const Shape& s, int64_t i, int64_t j, int64_t k) { return size_t((i * s[1] + j) * s[2] + k); }

TEST(WindowOpsLayout, SliceExact) {
  const Shape s{3, 4, 5};
  std::vector<float> xv(size_t(s.numel()));
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = float(i) * 0.5f - 7.0f;
  std::vector<int32_t> iv(xv.size());
  for (size_t i = 0; i < iv.size(); ++i) iv[i] = int32_t(i) * 3 - 11;
  struct Case {
    int axis;
    int64_t start, length;
  };
  for (Case k : {Case{0, 1, 2}, Case{0, 2, 1}, Case{1, 0, 3}, Case{1, 2, 2}, Case{2, 1, 3}, Case{2, 4, 1},
                 Case{1, 0, 4}}) {
    SCOPED_TRACE("axis " + std::to_string(k.axis) + " start " + std::to_string(k.start));
    Tensor xt = Tensor::from_vector(xv, s), it = Tensor::from_vector(std::span<const int32_t>(iv), s);
    Graph g;
    Value x = g.input("x", s), xi = g.input("xi", s, DType::Int32);
    Value y = g.slice(x, k.axis, k.start, k.length), yi = g.slice(xi, k.axis, k.start, k.length);
    Shape want = s;
    want.set(k.axis, k.length);
    ASSERT_EQ(g.shape(y), want);
    ASSERT_EQ(g.dtype(yi), DType::Int32);
    Executable exe(std::move(g), {y, yi});
    exe.bind(x, xt);
    exe.bind(xi, it);
    exe.run();
    const std::vector<float> got = exe.output(y).to_vector(), goti = exe.output(yi).to_vector();
    size_t o = 0;
    for (int64_t i = 0; i < want[0]; ++i)
      for (int64_t j = 0; j < want[1]; ++j)
        for (int64_t l = 0; l < want[2]; ++l, ++o) {
          int64_t src[3] = {i, j, l};
          src[k.axis] += k.start;
          ASSERT_EQ(got[o], xv[idx3(s, src[0], src[1], src[2])]) << "element " << o;
          ASSERT_EQ(goti[o], float(iv[idx3(s, src[0], src[1], src[2])])) << "int32 element " << o;
        }
  }
}

TEST(WindowOpsLayout, ConcatExact) {
  for (int axis : {0, 1, 2}) {
    SCOPED_TRACE("axis " + std::to_string(axis));
    Shape sa{2, 3, 4}, sb{2, 3, 4};
    sb.set(axis, 2);
    std::vector<float> av(size_t(sa.numel())), bv(size_t(sb.numel()));
    for (size_t i = 0; i < av.size(); ++i) av[i] = float(i) + 0.25f;
    for (size_t i = 0; i < bv.size(); ++i) bv[i] = -float(i) - 0.5f;
    Tensor at = Tensor::from_vector(av, sa), bt = Tensor::from_vector(bv, sb);
    Graph g;
    Value a = g.input("a", sa), b = g.input("b", sb);
    Value y = g.concat(a, b, axis);
    Shape want = sa;
    want.set(axis, sa[axis] + sb[axis]);
    ASSERT_EQ(g.shape(y), want);
    Executable exe(std::move(g), {y});
    exe.bind(a, at);
    exe.bind(b, bt);
    exe.run();
    const std::vector<float> got = exe.output(y).to_vector();
    size_t o = 0;
    for (int64_t i = 0; i < want[0]; ++i)
      for (int64_t j = 0; j < want[1]; ++j)
        for (int64_t l = 0; l < want[2]; ++l, ++o) {
          int64_t p[3] = {i, j, l};
          const bool from_a = p[axis] < sa[axis];
          if (!from_a) p[axis] -= sa[axis];
          const float e = from_a ? av[idx3(sa, p[0], p[1], p[2])] : bv[idx3(sb, p[0], p[1], p[2])];
          ASSERT_EQ(got[o], e) << "element " << o;
        }
  }
}

TEST(WindowOpsLayout, GatherAndToIndexExact) {
  const int64_t v = 5, d = 3;
  std::vector<float> table(size_t(v * d));
  for (size_t i = 0; i < table.size(); ++i) table[i] = float(i) * 1.5f - 4.0f;
  const std::vector<float> idf = {4, 0, 2, 2, 4, 1};  // repeats, as float ids {2, 3}
  Tensor tt = Tensor::from_vector(table, {v, d}), ft = Tensor::from_vector(idf, {2, 3});
  std::vector<int32_t> idi(idf.begin(), idf.end());
  Tensor it = Tensor::from_vector(std::span<const int32_t>(idi), Shape{2, 3});
  Graph g;
  Value tab = g.parameter(tt, "table", false);
  Value fids = g.input("fids", {2, 3}), iids = g.input("iids", {2, 3}, DType::Int32);
  Value conv = g.apply(OpKind::ToIndex, {fids});
  ASSERT_EQ(g.dtype(conv), DType::Int32);
  Value y1 = g.apply(OpKind::Gather, {tab, iids}), y2 = g.apply(OpKind::Gather, {tab, conv});
  ASSERT_EQ(g.shape(y1), (Shape{2, 3, d}));
  Executable exe(std::move(g), {conv, y1, y2});
  exe.bind(fids, ft);
  exe.bind(iids, it);
  exe.run();
  EXPECT_EQ(exe.output(conv).to_vector(), idf);
  const std::vector<float> g1 = exe.output(y1).to_vector(), g2 = exe.output(y2).to_vector();
  for (size_t i = 0; i < idi.size(); ++i)
    for (int64_t j = 0; j < d; ++j) {
      EXPECT_EQ(g1[i * size_t(d) + size_t(j)], table[size_t(idi[i] * d + j)]) << "row " << i;
      EXPECT_EQ(g2[i * size_t(d) + size_t(j)], table[size_t(idi[i] * d + j)]) << "row " << i;
    }
}

// ---------------------------------------------------------------------------
// MovingAverage updates a persistent state in place.

TEST(WindowOpsState, MovingAverageInPlace) {
  const float m = 0.99f;
  std::mt19937 rng(3);
  const std::vector<float> s0 = random_vec(6, rng, -2.0f, 2.0f), v1 = random_vec(6, rng, -2.0f, 2.0f),
                           v2 = random_vec(6, rng, -2.0f, 2.0f);
  Tensor state = Tensor::from_vector(s0, {2, 3});
  Tensor value = Tensor::from_vector(v1, {2, 3});
  Graph g;
  Value s = g.state(state, "moving_mean");
  Value v = g.input("value", {2, 3});
  OpAttrs at;
  at.momentum = m;
  Value u = g.apply(OpKind::MovingAverage, {s, v}, at);
  Executable exe(std::move(g), {u});
  exe.bind(v, value);
  std::vector<float> want = s0;
  auto step = [&](const std::vector<float>& val) {
    for (size_t i = 0; i < want.size(); ++i) want[i] = m * want[i] + (1.0f - m) * val[i];
  };
  // One ulp of slack: the kernel may contract m * s + (1 - m) * v into an FMA.
  auto expect_state = [&](const char* when) {
    const std::vector<float> got = state.to_vector(), out = exe.output(u).to_vector();
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 2e-7 * std::fabs(want[i]) + 1e-9) << when << ", element " << i;
      EXPECT_EQ(out[i], got[i]) << "the op's output aliases the state, " << when;
    }
  };
  exe.run();
  step(v1);
  expect_state("after one run");
  value.copy_from(Tensor::from_vector(v2, {2, 3}));
  exe.run();
  step(v2);
  expect_state("after two runs");
  // Not a no-op: the state moved away from s0.
  EXPECT_NE(state.to_vector(), s0);
}

// ---------------------------------------------------------------------------
// The planner aliases Reshape to its input's memory.

std::vector<float> apply_fn(const std::vector<float>& v, float (*f)(float)) {
  std::vector<float> out(v.size());
  std::transform(v.begin(), v.end(), out.begin(), f);
  return out;
}
float relu_f(float v) { return v > 0.0f ? v : 0.0f; }

TEST(WindowOpsReshapeAlias, ReshapeOfIntermediateAsOutput) {
  std::mt19937 rng(21);
  const std::vector<float> xv = random_vec(12, rng, -2.0f, 2.0f);
  Tensor xt = Tensor::from_vector(xv, {2, 6});
  Graph g;
  Value x = g.input("x", {2, 6});
  Value r = g.relu(x);
  Value y = g.reshape(r, {3, 4});  // an output that views r
  Value s = g.scale(r, 2.0f);      // r's last direct consumer
  // Later intermediates that would take r's slot if r were freed after s.
  Value t = g.tanh(s);
  Value u = g.mul(g.sigmoid(t), g.scale(t, 2.0f));
  Executable exe(std::move(g), {y, u});
  exe.bind(x, xt);
  exe.run();
  EXPECT_EQ(exe.output(y).shape(), (Shape{3, 4}));
  EXPECT_EQ(exe.output(y).to_vector(), apply_fn(xv, relu_f));
  const std::vector<float> got_u = exe.output(u).to_vector();
  for (size_t i = 0; i < xv.size(); ++i) {
    const float tv = std::tanh(2.0f * relu_f(xv[i]));
    EXPECT_NEAR(got_u[i], 1.0f / (1.0f + std::exp(-tv)) * 2.0f * tv, 1e-6) << i;
  }
}

TEST(WindowOpsReshapeAlias, ChainedViewsKeepTheRootAlive) {
  std::mt19937 rng(22);
  const std::vector<float> xv = random_vec(12, rng, -2.0f, 2.0f);
  Tensor xt = Tensor::from_vector(xv, {3, 4});
  Graph g;
  Value x = g.input("x", {3, 4});
  Value a = g.tanh(x);
  Value v2 = g.reshape(g.reshape(a, {12}), {4, 3});  // a view of a view of a
  Value b = g.scale(a, 0.5f);                         // a's last direct consumer
  Value c = g.sigmoid(b);                             // allocated while a is still needed
  Value c2 = g.relu(g.scale(c, -1.0f));               // more allocations (all zeros)
  Value d = g.add(g.mul(v2, g.reshape(c, {4, 3})), g.reshape(c2, {4, 3}));
  Executable exe(std::move(g), {d});
  exe.bind(x, xt);
  exe.run();
  const std::vector<float> got = exe.output(d).to_vector();
  for (size_t i = 0; i < xv.size(); ++i) {
    const float av = std::tanh(xv[i]);
    EXPECT_NEAR(got[i], av / (1.0f + std::exp(-0.5f * av)), 1e-6) << i;
  }
}

TEST(WindowOpsReshapeAlias, ReshapeOfInputConsumedAndRebound) {
  std::mt19937 rng(23);
  const std::vector<float> xv = random_vec(12, rng), xv2 = random_vec(12, rng), bv = random_vec(4, rng);
  Tensor xt = Tensor::from_vector(xv, {2, 6}), xt2 = Tensor::from_vector(xv2, {2, 6});
  Tensor bt = Tensor::from_vector(bv, {4});
  Graph g;
  Value x = g.input("x", {2, 6});
  Value b = g.parameter(bt, "b", false);
  Value xr = g.reshape(x, {3, 4});
  Value y = g.add(xr, b);                 // a reshape of an input, consumed
  Value br = g.reshape(b, {2, 2});        // a reshape of a parameter, as an output
  Value xr_out = g.reshape(x, {12});      // a reshape of an input, as an output
  Executable exe(std::move(g), {y, br, xr_out});
  for (const auto* t : {&xt, &xt2}) {  // the view follows a rebinding of its input
    exe.bind(x, *t);
    exe.run();
    const std::vector<float> src = t->to_vector();
    const std::vector<float> got = exe.output(y).to_vector();
    for (size_t i = 0; i < src.size(); ++i) EXPECT_EQ(got[i], src[i] + bv[i % 4]) << i;
    EXPECT_EQ(exe.output(xr_out).to_vector(), src);
    EXPECT_EQ(exe.output(br).to_vector(), bv);
  }
}

// The fused convolution and batch-norm kernels split their work over the
// thread pool (images, slices of rows with their own partial sums): the
// values and gradients from two threads equal those from one up to the order
// of the partial sums, for a graph large enough to be threaded.
TEST(WindowOpsThreaded, ConvAndBatchNormAgreeOnOneAndTwoThreads) {
  std::mt19937 rng(29);
  const Shape xs{8, 32, 32, 8};
  const Tensor xt = Tensor::from_vector(random_vec(size_t(xs.numel()), rng), xs);
  const Tensor k1 = Tensor::from_vector(random_vec(3 * 3 * 8 * 16, rng, -0.3f, 0.3f), {3, 3, 8, 16});
  const Tensor k2 = Tensor::from_vector(random_vec(3 * 3 * 16 * 8, rng, -0.3f, 0.3f), {3, 3, 16, 8});
  const Tensor wt = Tensor::from_vector(random_vec(8 * 16 * 16 * 8, rng), {8, 16, 16, 8});
  auto run = [&](int threads) {
    set_num_threads(threads);
    Graph g;
    Value x = g.parameter(xt.clone(), "x", true);
    Value ka = g.parameter(k1.clone(), "k1", true);
    Value kb = g.parameter(k2.clone(), "k2", true);
    Value gamma = g.parameter(Tensor::full({16}, 1.5f), "gamma", true);
    Value beta = g.parameter(Tensor::full({16}, 0.25f), "beta", true);
    OpAttrs c1, c2, bn;
    c1.window = window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1);
    c2.window = window(3, 3, 2, 2, 1, 1, 0, 0, 1, 1);
    bn.eps = 1e-3f;
    bn.own_stats = true;
    Value h = g.apply(OpKind::Conv2D, {x, ka}, c1);
    h = g.relu(g.apply(OpKind::BatchNorm, {h, g.apply(OpKind::BatchNormStats, {h}), gamma, beta}, bn));
    Value y = g.apply(OpKind::Conv2D, {h, kb}, c2);
    Value w = g.input("w", wt.shape());
    Value loss = g.sum(g.mul(y, w));
    std::vector<Value> outs{loss};
    const std::vector<Value> wrt{x, ka, kb, gamma, beta};
    for (Value v : g.gradients(loss, wrt)) outs.push_back(v);
    Executable exe(std::move(g), outs);
    exe.bind(w, wt);
    exe.run();
    std::vector<std::vector<float>> got;
    for (Value v : outs) got.push_back(exe.output(v).to_vector());
    return got;
  };
  const int saved = num_threads();
  const auto one = run(1), two = run(2);
  set_num_threads(saved);
  ASSERT_EQ(one.size(), two.size());
  for (size_t i = 0; i < one.size(); ++i) {
    ASSERT_EQ(one[i].size(), two[i].size());
    double scale = 0;
    for (float v : one[i]) scale = std::max(scale, double(std::fabs(v)));
    ASSERT_GT(scale, 0.0) << "output " << i;
    for (size_t j = 0; j < one[i].size(); ++j)
      ASSERT_NEAR(one[i][j], two[i][j], 1e-4 * scale) << "output " << i << " element " << j;
  }
}

}  // namespace
