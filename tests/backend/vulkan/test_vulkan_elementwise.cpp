// The element-wise Vulkan kernels against the CPU's. Tolerances, per op
// family (|vulkan - cpu| <= atol + rtol |cpu|):
//  - Fill, Scale, ReLU, LeakyReLU, Clamp, their backward ops, Add, Sub, Mul,
//    Maximum, Minimum, GreaterEqual, MaskedFill: exact (one correctly rounded operation
//    or none).
//  - Div, Sqrt, Rsqrt, and the backward ops of sigmoid, tanh, rsqrt, ELU,
//    softplus, erf: 1e-6 relative (Vulkan's division and square roots are
//    promised to 2.5 ulp, the shaders' exp to ~2 ulp; 1e-6 is 8 to 16 ulp).
//  - Exp, Log, Tanh, Sigmoid, SiLU, ELU, Softplus, GELU (both forms), Erf,
//    Pow: 1e-6 relative; shaders/elementwise.glsl's functions are within a
//    few ulp, the CPU's libm or SLEEF within 1.
//  - GELU's tanh form: 3e-5 relative. It is x / (1 + e^t) with t = x (a + b
//    x^2) rounded in float32, and one ulp of t is |t| ulps of the result
//    (|t| = 11 at x = -4, up to 88 before y underflows). t's three roundings
//    may be fused differently on each side (SLEEF's 8 lanes have no fused
//    multiply-add, the compiler's scalar tail and a GPU compiler may fuse),
//    so the two sides' t differ by an ulp or two (256 ulps of y seen at
//    x = -9.7 on lavapipe).
//  - TanhBackward, g (1 - y^2): 1e-6 relative plus 2.5e-7 absolute (4 |g|
//    ulps of 1): 1 - y^2 cancels as |y| nears 1, and whether y^2 is rounded
//    before the subtraction (a fused multiply-add or not) differs by device.
//  - The backward ops of GELU (both forms) and SiLU: 1e-6 relative plus 1e-6
//    absolute, per unit of g: their derivatives are sums that cancel (Phi(x)
//    + x phi(x) is 7e-4 at x = -0.75 from terms of 0.23), so each side's ulp
//    of the terms is an absolute error of the result.
//  - Transpose, Slice, SliceBackward, Concat, ToIndex: exact (copies).
//  - Special values: also 1e-37 absolute, as a device may flush subnormal
//    results (exp(-100)) to 0, which Vulkan allows.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tensorgrad/ops/gradients.h"
#include "vulkan_support.h"

using namespace tensorgrad;
using test_support::OpCase;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Inputs at the edges of every op's range: NaN, infinities, signed zeros,
// the overflow and underflow points of exp, large magnitudes.
std::vector<float> special_values() {
  return {NAN,   kInf,   -kInf,  0.0f,   -0.0f, 1e-30f, -1e-30f, 1e-5f,  -1e-5f, 0.5f,   -0.5f,  0.75f, -0.75f,
          1.0f,  -1.0f,  2.0f,   -2.0f,  3.0f,  -3.0f,  5.0f,    -5.0f,  7.5f,   -7.5f,  10.0f,  -10.0f, 20.0f,
          -20.0f, 88.0f, 88.7f,  89.0f,  -87.0f, -88.0f, -100.0f, 100.0f, -104.0f, 1000.0f, -1000.0f, 1e30f,
          -1e30f, 3.4e38f, -3.4e38f, 0.1f, -0.1f, 1.5f, -1.5f, 4.0f, -4.0f, 6.0f, -6.0f, 9.9f, -9.9f, 14.2f,
          -14.2f, 0.62f, -0.63f, 0.84f, 1.25f, 2.86f, 1.2e-38f, 2e-38f};
}

Tensor from(const std::vector<float>& v) { return Tensor::from_vector(v, Shape{int64_t(v.size())}); }

// Random values of deviation `scale`, |x| if `positive`, NaN and +-inf at the start where there is room.
Tensor random_input(const Shape& s, uint32_t seed, float scale, bool positive = false) {
  Tensor x = test_support::random_tensor(s, seed, scale);
  float* p = x.data<float>();
  const int64_t n = x.numel();
  if (positive)
    for (int64_t i = 0; i < n; ++i) p[i] = std::abs(p[i]);
  if (n >= 7) {
    p[1] = NAN;
    p[3] = kInf;
    p[5] = -kInf;
  }
  return x;
}

