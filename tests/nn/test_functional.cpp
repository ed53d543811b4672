// Functional models (Keras' functional API): Input, layer calls on symbolic
// tensors, Model over several inputs and outputs, shared layers, nested
// models, merge layers, and the errors of a bad graph.
#include <gtest/gtest.h>

#include "model_gradient_check.h"
#include "test_support.h"

#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "tensorgrad/tensorgrad.h"

using namespace tensorgrad;
using namespace tensorgrad::nn;
using test_support::throws;
using test_support::check_gradients;
using test_support::uniform;

namespace {
Tensor values(std::vector<float> v, const Shape& s) { return Tensor::from_vector(v, s); }

void set_weight(const std::shared_ptr<nn::Layer>& layer, size_t i, std::vector<float> v) {
  const Tensor t = layer->weights().at(i).value;
  Tensor(t).copy_from(Tensor::from_vector(v, t.shape()));
}

}  // namespace

TEST(Functional, ResidualModelComputesWhatItsGraphSays) {
  nn::clear_session();
  const SymbolicTensor x = Input({2});
  auto inner = std::make_shared<Dense>(2);
  const SymbolicTensor h = (*inner)(x);
  const SymbolicTensor sum = nn::Add()({x, h});
  auto head = std::make_shared<Dense>(1, "linear", false);
  Model m(x, (*head)(sum));
  set_weight(inner, 0, {1, 2, 3, 4});  // kernel {in 2, out 2}
  set_weight(inner, 1, {0.5f, -1});
  set_weight(head, 0, {1, -2});
  // x = [1, 1]: h = [1 + 3 + 0.5, 2 + 4 - 1] = [4.5, 5]; x + h = [5.5, 6]; y = 5.5 - 12.
  EXPECT_FLOAT_EQ(m.predict(values({1, 1}, {1, 2})).item(), -6.5f);
  EXPECT_EQ(m.input_names(), (std::vector<std::string>{"input_layer"}));
  EXPECT_EQ(m.output_names(), (std::vector<std::string>{head->name()}));
  EXPECT_EQ(m.get_layer(inner->name()), inner);
  EXPECT_TRUE(throws<ValueError>([&] { m.get_layer("nope"); }, {"no layer named 'nope'", inner->name()}));
  const std::string table = m.summary();
  EXPECT_NE(table.find("Connected to"), std::string::npos) << table;
  EXPECT_NE(table.find("input_layer, " + inner->name()), std::string::npos) << table;
}

TEST(Functional, SharedPointerSharesWeightsTemporaryGetsItsOwn) {
  const SymbolicTensor x = Input({3});
  auto shared = std::make_shared<Dense>(3);
  const SymbolicTensor a = (*shared)(x), b = (*shared)(a);
  Model tied(x, b);
  EXPECT_EQ(tied.weights().size(), 2u);  // one layer, listed once
  EXPECT_EQ(tied.layers().size(), 1u);

  const SymbolicTensor c = Dense(3)(x), d = Dense(3)(c);
  Model untied(x, d);
  ASSERT_EQ(untied.weights().size(), 4u);  // two temporaries, two layers with weights of their own
  EXPECT_NE(untied.weights()[0].value.raw(), untied.weights()[2].value.raw());

  Dense local(3);  // not held by a shared_ptr: copied into the graph once, then reused
  Model twice(x, local(local(x)));
  EXPECT_EQ(twice.weights().size(), 2u);
  EXPECT_FALSE(local.built());  // the graph holds the copy (get it with get_layer)
  EXPECT_TRUE(twice.get_layer(local.name())->built());
}

TEST(Functional, LayerCalledOnAShapeItCannotTakeNamesBoth) {
  auto lstm = std::make_shared<LSTM>(2);
  lstm->set_name("head");
  EXPECT_TRUE(throws<ShapeError>([&] { (*lstm)(Input({4})); }, {"'head'", "(None, 4)", "{steps, features}"}));
  const SymbolicTensor ids = Input({5}, DType::Int32);
  EXPECT_TRUE(throws<TypeError>([&] { Dense(2)(ids); }, {"int32", "Embedding"}));
  EXPECT_TRUE(throws<ValueError>([&] { Dense(2)({Input({2}), Input({2})}); }, {"takes one input", "called on 2"}));
}

TEST(Functional, BadGraphsAreRefusedWithTheirNames) {
  nn::clear_session();
  const SymbolicTensor a = Input({2}, DType::Float32, "a"), b = Input({2}, DType::Float32, "b");
  auto needs_b = std::make_shared<Dense>(2);
  needs_b->set_name("needs_b");
  const SymbolicTensor out = nn::Add()({a, (*needs_b)(b)});
  EXPECT_TRUE(throws<ValueError>([&] { Model(a, out); }, {"graph disconnected", "input 'b'", "'needs_b'"}));

  auto one = std::make_shared<Dense>(2), other = std::make_shared<Dense>(2);
  one->set_name("same");
  other->set_name("same");
  EXPECT_TRUE(throws<ValueError>([&] { Model(a, (*other)((*one)(a))); }, {"two different layers", "'same'"}));
  const SymbolicTensor h = Dense(2)(a);
  EXPECT_TRUE(throws<ValueError>([&] { Model({a}, {h, h}); }, {"two outputs are named"}));
  EXPECT_TRUE(throws<ValueError>([&] { Model({h}, {h}); }, {"not an Input()"}));

  std::vector<std::string> warnings;
  set_log_handler([&](LogLevel, const std::string& m) { warnings.push_back(m); });
  Model unused({a, b}, {Dense(1)(a)});
  set_log_handler(nullptr);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("input 'b' is not used"), std::string::npos) << warnings[0];

  EXPECT_TRUE(throws<ValueError>([&] { nn::Add()(a); }, {"two or more inputs", "called on 1"}));
  EXPECT_TRUE(throws<ValueError>([&] { nn::Subtract()({a, a, b}); }, {"exactly two inputs"}));
  EXPECT_TRUE(throws<ShapeError>([&] { nn::Add()({a, Input({3})}); }, {"{2}, {3}"}));
  EXPECT_TRUE(throws<ShapeError>([&] { nn::Add()({a, Input({1, 2})}); }, {"same rank"}));
  EXPECT_TRUE(throws<ShapeError>([&] { nn::Concatenate()({Input({2, 3}), Input({3, 3})}); },
                                 {"equal sizes off axis", "{2, 3}, {3, 3}"}));
  EXPECT_TRUE(throws<ValueError>([] { nn::Concatenate(0); }, {"batch"}));
}

