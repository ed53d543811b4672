// The conv family's Vulkan kernels (Conv2D, Conv2DBackwardInput,
// Conv2DBackwardFilter) against the CPU's. Tolerance: 1e-5 relative plus
// 1e-6 * K * max|a| * max|b| absolute (finite values), K the length of each
// output's sum and a, b its two factors: kh kw C and x, kernel for Conv2D;
// kh kw F and g, kernel for the input gradient; B Ho Wo and x, g for the
// filter gradient. The Vulkan kernel sums in order in one fma chain, the
// CPU in blocks and vectors of its own (or by Winograd's transforms for
// 3x3 kernels of >= 16 channels and filters), so the two round differently
// by a few ulps of the sum of the terms' magnitudes. The bias, addend and
// ReLU or mask come after the sum on both sides.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

#include "vulkan_support.h"

using namespace tensorgrad;
using test_support::OpCase;

namespace {

// Runs `body` with the GPU's tilings of conv.comp, then with the CPU
// implementations' (TENSORGRAD_VULKAN_MATMUL_TILING, as for MatMul), so that
// both sets are tried on lavapipe as on a GPU.
template <class Body>
void for_each_tiling(const Body& body) {
  for (const char* kind : {"gpu", "cpu"}) {
    SCOPED_TRACE(std::string("tilings of ") + kind);
    setenv("TENSORGRAD_VULKAN_MATMUL_TILING", kind, 1);
    body();
  }
  unsetenv("TENSORGRAD_VULKAN_MATMUL_TILING");
}

double max_abs_finite(const Tensor& t) {
  double m = 0;
  for (double v : test_support::values(t))
    if (std::isfinite(v)) m = std::max(m, std::abs(v));
  return m;
}

double product_atol(const Tensor& a, const Tensor& b, int64_t k) {
  return 1e-6 * double(std::max<int64_t>(k, 1)) * max_abs_finite(a) * max_abs_finite(b);
}

struct ConvShape {
  int64_t b, h, w, c, f, kh, kw, stride;
  bool same;          // "same" padding (TensorFlow's: the odd pixel at the bottom and right), else "valid"
  int64_t dilation = 1;
  int64_t groups = 1;  // Window2D::groups: the kernel is {kh, kw, c / groups, f}
  std::string str() const {
    return "{" + std::to_string(b) + "," + std::to_string(h) + "," + std::to_string(w) + "," + std::to_string(c) +
           "} * " + std::to_string(kh) + "x" + std::to_string(kw) + "x" + std::to_string(f) + " stride " +
           std::to_string(stride) + (same ? " same" : " valid") + " dilation " + std::to_string(dilation) +
           " groups " + std::to_string(groups);
  }
};

// One pixel and one channel; 1x1 kernels (stride 1 and 2); 3x3 and 5x3 at
// stride 1 and 2 in both paddings; odd channels and filters (C = 3, F = 5);
// one image and three; a dilated window; 3x3 with >= 16 channels (the CPU's
// Winograd path); sizes off the tiles (F = 33, 130 output pixels).
const std::vector<ConvShape> kShapes{
    {1, 1, 1, 1, 1, 1, 1, 1, false},   {2, 5, 7, 3, 5, 1, 1, 1, false},  {1, 6, 5, 4, 6, 1, 1, 2, true},
    {3, 9, 7, 3, 5, 3, 3, 1, true},    {3, 9, 7, 3, 5, 3, 3, 1, false},  {1, 8, 9, 5, 3, 5, 3, 2, true},
    {3, 11, 10, 3, 5, 3, 3, 2, false}, {1, 10, 13, 3, 5, 3, 3, 2, true}, {2, 9, 9, 3, 4, 3, 3, 1, true, 2},
    {2, 7, 6, 16, 17, 3, 3, 1, true},  {2, 13, 10, 7, 33, 5, 3, 1, false}, {1, 4, 3, 2, 2, 3, 5, 1, true},
};

Window2D window_of(const ConvShape& s) {
  Window2D w;
  w.kh = s.kh;
  w.kw = s.kw;
  w.sh = w.sw = s.stride;
  w.dh = w.dw = s.dilation;
  w.groups = s.groups;
  if (s.same) {
    const int64_t span_h = s.dilation * (s.kh - 1) + 1, span_w = s.dilation * (s.kw - 1) + 1;
    const int64_t oh = (s.h + s.stride - 1) / s.stride, ow = (s.w + s.stride - 1) / s.stride;
    const int64_t ph = std::max<int64_t>((oh - 1) * s.stride + span_h - s.h, 0);
    const int64_t pw = std::max<int64_t>((ow - 1) * s.stride + span_w - s.w, 0);
    w.pad_top = ph / 2;
    w.pad_bottom = ph - ph / 2;
    w.pad_left = pw / 2;
    w.pad_right = pw - pw / 2;
  }
  return w;
}

Shape x_shape(const ConvShape& s) { return {s.b, s.h, s.w, s.c}; }
Shape kernel_shape(const ConvShape& s) { return {s.kh, s.kw, s.c / s.groups, s.f}; }
Shape g_shape(const ConvShape& s) {
  const Window2D w = window_of(s);
  return {s.b, w.out_h(s.h), w.out_w(s.w), s.f};
}

constexpr float kInf = std::numeric_limits<float>::infinity();

// NaN, +inf and -inf at three places of t (the shapes' first, middle and last elements).
Tensor with_specials(Tensor t) {
  float* p = t.data<float>();
  const int64_t n = t.numel();
  p[0] = NAN;
  if (n > 2) p[n / 2] = kInf;
  if (n > 1) p[n - 1] = -kInf;
  return t;
}

// c on both sides; with specials, the CPU's result must hold a NaN and an infinity (so that the case
// tests them).
void expect_case(const std::shared_ptr<const Backend>& vk, const OpCase& c, double atol, bool specials) {
  test_support::expect_same_as_cpu(c, vk, 1e-5, atol);
  if (!specials) return;
  const auto want = test_support::run_op(c, cpu_backend()).output;
  EXPECT_TRUE(std::any_of(want.begin(), want.end(), [](double v) { return std::isnan(v); }));
  EXPECT_TRUE(std::any_of(want.begin(), want.end(), [](double v) { return std::isinf(v); }));
}

void expect_forward(const std::shared_ptr<const Backend>& vk, const ConvShape& s, bool bias, bool relu,
                    uint32_t& seed, bool specials = false) {
  OpCase c;
  c.op = OpKind::Conv2D;
  c.attrs.window = window_of(s);
  if (relu) c.attrs.flags = kReluOutput;
  Tensor x = test_support::random_tensor(x_shape(s), seed++);
  if (specials) x = with_specials(x);
  const Tensor k = test_support::random_tensor(kernel_shape(s), seed++, 0.5f);
  c.inputs = {x, k};
  if (bias) c.inputs.push_back(test_support::random_tensor({s.f}, seed++));
  SCOPED_TRACE("conv2d " + s.str() + (bias ? " bias" : "") + (relu ? " relu" : ""));
  expect_case(vk, c, product_atol(x, k, s.kh * s.kw * s.c), specials);
}

// form & 1: an addend; form & 2: masked by a ReLU output y (NaN in y at one place).
void expect_input_grad(const std::shared_ptr<const Backend>& vk, const ConvShape& s, int form, uint32_t& seed,
                       bool specials = false) {
  OpCase c;
  c.op = OpKind::Conv2DBackwardInput;
  c.attrs.window = window_of(s);
  c.attrs.shape = x_shape(s);
  Tensor g = test_support::random_tensor(g_shape(s), seed++);
  if (specials) g = with_specials(g);
  const Tensor k = test_support::random_tensor(kernel_shape(s), seed++, 0.5f);
  c.inputs = {g, k};
  if (form & 1) c.inputs.push_back(test_support::random_tensor(x_shape(s), seed++));
  if (form & 2) {
    c.attrs.flags = kMaskNonPositive;
    Tensor y = test_support::random_tensor(x_shape(s), seed++);
    y.data<float>()[y.numel() / 3] = NAN;
    c.inputs.push_back(y);
  }
  SCOPED_TRACE("conv2d_backward_input " + s.str() + " form " + std::to_string(form));
  expect_case(vk, c, product_atol(g, k, s.kh * s.kw * s.f), specials);
}

void expect_filter_grad(const std::shared_ptr<const Backend>& vk, const ConvShape& s, uint32_t& seed,
                        bool specials = false) {
  OpCase c;
  c.op = OpKind::Conv2DBackwardFilter;
  c.attrs.window = window_of(s);
  c.attrs.shape = kernel_shape(s);
  Tensor x = test_support::random_tensor(x_shape(s), seed++);
  Tensor g = test_support::random_tensor(g_shape(s), seed++);
  if (specials) g = with_specials(g);
  c.inputs = {x, g};
  SCOPED_TRACE("conv2d_backward_filter " + s.str());
  const Shape gs = g_shape(s);
  expect_case(vk, c, product_atol(x, g, gs[0] * gs[1] * gs[2]), specials);
}

}  // namespace

