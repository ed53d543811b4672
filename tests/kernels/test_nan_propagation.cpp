// NaN reaches the output of every kernel family, as in PyTorch and Keras: a
// ReLU, a max pool or a reduction that met a NaN gives NaN, fused into its
// producer or not, at one and two threads, so that a diverging model shows
// it (TerminateOnNaN) instead of hiding it behind zeros.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tensorgrad/ag/functional.h"
#include "tensorgrad/ag/nn/modules.h"
#include "tensorgrad/backend/executable.h"
#include "tensorgrad/core/logging.h"
#include "tensorgrad/core/threads.h"
#include "tensorgrad/graph/graph.h"
#include "tensorgrad/nn/callbacks.h"
#include "tensorgrad/nn/conv.h"
#include "tensorgrad/nn/layers.h"
#include "tensorgrad/nn/model.h"
#include "tensorgrad/nn/normalization.h"
#include "test_support.h"

using namespace tensorgrad;
using namespace tensorgrad::nn;
using test_support::uniform;

namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();

// One graph `build` makes from its inputs, run at `threads`, fused or as written.
template <class Build>
std::vector<float> run_graph(const std::vector<Tensor>& inputs, Build&& build, int threads, bool fold = true) {
  const int saved = num_threads();
  set_num_threads(threads);
  Graph g;
  std::vector<Value> in;
  for (size_t i = 0; i < inputs.size(); ++i) in.push_back(g.input("in" + std::to_string(i), inputs[i].shape()));
  const Value y = build(g, in);
  Executable exe(std::move(g), {y}, BatchRule{}, nullptr, fold ? FusionOptions{} : FusionOptions::none());
  for (size_t i = 0; i < inputs.size(); ++i) exe.bind(in[i], inputs[i]);
  exe.run();
  std::vector<float> out = exe.output(y).to_vector();
  set_num_threads(saved);
  return out;
}

std::vector<float> run_one(OpKind op, const std::vector<Tensor>& inputs, const OpAttrs& at, int threads) {
  return run_graph(inputs, [&](Graph& g, const std::vector<Value>& in) { return g.apply(op, in, at); }, threads);
}

Tensor with_nans(Tensor t, const std::vector<int64_t>& at) {
  for (int64_t i : at) t.data<float>()[i] = kNaN;
  return t;
}

size_t nan_count(const std::vector<float>& v) {
  size_t n = 0;
  for (float x : v) n += std::isnan(x) ? 1 : 0;
  return n;
}

// Bitwise equal, every NaN counting as equal to every NaN.
bool same_values(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) {
      if (std::isnan(a[i]) != std::isnan(b[i])) return false;
    } else if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      return false;
    }
  }
  return true;
}

// Large enough that the kernels split the work over two threads.
constexpr int64_t kElements = 70001;

}  // namespace

TEST(NanPropagation, ElementwiseActivationsGiveNaNForNaN) {
  std::mt19937 rng(1);
  const std::vector<int64_t> bad = {3, 40000, kElements - 1};
  const Tensor x = with_nans(uniform({kElements}, rng, -2.0f, 2.0f), bad);
  struct Case {
    OpKind op;
    float scale;
  };
  for (const Case c : {Case{OpKind::Relu, 0}, Case{OpKind::Sigmoid, 0}, Case{OpKind::Tanh, 0}, Case{OpKind::Gelu, 0},
                       Case{OpKind::Silu, 0}, Case{OpKind::Elu, 1.0f}, Case{OpKind::LeakyRelu, 0.2f},
                       Case{OpKind::Softplus, 0}, Case{OpKind::Exp, 0}, Case{OpKind::Erf, 0}, Case{OpKind::GeluTanh, 0},
                       Case{OpKind::Scale, 3.0f}}) {
    SCOPED_TRACE(op_info(c.op).name);
    const OpAttrs at = op_param_attrs(c.op, c.scale);
    for (int threads : {1, 2}) {
      SCOPED_TRACE("threads " + std::to_string(threads));
      const std::vector<float> y = run_one(c.op, {x}, at, threads);
      EXPECT_EQ(nan_count(y), bad.size());
      for (int64_t i : bad) EXPECT_TRUE(std::isnan(y[size_t(i)])) << "element " << i;
    }
  }
  OpAttrs clamp;
  clamp.clamp_min = -1.0f;
  clamp.clamp_max = 1.0f;
  for (int threads : {1, 2}) EXPECT_EQ(nan_count(run_one(OpKind::Clamp, {x}, clamp, threads)), bad.size());
}

