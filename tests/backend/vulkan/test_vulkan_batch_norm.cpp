// The batch_norm Vulkan kernels against the CPU's. The CPU sums in double;
// the shaders in compensated float pairs, the variance from the deviations
// and sum(g xhat) from exact products, so both sides are within a few ulps
// of the exact sums. Tolerances (|vulkan - cpu| <= atol + rtol |cpu|):
// - BatchNormStats: 1e-5 relative plus 1e-12 (mean^2 + var) absolute, the
//   cancellation of the CPU's E[x^2] - mean^2 in double (the shader's
//   two-pass variance has none); 1e-30 besides, for a zero variance.
// - BatchNormParamGrad: 1e-5 relative plus 1e-6 sqrt(rows) absolute (sums
//   of rows random terms of deviation about 1, which may cancel to a small
//   result; each side is within about an ulp of the exact sum).
// - BatchNorm: 1e-5 relative plus 1e-5 absolute per unit of the outputs'
//   terms (|x a| + |b|): the map x a + b is one fused operation on the CPU,
//   two on Vulkan, and 1 / sqrt is within a few ulps there.
// - BatchNormBackward: as BatchNorm, per unit of the largest |g k| + |x a| +
//   |b| (its three terms cancel, exactly so for one row and own statistics).
// Every kernel also gives the same bits when run twice. Models with batch
// and layer normalization train as on the CPU within test_vulkan_models'
// tolerance (2e-4 relative plus 1e-5 absolute after a few Adam steps).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "vulkan_support.h"

using namespace tensorgrad;
using test_support::all_weights;
using test_support::OpCase;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// One row, odd sizes, a convolution's, rank 5, a large batch, and channel
// counts off the reductions' group sizes, which take 1, 4, 8 and 16 channels
// a workgroup (16 from 512 channels).
std::vector<Shape> shapes() {
  return {{1, 1},   {1, 5},    {7, 3},    {32, 5},  {4, 6, 6, 8}, {2, 3, 5, 7, 9},
          {1000, 64}, {13, 37}, {5000, 3}, {3, 129}, {20, 600}};
}

int64_t channels(const Shape& s) { return s[-1]; }
int64_t rows(const Shape& s) { return s.numel() / channels(s); }

// Random values of deviation `scale` around per-channel means `offset` (c + 1).
Tensor input(const Shape& s, uint32_t seed, float scale = 1.0f, float offset = 0.0f) {
  Tensor x = test_support::random_tensor(s, seed, scale);
  float* p = x.data<float>();
  const int64_t C = channels(s);
  for (int64_t i = 0; i < x.numel(); ++i) p[i] += offset * float(i % C + 1);
  return x;
}

Tensor vec(const std::vector<float>& v, const Shape& s) { return Tensor::from_vector(v, s); }

// gamma or beta {C}: random around `center`.
Tensor param(int64_t C, uint32_t seed, float center) {
  Tensor t = test_support::random_tensor(Shape{C}, seed, 0.5f);
  for (int64_t i = 0; i < C; ++i) t.data<float>()[i] += center;
  return t;
}

// The CPU's output of one op, as a host tensor of `shape`.
Tensor cpu_output(const OpCase& c, const Shape& shape) {
  const std::vector<double> v = test_support::run_op(c, cpu_backend()).output;
  std::vector<float> f(v.begin(), v.end());
  return vec(f, shape);
}

OpCase stats_case(const Tensor& x) {
  OpCase c;
  c.op = OpKind::BatchNormStats;
  c.inputs = {x};
  return c;
}

Tensor cpu_stats(const Tensor& x) { return cpu_output(stats_case(x), Shape{2, channels(x.shape())}); }

// Running statistics (own_stats false): random means, variances in [0.25, 2.25).
Tensor running_stats(int64_t C, uint32_t seed) {
  Tensor t = test_support::random_tensor(Shape{2, C}, seed, 1.0f);
  float* p = t.data<float>();
  for (int64_t c = 0; c < C; ++c) p[C + c] = 0.25f + std::fmod(std::fabs(p[C + c]), 2.0f);
  return t;
}

void expect_deterministic(const OpCase& c, const std::shared_ptr<const Backend>& vk) {
  const std::vector<double> a = test_support::run_op(c, vk).output, b = test_support::run_op(c, vk).output;
  ASSERT_EQ(a.size(), b.size());
  EXPECT_TRUE(a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0)
      << op_info(c.op).name << ": two runs differ";
}

