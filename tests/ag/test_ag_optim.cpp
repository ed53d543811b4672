// tensorgrad::ag::optim: torch.optim's optimizers, schedulers and gradient
// clipping on the graph engine's optimizer kernels (ag/optim.h).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "fixtures/ag_optim_reference.h"
#include "tensorgrad/ag/functional.h"
#include "tensorgrad/ag/nn/modules.h"
#include "tensorgrad/ag/optim.h"
#include "tensorgrad/tensorgrad.h"
#include "test_support.h"

namespace {

namespace ag = tensorgrad::ag;
namespace optim = tensorgrad::ag::optim;
namespace ref = tensorgrad_fixtures::ag_optim;
using tensorgrad::Shape;
using tensorgrad::ValueError;
using test_support::throws;

constexpr double kPi = 3.14159265358979323846;

ag::Tensor param(std::span<const float> v, const Shape& s) {
  return ag::tensor(v, s, {.requires_grad = true});
}

// ---------------------------------------------------------------- against torch.optim

struct Made {
  std::unique_ptr<optim::Optimizer> opt;
  std::unique_ptr<optim::LRScheduler> sched;
};
using Factory = std::function<Made(const ag::Tensor& w, const ag::Tensor& b)>;

struct Case {
  std::string name;
  Factory make;
  std::span<const float> weight, bias;
};

std::vector<optim::ParamGroup> two_groups(const ag::Tensor& w, const ag::Tensor& b) {
  std::vector<optim::ParamGroup> groups(2);
  groups[0].params = {w};
  groups[1].params = {b};
  return groups;
}

#define TG_CASE(NAME, ...) \
  Case { #NAME, [](const ag::Tensor& w, const ag::Tensor& b) -> Made { __VA_ARGS__ }, ref::NAME##_weight, ref::NAME##_bias }

std::vector<Case> cases() {
  return {
      TG_CASE(sgd_plain, return {std::make_unique<optim::SGD>(std::vector{w, b}, 0.1), nullptr};),
      TG_CASE(sgd_momentum, return {std::make_unique<optim::SGD>(std::vector{w, b}, 0.1, 0.9), nullptr};),
      TG_CASE(sgd_nesterov,
              return {std::make_unique<optim::SGD>(std::vector{w, b}, 0.1, 0.9, 0.0, 0.0, true), nullptr};),
      TG_CASE(sgd_dampening, return {std::make_unique<optim::SGD>(std::vector{w, b}, 0.1, 0.9, 0.5), nullptr};),
      TG_CASE(sgd_weight_decay,
              return {std::make_unique<optim::SGD>(std::vector{w, b}, 0.1, 0.9, 0.0, 0.1), nullptr};),
      TG_CASE(adam, return {std::make_unique<optim::Adam>(std::vector{w, b}, 0.01), nullptr};),
      TG_CASE(adam_weight_decay,
              return {std::make_unique<optim::Adam>(std::vector{w, b}, 0.01, std::array{0.8, 0.99}, 1e-8, 0.1),
                      nullptr};),
      TG_CASE(adamw, return {std::make_unique<optim::AdamW>(std::vector{w, b}, 0.01), nullptr};),
      TG_CASE(adamw_weight_decay,
              return {std::make_unique<optim::AdamW>(std::vector{w, b}, 0.01, std::array{0.9, 0.999}, 1e-8, 0.5),
                      nullptr};),
      TG_CASE(rmsprop, return {std::make_unique<optim::RMSprop>(std::vector{w, b}, 0.01), nullptr};),
      TG_CASE(rmsprop_centered,
              return {std::make_unique<optim::RMSprop>(std::vector{w, b}, 0.01, 0.9, 1e-8, 0.0, 0.0, true), nullptr};),
      TG_CASE(rmsprop_momentum,
              return {std::make_unique<optim::RMSprop>(std::vector{w, b}, 0.01, 0.9, 1e-3, 0.1, 0.5), nullptr};),
      TG_CASE(sgd_two_groups, {
        auto groups = two_groups(w, b);
        groups[1].lr = 0.01;
        return {std::make_unique<optim::SGD>(groups, 0.1, 0.9), nullptr};
      }),
      TG_CASE(adam_two_groups, {
        auto groups = two_groups(w, b);
        groups[0].lr = 0.02;
        groups[0].weight_decay = 0.1;
        return {std::make_unique<optim::Adam>(groups, 0.01), nullptr};
      }),
      TG_CASE(sgd_step_lr, {
        auto opt = std::make_unique<optim::SGD>(std::vector{w, b}, 0.1, 0.9);
        auto sched = std::make_unique<optim::StepLR>(*opt, 2, 0.5);
        return {std::move(opt), std::move(sched)};
      }),
  };
}
#undef TG_CASE

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  for (const Case& c : cases()) names.push_back(c.name);
  return names;
}

// The kernels compute in float32 (gradients, moments, update) and read the
// hyper-parameters as float32; the reference is float64 torch rounded to
// float32. Three steps accumulate a few float32 roundings of values of order
// 1 (about 1e-7 each), and RMSprop's centered variance v - a^2 cancels about
// one digit, so 1e-5 relative (plus 1e-7 absolute for values near 0) holds
// every case with room, and still catches any wrong formula (a mode's effect
// on the first steps is 1e-3 relative or more).
::testing::AssertionResult matches(const ag::Tensor& t, std::span<const float> want, int step, const char* what) {
  const std::vector<float> got = t.to_vector();
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], r = want[step * got.size() + i];
    if (!(std::fabs(g - r) <= 1e-5 * std::fabs(r) + 1e-7))
      return ::testing::AssertionFailure() << "step " << step + 1 << ": " << what << "[" << i << "] is " << g
                                           << ", torch " << r;
  }
  return ::testing::AssertionSuccess();
}