void expect_op(const std::shared_ptr<const Backend>& vk, OpKind op, const OpAttrs& attrs, std::vector<Tensor> in,
               double rtol, double atol) {
  OpCase c;
  c.op = op;
  c.attrs = attrs;
  c.inputs = std::move(in);
  SCOPED_TRACE(op_info(op).name);
  test_support::expect_same_as_cpu(c, vk, rtol, atol);
}

struct Tolerance {
  double rtol, atol;
};

struct UnaryCase {
  OpKind op;
  Tolerance tol;
  bool positive = false;  // random inputs |x| (log, sqrt, rsqrt, pow: NaN below 0 on both sides)
  OpAttrs attrs{};
};

std::vector<UnaryCase> unary_cases() {
  OpAttrs scale, elu, leaky, clamp, clamp_lo, clamp_hi;
  scale.factor = 0.3f;
  elu.alpha = 1.5f;
  leaky.negative_slope = 0.01f;
  clamp.clamp_min = -1.0f;
  clamp.clamp_max = 2.0f;
  clamp_lo.clamp_min = 0.25f;  // upper bound +inf
  clamp_hi.clamp_max = -0.5f;  // lower bound -inf
  const Tolerance exact{0, 0}, ulps{1e-6, 0}, amplified{3e-5, 0};
  return {{OpKind::Scale, exact, false, scale},   {OpKind::Relu, exact},
          {OpKind::Sigmoid, ulps},                {OpKind::Tanh, ulps},
          {OpKind::Gelu, ulps},                   {OpKind::GeluTanh, amplified},
          {OpKind::Silu, ulps},                   {OpKind::Elu, ulps, false, elu},
          {OpKind::LeakyRelu, exact, false, leaky}, {OpKind::Softplus, ulps},
          {OpKind::Exp, ulps},                    {OpKind::Log, ulps, true},
          {OpKind::Sqrt, ulps, true},             {OpKind::Rsqrt, ulps, true},
          {OpKind::Erf, ulps},                    {OpKind::Clamp, exact, false, clamp},
          {OpKind::Clamp, exact, false, clamp_lo}, {OpKind::Clamp, exact, false, clamp_hi}};
}

struct BackwardCase {
  OpKind op;
  Tolerance tol;
  OpAttrs attrs{};
};

std::vector<BackwardCase> backward_cases() {
  OpAttrs elu, leaky, clamp;
  elu.alpha = 0.7f;
  leaky.negative_slope = 0.2f;
  clamp.clamp_min = -0.5f;
  clamp.clamp_max = 1.0f;
  const Tolerance exact{0, 0}, ulps{1e-6, 0}, cancel{1e-6, 1e-6}, one_minus{1e-6, 2.5e-7};
  return {{OpKind::ReluBackward, exact},          {OpKind::SigmoidBackward, ulps},
          {OpKind::TanhBackward, one_minus},      {OpKind::RsqrtBackward, ulps},
          {OpKind::GeluBackward, cancel},         {OpKind::GeluTanhBackward, cancel},
          {OpKind::SiluBackward, cancel},         {OpKind::EluBackward, ulps, elu},
          {OpKind::LeakyReluBackward, exact, leaky}, {OpKind::SoftplusBackward, ulps},
          {OpKind::ErfBackward, ulps},            {OpKind::ClampBackward, exact, clamp}};
}

constexpr double kSubnormal = 1e-37;

}  // namespace

TEST(VulkanElementwise, Fill) {
  TG_VULKAN_OR_SKIP(vk);
  for (const Shape& s : test_support::elementwise_shapes(true)) {
    OpCase c;
    c.op = OpKind::Fill;
    c.attrs.shape = s;
    c.attrs.value = -2.5f;
    test_support::expect_same_as_cpu(c, vk, 0, 0);
  }
}

TEST(VulkanElementwise, Unary) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 1;
  for (const Shape& s : test_support::elementwise_shapes())
    for (const UnaryCase& u : unary_cases()) {
      SCOPED_TRACE(s.str());
      expect_op(vk, u.op, u.attrs, {random_input(s, seed++, 3.0f, u.positive)}, u.tol.rtol, u.tol.atol);
    }
}

TEST(VulkanElementwise, UnarySpecialValues) {
  TG_VULKAN_OR_SKIP(vk);
  for (const UnaryCase& u : unary_cases())
    expect_op(vk, u.op, u.attrs, {from(special_values())}, u.tol.rtol, kSubnormal);
}

