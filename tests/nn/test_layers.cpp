// Layer behaviour through the public model API (Sequential, the optimizer
// context's step, predict): batch normalization's moving statistics (Keras'
// update, freezing, frozen layers in inference mode, calibration), frozen
// layers under AdamW with weight decay, Keras' output shapes and weight
// names/layouts, the initialisers, the errors of bad layer input, and two
// small training runs (Embedding + GRU on a sequence task; a Conv2D + BN
// model overfitting a few images).
//
// References are computed here, in double, from the data the test feeds in.
// Tolerances: a float32 batch statistic over <= 1024 rows differs from the
// double one by a few ulps of the data's magnitude (~1e-6 here); a moving
// average multiplies that by (1 - momentum), so 1e-6 absolute is tight enough
// to catch any other formula (a missing update, the unbiased variance, the
// momentum swapped, statistics over the wrong axes) by orders of magnitude.
#include <gtest/gtest.h>

#include "test_support.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <random>
#include <string>
#include <typeinfo>
#include <vector>

#include "tensorgrad/tensorgrad.h"

using namespace tensorgrad;
using namespace tensorgrad::nn;

namespace {

using test_support::throws;

// Normal(mean, sd) data of `shape` from a fixed seed.
Tensor normal(const Shape& shape, uint32_t seed, float mean = 0.0f, float sd = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(mean, sd);
  std::vector<float> v(size_t(shape.numel()));
  for (float& f : v) f = d(gen);
  return Tensor::from_vector(v, shape);
}

// Per-channel data with channel c ~ Normal(means[c], sds[c]): shape {rows, ..., C}.
Tensor channel_data(const Shape& shape, uint32_t seed, const std::vector<float>& means, const std::vector<float>& sds) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  const size_t c = means.size();
  std::vector<float> v(size_t(shape.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = means[i % c] + sds[i % c] * d(gen);
  return Tensor::from_vector(v, shape);
}

// The weight `name` of m (a tensor sharing the layer's memory).
Tensor weight(const Sequential& m, const std::string& name) {
  for (const Weight& w : m.weights())
    if (w.name == name) return w.value;
  ADD_FAILURE() << "model has no weight " << name;
  return Tensor::zeros(Shape{1});
}

bool weight_trainable(const Sequential& m, const std::string& name) {
  for (const Weight& w : m.weights())
    if (w.name == name) return w.trainable;
  ADD_FAILURE() << "model has no weight " << name;
  return false;
}

void set_values(const Tensor& t, const std::vector<float>& v) {
  ASSERT_EQ(size_t(t.numel()), v.size());
  std::memcpy(t.raw(), v.data(), v.size() * sizeof(float));
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// Mean and biased variance per channel (last axis) over every other axis of
// the first `rows` rows of x, in double.
void channel_stats(const Tensor& x, int64_t rows, std::vector<double>& mean, std::vector<double>& var) {
  const int64_t c = x.shape()[-1];
  const int64_t n = rows * x.shape().row_size() / c;  // elements per channel
  const std::vector<float> v = x.to_vector();
  mean.assign(size_t(c), 0.0);
  var.assign(size_t(c), 0.0);
  for (int64_t i = 0; i < n * c; ++i) mean[size_t(i % c)] += v[size_t(i)];
  for (double& m : mean) m /= double(n);
  for (int64_t i = 0; i < n * c; ++i) {
    const double d = v[size_t(i)] - mean[size_t(i % c)];
    var[size_t(i % c)] += d * d;
  }
  for (double& s : var) s /= double(n);
}

// Keras' moving-average update, in the float32 arithmetic of the state.
std::vector<float> keras_update(const std::vector<float>& moving, const std::vector<double>& batch,
                                float momentum = 0.99f) {
  std::vector<float> out(moving.size());
  for (size_t i = 0; i < moving.size(); ++i)
    out[i] = momentum * moving[i] + (1.0f - momentum) * float(batch[i]);
  return out;
}

void expect_near_vec(const std::vector<float>& got, const std::vector<float>& want, double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol * std::max(1.0, std::fabs(double(want[i])))) << what << " [" << i << "]";
}

void expect_near_vec(const std::vector<float>& got, const std::vector<double>& want, double tol, const char* what) {
  std::vector<float> w(want.begin(), want.end());
  expect_near_vec(got, w, tol, what);
}

// y = (x - mm) / sqrt(mv + eps) * gamma + beta per channel (last axis), in double.
std::vector<double> bn_inference(const Tensor& x, const std::vector<float>& mm, const std::vector<float>& mv,
                                 const std::vector<float>& gamma, const std::vector<float>& beta,
                                 double eps = 1e-3) {
  const size_t c = mm.size();
  const std::vector<float> v = x.to_vector();
  std::vector<double> y(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const size_t k = i % c;
    y[i] = (double(v[i]) - mm[k]) / std::sqrt(double(mv[k]) + eps) * gamma[k] + beta[k];
  }
  return y;
}

// The model BN(first) -> Flatten -> Dense(1) on images {3, 4, 2}: BN reads x itself.
Sequential bn_first_model(const Shape& in = Shape{3, 4, 2}) {
  Sequential m(in);
  m.add(BatchNormalization());
  if (in.rank() > 1) m.add(Flatten());
  m.add(Dense(1));
  return m;
}

constexpr float kBnEps = 1e-3f;

}  // namespace

// ---------------------------------------------------------------------------
// 1. BatchNormalization
// ---------------------------------------------------------------------------

// Every training step (optimizer_context(bs).step, and fit) moves the moving
// statistics by exactly Keras' update from the batch's mean and biased
// variance over every axis but the last.
TEST(LayersBatchNorm, MovingStatisticsFollowKerasUpdateEveryStep) {
  manual_seed(11);
  clear_session();
  Sequential m = bn_first_model();
  m.compile(OptimizerSpec::adam(1e-2f), "mse");
  const Tensor mm = weight(m, "batch_normalization/moving_mean");
  const Tensor mv = weight(m, "batch_normalization/moving_variance");
  EXPECT_EQ(mm.to_vector(), std::vector<float>(2, 0.0f));
  EXPECT_EQ(mv.to_vector(), std::vector<float>(2, 1.0f));

  const int64_t bs = 8;
  OptimizerContext& ctx = m.optimizer_context(bs);
  for (int step = 0; step < 4; ++step) {
    // Channel means 2 and -1, standard deviations 1.5 and 0.5: far from the
    // initial (0, 1), so every step visibly moves the statistics.
    const Tensor x = channel_data(Shape{bs, 3, 4, 2}, 100 + uint32_t(step), {2.0f, -1.0f}, {1.5f, 0.5f});
    const Tensor y = normal(Shape{bs, 1}, 200 + uint32_t(step));
    std::vector<double> bm, bv;
    channel_stats(x, bs, bm, bv);
    const std::vector<float> want_mm = keras_update(mm.to_vector(), bm);
    const std::vector<float> want_mv = keras_update(mv.to_vector(), bv);
    const std::vector<float> old_mm = mm.to_vector();
    ctx.step(x, y);
    EXPECT_NE(mm.to_vector(), old_mm) << "step " << step << " left moving_mean unchanged";
    expect_near_vec(mm.to_vector(), want_mm, 1e-6, "moving_mean");
    expect_near_vec(mv.to_vector(), want_mv, 1e-6, "moving_variance");
  }

  // fit: one epoch of one full batch is one step on all rows.
  const int64_t rows = 24;
  const Tensor x = channel_data(Shape{rows, 3, 4, 2}, 300, {0.5f, 3.0f}, {2.0f, 0.25f});
  const Tensor y = normal(Shape{rows, 1}, 301);
  std::vector<double> bm, bv;
  channel_stats(x, rows, bm, bv);
  const std::vector<float> want_mm = keras_update(mm.to_vector(), bm);
  const std::vector<float> want_mv = keras_update(mv.to_vector(), bv);
  FitOptions fo;
  fo.epochs = 1;
  fo.batch_size = rows;
  fo.verbose = 0;
  m.fit(x, y, fo);
  expect_near_vec(mm.to_vector(), want_mm, 1e-6, "moving_mean after fit");
  expect_near_vec(mv.to_vector(), want_mv, 1e-6, "moving_variance after fit");

  // Several steps in one fit: each batch updates once (4 batches of 6 rows).
  fo.batch_size = 6;
  fo.shuffle = false;
  std::vector<float> em = mm.to_vector(), ev = mv.to_vector();
  for (int64_t s = 0; s < 4; ++s) {
    std::vector<double> sm, sv;
    channel_stats(x.rows(s * 6, s * 6 + 6), 6, sm, sv);
    em = keras_update(em, sm);
    ev = keras_update(ev, sv);
  }
  m.fit(x, y, fo);
  expect_near_vec(mm.to_vector(), em, 1e-6, "moving_mean after a 4-step fit");
  expect_near_vec(mv.to_vector(), ev, 1e-6, "moving_variance after a 4-step fit");
}

// A non-default momentum is used as given.
TEST(LayersBatchNorm, CustomMomentumIsUsed) {
  manual_seed(12);
  Sequential m(Shape{3});
  m.add(BatchNormalization(0.5f));
  m.add(Dense(1));
  m.compile(OptimizerSpec::adam(), "mse");
  const std::string bn = m.layers()[0]->name();
  const Tensor mm = weight(m, bn + "/moving_mean"), mv = weight(m, bn + "/moving_variance");
  const Tensor x = channel_data(Shape{16, 3}, 5, {1.0f, -2.0f, 4.0f}, {1.0f, 2.0f, 0.5f});
  std::vector<double> bm, bv;
  channel_stats(x, 16, bm, bv);
  const std::vector<float> want_mm = keras_update(mm.to_vector(), bm, 0.5f);
  const std::vector<float> want_mv = keras_update(mv.to_vector(), bv, 0.5f);
  m.optimizer_context(16).step(x, normal(Shape{16, 1}, 6));
  expect_near_vec(mm.to_vector(), want_mm, 1e-5, "moving_mean");
  expect_near_vec(mv.to_vector(), want_mv, 1e-5, "moving_variance");
}

// After freeze_bn_stats the moving statistics stay bit-identical through
// further steps and fits while gamma and beta still train; unfreezing
// resumes Keras' update.
TEST(LayersBatchNorm, FreezeStatsKeepsMovingStatisticsWhileGammaBetaTrain) {
  manual_seed(13);
  clear_session();
  Sequential m = bn_first_model();
  m.compile(OptimizerSpec::adam(1e-2f), "mse");
  const Tensor mm = weight(m, "batch_normalization/moving_mean");
  const Tensor mv = weight(m, "batch_normalization/moving_variance");
  const Tensor gamma = weight(m, "batch_normalization/gamma");
  const Tensor beta = weight(m, "batch_normalization/beta");
  const int64_t bs = 8;
  // One ordinary step first so the statistics are not at their initial values.
  m.optimizer_context(bs).step(channel_data(Shape{bs, 3, 4, 2}, 1, {2.0f, -1.0f}, {1.5f, 0.5f}),
                               normal(Shape{bs, 1}, 2));
  const Tensor mm0 = mm.clone(), mv0 = mv.clone(), g0 = gamma.clone(), b0 = beta.clone();
  ASSERT_NE(mm0.to_vector(), std::vector<float>(2, 0.0f));

  m.freeze_bn_stats();
  for (int step = 0; step < 3; ++step)
    m.optimizer_context(bs).step(channel_data(Shape{bs, 3, 4, 2}, 10 + uint32_t(step), {2.0f, -1.0f}, {1.5f, 0.5f}),
                                 normal(Shape{bs, 1}, 20 + uint32_t(step)));
  FitOptions fo;
  fo.epochs = 2;
  fo.batch_size = 8;
  fo.verbose = 0;
  m.fit(channel_data(Shape{32, 3, 4, 2}, 30, {-3.0f, 5.0f}, {1.0f, 2.0f}), normal(Shape{32, 1}, 31), fo);
  EXPECT_TRUE(bit_equal(mm, mm0)) << "moving_mean changed while frozen";
  EXPECT_TRUE(bit_equal(mv, mv0)) << "moving_variance changed while frozen";
  EXPECT_FALSE(bit_equal(gamma, g0)) << "gamma did not train while the statistics were frozen";
  EXPECT_FALSE(bit_equal(beta, b0)) << "beta did not train while the statistics were frozen";

  // Unfreezing resumes the update.
  m.freeze_bn_stats(false);
  const Tensor x = channel_data(Shape{bs, 3, 4, 2}, 40, {2.0f, -1.0f}, {1.5f, 0.5f});
  std::vector<double> bm, bv;
  channel_stats(x, bs, bm, bv);
  const std::vector<float> want_mm = keras_update(mm.to_vector(), bm);
  const std::vector<float> want_mv = keras_update(mv.to_vector(), bv);
  m.optimizer_context(bs).step(x, normal(Shape{bs, 1}, 41));
  expect_near_vec(mm.to_vector(), want_mm, 1e-6, "moving_mean after unfreezing");
  expect_near_vec(mv.to_vector(), want_mv, 1e-6, "moving_variance after unfreezing");
}

// A BatchNormalization layer with trainable = false runs in inference mode
// during training (as Keras): its moving statistics, gamma and beta stay
// bit-identical, the loss the step reports is that of the moving-statistics
// forward pass, and predict follows the inference formula.
TEST(LayersBatchNorm, NonTrainableLayerRunsInInferenceModeDuringTraining) {
  manual_seed(14);
  clear_session();
  Sequential m(Shape{4});
  m.add(BatchNormalization());
  m.add(Dense(1));
  m.layers()[0]->trainable = false;
  const std::vector<float> mm_v{0.5f, -0.3f, 1.0f, 2.0f}, mv_v{1.5f, 0.7f, 2.0f, 1.0f};
  const std::vector<float> g_v{1.2f, 0.8f, 1.0f, 0.5f}, b_v{0.1f, -0.2f, 0.0f, 0.3f};
  set_values(weight(m, "batch_normalization/moving_mean"), mm_v);
  set_values(weight(m, "batch_normalization/moving_variance"), mv_v);
  set_values(weight(m, "batch_normalization/gamma"), g_v);
  set_values(weight(m, "batch_normalization/beta"), b_v);
  m.compile(OptimizerSpec::adamw(1e-2f, 0.1f), "mse");
  for (const char* w : {"gamma", "beta", "moving_mean", "moving_variance"})
    EXPECT_FALSE(weight_trainable(m, std::string("batch_normalization/") + w)) << w;
  EXPECT_TRUE(weight_trainable(m, "dense/kernel"));

  const Tensor mm = weight(m, "batch_normalization/moving_mean"), mv = weight(m, "batch_normalization/moving_variance");
  const Tensor gamma = weight(m, "batch_normalization/gamma"), beta = weight(m, "batch_normalization/beta");
  const Tensor kernel = weight(m, "dense/kernel"), bias = weight(m, "dense/bias");
  const Tensor mm0 = mm.clone(), mv0 = mv.clone(), g0 = gamma.clone(), b0 = beta.clone(), k0 = kernel.clone();

  const int64_t bs = 16;
  OptimizerContext& ctx = m.optimizer_context(bs);
  for (int step = 0; step < 3; ++step) {
    // Batch statistics (means 3, -2, 0, 1; sds 2, 0.5, 1, 3) far from the moving ones.
    const Tensor x = channel_data(Shape{bs, 4}, 50 + uint32_t(step), {3.0f, -2.0f, 0.0f, 1.0f}, {2.0f, 0.5f, 1.0f, 3.0f});
    const Tensor y = normal(Shape{bs, 1}, 60 + uint32_t(step));
    // The loss of the inference-mode forward pass with the current Dense weights.
    const std::vector<double> z = bn_inference(x, mm_v, mv_v, g_v, b_v);
    const std::vector<float> k = kernel.to_vector();
    const double b = bias.item(0);
    double want_loss = 0;
    const std::vector<float> yv = y.to_vector();
    for (int64_t r = 0; r < bs; ++r) {
      double out = b;
      for (int64_t j = 0; j < 4; ++j) out += z[size_t(r * 4 + j)] * k[size_t(j)];
      want_loss += (out - yv[size_t(r)]) * (out - yv[size_t(r)]);
    }
    want_loss /= double(bs);
    const StepResult r = ctx.step(x, y);
    EXPECT_NEAR(r.loss, want_loss, 1e-5 * std::max(1.0, want_loss)) << "step " << step;
  }
  EXPECT_TRUE(bit_equal(mm, mm0)) << "moving_mean of a non-trainable BN changed";
  EXPECT_TRUE(bit_equal(mv, mv0)) << "moving_variance of a non-trainable BN changed";
  EXPECT_TRUE(bit_equal(gamma, g0)) << "gamma of a non-trainable BN changed (updated or decayed)";
  EXPECT_TRUE(bit_equal(beta, b0)) << "beta of a non-trainable BN changed";
  EXPECT_FALSE(bit_equal(kernel, k0)) << "the trainable Dense after it did not train";

  // predict: Dense(BN_inference(x)).
  const Tensor x = channel_data(Shape{5, 4}, 70, {1.0f, 0.0f, -1.0f, 2.0f}, {1.0f, 1.0f, 1.0f, 1.0f});
  const std::vector<float> p = m.predict(x).to_vector();
  const std::vector<double> z = bn_inference(x, mm_v, mv_v, g_v, b_v);
  const std::vector<float> k = kernel.to_vector();
  for (int64_t r = 0; r < 5; ++r) {
    double out = bias.item(0);
    for (int64_t j = 0; j < 4; ++j) out += z[size_t(r * 4 + j)] * k[size_t(j)];
    EXPECT_NEAR(p[size_t(r)], out, 1e-5 * std::max(1.0, std::fabs(out))) << "row " << r;
  }
}

// calibrate_bn sets the moving statistics to the exact mean and biased
// variance of x's first min(rows, 1024) rows, in every BN layer.
TEST(LayersBatchNorm, CalibrateSetsExactStatisticsOfFirst1024Rows) {
  manual_seed(15);
  clear_session();
  Sequential m(Shape{2, 3});  // rows of {2 positions, 3 channels}
  m.add(BatchNormalization());
  m.add(Flatten());
  m.add(Dense(4));
  m.add(BatchNormalization());
  const Tensor mm = weight(m, "batch_normalization/moving_mean");
  const Tensor mv = weight(m, "batch_normalization/moving_variance");
  const Tensor mm2 = weight(m, "batch_normalization_1/moving_mean");
  const Tensor mv2 = weight(m, "batch_normalization_1/moving_variance");

  // 1500 rows: the first 1024 from one distribution, the rest shifted far
  // away, so statistics over the wrong rows are off by a lot.
  const int64_t rows = 1500;
  Tensor x = channel_data(Shape{rows, 2, 3}, 80, {1.0f, -2.0f, 0.5f}, {2.0f, 0.5f, 1.0f});
  float* p = x.data<float>();
  for (int64_t i = 1024 * 6; i < rows * 6; ++i) p[i] = p[i] * 3.0f + 50.0f;
  std::vector<double> bm, bv;
  channel_stats(x, 1024, bm, bv);
  m.calibrate_bn(x);
  expect_near_vec(mm.to_vector(), bm, 2e-6, "moving_mean (first 1024 rows)");
  expect_near_vec(mv.to_vector(), bv, 2e-6, "moving_variance (first 1024 rows)");

  // The second BN sees Dense(BN(x)) computed with the first BN's batch
  // statistics (here gamma 1, beta 0): calibrate its statistics from that.
  {
    const std::vector<double> z =
        bn_inference(x.rows(0, 1024), std::vector<float>(bm.begin(), bm.end()), std::vector<float>(bv.begin(), bv.end()),
                     {1, 1, 1}, {0, 0, 0});
    const std::vector<float> k = weight(m, "dense/kernel").to_vector();  // {6, 4}
    std::vector<float> h(1024 * 4);
    for (int64_t r = 0; r < 1024; ++r)
      for (int64_t o = 0; o < 4; ++o) {
        double s = 0;
        for (int64_t j = 0; j < 6; ++j) s += z[size_t(r * 6 + j)] * k[size_t(j * 4 + o)];
        h[size_t(r * 4 + o)] = float(s);
      }
    std::vector<double> hm, hv;
    channel_stats(Tensor::from_vector(h, Shape{1024, 4}), 1024, hm, hv);
    expect_near_vec(mm2.to_vector(), hm, 1e-4, "second BN moving_mean");
    expect_near_vec(mv2.to_vector(), hv, 1e-4, "second BN moving_variance");
  }

  // Fewer than 1024 rows: all of them.
  const Tensor x2 = channel_data(Shape{100, 2, 3}, 81, {-4.0f, 7.0f, 0.0f}, {0.3f, 3.0f, 1.0f});
  channel_stats(x2, 100, bm, bv);
  m.calibrate_bn(x2);
  expect_near_vec(mm.to_vector(), bm, 2e-6, "moving_mean (100 rows)");
  expect_near_vec(mv.to_vector(), bv, 2e-6, "moving_variance (100 rows)");

  // After calibration, predict normalizes with exactly those statistics: the
  // first BN's output over x2 has mean ~beta = 0 per channel.
  Sequential only_bn(Shape{3});
  only_bn.add(BatchNormalization());
  const Tensor x3 = channel_data(Shape{64, 3}, 82, {10.0f, -5.0f, 2.0f}, {4.0f, 0.1f, 1.0f});
  only_bn.calibrate_bn(x3);
  std::vector<double> om, ov;
  channel_stats(only_bn.predict(x3), 64, om, ov);
  std::vector<double> xm, xv;
  channel_stats(x3, 64, xm, xv);
  for (int c = 0; c < 3; ++c) {
    EXPECT_NEAR(om[size_t(c)], 0.0, 1e-4) << c;
    EXPECT_NEAR(ov[size_t(c)], xv[size_t(c)] / (xv[size_t(c)] + kBnEps), 1e-4) << c;
  }
}

// Prediction uses the moving statistics: predict(x) = (x - mm) / sqrt(mv +
// 1e-3) * gamma + beta, both with set values and after training has moved
// every one of them.
TEST(LayersBatchNorm, PredictUsesMovingStatistics) {
  manual_seed(16);
  clear_session();
  Sequential m(Shape{2, 3});
  m.add(BatchNormalization());
  m.add(Flatten());  // a loss takes {batch, outputs}; row-major, so the values are BN's
  const Tensor mm = weight(m, "batch_normalization/moving_mean");
  const Tensor mv = weight(m, "batch_normalization/moving_variance");
  const Tensor gamma = weight(m, "batch_normalization/gamma");
  const Tensor beta = weight(m, "batch_normalization/beta");
  set_values(mm, {0.5f, -1.0f, 2.0f});
  set_values(mv, {4.0f, 0.25f, 1.0f});
  set_values(gamma, {2.0f, 0.5f, -1.0f});
  set_values(beta, {0.0f, 1.0f, -3.0f});
  const Tensor x = normal(Shape{7, 2, 3}, 90, 0.0f, 2.0f);
  auto check = [&](const char* when) {
    const Tensor p = m.predict(x);
    EXPECT_EQ(p.shape(), (Shape{7, 6})) << when;
    const std::vector<double> want = bn_inference(x, mm.to_vector(), mv.to_vector(), gamma.to_vector(), beta.to_vector());
    expect_near_vec(p.to_vector(), want, 1e-5, when);
  };
  check("with set statistics");
  // A single row works too (batch statistics of one row would give beta).
  {
    const Tensor p1 = m.predict(x.rows(0, 1));
    const std::vector<double> want =
        bn_inference(x.rows(0, 1), mm.to_vector(), mv.to_vector(), gamma.to_vector(), beta.to_vector());
    expect_near_vec(p1.to_vector(), want, 1e-5, "one row");
  }

  // Train: every statistic and gamma/beta move; predict follows the new values.
  m.compile(OptimizerSpec::adam(5e-2f), "mse");
  FitOptions fo;
  fo.epochs = 3;
  fo.batch_size = 10;
  fo.verbose = 0;
  const Tensor xt = channel_data(Shape{40, 2, 3}, 91, {3.0f, 0.0f, -2.0f}, {1.0f, 2.0f, 0.5f});
  const Tensor yt = normal(Shape{40, 6}, 92);
  const Tensor g0 = gamma.clone(), mm0 = mm.clone();
  m.fit(xt, yt, fo);
  EXPECT_FALSE(bit_equal(gamma, g0));
  EXPECT_FALSE(bit_equal(mm, mm0));
  check("after fit");
}

// ---------------------------------------------------------------------------
// 2. Frozen layers
// ---------------------------------------------------------------------------

namespace {
struct FrozenRun {
  std::vector<std::vector<float>> before, after;
  std::vector<bool> trainable;
  std::vector<std::string> names;
};

FrozenRun train_with_frozen_first_dense(float weight_decay) {
  manual_seed(21);
  clear_session();
  Sequential m(Shape{6});
  m.add(Dense(8, "tanh"));
  m.add(Dense(3));
  m.layers()[0]->trainable = false;
  m.compile(OptimizerSpec::adamw(1e-2f, weight_decay), "mse");
  FrozenRun r;
  for (const Weight& w : m.weights()) {
    r.before.push_back(w.value.to_vector());
    r.trainable.push_back(w.trainable);
    r.names.push_back(w.name);
  }
  FitOptions fo;
  fo.epochs = 3;
  fo.batch_size = 8;
  fo.verbose = 0;
  m.fit(normal(Shape{32, 6}, 22), normal(Shape{32, 3}, 23), fo);
  for (const Weight& w : m.weights()) r.after.push_back(w.value.to_vector());
  return r;
}
}  // namespace

// A Dense layer with trainable = false (set before compile) is neither updated
// nor decayed by AdamW(weight_decay 0.1); the next layer is both.
TEST(LayersFrozen, NonTrainableDenseIsNotUpdatedNorDecayed) {
  const FrozenRun decayed = train_with_frozen_first_dense(0.1f);
  const FrozenRun plain = train_with_frozen_first_dense(0.0f);
  ASSERT_EQ(decayed.names, (std::vector<std::string>{"dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias"}));
  EXPECT_EQ(decayed.trainable, (std::vector<bool>{false, false, true, true}));
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(decayed.after[i], decayed.before[i]) << decayed.names[i] << " changed while frozen";
    EXPECT_EQ(plain.after[i], plain.before[i]) << plain.names[i] << " changed while frozen";
  }
  for (size_t i = 2; i < 4; ++i) EXPECT_NE(decayed.after[i], decayed.before[i]) << decayed.names[i] << " did not train";
  // Same seed, same data: only the decay differs, and it reaches the trainable
  // kernel only.
  EXPECT_EQ(decayed.before, plain.before);
  EXPECT_NE(decayed.after[2], plain.after[2]) << "weight decay did not affect the trainable kernel";
}