TEST(Functional, MergeLayersComputeAndBroadcast) {
  const SymbolicTensor a = Input({2, 3}), b = Input({1, 3});
  const Tensor xa = values({1, 2, 3, 4, 5, 6}, {1, 2, 3}), xb = values({10, 20, 30}, {1, 1, 3});
  auto run = [&](const SymbolicTensor& out) {
    return Model({a, b}, {out}).predict(std::vector<Tensor>{xa, xb})[0].to_vector();
  };
  EXPECT_EQ(run(nn::Add()({a, b})), (std::vector<float>{11, 22, 33, 14, 25, 36}));
  EXPECT_EQ(run(nn::Subtract()({a, b})), (std::vector<float>{-9, -18, -27, -6, -15, -24}));
  EXPECT_EQ(run(nn::Multiply()({a, b})), (std::vector<float>{10, 40, 90, 40, 100, 180}));
  EXPECT_EQ(run(nn::Average()({a, b})), (std::vector<float>{5.5f, 11, 16.5f, 7, 12.5f, 18}));
  EXPECT_EQ(run(nn::Concatenate(1)({a, b})), (std::vector<float>{1, 2, 3, 4, 5, 6, 10, 20, 30}));
  const Tensor xc = values({5, 1, 7}, {1, 1, 3});
  auto run3 = [&](const SymbolicTensor& out, const SymbolicTensor& c) {
    return Model({a, b, c}, {out}).predict(std::vector<Tensor>{xa, xb, xc})[0].to_vector();
  };
  const SymbolicTensor c3 = Input({1, 3});
  EXPECT_EQ(run3(nn::Maximum()({a, c3}), c3), (std::vector<float>{5, 2, 7, 5, 5, 7}));
  EXPECT_EQ(run3(nn::Minimum()({a, b, c3}), c3), (std::vector<float>{1, 1, 3, 4, 1, 6}));
  const SymbolicTensor c = nn::Concatenate(-1)({a, a, a});
  EXPECT_EQ(c.shape(), (Shape{2, 9}));
  EXPECT_EQ(nn::Reshape({3, -1})(a).shape(), (Shape{3, 2}));
  EXPECT_EQ(run(nn::Reshape({6})(nn::Add()({a, b}))), (std::vector<float>{11, 22, 33, 14, 25, 36}));
  EXPECT_TRUE(throws<ShapeError>([&] { nn::Reshape({4})(a); }, {"6 elements"}));
}

TEST(Functional, SharedLayerGradientIsTheSumOverItsUses) {
  // A Siamese pair: one Dense on both inputs, their difference, a head.
  manual_seed(3);
  const SymbolicTensor left = Input({3}), right = Input({3});
  auto encoder = std::make_shared<Dense>(4, "tanh");
  const SymbolicTensor diff = nn::Subtract()({(*encoder)(left), (*encoder)(right)});
  Model siamese({left, right}, {Dense(2)(diff)});
  std::mt19937 rng(5);
  EXPECT_EQ(check_gradients(siamese, {uniform({3, 3}, rng, -1, 1), uniform({3, 3}, rng, -1, 1)}, 7), "");
}

TEST(Functional, MergeLayerGradientsMatchFiniteDifferences) {
  manual_seed(4);
  std::mt19937 rng(9);
  const Tensor x = uniform({2, 3}, rng, -1, 1);
  for (int kind = 0; kind < 7; ++kind) {
    SCOPED_TRACE(kind);
    const SymbolicTensor in = Input({3});
    const SymbolicTensor p = Dense(3, "tanh")(in), q = Dense(3, "sigmoid")(in);
    SymbolicTensor merged;
    switch (kind) {
      case 0: merged = nn::Add()({p, q, in}); break;
      case 1: merged = nn::Subtract()({p, q}); break;
      case 2: merged = nn::Multiply()({p, q}); break;
      case 3: merged = nn::Average()({p, q}); break;
      case 4: merged = nn::Maximum()({p, q, in}); break;  // random values: ties have probability 0
      case 5: merged = nn::Minimum()({p, q}); break;
      default: merged = Dense(2)(nn::Concatenate()({p, q, in})); break;
    }
    EXPECT_EQ(check_gradients(Model(in, merged), {x}, 11), "");
  }
}