TEST(VulkanConv, Forward) {
  TG_VULKAN_OR_SKIP(vk);
  for_each_tiling([&] {
    uint32_t seed = 1;
    for (const ConvShape& s : kShapes)
      for (int form = 0; form < 4; ++form) expect_forward(vk, s, form & 1, form & 2, seed);
  });
}

TEST(VulkanConv, BackwardInput) {
  TG_VULKAN_OR_SKIP(vk);
  for_each_tiling([&] {
    uint32_t seed = 100;
    for (const ConvShape& s : kShapes)
      for (int form = 0; form < 4; ++form) expect_input_grad(vk, s, form, seed);
  });
}

TEST(VulkanConv, BackwardFilter) {
  TG_VULKAN_OR_SKIP(vk);
  for_each_tiling([&] {
    uint32_t seed = 200;
    for (const ConvShape& s : kShapes) expect_filter_grad(vk, s, seed);
  });
}

// NaN and infinities in the image (forward) or the gradient (backward): the
// same places become NaN or infinite on both sides. Shapes off the CPU's
// Winograd path, whose transforms spread a NaN over a whole tile.
TEST(VulkanConv, NanAndInfinity) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 300;
  for (const ConvShape& s : {kShapes[1], kShapes[3], kShapes[5], kShapes[6], kShapes[8]}) {
    expect_forward(vk, s, true, false, seed, true);
    expect_forward(vk, s, false, true, seed, true);
    expect_input_grad(vk, s, 0, seed, true);
    expect_input_grad(vk, s, 2, seed, true);
    expect_filter_grad(vk, s, seed, true);
  }
}