class AgOptimReference : public ::testing::TestWithParam<std::string> {};

TEST_P(AgOptimReference, ThreeStepsMatchTorch) {
  Case c;
  for (const Case& k : cases())
    if (k.name == GetParam()) c = k;
  ag::Tensor w = param(ref::weight0, Shape{2, 3}), b = param(ref::bias0, Shape{2});
  const ag::Tensor x = ag::tensor(ref::x, Shape{4, 3}), y = ag::tensor(ref::y, Shape{4, 2});
  Made m = c.make(w, b);
  for (int step = 0; step < 3; ++step) {
    m.opt->zero_grad();
    ag::mse_loss(ag::linear(x, w, b), y).backward();
    m.opt->step();
    if (m.sched) m.sched->step();
    EXPECT_TRUE(matches(w, c.weight, step, "weight"));
    EXPECT_TRUE(matches(b, c.bias, step, "bias"));
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, AgOptimReference, ::testing::ValuesIn(case_names()),
                         [](const auto& info) { return info.param; });

// ---------------------------------------------------------------- optimizer behaviour

TEST(AgOptim, ParametersWithoutGradAreSkipped) {
  ag::Tensor a = ag::ones(Shape{3}, {.requires_grad = true}), b = ag::ones(Shape{2}, {.requires_grad = true});
  optim::Adam opt({a, b}, 0.1);
  ag::sum(a * 2.0f).backward();
  const uint64_t va = a.version(), vb = b.version();
  opt.step();
  EXPECT_EQ(b.to_vector(), (std::vector<float>{1, 1}));
  for (float v : a.to_vector()) EXPECT_NEAR(v, 0.9f, 1e-6f);  // Adam's first step: lr sign(g)
  EXPECT_GT(a.version(), va);
  EXPECT_EQ(b.version(), vb);
  const ag::nn::StateDict sd = opt.state_dict();
  EXPECT_TRUE(sd.contains("state.0.exp_avg"));
  EXPECT_FALSE(sd.contains("state.1.step"));
  EXPECT_EQ(sd.at("state.0.step").dtype(), tensorgrad::DType::Int64);
  EXPECT_EQ(sd.at("state.0.step").shape(), Shape{});
  EXPECT_EQ(sd.at("state.0.step").data().data<int64_t>()[0], 1);
}

TEST(AgOptim, ZeroGradSetsToNoneOrZeroes) {
  ag::Tensor a = ag::ones(Shape{2}, {.requires_grad = true});
  optim::SGD opt({a}, 0.1);
  ag::sum(a).backward();
  opt.zero_grad(false);
  ASSERT_TRUE(a.grad().defined());
  EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{0, 0}));
  opt.zero_grad();
  EXPECT_FALSE(a.grad().defined());
}