TEST(NanPropagation, SoftmaxRowsAndReductionsGiveNaN) {
  std::mt19937 rng(2);
  const int64_t rows = 2000, cols = 37;
  const Tensor x = with_nans(uniform({rows, cols}, rng, -2.0f, 2.0f), {5 * cols + 36, 1500 * cols});
  for (OpKind op : {OpKind::Softmax, OpKind::LogSoftmax}) {
    SCOPED_TRACE(op_info(op).name);
    for (int threads : {1, 2}) {
      const std::vector<float> y = run_one(op, {x}, OpAttrs{}, threads);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          ASSERT_EQ(std::isnan(y[size_t(r * cols + c)]), r == 5 || r == 1500) << "row " << r << " column " << c;
    }
  }
  for (OpKind op : {OpKind::Sum, OpKind::Mean}) {
    for (int threads : {1, 2}) EXPECT_TRUE(std::isnan(run_one(op, {x}, OpAttrs{}, threads)[0])) << op_info(op).name;
  }
  for (OpKind op : {OpKind::SumAxis, OpKind::MeanAxis, OpKind::MaxAxis}) {
    SCOPED_TRACE(op_info(op).name);
    OpAttrs at;
    at.axis = 1;
    for (int threads : {1, 2}) {
      const std::vector<float> y = run_one(op, {x}, at, threads);
      ASSERT_EQ(y.size(), size_t(rows));
      for (int64_t r = 0; r < rows; ++r) ASSERT_EQ(std::isnan(y[size_t(r)]), r == 5 || r == 1500) << "row " << r;
    }
  }
  // Maximum and Minimum of a NaN and a number, either side.
  const Tensor a = Tensor::from_vector(std::vector<float>{kNaN, 1.0f, 2.0f}, {3});
  const Tensor b = Tensor::from_vector(std::vector<float>{1.0f, kNaN, 0.0f}, {3});
  for (OpKind op : {OpKind::Maximum, OpKind::Minimum}) {
    const std::vector<float> y = run_one(op, {a, b}, OpAttrs{}, 1);
    EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[1]) && !std::isnan(y[2])) << op_info(op).name;
  }
}

// Max pooling over a window holding NaN gives NaN, and over an all-NaN
// window NaN (not -inf); average pooling NaN: on the tiled path (2x2
// windows that tile the image, channels a multiple of 8), the general
// path's vector lanes, and its scalar tail (3 channels).
TEST(NanPropagation, PoolingGivesNaNForAWindowHoldingNaN) {
  struct Case {
    const char* name;
    Shape x;
    Window2D w;
  };
  const std::vector<Case> cases = {
      {"tiled", {4, 16, 16, 16}, test_support::window(2, 2, 2, 2)},
      {"general vector", {4, 16, 16, 16}, test_support::window(3, 3, 2, 2)},
      {"scalar tail", {4, 15, 15, 3}, test_support::window(3, 3, 2, 2)},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::mt19937 rng(3);
    Tensor x = uniform(c.x, rng, -2.0f, 2.0f);
    const int64_t H = c.x[1], W = c.x[2], C = c.x[3];
    float* p = x.data<float>();
    p[((0 * H + 5) * W + 6) * C + 1] = kNaN;  // one NaN in image 0
    for (int64_t y = 0; y < 3; ++y)  // image 1's first window: all NaN in channel 2
      for (int64_t xx = 0; xx < 3; ++xx) p[((1 * H + y) * W + xx) * C + 2] = kNaN;
    OpAttrs at;
    at.window = c.w;
    const int64_t Ho = c.w.out_h(H), Wo = c.w.out_w(W);
    for (OpKind op : {OpKind::MaxPool2D, OpKind::AvgPool2D}) {
      SCOPED_TRACE(op_info(op).name);
      for (int threads : {1, 2}) {
        SCOPED_TRACE("threads " + std::to_string(threads));
        const std::vector<float> y = run_one(op, {x}, at, threads);
        ASSERT_EQ(y.size(), size_t(c.x[0] * Ho * Wo * C));
        // The expected NaNs: every output whose window holds a NaN input.
        size_t expected = 0;
        for (int64_t b = 0; b < c.x[0]; ++b)
          for (int64_t oy = 0; oy < Ho; ++oy)
            for (int64_t ox = 0; ox < Wo; ++ox)
              for (int64_t ch = 0; ch < C; ++ch) {
                bool holds = false;
                for (int64_t ky = 0; ky < c.w.kh; ++ky)
                  for (int64_t kx = 0; kx < c.w.kw; ++kx) {
                    const int64_t iy = oy * c.w.sh + ky - c.w.pad_top, ix = ox * c.w.sw + kx - c.w.pad_left;
                    if (iy >= 0 && iy < H && ix >= 0 && ix < W) holds = holds || std::isnan(p[((b * H + iy) * W + ix) * C + ch]);
                  }
                expected += holds ? 1 : 0;
                ASSERT_EQ(std::isnan(y[size_t(((b * Ho + oy) * Wo + ox) * C + ch)]), holds)
                    << "image " << b << " output " << oy << "," << ox << " channel " << ch;
              }
        EXPECT_GE(expected, 2u);
      }
    }
  }
}

