// The 3x3 convolutions by Winograd's F(4x4, 3x3) and F(2x2, 3x3) (kernels/winograd.cpp,
// set_winograd_convolutions): Conv2D (with and without its bias and folded
// ReLU), Conv2DBackwardInput (with and without the folded addend) and
// Conv2DBackwardFilter against
// direct sums in double, within a bound proportional to the sum of the
// terms' magnitudes; bit-equal at 1 and 2 threads; different in some bit
// from the direct kernels (so the Winograd path is what ran); and the shapes
// it does not take bit-equal with the switch on and off.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tensorgrad/backend/backend.h"
#include "tensorgrad/backend/executable.h"
#include "tensorgrad/core/threads.h"
#include "tensorgrad/graph/graph.h"
#include "test_support.h"

using namespace tensorgrad;
using test_support::for_each_tap;
using test_support::uniform;
using test_support::window;
using test_support::window_str;
using test_support::WinogradGuard;

namespace {

struct Case {
  Shape x;
  int64_t f;
  Window2D w;
  bool bias_relu = false;  // Conv2D with a bias and kReluOutput
  bool addend = false;     // Conv2DBackwardInput with a third input
};

// A case's operands, uniform: the image, the kernel, the bias, the output
// gradient and the addend.
struct Inputs {
  Tensor x, k, b, g, a;
};

Inputs random_inputs(const Case& c, unsigned seed) {
  std::mt19937 rng(seed);
  const int64_t Ho = c.w.out_h(c.x[1]), Wo = c.w.out_w(c.x[2]), C = c.x[3];
  Inputs in;
  in.x = uniform(c.x, rng, -1.0f, 1.0f);
  in.k = uniform({c.w.kh, c.w.kw, C, c.f}, rng, -0.5f, 0.5f);
  in.b = uniform({c.f}, rng, -0.5f, 0.5f);
  in.g = uniform({c.x[0], Ho, Wo, c.f}, rng, -1.0f, 1.0f);
  in.a = uniform(c.x, rng, -1.0f, 1.0f);
  return in;
}

// The outputs of Conv2D, Conv2DBackwardInput and Conv2DBackwardFilter for
// one case, with the switch and thread count given.
struct Outputs {
  std::vector<float> y, dx, dk;
};

Outputs run_case(const Case& k, const Tensor& tx, const Tensor& tk, const Tensor& tb, const Tensor& tg,
                 const Tensor& ta, bool winograd, int threads) {
  const WinogradGuard guard;
  set_winograd_convolutions(winograd);
  const int saved_threads = num_threads();
  set_num_threads(threads);
  Graph g;
  const Value x = g.input("x", tx.shape()), kern = g.input("K", tk.shape()), gy = g.input("g", tg.shape());
  const Value b = k.bias_relu ? g.input("b", tb.shape()) : Value{}, add = k.addend ? g.input("a", ta.shape()) : Value{};
  OpAttrs at;
  at.window = k.w;
  if (k.bias_relu) at.flags = kReluOutput;
  const Value out = k.bias_relu ? g.apply(OpKind::Conv2D, {x, kern, b}, at) : g.apply(OpKind::Conv2D, {x, kern}, at);
  OpAttrs back;
  back.window = k.w;
  back.shape = k.x;
  const Value din = k.addend ? g.apply(OpKind::Conv2DBackwardInput, {gy, kern, add}, back)
                             : g.apply(OpKind::Conv2DBackwardInput, {gy, kern}, back);
  OpAttrs filt;
  filt.window = k.w;
  filt.shape = tk.shape();
  const Value dkern = g.apply(OpKind::Conv2DBackwardFilter, {x, gy}, filt);
  Executable exe(std::move(g), {out, din, dkern});
  exe.bind(x, tx);
  exe.bind(kern, tk);
  exe.bind(gy, tg);
  if (k.bias_relu) exe.bind(b, tb);
  if (k.addend) exe.bind(add, ta);
  exe.run();
  Outputs o{exe.output(out).to_vector(), exe.output(din).to_vector(), exe.output(dkern).to_vector()};
  set_num_threads(saved_threads);
  return o;
}

// Whether got is within the bound of exact: 256 float32 epsilons of the
// sum of the terms' magnitudes (the transforms' roundings reach about 100
// near an image's edges on this data; a wrong coefficient is off by a
// whole term).
void expect_near_sums(const std::vector<float>& got, const std::vector<double>& exact,
                      const std::vector<double>& magnitude, const char* what) {
  ASSERT_EQ(got.size(), exact.size()) << what;
  const double eps = std::numeric_limits<float>::epsilon();
  for (size_t i = 0; i < exact.size(); ++i)
    ASSERT_NEAR(got[i], exact[i], 256 * eps * magnitude[i] + 1e-30) << what << " " << i;
}

// The direct sums in double of a case's three results, and the sums of
// their terms' magnitudes (the bound's scale).
struct DirectSums {
  std::vector<double> y, y_mag, dx, dx_mag, dk, dk_mag;
};

DirectSums direct_sums(const Case& k, const Tensor& tx, const Tensor& tk, const Tensor& tb, const Tensor& tg,
                       const Tensor& ta) {
  const int64_t C = k.x[3], F = k.f;
  const float *px = tx.data<float>(), *pk = tk.data<float>(), *pb = tb.data<float>(), *pg = tg.data<float>(),
              *pa = ta.data<float>();
  const size_t ny = size_t(tg.numel()), nx = size_t(tx.numel()), nk = size_t(tk.numel());
  DirectSums d{std::vector<double>(ny), std::vector<double>(ny), std::vector<double>(nx),
               std::vector<double>(nx), std::vector<double>(nk), std::vector<double>(nk)};
  for_each_tap(k.x, k.w, [&](int64_t tap, int64_t in, int64_t out) {
    for (int64_t c = 0; c < C; ++c)
      for (int64_t j = 0; j < F; ++j) {
        const double kv = pk[(tap * C + c) * F + j], xv = px[in * C + c], gv = pg[out * F + j];
        d.y[size_t(out * F + j)] += xv * kv;
        d.y_mag[size_t(out * F + j)] += std::abs(xv * kv);
        d.dx[size_t(in * C + c)] += gv * kv;
        d.dx_mag[size_t(in * C + c)] += std::abs(gv * kv);
        d.dk[size_t((tap * C + c) * F + j)] += xv * gv;
        d.dk_mag[size_t((tap * C + c) * F + j)] += std::abs(xv * gv);
      }
  });
  if (k.bias_relu)
    for (size_t i = 0; i < ny; ++i) {
      d.y[i] = std::max(0.0, d.y[i] + pb[i % size_t(F)]);
      d.y_mag[i] += std::abs(double(pb[i % size_t(F)]));
    }
  if (k.addend)
    for (size_t i = 0; i < nx; ++i) {
      d.dx[i] += pa[i];
      d.dx_mag[i] += std::abs(double(pa[i]));
    }
  return d;
}

TEST(Winograd, ConvolutionAndInputGradientMatchDirectSums) {
  // F(4x4) for images of 8 or more outputs a side, F(2x2) below: each with
  // edge tiles clipped, channels past whole registers, asymmetric pads, the
  // bias and ReLU, the addend, and more tiles than one chunk (128).
  const std::vector<Case> cases = {
      {{2, 8, 10, 16}, 16, window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1)},               // F(4x4), clipped columns
      {{1, 11, 9, 16}, 32, window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1), true, true},   // F(4x4), clipped both ways
      {{2, 10, 12, 17}, 24, window(3, 3, 1, 1, 1, 1, 0, 0, 0, 0)},              // F(4x4), valid, tail channels
      {{1, 9, 8, 16}, 16, window(3, 3, 1, 1, 1, 1, 2, 0, 1, 2), false, true},   // F(4x4), asymmetric pads
      {{1, 48, 50, 16}, 16, window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1), true},        // F(4x4), 156 tiles
      {{1, 7, 9, 16}, 32, window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1), true, true},    // F(2x2), clipped both ways
      {{2, 6, 5, 17}, 24, window(3, 3, 1, 1, 1, 1, 0, 0, 0, 0)},                // F(2x2), valid, tail channels
      {{1, 5, 6, 16}, 16, window(3, 3, 1, 1, 1, 1, 2, 0, 1, 2), false, true},   // F(2x2), asymmetric pads
      {{1, 5, 520, 16}, 16, window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1)},              // F(2x2), 780 tiles
      // The filter gradient by F(4x4) (8 or more outputs a side, the cases
      // above too): clipped tiles, tail channels and filters, asymmetric pads, and slices of two
      // images whose tiles (100 each) fill a chunk of 128 across them.
      {{2, 16, 18, 16}, 16, window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1)},
      {{1, 18, 19, 17}, 24, window(3, 3, 1, 1, 1, 1, 0, 0, 0, 0)},
      {{1, 17, 16, 16}, 16, window(3, 3, 1, 1, 1, 1, 2, 0, 1, 2)},
      {{17, 40, 40, 16}, 16, window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1)},
  };

  for (const Case& k : cases) {
    SCOPED_TRACE(k.x.str() + " -> " + std::to_string(k.f) + " " + window_str(k.w) + (k.bias_relu ? " bias relu" : "") +
                 (k.addend ? " addend" : ""));
    const int64_t Ho = k.w.out_h(k.x[1]), Wo = k.w.out_w(k.x[2]);
    const Inputs in = random_inputs(k, 1377);
    const Tensor &tx = in.x, &tk = in.k, &tb = in.b, &tg = in.g, &ta = in.a;
    const DirectSums d = direct_sums(k, tx, tk, tb, tg, ta);
    const Outputs one = run_case(k, tx, tk, tb, tg, ta, true, 1), two = run_case(k, tx, tk, tb, tg, ta, true, 2),
                  direct = run_case(k, tx, tk, tb, tg, ta, false, 2);
    expect_near_sums(one.y, d.y, d.y_mag, "y");
    expect_near_sums(one.dx, d.dx, d.dx_mag, "dx");
    expect_near_sums(one.dk, d.dk, d.dk_mag, "dk");
    expect_near_sums(direct.y, d.y, d.y_mag, "direct y");
    EXPECT_EQ(one.y, two.y) << "the convolution depends on the thread count";
    EXPECT_EQ(one.dx, two.dx) << "the input gradient depends on the thread count";
    EXPECT_EQ(one.dk, two.dk) << "the filter gradient depends on the thread count";
    EXPECT_NE(one.y, direct.y) << "the convolution gave the direct kernel's bits: Winograd did not run";
    EXPECT_NE(one.dx, direct.dx) << "the input gradient gave the direct kernel's bits: Winograd did not run";
    if (Ho >= 8 && Wo >= 8)  // the filter gradient by F(4x4); smaller images keep the direct kernel
      EXPECT_NE(one.dk, direct.dk) << "the filter gradient gave the direct kernel's bits: Winograd did not run";
    else
      EXPECT_EQ(one.dk, direct.dk) << "a filter gradient of under 8 outputs a side did not run direct";
  }
}