TEST(AgOptim, GroupOptionsChangeBetweenSteps) {
  ag::Tensor a = ag::ones(Shape{2}, {.requires_grad = true});
  optim::SGD opt({a}, 0.5);
  ASSERT_EQ(opt.param_groups().size(), 1u);
  EXPECT_EQ(*opt.param_groups()[0].lr, 0.5);
  EXPECT_EQ(*opt.param_groups()[0].momentum, 0.0);
  EXPECT_FALSE(opt.param_groups()[0].betas.has_value());
  ag::sum(a).backward();
  opt.step();
  EXPECT_EQ(a.to_vector(), (std::vector<float>{0.5f, 0.5f}));
  opt.param_groups()[0].lr = 0.25;
  opt.step();
  EXPECT_EQ(a.to_vector(), (std::vector<float>{0.25f, 0.25f}));
  opt.param_groups()[0].lr = -1.0;
  EXPECT_TRUE(throws<ValueError>([&] { opt.step(); }, {"Invalid learning rate: -1"}));
}

TEST(AgOptim, AddParamGroupTakesDefaults) {
  ag::Tensor a = ag::ones(Shape{2}, {.requires_grad = true}), b = ag::ones(Shape{1}, {.requires_grad = true});
  optim::RMSprop opt({a}, 0.02, 0.9);
  optim::ParamGroup g({b});
  g.lr = 0.5;
  opt.add_param_group(g);
  ASSERT_EQ(opt.param_groups().size(), 2u);
  EXPECT_EQ(*opt.param_groups()[1].lr, 0.5);
  EXPECT_EQ(*opt.param_groups()[1].alpha, 0.9);
  EXPECT_EQ(*opt.param_groups()[1].centered, false);
  EXPECT_TRUE(throws<ValueError>([&] { opt.add_param_group(optim::ParamGroup({a})); },
                                 {"some parameters appear in more than one parameter group"}));
}