TEST(Functional, NestedModelAndFeatureExtractionShareWeights) {
  manual_seed(6);
  const SymbolicTensor x = Input({4});
  const SymbolicTensor h = Dense(3, "relu")(x);
  Model base(x, Dense(2)(h));
  Model features(base.inputs(), {h});  // over an intermediate tensor, as Keras
  const SymbolicTensor x2 = Input({4});
  Model outer(x2, Dense(1)(base(x2)));  // the whole base model as a layer
  EXPECT_EQ(outer.weights().size(), 6u);
  EXPECT_EQ(outer.weights()[0].value.raw(), base.weights()[0].value.raw());

  std::mt19937 rng(2);
  const Tensor xs = uniform({5, 4}, rng, -1, 1), ys = uniform({5, 1}, rng, -1, 1);
  const std::vector<float> before = features.predict(xs).to_vector(), base_before = base.predict(xs).to_vector();
  outer.compile(OptimizerSpec::sgd(0.5f), "mse");
  nn::FitOptions o;
  o.verbose = 0;
  o.epochs = 3;
  outer.fit(xs, ys, o);
  // Training the outer model trained the shared layers: base and features see it.
  EXPECT_NE(features.predict(xs).to_vector(), before);
  EXPECT_NE(base.predict(xs).to_vector(), base_before);
  EXPECT_EQ(outer.get_layer(base.name())->type(), std::string("Functional"));
  Model copy = outer.clone();
  EXPECT_NE(copy.weights()[0].value.raw(), outer.weights()[0].value.raw());
  EXPECT_EQ(copy.predict(xs).to_vector(), outer.predict(xs).to_vector());
}

// Dense(3, softmax) with kernel [[2, 0, -1], [0, 1, 3]] and bias [0.5, 0, 0],
// then Flatten: the loss folds the softmax found in the graph, through the
// Flatten, instead of applying it twice. Reference in double.
TEST(Functional, SoftmaxFoldedThroughFlatten) {
  const SymbolicTensor x = Input({2});
  auto dense = std::make_shared<Dense>(3, "softmax");
  Model m(x, nn::Flatten()((*dense)(x)));
  set_weight(dense, 0, {2, 0, -1, 0, 1, 3});
  set_weight(dense, 1, {0.5f, 0, 0});
  m.compile(OptimizerSpec::sgd(), "sparse_categorical_crossentropy");
  const Tensor xs = values({1, 0, 0, 1}, {2, 2});
  const Tensor ys = Tensor::from_vector(std::vector<int32_t>{0, 2}, Shape{2});
  auto ce = [](std::vector<double> z, int label) {
    double mx = *std::max_element(z.begin(), z.end()), s = 0;
    for (double v : z) s += std::exp(v - mx);
    return -(z[size_t(label)] - mx - std::log(s));
  };
  const double want = (ce({2.5, 0, -1}, 0) + ce({0.5, 1, 3}, 2)) / 2;
  EXPECT_NEAR(want, 0.151574, 1e-6);
  EXPECT_NEAR(m.evaluate(xs, ys).at("loss"), want, 1e-6);

  // A Dropout between the softmax and the output cannot be folded: refused at compile.
  const SymbolicTensor x2 = Input({2});
  Model dropped(x2, nn::Dropout(0.5f)(Dense(3, "softmax")(x2)));
  EXPECT_TRUE(throws<ValueError>([&] { dropped.compile(OptimizerSpec::sgd(), "categorical_crossentropy"); },
                                 {"Dropout comes after its softmax"}));
  Model sig(x2, Dense(3, "sigmoid")(x2));
  EXPECT_TRUE(throws<ValueError>([&] { sig.compile(OptimizerSpec::sgd(), "categorical_crossentropy"); },
                                 {"ends in sigmoid"}));
}