// Shapes outside the Winograd kernels' reach run the direct kernels with the switch
// on: strides, dilation, pads over 2, other kernel sizes, fewer than 16
// channels or filters.
TEST(Winograd, OtherShapesRunDirect) {
  const std::vector<Case> cases = {
      {{1, 8, 8, 16}, 16, window(3, 3, 2, 2, 1, 1, 1, 1, 1, 1)}, {{1, 9, 9, 16}, 16, window(3, 3, 1, 1, 2, 2, 2, 2, 2, 2)},
      {{1, 8, 8, 16}, 16, window(3, 3, 1, 1, 1, 1, 3, 3, 3, 3)}, {{1, 8, 8, 16}, 16, window(5, 5, 1, 1, 1, 1, 2, 2, 2, 2)},
      {{1, 8, 8, 8}, 16, window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1)},  {{1, 8, 8, 16}, 8, window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1)},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.x.str() + " -> " + std::to_string(k.f) + " " + window_str(k.w));
    const Inputs in = random_inputs(k, 1378);
    const Tensor &tx = in.x, &tk = in.k, &tb = in.b, &tg = in.g, &ta = in.a;
    const Outputs on = run_case(k, tx, tk, tb, tg, ta, true, 2), off = run_case(k, tx, tk, tb, tg, ta, false, 2);
    EXPECT_EQ(on.y, off.y);
    EXPECT_EQ(on.dx, off.dx);
    EXPECT_EQ(on.dk, off.dk);
  }
}