TEST(AgOptim, BadSettingsAreValueErrors) {
  ag::Tensor a = ag::ones(Shape{2}, {.requires_grad = true});
  const std::vector<ag::Tensor> p{a};
  EXPECT_TRUE(throws<ValueError>([&] { optim::SGD(p, -0.1); }, {"Invalid learning rate: -0.1"}));
  EXPECT_TRUE(throws<ValueError>([&] { optim::SGD(p, 0.1, -0.5); }, {"Invalid momentum value: -0.5"}));
  EXPECT_TRUE(throws<ValueError>([&] { optim::SGD(p, 0.1, 0.9, 0, -1); }, {"Invalid weight_decay value: -1"}));
  EXPECT_TRUE(throws<ValueError>([&] { optim::SGD(p, 0.1, 0.0, 0.0, 0.0, true); },
                                 {"Nesterov momentum requires a momentum and zero dampening"}));
  EXPECT_TRUE(throws<ValueError>([&] { optim::SGD(p, 0.1, 0.9, 0.1, 0.0, true); },
                                 {"Nesterov momentum requires a momentum and zero dampening"}));
  EXPECT_TRUE(throws<ValueError>([&] { optim::Adam(p, 1e-3, {1.0, 0.999}); }, {"Invalid beta parameter at index 0: 1"}));
  EXPECT_TRUE(throws<ValueError>([&] { optim::AdamW(p, 1e-3, {0.9, -0.1}); },
                                 {"Invalid beta parameter at index 1: -0.1"}));
  EXPECT_TRUE(throws<ValueError>([&] { optim::Adam(p, 1e-3, {0.9, 0.999}, -1e-8); }, {"Invalid epsilon value: -1e-08"}));
  EXPECT_TRUE(throws<ValueError>([&] { optim::RMSprop(p, 0.01, -0.5); }, {"Invalid alpha value: -0.5"}));
  EXPECT_TRUE(throws<ValueError>([&] { optim::RMSprop(p, 0.01, 0.9, -1.0); }, {"Invalid epsilon value: -1"}));
  EXPECT_TRUE(throws<ValueError>([&] { optim::Adam(std::vector<ag::Tensor>{}); },
                                 {"optimizer got an empty parameter list"}));
  EXPECT_TRUE(throws<ValueError>([&] { optim::SGD(std::vector<optim::ParamGroup>{}, 0.1); },
                                 {"optimizer got an empty parameter list"}));
  const ag::Tensor frozen = ag::ones(Shape{3, 2});
  EXPECT_TRUE(throws<ValueError>([&] { optim::Adam({a, frozen}); }, {"parameter 1", "{3, 2}", "does not require grad"}));
  EXPECT_TRUE(throws<ValueError>([&] { optim::Adam({a, ag::Tensor()}); }, {"parameter 1", "undefined"}));
  const ag::Tensor non_leaf = a * 2.0f;
  EXPECT_TRUE(throws<ValueError>([&] { optim::Adam({non_leaf}); }, {"can't optimize a non-leaf Tensor"}));
  EXPECT_TRUE(throws<ValueError>([&] { optim::Adam({a, a}); },
                                 {"some parameters appear in more than one parameter group"}));
}

// ---------------------------------------------------------------- schedulers

// base_lrs are the groups' lr rounded to float32 (ag/optim.h); the sequences
// are PyTorch's closed forms on them, to double rounding.
TEST(AgOptimSchedulers, StepLR) {
  ag::Tensor a = ag::ones(Shape{1}, {.requires_grad = true}), b = ag::ones(Shape{1}, {.requires_grad = true});
  std::vector<optim::ParamGroup> groups(2);
  groups[0].params = {a};
  groups[1].params = {b};
  groups[1].lr = 0.5;
  optim::SGD opt(groups, 0.1);
  optim::StepLR sched(opt, 3, 0.5);
  const double base[2] = {double(0.1f), 0.5};
  EXPECT_EQ(sched.last_epoch(), 0);
  for (int64_t e = 0; e < 10; ++e) {
    if (e > 0) sched.step();
    EXPECT_EQ(sched.last_epoch(), e);
    ASSERT_EQ(sched.get_last_lr().size(), 2u);
    for (int g = 0; g < 2; ++g) {
      const double want = base[g] * std::pow(0.5, double(e / 3));
      EXPECT_NEAR(sched.get_last_lr()[g], want, 1e-15 * want) << "epoch " << e;
      EXPECT_EQ(*opt.param_groups()[g].lr, sched.get_last_lr()[g]);
    }
  }
  EXPECT_NEAR(sched.get_last_lr()[1], 0.0625, 1e-16);  // epoch 9: 0.5 * 0.5^3
}