// weights() reports each entry's trainable flag from its layer.
TEST(LayersFrozen, WeightsReportTrainableFlag) {
  clear_session();
  Sequential m(Shape{4});
  m.add(Dense(3));
  m.add(Dense(2));
  m.layers()[1]->trainable = false;
  const std::vector<Weight> w = m.weights();
  ASSERT_EQ(w.size(), 4u);
  EXPECT_TRUE(w[0].trainable);
  EXPECT_TRUE(w[1].trainable);
  EXPECT_FALSE(w[2].trainable);
  EXPECT_FALSE(w[3].trainable);
}

// ---------------------------------------------------------------------------
// 3. Shapes, names, layouts, simple values
// ---------------------------------------------------------------------------

namespace {
Shape out_shape(const Shape& in, std::shared_ptr<Layer> layer) {
  Sequential m(in);
  m.add(std::move(layer));
  return m.output_shape();
}
}  // namespace

TEST(LayersShapes, Conv2DOutputShapesFollowKeras) {
  auto conv = [](int64_t f, std::array<int64_t, 2> k, std::array<int64_t, 2> s, const char* pad,
                 std::array<int64_t, 2> d = {1, 1}) { return std::make_shared<Conv2D>(f, k, s, pad, d); };
  EXPECT_EQ(out_shape(Shape{28, 28, 1}, conv(8, {3, 3}, {1, 1}, "valid")), (Shape{26, 26, 8}));
  EXPECT_EQ(out_shape(Shape{28, 28, 1}, conv(8, {3, 3}, {1, 1}, "same")), (Shape{28, 28, 8}));
  EXPECT_EQ(out_shape(Shape{28, 28, 1}, conv(8, {3, 3}, {2, 2}, "same")), (Shape{14, 14, 8}));
  EXPECT_EQ(out_shape(Shape{28, 28, 1}, conv(8, {3, 3}, {2, 2}, "valid")), (Shape{13, 13, 8}));
  EXPECT_EQ(out_shape(Shape{27, 27, 3}, conv(4, {3, 3}, {2, 2}, "same")), (Shape{14, 14, 4}));
  EXPECT_EQ(out_shape(Shape{10, 7, 2}, conv(5, {3, 3}, {3, 2}, "same")), (Shape{4, 4, 5}));
  EXPECT_EQ(out_shape(Shape{10, 7, 2}, conv(5, {3, 3}, {3, 2}, "valid")), (Shape{3, 3, 5}));
  EXPECT_EQ(out_shape(Shape{10, 7, 2}, conv(5, {4, 1}, {1, 1}, "valid")), (Shape{7, 7, 5}));
  // Dilation: effective size d*(k-1)+1 (9 x 5 here).
  EXPECT_EQ(out_shape(Shape{28, 28, 1}, conv(4, {5, 3}, {1, 1}, "valid", {2, 2})), (Shape{20, 24, 4}));
  EXPECT_EQ(out_shape(Shape{28, 28, 1}, conv(4, {5, 3}, {1, 1}, "same", {2, 2})), (Shape{28, 28, 4}));
  EXPECT_EQ(out_shape(Shape{12, 12, 3}, conv(6, {3, 3}, {1, 1}, "valid", {3, 1})), (Shape{6, 10, 6}));
  // Square-kernel convenience constructor.
  EXPECT_EQ(out_shape(Shape{8, 8, 3}, std::make_shared<Conv2D>(16, 3, "same", "relu")), (Shape{8, 8, 16}));
  EXPECT_EQ(out_shape(Shape{8, 8, 3}, std::make_shared<Conv2D>(16, 5)), (Shape{4, 4, 16}));
  // predict gives that shape.
  Sequential m(Shape{10, 7, 2});
  m.add(Conv2D(5, {3, 3}, {3, 2}, "same"));
  EXPECT_EQ(m.predict(normal(Shape{3, 10, 7, 2}, 1)).shape(), (Shape{3, 4, 4, 5}));
}

