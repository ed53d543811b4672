// Eager modules of ag/nn/conv.h (Conv2d, BatchNorm1d, BatchNorm2d, LayerNorm,
// Embedding, MaxPool2d, AvgPool2d): outputs and gradients against PyTorch
// (tests/fixtures/module_reference.h, made by make_module_reference.py;
// parameters loaded by their PyTorch names with load_state_dict), the
// running statistics PyTorch's BatchNorm keeps, gradcheck of each forward
// wrt its input and parameters, state-dict names and order, default
// initialisations, the type registry, and the errors of bad inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "fixtures/module_reference.h"
#include "tensorgrad/ag/functional.h"
#include "tensorgrad/ag/gradcheck.h"
#include "tensorgrad/ag/nn/conv.h"
#include "tensorgrad/ag/nn/modules.h"
#include "tensorgrad/core/error.h"
#include "test_support.h"

using namespace tensorgrad;
namespace ag = tensorgrad::ag;
namespace agnn = tensorgrad::ag::nn;
namespace ref = tensorgrad_fixtures::modules;

namespace {

// Tolerance against the PyTorch reference: |got - want| <= kRel |want| + kAbs.
// The reference is computed in float64 from the very float32 values the test
// loads and rounded to float32 (error <= 2^-24 relative); tensorgrad computes
// in float32, each value a sum of at most ~50 products or a normalisation of
// O(1) values, so its rounding is a few float32 ulps of the largest partial
// sum: ~1e-7 relative for the O(1) values here (the largest seen, 9.5e-7, is
// on a conv weight gradient of magnitude ~5, i.e. 2e-7 relative; each
// check's worst error is recorded as a test property). 1e-5 relative + 1e-6
// absolute leaves a margin of ~10-50x over that, and stays far below any real
// mistake (a wrong element, tap, statistic or momentum moves values by >= 1e-3).
constexpr double kRel = 1e-5, kAbs = 1e-6;

template <size_t N>
ag::Tensor arr(const float (&values)[N], const Shape& shape, bool requires_grad = false) {
  EXPECT_EQ(int64_t(N), shape.numel()) << shape.str();
  return ag::tensor(std::span<const float>(values, N), shape, {DType::Float32, requires_grad});
}

template <size_t N>
void expect_close(const ag::Tensor& got, const float (&want)[N], const std::string& what) {
  ASSERT_TRUE(got.defined()) << what << ": undefined";
  ASSERT_EQ(got.numel(), int64_t(N)) << what << " " << got.shape().str();
  const std::vector<float> g = got.to_vector();
  double worst = 0;
  for (size_t i = 0; i < N; ++i) {
    const double err = std::fabs(double(g[i]) - double(want[i]));
    worst = std::max(worst, err);
    EXPECT_LE(err, kRel * std::fabs(double(want[i])) + kAbs)
        << what << "[" << i << "]: got " << g[i] << ", PyTorch " << want[i];
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", worst);
  ::testing::Test::RecordProperty(what + " max_abs_error", buf);
}

ag::Tensor int64_scalar(int64_t v) {
  tensorgrad::Tensor t = tensorgrad::Tensor::empty(Shape{}, DType::Int64);
  t.data<int64_t>()[0] = v;
  return ag::Tensor(t);
}

std::vector<std::string> keys(const agnn::StateDict& d) {
  std::vector<std::string> out;
  for (const auto& [n, t] : d) out.push_back(n);
  return out;
}

// gradcheck of m.forward wrt the input and the parameters `params` (the
// module's own handles): fn swaps the module's members for the copies
// gradcheck hands it, runs forward, and puts them back.
ag::GradcheckResult check_module(agnn::Module& m, const ag::Tensor& x, std::vector<ag::Tensor*> params,
                                 ag::GradcheckOptions options = {}) {
  std::vector<ag::Tensor> inputs{x};
  for (ag::Tensor* p : params) inputs.push_back(*p);
  auto fn = [&](std::span<const ag::Tensor> in) {
    std::vector<ag::Tensor> saved;
    for (size_t i = 0; i < params.size(); ++i) {
      saved.push_back(*params[i]);
      *params[i] = in[i + 1];
    }
    ag::Tensor y = m.forward(in[0]);
    for (size_t i = 0; i < params.size(); ++i) *params[i] = saved[i];
    return y;
  };
  return ag::gradcheck(fn, std::span<const ag::Tensor>(inputs), options);
}

// Uniform in [lo, hi], float32, requiring grad.
ag::Tensor uniform(const Shape& s, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  return ag::Tensor(test_support::uniform(s, rng, lo, hi), true);
}

// Distinct values 0.1 apart in a shuffled order (no ties within 2 * eps for max pooling).
ag::Tensor distinct(const Shape& s, uint32_t seed) {
  std::vector<float> v(size_t(s.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.1f * (float(i) - float(v.size()) / 2);
  std::mt19937 rng(seed);
  std::shuffle(v.begin(), v.end(), rng);
  return ag::tensor(std::span<const float>(v), s, {DType::Float32, true});
}

}  // namespace

// ---- against PyTorch ----

TEST(AgConvModules, Conv2dMatchesPyTorch) {
  {  // 3x3, stride 1, padding 1, with bias
    agnn::Conv2d m(ref::conv_basic_C, ref::conv_basic_F, 3, 1, 1, 1, true);
    agnn::StateDict sd;
    sd.insert("weight", arr(ref::conv_basic_weight, Shape{ref::conv_basic_F, ref::conv_basic_C, 3, 3}));
    sd.insert("bias", arr(ref::conv_basic_bias, Shape{ref::conv_basic_F}));
    EXPECT_TRUE(m.load_state_dict(sd).ok());
    ag::Tensor x = arr(ref::conv_basic_x, Shape{ref::conv_basic_N, ref::conv_basic_H, ref::conv_basic_W, ref::conv_basic_C}, true);
    ag::Tensor y = m(x);
    EXPECT_EQ(y.shape(), (Shape{ref::conv_basic_N, ref::conv_basic_Ho, ref::conv_basic_Wo, ref::conv_basic_F}));
    expect_close(y, ref::conv_basic_y, "conv_basic y");
    y.backward(arr(ref::conv_basic_w, y.shape()));
    expect_close(x.grad(), ref::conv_basic_grad_x, "conv_basic grad_x");
    EXPECT_EQ(m.weight.grad().shape(), (Shape{ref::conv_basic_F, ref::conv_basic_C, 3, 3}));
    expect_close(m.weight.grad(), ref::conv_basic_grad_weight, "conv_basic grad_weight");
    expect_close(m.bias.grad(), ref::conv_basic_grad_bias, "conv_basic grad_bias");
  }
  {  // 3x3, stride 2, padding 2, dilation 2, no bias, non-square image
    agnn::Conv2d m(ref::conv_strided_C, ref::conv_strided_F, 3, 2, 2, 2, false);
    agnn::StateDict sd;
    sd.insert("weight", arr(ref::conv_strided_weight, Shape{ref::conv_strided_F, ref::conv_strided_C, 3, 3}));
    EXPECT_TRUE(m.load_state_dict(sd).ok());
    ag::Tensor x = arr(ref::conv_strided_x,
                       Shape{ref::conv_strided_N, ref::conv_strided_H, ref::conv_strided_W, ref::conv_strided_C}, true);
    ag::Tensor y = m(x);
    EXPECT_EQ(y.shape(), (Shape{ref::conv_strided_N, ref::conv_strided_Ho, ref::conv_strided_Wo, ref::conv_strided_F}));
    expect_close(y, ref::conv_strided_y, "conv_strided y");
    y.backward(arr(ref::conv_strided_w, y.shape()));
    expect_close(x.grad(), ref::conv_strided_grad_x, "conv_strided grad_x");
    expect_close(m.weight.grad(), ref::conv_strided_grad_weight, "conv_strided grad_weight");
  }
}

// One BatchNorm case of the fixture: load, STEPS training forwards (the
// first checked with its gradients), the running statistics, then eval.
#define CHECK_BATCH_NORM_CASE(M, P, SHAPE)                                                                    \
  do {                                                                                                      \
    const Shape shape = SHAPE;                                                                              \
    const int64_t c = ref::P##_C;                                                                           \
    M m(c, double(ref::P##_eps), double(ref::P##_momentum));                                                \
    agnn::StateDict sd;                                                                                     \
    sd.insert("weight", arr(ref::P##_weight, Shape{c}));                                                    \
    sd.insert("bias", arr(ref::P##_bias, Shape{c}));                                                        \
    sd.insert("running_mean", arr(ref::P##_running_mean, Shape{c}));                                        \
    sd.insert("running_var", arr(ref::P##_running_var, Shape{c}));                                          \
    sd.insert("num_batches_tracked", int64_scalar(0));                                                      \
    const agnn::LoadResult loaded = m.load_state_dict(sd);                                                  \
    EXPECT_TRUE(loaded.ok()) << loaded.str();                                                               \
    m.train();                                                                                              \
    ag::Tensor x0 = arr(ref::P##_x0, shape, true);                                                          \
    ag::Tensor y0 = m(x0);                                                                                  \
    expect_close(y0, ref::P##_train_y, #P " train y");                                                     \
    y0.backward(arr(ref::P##_train_w, shape));                                                              \
    expect_close(x0.grad(), ref::P##_train_grad_x, #P " train grad_x");                                    \
    expect_close(m.weight.grad(), ref::P##_train_grad_weight, #P " train grad_weight");                    \
    expect_close(m.bias.grad(), ref::P##_train_grad_bias, #P " train grad_bias");                          \
    EXPECT_FALSE(m.running_mean.requires_grad());                                                           \
    m.zero_grad();                                                                                          \
    m(arr(ref::P##_x1, shape));                                                                             \
    m(arr(ref::P##_x2, shape));                                                                             \
    expect_close(m.running_mean, ref::P##_after_running_mean, #P " running_mean");                         \
    expect_close(m.running_var, ref::P##_after_running_var, #P " running_var");                            \
    EXPECT_EQ(m.num_batches_tracked.dtype(), DType::Int64);                                                 \
    EXPECT_EQ(m.num_batches_tracked.data().data<int64_t>()[0], ref::P##_num_batches_tracked);               \
    m.eval();                                                                                               \
    ag::Tensor xe = arr(ref::P##_eval_x, shape, true);                                                      \
    ag::Tensor ye = m(xe);                                                                                  \
    expect_close(ye, ref::P##_eval_y, #P " eval y");                                                       \
    ye.backward(arr(ref::P##_eval_w, shape));                                                               \
    expect_close(xe.grad(), ref::P##_eval_grad_x, #P " eval grad_x");                                      \
    expect_close(m.weight.grad(), ref::P##_eval_grad_weight, #P " eval grad_weight");                      \
    expect_close(m.bias.grad(), ref::P##_eval_grad_bias, #P " eval grad_bias");                            \
    /* evaluation leaves the running statistics alone */                                                    \
    expect_close(m.running_mean, ref::P##_after_running_mean, #P " running_mean after eval");              \
    EXPECT_EQ(m.num_batches_tracked.data().data<int64_t>()[0], ref::P##_num_batches_tracked);               \
  } while (0)

TEST(AgConvModules, BatchNorm1dMatchesPyTorchIncludingRunningStatistics) {
  CHECK_BATCH_NORM_CASE(agnn::BatchNorm1d, bn1d, (Shape{6, 3}));
}

TEST(AgConvModules, BatchNorm2dMatchesPyTorchIncludingRunningStatistics) {
  CHECK_BATCH_NORM_CASE(agnn::BatchNorm2d, bn2d, (Shape{2, 3, 4, 3}));
}

TEST(AgConvModules, LayerNormMatchesPyTorch) {
  agnn::LayerNorm m(5, double(ref::ln_eps));
  agnn::StateDict sd;
  sd.insert("weight", arr(ref::ln_weight, Shape{5}));
  sd.insert("bias", arr(ref::ln_bias, Shape{5}));
  EXPECT_TRUE(m.load_state_dict(sd).ok());
  ag::Tensor x = arr(ref::ln_x, Shape{2, 3, 5}, true);
  ag::Tensor y = m(x);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 5}));
  expect_close(y, ref::ln_y, "ln y");
  y.backward(arr(ref::ln_w, y.shape()));
  expect_close(x.grad(), ref::ln_grad_x, "ln grad_x");
  expect_close(m.weight.grad(), ref::ln_grad_weight, "ln grad_weight");
  expect_close(m.bias.grad(), ref::ln_grad_bias, "ln grad_bias");
}

TEST(AgConvModules, EmbeddingMatchesPyTorch) {
  agnn::Embedding m(ref::emb_V, ref::emb_D);
  agnn::StateDict sd;
  sd.insert("weight", arr(ref::emb_weight, Shape{ref::emb_V, ref::emb_D}));
  EXPECT_TRUE(m.load_state_dict(sd).ok());
  ag::Tensor ids = ag::tensor(std::span<const int32_t>(ref::emb_ids), Shape{2, 3});
  ag::Tensor y = m(ids);
  EXPECT_EQ(y.shape(), (Shape{2, 3, ref::emb_D}));
  expect_close(y, ref::emb_y, "emb y");
  y.backward(arr(ref::emb_w, y.shape()));
  expect_close(m.weight.grad(), ref::emb_grad_weight, "emb grad_weight");  // repeated ids add up
}

TEST(AgConvModules, PoolingMatchesPyTorch) {
  {
    agnn::MaxPool2d m(2);
    ag::Tensor x = arr(ref::maxpool_x, Shape{2, 5, 5, 2}, true);
    ag::Tensor y = m(x);
    EXPECT_EQ(y.shape(), (Shape{2, ref::maxpool_Ho, ref::maxpool_Wo, 2}));
    expect_close(y, ref::maxpool_y, "maxpool y");
    y.backward(arr(ref::maxpool_w, y.shape()));
    expect_close(x.grad(), ref::maxpool_grad_x, "maxpool grad_x");
  }
  {
    agnn::MaxPool2d m(3, 2, 1);
    ag::Tensor x = arr(ref::maxpool_pad_x, Shape{1, 5, 6, 2}, true);
    ag::Tensor y = m(x);
    EXPECT_EQ(y.shape(), (Shape{1, ref::maxpool_pad_Ho, ref::maxpool_pad_Wo, 2}));
    expect_close(y, ref::maxpool_pad_y, "maxpool_pad y");
    y.backward(arr(ref::maxpool_pad_w, y.shape()));
    expect_close(x.grad(), ref::maxpool_pad_grad_x, "maxpool_pad grad_x");
  }
  {
    agnn::AvgPool2d m(2, 2);
    ag::Tensor x = arr(ref::avgpool_x, Shape{2, 4, 4, 3}, true);
    ag::Tensor y = m(x);
    EXPECT_EQ(y.shape(), (Shape{2, ref::avgpool_Ho, ref::avgpool_Wo, 3}));
    expect_close(y, ref::avgpool_y, "avgpool y");
    y.backward(arr(ref::avgpool_w, y.shape()));
    expect_close(x.grad(), ref::avgpool_grad_x, "avgpool grad_x");
  }
  {  // PyTorch's count_include_pad = False
    agnn::AvgPool2d m(3, 2, 1);
    ag::Tensor x = arr(ref::avgpool_pad_x, Shape{1, 5, 5, 2}, true);
    ag::Tensor y = m(x);
    EXPECT_EQ(y.shape(), (Shape{1, ref::avgpool_pad_Ho, ref::avgpool_pad_Wo, 2}));
    expect_close(y, ref::avgpool_pad_y, "avgpool_pad y");
    y.backward(arr(ref::avgpool_pad_w, y.shape()));
    expect_close(x.grad(), ref::avgpool_pad_grad_x, "avgpool_pad grad_x");
  }
}

// ---- gradcheck at tiny shapes ----

TEST(AgConvModules, GradcheckConv2d) {
  ag::manual_seed(3);
  agnn::Conv2d m(2, 3, 3, 1, 1);
  auto r = check_module(m, uniform(Shape{2, 4, 4, 2}, 1), {&m.weight, &m.bias});
  EXPECT_TRUE(r.ok) << r.message;
  agnn::Conv2d s(2, 2, 2, 2, 1, 2, false);
  r = check_module(s, uniform(Shape{1, 5, 4, 2}, 2), {&s.weight});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(AgConvModules, GradcheckBatchNormTrainingAndEval) {
  for (bool training : {true, false}) {
    agnn::BatchNorm2d m(3);
    {
      ag::NoGradGuard g;
      m.weight.copy_(ag::tensor({0.8f, 1.2f, -0.5f}, Shape{3}));
      m.bias.copy_(ag::tensor({0.1f, -0.3f, 0.2f}, Shape{3}));
      m.running_mean.copy_(ag::tensor({0.1f, -0.2f, 0.0f}, Shape{3}));
      m.running_var.copy_(ag::tensor({0.9f, 1.1f, 1.5f}, Shape{3}));
    }
    m.train(training);
    auto r = check_module(m, uniform(Shape{2, 2, 3, 3}, 4), {&m.weight, &m.bias});
    EXPECT_TRUE(r.ok) << "training " << training << ": " << r.message;
    agnn::BatchNorm1d b(2);
    b.train(training);
    r = check_module(b, uniform(Shape{5, 2}, 5), {&b.weight, &b.bias});
    EXPECT_TRUE(r.ok) << "training " << training << ": " << r.message;
  }
}

TEST(AgConvModules, GradcheckLayerNormEmbeddingAndPooling) {
  agnn::LayerNorm ln(4);
  {
    ag::NoGradGuard g;
    ln.weight.copy_(ag::tensor({0.8f, 1.2f, -0.5f, 1.0f}, Shape{4}));
    ln.bias.copy_(ag::tensor({0.1f, -0.3f, 0.2f, 0.0f}, Shape{4}));
  }
  auto r = check_module(ln, uniform(Shape{2, 3, 4}, 6), {&ln.weight, &ln.bias});
  EXPECT_TRUE(r.ok) << r.message;

  ag::manual_seed(7);
  agnn::Embedding emb(5, 3);
  const ag::Tensor ids = ag::tensor(std::vector<int32_t>{4, 0, 4, 2}, Shape{2, 2});
  auto fn = [&](std::span<const ag::Tensor> in) {
    const ag::Tensor saved = emb.weight;
    emb.weight = in[0];
    ag::Tensor y = emb(ids);
    emb.weight = saved;
    return y;
  };
  r = ag::gradcheck(fn, {emb.weight});
  EXPECT_TRUE(r.ok) << r.message;

  agnn::MaxPool2d mp(2, 1, 1);
  r = check_module(mp, distinct(Shape{1, 3, 3, 2}, 8), {});
  EXPECT_TRUE(r.ok) << r.message;
  agnn::AvgPool2d ap(3, 2, 1);
  r = check_module(ap, uniform(Shape{1, 4, 5, 2}, 9), {});
  EXPECT_TRUE(r.ok) << r.message;
}

// ---- names, layouts, initialisation, registry ----

TEST(AgConvModules, StateDictNamesAndOrderArePyTorchs) {
  using V = std::vector<std::string>;
  EXPECT_EQ(keys(agnn::Conv2d(3, 4, 3).state_dict()), (V{"weight", "bias"}));
  EXPECT_EQ(keys(agnn::Conv2d(3, 4, 3, 1, 0, 1, false).state_dict()), (V{"weight"}));
  agnn::BatchNorm2d bn(4);
  EXPECT_EQ(keys(bn.state_dict()), (V{"weight", "bias", "running_mean", "running_var", "num_batches_tracked"}));
  EXPECT_EQ(bn.parameters().size(), 2u);
  EXPECT_EQ(bn.buffers().size(), 3u);
  EXPECT_EQ(bn.num_batches_tracked.dtype(), DType::Int64);
  EXPECT_EQ(bn.num_batches_tracked.shape(), Shape{});
  EXPECT_EQ(bn.weight.to_vector(), std::vector<float>(4, 1.0f));
  EXPECT_EQ(bn.bias.to_vector(), std::vector<float>(4, 0.0f));
  EXPECT_EQ(bn.running_mean.to_vector(), std::vector<float>(4, 0.0f));
  EXPECT_EQ(bn.running_var.to_vector(), std::vector<float>(4, 1.0f));
  EXPECT_EQ(keys(agnn::BatchNorm1d(4, 1e-5, 0.1, false, true).state_dict()),
            (V{"running_mean", "running_var", "num_batches_tracked"}));
  EXPECT_EQ(keys(agnn::BatchNorm1d(4, 1e-5, 0.1, true, false).state_dict()), (V{"weight", "bias"}));
  EXPECT_EQ(keys(agnn::LayerNorm(5).state_dict()), (V{"weight", "bias"}));
  EXPECT_TRUE(agnn::LayerNorm(5, 1e-5, false).state_dict().empty());
  EXPECT_EQ(keys(agnn::Embedding(7, 3).state_dict()), (V{"weight"}));
  EXPECT_TRUE(agnn::MaxPool2d(2).state_dict().empty());
  EXPECT_TRUE(agnn::AvgPool2d(2).state_dict().empty());
  // Nested: dotted names as PyTorch's.
  agnn::Sequential seq{std::make_shared<agnn::Conv2d>(1, 2, 3), std::make_shared<agnn::BatchNorm2d>(2)};
  EXPECT_EQ(keys(seq.state_dict()), (V{"0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean",
                                       "1.running_var", "1.num_batches_tracked"}));
}

TEST(AgConvModules, DefaultInitialisationsArePyTorchs) {
  ag::manual_seed(11);
  agnn::Conv2d conv(3, 8, 3);
  EXPECT_EQ(conv.weight.shape(), (Shape{8, 3, 3, 3}));
  EXPECT_EQ(conv.bias.shape(), (Shape{8}));
  const float bound = 1.0f / std::sqrt(27.0f);
  float lo = 1, hi = -1;
  for (float w : conv.weight.to_vector()) {
    EXPECT_LE(std::fabs(w), bound);
    lo = std::min(lo, w), hi = std::max(hi, w);
  }
  EXPECT_LT(lo, -0.8f * bound);  // 216 draws spread over the range
  EXPECT_GT(hi, 0.8f * bound);
  for (float b : conv.bias.to_vector()) EXPECT_LE(std::fabs(b), bound);
  EXPECT_TRUE(conv.weight.requires_grad());

  agnn::Embedding emb(200, 50);
  const std::vector<float> v = emb.weight.to_vector();
  const double mean = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
  double var = 0;
  for (float x : v) var += (x - mean) * (x - mean);
  var /= double(v.size());
  EXPECT_NEAR(mean, 0.0, 0.05);  // N(0, 1): 10000 draws
  EXPECT_NEAR(std::sqrt(var), 1.0, 0.05);

  agnn::LayerNorm ln(3);
  EXPECT_EQ(ln.weight.to_vector(), std::vector<float>(3, 1.0f));
  EXPECT_EQ(ln.bias.to_vector(), std::vector<float>(3, 0.0f));
}

TEST(AgConvModules, ConfigRebuildsThroughTheRegistry) {
  const std::vector<std::shared_ptr<agnn::Module>> modules{
      std::make_shared<agnn::Conv2d>(3, 4, 5, 2, 1, 2, false),
      std::make_shared<agnn::BatchNorm1d>(6, 1e-3, 0.2, false, true),
      std::make_shared<agnn::BatchNorm2d>(7, 1e-4, 0.05, true, false),
      std::make_shared<agnn::LayerNorm>(8, 1e-6, false),
      std::make_shared<agnn::Embedding>(9, 10),
      std::make_shared<agnn::MaxPool2d>(3, 2, 1),
      std::make_shared<agnn::AvgPool2d>(2)};
  for (const auto& m : modules) {
    const agnn::ModuleConfig c = m->config();
    std::shared_ptr<agnn::Module> rebuilt = agnn::module_from_config(c);
    EXPECT_EQ(std::string(rebuilt->type()), std::string(m->type()));
    EXPECT_EQ(rebuilt->config().values(), c.values()) << m->type();
    EXPECT_EQ(keys(rebuilt->state_dict()), keys(m->state_dict())) << m->type();
  }
  const agnn::ModuleConfig conv = modules[0]->config();
  EXPECT_EQ(conv.get_int("in_channels"), 3);
  EXPECT_EQ(conv.get_int("out_channels"), 4);
  EXPECT_EQ(conv.get_int("kernel_size"), 5);
  EXPECT_EQ(conv.get_int("dilation"), 2);
  EXPECT_FALSE(conv.get_bool("bias"));
  EXPECT_DOUBLE_EQ(modules[1]->config().get_double("momentum"), 0.2);
  EXPECT_EQ(modules[6]->config().get_int("stride"), 2);  // PyTorch's stride = kernel_size
  EXPECT_FALSE(modules[6]->config().get_bool("count_include_pad"));
}

// ---- behaviour beyond the fixture ----

TEST(AgConvModules, BatchNormWithoutRunningStatisticsUsesTheBatchInEval) {
  agnn::BatchNorm1d m(2, 1e-5, 0.1, true, false);
  m.eval();
  ag::Tensor x = ag::tensor({1, 10, 2, 20, 3, 30, 4, 40}, Shape{4, 2});
  const std::vector<float> y = m(x).to_vector();
  for (int ch = 0; ch < 2; ++ch) {
    double s = 0;
    for (int r = 0; r < 4; ++r) s += y[size_t(r * 2 + ch)];
    EXPECT_NEAR(s, 0.0, 1e-5);
  }
  // The {N, L, C} form of BatchNorm1d: statistics over N and L.
  agnn::BatchNorm1d seq(3);
  EXPECT_EQ(seq(ag::randn(Shape{2, 5, 3})).shape(), (Shape{2, 5, 3}));
  EXPECT_EQ(seq.num_batches_tracked.data().data<int64_t>()[0], 1);
}

TEST(AgConvModules, BadInputsThrowNamingTheModuleAndShapes) {
  agnn::Conv2d conv(3, 4, 3);
  EXPECT_TRUE(test_support::throws<ShapeError>([&] { conv(ag::zeros(Shape{2, 5, 5, 4})); },
                                               {"Conv2d", "{N, H, W, 3}", "{2, 5, 5, 4}"}));
  EXPECT_TRUE(test_support::throws<ShapeError>([&] { conv(ag::zeros(Shape{5, 5, 3})); }, {"Conv2d", "{5, 5, 3}"}));
  EXPECT_TRUE(test_support::throws<ShapeError>([&] { conv(ag::zeros(Shape{1, 2, 5, 3})); },
                                               {"Conv2d", "{1, 2, 5, 3}", "smaller", "3x3"}));
  EXPECT_TRUE(test_support::throws<ValueError>([] { agnn::Conv2d(3, 4, 0); }, {"Conv2d", "kernel_size", ">= 1"}));
  EXPECT_TRUE(test_support::throws<ValueError>([] { agnn::Conv2d(0, 4, 3); }, {"Conv2d", "in_channels"}));
  EXPECT_TRUE(test_support::throws<ValueError>([] { agnn::Conv2d(3, 4, 3, 1, -1); }, {"Conv2d", "padding"}));

  agnn::BatchNorm2d bn(3);
  EXPECT_TRUE(test_support::throws<ShapeError>([&] { bn(ag::zeros(Shape{4, 3})); }, {"BatchNorm2d", "{4, 3}"}));
  EXPECT_TRUE(test_support::throws<ShapeError>([&] { bn(ag::zeros(Shape{2, 4, 4, 5})); },
                                               {"BatchNorm2d", "3 channels", "{2, 4, 4, 5}"}));
  agnn::BatchNorm1d bn1(3);
  EXPECT_TRUE(test_support::throws<ShapeError>([&] { bn1(ag::zeros(Shape{2, 2, 2, 3})); },
                                               {"BatchNorm1d", "{2, 2, 2, 3}"}));
  EXPECT_TRUE(test_support::throws<ValueError>([&] { bn1(ag::zeros(Shape{1, 3})); },
                                               {"BatchNorm1d", "more than 1 value per channel", "{1, 3}"}));
  EXPECT_EQ(bn1.num_batches_tracked.data().data<int64_t>()[0], 0);  // nothing updated
  bn1.eval();
  EXPECT_EQ(bn1(ag::ones(Shape{1, 3})).shape(), (Shape{1, 3}));  // one row is fine in eval
  EXPECT_TRUE(test_support::throws<ValueError>([] { agnn::BatchNorm1d(0); }, {"BatchNorm1d", "num_features"}));
  EXPECT_TRUE(test_support::throws<ValueError>([] { agnn::BatchNorm2d(3, 0.0); }, {"BatchNorm2d", "eps"}));
  EXPECT_TRUE(test_support::throws<ValueError>([] { agnn::BatchNorm2d(3, 1e-5, 1.5); }, {"BatchNorm2d", "momentum"}));

  agnn::LayerNorm ln(4);
  EXPECT_TRUE(test_support::throws<ShapeError>([&] { ln(ag::zeros(Shape{2, 5})); }, {"LayerNorm", "{..., 4}", "{2, 5}"}));
  EXPECT_TRUE(test_support::throws<ValueError>([] { agnn::LayerNorm(4, -1.0); }, {"LayerNorm", "eps"}));

  agnn::Embedding emb(6, 2);
  EXPECT_TRUE(test_support::throws<IndexError>([&] { emb(ag::tensor(std::vector<int32_t>{1, 6}, Shape{2})); },
                                               {"6", "[0, 6)"}));
  EXPECT_TRUE(test_support::throws<IndexError>([&] { emb(ag::tensor(std::vector<int32_t>{-1}, Shape{1})); },
                                               {"-1", "[0, 6)"}));
  EXPECT_TRUE(test_support::throws<TypeError>([&] { emb(ag::zeros(Shape{2})); }, {"Embedding", "int32", "float32"}));

  agnn::MaxPool2d mp(3);
  EXPECT_TRUE(test_support::throws<ShapeError>([&] { mp(ag::zeros(Shape{4, 4, 2})); }, {"MaxPool2d", "{4, 4, 2}"}));
  EXPECT_TRUE(test_support::throws<ShapeError>([&] { mp(ag::zeros(Shape{1, 2, 4, 2})); },
                                               {"MaxPool2d", "{1, 2, 4, 2}", "smaller"}));
  EXPECT_TRUE(test_support::throws<ValueError>([] { agnn::MaxPool2d(2, 2, 2); }, {"MaxPool2d", "half"}));
  EXPECT_TRUE(test_support::throws<ValueError>([] { agnn::AvgPool2d(0); }, {"AvgPool2d", "kernel_size"}));
  agnn::AvgPool2d ap(2);
  EXPECT_TRUE(test_support::throws<ShapeError>([&] { ap(ag::zeros(Shape{2, 2})); }, {"AvgPool2d", "{2, 2}"}));
}