// BatchNormStats' tolerance (header), from the CPU's statistics.
double stats_atol(const Tensor& stats) {
  const int64_t C = stats.shape()[1];
  double m = 0;
  for (int64_t c = 0; c < C; ++c) {
    const double mean = stats.data<float>()[c], var = stats.data<float>()[C + c];
    if (std::isfinite(mean) && std::isfinite(var)) m = std::max(m, mean * mean + var);
  }
  return 1e-12 * m + 1e-30;
}

void expect_stats(const std::shared_ptr<const Backend>& vk, const Tensor& x) {
  SCOPED_TRACE("batch_norm_stats of " + x.shape().str());
  const OpCase c = stats_case(x);
  test_support::expect_same_as_cpu(c, vk, 1e-5, stats_atol(cpu_stats(x)));
}

TEST(VulkanBatchNorm, StatsMatchTheCpu) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 1;
  for (const Shape& s : shapes()) {
    expect_stats(vk, input(s, seed++));
    expect_stats(vk, input(s, seed++, 0.5f, 3.0f));  // means of 3 to 3C
  }
}

// A mean 1000 times the deviation: the variance is the CPU's double E[x^2]
// - mean^2 and the shader's deviations; a float E[x^2] - mean^2 would be off
// by about 6e-8 1e6 = 6%.
TEST(VulkanBatchNorm, StatsOfALargeMeanKeepTheVariance) {
  TG_VULKAN_OR_SKIP(vk);
  expect_stats(vk, input(Shape{1000, 64}, 7, 1.0f, 1000.0f));
  expect_stats(vk, input(Shape{4, 6, 6, 8}, 8, 0.01f, 10.0f));
}

TEST(VulkanBatchNorm, StatsOfConstantChannelsAreExact) {
  TG_VULKAN_OR_SKIP(vk);
  Tensor x = input(Shape{300, 4}, 9);
  for (int64_t r = 0; r < 300; ++r) {
    x.data<float>()[r * 4 + 0] = 0.1f;
    x.data<float>()[r * 4 + 1] = -7.25f;
    x.data<float>()[r * 4 + 2] = 0.0f;
  }
  const OpCase c = stats_case(x);
  test_support::expect_same_as_cpu(c, vk, 1e-6, 0.0);
  const std::vector<double> got = test_support::run_op(c, vk).output;
  EXPECT_EQ(got[4], 0.0);  // var of 0.1: the deviations are 0 exactly
  EXPECT_EQ(got[5], 0.0);
  EXPECT_EQ(got[6], 0.0);
}

// Channel 0 with a NaN, 1 with +inf, 2 with +inf and -inf, 3 with -inf,
// 4 with values of 1e20 (a variance beyond float: inf on both), 5 finite.
Tensor special_input(const Shape& s, uint32_t seed) {
  Tensor x = input(s, seed);
  float* p = x.data<float>();
  const int64_t C = channels(s), R = rows(s);
  p[(R / 2) * C + 0] = NAN;
  p[(R - 1) * C + 1] = kInf;
  p[0 * C + 2] = kInf;
  p[(R - 1) * C + 2] = -kInf;
  p[(R / 3) * C + 3] = -kInf;
  for (int64_t r = 0; r < R; ++r) p[r * C + 4] *= 1e20f;
  return x;
}

TEST(VulkanBatchNorm, StatsPropagateNaNAndInfinity) {
  TG_VULKAN_OR_SKIP(vk);
  for (const Shape& s : {Shape{7, 6}, Shape{4, 6, 6, 6}, Shape{1000, 6}}) {
    const Tensor x = special_input(s, 11);
    SCOPED_TRACE(s.str());
    test_support::expect_same_as_cpu(stats_case(x), vk, 1e-5, 1e-30);
  }
}

OpCase forward_case(const Tensor& x, const Tensor& stats, int64_t C, float eps, bool own, bool relu,
                    const Tensor* residual) {
  OpCase c;
  c.op = OpKind::BatchNorm;
  c.attrs.eps = eps;
  c.attrs.own_stats = own;
  c.attrs.flags = relu ? kReluOutput : 0u;
  c.inputs = {x, stats, param(C, 21, 1.0f), param(C, 22, 0.0f)};
  if (residual) c.inputs.push_back(*residual);
  return c;
}