// Wider ranges where the functions change regime: exp's overflow and underflow,
// erf and erfc's series and tails, tanh's switch at 0.625.
TEST(VulkanElementwise, UnarySweep) {
  TG_VULKAN_OR_SKIP(vk);
  std::vector<float> v;
  for (int i = -12000; i <= 12000; ++i) v.push_back(float(i) * 0.0091f);
  for (int i = 0; i < 400; ++i) v.push_back(std::ldexp(1.0f + float(i) / 400.0f, i / 4 - 60));
  for (const UnaryCase& u : unary_cases()) {
    std::vector<float> w = v;
    if (u.positive)
      for (float& x : w) x = std::abs(x);
    expect_op(vk, u.op, u.attrs, {from(w)}, u.tol.rtol, kSubnormal);
  }
}

// The grid-stride loop: more elements than 65535 workgroups of 256 cover.
TEST(VulkanElementwise, LargeUnaryAndBinary) {
  TG_VULKAN_OR_SKIP(vk);
  const Shape s = test_support::elementwise_shapes(true).back();
  const Tensor x = test_support::random_tensor(s, 7, 2.0f), y = test_support::random_tensor(s, 8);
  expect_op(vk, OpKind::Sigmoid, {}, {x}, 1e-6, 0);
  expect_op(vk, OpKind::Mul, {}, {x, y}, 0, 0);
  expect_op(vk, OpKind::Sub, {}, {x, Tensor::from_vector(std::vector<float>{0.25f}, Shape{1})}, 0, 0);
}

TEST(VulkanElementwise, Pow) {
  TG_VULKAN_OR_SKIP(vk);
  const std::vector<float> exponents{2.0f, 3.0f, -1.0f, -2.0f, 0.5f, -0.5f, 1.5f, 0.0f, 1.0f, 7.0f, 0.3333f, 2.5f,
                                     -3.0f, 11.0f, 100.0f, -41.0f, kInf, -kInf, NAN, 1e10f, -1e10f, 16777217.0f};
  std::vector<float> base = special_values();
  for (float b : {-8.0f, -2.0f, -0.5f, -1.0f, 1.0f, 1.0001f, 0.9999f, -1.0001f, 1.7f, -1.7f, 12.5f, -3.25f})
    base.push_back(b);
  uint32_t seed = 100;
  for (float e : exponents) {
    OpAttrs a;
    a.exponent = e;
    SCOPED_TRACE(e);
    expect_op(vk, OpKind::Pow, a, {from(base)}, 1e-6, kSubnormal);
    for (const Shape& s : test_support::elementwise_shapes())
      expect_op(vk, OpKind::Pow, a, {random_input(s, seed++, 3.0f)}, 1e-6, kSubnormal);
  }
}

TEST(VulkanElementwise, Backward) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 200;
  for (const Shape& s : test_support::elementwise_shapes())
    for (const BackwardCase& b : backward_cases()) {
      SCOPED_TRACE(s.str());
      // Sigmoid's and tanh's take y in (0, 1) and (-1, 1) in practice, rsqrt's y > 0; other values
      // only test that both sides compute the same formula.
      Tensor v = random_input(s, seed++, 2.0f, b.op == OpKind::RsqrtBackward);
      if (b.op == OpKind::SigmoidBackward || b.op == OpKind::TanhBackward) {
        float* p = v.data<float>();
        for (int64_t i = 0; i < v.numel(); ++i)
          if (std::isfinite(p[i]))
            p[i] = b.op == OpKind::TanhBackward ? std::tanh(p[i]) : 0.5f + 0.5f * std::tanh(p[i]);
      }
      const Tensor g = test_support::random_tensor(s, seed++);
      expect_op(vk, b.op, b.attrs, {v, g}, b.tol.rtol, b.tol.atol);
    }
}

TEST(VulkanElementwise, BackwardSpecialValues) {
  TG_VULKAN_OR_SKIP(vk);
  const std::vector<float> v = special_values();
  std::vector<float> g(v.size());
  for (size_t i = 0; i < g.size(); ++i) g[i] = i % 5 == 4 ? -kInf : (i % 7 == 6 ? NAN : 1.0f - 0.37f * float(i % 11));
  for (const BackwardCase& b : backward_cases())
    expect_op(vk, b.op, b.attrs, {from(v), from(g)}, b.tol.rtol, b.tol.atol + kSubnormal);
}

TEST(VulkanElementwise, BackwardSweep) {
  TG_VULKAN_OR_SKIP(vk);
  std::vector<float> v, g;
  for (int i = -6000; i <= 6000; ++i) {
    v.push_back(float(i) * 0.0037f);
    g.push_back(1.0f);
  }
  for (const BackwardCase& b : backward_cases())
    expect_op(vk, b.op, b.attrs, {from(v), from(g)}, b.tol.rtol, b.tol.atol + kSubnormal);
}

