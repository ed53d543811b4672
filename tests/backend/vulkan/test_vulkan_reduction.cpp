// The reduction Vulkan kernels against the CPU's. Tolerances (the orders of
// addition differ from the CPU's, |x| <= m, n elements per output):
// - Sum, Mean: the CPU sums in double, the shader in float with Neumaier's
//   compensation: 1e-6 relative plus 1e-6 m absolute.
// - SumTo, SumAxis, MeanAxis, MeanLastAxis: the CPU sums in float in index
//   order (its own error up to about n 6e-8 m): 1e-5 relative plus n 1e-7 m.
// - MaxAxis, MaxAxisBackward, BroadcastTo: exact (they pick or copy).
// Every kernel also gives the same bits when run twice.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "vulkan_support.h"

using namespace tensorgrad;
using test_support::OpCase;

namespace {

double max_abs(const Tensor& x) {
  double m = 0;
  for (int64_t i = 0; i < x.numel(); ++i)
    if (std::isfinite(x.data<float>()[i])) m = std::max(m, double(std::fabs(x.data<float>()[i])));
  return m;
}

// Runs c twice on Vulkan and expects the same bits.
void expect_deterministic(const OpCase& c, const std::shared_ptr<const Backend>& vk) {
  const std::vector<double> a = test_support::run_op(c, vk).output, b = test_support::run_op(c, vk).output;
  ASSERT_EQ(a.size(), b.size());
  EXPECT_TRUE(a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0)
      << op_info(c.op).name << ": two runs differ";
}

// A sum over `n` elements per output: the CPU's float error bound (header).
void expect_sum(const OpCase& c, const std::shared_ptr<const Backend>& vk, int64_t n) {
  SCOPED_TRACE(std::string(op_info(c.op).name) + " of " + c.inputs[0].shape().str());
  test_support::expect_same_as_cpu(c, vk, 1e-5, double(std::max<int64_t>(n, 1)) * 1e-7 * max_abs(c.inputs[0]));
}

OpCase one(OpKind op, const Tensor& x) {
  OpCase c;
  c.op = op;
  c.inputs = {x};
  return c;
}

OpCase along(OpKind op, const Tensor& x, int axis, bool keepdim) {
  OpCase c = one(op, x);
  c.attrs.axis = axis;
  c.attrs.keepdim = keepdim;
  return c;
}

// Every shape x broadcasts from: rank 0 .. x's, each axis x's or 1.
std::vector<Shape> broadcast_sources(const Shape& x) {
  std::vector<Shape> out;
  for (int r = 0; r <= x.rank(); ++r)
    for (int mask = 0; mask < (1 << r); ++mask) {
      int64_t dims[Shape::kMaxRank];
      for (int d = 0; d < r; ++d) dims[d] = mask >> d & 1 ? x[x.rank() - r + d] : 1;
      out.push_back(Shape(std::span<const int64_t>(dims, size_t(r))));
    }
  return out;
}

// Values with many ties, signed zeros, a NaN and infinities where asked:
// the first maximum matters.
Tensor tied(const Shape& s, uint32_t seed, bool specials) {
  Tensor x = test_support::random_tensor(s, seed, 2.0f);
  float* p = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) p[i] = std::round(p[i]);
  for (int64_t i = 0; i < x.numel(); i += 7) p[i] = (i / 7) % 2 ? -0.0f : 0.0f;
  if (specials && x.numel() > 5) {
    p[x.numel() / 2] = NAN;
    p[x.numel() / 3] = INFINITY;
    p[x.numel() - 1] = -INFINITY;
    p[1] = NAN;
  }
  return x;
}

const std::vector<Shape> kAxisShapes{{1},        {7},          {1, 300},  {300, 1},  {33, 65},
                                     {2, 3, 31}, {3, 4, 5, 6}, {3, 5000}, {5000, 3}, {2, 1, 4000}};

}  // namespace

TEST(VulkanReduction, SumAndMean) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 1;
  for (const Shape& s : std::vector<Shape>{{}, {1}, {7}, {1, 257}, {257, 1}, {33, 65}, {2, 3, 31}, {300000}}) {
    // A mean far from 0 too: cancellation in one, a large sum in the other.
    for (float shift : {0.0f, 3.0f}) {
      Tensor x = test_support::random_tensor(s, seed++);
      for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] += shift;
      for (OpKind op : {OpKind::Sum, OpKind::Mean}) {
        SCOPED_TRACE(std::string(op_info(op).name) + " of " + s.str());
        test_support::expect_same_as_cpu(one(op, x), vk, 1e-6, 1e-6 * max_abs(x));
        expect_deterministic(one(op, x), vk);
      }
    }
  }
}

