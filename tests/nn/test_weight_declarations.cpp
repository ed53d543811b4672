// Weights declared once per layer (Keras' Layer.add_weight): weights(),
// weight_slots(), clone and the graph all read the one declaration; the
// built-in layers keep their Keras names and order (saved files and state
// dicts depend on them); add_weight's errors. And LayerNorm's one formula
// (Builder::layer_norm): the eager module and the Keras layer run through an
// EagerBuilder give the same bits.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tensorgrad/ag/eager_builder.h"
#include "tensorgrad/ag/functional.h"
#include "tensorgrad/ag/nn/conv.h"
#include "tensorgrad/core/random.h"
#include "tensorgrad/nn/conv.h"
#include "tensorgrad/nn/layers.h"
#include "tensorgrad/nn/normalization.h"
#include "tensorgrad/nn/recurrent.h"
#include "test_support.h"

using namespace tensorgrad;
using test_support::throws;

namespace {

// A user's layer: y = x * scale, with a non-trainable counter beside it.
class ScaleLayer : public nn::Layer {
 public:
  explicit ScaleLayer(nn::WeightSpec extra = {}) : Layer("scale_layer"), extra_spec_(std::move(extra)) {}
  const char* type() const override { return "ScaleLayer"; }
  Shape build(const Shape& input_shape) override {
    scale_ = add_weight({.name = "scale", .shape = {input_shape[-1]}, .initializer = nn::initializers::ones()});
    count_ = add_weight({.name = "count", .shape = {1}, .initializer = nn::initializers::zeros(), .trainable = false});
    if (!extra_spec_.name.empty() || extra_spec_.initializer) add_weight(extra_spec_);
    return input_shape;
  }
  Value call(Builder& b, Value x, const nn::CallOptions&) override { return b.mul(x, bind_weight(b, scale_)); }
  std::shared_ptr<nn::Layer> clone() const override { return nn::clone_layer(*this); }
  Tensor& scale() { return weight(scale_); }