// Images smaller than a tile (one or two pixels a side, the largest pads on
// one side only) and an input gradient of an image with no rows (the
// forward's output still has two: pads of 2): the same direct sums, and
// nothing read or written out of bounds (the sanitizer runs cover it).
TEST(Winograd, TinyAndEmptyImages) {
  const std::vector<Case> cases = {
      {{2, 2, 1, 16}, 16, window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1), true, true},
      {{1, 1, 3, 16}, 16, window(3, 3, 1, 1, 1, 1, 0, 0, 2, 2), false, true},
      {{1, 2, 2, 16}, 24, window(3, 3, 1, 1, 1, 1, 2, 2, 0, 0)},
      {{1, 0, 4, 16}, 16, window(3, 3, 1, 1, 1, 1, 2, 2, 2, 2)},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.x.str() + " -> " + std::to_string(k.f) + " " + window_str(k.w));
    const Inputs in = random_inputs(k, 1379);
    const Tensor &tx = in.x, &tk = in.k, &tb = in.b, &tg = in.g, &ta = in.a;
    const DirectSums d = direct_sums(k, tx, tk, tb, tg, ta);
    const Outputs one = run_case(k, tx, tk, tb, tg, ta, true, 1), two = run_case(k, tx, tk, tb, tg, ta, true, 2);
    expect_near_sums(one.y, d.y, d.y_mag, "y");
    expect_near_sums(one.dx, d.dx, d.dx_mag, "dx");
    EXPECT_EQ(one.y, two.y);
    EXPECT_EQ(one.dx, two.dx);
  }
}
}  // namespace
