// A BatchNormStats of a convolution's output folded into the convolution
// (the fusion pass, FusionOptions::batch_stats; Conv2D's kBatchStatsOutput, read
// through an AttachedBatchStats view of the memory the plan leaves before
// the output). Checked: the statistics against sums in double; the folded
// graph's every output and gradient bit-equal to the graph as written, on
// each convolution path (Winograd F(4x4) and F(2x2), the direct kernel at
// stride 1 and 2, a one-channel stem, a 1x1 projection, with bias and a
// folded ReLU, the mixed_bfloat16 backend), at 1 and 2 threads; a plan
// that runs fewer rows than it was made for; and the errors for the
// forms only a graph can run.
#include <gtest/gtest.h>

#include "test_support.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "tensorgrad/ag/eager_builder.h"
#include "tensorgrad/backend/executable.h"
#include "tensorgrad/core/threads.h"
#include "tensorgrad/graph/graph.h"

using namespace tensorgrad;
using test_support::uniform;

namespace {

struct ConvCase {
  const char* name;
  int64_t side, channels, filters, kernel, stride;
  bool bias, relu;
  int64_t groups = 1;  // Window2D::groups (grouped_conv.cpp's kernels)
};

// conv -> BatchNorm (the batch's statistics) -> loss, and the gradients of
// the loss with respect to the image, kernel, bias, gamma and beta; the
// outputs are the statistics, the normalized output, the loss and the
// gradients, in that order, then the convolution's output.
struct ConvBnGraph {
  Graph g;
  std::vector<Value> outputs;
  Value stats, conv, x, w;
};

ConvBnGraph build(const ConvCase& c, int64_t batch, const std::vector<Tensor>& data) {
  ConvBnGraph r;
  Graph& g = r.g;
  const Value x = r.x = g.input("x", Shape{batch, c.side, c.side, c.channels});
  std::vector<Value> params{g.parameter(data[0], "k", true), g.parameter(data[1], "gamma", true),
                            g.parameter(data[2], "beta", true)};
  OpAttrs at;
  const int64_t pad = c.kernel / 2;
  at.window = test_support::window(c.kernel, c.kernel, c.stride, c.stride, 1, 1, pad, pad, pad, pad);
  at.window.groups = c.groups;
  if (c.relu) at.flags = kReluOutput;
  if (c.bias) params.push_back(g.parameter(data[3], "bias", true));
  r.conv = c.bias ? g.apply(OpKind::Conv2D, {x, params[0], params[3]}, at) : g.apply(OpKind::Conv2D, {x, params[0]}, at);
  r.stats = g.apply(OpKind::BatchNormStats, {r.conv});
  OpAttrs bn;
  bn.eps = 1e-3f;
  bn.own_stats = true;
  const Value y = g.apply(OpKind::BatchNorm, {r.conv, r.stats, params[1], params[2]}, bn);
  const Value w = r.w = g.input("w", g.shape(y));
  const Value loss = g.sum(g.mul(g.mul(y, y), w));
  r.outputs = {r.stats, y, loss};
  for (Value d : g.gradients(loss, params)) r.outputs.push_back(d);
  r.outputs.push_back(r.conv);
  return r;
}

std::vector<ConvCase> cases() {
  return {{"winograd F(4x4)", 9, 16, 16, 3, 1, false, false},  {"winograd F(2x2), bias, relu", 6, 16, 16, 3, 1, true, true},
          {"direct, stride 2", 9, 16, 32, 3, 2, false, false}, {"stem, one channel", 8, 1, 16, 3, 1, true, false},
          {"1x1 projection, stride 2", 8, 16, 32, 1, 2, false, true}, {"direct, few channels", 7, 3, 5, 3, 1, false, false},
          {"depthwise", 9, 24, 24, 3, 1, false, false, 24},          {"depthwise, stride 2, bias, relu", 9, 24, 24, 3, 2, true, true, 24},
          {"depthwise, multiplier 2", 7, 5, 10, 3, 1, true, false, 5}, {"grouped, 4 groups", 7, 8, 12, 3, 1, false, true, 4}};
}

std::vector<Tensor> case_data(const ConvCase& c, std::mt19937& rng) {
  return {uniform({c.kernel, c.kernel, c.channels / c.groups, c.filters}, rng, -0.4f, 0.4f),
          uniform({c.filters}, rng, 0.5f, 1.5f), uniform({c.filters}, rng, -0.5f, 0.5f),
          uniform({c.filters}, rng, -0.2f, 0.2f)};
}

TEST(BatchStatsFolding, FoldedEqualsTheGraphAsWrittenOnEveryConvolutionPath) {
  const int saved_threads = num_threads();
  std::mt19937 rng(1400);
  const int64_t batch = 5;
  for (const ConvCase& c : cases()) {
    const std::vector<Tensor> data = case_data(c, rng);
    const Tensor tx = uniform({batch, c.side, c.side, c.channels}, rng, -1.0f, 2.0f);
    for (bool bf16 : {false, true})
      for (int threads : {1, 2}) {
        set_num_threads(threads);
        std::vector<std::vector<float>> results[2];
        for (int fold = 0; fold < 2; ++fold) {
          SCOPED_TRACE(std::string(c.name) + (fold ? ", folded" : ", as written") + (bf16 ? ", mixed_bfloat16" : "") +
                       ", threads " + std::to_string(threads));
          FusionOptions fusion;
          fusion.batch_stats = fold == 1;
          ConvBnGraph r = build(c, batch, data);
          fuse(r.g, fusion);
          int stats_ops = 0;
          for (int32_t id : plan_memory(r.g, r.outputs).schedule)
            stats_ops += r.g.nodes()[size_t(id)].op == OpKind::BatchNormStats;
          EXPECT_EQ(stats_ops, fold ? 0 : 1);
          EXPECT_EQ(r.g.node(r.stats).op, fold ? OpKind::AttachedBatchStats : OpKind::BatchNormStats);
          EXPECT_EQ((r.g.node(r.conv).attrs.flags & kBatchStatsOutput) != 0, fold == 1);
          std::mt19937 wrng(1401);
          const Tensor tw = uniform(r.g.shape(r.w), wrng, -1.0f, 1.0f);
          Executable exe(std::move(r.g), r.outputs, BatchRule{},
                         cpu_backend(bf16 ? DTypePolicy::kMixedBFloat16 : DTypePolicy::kFloat32), fusion);
          exe.bind(r.x, tx);
          exe.bind(r.w, tw);
          exe.run();
          for (Value v : r.outputs) results[fold].push_back(exe.output(v).to_vector());
        }
        for (size_t i = 0; i < results[0].size(); ++i) EXPECT_EQ(results[1][i], results[0][i]) << "output " << i;
        // The folded statistics against two-pass sums in double over the convolution's output.
        const std::vector<float>& stats = results[1][0];
        const std::vector<double> want = test_support::two_pass_stats(results[1].back(), c.filters);
        ASSERT_EQ(stats.size(), want.size());
        for (int64_t f = 0; f < c.filters; ++f) {
          EXPECT_NEAR(stats[size_t(f)], want[size_t(f)], 1e-6 + 1e-6 * std::fabs(want[size_t(f)])) << "mean " << f;
          EXPECT_NEAR(stats[size_t(c.filters + f)], want[size_t(c.filters + f)],
                      1e-6 + 1e-5 * want[size_t(c.filters + f)])
              << "variance " << f;
        }
      }
  }
  set_num_threads(saved_threads);
}

// A plan made for 6 rows and run with 4 (the last batch of an epoch): the
// statistics lie before the convolution's output, so their place does not
// move; the same bits as a graph built for 4 rows as written.
TEST(BatchStatsFolding, FewerRowsThanPlanned) {
  std::mt19937 rng(1420);
  const ConvCase c{"winograd", 8, 16, 16, 3, 1, false, true};
  const std::vector<Tensor> data = case_data(c, rng);
  const Tensor tx = uniform({4, c.side, c.side, c.channels}, rng, -1.0f, 1.0f);
  const Tensor tw = uniform({4, c.side, c.side, c.filters}, rng, -1.0f, 1.0f);
  std::vector<std::vector<float>> results[2];
  for (int fold = 0; fold < 2; ++fold) {
    FusionOptions fusion;
    fusion.batch_stats = fold == 1;
    ConvBnGraph at_max = build(c, 6, data), probe = build(c, 2, data);
    BatchRule rule = make_batch_rule(at_max.g, 6, probe.g, 2);
    const std::vector<Value> outputs = at_max.outputs;
    const Value x = at_max.x, w = at_max.w;
    Executable exe(std::move(at_max.g), outputs, std::move(rule), cpu_backend(), fusion);
    exe.set_rows(4);
    exe.bind(x, tx);
    exe.bind(w, tw);
    exe.run();
    for (Value v : outputs) results[fold].push_back(exe.output(v).to_vector());
  }
  ASSERT_EQ(results[0].size(), results[1].size());
  for (size_t i = 0; i < results[0].size(); ++i) EXPECT_EQ(results[1][i], results[0][i]) << "output " << i;
}

// A second BatchNormStats of the same convolution reads the same attached
// statistics; a Relu folded into a marked convolution makes a convolution
// of its own, unmarked, and the marked one keeps its statistics.
TEST(BatchStatsFolding, SecondReaderAndAReluAfterwards) {
  Graph g;
  OpAttrs at;
  at.window = test_support::window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1);
  const Value conv = g.apply(OpKind::Conv2D, {g.input("x", Shape{2, 8, 8, 16}), g.input("k", Shape{3, 3, 16, 16})}, at);
  const Value s1 = g.apply(OpKind::BatchNormStats, {conv});
  const Value s2 = g.apply(OpKind::BatchNormStats, {conv});
  const Value relu = g.relu(conv);
  // What does not fold: a statistics op of another op's output.
  const Value pooled = g.apply(OpKind::AvgPool2D, {conv}, [] {
    OpAttrs p;
    p.window = test_support::window(2, 2, 2, 2);
    return p;
  }());
  const Value pooled_stats = g.apply(OpKind::BatchNormStats, {pooled});
  fuse(g);
  EXPECT_EQ(g.node(s1).op, OpKind::AttachedBatchStats);
  EXPECT_EQ(g.node(s2).op, OpKind::AttachedBatchStats);
  EXPECT_EQ(g.node(relu).op, OpKind::Conv2D);
  EXPECT_EQ(g.node(relu).attrs.flags, kReluOutput);
  EXPECT_EQ(g.node(conv).attrs.flags, kBatchStatsOutput);
  EXPECT_EQ(g.node(pooled_stats).op, OpKind::BatchNormStats);
}