TEST(VulkanReduction, SumAndMeanSpecials) {
  TG_VULKAN_OR_SKIP(vk);
  for (int64_t n : {int64_t(5), int64_t(300000)}) {
    // inf alone, inf with -inf (NaN), NaN alone, values that overflow float,
    // and ones after 1e8 (each lost to a plain float sum: the compensation's case).
    for (int kind = 0; kind < 5; ++kind) {
      Tensor x = test_support::random_tensor({n}, uint32_t(n + kind));
      float* p = x.data<float>();
      if (kind == 0) p[n / 2] = INFINITY;
      if (kind == 1) p[1] = INFINITY, p[n - 1] = -INFINITY;
      if (kind == 2) p[n - 2] = NAN;
      if (kind == 3) std::fill(p, p + n, 3e38f);
      if (kind == 4) std::fill(p, p + n, 1.0f), p[0] = 1e8f;
      for (OpKind op : {OpKind::Sum, OpKind::Mean}) {
        if (kind == 3 && op == OpKind::Mean) continue;  // the CPU's mean of huge values is finite (double)
        SCOPED_TRACE(std::string(op_info(op).name) + " n " + std::to_string(n) + " case " + std::to_string(kind));
        test_support::expect_same_as_cpu(one(op, x), vk, 1e-6, 1e-6);
      }
    }
  }
}

TEST(VulkanReduction, AxisReductions) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 100;
  for (const Shape& s : kAxisShapes) {
    const Tensor x = test_support::random_tensor(s, seed++);
    for (int axis = 0; axis < s.rank(); ++axis)
      for (bool keepdim : {false, true}) {
        for (OpKind op : {OpKind::SumAxis, OpKind::MeanAxis}) {
          SCOPED_TRACE("axis " + std::to_string(axis) + (keepdim ? " keepdim" : ""));
          expect_sum(along(op, x, axis, keepdim), vk, s[axis]);
          expect_deterministic(along(op, x, axis, keepdim), vk);
        }
      }
    expect_sum(one(OpKind::MeanLastAxis, x), vk, s[-1]);
    expect_deterministic(one(OpKind::MeanLastAxis, x), vk);
  }
}

TEST(VulkanReduction, AxisSumsWithSpecials) {
  TG_VULKAN_OR_SKIP(vk);
  for (const Shape& s : std::vector<Shape>{{4, 9}, {3, 5000}, {5000, 3}}) {
    Tensor x = test_support::random_tensor(s, 7);
    float* p = x.data<float>();
    const int64_t cols = s[1];
    p[0] = INFINITY;         // row 0, column 0: inf
    p[cols + 1] = INFINITY;  // row 1, column 1: inf and -inf
    p[(s[0] - 1) * cols + 1] = -INFINITY;
    p[2 * cols + 2] = NAN;  // row 2, column 2: NaN
    for (int axis = 0; axis < 2; ++axis)
      for (OpKind op : {OpKind::SumAxis, OpKind::MeanAxis}) expect_sum(along(op, x, axis, false), vk, s[axis]);
    expect_sum(one(OpKind::MeanLastAxis, x), vk, s[1]);
  }
}

TEST(VulkanReduction, SumToEveryTarget) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 200;
  for (const Shape& xs : std::vector<Shape>{{2, 3, 4}, {3, 1, 5, 7}, {40, 3, 50}, {30, 4, 40, 8}, {2, 3, 2, 3, 2, 3}}) {
    const Tensor x = test_support::random_tensor(xs, seed++);
    for (const Shape& target : broadcast_sources(xs)) {
      OpCase c = one(OpKind::SumTo, x);
      c.attrs.shape = target;
      SCOPED_TRACE("to " + target.str());
      expect_sum(c, vk, xs.numel() / std::max<int64_t>(target.numel(), 1));
      expect_deterministic(c, vk);
    }
  }
}

// The Dense bias gradient {B, N} -> {N}, the CPU's column-sum path included
// (B N >= 2^16, N <= 256), and one-row / one-column cases.
TEST(VulkanReduction, SumToBiasGradient) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 300;
  for (const Shape& xs :
       std::vector<Shape>{{1, 10}, {10, 1}, {32, 128}, {4096, 33}, {100000, 10}, {300, 1000}, {8, 16, 64}}) {
    Tensor x = test_support::random_tensor(xs, seed++);
    x.data<float>()[3] = NAN;
    OpCase c = one(OpKind::SumTo, x);
    c.attrs.shape = Shape{xs[-1]};
    expect_sum(c, vk, xs.numel() / xs[-1]);
    expect_deterministic(c, vk);
  }
}