TEST(LayersShapes, Conv1DOutputShapesFollowKeras) {
  auto conv = [](int64_t f, int64_t k, int64_t s, const char* pad, int64_t d = 1) {
    return std::make_shared<Conv1D>(f, k, s, pad, d);
  };
  EXPECT_EQ(out_shape(Shape{20, 3}, conv(6, 5, 1, "valid")), (Shape{16, 6}));
  EXPECT_EQ(out_shape(Shape{20, 3}, conv(6, 5, 1, "same")), (Shape{20, 6}));
  EXPECT_EQ(out_shape(Shape{20, 3}, conv(6, 3, 2, "same")), (Shape{10, 6}));
  EXPECT_EQ(out_shape(Shape{21, 3}, conv(6, 3, 2, "same")), (Shape{11, 6}));
  EXPECT_EQ(out_shape(Shape{20, 3}, conv(6, 4, 3, "valid")), (Shape{6, 6}));
  EXPECT_EQ(out_shape(Shape{20, 3}, conv(6, 3, 1, "valid", 2)), (Shape{16, 6}));
  EXPECT_EQ(out_shape(Shape{20, 3}, conv(6, 3, 1, "same", 4)), (Shape{20, 6}));
  Sequential m(Shape{20, 3});
  m.add(Conv1D(6, 4, 3));
  EXPECT_EQ(m.predict(normal(Shape{2, 20, 3}, 2)).shape(), (Shape{2, 6, 6}));
}

