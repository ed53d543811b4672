// Eager equals graph (issue 11): the same layers, with the same weights and
// inputs, called once into a Graph (planned, run by an Executable) and once
// into an ag::EagerBuilder (each op run at once, backward through the tape)
// give bit-identical outputs and gradients at one thread, since both reach
// the same kernels and the same gradient rules through one autodiff walk.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tensorgrad/ag/eager_builder.h"
#include "tensorgrad/ag/functional.h"
#include "tensorgrad/backend/executable.h"
#include "tensorgrad/core/random.h"
#include "tensorgrad/core/threads.h"
#include "tensorgrad/graph/graph.h"
#include "tensorgrad/nn/conv.h"
#include "tensorgrad/nn/layers.h"
#include "tensorgrad/nn/normalization.h"
#include "test_support.h"

using namespace tensorgrad;

namespace {

using Layers = std::vector<std::shared_ptr<nn::Layer>>;
// The model's loss from its input and target values, in any Builder.
using LossFn = std::function<Value(Builder&, Value out, Value target)>;

Tensor random_tensor(const Shape& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(size_t(shape.numel()));
  for (float& x : v) x = u(rng);
  return Tensor::from_vector(v, shape);
}

Value forward(Builder& b, const Layers& layers, Value x) {
  nn::CallOptions training;
  training.training = true;
  for (const auto& layer : layers) x = layer->call(b, x, training);
  return x;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// Runs the model both ways and compares the output, the loss and every
// trainable weight's gradient bit for bit. `counter` is the dropout counter
// both runs use.
void expect_eager_equals_graph(const Layers& layers, const Tensor& x, const Tensor& target, const LossFn& loss_fn,
                               uint64_t counter) {
  test_support::ThreadsGuard threads;
  set_num_threads(1);

  Graph g;
  const Value gx = g.input("x", x.shape(), x.dtype());
  const Value gt = g.input("target", target.shape(), target.dtype());
  const Value gout = forward(g, layers, gx);
  const Value gloss = loss_fn(g, gout, gt);
  std::vector<Value> params = g.trainable_parameters();
  ASSERT_FALSE(params.empty());
  std::vector<Value> grads = g.gradients(gloss, params);
  std::vector<Value> outputs{gout, gloss};
  outputs.insert(outputs.end(), grads.begin(), grads.end());
  std::vector<std::string> names;
  for (Value p : params) names.push_back(g.node(p).name);
  Executable exe(std::move(g), outputs);
  exe.bind(gx, x);
  exe.bind(gt, target);
  exe.set_rng_counter(counter - 1);  // a run from node 0 advances the counter first
  exe.run();

  ag::EagerBuilder e;
  e.set_counter_value(counter);
  const Value ex = e.input(ag::Tensor(x.clone()));
  const Value et = e.input(ag::Tensor(target.clone()));
  const Value eout = forward(e, layers, ex);
  const Value eloss = loss_fn(e, eout, et);
  e.tensor(eloss).backward();

  EXPECT_TRUE(same_bits(exe.output(gout), e.tensor(eout).data())) << "outputs differ";
  EXPECT_TRUE(same_bits(exe.output(gloss), e.tensor(eloss).data())) << "losses differ";
  std::map<std::string, ag::Tensor> eager_params(e.parameters().begin(), e.parameters().end());
  ASSERT_EQ(eager_params.size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    SCOPED_TRACE(names[i]);
    ASSERT_TRUE(eager_params.count(names[i]));
    ASSERT_TRUE(grads[i].valid());
    const ag::Tensor grad = eager_params.at(names[i]).grad();
    ASSERT_TRUE(grad.defined());
    EXPECT_TRUE(same_bits(exe.output(grads[i]), grad.data())) << "gradients differ";
  }
}

}  // namespace

TEST(EagerGraph, MlpWithDropoutIsBitIdentical) {
  manual_seed(3);
  Layers layers{std::make_shared<nn::Dense>(16, "relu"), std::make_shared<nn::Dropout>(0.3f, 21),
                std::make_shared<nn::Dense>(16, "tanh"), std::make_shared<nn::Dropout>(0.5f, 22),
                std::make_shared<nn::Dense>(2)};
  Shape shape{4};
  for (auto& l : layers) shape = l->build(shape);
  expect_eager_equals_graph(layers, random_tensor(Shape{8, 4}, 1), random_tensor(Shape{8, 2}, 2),
                            [](Builder& b, Value out, Value t) { return b.mse_loss(out, t); }, 7);
}

TEST(EagerGraph, DropoutMasksFollowTheCounter) {
  // The same dropout at another counter drops other elements, so the
  // bit-identity above is a property of the shared counter, not of chance.
  auto mask = [](uint64_t counter) {
    ag::EagerBuilder e;
    e.set_counter_value(counter);
    const Value y = e.dropout(e.input(ag::ones(Shape{64})), 0.5f, 21);
    return e.tensor(y).to_vector();
  };
  EXPECT_EQ(mask(7), mask(7));
  EXPECT_NE(mask(7), mask(8));
  const std::vector<float> m = mask(7);
  EXPECT_GT(std::count(m.begin(), m.end(), 0.0f), 10);
  EXPECT_GT(std::count(m.begin(), m.end(), 2.0f), 10);
}

TEST(EagerGraph, SmallCnnIsBitIdentical) {
  manual_seed(4);
  Layers layers{std::make_shared<nn::Conv2D>(4, 3, "same", "relu"), std::make_shared<nn::MaxPooling2D>(),
                std::make_shared<nn::Conv2D>(6, 3, "valid", "relu"), std::make_shared<nn::Flatten>(),
                std::make_shared<nn::Dense>(3)};
  Shape shape{8, 8, 2};
  for (auto& l : layers) shape = l->build(shape);
  std::vector<int32_t> labels{0, 2, 1, 2};
  expect_eager_equals_graph(layers, random_tensor(Shape{4, 8, 8, 2}, 5),
                            Tensor::from_vector(std::span<const int32_t>(labels), Shape{4}),
                            [](Builder& b, Value out, Value t) { return b.softmax_cross_entropy(out, t); }, 11);
}

// An op added with its own backward op (Erf) takes the same kernels and gradient rule both ways.
TEST(EagerGraph, ErfIsBitIdentical) {
  manual_seed(6);
  Layers layers{std::make_shared<nn::Dense>(8), std::make_shared<nn::Dense>(3)};
  Shape shape{5};
  for (auto& l : layers) shape = l->build(shape);
  expect_eager_equals_graph(
      layers, random_tensor(Shape{6, 5}, 7), random_tensor(Shape{6, 3}, 8),
      [](Builder& b, Value out, Value t) { return b.mse_loss(b.apply(OpKind::Erf, {out}), t); }, 1);
}

// A Dense layer with the "gelu_tanh" activation: GeluTanh and its backward op, both ways.
TEST(EagerGraph, GeluTanhDenseIsBitIdentical) {
  manual_seed(7);
  Layers layers{std::make_shared<nn::Dense>(8, "gelu_tanh"), std::make_shared<nn::Dense>(3)};
  Shape shape{5};
  for (auto& l : layers) shape = l->build(shape);
  expect_eager_equals_graph(layers, random_tensor(Shape{6, 5}, 9), random_tensor(Shape{6, 3}, 10),
                            [](Builder& b, Value out, Value t) { return b.mse_loss(out, t); }, 1);
}

// LayerNormalization's formula (Builder::layer_norm, which ag::nn::LayerNorm runs too), both ways.
TEST(EagerGraph, LayerNormalizationIsBitIdentical) {
  manual_seed(8);
  Layers layers{std::make_shared<nn::Dense>(8), std::make_shared<nn::LayerNormalization>(1e-3f),
                std::make_shared<nn::Dense>(3)};
  Shape shape{5};
  for (auto& l : layers) shape = l->build(shape);
  expect_eager_equals_graph(layers, random_tensor(Shape{6, 5}, 11), random_tensor(Shape{6, 3}, 12),
                            [](Builder& b, Value out, Value t) { return b.mse_loss(out, t); }, 1);
}