// The largest |x a| + |b| of the forward's map (the outputs' scale).
double map_scale(const OpCase& c) {
  const Tensor &x = c.inputs[0], &st = c.inputs[1], &gamma = c.inputs[2], &beta = c.inputs[3];
  const int64_t C = gamma.numel();
  double m = 1.0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t ch = i % C;
    const double a = gamma.data<float>()[ch] / std::sqrt(double(st.data<float>()[C + ch]) + c.attrs.eps);
    const double b = beta.data<float>()[ch] - st.data<float>()[ch] * a;
    const double v = std::fabs(x.data<float>()[i] * a) + std::fabs(b);
    if (std::isfinite(v)) m = std::max(m, v);
  }
  return m;
}

void expect_forward(const std::shared_ptr<const Backend>& vk, const OpCase& c) {
  SCOPED_TRACE("batch_norm of " + c.inputs[0].shape().str() + " eps " + std::to_string(c.attrs.eps) +
               (c.attrs.own_stats ? " own" : " running") + (c.attrs.flags ? " relu" : "") +
               (c.inputs.size() > 4 ? " residual" : ""));
  test_support::expect_same_as_cpu(c, vk, 1e-5, 1e-5 * map_scale(c));
}

TEST(VulkanBatchNorm, ForwardMatchesTheCpu) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 100;
  for (const Shape& s : shapes()) {
    const int64_t C = channels(s);
    const Tensor x = input(s, seed++, 2.0f, 0.5f);
    const Tensor residual = input(s, seed++);
    const Tensor own = cpu_stats(x), running = running_stats(C, seed++);
    for (const float eps : {1e-3f, 1e-5f})
      for (const bool relu : {false, true}) {
        expect_forward(vk, forward_case(x, own, C, eps, true, relu, nullptr));
        expect_forward(vk, forward_case(x, running, C, eps, false, relu, nullptr));
        expect_forward(vk, forward_case(x, own, C, eps, true, relu, &residual));
      }
  }
}

TEST(VulkanBatchNorm, ForwardPropagatesNaNAndInfinity) {
  TG_VULKAN_OR_SKIP(vk);
  const Shape s{9, 6};
  const Tensor x = special_input(s, 12);
  Tensor finite = input(s, 13);
  Tensor running = running_stats(6, 14);
  running.data<float>()[5] = NAN;  // a NaN mean of channel 5
  Tensor residual = input(s, 15);
  residual.data<float>()[5] = kInf;
  residual.data<float>()[6 + 5] = NAN;
  for (const bool relu : {false, true}) {
    expect_forward(vk, forward_case(x, cpu_stats(x), 6, 1e-3f, true, relu, nullptr));
    expect_forward(vk, forward_case(x, running_stats(6, 16), 6, 1e-3f, false, relu, &residual));
    expect_forward(vk, forward_case(finite, running, 6, 1e-3f, false, relu, nullptr));
  }
}

OpCase param_grad_case(const Tensor& x, const Tensor& stats, const Tensor& g, float eps, bool relu) {
  OpCase c;
  c.op = OpKind::BatchNormParamGrad;
  c.attrs.eps = eps;
  c.attrs.flags = relu ? kReluOutput : 0u;
  c.inputs = {x, stats, g};
  if (relu) {
    const int64_t C = channels(x.shape());
    c.inputs.push_back(param(C, 21, 1.0f));
    c.inputs.push_back(param(C, 22, 0.3f));
  }
  return c;
}

void expect_param_grad(const std::shared_ptr<const Backend>& vk, const OpCase& c) {
  const Shape& s = c.inputs[0].shape();
  SCOPED_TRACE("batch_norm_param_grad of " + s.str() + " eps " + std::to_string(c.attrs.eps) +
               (c.attrs.flags ? " relu" : ""));
  test_support::expect_same_as_cpu(c, vk, 1e-5, 1e-6 * std::sqrt(double(rows(s))));
}

TEST(VulkanBatchNorm, ParamGradMatchesTheCpu) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 200;
  for (const Shape& s : shapes()) {
    const int64_t C = channels(s);
    const Tensor x = input(s, seed++, 1.5f, 0.25f), g = input(s, seed++);
    const Tensor own = cpu_stats(x), running = running_stats(C, seed++);
    for (const float eps : {1e-3f, 1e-5f})
      for (const bool relu : {false, true}) {
        expect_param_grad(vk, param_grad_case(x, own, g, eps, relu));
        expect_param_grad(vk, param_grad_case(x, running, g, eps, relu));
      }
  }
}