// A ReLU keeps NaN where the op before it made one, whether it is folded
// into that op (MatMul, Conv2D on each of its paths, BatchNorm, Add) or runs
// on its own, and both give the same values.
TEST(NanPropagation, ReluFoldedOrNotKeepsNaN) {
  std::mt19937 rng(4);
  struct Case {
    std::string name;
    std::vector<Tensor> inputs;
    std::function<Value(Graph&, const std::vector<Value>&)> op;
  };
  auto conv = [](Window2D w) {
    return [w](Graph& g, const std::vector<Value>& in) {
      OpAttrs at;
      at.window = w;
      return g.apply(OpKind::Conv2D, {in[0], in[1], in[2]}, at);
    };
  };
  auto conv_case = [&](const std::string& name, Shape x, int64_t k, int64_t F, Window2D w) {
    Tensor xs = uniform(x, rng, -1.0f, 1.0f);
    xs.data<float>()[((1 * x[1] + 3) * x[2] + 4) * x[3]] = kNaN;
    return Case{name, {xs, uniform({k, k, x[3], F}, rng, -1.0f, 1.0f), uniform({F}, rng, -1.0f, 1.0f)}, conv(w)};
  };
  std::vector<Case> cases;
  {
    Tensor w = uniform({64, 48}, rng, -1.0f, 1.0f);
    w.data<float>()[7] = kNaN;  // a NaN weight: unit 7 NaN in every row
    const Tensor bias = uniform({48}, rng, -1.0f, 1.0f);
    auto dense = [](Graph& g, const std::vector<Value>& in) { return g.apply(OpKind::MatMul, {in[0], in[1], in[2]}, OpAttrs{}); };
    cases.push_back({"dense one row", {uniform({1, 64}, rng, -1.0f, 1.0f), w, bias}, dense});
    cases.push_back({"dense 300 rows", {uniform({300, 64}, rng, -1.0f, 1.0f), w, bias}, dense});
  }
  cases.push_back(conv_case("conv winograd", {2, 12, 12, 16}, 3, 16, test_support::window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1)));
  cases.push_back(conv_case("conv direct", {2, 12, 12, 4}, 3, 8, test_support::window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1)));
  cases.push_back(conv_case("conv one channel", {2, 12, 12, 1}, 3, 16, test_support::window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1)));
  cases.push_back(conv_case("conv strided", {2, 12, 12, 8}, 3, 8, test_support::window(3, 3, 2, 2)));
  {
    Tensor x = uniform({64, 24}, rng, -1.0f, 1.0f);
    x.data<float>()[10 * 24 + 5] = kNaN;  // channel 5's statistics, so the whole channel, NaN
    cases.push_back({"batch norm",
                     {x, uniform({24}, rng, 0.5f, 1.5f), uniform({24}, rng, -0.5f, 0.5f)},
                     [](Graph& g, const std::vector<Value>& in) {
                       OpAttrs at;
                       at.eps = 1e-3f;
                       const Value stats = g.apply(OpKind::BatchNormStats, {in[0]});
                       return g.apply(OpKind::BatchNorm, {in[0], stats, in[1], in[2]}, at);
                     }});
  }
  cases.push_back({"add",
                   {with_nans(uniform({kElements}, rng, -1.0f, 1.0f), {17, 50000}), uniform({kElements}, rng, -1.0f, 1.0f)},
                   [](Graph& g, const std::vector<Value>& in) { return g.add(in[0], in[1]); }});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    for (int threads : {1, 2}) {
      SCOPED_TRACE("threads " + std::to_string(threads));
      const std::vector<float> z = run_graph(c.inputs, c.op, threads);
      auto relu_of = [&](Graph& g, const std::vector<Value>& in) { return g.apply(OpKind::Relu, {c.op(g, in)}); };
      const std::vector<float> folded = run_graph(c.inputs, relu_of, threads, true);
      const std::vector<float> unfolded = run_graph(c.inputs, relu_of, threads, false);
      ASSERT_GT(nan_count(z), 0u) << "the case makes no NaN";
      ASSERT_EQ(folded.size(), z.size());
      for (size_t i = 0; i < z.size(); ++i) {
        ASSERT_EQ(std::isnan(folded[i]), std::isnan(z[i])) << "element " << i;
        if (!std::isnan(z[i])) ASSERT_EQ(folded[i], z[i] > 0.0f ? z[i] : 0.0f) << "element " << i;
      }
      EXPECT_TRUE(same_values(folded, unfolded));
    }
  }
}

