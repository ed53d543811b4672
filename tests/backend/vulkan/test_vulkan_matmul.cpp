// The matmul family's Vulkan kernels (MatMul, AccumulateGrad) against the
// CPU's. Tolerance: 1e-5 relative plus 1e-6 * K * max|a| * max|b| absolute
// (finite values only): the Vulkan kernel sums k in order in one fma chain,
// the CPU's BLAS in blocks and vectors of its own, so the two round
// differently by up to a few ulps of the sum of the terms' magnitudes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "vulkan_support.h"

using namespace tensorgrad;
using test_support::OpCase;

namespace {

// Runs `body` with the GPU's tilings of matmul.comp, then with the CPU
// implementations' (kernels/matmul.cpp's TENSORGRAD_VULKAN_MATMUL_TILING),
// whatever the device, so that both sets are tried on lavapipe as on a GPU.
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

// The absolute tolerance of a product over k terms of a and b.
double product_atol(const Tensor& a, const Tensor& b, int64_t k) {
  return 1e-6 * double(std::max<int64_t>(k, 1)) * max_abs_finite(a) * max_abs_finite(b);
}

// A stored as the kernel reads it: {rows, cols} of op(A) = {m, k}, transposed when trans.
Shape stored(int64_t rows, int64_t cols, bool trans) { return trans ? Shape{cols, rows} : Shape{rows, cols}; }
Shape stored(int64_t batch, int64_t rows, int64_t cols, bool trans) {
  return trans ? Shape{batch, cols, rows} : Shape{batch, rows, cols};
}

struct Mkn {
  int64_t m, k, n;
};

// One element, one row (M = 1), K = 1, odd sizes, sizes off every tile multiple,
// whole tiles, a narrow C (N = 10) and a few rows by many columns.
const std::vector<Mkn> kShapes{{1, 1, 1},   {1, 7, 5},   {7, 1, 9},    {7, 13, 5},  {65, 33, 129},
                               {64, 64, 64}, {130, 70, 3}, {3, 70, 130}, {50, 100, 10}, {33, 17, 31}};

}  // namespace

TEST(VulkanMatMul, TwoDimensional) {
  TG_VULKAN_OR_SKIP(vk);
  for_each_tiling([&] {
    uint32_t seed = 1;
    for (const Mkn& s : kShapes)
      for (int trans = 0; trans < 4; ++trans)
        for (int form = 0; form < 4; ++form) {  // bias: form & 1, ReLU: form & 2
          OpCase c;
          c.op = OpKind::MatMul;
          c.attrs.trans_a = trans & 1;
          c.attrs.trans_b = trans & 2;
          if (form & 2) c.attrs.flags = kReluOutput;
          const Tensor a = test_support::random_tensor(stored(s.m, s.k, c.attrs.trans_a), seed++);
          const Tensor b = test_support::random_tensor(stored(s.k, s.n, c.attrs.trans_b), seed++);
          c.inputs = {a, b};
          if (form & 1) c.inputs.push_back(test_support::random_tensor({s.n}, seed++));
          SCOPED_TRACE(std::to_string(s.m) + "x" + std::to_string(s.k) + "x" + std::to_string(s.n) + " trans " +
                       std::to_string(trans) + " form " + std::to_string(form));
          test_support::expect_same_as_cpu(c, vk, 1e-5, product_atol(a, b, s.k));
        }
  });
}

TEST(VulkanMatMul, Batched) {
  TG_VULKAN_OR_SKIP(vk);
  for_each_tiling([&] {
    uint32_t seed = 100;
    for (const Mkn& s : std::vector<Mkn>{{1, 1, 1}, {1, 5, 7}, {7, 13, 5}, {65, 33, 70}, {9, 1, 4}})
      for (int trans = 0; trans < 4; ++trans)
        for (bool relu : {false, true}) {
          OpCase c;
          c.op = OpKind::MatMul;
          c.attrs.trans_a = trans & 1;
          c.attrs.trans_b = trans & 2;
          if (relu) c.attrs.flags = kReluOutput;
          const Tensor a = test_support::random_tensor(stored(3, s.m, s.k, c.attrs.trans_a), seed++);
          const Tensor b = test_support::random_tensor(stored(3, s.k, s.n, c.attrs.trans_b), seed++);
          c.inputs = {a, b};
          SCOPED_TRACE(std::to_string(s.m) + "x" + std::to_string(s.k) + "x" + std::to_string(s.n) + " trans " +
                       std::to_string(trans) + " relu " + std::to_string(relu));
          test_support::expect_same_as_cpu(c, vk, 1e-5, product_atol(a, b, s.k));
        }
  });
}

