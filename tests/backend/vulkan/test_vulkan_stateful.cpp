// The stateful Vulkan kernels against the CPU's. Tolerances:
// - ClipValue, AdvanceCounter, Assign, Dropout, PolyakUpdate with tau = 1:
//   exact (copies, comparisons, integer and hash arithmetic; the dropout mask
//   and the scaled values equal the CPU's bit for bit).
// - MovingAverage, PolyakUpdate: float32 rounding of two products and a sum
//   (the CPU's compiler may fuse one product into the sum, so not bit for
//   bit): 1e-6 relative plus 1e-6 absolute, the rounding of products up to
//   about 10 where the sum cancels.
// - SquaredNorm: 1e-6 relative on the reconstructed sum s 4^e, in both the
//   double form and the float-pair one (VulkanStatefulNoFp64.All runs this
//   file with TENSORGRAD_VULKAN_NO_FP64=1); lavapipe agrees within 1e-9.
// - ClipNorm: 1e-6 relative (the float-pair form takes sqrt and the quotient
//   in float, which Vulkan allows a few ulps; lavapipe is within 4e-7).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "vulkan_support.h"

using namespace tensorgrad;
using test_support::OpCase;

namespace {

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<Shape> stateful_shapes() { return {{1}, {7}, {1000}, {65536 * 2 + 5}}; }

// x with NaN, inf and -inf planted where the size allows.
Tensor with_specials(Tensor x) {
  float* p = x.data<float>();
  const int64_t n = x.numel();
  p[0] = kNaN;
  if (n > 2) p[n / 2] = kInf;
  if (n > 3) p[n - 1] = -kInf;
  return x;
}

Tensor int64_tensor(const std::vector<int64_t>& v) {
  Tensor t = Tensor::zeros(Shape{int64_t(v.size())}, DType::Int64);
  for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i];
  return t;
}

Tensor pair(float s, float e) { return Tensor::from_vector(std::vector<float>{s, e}, Shape{2}); }

// The sum a norm pair holds, as ops/norm_pair.h reads it.
double pair_value(const std::vector<double>& p) { return std::ldexp(p[0], 2 * int(p[1])); }

// SquaredNorm on both backends, compared on the reconstructed value (the
// pair itself may differ where a sum sits on a power of 4).
void expect_squared_norm(const std::shared_ptr<const Backend>& vk, const Tensor& x, const Tensor* running) {
  OpCase c;
  c.op = OpKind::SquaredNorm;
  c.inputs = {x};
  if (running) c.inputs.push_back(*running);
  const auto want = test_support::run_op(c, cpu_backend()).output;
  const auto got = test_support::run_op(c, vk).output;
  ASSERT_EQ(got.size(), 2u);
  const double w = pair_value(want), g = pair_value(got);
  EXPECT_TRUE(test_support::close({g}, {w}, 1e-6, 0)) << "pair (" << got[0] << ", " << got[1] << ") against ("
                                                       << want[0] << ", " << want[1] << "), n " << x.numel();
  if (std::isfinite(g) && g > 0) {  // the pair's form: s in [0.5, 2), e an integer
    EXPECT_GE(got[0], 0.5);
    EXPECT_LT(got[0], 2.0);
    EXPECT_EQ(got[1], std::round(got[1]));
  } else {
    EXPECT_EQ(got[1], 0.0);
  }
}

}  // namespace

TEST(VulkanStateful, ClipValue) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 1;
  for (const Shape& s : stateful_shapes()) {
    OpCase c;
    c.op = OpKind::ClipValue;
    c.attrs.clip = 0.5f;
    c.inputs = {with_specials(test_support::random_tensor(s, seed++))};
    c.state = {true};
    test_support::expect_same_as_cpu(c, vk, 0, 0);
  }
}

TEST(VulkanStateful, MovingAverage) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 10;
  for (const Shape& s : stateful_shapes())
    for (float m : {0.0f, 0.9f, 0.99f}) {
      OpCase c;
      c.op = OpKind::MovingAverage;
      c.attrs.momentum = m;
      c.inputs = {test_support::random_tensor(s, seed++), with_specials(test_support::random_tensor(s, seed++, 3.0f))};
      c.state = {true};
      test_support::expect_same_as_cpu(c, vk, 1e-6, 1e-6);
    }
}

TEST(VulkanStateful, PolyakUpdate) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 20;
  for (const Shape& s : stateful_shapes())
    for (float tau : {0.005f, 0.5f, 1.0f})
      for (const Shape& tau_shape : {Shape{}, Shape{1}}) {
        Tensor target = test_support::random_tensor(s, seed++), source = test_support::random_tensor(s, seed++);
        // NaN and inf in the old target: tau = 1 must overwrite them.
        target.data<float>()[0] = kNaN;
        if (s.numel() > 1) target.data<float>()[1] = kInf;
        if (s.numel() > 2) source.data<float>()[2] = kNaN;
        if (s.numel() > 3) source.data<float>()[3] = -kInf;
        OpCase c;
        c.op = OpKind::PolyakUpdate;
        c.inputs = {target, source, Tensor::from_vector(std::vector<float>{tau}, tau_shape)};
        c.state = {true};
        const double tol = tau == 1.0f ? 0 : 1e-6;
        test_support::expect_same_as_cpu(c, vk, tol, tol);
      }
}