 private:
  nn::WeightSpec extra_spec_;
  nn::WeightId scale_, count_;
};

std::vector<std::string> names(const nn::Layer& layer) {
  std::vector<std::string> out;
  for (const nn::Weight& w : layer.weights()) out.push_back(w.name);
  return out;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

Tensor random_tensor(const Shape& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  return test_support::uniform(shape, rng, -2.0f, 2.0f);
}

}  // namespace

TEST(WeightDeclarations, OneDeclarationFeedsTheListingSlotsCloneAndGraph) {
  nn::clear_session();
  auto layer = std::make_shared<ScaleLayer>();
  EXPECT_TRUE(layer->weights().empty());  // nothing declared before build
  layer->build_once(Shape{3});
  const std::vector<nn::Weight> w = layer->weights();
  ASSERT_EQ(names(*layer), (std::vector<std::string>{"scale_layer/scale", "scale_layer/count"}));
  EXPECT_TRUE(w[0].trainable);
  EXPECT_TRUE(w[0].averaged);
  EXPECT_FALSE(w[1].trainable);
  EXPECT_FALSE(w[1].averaged);  // state: copied whole by target-network updates
  EXPECT_EQ(w[0].value.shape(), (Shape{3}));
  EXPECT_EQ(w[0].value.to_vector(), (std::vector<float>{1, 1, 1}));

  const std::vector<Tensor*> slots = layer->weight_slots();
  ASSERT_EQ(slots.size(), 2u);
  EXPECT_EQ(slots[0]->raw(), w[0].value.raw());
  EXPECT_EQ(slots[1]->raw(), w[1].value.raw());

  // A clone: the same declarations over its own copies of the values.
  auto copy = layer->clone();
  EXPECT_EQ(names(*copy), names(*layer));
  EXPECT_NE(copy->weights()[0].value.raw(), w[0].value.raw());
  layer->scale().data<float>()[0] = 4.0f;
  EXPECT_EQ(copy->weights()[0].value.to_vector(), (std::vector<float>{1, 1, 1}));

  // The graph binds the declared tensor under its listed name; a frozen layer's weight has no gradient.
  ag::EagerBuilder e;
  const Value y = layer->call(e, e.input(ag::ones(Shape{2, 3})), {});
  EXPECT_EQ(e.tensor(y).to_vector(), (std::vector<float>{4, 1, 1, 4, 1, 1}));
  ASSERT_EQ(e.parameters().size(), 1u);
  EXPECT_EQ(e.parameters()[0].first, "scale_layer/scale");
  EXPECT_TRUE(e.parameters()[0].second.requires_grad());
  layer->trainable = false;
  EXPECT_FALSE(layer->weights()[0].trainable);
  ag::EagerBuilder frozen;
  layer->call(frozen, frozen.input(ag::ones(Shape{1, 3})), {});
  EXPECT_FALSE(frozen.parameters()[0].second.requires_grad());
}

TEST(WeightDeclarations, BuildingAgainRedrawsInPlace) {
  nn::clear_session();
  manual_seed(5);
  nn::Dense dense(4);
  dense.build(Shape{3});
  const std::vector<float> first = dense.weights()[0].value.to_vector();
  dense.build(Shape{3});  // a second build: the same two weights, new values, same order
  EXPECT_EQ(names(dense), (std::vector<std::string>{"dense/kernel", "dense/bias"}));
  EXPECT_NE(dense.weights()[0].value.to_vector(), first);
  manual_seed(5);
  nn::Dense again(4);
  again.build(Shape{3});
  EXPECT_EQ(again.weights()[0].value.to_vector(), first);  // drawn from the seed in declaration order
}

// The built-in layers' names and order, which saved files and state dicts use.
TEST(WeightDeclarations, BuiltInLayersKeepKerasNamesAndOrder) {
  nn::clear_session();
  using V = std::vector<std::string>;
  nn::Dense dense(2), no_bias(2, "linear", false);
  dense.build(Shape{3});
  no_bias.build(Shape{3});
  EXPECT_EQ(names(dense), (V{"dense/kernel", "dense/bias"}));
  EXPECT_EQ(names(no_bias), (V{"dense_1/kernel"}));
  nn::Conv2D conv(4, 3);
  conv.build(Shape{5, 5, 2});
  EXPECT_EQ(names(conv), (V{"conv2d/kernel", "conv2d/bias"}));
  EXPECT_EQ(conv.weights()[0].value.shape(), (Shape{3, 3, 2, 4}));
  nn::Conv1D conv1(4, 3);
  conv1.build(Shape{6, 2});
  EXPECT_EQ(names(conv1), (V{"conv1d/kernel", "conv1d/bias"}));
  EXPECT_EQ(conv1.weights()[0].value.shape(), (Shape{3, 2, 4}));
  nn::BatchNormalization bn;
  bn.build(Shape{4});
  EXPECT_EQ(names(bn), (V{"batch_normalization/gamma", "batch_normalization/beta", "batch_normalization/moving_mean",
                          "batch_normalization/moving_variance"}));
  EXPECT_EQ(bn.weights()[3].value.to_vector(), (std::vector<float>{1, 1, 1, 1}));
  nn::LayerNormalization ln;
  ln.build(Shape{4});
  EXPECT_EQ(names(ln), (V{"layer_normalization/gamma", "layer_normalization/beta"}));
  nn::Embedding emb(10, 3);
  emb.build(Shape{5});
  EXPECT_EQ(names(emb), (V{"embedding/embeddings"}));
  nn::LSTM lstm(2);
  lstm.build(Shape{4, 3});
  EXPECT_EQ(names(lstm), (V{"lstm/kernel", "lstm/recurrent_kernel", "lstm/bias"}));
  EXPECT_EQ(lstm.weights()[2].value.to_vector(), (std::vector<float>{0, 0, 1, 1, 0, 0, 0, 0}));  // unit_forget_bias
  nn::GRU gru(2);
  gru.build(Shape{4, 3});
  EXPECT_EQ(names(gru), (V{"gru/kernel", "gru/recurrent_kernel", "gru/bias"}));
  EXPECT_EQ(gru.weights()[2].value.shape(), (Shape{2, 6}));
}

TEST(WeightDeclarations, BadDeclarationsAndUnbuiltCallsThrow) {
  nn::clear_session();
  auto build = [](nn::WeightSpec spec) { ScaleLayer(std::move(spec)).build(Shape{3}); };
  EXPECT_TRUE(throws<ValueError>([&] { build({.name = "", .shape = {1}, .initializer = nn::initializers::zeros()}); },
                                 {"add_weight", "without '/'"}));
  EXPECT_TRUE(throws<ValueError>([&] { build({.name = "a/b", .shape = {1}, .initializer = nn::initializers::zeros()}); },
                                 {"a/b", "without '/'"}));
  EXPECT_TRUE(throws<ValueError>([&] { build({.name = "w", .shape = {1}}); }, {"\"w\"", "no initializer"}));
  EXPECT_TRUE(throws<ValueError>(
      [&] {
        build({.name = "w", .shape = {2}, .initializer = [](const Shape&) { return Tensor::zeros(Shape{3}); }});
      },
      {"ScaleLayer", "\"w\"", "float32 {2}", "float32 {3}"}));
  EXPECT_TRUE(throws<ShapeError>(
      [&] { build({.name = "w", .shape = {4}, .initializer = nn::initializers::glorot_uniform()}); },
      {"glorot_uniform", "{4}"}));
  EXPECT_TRUE(throws<ShapeError>(
      [&] { build({.name = "w", .shape = {2, 2, 2}, .initializer = nn::initializers::orthogonal()}); },
      {"orthogonal", "{2, 2, 2}"}));

  nn::Dense unbuilt(3);
  ag::EagerBuilder e;
  const Value x = e.input(ag::ones(Shape{1, 2}));
  EXPECT_TRUE(throws<StateError>([&] { unbuilt.call(e, x, {}); }, {"Dense", "before build()"}));
}

// ag::nn::LayerNorm and nn::LayerNormalization share Builder::layer_norm: the
// same input, weights and epsilon give the same bits, forward and backward.
TEST(WeightDeclarations, LayerNormIsOneFormulaForBothApis) {
  nn::clear_session();
  const float eps = 1e-5f;
  ag::nn::LayerNorm module(6, double(eps));
  nn::LayerNormalization layer(eps);
  layer.build(Shape{6});
  {
    ag::NoGradGuard no_grad;
    module.weight.copy_(ag::Tensor(random_tensor(Shape{6}, 1)));
    module.bias.copy_(ag::Tensor(random_tensor(Shape{6}, 2)));
  }
  layer.weight_slots()[0]->copy_from(module.weight.data());
  layer.weight_slots()[1]->copy_from(module.bias.data());
  const Tensor x = random_tensor(Shape{4, 6}, 3), w = random_tensor(Shape{4, 6}, 4);

  const ag::Tensor xa = ag::Tensor(x.clone()).requires_grad_();
  const ag::Tensor ya = module(xa);
  ag::sum(ya * ag::Tensor(w)).backward();

  ag::EagerBuilder e;
  const ag::Tensor xb = ag::Tensor(x.clone()).requires_grad_();
  const Value yb = layer.call(e, e.input(xb), {});
  ag::sum(e.tensor(yb) * ag::Tensor(w)).backward();

  EXPECT_TRUE(same_bits(ya.data(), e.tensor(yb).data()));
  EXPECT_TRUE(same_bits(xa.grad().data(), xb.grad().data()));
  ASSERT_EQ(e.parameters().size(), 2u);
  EXPECT_TRUE(same_bits(module.weight.grad().data(), e.parameters()[0].second.grad().data()));
  EXPECT_TRUE(same_bits(module.bias.grad().data(), e.parameters()[1].second.grad().data()));
}