// Two inputs, two outputs, losses by name with weights, accuracy on one:
// every key of evaluate against values computed here.
TEST(Functional, TwoInputsTwoOutputsLossesAndMetricsByHand) {
  nn::clear_session();
  const SymbolicTensor a = Input({2}, DType::Float32, "a"), b = Input({1}, DType::Float32, "b");
  auto cls = std::make_shared<Dense>(3, "softmax");
  cls->set_name("cls");
  auto reg = std::make_shared<Dense>(1, "linear", false);
  reg->set_name("reg");
  Model m({a, b}, {(*cls)(nn::Concatenate()({a, b})), (*reg)(a)});
  set_weight(cls, 0, {1, 0, 0, 0, 1, 0, 0, 0, 1});  // identity on [a0, a1, b0]
  set_weight(cls, 1, {0, 0, 0});
  set_weight(reg, 0, {1, 1});
  m.compile(OptimizerSpec::adam(), std::map<std::string, Loss>{{"cls", "sparse_categorical_crossentropy"}, {"reg", "mse"}},
            {{"reg", 0.5f}}, {{"cls", {"accuracy"}}});
  const Tensor xa = values({1, 0, 0, 2}, {2, 2}), xb = values({0, 3}, {2, 1});
  const Tensor yc = Tensor::from_vector(std::vector<int32_t>{0, 1}, Shape{2}), yr = values({2, 0}, {2, 1});
  auto ce = [](std::vector<double> z, int label) {
    double s = 0;
    for (double v : z) s += std::exp(v);
    return std::log(s) - z[size_t(label)];
  };
  const double cls_loss = (ce({1, 0, 0}, 0) + ce({0, 2, 3}, 1)) / 2;  // row 2's argmax is class 2: wrong
  const double reg_loss = ((1 - 2) * (1 - 2) + (2 - 0) * (2 - 0)) / 2.0;
  const auto r = m.evaluate(std::map<std::string, Tensor>{{"a", xa}, {"b", xb}},
                            std::map<std::string, Tensor>{{"cls", yc}, {"reg", yr}});
  EXPECT_NEAR(r.at("cls_loss"), cls_loss, 1e-6);
  EXPECT_NEAR(r.at("reg_loss"), reg_loss, 1e-6);
  EXPECT_NEAR(r.at("loss"), cls_loss + 0.5 * reg_loss, 1e-5);
  EXPECT_DOUBLE_EQ(r.at("cls_accuracy"), 0.5);
  EXPECT_EQ(r.size(), 4u);  // nothing else in it

  const std::vector<Tensor> p = m.predict(std::vector<Tensor>{xa, xb});
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[1].to_vector(), (std::vector<float>{1, 2}));
  std::vector<Tensor> outs{Tensor::empty({2, 3}), Tensor::empty({2, 1})};
  m.predict(std::vector<Tensor>{xa, xb}, outs);
  EXPECT_EQ(outs[0].to_vector(), p[0].to_vector());

  nn::FitOptions o;
  o.verbose = 0;
  o.batch_size = 2;
  const nn::History h = m.fit(std::vector<Tensor>{xa, xb}, std::vector<Tensor>{yc, yr}, o);
  EXPECT_NEAR(h["loss"][0], cls_loss + 0.5 * reg_loss, 1e-5);  // one step: measured before its update
  for (const char* key : {"cls_loss", "reg_loss", "cls_accuracy"}) EXPECT_TRUE(h.has(key)) << key;
  // Validation data for several inputs and outputs, in the model's order.
  nn::FitOptions v = o;
  v.validation_x = {xa, xb};
  v.validation_y = {yc, yr};
  const nn::History hv = m.fit(std::vector<Tensor>{xa, xb}, std::vector<Tensor>{yc, yr}, v);
  const auto after = m.evaluate(std::vector<Tensor>{xa, xb}, std::vector<Tensor>{yc, yr});
  EXPECT_NEAR(hv["val_loss"][0], after.at("loss"), 1e-6);  // measured after the epoch's update
  EXPECT_NEAR(hv["val_cls_accuracy"][0], after.at("cls_accuracy"), 1e-12);
  v.validation_y = {yc};
  EXPECT_TRUE(throws<ShapeError>([&] { m.fit(std::vector<Tensor>{xa, xb}, std::vector<Tensor>{yc, yr}, v); },
                                 {"validation_y", "2 output(s)"}));

  // Wrong counts and names.
  EXPECT_TRUE(throws<ShapeError>([&] { m.predict(std::vector<Tensor>{xa}); }, {"2 input(s) (a, b)", "got 1"}));
  EXPECT_TRUE(throws<ValueError>([&] {
    m.evaluate(std::map<std::string, Tensor>{{"a", xa}, {"c", xb}}, std::map<std::string, Tensor>{{"cls", yc}, {"reg", yr}});
  }, {"no tensor for input 'b'"}));
  EXPECT_TRUE(throws<ShapeError>([&] { m.predict(std::vector<Tensor>{xa, values({1, 2, 3}, {3, 1})}); },
                                 {"inputs differ in rows"}));
  EXPECT_TRUE(throws<ValueError>([&] { m.compile(OptimizerSpec::adam(), std::vector<Loss>{"mse"}); },
                                 {"2 outputs (cls, reg)", "one loss per output"}));
  EXPECT_TRUE(throws<ValueError>([&] {
    m.compile(OptimizerSpec::adam(), std::map<std::string, Loss>{{"cls", "mse"}, {"reg", "mse"}, {"x", "mse"}});
  }, {"'x'", "no output"}));
}

TEST(Functional, CustomLossIsWeightedAndDividedByRows) {
  const SymbolicTensor x = Input({2});
  auto d = std::make_shared<Dense>(2, "linear", false);
  Model m(x, (*d)(x));
  set_weight(d, 0, {1, 0, 0, 1});
  // Per row: the sum of |y_true - y_pred| written with builder ops.
  const Loss l1("l1_rows", [](Builder& b, Value y_true, Value y_pred) {
    const Value diff = b.sub(y_pred, y_true);
    const Value abs = b.add(b.relu(diff), b.relu(b.scale(diff, -1.0f)));
    const Shape s = b.shape(abs);
    return b.reshape(b.scale(b.apply(OpKind::MeanLastAxis, {abs}), float(s[1])), Shape{s[0]});
  });
  m.compile(OptimizerSpec::sgd(), l1);
  const Tensor xs = values({1, 2, 3, 4}, {2, 2}), ys = values({0, 0, 3, 3}, {2, 2});
  EXPECT_NEAR(m.evaluate(xs, ys).at("loss"), (3.0 + 1.0) / 2, 1e-6);
  EXPECT_NEAR(m.evaluate(xs, ys, 32, values({2, 0}, {2})).at("loss"), (2 * 3.0) / 2, 1e-6);
  const Loss wrong("wrong", [](Builder&, Value, Value y_pred) { return y_pred; });
  EXPECT_TRUE(throws<ShapeError>([&] { m.compile(OptimizerSpec::sgd(), wrong); },
                                 {"custom loss 'wrong'", "per-row losses of shape {batch}", "{1, 2}"}));
}

TEST(Functional, SequentialAndFunctionalTrainBitIdentically) {
  auto build = [](bool functional) -> Model {
    manual_seed(21);
    nn::clear_session();
    auto d1 = std::make_shared<Dense>(8, "relu");
    auto d2 = std::make_shared<Dense>(3, "softmax");
    if (!functional) {
      Sequential s({4});
      s.add(d1).add(d2);
      return s;
    }
    const SymbolicTensor x = Input({4});
    return Model(x, (*d2)((*d1)(x)));
  };
  std::mt19937 rng(1);
  const Tensor x = uniform({50, 4}, rng, -1, 1);
  Tensor y = Tensor::empty({50}, DType::Int32);
  for (int i = 0; i < 50; ++i) y.data<int32_t>()[i] = i % 3;
  std::vector<std::vector<float>> trained[2];
  for (int functional = 0; functional < 2; ++functional) {
    Model m = build(functional == 1);
    m.compile(OptimizerSpec::adam(1e-2f), "sparse_categorical_crossentropy", {"accuracy"});
    nn::FitOptions o;
    o.verbose = 0;
    o.epochs = 3;
    o.batch_size = 16;  // a partial last batch too
    manual_seed(99);    // the same shuffles
    m.fit(x, y, o);
    for (const nn::Weight& w : m.weights()) trained[functional].push_back(w.value.to_vector());
  }
  EXPECT_EQ(trained[0], trained[1]);
}