// The main job's CNN layer {32, 28, 28, 32} * 3x3x64, same padding, and a
// larger batch of images than the tiles cover in one pass.
TEST(VulkanConv, NetworkLayer) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 400;
  const ConvShape s{32, 28, 28, 32, 64, 3, 3, 1, true};
  expect_forward(vk, s, true, true, seed);
  expect_input_grad(vk, s, 2, seed);
  expect_filter_grad(vk, s, seed);
}

// Grouped convolutions (shaders/grouped_conv.comp): groups 2 and 3, depthwise
// with depth multipliers 1 and 2, strided, dilated, both paddings, every
// fused form; the sums are kh kw C/groups (forward), kh kw F/groups (input
// gradient) long.
TEST(VulkanConv, Grouped) {
  TG_VULKAN_OR_SKIP(vk);
  const std::vector<ConvShape> shapes{
      {2, 6, 7, 4, 6, 3, 3, 1, true, 1, 2},  {1, 7, 6, 6, 9, 3, 3, 2, false, 1, 3},
      {2, 7, 7, 5, 5, 3, 3, 1, true, 1, 5},  {2, 9, 8, 3, 6, 3, 3, 2, true, 1, 3},
      {1, 9, 9, 4, 8, 3, 3, 1, false, 2, 4}, {3, 13, 11, 32, 32, 3, 3, 2, true, 1, 32},
  };
  uint32_t seed = 500;
  for (const ConvShape& s : shapes) {
    for (int form = 0; form < 4; ++form) expect_forward(vk, s, form & 1, form & 2, seed);
    for (int form = 0; form < 4; ++form) expect_input_grad(vk, s, form, seed);
    expect_filter_grad(vk, s, seed);
  }
}