TEST(LayersShapes, PoolingOutputShapes) {
  EXPECT_EQ(out_shape(Shape{28, 28, 8}, std::make_shared<MaxPooling2D>()), (Shape{14, 14, 8}));
  EXPECT_EQ(out_shape(Shape{27, 27, 8}, std::make_shared<MaxPooling2D>()), (Shape{13, 13, 8}));
  EXPECT_EQ(out_shape(Shape{7, 7, 1}, std::make_shared<MaxPooling2D>(std::array<int64_t, 2>{3, 3},
                                                                      std::array<int64_t, 2>{2, 2})),
            (Shape{3, 3, 1}));
  EXPECT_EQ(out_shape(Shape{7, 7, 1}, std::make_shared<MaxPooling2D>(std::array<int64_t, 2>{3, 3},
                                                                      std::array<int64_t, 2>{2, 2}, "same")),
            (Shape{4, 4, 1}));
  EXPECT_EQ(out_shape(Shape{5, 5, 3}, std::make_shared<AveragePooling2D>()), (Shape{2, 2, 3}));
  EXPECT_EQ(out_shape(Shape{5, 5, 3}, std::make_shared<AveragePooling2D>(std::array<int64_t, 2>{2, 2},
                                                                          std::array<int64_t, 2>{0, 0}, "same")),
            (Shape{3, 3, 3}));
  EXPECT_EQ(out_shape(Shape{6, 9, 2}, std::make_shared<AveragePooling2D>(std::array<int64_t, 2>{2, 3},
                                                                          std::array<int64_t, 2>{1, 3})),
            (Shape{5, 3, 2}));
  EXPECT_EQ(out_shape(Shape{6, 9, 2}, std::make_shared<GlobalAveragePooling2D>()), (Shape{2}));
  EXPECT_EQ(out_shape(Shape{6, 9, 2}, std::make_shared<GlobalMaxPooling2D>()), (Shape{2}));
  EXPECT_EQ(out_shape(Shape{3, 4, 5}, std::make_shared<Flatten>()), (Shape{60}));
}

// Pooling on 1..9 in a 3x3 image, 2x2 windows, stride 2, "same": the odd
// pixel pads after; average pooling leaves padding out of the count.
TEST(LayersShapes, PoolingSameValues) {
  const Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9}, Shape{1, 3, 3, 1});
  Sequential mx(Shape{3, 3, 1});
  mx.add(MaxPooling2D({2, 2}, {2, 2}, "same"));
  EXPECT_EQ(mx.predict(x).to_vector(), (std::vector<float>{5, 6, 8, 9}));
  Sequential av(Shape{3, 3, 1});
  av.add(AveragePooling2D({2, 2}, {2, 2}, "same"));
  expect_near_vec(av.predict(x).to_vector(), std::vector<float>{3.0f, 4.5f, 7.5f, 9.0f}, 1e-6, "avg pool same");
}

TEST(LayersShapes, GlobalPoolingValues) {
  // x[b, h, w, c]: channel 0 positive and growing, channel 1 negative.
  const int64_t B = 2, H = 2, W = 3, C = 2;
  std::vector<float> v(size_t(B * H * W * C));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t w = 0; w < W; ++w) {
        const float base = float(b * 100 + h * 10 + w);
        v[size_t(((b * H + h) * W + w) * C + 0)] = base + 0.5f;
        v[size_t(((b * H + h) * W + w) * C + 1)] = -base * 0.25f + float((h * W + w) % 4);
      }
  std::vector<float> want_avg(size_t(B * C), 0.0f), want_max(size_t(B * C), -1e30f);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < H * W; ++i)
      for (int64_t c = 0; c < C; ++c) {
        const float e = v[size_t((b * H * W + i) * C + c)];
        want_avg[size_t(b * C + c)] += e / float(H * W);
        want_max[size_t(b * C + c)] = std::max(want_max[size_t(b * C + c)], e);
      }
  const Tensor x = Tensor::from_vector(v, Shape{B, H, W, C});
  Sequential ga(Shape{H, W, C});
  ga.add(GlobalAveragePooling2D());
  const Tensor pa = ga.predict(x);
  EXPECT_EQ(pa.shape(), (Shape{B, C}));
  expect_near_vec(pa.to_vector(), want_avg, 1e-6, "global average");
  Sequential gm(Shape{H, W, C});
  gm.add(GlobalMaxPooling2D());
  const Tensor pm = gm.predict(x);
  EXPECT_EQ(pm.shape(), (Shape{B, C}));
  EXPECT_EQ(pm.to_vector(), want_max);
}

