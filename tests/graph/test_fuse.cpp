// The fusion pass (graph/fuse.h): it rewrites only what the options and the
// backend allow, a backend without fused kernels runs the graph as written
// with the same numbers, the options are per model, and the pass is safe to
// run twice.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "tensorgrad/tensorgrad.h"
#include "test_support.h"

using namespace tensorgrad;
using test_support::uniform;

namespace {

// The CPU's kernels behind a backend that states no fused kernel (the
// default of Backend::fusions): a new device backend's position.
class UnfusedCpu final : public Backend {
 public:
  Device device() const override { return Device::CPU; }
  std::string name() const override { return "cpu (unfused)"; }
  bool has_kernel(OpKind op) const override { return cpu_backend()->has_kernel(op); }
  std::shared_ptr<Storage> allocate(size_t bytes) const override { return cpu_backend()->allocate(bytes); }
  std::unique_ptr<KernelLauncher> make_launcher(double flops) const override {
    return cpu_backend()->make_launcher(flops);
  }
};

struct ConvBnRelu {
  Graph g;
  std::vector<Value> outputs;
  Value x;
};

// conv, batch statistics, batch norm, residual add, ReLU, max pool; the loss's gradients
// for every parameter: every pattern the pass knows.
ConvBnRelu conv_bn_relu(const std::vector<Tensor>& p) {
  ConvBnRelu r;
  Graph& g = r.g;
  r.x = g.input("x", Shape{4, 6, 6, 3});
  const Value k = g.parameter(p[0], "k", true), gamma = g.parameter(p[1], "gamma", true),
              beta = g.parameter(p[2], "beta", true);
  OpAttrs at;
  at.window = test_support::window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1);
  const Value c = g.apply(OpKind::Conv2D, {r.x, k}, at);
  OpAttrs bn;
  bn.eps = 1e-3f;
  bn.own_stats = true;
  const Value norm = g.apply(OpKind::BatchNorm, {c, g.apply(OpKind::BatchNormStats, {c}), gamma, beta}, bn);
  const Value y = g.relu(g.add(norm, c));  // a residual block's end: the Add folds into the batch norm
  const Value pooled = g.windowed(OpKind::MaxPool2D, y, test_support::window(2, 2, 2, 2));
  const Value loss = g.sum(g.mul(pooled, pooled));
  r.outputs = g.gradients(loss, std::vector<Value>{k, gamma, beta});
  r.outputs.push_back(loss);
  return r;
}

std::vector<Tensor> conv_bn_relu_params() {
  std::mt19937 rng(3501);
  return {uniform({3, 3, 3, 8}, rng, -0.5f, 0.5f), uniform({8}, rng, 0.5f, 1.5f), uniform({8}, rng, -0.5f, 0.5f)};
}

int count(const Graph& g, std::span<const Value> outputs, OpKind op) {
  int n = 0;
  for (int32_t id : plan_memory(g, outputs).schedule) n += g.nodes()[size_t(id)].op == op;
  return n;
}

}  // namespace

// On a backend that states no fused kernel the graph runs as written (its
// Relu, ReluBackward and BatchNormStats nodes scheduled, no flag set), and
// gives the fused CPU graph's numbers, to the bit (the CPU's fused kernels
// are written to).
TEST(Fusion, ABackendWithoutFusedKernelsRunsTheGraphAsWritten) {
  const std::vector<Tensor> p = conv_bn_relu_params();
  std::mt19937 rng(3502);
  const Tensor tx = uniform({4, 6, 6, 3}, rng, -1.0f, 1.0f);
  std::vector<std::vector<float>> results[2];
  int adds[2] = {0, 0};
  for (int fused = 0; fused < 2; ++fused) {
    ConvBnRelu r = conv_bn_relu(p);
    std::shared_ptr<const Backend> backend = fused ? cpu_backend() : std::make_shared<UnfusedCpu>();
    Executable exe(std::move(r.g), r.outputs, BatchRule{}, backend);
    const Graph& g = exe.graph();
    if (fused) {
      EXPECT_EQ(count(g, r.outputs, OpKind::Relu), 0);
      EXPECT_EQ(count(g, r.outputs, OpKind::ReluBackward), 0) << "masked in the max pool's backward";
      EXPECT_EQ(count(g, r.outputs, OpKind::BatchNormStats), 0);
    } else {
      EXPECT_EQ(count(g, r.outputs, OpKind::Relu), 1);
      EXPECT_EQ(count(g, r.outputs, OpKind::ReluBackward), 1);
      EXPECT_EQ(count(g, r.outputs, OpKind::BatchNormStats), 1);
      for (const Node& n : g.nodes()) EXPECT_EQ(n.attrs.flags, 0u) << op_info(n.op).name;
    }
    adds[fused] = count(g, r.outputs, OpKind::Add);
    exe.bind(r.x, tx);
    exe.run();
    for (Value v : r.outputs) results[fused].push_back(exe.output(v).to_vector());
  }
  EXPECT_EQ(adds[1], adds[0] - 1) << "the residual Add folds into the batch norm";
  ASSERT_EQ(results[0].size(), results[1].size());
  for (size_t i = 0; i < results[0].size(); ++i) EXPECT_EQ(results[1][i], results[0][i]) << "output " << i;
}