TEST(AgOptimSchedulers, ExponentialCosineLambda) {
  ag::Tensor a = ag::ones(Shape{1}, {.requires_grad = true});
  optim::SGD o1({a}, 0.5), o2({a}, 0.5), o3({a}, 0.5);
  optim::ExponentialLR exp_lr(o1, 0.9);
  optim::CosineAnnealingLR cos_lr(o2, 10, 0.01);
  optim::LambdaLR lambda_lr(o3, [](int64_t e) { return 1.0 / double(e + 1); });
  for (int64_t e = 0; e <= 20; ++e) {
    if (e > 0) exp_lr.step(), cos_lr.step(), lambda_lr.step();
    EXPECT_NEAR(exp_lr.get_last_lr()[0], 0.5 * std::pow(0.9, double(e)), 1e-15);
    EXPECT_NEAR(cos_lr.get_last_lr()[0], 0.01 + (0.5 - 0.01) * (1 + std::cos(kPi * double(e) / 10)) / 2, 1e-15);
    EXPECT_NEAR(lambda_lr.get_last_lr()[0], 0.5 / double(e + 1), 1e-15);
    EXPECT_EQ(*o2.param_groups()[0].lr, cos_lr.get_last_lr()[0]);
  }
  EXPECT_NEAR(cos_lr.get_last_lr()[0], 0.5, 1e-15);  // epoch 20: a full period back up
  EXPECT_TRUE(throws<ValueError>([&] { optim::StepLR(o1, 0); }, {"step_size"}));
}

// ---------------------------------------------------------------- clipping

TEST(AgOptimClip, GradNormOverAllParameters) {
  ag::Tensor a = ag::zeros(Shape{2}, {.requires_grad = true}), b = ag::zeros(Shape{1}, {.requires_grad = true});
  ag::Tensor c = ag::zeros(Shape{1}, {.requires_grad = true});  // no gradient: skipped
  a.set_grad(ag::tensor({3.0f, 4.0f}, Shape{2}));
  b.set_grad(ag::tensor({12.0f}, Shape{1}));
  // Total norm sqrt(9 + 16 + 144) = 13; coefficient 6.5 / (13 + 1e-6).
  const double total = optim::clip_grad_norm_({a, b, c}, 6.5);
  EXPECT_NEAR(total, 13.0, 1e-6);
  const double coef = 6.5 / (13.0 + 1e-6);
  EXPECT_FLOAT_EQ(a.grad().to_vector()[0], float(3.0 * coef));
  EXPECT_FLOAT_EQ(a.grad().to_vector()[1], float(4.0 * coef));
  EXPECT_FLOAT_EQ(b.grad().to_vector()[0], float(12.0 * coef));
  EXPECT_FALSE(c.grad().defined());
  // Below the threshold: unchanged.
  const double again = optim::clip_grad_norm_({a, b}, 100.0);
  EXPECT_NEAR(again, 6.5, 1e-5);
  EXPECT_FLOAT_EQ(b.grad().to_vector()[0], float(12.0 * coef));
  EXPECT_EQ(optim::clip_grad_norm_({c}, 1.0), 0.0);
  EXPECT_TRUE(throws<ValueError>([&] { optim::clip_grad_norm_({a}, 1.0, 1.0); }, {"norm_type", "only", "2"}));
}

// Gradients whose squares overflow float32 (1e20^2 = 1e40) clip right: a
// hundred entries of 1e20 have norm 1e21, and at max norm 1 each becomes
// 0.1 (their squares were summed into a float32 and the norm came out inf).
TEST(AgOptimClip, LargeFiniteGradientsKeepTheirNorm) {
  ag::Tensor a = ag::zeros(Shape{60}, {.requires_grad = true}), b = ag::zeros(Shape{40}, {.requires_grad = true});
  a.set_grad(ag::tensor(std::vector<float>(60, 1e20f), Shape{60}));
  b.set_grad(ag::tensor(std::vector<float>(40, -1e20f), Shape{40}));
  const double total = optim::clip_grad_norm_({a, b}, 1.0);
  EXPECT_NEAR(total / 1e21, 1.0, 1e-6);
  for (float g : a.grad().to_vector()) EXPECT_NEAR(g, 0.1f, 1e-7f);
  for (float g : b.grad().to_vector()) EXPECT_NEAR(g, -0.1f, 1e-7f);
  // Near float32's largest: the norm (3e39) is past float32 and still returned.
  ag::Tensor c = ag::zeros(Shape{100}, {.requires_grad = true});
  c.set_grad(ag::tensor(std::vector<float>(100, 3e38f), Shape{100}));
  EXPECT_NEAR(optim::clip_grad_norm_({c}, 3e38) / 3e39, 1.0, 1e-6);
  for (float g : c.grad().to_vector()) EXPECT_NEAR(g / 3e37f, 1.0f, 1e-5f);
}