TEST(VulkanBatchNorm, ParamGradPropagatesNaNAndInfinity) {
  TG_VULKAN_OR_SKIP(vk);
  for (const Shape& s : {Shape{7, 6}, Shape{1000, 6}}) {
    const Tensor x = special_input(s, 17);
    Tensor g = input(s, 18);
    g.data<float>()[5] = NAN;
    g.data<float>()[6 + 5] = kInf;
    for (const bool relu : {false, true}) {
      expect_param_grad(vk, param_grad_case(x, cpu_stats(x), g, 1e-3f, relu));
      expect_param_grad(vk, param_grad_case(x, running_stats(6, 19), g, 1e-3f, relu));
    }
  }
}

// No rows: the CPU's statistics are 0 (not 0 / 0), and so are its sums.
TEST(VulkanBatchNorm, NoRowsGiveZeros) {
  TG_VULKAN_OR_SKIP(vk);
  const Tensor x = vec({}, Shape{0, 5}), g = vec({}, Shape{0, 5});
  test_support::expect_same_as_cpu(stats_case(x), vk, 0.0, 0.0);
  test_support::expect_same_as_cpu(param_grad_case(x, running_stats(5, 30), g, 1e-3f, true), vk, 0.0, 0.0);
}

OpCase backward_case(const Tensor& x, const Tensor& stats, const Tensor& g, float eps, bool own, bool relu) {
  const int64_t C = channels(x.shape());
  const Tensor gamma = param(C, 21, 1.0f), beta = param(C, 22, 0.3f);
  OpCase pg = param_grad_case(x, stats, g, eps, relu);
  pg.inputs = relu ? std::vector<Tensor>{x, stats, g, gamma, beta} : std::vector<Tensor>{x, stats, g};
  OpCase c;
  c.op = OpKind::BatchNormBackward;
  c.attrs.eps = eps;
  c.attrs.own_stats = own;
  c.attrs.flags = relu ? kReluOutput : 0u;
  c.inputs = {x, stats, gamma, g, cpu_output(pg, Shape{2, C})};
  if (relu) c.inputs.push_back(beta);
  return c;
}

// The largest |g k| + |x a| + |b| of the backward's dx = x a + g k + b.
double backward_scale(const OpCase& c) {
  const Tensor &x = c.inputs[0], &st = c.inputs[1], &gamma = c.inputs[2], &g = c.inputs[3], &sums = c.inputs[4];
  const int64_t C = gamma.numel(), R = x.numel() / C;
  double m = 1.0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t ch = i % C;
    const double inv = 1.0 / std::sqrt(double(st.data<float>()[C + ch]) + c.attrs.eps);
    const double k = gamma.data<float>()[ch] * inv;
    double a = 0, b = 0;
    if (c.attrs.own_stats) {
      a = -k * inv * sums.data<float>()[ch] / double(R);
      b = -k * sums.data<float>()[C + ch] / double(R) - a * st.data<float>()[ch];
    }
    const double v = std::fabs(g.data<float>()[i] * k) + std::fabs(x.data<float>()[i] * a) + std::fabs(b);
    if (std::isfinite(v)) m = std::max(m, v);
  }
  return m;
}

void expect_backward(const std::shared_ptr<const Backend>& vk, const OpCase& c) {
  SCOPED_TRACE("batch_norm_backward of " + c.inputs[0].shape().str() + " eps " + std::to_string(c.attrs.eps) +
               (c.attrs.own_stats ? " own" : " running") + (c.attrs.flags ? " relu" : ""));
  test_support::expect_same_as_cpu(c, vk, 1e-5, 1e-5 * backward_scale(c));
}

TEST(VulkanBatchNorm, BackwardMatchesTheCpu) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 300;
  for (const Shape& s : shapes()) {
    const int64_t C = channels(s);
    const Tensor x = input(s, seed++, 1.5f, 0.25f), g = input(s, seed++);
    const Tensor own = cpu_stats(x), running = running_stats(C, seed++);
    for (const float eps : {1e-3f, 1e-5f})
      for (const bool relu : {false, true}) {
        expect_backward(vk, backward_case(x, own, g, eps, true, relu));
        expect_backward(vk, backward_case(x, running, g, eps, false, relu));
      }
  }
}