// One random stream per model: the partial-batch context continues the
// dropout counter of the main one instead of replaying its first mask.
TEST(Functional, DropoutMasksDifferBetweenMainAndPartialBatchContexts) {
  manual_seed(8);
  const SymbolicTensor x = Input({64});
  auto d = std::make_shared<Dense>(1, "linear", false);
  Model m(x, (*d)(nn::Dropout(0.5f)(x)));
  d->weights()[0].value.fill(1.0f);
  m.compile(OptimizerSpec::sgd(1e-9f), "mse");
  // Row 0 ones, row 1 zeros, y = 0, mse: dL/dW_j = (2 / rows) * pred_0 * 2 * mask_0j, so
  // the kernel gradient's nonzero pattern is row 0's dropout mask.
  std::vector<float> masks[2];
  auto capture = [&](int which) {
    return [&masks, which](std::span<NamedGradient> gs) {
      masks[which].clear();
      for (float v : gs[0].grad.to_vector()) masks[which].push_back(v != 0.0f ? 1.0f : 0.0f);
    };
  };
  OptimizerContext& main_ctx = m.optimizer_context(2);
  OptimizerContext& part_ctx = m.optimizer_context(1);
  main_ctx.add_gradient_hook(capture(0));
  part_ctx.add_gradient_hook(capture(1));
  Tensor two = Tensor::zeros({2, 64});
  for (int j = 0; j < 64; ++j) two.data<float>()[j] = 1.0f;
  main_ctx.step(two, Tensor::zeros({2, 1}));
  part_ctx.step(Tensor::full({1, 64}, 1.0f), Tensor::zeros({1, 1}));
  ASSERT_EQ(masks[0].size(), 64u);
  ASSERT_EQ(masks[1].size(), 64u);
  float kept = 0;
  for (float v : masks[0]) kept += v;
  EXPECT_GT(kept, 10.0f);  // a real mask, not all zeros or ones
  EXPECT_LT(kept, 54.0f);
  EXPECT_NE(masks[0], masks[1]);
}

// Hooks belong to the model: fit's main and partial-batch contexts and a
// Trainer made from the model all run them before their update.
TEST(Functional, ModelGradientHooksRunInEveryContext) {
  Sequential m({2});
  m.add(Dense(1));
  m.compile(OptimizerSpec::sgd(0.1f), "mse");
  int calls = 0;
  m.add_gradient_hook([&](std::span<NamedGradient> gs) {
    ++calls;
    for (NamedGradient& g : gs) g.grad.fill(0.0f);  // no update can move the weights
  });
  const std::vector<float> before = m.weights()[0].value.to_vector();
  nn::FitOptions o;
  o.verbose = 0;
  o.batch_size = 2;
  o.shuffle = false;
  std::mt19937 rng(3);
  const Tensor x = uniform({5, 2}, rng, -1, 1), y = uniform({5, 1}, rng, -1, 1);
  m.fit(x, y, o);  // batches of 2, 2 and 1
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(m.weights()[0].value.to_vector(), before);
  nn::TrainerOptions t;
  t.batch_size = 5;
  nn::Trainer tr(m, t);
  tr.step(x, y);
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(tr.weights()[0].value.to_vector(), before);
  EXPECT_TRUE(throws<ValueError>([&] { m.add_gradient_hook(nullptr); }, {"empty hook"}));
}