// A non-finite total norm: PyTorch's result by default (coefficient 0 for
// inf: finite gradients 0, the infinite one NaN; NaN for NaN), or with
// error_if_nonfinite a ValueError that leaves the gradients alone.
TEST(AgOptimClip, NonFiniteNormFollowsPyTorch) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  ag::Tensor a = ag::zeros(Shape{2}, {.requires_grad = true});
  a.set_grad(ag::tensor({3.0f, inf}, Shape{2}));
  EXPECT_TRUE(throws<ValueError>([&] { optim::clip_grad_norm_({a}, 1.0, 2.0, true); },
                                 {"clip_grad_norm_: the total norm of order 2 of the gradients is inf",
                                  "error_if_nonfinite = false"}));
  EXPECT_EQ(a.grad().to_vector()[0], 3.0f);
  EXPECT_TRUE(std::isinf(optim::clip_grad_norm_({a}, 1.0)));
  EXPECT_EQ(a.grad().to_vector()[0], 0.0f);
  EXPECT_TRUE(std::isnan(a.grad().to_vector()[1]));
  a.set_grad(ag::tensor({3.0f, nan}, Shape{2}));
  EXPECT_TRUE(throws<ValueError>([&] { optim::clip_grad_norm_({a}, 1.0, 2.0, true); }, {"is nan"}));
  EXPECT_TRUE(std::isnan(optim::clip_grad_norm_({a}, 1.0)));
  for (float g : a.grad().to_vector()) EXPECT_TRUE(std::isnan(g));
}

TEST(AgOptimClip, GradValue) {
  ag::Tensor a = ag::zeros(Shape{4}, {.requires_grad = true});
  a.set_grad(ag::tensor({-3.0f, -0.1f, 0.2f, 5.0f}, Shape{4}));
  optim::clip_grad_value_({a}, 0.5);
  EXPECT_EQ(a.grad().to_vector(), (std::vector<float>{-0.5f, -0.1f, 0.2f, 0.5f}));
  EXPECT_TRUE(throws<ValueError>([&] { optim::clip_grad_value_({a}, -1.0); }, {"clip_value"}));
}

// ---------------------------------------------------------------- state dicts

std::shared_ptr<ag::nn::Sequential> mlp() {
  return std::make_shared<ag::nn::Sequential>(std::initializer_list<std::shared_ptr<ag::nn::Module>>{
      std::make_shared<ag::nn::Linear>(4, 64), std::make_shared<ag::nn::ReLU>(), std::make_shared<ag::nn::Linear>(64, 64),
      std::make_shared<ag::nn::ReLU>(), std::make_shared<ag::nn::Linear>(64, 2)});
}

void train_step(ag::nn::Module& model, optim::Optimizer& opt, const ag::Tensor& x, const ag::Tensor& y) {
  opt.zero_grad();
  ag::mse_loss(model(x), y).backward();
  optim::clip_grad_norm_(model.parameters(), 1.0);
  opt.step();
}

using OptFactory = std::function<std::unique_ptr<optim::Optimizer>(std::vector<ag::Tensor>)>;