namespace {
constexpr OpKind kBinary[] = {OpKind::Add, OpKind::Sub, OpKind::Mul, OpKind::Div, OpKind::Maximum, OpKind::Minimum,
                              OpKind::GreaterEqual};
// Division is the only binary op Vulkan does not round correctly (2.5 ulp).
double binary_rtol(OpKind op) { return op == OpKind::Div ? 1e-6 : 0.0; }

void expect_binary(const std::shared_ptr<const Backend>& vk, const Tensor& a, const Tensor& b) {
  for (OpKind op : kBinary) expect_op(vk, op, {}, {a, b}, binary_rtol(op), 0);
  OpAttrs relu;
  relu.flags = kReluOutput;
  expect_op(vk, OpKind::Add, relu, {a, b}, 0, 0);
  // MaskedFill with b as the mask (every non-zero, NaN included, sets it)
  // and with b's sign as a 0/1 mask, filling -inf.
  OpAttrs fill;
  fill.value = -kInf;
  Tensor mask = b.clone();
  for (int64_t i = 0; i < mask.numel(); ++i) mask.data<float>()[i] = mask.data<float>()[i] > 0.0f ? 1.0f : 0.0f;
  expect_op(vk, OpKind::MaskedFill, fill, {a, b}, 0, 0);
  expect_op(vk, OpKind::MaskedFill, fill, {a, mask}, 0, 0);
}
}  // namespace

TEST(VulkanElementwise, BinarySameShape) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 300;
  for (const Shape& s : test_support::elementwise_shapes()) {
    SCOPED_TRACE(s.str());
    Tensor a = random_input(s, seed++, 2.0f), b = random_input(s, seed++, 2.0f);
    if (s.numel() >= 7) {  // NaN against numbers and infinities, infinities against each other, zeros
      b.data<float>()[0] = NAN;
      b.data<float>()[3] = kInf;
      b.data<float>()[4] = 0.0f;
      a.data<float>()[4] = 0.0f;
      b.data<float>()[6] = -kInf;
    }
    expect_binary(vk, a, b);
  }
}

TEST(VulkanElementwise, BinarySpecialValues) {
  TG_VULKAN_OR_SKIP(vk);
  const std::vector<float> s = special_values();
  std::vector<float> a, b;
  for (float x : s)
    for (float y : s) {
      a.push_back(x);
      b.push_back(y);
    }
  expect_binary(vk, from(a), from(b));
}

TEST(VulkanElementwise, BinaryBroadcast) {
  TG_VULKAN_OR_SKIP(vk);
  const std::vector<std::pair<Shape, Shape>> pairs{
      {{3, 1}, {1, 4}},       {{2, 3, 4}, {4}},        {{5}, {}},           {{1}, {6, 1}},
      {{}, {5}},              {{4}, {2, 3, 4}},        {{2, 1, 3}, {4, 1}}, {{1, 2, 1, 3, 1, 2}, {2, 1, 3, 5, 1}},
      {{7, 1, 33}, {1, 65, 1}}, {{2, 3, 31}, {2, 1, 31}}, {{}, {}},          {{3, 1, 1, 1, 1, 2}, {1, 2, 2, 2, 2, 1}},
      {{4, 5, 6}, {1, 5, 6}}, {{4, 5, 6}, {4, 1, 6}},  {{1, 5, 1}, {4, 5, 6}}, {{4, 5, 6, 7}, {4, 5, 1, 1}},
      {{1}, {1}},             {{2, 2, 2, 2, 2, 2}, {2, 2, 2, 2, 2, 2}}};
  uint32_t seed = 400;
  for (const auto& [sa, sb] : pairs) {
    SCOPED_TRACE(sa.str() + " with " + sb.str());
    Tensor a = random_input(sa, seed++, 2.0f), b = random_input(sb, seed++, 2.0f);
    if (sb.numel() >= 2) b.data<float>()[1] = NAN;
    if (sa.numel() >= 3) a.data<float>()[2] = -kInf;
    expect_binary(vk, a, b);
  }
}

// ---- copies: exact, any dtype ----

namespace {
// x of `shape` and `dtype` holding distinct values (NaN and infinities among the floats).
Tensor distinct(const Shape& shape, DType dtype, uint32_t seed) {
  Tensor t = Tensor::empty(shape, dtype);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int64_t v = int64_t(i * 7 + seed) * (i % 2 ? -1 : 1);
    switch (dtype) {
      case DType::Float32: t.data<float>()[i] = i == 1 ? NAN : (i == 2 ? -kInf : float(v) * 0.25f); break;
      case DType::Int32: t.data<int32_t>()[i] = int32_t(v); break;
      case DType::Int64: t.data<int64_t>()[i] = v * (int64_t(1) << 33) + 1; break;
    }
  }
  return t;
}
constexpr DType kDTypes[] = {DType::Float32, DType::Int32, DType::Int64};
}  // namespace