TEST(VulkanStateful, AdvanceCounterFromLargeValues) {
  TG_VULKAN_OR_SKIP(vk);
  for (int64_t start : {int64_t(0), int64_t(1) << 40, (int64_t(1) << 40) + 12345, int64_t(-1)}) {
    OpCase c;
    c.op = OpKind::AdvanceCounter;
    c.inputs = {int64_tensor({start})};
    c.state = {true};
    const auto got = test_support::run_op(c, vk);
    EXPECT_EQ(got.states[0][0], double(start + 1));
    test_support::expect_same_as_cpu(c, vk, 0, 0);
  }
}

TEST(VulkanStateful, AssignEveryDtype) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 30;
  for (const Shape& s : stateful_shapes()) {
    const int64_t n = s.numel();
    {
      OpCase c;
      c.op = OpKind::Assign;
      c.inputs = {test_support::random_tensor(s, seed++), with_specials(test_support::random_tensor(s, seed++))};
      c.state = {true};
      test_support::expect_same_as_cpu(c, vk, 0, 0);
    }
    {
      std::vector<int32_t> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        a[size_t(i)] = int32_t(i * 7 - 3);
        b[size_t(i)] = i % 2 ? INT32_MIN + int32_t(i) : INT32_MAX - int32_t(i);
      }
      OpCase c;
      c.op = OpKind::Assign;
      c.inputs = {Tensor::from_vector(a, s), Tensor::from_vector(b, s)};
      c.state = {true};
      test_support::expect_same_as_cpu(c, vk, 0, 0);
    }
    {
      std::vector<int64_t> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
      // Below 2^53 so that the harness' doubles hold them exactly; the high words differ from the low ones.
      for (int64_t i = 0; i < n; ++i) {
        a[size_t(i)] = -i;
        b[size_t(i)] = (int64_t(1) << 40) * (i % 5 + 1) + i * 3 - (i % 3 ? 0 : int64_t(1) << 52);
      }
      Tensor ta = int64_tensor(a).reshape(s), tb = int64_tensor(b).reshape(s);
      OpCase c;
      c.op = OpKind::Assign;
      c.inputs = {ta, tb};
      c.state = {true};
      test_support::expect_same_as_cpu(c, vk, 0, 0);
    }
  }
}

TEST(VulkanStateful, DropoutMasksEqualTheCpus) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 40;
  for (const Shape& s : stateful_shapes())
    for (float rate : {0.0f, 0.1f, 0.5f, 0.9f})
      for (uint64_t key : {uint64_t(0), uint64_t(42), uint64_t(0xDEADBEEFCAFEF00Dull)})
        for (int64_t counter : {int64_t(0), int64_t(1), int64_t(1) << 40}) {
          if (s.numel() > 1000 && counter == 1) continue;  // the large size at fewer counters, for time
          OpCase c;
          c.op = OpKind::Dropout;
          c.attrs.rate = rate;
          c.attrs.seed = key;
          c.inputs = {with_specials(test_support::random_tensor(s, seed++)), int64_tensor({counter})};
          c.state = {false, true};
          test_support::expect_same_as_cpu(c, vk, 0, 0);
        }
}

// The counter is read when the graph runs, not when it is recorded: a graph
// replayed after AdvanceCounter draws a new mask each run, the CPU's.
TEST(VulkanStateful, DropoutDrawsAfreshMaskEachRun) {
  TG_VULKAN_OR_SKIP(vk);
  const Tensor x = test_support::random_tensor({3, 333}, 7);
  std::vector<std::vector<double>> outputs[2];
  for (int b = 0; b < 2; ++b) {
    const std::shared_ptr<const Backend> backend = b == 0 ? cpu_backend() : vk;
    Graph g;
    g.set_rng_counter(int64_tensor({(int64_t(1) << 40) + 5}).to(backend->device()));
    const Value in = g.input("x", x.shape());
    OpAttrs at;
    at.rate = 0.3f;
    at.seed = 99;
    const Value y = g.apply(OpKind::Dropout, {in, g.rng_counter()}, at);
    Executable exe(std::move(g), {y}, BatchRule{}, backend, FusionOptions::none());
    exe.bind(in, x);
    for (int run = 0; run < 3; ++run) {
      exe.run();
      outputs[b].push_back(test_support::values(exe.output(y)));
    }
  }
  for (int run = 0; run < 3; ++run) EXPECT_TRUE(test_support::close(outputs[1][run], outputs[0][run], 0, 0)) << run;
  EXPECT_NE(outputs[1][0], outputs[1][1]);
}