void check_resume(const OptFactory& make) {
  ag::manual_seed(7);
  auto model = mlp();
  const ag::Tensor x = ag::randn(Shape{16, 4}), y = ag::randn(Shape{16, 2});
  std::unique_ptr<optim::Optimizer> opt = make(model->parameters());
  optim::StepLR sched(*opt, 2, 0.5);
  for (int i = 0; i < 3; ++i) train_step(*model, *opt, x, y), sched.step();

  // A fresh model with copies of the parameters, a fresh optimizer and scheduler, loaded.
  auto copy = mlp();
  ag::nn::StateDict weights;
  for (const auto& [name, t] : model->state_dict()) weights.insert(name, ag::Tensor(t.data().clone()));
  copy->load_state_dict(weights);
  std::unique_ptr<optim::Optimizer> opt2 = make(copy->parameters());
  optim::StepLR sched2(*opt2, 2, 0.5);
  opt2->load_state_dict(opt->state_dict());
  sched2.load_state_dict(sched.state_dict());
  EXPECT_EQ(sched2.last_epoch(), 3);
  EXPECT_EQ(sched2.get_last_lr(), sched.get_last_lr());

  for (int i = 0; i < 3; ++i) {
    train_step(*model, *opt, x, y), sched.step();
    train_step(*copy, *opt2, x, y), sched2.step();
  }
  const auto a = model->named_parameters(), b = copy->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].second.shape(), b[i].second.shape());
    EXPECT_EQ(std::memcmp(a[i].second.data().raw(), b[i].second.data().raw(), a[i].second.data().nbytes()), 0)
        << opt->name() << ": " << a[i].first << " differs after the resume";
  }
  // And the optimizers' states agree too.
  const ag::nn::StateDict sa = opt->state_dict(), sb = opt2->state_dict();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.items().size(); ++i) {
    EXPECT_EQ(sa.items()[i].first, sb.items()[i].first);
    EXPECT_EQ(sa.items()[i].second.to_vector(), sb.items()[i].second.to_vector()) << sa.items()[i].first;
  }
}

TEST(AgOptimStateDict, ResumeIsBitIdentical) {
  check_resume([](std::vector<ag::Tensor> p) { return std::make_unique<optim::Adam>(p, 1e-2, std::array{0.9, 0.999}, 1e-8, 1e-3); });
  check_resume([](std::vector<ag::Tensor> p) { return std::make_unique<optim::AdamW>(p, 1e-2); });
  check_resume([](std::vector<ag::Tensor> p) { return std::make_unique<optim::SGD>(p, 0.1, 0.9, 0.1, 1e-3); });
  check_resume([](std::vector<ag::Tensor> p) {
    return std::make_unique<optim::RMSprop>(p, 1e-3, 0.9, 1e-8, 1e-3, 0.5, true);
  });
}

TEST(AgOptimStateDict, NamesAndShapes) {
  ag::Tensor a = ag::ones(Shape{3, 2}, {.requires_grad = true}), b = ag::ones(Shape{2}, {.requires_grad = true});
  optim::Adam opt({a, b}, 0.1, {0.8, 0.9});
  ag::sum(a * b).backward();
  opt.step();
  std::vector<std::string> names;
  for (const auto& [name, t] : opt.state_dict()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"state.0.step", "state.0.exp_avg", "state.0.exp_avg_sq", "state.1.step",
                                             "state.1.exp_avg", "state.1.exp_avg_sq", "param_groups.0.lr",
                                             "param_groups.0.eps", "param_groups.0.weight_decay",
                                             "param_groups.0.betas.0", "param_groups.0.betas.1",
                                             "param_groups.0.params"}));
  const ag::nn::StateDict sd = opt.state_dict();
  EXPECT_EQ(sd.at("state.0.exp_avg").shape(), (Shape{3, 2}));
  EXPECT_FLOAT_EQ(sd.at("param_groups.0.betas.0").item(), 0.8f);
  EXPECT_EQ(sd.at("param_groups.0.params").to_vector(), (std::vector<float>{0, 1}));

  optim::SGD sgd({a}, 0.1, 0.9, 0.0, 0.0, true);
  a.set_grad(ag::ones(Shape{3, 2}));
  sgd.step();
  const ag::nn::StateDict s2 = sgd.state_dict();
  EXPECT_TRUE(s2.contains("state.0.momentum_buffer"));
  EXPECT_EQ(s2.at("param_groups.0.nesterov").dtype(), tensorgrad::DType::Int64);
  EXPECT_EQ(s2.at("param_groups.0.nesterov").to_vector(), (std::vector<float>{1}));

  optim::StepLR sched(sgd, 2);
  sched.step();
  std::vector<std::string> snames;
  for (const auto& [name, t] : sched.state_dict()) snames.push_back(name);
  EXPECT_EQ(snames, (std::vector<std::string>{"last_epoch", "_step_count", "base_lrs.0"}));
  EXPECT_EQ(sched.state_dict().at("_step_count").to_vector(), (std::vector<float>{2}));
}