// Keras' losses and metrics by name, against values computed here in double
// from the output z = x W of one Dense layer with known weights.
TEST(Functional, LossesAndMetricsByKerasName) {
  const Tensor xs = values({1, -2, 0.5f, 3}, {2, 2});
  const std::vector<float> w{0.5f, -1, 2, 1.5f, 0.25f, -0.75f};  // {2, 3}
  double z[2][3];
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 3; ++c) z[r][c] = double(xs.data<float>()[r * 2]) * w[size_t(c)] + double(xs.data<float>()[r * 2 + 1]) * w[size_t(3 + c)];
  const std::vector<float> yv{1, 0, 1, 0, 0, 1};
  const Tensor ys = values(yv, {2, 3});
  auto model = [&](const char* activation) {
    const SymbolicTensor x = Input({2});
    auto d = std::make_shared<Dense>(3, activation, false);
    Model m(x, (*d)(x));
    set_weight(d, 0, w);
    return m;
  };
  double mae = 0, mse = 0, huber = 0, bce = 0, bin_acc = 0;
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 3; ++c) {
      const double d = z[r][c] - yv[size_t(r * 3 + c)], y = yv[size_t(r * 3 + c)], zz = z[r][c];
      mae += std::fabs(d) / 6;
      mse += d * d / 6;
      huber += (std::fabs(d) <= 1 ? 0.5 * d * d : std::fabs(d) - 0.5) / 6;
      bce += (std::max(zz, 0.0) - zz * y + std::log1p(std::exp(-std::fabs(zz)))) / 6;
      bin_acc += ((1 / (1 + std::exp(-zz)) > 0.5) == (y > 0.5)) / 6.0;
    }
  Model linear = model("linear");
  linear.compile(OptimizerSpec::sgd(), "mae", {"mse", "rmse", "mae"});
  auto r = linear.evaluate(xs, ys);
  EXPECT_NEAR(r.at("loss"), mae, 1e-6);
  EXPECT_NEAR(r.at("mae"), mae, 1e-6);
  EXPECT_NEAR(r.at("mse"), mse, 1e-5);
  EXPECT_NEAR(r.at("rmse"), std::sqrt(mse), 1e-5);
  linear.compile(OptimizerSpec::sgd(), "huber");
  EXPECT_NEAR(linear.evaluate(xs, ys).at("loss"), huber, 1e-6);
  EXPECT_TRUE(throws<ValueError>([&] { linear.compile(OptimizerSpec::sgd(), "mse", {"accuracy"}); }, {"accuracy", "mse"}));

  Model sigmoid = model("sigmoid");
  sigmoid.compile(OptimizerSpec::sgd(), "binary_crossentropy", {"accuracy"});
  r = sigmoid.evaluate(xs, ys);
  EXPECT_NEAR(r.at("loss"), bce, 1e-6);
  EXPECT_NEAR(r.at("accuracy"), bin_acc, 1e-6);  // "accuracy" resolves to binary_accuracy
  Model relu = model("relu");
  EXPECT_TRUE(throws<ValueError>([&] { relu.compile(OptimizerSpec::sgd(), "binary_crossentropy"); }, {"sigmoid", "relu"}));

  // Top-5 of 6 classes: a row misses only when its label has the lowest score.
  const SymbolicTensor x6 = Input({1});
  auto d6 = std::make_shared<Dense>(6, "softmax", false);
  Model six(x6, (*d6)(x6));
  set_weight(d6, 0, {3, 1, 4, 1.5f, 5, 9});
  six.compile(OptimizerSpec::sgd(), "sparse_categorical_crossentropy", {"sparse_top_k_categorical_accuracy", "accuracy"});
  const Tensor ids = Tensor::from_vector(std::vector<int32_t>{1, 5, 0, 3}, Shape{4});
  r = six.evaluate(Tensor::full({4, 1}, 1.0f), ids);
  EXPECT_DOUBLE_EQ(r.at("sparse_top_k_categorical_accuracy"), 0.75);  // class 1 has the lowest score
  EXPECT_DOUBLE_EQ(r.at("accuracy"), 0.25);                            // only class 5 is the argmax
  EXPECT_TRUE(throws<ValueError>([&] { six.compile(OptimizerSpec::sgd(), "sparse_categorical_crossentropy", {"top_k_categorical_accuracy"}); },
                                 {"class ids"}));
  EXPECT_TRUE(throws<ValueError>([&] { six.compile(OptimizerSpec::sgd(), "mse", {"auc"}); }, {"unknown metric 'auc'"}));
}

namespace {
// 6-16-BN-relu-dropout-3 softmax: batch statistics and dropout scale with the batch.
Model bn_model(uint64_t seed) {
  manual_seed(seed);
  const SymbolicTensor x = Input({6});
  SymbolicTensor h = nn::BatchNormalization()(Dense(16)(x));
  h = nn::Dropout(0.25f)(nn::ActivationLayer("relu")(h));
  Model m(x, Dense(3, "softmax")(h));
  m.compile(OptimizerSpec::adam(1e-2f), "sparse_categorical_crossentropy", {"accuracy"});
  return m;
}
}  // namespace

// A batch run in a graph planned for more rows gives what a graph planned
// for exactly its rows gives: losses, metrics and the updated weights.
TEST(Functional, ABatchInALargerPlanMatchesItsOwnPlan) {
  std::mt19937 rng(4);
  const Tensor x = uniform({5, 6}, rng, -1, 1);
  Tensor y = Tensor::empty({5}, DType::Int32);
  for (int i = 0; i < 5; ++i) y.data<int32_t>()[i] = i % 3;
  Model exact_model = bn_model(2), big_model = exact_model.clone();
  OptimizerContextOptions o;
  o.batch_size = 5;
  o.losses = {Loss("sparse_categorical_crossentropy")};
  o.metrics = {{"accuracy"}};
  OptimizerContext exact(exact_model.model_function(), o);
  o.capacity = 16;
  OptimizerContext big(big_model.model_function(), o);
  for (int step = 0; step < 3; ++step) {
    const StepResult a = exact.step(x, y), b = big.step(x, y);
    EXPECT_NEAR(a.loss, b.loss, 1e-6f) << "step " << step;
    EXPECT_EQ(a.correct, b.correct);
  }
  EXPECT_NEAR(exact.evaluate(x, y).loss, big.evaluate(x, y).loss, 1e-6f);
  EXPECT_EQ(exact.planned_rows(), 5);
  EXPECT_EQ(big.planned_rows(), 16);  // really run in the larger plan
  const auto wa = exact_model.weights(), wb = big_model.weights();
  for (size_t i = 0; i < wa.size(); ++i) {
    const std::vector<float> va = wa[i].value.to_vector(), vb = wb[i].value.to_vector();
    for (size_t k = 0; k < va.size(); ++k) EXPECT_NEAR(va[k], vb[k], 1e-5f) << wa[i].name << "[" << k << "]";
  }
  // Below three rows there is no probe to learn a rule from: planned for the batch itself.
  o.batch_size = 1;
  o.capacity = 2;
  OptimizerContext tiny(big_model.model_function(), o);
  EXPECT_TRUE(std::isfinite(tiny.step(x.rows(0, 1), y.rows(0, 1)).loss));
  EXPECT_EQ(tiny.planned_rows(), 1);
}