TEST(VulkanBatchNorm, BackwardPropagatesNaNAndInfinity) {
  TG_VULKAN_OR_SKIP(vk);
  const Shape s{7, 6};
  const Tensor x = special_input(s, 23);
  Tensor g = input(s, 24);
  g.data<float>()[5] = NAN;
  g.data<float>()[6 + 5] = kInf;
  for (const bool relu : {false, true}) {
    expect_backward(vk, backward_case(x, cpu_stats(x), g, 1e-3f, true, relu));
    expect_backward(vk, backward_case(x, running_stats(6, 25), g, 1e-3f, false, relu));
    expect_backward(vk, backward_case(input(s, 26), running_stats(6, 25), g, 1e-3f, true, relu));
  }
}

TEST(VulkanBatchNorm, RunsTwiceToTheSameBits) {
  TG_VULKAN_OR_SKIP(vk);
  for (const Shape& s : {Shape{1000, 64}, Shape{4, 6, 6, 8}, Shape{5000, 3}}) {
    const Tensor x = input(s, 400, 1.0f, 2.0f), g = input(s, 401);
    const Tensor stats = cpu_stats(x);
    expect_deterministic(stats_case(x), vk);
    expect_deterministic(param_grad_case(x, stats, g, 1e-3f, true), vk);
    expect_deterministic(param_grad_case(x, stats, g, 1e-3f, false), vk);
    expect_deterministic(forward_case(x, stats, channels(s), 1e-3f, true, true, nullptr), vk);
    expect_deterministic(backward_case(x, stats, g, 1e-3f, true, true), vk);
  }
}

// Dense, a normalization, ReLU (on Vulkan the ReLU folds into the BatchNorm
// and its gradient into both backward ops: kReluOutput), Dense + softmax.
nn::Sequential normalized_mlp(Device device, bool batch_norm) {
  nn::clear_session();
  manual_seed(7);
  nn::Sequential m({12});
  // No bias before a batch norm: its gradient is 0 up to rounding, which Adam
  // would scale into steps of the learning rate, different on each backend.
  m.add(nn::Dense(16, "linear", !batch_norm));
  if (batch_norm) m.add(nn::BatchNormalization(0.9f));
  else m.add(nn::LayerNormalization());
  m.add(nn::ActivationLayer("relu"));
  m.add(nn::Dense(4, "softmax"));
  m.compile(OptimizerSpec::adam(1e-2f), "sparse_categorical_crossentropy", {"accuracy"}, device);
  return m;
}

void expect_model_as_on_the_cpu(const std::shared_ptr<const Backend>& vk, bool batch_norm) {
  constexpr double kRtol = 2e-4, kAtol = 1e-5;
  const Tensor x = input(Shape{60, 12}, 500, 1.0f, 0.5f);
  std::vector<int32_t> ids(60);
  for (size_t r = 0; r < ids.size(); ++r) ids[r] = int32_t((r * 7 + 3) % 4);
  const Tensor y = Tensor::from_vector(ids, Shape{60});
  nn::FitOptions fo;
  fo.epochs = 2;
  fo.batch_size = 16;  // a short last batch of 12
  fo.shuffle = false;
  fo.verbose = 0;
  nn::Sequential cpu = normalized_mlp(Device::CPU, batch_norm), dev = normalized_mlp(vk->device(), batch_norm);
  ASSERT_EQ(all_weights(cpu), all_weights(dev));
  const nn::History hc = cpu.fit(x, y, fo), hd = dev.fit(x, y, fo);
  for (const char* k : {"loss", "accuracy"}) EXPECT_TRUE(test_support::close(hd[k], hc[k], kRtol, kAtol)) << k;
  // The weights include the moving mean and variance.
  EXPECT_TRUE(test_support::close(all_weights(dev), all_weights(cpu), kRtol, kAtol));
  // Inference: the moving statistics (own_stats false).
  EXPECT_TRUE(test_support::close(test_support::values(dev.predict(x, 7)), test_support::values(cpu.predict(x, 7)),
                                  kRtol, kAtol));
}

}  // namespace

TEST(VulkanBatchNorm, AModelWithBatchNormalizationTrainsAsOnTheCpu) {
  TG_VULKAN_OR_SKIP(vk);
  expect_model_as_on_the_cpu(vk, true);
}

// LayerNormalization is composed of ops (Builder::layer_norm) that all have
// Vulkan kernels.
TEST(VulkanBatchNorm, AModelWithLayerNormalizationTrainsAsOnTheCpu) {
  TG_VULKAN_OR_SKIP(vk);
  expect_model_as_on_the_cpu(vk, false);
}