TEST(LayersShapes, FlattenKeepsRowMajorOrder) {
  Sequential m(Shape{3, 4, 5});
  m.add(Flatten());
  const Tensor x = normal(Shape{2, 3, 4, 5}, 3);
  const Tensor p = m.predict(x);
  EXPECT_EQ(p.shape(), (Shape{2, 60}));
  EXPECT_EQ(p.to_vector(), x.to_vector());
}

// Embedding: {steps} ids -> {steps, dim}, each row the table's row of its id.
TEST(LayersShapes, EmbeddingShapeAndLookup) {
  clear_session();
  Sequential m(Shape{7});
  m.add(Embedding(10, 4));
  EXPECT_EQ(m.output_shape(), (Shape{7, 4}));
  const Tensor table = weight(m, "embedding/embeddings");
  EXPECT_EQ(table.shape(), (Shape{10, 4}));
  std::vector<float> ids{0, 9, 3, 3, 5, 1, 2, 7, 8, 6, 4, 0, 9, 1};
  const Tensor p = m.predict(Tensor::from_vector(ids, Shape{2, 7}));
  EXPECT_EQ(p.shape(), (Shape{2, 7, 4}));
  const std::vector<float> t = table.to_vector(), pv = p.to_vector();
  for (size_t i = 0; i < ids.size(); ++i)
    for (size_t d = 0; d < 4; ++d) EXPECT_EQ(pv[i * 4 + d], t[size_t(ids[i]) * 4 + d]) << i << "," << d;
}

TEST(LayersShapes, RecurrentOutputShapes) {
  EXPECT_EQ(out_shape(Shape{6, 3}, std::make_shared<LSTM>(5)), (Shape{5}));
  EXPECT_EQ(out_shape(Shape{6, 3}, std::make_shared<LSTM>(5, true)), (Shape{6, 5}));
  EXPECT_EQ(out_shape(Shape{6, 3}, std::make_shared<GRU>(7)), (Shape{7}));
  EXPECT_EQ(out_shape(Shape{6, 3}, std::make_shared<GRU>(7, true)), (Shape{6, 7}));
  // Stacked, and through predict.
  Sequential m(Shape{6, 3});
  m.add(LSTM(5, true));
  m.add(GRU(4, true));
  m.add(LSTM(2));
  EXPECT_EQ(m.output_shape(), (Shape{2}));
  EXPECT_EQ(m.predict(normal(Shape{3, 6, 3}, 4)).shape(), (Shape{3, 2}));
  Sequential s(Shape{5, 2});
  s.add(GRU(3, true));
  EXPECT_EQ(s.predict(normal(Shape{4, 5, 2}, 5)).shape(), (Shape{4, 5, 3}));
}

TEST(LayersShapes, RecurrentLayersRefuseEmptySequences) {
  // Models refuse empty input shapes first; a layer built directly says so too.
  for (const Shape& s : {Shape{0, 3}, Shape{4, 0}}) {
    EXPECT_TRUE(test_support::throws<ShapeError>([&] { LSTM(5).build(s); }, {"lstm", "at least one step", s.str()}));
    EXPECT_TRUE(test_support::throws<ShapeError>([&] { GRU(5).build(s); }, {"gru", "at least one step", s.str()}));
  }
}

// Keras' weight names, order and layouts; automatic names increment.
TEST(LayersShapes, WeightNamesAndLayoutsFollowKeras) {
  clear_session();
  Sequential m(Shape{8, 8, 2});
  m.add(Conv2D(4, {3, 3}));
  m.add(BatchNormalization());
  m.add(MaxPooling2D());
  m.add(Conv2D(5, {2, 2}, {1, 1}, "same"));
  m.add(Flatten());
  m.add(Dense(6));
  m.add(Dense(3, "softmax"));
  std::vector<std::string> layer_names;
  for (auto& l : m.layers()) layer_names.push_back(l->name());
  EXPECT_EQ(layer_names, (std::vector<std::string>{"conv2d", "batch_normalization", "max_pooling2d", "conv2d_1",
                                                   "flatten", "dense", "dense_1"}));
  std::vector<std::string> types;
  for (auto& l : m.layers()) types.push_back(l->type());
  EXPECT_EQ(types, (std::vector<std::string>{"Conv2D", "BatchNormalization", "MaxPooling2D", "Conv2D", "Flatten",
                                             "Dense", "Dense"}));
  struct NS {
    std::string name;
    Shape shape;
  };
  const std::vector<NS> want{{"conv2d/kernel", Shape{3, 3, 2, 4}},
                             {"conv2d/bias", Shape{4}},
                             {"batch_normalization/gamma", Shape{4}},
                             {"batch_normalization/beta", Shape{4}},
                             {"batch_normalization/moving_mean", Shape{4}},
                             {"batch_normalization/moving_variance", Shape{4}},
                             {"conv2d_1/kernel", Shape{2, 2, 4, 5}},
                             {"conv2d_1/bias", Shape{5}},
                             {"dense/kernel", Shape{3 * 3 * 5, 6}},
                             {"dense/bias", Shape{6}},
                             {"dense_1/kernel", Shape{6, 3}},
                             {"dense_1/bias", Shape{3}}};
  const std::vector<Weight> w = m.weights();
  ASSERT_EQ(w.size(), want.size());
  for (size_t i = 0; i < w.size(); ++i) {
    EXPECT_EQ(w[i].name, want[i].name) << i;
    EXPECT_EQ(w[i].value.shape(), want[i].shape) << want[i].name;
  }
  // BN initial values: gamma ones, beta zeros, moving mean zeros, variance ones.
  EXPECT_EQ(w[2].value.to_vector(), std::vector<float>(4, 1.0f));
  EXPECT_EQ(w[3].value.to_vector(), std::vector<float>(4, 0.0f));
  EXPECT_EQ(w[4].value.to_vector(), std::vector<float>(4, 0.0f));
  EXPECT_EQ(w[5].value.to_vector(), std::vector<float>(4, 1.0f));
  EXPECT_EQ(w[1].value.to_vector(), std::vector<float>(4, 0.0f));  // conv bias zeros

  Sequential r(Shape{9});
  r.add(Embedding(10, 4));
  r.add(LSTM(5, true));
  r.add(GRU(6));
  r.add(Dense(2));
  const std::vector<NS> want_r{{"embedding/embeddings", Shape{10, 4}}, {"lstm/kernel", Shape{4, 20}},
                               {"lstm/recurrent_kernel", Shape{5, 20}}, {"lstm/bias", Shape{20}},
                               {"gru/kernel", Shape{5, 18}},          {"gru/recurrent_kernel", Shape{6, 18}},
                               {"gru/bias", Shape{2, 18}},            {"dense_2/kernel", Shape{6, 2}},
                               {"dense_2/bias", Shape{2}}};
  const std::vector<Weight> wr = r.weights();
  ASSERT_EQ(wr.size(), want_r.size());
  for (size_t i = 0; i < wr.size(); ++i) {
    EXPECT_EQ(wr[i].name, want_r[i].name) << i;
    EXPECT_EQ(wr[i].value.shape(), want_r[i].shape) << want_r[i].name;
  }

  Sequential c(Shape{12, 3});
  c.add(Conv1D(7, 4));
  c.add(Conv1D(2, 3));
  ASSERT_EQ(c.weights().size(), 4u);
  EXPECT_EQ(c.weights()[0].name, "conv1d/kernel");
  EXPECT_EQ(c.weights()[0].value.shape(), (Shape{4, 3, 7}));
  EXPECT_EQ(c.weights()[2].name, "conv1d_1/kernel");
  EXPECT_EQ(c.weights()[2].value.shape(), (Shape{3, 7, 2}));

  // clear_session restarts the counters; a set name is kept.
  clear_session();
  Dense a(2), b(2);
  EXPECT_EQ(a.name(), "dense");
  EXPECT_EQ(b.name(), "dense_1");
  b.set_name("head");
  Sequential named(Shape{3});
  named.add(b);
  EXPECT_EQ(named.weights()[0].name, "head/kernel");
}