TEST(AgOptimStateDict, MismatchesAreNamed) {
  auto make = [](std::vector<Shape> shapes) {
    std::vector<ag::Tensor> p;
    for (const Shape& s : shapes) p.push_back(ag::ones(s, {.requires_grad = true}));
    return p;
  };
  auto stepped = [](optim::Optimizer& o, const std::vector<ag::Tensor>& p) {
    for (ag::Tensor t : p)  // a copy shares the tensor
      if (!t.grad().defined()) t.set_grad(ag::ones(t.shape()));
    o.step();
  };
  const auto pa = make({Shape{4}, Shape{2}, Shape{64, 4}});
  const auto pb = make({Shape{4}, Shape{2}, Shape{4, 64}});
  optim::Adam a(pa), b(pb);
  stepped(a, pa);
  EXPECT_TRUE(throws<ValueError>([&] { b.load_state_dict(a.state_dict()); },
                                 {"optimizer state for parameter 2: {4, 64} here vs {64, 4} in the state dict"}));
  optim::Adam c(make({Shape{4}, Shape{2}}));
  EXPECT_TRUE(throws<ValueError>([&] { c.load_state_dict(a.state_dict()); },
                                 {"parameter group 0 has 2 parameters here vs 3 in the state dict"}));
  std::vector<optim::ParamGroup> groups(2);
  const auto pd = make({Shape{4}, Shape{2}, Shape{64, 4}});
  groups[0].params = {pd[0]};
  groups[1].params = {pd[1], pd[2]};
  optim::Adam d(groups);
  EXPECT_TRUE(throws<ValueError>([&] { d.load_state_dict(a.state_dict()); },
                                 {"2 parameter groups here vs 1 in the state dict"}));
  optim::SGD e(make({Shape{4}, Shape{2}, Shape{64, 4}}), 0.1);
  EXPECT_TRUE(throws<ValueError>([&] { e.load_state_dict(a.state_dict()); }, {"lacks", "momentum"}));
  // A failed load changes nothing: b still loads a state dict of its own shape.
  optim::Adam f(pb);
  stepped(f, pb);
  b.load_state_dict(f.state_dict());
  EXPECT_EQ(b.state_dict().size(), f.state_dict().size());
}

// The per-step cost of Adam.step() on a 4-64-64-2 MLP's 6 parameters (printed, not checked).
TEST(AgOptimTiming, AdamStepOnASmallMlp) {
  ag::manual_seed(3);
  auto model = mlp();
  const ag::Tensor x = ag::randn(Shape{16, 4}), y = ag::randn(Shape{16, 2});
  optim::Adam opt(model->parameters(), 1e-3);
  ag::mse_loss((*model)(x), y).backward();
  opt.step();
  const int n = 2000;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) opt.step();
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / n;
  std::cout << "[ag::optim] Adam.step() on the 4-64-64-2 MLP (6 parameters, 4610 values): " << us << " us/step\n";
  EXPECT_EQ(model->parameters().size(), 6u);
}

}  // namespace