// Contexts are planned for powers of two and share plans: fit and evaluate
// over 50 batch sizes hold a few plans, not one per size.
TEST(Functional, FiftyBatchSizesShareAFewPlans) {
  std::mt19937 rng(6);
  const Tensor x = uniform({60, 6}, rng, -1, 1);
  Tensor y = Tensor::empty({60}, DType::Int32);
  for (int i = 0; i < 60; ++i) y.data<int32_t>()[i] = i % 3;
  nn::FitOptions o;
  o.verbose = 0;
  Model one = bn_model(3);
  o.batch_size = 50;
  one.fit(x, y, o);
  one.evaluate(x, y, 50);
  const size_t largest = one.arena_bytes();
  ASSERT_GT(largest, 0u);

  Model many = bn_model(3);
  for (int64_t bs = 1; bs <= 50; ++bs) {
    o.batch_size = bs;
    many.fit(x, y, o);
    many.evaluate(x, y, bs);
  }
  // Capacities 1, 2, 4, ..., 64 for training and evaluation: 14 plans; one per size would be 100 or more.
  EXPECT_LE(many.plan_count(), 14u);
  EXPECT_LT(many.arena_bytes(), 4 * largest);
  EXPECT_TRUE(std::isfinite(many.evaluate(x, y).at("loss")));
}

// Found by a fresh user's trial: each used to crash, hang, or give a wrong value.
TEST(Functional, HooksThatChangeTheModelStopTheStepCleanly) {
  Sequential s({3});
  s.add(Dense(2));
  s.compile(OptimizerSpec::adam(), "mse");
  int calls = 0;
  s.add_gradient_hook([&](std::span<NamedGradient>) {
    if (++calls == 2) s.freeze_bn_stats();  // retires every context mid-step
  });
  std::mt19937 rng(1);
  const Tensor x = uniform({8, 3}, rng, -1, 1), y = uniform({8, 2}, rng, -1, 1);
  nn::FitOptions o;
  o.verbose = 0;
  o.batch_size = 4;
  const std::vector<float> before = s.weights()[0].value.to_vector();
  EXPECT_TRUE(throws<StateError>([&] { s.fit(x, y, o); }, {"gradient hook changed the model", "not applied"}));
  EXPECT_EQ(calls, 2);
  EXPECT_NE(s.weights()[0].value.to_vector(), before);  // the first step's update stands
  EXPECT_NO_THROW(s.fit(x, y, o));                       // fresh contexts afterwards

  Sequential f({3});
  f.add(Dense(2));
  f.compile(OptimizerSpec::adam(), "mse");
  f.add_gradient_hook([&](std::span<NamedGradient>) { f.free(); });
  EXPECT_TRUE(throws<StateError>([&] { f.fit(x, y, o); }, {"gradient hook changed the model"}));
  EXPECT_TRUE(f.released());
}

TEST(Functional, HugeBatchesComputedIdsDuplicateNamesAndAveragedSoftmaxesAreRefused) {
  const SymbolicTensor a = Input({3}, DType::Float32, "x");
  // A huge batch is refused, not looped over.
  Model m(a, Dense(2)(a));
  m.compile(OptimizerSpec::adam(), "mse");
  EXPECT_TRUE(throws<ValueError>([&] { m.optimizer_context(std::numeric_limits<int64_t>::max()); },
                                 {"batch_size", "physical memory"}));
  // Embedding on a computed tensor would truncate its ids.
  EXPECT_TRUE(throws<TypeError>([&] { nn::Embedding(5, 1)(Dense(1)(a)); }, {"token ids", "model input"}));
  // Duplicate input names, identity models, History-key clashes.
  const SymbolicTensor b = Input({3}, DType::Float32, "x");
  EXPECT_TRUE(throws<ValueError>([&] { Model({a, b}, {nn::Add()({a, b})}); }, {"two inputs are named 'x'"}));
  EXPECT_TRUE(throws<ValueError>([&] { Model(a, a); }, {"no layer lies between"}));
  auto val = std::make_shared<Dense>(2);
  val->set_name("val_a");
  EXPECT_TRUE(throws<ValueError>([&] { Model(a, (*val)(a)); }, {"'val_a'", "ambiguous"}));
  // Cross-entropy on an average of softmaxes is not taken as logits.
  Model avg(a, nn::Average()({Dense(3, "softmax")(a), Dense(3, "softmax")(a)}));
  EXPECT_TRUE(throws<ValueError>([&] { avg.compile(OptimizerSpec::sgd(), "sparse_categorical_crossentropy"); },
                                 {"probabilities", "not supported"}));
}

TEST(Functional, NestedModelCalledTwiceAndClonedStaysShared) {
  // A Siamese encoder as a model, called on both inputs of one outer model.
  const SymbolicTensor e = Input({3});
  auto d = std::make_shared<Dense>(3);
  Model encoder(e, (*d)(e), "enc");
  const SymbolicTensor l = Input({3}), r = Input({3});
  Model siamese({l, r}, {nn::Subtract()({encoder(l), encoder(r)})});
  EXPECT_EQ(siamese.weights().size(), 2u);
  // A layer used inside a nested model and directly stays one layer in clones.
  const SymbolicTensor x = Input({3});
  Model outer(x, nn::Add()({encoder(x), (*d)(x)}));
  ASSERT_EQ(outer.weights().size(), 2u);
  Model copy = outer.clone();
  EXPECT_EQ(copy.weights().size(), 2u);
  EXPECT_NE(copy.weights()[0].value.raw(), outer.weights()[0].value.raw());
  std::mt19937 rng(2);
  const Tensor xs = uniform({4, 3}, rng, -1, 1);
  EXPECT_EQ(copy.predict(xs).to_vector(), outer.predict(xs).to_vector());
}