// Conv2D values against a direct convolution: stride 2 "same" (TensorFlow's
// padding, the odd pixel after) and dilation 2 "valid", with the kernel in
// Keras' {kh, kw, in, out} layout.
TEST(LayersShapes, Conv2DValuesMatchDirectConvolution) {
  struct Case {
    std::array<int64_t, 2> k, s, d;
    const char* pad;
  };
  for (const Case& cs : {Case{{3, 3}, {2, 2}, {1, 1}, "same"}, Case{{2, 3}, {1, 1}, {2, 2}, "valid"},
                         Case{{4, 2}, {3, 1}, {1, 1}, "same"}}) {
    const int64_t H = 6, W = 5, C = 2, F = 3, B = 2;
    manual_seed(31);
    Sequential m(Shape{H, W, C});
    m.add(Conv2D(F, cs.k, cs.s, cs.pad, cs.d));
    const std::vector<float> k = m.weights()[0].value.to_vector();
    set_values(m.weights()[1].value, {0.1f, -0.2f, 0.3f});
    const Tensor x = normal(Shape{B, H, W, C}, 32);
    const std::vector<float> xv = x.to_vector();
    const Shape os = m.output_shape();
    const int64_t Ho = os[0], Wo = os[1];
    int64_t pt = 0, pl = 0;
    if (std::string(cs.pad) == "same") {
      EXPECT_EQ(Ho, (H + cs.s[0] - 1) / cs.s[0]);
      EXPECT_EQ(Wo, (W + cs.s[1] - 1) / cs.s[1]);
      pt = std::max<int64_t>((Ho - 1) * cs.s[0] + (cs.k[0] - 1) * cs.d[0] + 1 - H, 0) / 2;
      pl = std::max<int64_t>((Wo - 1) * cs.s[1] + (cs.k[1] - 1) * cs.d[1] + 1 - W, 0) / 2;
    }
    const std::vector<float> p = m.predict(x).to_vector();
    ASSERT_EQ(p.size(), size_t(B * Ho * Wo * F));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < Ho; ++i)
        for (int64_t j = 0; j < Wo; ++j)
          for (int64_t f = 0; f < F; ++f) {
            double s = std::vector<double>{0.1, -0.2, 0.3}[size_t(f)];
            for (int64_t u = 0; u < cs.k[0]; ++u)
              for (int64_t v = 0; v < cs.k[1]; ++v) {
                const int64_t h = i * cs.s[0] + u * cs.d[0] - pt, w = j * cs.s[1] + v * cs.d[1] - pl;
                if (h < 0 || h >= H || w < 0 || w >= W) continue;
                for (int64_t c = 0; c < C; ++c)
                  s += double(xv[size_t(((b * H + h) * W + w) * C + c)]) *
                       k[size_t(((u * cs.k[1] + v) * C + c) * F + f)];
              }
            EXPECT_NEAR(p[size_t(((b * Ho + i) * Wo + j) * F + f)], s, 1e-5)
                << cs.pad << " k" << cs.k[0] << "x" << cs.k[1] << " at " << b << "," << i << "," << j << "," << f;
          }
  }
}

// LSTM (gates i, f, c, o) and GRU (z, r, h; reset_after, two bias rows)
// against direct implementations of the documented formulas.
TEST(LayersShapes, RecurrentValuesMatchDirectFormulas) {
  const int64_t B = 2, T = 4, F = 3;
  const Tensor x = normal(Shape{B, T, F}, 33);
  const std::vector<float> xv = x.to_vector();
  auto sig = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  for (const bool gru : {false, true}) {
    const int64_t H = 3, G = gru ? 3 : 4;
    manual_seed(34);
    Sequential m(Shape{T, F});
    if (gru) m.add(GRU(H, true));
    else m.add(LSTM(H, true));
    // Random biases so every bias slot matters.
    const Tensor bias = m.weights()[2].value;
    set_values(bias, normal(bias.shape(), 35, 0.0f, 0.5f).to_vector());
    const std::vector<float> K = m.weights()[0].value.to_vector(), R = m.weights()[1].value.to_vector(),
                             bv = bias.to_vector();
    const std::vector<float> p = m.predict(x).to_vector();
    ASSERT_EQ(p.size(), size_t(B * T * H));
    for (int64_t b = 0; b < B; ++b) {
      std::vector<double> h(size_t(H), 0.0), c(size_t(H), 0.0);
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> xw(size_t(G * H), 0.0), hu(size_t(G * H), 0.0);
        for (int64_t g = 0; g < G * H; ++g) {
          for (int64_t f = 0; f < F; ++f) xw[size_t(g)] += xv[size_t((b * T + t) * F + f)] * K[size_t(f * G * H + g)];
          for (int64_t j = 0; j < H; ++j) hu[size_t(g)] += h[size_t(j)] * R[size_t(j * G * H + g)];
          xw[size_t(g)] += bv[size_t(g)];                    // LSTM bias; GRU input bias (row 0)
          if (gru) hu[size_t(g)] += bv[size_t(G * H + g)];  // GRU recurrent bias (row 1)
        }
        std::vector<double> hn(static_cast<size_t>(H));
        for (int64_t j = 0; j < H; ++j) {
          if (gru) {
            const double z = sig(xw[size_t(j)] + hu[size_t(j)]);
            const double r = sig(xw[size_t(H + j)] + hu[size_t(H + j)]);
            const double n = std::tanh(xw[size_t(2 * H + j)] + r * hu[size_t(2 * H + j)]);
            hn[size_t(j)] = z * h[size_t(j)] + (1 - z) * n;
          } else {
            const double i = sig(xw[size_t(j)] + hu[size_t(j)]);
            const double f = sig(xw[size_t(H + j)] + hu[size_t(H + j)]);
            const double g = std::tanh(xw[size_t(2 * H + j)] + hu[size_t(2 * H + j)]);
            const double o = sig(xw[size_t(3 * H + j)] + hu[size_t(3 * H + j)]);
            c[size_t(j)] = f * c[size_t(j)] + i * g;
            hn[size_t(j)] = o * std::tanh(c[size_t(j)]);
          }
        }
        h = hn;
        for (int64_t j = 0; j < H; ++j)
          EXPECT_NEAR(p[size_t((b * T + t) * H + j)], h[size_t(j)], 1e-5)
              << (gru ? "GRU" : "LSTM") << " b" << b << " t" << t << " j" << j;
      }
    }
  }
}

// ---------------------------------------------------------------------------
// 4. Initialisers
// ---------------------------------------------------------------------------

namespace {
// R {H, G*H}: R R^T = I_H within tol.
void expect_orthonormal_rows(const Tensor& r, double tol, const char* what) {
  const int64_t H = r.shape()[0], N = r.shape()[1];
  const std::vector<float> v = r.to_vector();
  double worst = 0;
  for (int64_t i = 0; i < H; ++i)
    for (int64_t j = 0; j < H; ++j) {
      double s = 0;
      for (int64_t k = 0; k < N; ++k) s += double(v[size_t(i * N + k)]) * v[size_t(j * N + k)];
      worst = std::max(worst, std::fabs(s - (i == j ? 1.0 : 0.0)));
    }
  EXPECT_LT(worst, tol) << what << ": R R^T differs from I by " << worst;
}

// Every |v| <= limit, the largest |v| near the limit (a uniform draw of
// many values reaches it), and not all equal.
void expect_uniform_within(const Tensor& t, double limit, const char* what) {
  const std::vector<float> v = t.to_vector();
  ASSERT_GT(v.size(), 50u) << what;
  double most = 0;
  for (float f : v) {
    EXPECT_LE(std::fabs(f), limit) << what;
    most = std::max(most, double(std::fabs(f)));
  }
  EXPECT_GT(most, 0.8 * limit) << what << ": values use too little of +-" << limit;
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  EXPECT_LT(*lo, 0.0f) << what;
  EXPECT_GT(*hi, 0.0f) << what;
  double mean = 0;
  for (float f : v) mean += f;
  mean /= double(v.size());
  EXPECT_LT(std::fabs(mean), 0.3 * limit) << what << ": not centred";
}
}  // namespace

TEST(LayersInit, RecurrentKernelsAreOrthogonalAndLstmForgetBiasIsOne) {
  manual_seed(41);
  const int64_t F = 7;
  for (int64_t H : {1, 4, 16, 33}) {
    Sequential m(Shape{5, F});
    m.add(LSTM(H));
    const std::vector<Weight> w = m.weights();
    expect_orthonormal_rows(w[1].value, 1e-4, "LSTM recurrent_kernel");
    const std::vector<float> b = w[2].value.to_vector();
    ASSERT_EQ(b.size(), size_t(4 * H));
    for (int64_t j = 0; j < 4 * H; ++j)
      EXPECT_EQ(b[size_t(j)], (j >= H && j < 2 * H) ? 1.0f : 0.0f) << "LSTM bias " << j << " of H=" << H;
    if (H >= 4) expect_uniform_within(w[0].value, std::sqrt(6.0 / double(F + 4 * H)), "LSTM kernel");

    Sequential g(Shape{5, F});
    g.add(GRU(H));
    const std::vector<Weight> gw = g.weights();
    expect_orthonormal_rows(gw[1].value, 1e-4, "GRU recurrent_kernel");
    EXPECT_EQ(gw[2].value.to_vector(), std::vector<float>(size_t(6 * H), 0.0f)) << "GRU bias";
    if (H >= 4) expect_uniform_within(gw[0].value, std::sqrt(6.0 / double(F + 3 * H)), "GRU kernel");
  }
}

TEST(LayersInit, GlorotAndEmbeddingRanges) {
  manual_seed(42);
  {
    Sequential m(Shape{20});
    m.add(Dense(30));
    expect_uniform_within(m.weights()[0].value, std::sqrt(6.0 / 50.0), "Dense kernel");
    EXPECT_EQ(m.weights()[1].value.to_vector(), std::vector<float>(30, 0.0f));
  }
  {
    // Conv2D: fan_in = kh*kw*in = 36, fan_out = kh*kw*out = 144.
    Sequential m(Shape{8, 8, 4});
    m.add(Conv2D(16, {3, 3}));
    expect_uniform_within(m.weights()[0].value, std::sqrt(6.0 / (36.0 + 144.0)), "Conv2D kernel");
  }
  {
    // Non-square: fan_in 5*2*3 = 30, fan_out 5*2*8 = 80.
    Sequential m(Shape{8, 8, 3});
    m.add(Conv2D(8, {5, 2}));
    expect_uniform_within(m.weights()[0].value, std::sqrt(6.0 / 110.0), "Conv2D 5x2 kernel");
  }
  {
    // Conv1D: fan_in k*in = 12, fan_out k*out = 40.
    Sequential m(Shape{16, 3});
    m.add(Conv1D(10, 4));
    expect_uniform_within(m.weights()[0].value, std::sqrt(6.0 / 52.0), "Conv1D kernel");
  }
  {
    Sequential m(Shape{5});
    m.add(Embedding(100, 16));
    expect_uniform_within(m.weights()[0].value, 0.05, "Embedding");
  }
}