TEST(BatchStatsFolding, FormsOnlyAGraphRuns) {
  Graph g;
  const Value x = g.input("x", Shape{2, 4, 4, 3});
  EXPECT_TRUE(test_support::throws<ValueError>([&] { g.apply(OpKind::AttachedBatchStats, {x}); },
                                               {"attached_batch_stats", "Conv2D", "kBatchStatsOutput", "a leaf",
                                                "Apply BatchNormStats"}));
  const Value pooled = g.apply(OpKind::AvgPool2D, {x}, [] {
    OpAttrs p;
    p.window = test_support::window(2, 2, 2, 2);
    return p;
  }());
  EXPECT_TRUE(test_support::throws<ValueError>([&] { g.apply(OpKind::AttachedBatchStats, {pooled}); },
                                               {"got avg_pool2d"}));
  std::mt19937 rng(1430);
  ag::EagerBuilder b;
  const Value ex = b.input(ag::Tensor(uniform({2, 4, 4, 3}, rng, -1.0f, 1.0f)));
  const Value ek = b.input(ag::Tensor(uniform({3, 3, 3, 4}, rng, -1.0f, 1.0f)));
  OpAttrs at;
  at.window = test_support::window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1);
  at.flags = kBatchStatsOutput;
  EXPECT_TRUE(test_support::throws<ValueError>([&] { b.apply(OpKind::Conv2D, {ex, ek}, at); },
                                               {"conv2d", "only in a lazy graph", "apply BatchNormStats"}));
  EXPECT_TRUE(test_support::throws<ValueError>([&] { b.apply(OpKind::AttachedBatchStats, {ex}); },
                                               {"attached_batch_stats", "only in a lazy graph"}));
}

}  // namespace