// trainable changed after compile takes effect at the next compile, as Keras;
// until then contexts refuse to run rather than depend on which batch sizes
// happened to be planned before the change.
TEST(Functional, TrainableChangedAfterCompileAsksForACompile) {
  const SymbolicTensor x = Input({3});
  auto frozen = std::make_shared<Dense>(2);
  Model m(x, Dense(1)((*frozen)(x)));
  m.compile(OptimizerSpec::sgd(0.1f), "mse");
  std::mt19937 rng(3);
  const Tensor xs = uniform({4, 3}, rng, -1, 1), ys = uniform({4, 1}, rng, -1, 1);
  nn::FitOptions o;
  o.verbose = 0;
  o.batch_size = 4;
  m.fit(xs, ys, o);
  frozen->trainable = false;
  EXPECT_TRUE(throws<StateError>([&] { m.fit(xs, ys, o); }, {"trainable = false after compile()", "compile() again"}));
  m.compile(OptimizerSpec::sgd(0.1f), "mse");
  const std::vector<float> before = frozen->weights()[0].value.to_vector();
  o.batch_size = 3;
  m.fit(xs, ys, o);
  EXPECT_EQ(frozen->weights()[0].value.to_vector(), before);  // frozen now, at every batch size
}

// Move-assigning a compiled clone over a compiled model (keeping the best
// epoch's weights) hands over everything compile recorded: the model then
// evaluates, with no reference to the layers it had before.
TEST(Functional, MoveAssignedCloneEvaluates) {
  const SymbolicTensor x = Input({3});
  Model m(x, Dense(2, "softmax")(Dense(4, "relu")(x)));
  m.compile(OptimizerSpec::adam(), "sparse_categorical_crossentropy", {"accuracy"});
  std::mt19937 rng(5);
  const Tensor xs = uniform({6, 3}, rng, -1, 1);
  const Tensor ys = Tensor::from_vector(std::vector<int32_t>{0, 1, 0, 1, 0, 1}, Shape{6});
  std::optional<Model> kept = m.clone();
  const double want = kept->evaluate(xs, ys, 5).at("loss");  // plans of kept's own
  nn::FitOptions o;
  o.verbose = 0;
  m.fit(xs, ys, o);  // m moves on, with plans for its batch sizes
  EXPECT_NE(m.evaluate(xs, ys, 3).at("loss"), want);
  m = std::move(*kept);
  EXPECT_DOUBLE_EQ(m.evaluate(xs, ys, 5).at("loss"), want);
  EXPECT_NEAR(m.evaluate(xs, ys, 3).at("loss"), want, 1e-6);  // not the old model's plan for 3 rows
  EXPECT_TRUE(kept->released());
}

// A model of two outputs called as a layer: one call gives a tensor per
// output (the shared trunk runs once: one trunk matmul in the graph), the
// outer model computes what the inner's outputs say, and training the outer
// model trains the inner's weights. operator() on it points to call_outputs.
TEST(Functional, NestedModelWithTwoOutputs) {
  manual_seed(8);
  const SymbolicTensor x = Input({3});
  auto trunk = std::make_shared<Dense>(4, "tanh");
  const SymbolicTensor h = (*trunk)(x);
  Model inner({x}, {Dense(2)(h), Dense(1)(h)}, "two_heads");
  const SymbolicTensor y = Input({3});
  EXPECT_TRUE(throws<ValueError>([&] { inner(y); }, {"two_heads", "2 outputs", "call_outputs"}));
  const std::vector<SymbolicTensor> heads = inner.call_outputs({y});
  ASSERT_EQ(heads.size(), 2u);
  EXPECT_EQ(heads[0].shape(), Shape{2});
  EXPECT_EQ(heads[1].shape(), Shape{1});
  auto last = std::make_shared<Dense>(1);
  Model outer({y}, {(*last)(nn::Concatenate()(heads)), heads[1]});
  EXPECT_EQ(outer.output_names()[1], "two_heads/" + inner.output_names()[1]);

  std::mt19937 rng(4);
  const Tensor xs = uniform({5, 3}, rng, -1, 1);
  const std::vector<Tensor> inner_out = inner.predict(std::vector<Tensor>{xs});
  const std::vector<Tensor> outer_out = outer.predict(std::vector<Tensor>{xs});
  const std::vector<float> a = inner_out[0].to_vector(), b = inner_out[1].to_vector();
  const std::vector<float> k = last->weights()[0].value.to_vector(), bias = last->weights()[1].value.to_vector();
  for (int64_t r = 0; r < 5; ++r) {
    const double want = double(a[size_t(2 * r)]) * k[0] + double(a[size_t(2 * r + 1)]) * k[1] + double(b[size_t(r)]) * k[2] + bias[0];
    EXPECT_NEAR(outer_out[0].to_vector()[size_t(r)], want, 1e-5) << "row " << r;
    EXPECT_EQ(outer_out[1].to_vector()[size_t(r)], b[size_t(r)]) << "row " << r;
  }
  // One call: the trunk's kernel feeds one matmul in the forward graph.
  const ModelFunction f = outer.model_function();
  Graph g;
  const Value in = g.input("x", Shape{5, 3});
  f.forward(g, std::span<const Value>(&in, 1), false);
  int matmuls = 0;
  for (const Node& n : g.nodes())
    if (n.role == NodeRole::Op && n.op == OpKind::MatMul) ++matmuls;
  EXPECT_EQ(matmuls, 4);  // trunk, two heads, last
  EXPECT_EQ(check_gradients(outer, {xs}, 9), "");

  const std::vector<float> trunk_before = trunk->weights()[0].value.to_vector();
  outer.compile(OptimizerSpec::sgd(0.1f), "mse");
  nn::FitOptions o;
  o.verbose = 0;
  o.epochs = 2;
  outer.fit(std::vector<Tensor>{xs}, std::vector<Tensor>{uniform({5, 1}, rng, -1, 1), uniform({5, 1}, rng, -1, 1)}, o);
  EXPECT_NE(trunk->weights()[0].value.to_vector(), trunk_before);
  Model copy = outer.clone();
  EXPECT_EQ(copy.predict(std::vector<Tensor>{xs})[0].to_vector(), outer.predict(std::vector<Tensor>{xs})[0].to_vector());
}