// More tiles or batch entries than the device's grid holds in one dimension:
// the shader loops over the grid.
TEST(VulkanMatMul, BeyondTheGrid) {
  TG_VULKAN_OR_SKIP(vk);
  {  // 70000 batch entries (z beyond 65535)
    OpCase c;
    c.op = OpKind::MatMul;
    c.inputs = {test_support::random_tensor({70000, 1, 2}, 1), test_support::random_tensor({70000, 2, 1}, 2)};
    test_support::expect_same_as_cpu(c, vk, 1e-5, 1e-5);
  }
  {  // one row of 65536 * 64 + 5 columns (x beyond 65535 tiles of 64 columns)
    OpCase c;
    c.op = OpKind::MatMul;
    c.attrs.flags = kReluOutput;
    c.inputs = {test_support::random_tensor({1, 1}, 3), test_support::random_tensor({1, 65536 * 64 + 5}, 4)};
    test_support::expect_same_as_cpu(c, vk, 1e-5, 1e-5);
  }
}

TEST(VulkanMatMul, NanAndInfinity) {
  TG_VULKAN_OR_SKIP(vk);
  for_each_tiling([&] {
    for (int trans = 0; trans < 4; ++trans)
      for (int form = 0; form < 4; ++form) {
        const int64_t m = 37, k = 21, n = 70;
        OpCase c;
        c.op = OpKind::MatMul;
        c.attrs.trans_a = trans & 1;
        c.attrs.trans_b = trans & 2;
        if (form & 2) c.attrs.flags = kReluOutput;
        Tensor a = test_support::random_tensor(stored(m, k, c.attrs.trans_a), 7);
        Tensor b = test_support::random_tensor(stored(k, n, c.attrs.trans_b), 8);
        // A(5, 3) = NaN: row 5 of C is NaN; B(4, 66) = inf: column 66 infinite (NaN in row 5).
        a.data<float>()[c.attrs.trans_a ? 3 * m + 5 : 5 * k + 3] = NAN;
        b.data<float>()[c.attrs.trans_b ? 66 * k + 4 : 4 * n + 66] = INFINITY;
        c.inputs = {a, b};
        if (form & 1) c.inputs.push_back(test_support::random_tensor({n}, 9));
        SCOPED_TRACE("trans " + std::to_string(trans) + " form " + std::to_string(form));
        test_support::expect_same_as_cpu(c, vk, 1e-5, product_atol(a, b, k));
        const std::vector<double> got = test_support::run_op(c, vk).output;
        for (int64_t j = 0; j < n; ++j) EXPECT_TRUE(std::isnan(got[size_t(5 * n + j)])) << "C(5, " << j << ")";
        for (int64_t i = 0; i < m; ++i)
          if (i != 5) EXPECT_TRUE(std::isinf(got[size_t(i * n + 66)]) || got[size_t(i * n + 66)] == 0) << i;
      }
  });
}

TEST(VulkanMatMul, AccumulateGradSum) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 200;
  for (const Shape& s : test_support::elementwise_shapes(true)) {
    Tensor acc = test_support::random_tensor(s, seed++);
    Tensor g = test_support::random_tensor(s, seed++);
    acc.data<float>()[0] = NAN;
    if (s.numel() > 1) g.data<float>()[1] = INFINITY;
    OpCase c;
    c.op = OpKind::AccumulateGrad;
    c.inputs = {acc, g};
    c.state = {true, false};
    test_support::expect_same_as_cpu(c, vk, 1e-6, 0);
  }
}

TEST(VulkanMatMul, AccumulateGradProduct) {
  TG_VULKAN_OR_SKIP(vk);
  for_each_tiling([&] {
    uint32_t seed = 300;
    for (const Mkn& s : kShapes)
      for (int trans = 0; trans < 4; ++trans) {
        OpCase c;
        c.op = OpKind::AccumulateGrad;
        c.attrs.trans_a = trans & 1;
        c.attrs.trans_b = trans & 2;
        Tensor acc = test_support::random_tensor({s.m, s.n}, seed++);
        const Tensor a = test_support::random_tensor(stored(s.m, s.k, c.attrs.trans_a), seed++);
        const Tensor b = test_support::random_tensor(stored(s.k, s.n, c.attrs.trans_b), seed++);
        if (s.m * s.n > 2) acc.data<float>()[2] = NAN;
        c.inputs = {acc, a, b};
        c.state = {true, false, false};
        SCOPED_TRACE(std::to_string(s.m) + "x" + std::to_string(s.k) + "x" + std::to_string(s.n) + " trans " +
                     std::to_string(trans));
        test_support::expect_same_as_cpu(c, vk, 1e-5, product_atol(a, b, s.k));
      }
  });
}

// K = 0: C is the bias (or 0), and AccumulateGrad's product leaves acc as it is.
TEST(VulkanMatMul, EmptyInnerDimension) {
  TG_VULKAN_OR_SKIP(vk);
  OpCase c;
  c.op = OpKind::MatMul;
  c.attrs.flags = kReluOutput;
  c.inputs = {test_support::random_tensor({5, 0}, 1), test_support::random_tensor({0, 7}, 2),
              test_support::random_tensor({7}, 3)};
  test_support::expect_same_as_cpu(c, vk, 0, 0);
  OpCase d;
  d.op = OpKind::AccumulateGrad;
  d.inputs = {test_support::random_tensor({5, 7}, 4), test_support::random_tensor({5, 0}, 5),
              test_support::random_tensor({0, 7}, 6)};
  d.state = {true, false, false};
  test_support::expect_same_as_cpu(d, vk, 0, 0);
}