TEST(VulkanElementwise, Transpose) {
  TG_VULKAN_OR_SKIP(vk);
  const std::vector<Shape> shapes{{1, 1},       {3, 5},          {33, 65},          {2, 3, 31},
                                  {2, 1, 4, 3}, {2, 3, 1, 2, 5}, {2, 1, 3, 2, 2, 3}};
  uint32_t seed = 0;
  for (const Shape& s : shapes)
    for (int a = 0; a < s.rank(); ++a)
      for (int b = 0; b < s.rank(); ++b)
        for (DType t : kDTypes) {
          if (t != DType::Float32 && (a + b) % 2) continue;  // fewer integer cases
          OpAttrs at;
          at.axis = a;
          at.axis2 = b;
          SCOPED_TRACE(s.str() + " axes " + std::to_string(a) + ", " + std::to_string(b));
          expect_op(vk, OpKind::Transpose, at, {distinct(s, t, seed++)}, 0, 0);
        }
}

TEST(VulkanElementwise, SliceAndBackward) {
  TG_VULKAN_OR_SKIP(vk);
  const std::vector<Shape> shapes{{7}, {3, 5}, {33, 65}, {2, 3, 31}, {2, 3, 1, 2, 5, 2}};
  uint32_t seed = 0;
  for (const Shape& s : shapes)
    for (int axis = 0; axis < s.rank(); ++axis) {
      const int64_t n = s[axis];
      const std::pair<int64_t, int64_t> ranges[] = {{0, n}, {0, 1}, {n - 1, 1}, {n / 3, n - n / 3}, {1, n - 2}};
      for (auto [start, length] : ranges) {
        // An empty output has no memory for the graph to bind.
        if (length <= 0) continue;
        OpAttrs at;
        at.axis = axis;
        at.start = start;
        at.length = length;
        SCOPED_TRACE(s.str() + " axis " + std::to_string(axis) + " from " + std::to_string(start) + " length " +
                     std::to_string(length));
        for (DType t : kDTypes) expect_op(vk, OpKind::Slice, at, {distinct(s, t, seed++)}, 0, 0);
        Shape gs = s;
        gs.set(axis, length);
        at.shape = s;
        expect_op(vk, OpKind::SliceBackward, at, {distinct(gs, DType::Float32, seed++)}, 0, 0);
      }
    }
}

TEST(VulkanElementwise, Concat) {
  TG_VULKAN_OR_SKIP(vk);
  const std::vector<Shape> shapes{{7}, {3, 5}, {2, 3, 31}, {2, 1, 3, 2, 2, 3}};
  uint32_t seed = 0;
  for (const Shape& s : shapes)
    for (int axis = 0; axis < s.rank(); ++axis)
      for (int count : {2, 3, int(kMaxOpInputs)})
        for (DType t : kDTypes) {
          std::vector<Tensor> in;
          for (int k = 0; k < count; ++k) {
            Shape ks = s;
            ks.set(axis, k == 1 ? 0 : (k % 3) + 1);  // sizes 1, 0, 3, 1, 2, ...
            in.push_back(distinct(ks, t, seed++));
          }
          OpAttrs at;
          at.axis = axis;
          SCOPED_TRACE(s.str() + " axis " + std::to_string(axis) + ", " + std::to_string(count) + " inputs");
          expect_op(vk, OpKind::Concat, at, in, 0, 0);
        }
}

TEST(VulkanElementwise, ToIndex) {
  TG_VULKAN_OR_SKIP(vk);
  std::vector<float> v{0.0f,         -0.0f,        1.0f,          -1.0f,         7.0f,
                       -300.0f,      16777216.0f, -16777216.0f, 2147483520.0f, -2147483648.0f};
  for (int i = 0; i < 1000; ++i) v.push_back(float(i * 37 % 1001 - 500));
  expect_op(vk, OpKind::ToIndex, {}, {from(v)}, 0, 0);
  for (const Shape& s : test_support::elementwise_shapes()) {
    Tensor x = test_support::random_tensor(s, 5, 100.0f);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = std::round(x.data<float>()[i]);
    expect_op(vk, OpKind::ToIndex, {}, {x}, 0, 0);
  }
}