TEST(LayersInit, SameSeedGivesSameWeights) {
  auto build = [](uint64_t seed) {
    manual_seed(seed);
    Sequential m(Shape{6, 6, 2});
    m.add(Conv2D(3, 3));
    m.add(Flatten());
    m.add(Dense(4));
    Sequential r(Shape{5});
    r.add(Embedding(9, 3));
    r.add(LSTM(4, true));
    r.add(GRU(3));
    std::vector<std::vector<float>> out;
    for (const Weight& w : m.weights()) out.push_back(w.value.to_vector());
    for (const Weight& w : r.weights()) out.push_back(w.value.to_vector());
    return out;
  };
  const auto a = build(123), b = build(123), c = build(124);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // Each randomly initialised weight differs with the seed.
  for (size_t i : {0u, 2u, 4u, 5u, 6u, 8u, 9u}) EXPECT_NE(a[i], c[i]) << "weight " << i;
}

// ---------------------------------------------------------------------------
// 5. Errors
// ---------------------------------------------------------------------------

TEST(LayersErrors, WrongInputRankIsShapeError) {
  {
    Sequential m(Shape{784});
    EXPECT_TRUE(throws<ShapeError>([&] { m.add(Conv2D(8, 3)); }, {"{height, width, channels}", "{784}"}));
    EXPECT_TRUE(m.layers().empty());
    EXPECT_TRUE(throws<ShapeError>([&] { m.add(Conv1D(8, 3)); }, {"{steps, channels}", "{784}"}));
    EXPECT_TRUE(throws<ShapeError>([&] { m.add(LSTM(8)); }, {"{steps, features}", "{784}"}));
    EXPECT_TRUE(throws<ShapeError>([&] { m.add(GRU(8)); }, {"{steps, features}", "{784}"}));
    EXPECT_TRUE(throws<ShapeError>([&] { m.add(MaxPooling2D()); }, {"{height, width, channels}", "{784}"}));
    EXPECT_TRUE(throws<ShapeError>([&] { m.add(GlobalAveragePooling2D()); }, {"{height, width, channels}", "{784}"}));
    // The model is untouched and still takes a fitting layer.
    EXPECT_TRUE(m.layers().empty());
    m.add(Dense(2));
    EXPECT_EQ(m.output_shape(), (Shape{2}));
  }
  {
    Sequential m(Shape{10, 3});
    EXPECT_TRUE(throws<ShapeError>([&] { m.add(Embedding(20, 4)); }, {"{steps}", "{10, 3}"}));
    EXPECT_TRUE(throws<ShapeError>([&] { m.add(Conv2D(8, 3)); }, {"{height, width, channels}", "{10, 3}"}));
  }
  {
    Sequential m(Shape{4, 4, 4});
    EXPECT_TRUE(throws<ShapeError>([&] { m.add(LSTM(3)); }, {"{steps, features}", "{4, 4, 4}"}));
    EXPECT_TRUE(throws<ShapeError>([&] { m.add(Conv1D(3, 2)); }, {"{steps, channels}", "{4, 4, 4}"}));
  }
}

TEST(LayersErrors, WindowLargerThanInputIsShapeError) {
  Sequential m(Shape{3, 3, 1});
  EXPECT_TRUE(throws<ShapeError>([&] { m.add(Conv2D(4, 5)); }, {"5x5", "3x3", "larger"}));
  // Dilation makes a 3x3 kernel span 5x5.
  EXPECT_TRUE(throws<ShapeError>([&] { m.add(Conv2D(4, {3, 3}, {1, 1}, "valid", {2, 2})); }, {"5x5", "3x3"}));
  EXPECT_TRUE(throws<ShapeError>([&] { m.add(MaxPooling2D({4, 4})); }, {"4x4", "3x3"}));
  EXPECT_TRUE(throws<ShapeError>([&] { m.add(AveragePooling2D({1, 4})); }, {"1x4", "3x3"}));
  // "same" pads a 5x5 kernel onto a 3x3 input: fine, shape kept.
  m.add(Conv2D(4, 5, "same"));
  EXPECT_EQ(m.output_shape(), (Shape{3, 3, 4}));
  Sequential s(Shape{4, 2});
  EXPECT_TRUE(throws<ShapeError>([&] { s.add(Conv1D(3, 5)); }, {"larger"}));
}

namespace {
Sequential embedding_model() {
  manual_seed(51);
  Sequential m(Shape{5});
  m.add(Embedding(10, 4));
  m.add(GRU(3));
  m.add(Dense(2, "softmax"));
  m.compile(OptimizerSpec::adam(1e-2f), "sparse_categorical_crossentropy", {"accuracy"});
  return m;
}

Tensor ids_with(float bad, int64_t rows = 4, int64_t bad_row = 2, int64_t bad_step = 3) {
  std::vector<float> v(size_t(rows * 5));
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i % 10);
  v[size_t(bad_row * 5 + bad_step)] = bad;
  return Tensor::from_vector(v, Shape{rows, 5});
}
}  // namespace

TEST(LayersErrors, TokenIdOutOfRangeIsIndexErrorInFitAndPredict) {
  Sequential m = embedding_model();
  const Tensor y = Tensor::from_vector(std::vector<float>{0, 1, 0, 1}, Shape{4});
  FitOptions fo;
  fo.verbose = 0;
  fo.batch_size = 4;
  const std::vector<float> before = m.weights()[0].value.to_vector();
  for (float bad : {10.0f, 17.0f, -1.0f}) {
    const std::string id = std::to_string(int(bad));
    EXPECT_TRUE(throws<IndexError>([&] { m.fit(ids_with(bad), y, fo); }, {"token id " + id, "10"})) << bad;
    EXPECT_TRUE(throws<IndexError>([&] { m.predict(ids_with(bad)); }, {"token id " + id, "10"})) << bad;
    EXPECT_TRUE(throws<IndexError>([&] { m.evaluate(ids_with(bad), y); }, {"token id " + id})) << bad;
    Tensor out = Tensor::empty(Shape{4, 2});
    EXPECT_TRUE(throws<IndexError>([&] { m.predict(ids_with(bad), out); }, {"token id " + id})) << bad;
  }
  // The message names the vocabulary [0, 10) and where the id sits.
  EXPECT_TRUE(throws<IndexError>([&] { m.predict(ids_with(12.0f)); }, {"[0, 10)", "row 2", "step 3"}));
  // Nothing trained on the bad batches; good ids still work.
  EXPECT_EQ(m.weights()[0].value.to_vector(), before);
  m.fit(ids_with(9.0f), y, fo);
  EXPECT_EQ(m.predict(ids_with(0.0f)).shape(), (Shape{4, 2}));
}

TEST(LayersErrors, FractionalTokenIdIsValueErrorInFitAndPredict) {
  Sequential m = embedding_model();
  const Tensor y = Tensor::from_vector(std::vector<float>{0, 1, 0, 1}, Shape{4});
  FitOptions fo;
  fo.verbose = 0;
  fo.batch_size = 4;
  EXPECT_TRUE(throws<ValueError>([&] { m.fit(ids_with(2.5f), y, fo); }, {"2.5", "whole"}));
  EXPECT_TRUE(throws<ValueError>([&] { m.predict(ids_with(2.5f)); }, {"2.5", "whole"}));
  EXPECT_TRUE(throws<ValueError>([&] { m.predict(ids_with(0.25f)); }, {"0.25"}));
  m.fit(ids_with(3.0f), y, fo);
}

// Regression test (was a contract gap, fixed). recurrent.h documents for Embedding:
// "A fractional id throws ValueError, one outside [0, input_dim) IndexError,
// both naming the id and the vocabulary size" (DESIGN.md likewise). The
// ValueError for a fractional id names the id but not the vocabulary size:
// predict(ids with 2.5) throws "embedding: token ids must be whole numbers;
// row 2, step 3 holds 2.500000" -- no "10" / "[0, 10)" in it.
TEST(LayersErrors, FractionalTokenIdMessageNamesVocabularySize) {
  Sequential m = embedding_model();
  EXPECT_TRUE(throws<ValueError>([&] { m.predict(ids_with(2.5f)); }, {"2.5", "10"}));
}

// Regression test (was a contract gap, fixed). DESIGN.md ("Token ids for Embedding: int32, or float32 holding
// whole numbers") and the implementation disagree; recurrent.h documents
// float32 ids only. predict(int32 ids {1, 3}) throws TypeError "x must be
// float32; got int32" instead of giving the float32-id result.
TEST(LayersErrors, Int32TokenIdsAreAccepted) {
  Sequential m = embedding_model();
  std::vector<int32_t> iv(20);
  for (size_t i = 0; i < iv.size(); ++i) iv[i] = int32_t(i % 10);
  const Tensor want = m.predict(ids_with(5.0f, 4, 1, 0));  // float ids i % 10 (element 5 holds 5 anyway)
  Tensor got;
  ASSERT_NO_THROW(got = m.predict(Tensor::from_vector(iv, Shape{4, 5})));
  EXPECT_EQ(got.to_vector(), want.to_vector());
}