// The issue as a user meets it: a Dense relu layer with a NaN weight outputs
// NaN for that unit (it gave 0), in the model API and the eager one, and a
// fit whose weights went NaN is stopped by TerminateOnNaN.
TEST(NanPropagation, ANaNWeightReachesTheOutputAndTerminateOnNaN) {
  Sequential m({4});
  m.add(Dense(3, "relu"));
  m.compile(OptimizerSpec::sgd(0.1f), "mse");
  m.weights()[0].value.data<float>()[1] = kNaN;  // kernel {4, 3}: row 0, unit 1
  const Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, -1, -2, -3, -4}, {2, 4});
  const std::vector<float> y = m.predict(x).to_vector();
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t u = 0; u < 3; ++u) EXPECT_EQ(std::isnan(y[size_t(r * 3 + u)]), u == 1) << r << "," << u;

  std::vector<std::string> warnings;
  set_log_handler([&](LogLevel, const std::string& s) { warnings.push_back(s); });
  FitOptions o;
  o.verbose = 0;
  o.epochs = 3;
  o.batch_size = 1;
  o.callbacks = {std::make_shared<TerminateOnNaN>()};
  const History h = m.fit(x, Tensor::zeros({2, 3}), o);
  set_log_handler(nullptr);
  EXPECT_EQ(h.epoch.size(), 1u);
  bool named = false;
  for (const std::string& w : warnings) named = named || w.find("TerminateOnNaN: batch 0") != std::string::npos;
  EXPECT_TRUE(named);

  ag::nn::Linear linear(4, 3);
  linear.weight.data().data<float>()[1 * 4 + 0] = kNaN;  // PyTorch's layout {out, in}: unit 1
  const std::vector<float> eager = ag::relu(linear.forward(ag::Tensor(x))).to_vector();
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t u = 0; u < 3; ++u) EXPECT_EQ(std::isnan(eager[size_t(r * 3 + u)]), u == 1) << r << "," << u;
}

TEST(NanPropagation, EagerOpsGiveNaN) {
  const ag::Tensor x = ag::tensor({kNaN, -1.0f, 2.0f, kNaN}, Shape{1, 2, 2, 1});
  const std::vector<float> r = ag::relu(x).to_vector();
  EXPECT_TRUE(std::isnan(r[0]) && r[1] == 0.0f && r[2] == 2.0f && std::isnan(r[3]));
  EXPECT_TRUE(std::isnan(ag::max_pool2d(x, 2).to_vector()[0]));
  EXPECT_TRUE(std::isnan(ag::sum(x).item()));
  EXPECT_TRUE(std::isnan(ag::amax(ag::tensor({1.0f, kNaN, 3.0f}, Shape{3}), 0).item()));
  const std::vector<float> m = ag::maximum(ag::tensor({kNaN, 1.0f}, Shape{2}), ag::tensor({0.0f, kNaN}, Shape{2})).to_vector();
  EXPECT_TRUE(std::isnan(m[0]) && std::isnan(m[1]));
  const ag::Tensor all_nan = ag::tensor({kNaN, kNaN, kNaN, kNaN}, Shape{1, 2, 2, 1});
  EXPECT_TRUE(std::isnan(ag::max_pool2d(all_nan, 2).item()));
}