TEST(VulkanStateful, SquaredNorm) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 50;
  const Tensor running = pair(1.25f, 3.0f);
  for (const Shape& s : stateful_shapes()) {
    const Tensor x = test_support::random_tensor(s, seed++);
    expect_squared_norm(vk, x, nullptr);
    expect_squared_norm(vk, x, &running);
    expect_squared_norm(vk, test_support::random_tensor(s, seed++, 1e-3f), &running);  // running dominates
  }
}

TEST(VulkanStateful, SquaredNormHugeTinyAndZero) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 60;
  for (const Shape& s : stateful_shapes()) {
    // Squares past float's range (1e60): the pair keeps the sum finite.
    const Tensor huge = test_support::random_tensor(s, seed++, 1e30f);
    expect_squared_norm(vk, huge, nullptr);
    const Tensor huge_running = pair(1.5f, 100.0f);  // 1.5 4^100, about 2.4e60
    expect_squared_norm(vk, huge, &huge_running);
    // Near float's largest: squares about 1e77.
    Tensor largest = Tensor::full(s, 3.0e38f);
    largest.data<float>()[0] = -3.4e38f;
    expect_squared_norm(vk, largest, nullptr);
    // Squares below float's smallest normal (1e-60).
    const Tensor tiny = test_support::random_tensor(s, seed++, 1e-30f);
    expect_squared_norm(vk, tiny, nullptr);
    const Tensor tiny_running = pair(0.75f, -90.0f);
    expect_squared_norm(vk, tiny, &tiny_running);
    // Zeros, alone, with a running sum, with a running sum far below 1.
    const Tensor zeros = Tensor::zeros(s);
    expect_squared_norm(vk, zeros, nullptr);
    expect_squared_norm(vk, zeros, &huge_running);
    expect_squared_norm(vk, zeros, &tiny_running);
    // Values whose squares differ by far more than float's range, in one sum.
    Tensor mixed = test_support::random_tensor(s, seed++);
    mixed.data<float>()[s.numel() - 1] = 2e25f;
    expect_squared_norm(vk, mixed, &tiny_running);
    // A running sum that dwarfs x's, and one x dwarfs.
    const Tensor dwarf_running = pair(1.0f, 200.0f);
    expect_squared_norm(vk, test_support::random_tensor(s, seed++), &dwarf_running);
    expect_squared_norm(vk, huge, &tiny_running);
  }
}

TEST(VulkanStateful, SquaredNormNaNAndInf) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 70;
  const Tensor finite_running = pair(1.0f, 2.0f), nan_running = pair(kNaN, 0.0f), inf_running = pair(kInf, 0.0f);
  for (const Shape& s : stateful_shapes()) {
    const Tensor x = test_support::random_tensor(s, seed++);
    Tensor with_nan = x.clone(), with_inf = x.clone(), with_both = x.clone();
    with_nan.data<float>()[s.numel() - 1] = kNaN;
    with_inf.data<float>()[0] = -kInf;
    with_both.data<float>()[0] = kInf;
    with_both.data<float>()[s.numel() - 1] = kNaN;  // one element when s is {1}: NaN
    for (const Tensor* t : std::initializer_list<const Tensor*>{&x, &with_nan, &with_inf, &with_both}) {
      expect_squared_norm(vk, *t, nullptr);
      for (const Tensor* r : {&finite_running, &nan_running, &inf_running}) expect_squared_norm(vk, *t, r);
    }
  }
}

TEST(VulkanStateful, ClipNorm) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 80;
  // Norm pairs (s, e), the norm being sqrt(s) 2^e: below and above the clip
  // (c = 1), near it, past float's range, tiny, zero, inf and NaN.
  const std::vector<std::pair<float, float>> pairs{{1.5f, -1.0f}, {1.5f, 4.0f}, {0.9f, 0.0f},  {1.1f, 0.0f},
                                                  {1.0f, 0.0f},  {0.7f, 90.0f}, {1.2f, 130.0f}, {1.9f, -80.0f},
                                                  {0.0f, 0.0f},  {kInf, 0.0f},  {kNaN, 0.0f}};
  const uint32_t flag_sets[] = {0u, kClipNormEps, kNonFiniteNormToNaN, kClipNormEps | kNonFiniteNormToNaN};
  for (const Shape& s : stateful_shapes()) {
    const Tensor grad = with_specials(test_support::random_tensor(s, seed++));
    for (const auto& [ps, pe] : pairs)
      for (uint32_t flags : flag_sets)
        for (float clip : {1.0f, 1e30f}) {
          OpCase c;
          c.op = OpKind::ClipNorm;
          c.attrs.clip = clip;
          c.attrs.flags = flags;
          c.inputs = {grad, pair(ps, pe)};
          c.state = {true};
          test_support::expect_same_as_cpu(c, vk, 1e-6, 0);
        }
  }
}