TEST(VulkanReduction, BroadcastTo) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 400;
  std::vector<std::pair<Shape, Shape>> cases{
      {{1}, {5, 7}},          {{}, {3}}, {{3, 1, 5}, {2, 3, 4, 5}}, {{7}, {4000, 7}}, {{4000, 1}, {4000, 7}},
      {{1, 257}, {1000, 257}}};
  for (const Shape& target : std::vector<Shape>{{2, 3, 4}, {3, 1, 5, 7}, {2, 3, 2, 3, 2, 3}})
    for (const Shape& s : broadcast_sources(target)) cases.push_back({s, target});
  for (const auto& [from, to] : cases) {
    Tensor x = test_support::random_tensor(from, seed++);
    x.data<float>()[0] = NAN;
    OpCase c = one(OpKind::BroadcastTo, x);
    c.attrs.shape = to;
    SCOPED_TRACE(from.str() + " to " + to.str());
    test_support::expect_same_as_cpu(c, vk, 0, 0);
  }
}

TEST(VulkanReduction, MaxAxisAndBackward) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 500;
  for (const Shape& s : kAxisShapes)
    for (bool specials : {false, true}) {
      const Tensor x = tied(s, seed++, specials);
      for (int axis = 0; axis < s.rank(); ++axis)
        for (bool keepdim : {false, true}) {
          SCOPED_TRACE(s.str() + " axis " + std::to_string(axis) + (keepdim ? " keepdim" : "") +
                       (specials ? " NaN and inf" : ""));
          const OpCase fwd = along(OpKind::MaxAxis, x, axis, keepdim);
          test_support::expect_same_as_cpu(fwd, vk, 0, 0);
          expect_deterministic(fwd, vk);
          Shape gs = s;
          gs.set(axis, 1);
          if (!keepdim) {
            int64_t dims[Shape::kMaxRank];
            int r = 0;
            for (int d = 0; d < s.rank(); ++d)
              if (d != axis) dims[r++] = s[d];
            gs = Shape(std::span<const int64_t>(dims, size_t(r)));
          }
          OpCase bwd = fwd;
          bwd.op = OpKind::MaxAxisBackward;
          bwd.inputs.push_back(test_support::random_tensor(gs, seed++));
          test_support::expect_same_as_cpu(bwd, vk, 0, 0);
          expect_deterministic(bwd, vk);
        }
    }
}

// A slice of NaN only, and one whose maximum is its first or last element.
TEST(VulkanReduction, MaxAxisSlices) {
  TG_VULKAN_OR_SKIP(vk);
  Tensor x = test_support::random_tensor({4, 3000}, 9);
  float* p = x.data<float>();
  std::fill(p, p + 3000, NAN);
  p[3000] = 100.0f;
  p[2 * 3000 + 2999] = 100.0f;
  p[3 * 3000 + 2999] = NAN;
  p[3 * 3000 + 17] = NAN;
  for (OpKind op : {OpKind::MaxAxis, OpKind::MaxAxisBackward}) {
    OpCase c = along(OpKind::MaxAxis, x, 1, true);
    c.op = op;
    if (op == OpKind::MaxAxisBackward) c.inputs.push_back(test_support::random_tensor({4, 1}, 10));
    test_support::expect_same_as_cpu(c, vk, 0, 0);
  }
}

// Empty inputs: sums of nothing are 0; the mean of an empty axis is NaN
// (MeanAxis) or 0 (Mean, MeanLastAxis), as on the CPU.
TEST(VulkanReduction, EmptyInputs) {
  TG_VULKAN_OR_SKIP(vk);
  const Tensor row = Tensor::from_vector(std::vector<float>{}, Shape{3, 0});
  for (OpKind op : {OpKind::Sum, OpKind::Mean, OpKind::MeanLastAxis})
    test_support::expect_same_as_cpu(one(op, row), vk, 0, 0);
  // (Axis 0 would give an empty output, which Executable::output does not return.)
  for (OpKind op : {OpKind::SumAxis, OpKind::MeanAxis})
    test_support::expect_same_as_cpu(along(op, row, 1, false), vk, 0, 0);
  OpCase c = one(OpKind::SumTo, Tensor::from_vector(std::vector<float>{}, Shape{0, 4}));
  c.attrs.shape = Shape{4};
  test_support::expect_same_as_cpu(c, vk, 0, 0);
}