// A Vulkan run repeated gives the same bits (fixed-order sums, no atomics).
TEST(VulkanConv, Deterministic) {
  TG_VULKAN_OR_SKIP(vk);
  const ConvShape s{3, 11, 10, 7, 9, 3, 3, 1, true};
  OpCase c;
  c.op = OpKind::Conv2DBackwardFilter;
  c.attrs.window = window_of(s);
  c.attrs.shape = kernel_shape(s);
  c.inputs = {test_support::random_tensor(x_shape(s), 1), test_support::random_tensor(g_shape(s), 2)};
  const auto first = test_support::run_op(c, vk).output;
  EXPECT_EQ(test_support::run_op(c, vk).output, first);
}

// The batch statistics beside the output come from a fusion pass the Vulkan
// backend does not run; the kernel refuses the form rather than skip them.
TEST(VulkanConv, RefusesBatchStatsOutput) {
  TG_VULKAN_OR_SKIP(vk);
  const ConvShape s{1, 5, 5, 2, 3, 3, 3, 1, true};
  OpCase c;
  c.op = OpKind::Conv2D;
  c.attrs.window = window_of(s);
  c.attrs.flags = kBatchStatsOutput;
  c.inputs = {test_support::random_tensor(x_shape(s), 1), test_support::random_tensor(kernel_shape(s), 2)};
  try {
    test_support::run_op(c, vk);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Vulkan conv2d: the kBatchStatsOutput"), std::string::npos) << e.what();
  }
}

// The time of each op at the CNN's layer on Vulkan and on the CPU, and of a
// MatMul of the forward's GEMM size (not a check: run with
// --gtest_also_run_disabled_tests to see it). A run includes its inputs' upload.
TEST(VulkanConv, DISABLED_Timing) {
  TG_VULKAN_OR_SKIP(vk);
  const ConvShape s{32, 28, 28, 32, 64, 3, 3, 1, true};
  const Window2D w = window_of(s);
  const Tensor x = test_support::random_tensor(x_shape(s), 1), k = test_support::random_tensor(kernel_shape(s), 2);
  const Tensor g = test_support::random_tensor(g_shape(s), 3);
  struct Case {
    const char* name;
    OpKind op;
    std::vector<Tensor> in;
    Shape shape;
  };
  for (const Case& t : {Case{"conv2d", OpKind::Conv2D, {x, k}, {}},
                        Case{"conv2d_backward_input", OpKind::Conv2DBackwardInput, {g, k}, x_shape(s)},
                        Case{"conv2d_backward_filter", OpKind::Conv2DBackwardFilter, {x, g}, kernel_shape(s)},
                        Case{"matmul of the forward's size", OpKind::MatMul,
                             {test_support::random_tensor({32 * 28 * 28, 288}, 4), test_support::random_tensor({288, 64}, 5)},
                             {}}}) {
    Graph graph;
    std::vector<Value> ins;
    for (size_t i = 0; i < t.in.size(); ++i)
      ins.push_back(graph.input("in" + std::to_string(i), t.in[i].shape(), t.in[i].dtype()));
    OpAttrs a;
    a.window = w;
    a.shape = t.shape;
    const Value out = graph.apply(t.op, ins, a);
    for (const auto& backend : {vk, cpu_backend()}) {
      Executable exe(Graph(graph), {out}, BatchRule{}, backend, FusionOptions::none());
      for (size_t i = 0; i < t.in.size(); ++i) exe.bind(ins[i], t.in[i]);
      exe.run();
      constexpr int kRuns = 5;
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < kRuns; ++i) exe.run();
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      std::printf("%s on %s: %.1f ms per run\n", t.name, backend == vk ? "vulkan" : "the CPU", ms / kRuns);
    }
  }
}