// The pass is idempotent: a fused graph fused again does not change.
TEST(Fusion, FusingTwiceChangesNothing) {
  ConvBnRelu r = conv_bn_relu(conv_bn_relu_params());
  fuse(r.g);
  const std::vector<Node> once = r.g.nodes();
  const std::vector<int32_t> from = fuse(r.g);
  for (int32_t f : from) EXPECT_EQ(f, -1);
  ASSERT_EQ(r.g.nodes().size(), once.size());
  for (size_t i = 0; i < once.size(); ++i) {
    EXPECT_EQ(r.g.nodes()[i].op, once[i].op) << i;
    EXPECT_EQ(r.g.nodes()[i].attrs.flags, once[i].attrs.flags) << i;
    EXPECT_EQ(r.g.nodes()[i].n_inputs, once[i].n_inputs) << i;
  }
}

// Each option turns its rewrites off alone (against the graph as written:
// its one Relu, its Adds, its one BatchNormStats).
TEST(Fusion, EachOptionTurnsItsRewritesOff) {
  const std::vector<Tensor> p = conv_bn_relu_params();
  ConvBnRelu written = conv_bn_relu(p);
  const int adds = count(written.g, written.outputs, OpKind::Add);
  struct Case {
    FusionOptions options;
    int relu, add, stats;  // in the schedule
  };
  FusionOptions no_relu, no_add, no_stats;
  no_relu.relu = false;
  no_add.add = false;  // the ReLU then folds into the Add itself
  no_stats.batch_stats = false;
  for (const Case& c : {Case{no_relu, 1, adds - 1, 0}, Case{no_add, 0, adds, 0}, Case{no_stats, 0, adds - 1, 1},
                        Case{FusionOptions::none(), 1, adds, 1}}) {
    ConvBnRelu r = conv_bn_relu(p);
    fuse(r.g, c.options);
    EXPECT_EQ(count(r.g, r.outputs, OpKind::Relu), c.relu);
    EXPECT_EQ(count(r.g, r.outputs, OpKind::Add), c.add);
    EXPECT_EQ(count(r.g, r.outputs, OpKind::BatchNormStats), c.stats);
  }
}

// The options are the model's (CompileTarget::fusion), not the process's:
// two models compiled differently side by side train to the same bits.
TEST(Fusion, OptionsArePerModel) {
  std::vector<float> losses[2];
  std::vector<float> predictions[2];
  std::mt19937 rng(3503);
  const Tensor x = uniform({16, 8, 8, 3}, rng, -1.0f, 1.0f);
  Tensor y = Tensor::zeros({16}, DType::Int32);
  for (int i = 0; i < 16; ++i) y.data<int32_t>()[i] = i % 4;
  std::vector<nn::Sequential> models;
  for (int fused = 0; fused < 2; ++fused) {
    manual_seed(11);
    nn::Sequential m(Shape{8, 8, 3});
    m.add(nn::Conv2D(8, 3, "same", "relu"));
    m.add(nn::BatchNormalization());
    m.add(nn::ActivationLayer("relu"));
    m.add(nn::GlobalAveragePooling2D());
    m.add(nn::Dense(4, "softmax"));
    nn::CompileTarget target;
    if (!fused) target.fusion = FusionOptions::none();
    m.compile(OptimizerSpec::adam(1e-2f), "sparse_categorical_crossentropy", {}, target);
    models.push_back(std::move(m));
  }
  for (int step = 0; step < 3; ++step)
    for (int fused = 0; fused < 2; ++fused)
      losses[fused].push_back(models[size_t(fused)].optimizer_context(16).step(x, y).loss);
  for (int fused = 0; fused < 2; ++fused) predictions[fused] = models[size_t(fused)].predict(x).to_vector();
  EXPECT_EQ(losses[1], losses[0]);
  EXPECT_EQ(predictions[1], predictions[0]);
  EXPECT_LT(losses[1].back(), losses[1].front()) << "the steps trained";
}

// Graph::replace, the pass's one mutation, refuses a rewrite that would
// change what the node's readers see.
TEST(Fusion, ReplaceRefusesAnotherShapeOrALaterInput) {
  Graph g;
  const Value a = g.input("a", Shape{2, 3}), b = g.input("b", Shape{3, 4});
  const Value r = g.relu(a);
  const Value m = g.matmul(a, b);
  EXPECT_TRUE(test_support::throws<Error>([&] { g.replace(r, OpKind::MatMul, std::vector<Value>{a, b}, OpAttrs{}); },
                                          {"replace", "matmul gives {2, 4}", "relu", "{2, 3}"}));
  EXPECT_TRUE(test_support::throws<Error>([&] { g.replace(r, OpKind::Relu, std::vector<Value>{m}, OpAttrs{}); },
                                          {"replace", "is not an earlier node"}));
  EXPECT_TRUE(test_support::throws<Error>([&] { g.replace(a, OpKind::Relu, std::vector<Value>{b}, OpAttrs{}); },
                                          {"replace", "is a leaf"}));
}