TEST(LayersErrors, EmbeddingNotFirstIsValueError) {
  Sequential m(Shape{6});
  m.add(Dense(6));
  EXPECT_TRUE(throws<ValueError>([&] { m.add(Embedding(10, 4)); }, {"first layer"}));
  EXPECT_EQ(m.layers().size(), 1u);
}

TEST(LayersErrors, UnknownActivationValueIsValueError) {
  // Only a cast makes such a value; it must not pass the input through as if it were "linear".
  ag::EagerBuilder b;
  const Value x = b.input(ag::Tensor(Tensor::from_vector(std::vector<float>{-1.0f, 2.0f}, {1, 2})));
  EXPECT_TRUE(throws<ValueError>([&] { apply_activation(b, Activation(14), x); },
                                 {"apply_activation: 14 is not an Activation", "0 (Linear) to 13 (HardSwish)"}));
  EXPECT_TRUE(throws<ValueError>([&] { apply_activation(b, Activation(-1), x); }, {"-1 is not an Activation"}));
  EXPECT_EQ(b.tensor(apply_activation(b, Activation::Relu, x)).data().to_vector(), (std::vector<float>{0.0f, 2.0f}));
}

TEST(LayersErrors, BadConstructorArgumentsAreValueError) {
  EXPECT_TRUE(throws<ValueError>([] { Conv2D c(0, 3); }, {"filters", "0"}));
  EXPECT_TRUE(throws<ValueError>([] { Conv2D c(-2, {3, 3}); }, {"filters", "-2"}));
  EXPECT_TRUE(throws<ValueError>([] { Conv2D c(4, {3, 0}); }, {"kernel_size"}));
  EXPECT_TRUE(throws<ValueError>([] { Conv2D c(4, {3, 3}, {0, 1}); }, {"strides"}));
  EXPECT_TRUE(throws<ValueError>([] { Conv2D c(4, {3, 3}, {1, 1}, "valid", {0, 1}); }, {"dilation"}));
  EXPECT_TRUE(throws<ValueError>([] { Conv2D c(4, 3, "full"); }, {"full", "valid", "same"}));
  EXPECT_TRUE(throws<ValueError>([] { Conv2D c(4, {3, 3}, {2, 2}, "valid", {2, 2}); }, {"strides", "dilation"}));
  EXPECT_TRUE(throws<ValueError>([] { Conv2D c(4, {3, 3}, {2, 1}, "same", {1, 2}); }, {"strides", "dilation"}));
  EXPECT_TRUE(throws<ValueError>([] { Conv2D c(4, 3, "same", "swishy"); }, {"swishy"}));
  EXPECT_TRUE(throws<ValueError>([] { Conv1D c(0, 3); }, {"filters"}));
  EXPECT_TRUE(throws<ValueError>([] { Conv1D c(4, 3, 0); }, {"strides"}));
  EXPECT_TRUE(throws<ValueError>([] { Conv1D c(4, 3, 2, "valid", 2); }, {"strides", "dilation"}));
  EXPECT_TRUE(throws<ValueError>([] { Conv1D c(4, 3, 1, "causal"); }, {"causal"}));
  EXPECT_TRUE(throws<ValueError>([] { MaxPooling2D p({0, 2}); }, {"pool_size"}));
  EXPECT_TRUE(throws<ValueError>([] { AveragePooling2D p({2, 2}, {2, 2}, "full"); }, {"full"}));
  EXPECT_TRUE(throws<ValueError>([] { BatchNormalization b(1.0f); }, {"momentum"}));
  EXPECT_TRUE(throws<ValueError>([] { BatchNormalization b(-0.1f); }, {"momentum"}));
  EXPECT_TRUE(throws<ValueError>([] { BatchNormalization b(0.99f, 0.0f); }, {"epsilon"}));
  EXPECT_TRUE(throws<ValueError>([] { LayerNormalization l(-1.0f); }, {"epsilon"}));
  EXPECT_TRUE(throws<ValueError>([] { Embedding e(0, 4); }, {"input_dim"}));
  EXPECT_TRUE(throws<ValueError>([] { Embedding e(4, 0); }, {"output_dim"}));
  EXPECT_TRUE(throws<ValueError>([] { LSTM l(0); }, {"units"}));
  EXPECT_TRUE(throws<ValueError>([] { GRU g(0); }, {"units"}));
  // Edge values that are allowed.
  BatchNormalization ok(0.0f);
  Conv2D ok2(1, {1, 1}, {1, 1}, "same", {1, 1});
  (void)ok;
  (void)ok2;
}

// ---------------------------------------------------------------------------
// 6. Training
// ---------------------------------------------------------------------------

namespace {
// Sequences of `len` tokens in [0, 12); half contain token 3 (label 1) at
// one to three random places, half never do (label 0).
void contains_three(int64_t n, int64_t len, uint32_t seed, Tensor& x, Tensor& y) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> tok(0, 10), pos(0, int(len) - 1), count(1, 3);
  std::vector<float> xv(size_t(n * len));
  std::vector<int32_t> yv(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t t = 0; t < len; ++t) {
      const int v = tok(gen);
      xv[size_t(r * len + t)] = float(v >= 3 ? v + 1 : v);  // never 3
    }
    yv[size_t(r)] = int32_t(r % 2);
    if (r % 2) {
      const int k = count(gen);
      for (int i = 0; i < k; ++i) xv[size_t(r * len + pos(gen))] = 3.0f;
    }
  }
  x = Tensor::from_vector(xv, Shape{n, len});
  y = Tensor::from_vector(yv, Shape{n});
}
}  // namespace

TEST(LayersTraining, EmbeddingGruLearnsContainsToken) {
  const auto t0 = std::chrono::steady_clock::now();
  manual_seed(61);
  clear_session();
  const int64_t len = 10;
  Tensor x, y, xt, yt;
  contains_three(2000, len, 62, x, y);
  contains_three(500, len, 63, xt, yt);
  Sequential m(Shape{len});
  m.add(Embedding(12, 8));
  m.add(GRU(16));
  m.add(Dense(2, "softmax"));
  m.compile(OptimizerSpec::adamw(1e-2f), "sparse_categorical_crossentropy", {"accuracy"});
  const auto before = m.evaluate(xt, yt, 250);
  FitOptions fo;
  fo.epochs = 4;
  fo.batch_size = 32;
  fo.verbose = 0;
  const History h = m.fit(x, y, fo);
  const auto after = m.evaluate(xt, yt, 250);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ info ] Embedding+GRU: held-out accuracy %.3f -> %.3f, loss %.4f -> %.4f, %.2f s\n",
              before.at("accuracy"), after.at("accuracy"), before.at("loss"), after.at("loss"), secs);
  EXPECT_GT(after.at("accuracy"), 0.95);
  EXPECT_LT(after.at("loss"), 0.5 * before.at("loss"));
  EXPECT_LT(h["loss"].back(), h["loss"].front());
  // predict agrees with evaluate: probabilities summing to one, argmax = accuracy.
  const Tensor p = m.predict(xt, 250);
  ASSERT_EQ(p.shape(), (Shape{500, 2}));
  const std::vector<float> pv = p.to_vector();
  int64_t correct = 0;
  for (int64_t r = 0; r < 500; ++r) {
    EXPECT_NEAR(pv[size_t(2 * r)] + pv[size_t(2 * r + 1)], 1.0f, 1e-5);
    correct += int64_t(pv[size_t(2 * r + 1)] > pv[size_t(2 * r)]) == int64_t(yt.item(r));
  }
  EXPECT_NEAR(double(correct) / 500.0, after.at("accuracy"), 1e-9);
}

TEST(LayersTraining, SmallCnnWithBatchNormOverfitsTinyImageSet) {
  manual_seed(71);
  clear_session();
  const int64_t n = 16;
  const Tensor x = normal(Shape{n, 8, 8, 1}, 72);
  std::vector<int32_t> labels(static_cast<size_t>(n));
  std::mt19937 gen(73);
  for (auto& l : labels) l = int32_t(gen() % 3);
  const Tensor y = Tensor::from_vector(labels, Shape{n});
  Sequential m(Shape{8, 8, 1});
  m.add(Conv2D(8, 3, "same", "relu"));
  m.add(BatchNormalization());
  m.add(MaxPooling2D());
  m.add(Flatten());
  m.add(Dense(3, "softmax"));
  m.compile(OptimizerSpec::adam(1e-2f), "sparse_categorical_crossentropy", {"accuracy"});
  FitOptions fo;
  fo.epochs = 150;
  fo.batch_size = n;
  fo.verbose = 0;
  const History h = m.fit(x, y, fo);
  const double first = h["loss"].front(), last = h["loss"].back();
  std::printf("[ info ] CNN overfit: loss %.4f -> %.5f, accuracy %.3f\n", first, last, h["accuracy"].back());
  EXPECT_LT(last, first / 20.0);
  EXPECT_EQ(h["accuracy"].back(), 1.0);
  // With the moving statistics set to this batch's, inference normalizes as
  // training did: every image classified right, loss as in training.
  m.calibrate_bn(x);
  const auto e = m.evaluate(x, y, n);
  EXPECT_EQ(e.at("accuracy"), 1.0);
  EXPECT_LT(e.at("loss"), first / 10.0);
}
