// Misuse a new user ran into (fresh-clone trial), each now an error that
// names the problem or a documented behaviour.
#include <gtest/gtest.h>

#include "test_support.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "tensorgrad/tensorgrad.h"

using namespace tensorgrad;
using nn::Dense;
using nn::Sequential;

namespace {
using test_support::message_of;

Tensor random_rows(int64_t rows, int64_t cols, uint32_t seed) {
  Tensor t = Tensor::empty(Shape{rows, cols});
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(gen);
  return t;
}

Tensor class_ids(int64_t rows, int32_t classes) {
  Tensor t = Tensor::empty(Shape{rows}, DType::Int32);
  for (int64_t i = 0; i < rows; ++i) t.data<int32_t>()[i] = int32_t(i % classes);
  return t;
}

nn::FitOptions quiet(int64_t batch = 8) {
  nn::FitOptions f;
  f.batch_size = batch;
  f.verbose = 0;
  return f;
}
}  // namespace

TEST(Usage, SharedLayerKeepsItsWeights) {
  manual_seed(3);
  auto shared = std::make_shared<Dense>(2);
  Sequential a({3});
  a.add(std::shared_ptr<nn::Layer>(shared));
  const std::vector<float> before = shared->weights()[0].value.to_vector();
  Sequential b({3});
  b.add(std::shared_ptr<nn::Layer>(shared));
  EXPECT_EQ(shared->weights()[0].value.to_vector(), before);
  const Tensor x = random_rows(4, 3, 1);
  EXPECT_EQ(a.predict(x).to_vector(), b.predict(x).to_vector());
  Sequential c({5});
  const std::string msg = message_of<ShapeError>([&] { c.add(std::shared_ptr<nn::Layer>(shared)); });
  EXPECT_NE(msg.find("built for input shape {3}"), std::string::npos) << msg;
}

TEST(Usage, CrossEntropyAfterSigmoidIsRefused) {
  Sequential m({4});
  m.add(Dense(3, "sigmoid"));
  const std::string msg =
      message_of<ValueError>([&] { m.compile(OptimizerSpec::adam(), "categorical_crossentropy"); });
  EXPECT_NE(msg.find("ends in sigmoid"), std::string::npos) << msg;
  EXPECT_FALSE(m.compiled());
}

// A ReLU folded into the op before it (a Dense's MatMul, a Conv2D) still
// ends the output: refused like a Relu op, never taken as logits.
TEST(Usage, CrossEntropyAfterAFoldedReluIsRefused) {
  Sequential dense({4});
  dense.add(Dense(3, "relu"));
  std::string msg = message_of<ValueError>([&] { dense.compile(OptimizerSpec::adam(), "categorical_crossentropy"); });
  EXPECT_NE(msg.find("ends in relu"), std::string::npos) << msg;
  EXPECT_FALSE(dense.compiled());
  Sequential conv({6, 6, 1});
  conv.add(nn::Conv2D(2, 3, "valid", "relu"));
  conv.add(nn::Flatten());
  msg = message_of<ValueError>([&] { conv.compile(OptimizerSpec::adam(), "sparse_categorical_crossentropy"); });
  EXPECT_NE(msg.find("ends in relu"), std::string::npos) << msg;
  EXPECT_FALSE(conv.compiled());
}

TEST(Usage, AddAfterCompileAsksForANewCompile) {
  Sequential m({4});
  m.add(Dense(3, "softmax"));
  m.compile(OptimizerSpec::adam(), "sparse_categorical_crossentropy");
  m.add(Dense(3, "softmax"));
  const std::string msg = message_of<StateError>([&] { m.fit(random_rows(8, 4, 2), class_ids(8, 3), quiet()); });
  EXPECT_NE(msg.find("changed after compile"), std::string::npos) << msg;
}

TEST(Usage, ThrowingHookCancelsThePeriod) {
  manual_seed(4);
  Sequential m({4});
  m.add(Dense(2));
  m.compile(OptimizerSpec::sgd(0.1f), "mse");
  OptimizerContext& ctx = m.optimizer_context(4, 8);
  bool fail = true;
  ctx.add_gradient_hook([&](std::span<NamedGradient>) {
    if (fail) throw ValueError("hook failed");
  });
  const Tensor x = random_rows(4, 4, 5), y = random_rows(4, 2, 6);
  ctx.step(x, y);
  EXPECT_THROW(ctx.step(x, y), ValueError);
  EXPECT_EQ(ctx.state()->micro_step, 0);
  fail = false;
  EXPECT_FALSE(ctx.step(x, y).updated);  // a new period of two starts
  EXPECT_TRUE(ctx.step(x, y).updated);
}

TEST(Usage, PredictIntoWrongDtypeIsTypeError) {
  Sequential m({4});
  m.add(Dense(3));
  Tensor out = Tensor::zeros(Shape{5, 3}, DType::Int32);
  const std::string msg = message_of<TypeError>([&] { m.predict(random_rows(5, 4, 7), out); });
  EXPECT_NE(msg.find("float32"), std::string::npos) << msg;
}

TEST(Usage, OverflowingShapeIsShapeError) {
  const std::string msg = message_of<ShapeError>([] { Tensor::zeros(Shape{(int64_t(1) << 62) + 1, 4}); });
  EXPECT_NE(msg.find("64 bits"), std::string::npos) << msg;
}

TEST(Usage, EvaluateAFrozenModel) {
  manual_seed(5);
  Sequential m({4});
  m.add(Dense(3, "softmax"));
  m.layers()[0]->trainable = false;
  m.compile(OptimizerSpec::adam(), "sparse_categorical_crossentropy", {"accuracy"});
  const Tensor x = random_rows(10, 4, 8), y = class_ids(10, 3);
  const auto r = m.evaluate(x, y, 4);
  // The reference: mean cross-entropy of softmax(x W + b) and the share of
  // rows whose largest probability is the label, computed here in double.
  const std::vector<float> w = m.weights()[0].value.to_vector(), bias = m.weights()[1].value.to_vector();
  double loss = 0;
  int correct = 0;
  for (int64_t i = 0; i < 10; ++i) {
    double z[3], zmax = -1e300, sum = 0;
    for (int c = 0; c < 3; ++c) {
      z[c] = bias[size_t(c)];
      for (int k = 0; k < 4; ++k) z[c] += double(x.data<float>()[i * 4 + k]) * w[size_t(k * 3 + c)];
      zmax = std::max(zmax, z[c]);
    }
    for (double v : z) sum += std::exp(v - zmax);
    const int label = y.data<int32_t>()[i];
    loss += -(z[label] - zmax - std::log(sum));
    correct += int(std::max_element(z, z + 3) - z == label);
  }
  EXPECT_NEAR(r.at("loss"), loss / 10, 1e-5);
  EXPECT_DOUBLE_EQ(r.at("accuracy"), correct / 10.0);
  EXPECT_THROW(m.fit(random_rows(10, 4, 8), class_ids(10, 3), quiet()), ValueError);  // nothing to train
}

TEST(Usage, VerboseOutOfRangeAndTooManyThreads) {
  Sequential m({4});
  m.add(Dense(3));
  m.compile(OptimizerSpec::adam(), "mse");
  nn::FitOptions f = quiet();
  f.verbose = 7;
  EXPECT_NE(message_of<ValueError>([&] { m.fit(random_rows(8, 4, 9), random_rows(8, 3, 10), f); }).find("verbose"),
            std::string::npos);
  const int threads = num_threads();
  EXPECT_NE(message_of<ValueError>([] { set_num_threads(5000); }).find("at most"), std::string::npos);
  EXPECT_EQ(num_threads(), threads);
}

TEST(Usage, EmptyTrainingSetIsValueError) {
  Sequential m({4});
  m.add(Dense(3));
  m.compile(OptimizerSpec::adam(), "mse");
  const std::string msg =
      message_of<ValueError>([&] { m.fit(Tensor::zeros(Shape{0, 4}), Tensor::zeros(Shape{0, 3}), quiet()); });
  EXPECT_NE(msg.find("no rows"), std::string::npos) << msg;
}

TEST(Usage, MovedFromModelIsReleased) {
  Sequential a({4});
  a.add(std::make_shared<Dense>(3));  // a shared_ptr to a derived layer is accepted as is
  a.compile(OptimizerSpec::adam(), "mse");
  Sequential b = std::move(a);
  EXPECT_TRUE(a.released());
  EXPECT_NE(message_of<StateError>([&] { a.predict(random_rows(2, 4, 11)); }).find("freed"), std::string::npos);
  EXPECT_EQ(b.predict(random_rows(2, 4, 11)).shape(), (Shape{2, 3}));
}

// A moved-to model keeps every observable property, by move construction
// and by move assignment over a live model; the moved-from one is released,
// with an identity of its own, and still answers backend(). (The move once
// copied its fields one by one and forgot stop_training.)
TEST(Usage, AMovedToModelKeepsEveryProperty) {
  auto make = [](float lr) {
    manual_seed(9);
    Sequential m({4});
    m.add(Dense(3, "relu"));
    m.add(Dense(2));
    m.compile(OptimizerSpec::adam(lr), "mse", {"mae"});
    m.set_gradient_bucket_bytes(4096);
    m.fit(random_rows(8, 4, 3), random_rows(8, 2, 4), quiet());
    m.set_stop_training(true);
    m.set_initial_epoch(3);
    return m;
  };
  struct Observed {
    std::string name;
    bool compiled, stop_training;
    uint64_t structure_id;
    float lr;
    std::vector<std::string> losses;
    std::vector<float> loss_weights;
    size_t bucket_bytes, plans, arena;
    std::string backend;
    std::vector<std::vector<float>> weights;
    std::vector<float> prediction;
  };
  const Tensor x = random_rows(5, 4, 7), y = random_rows(5, 2, 8);
  auto observe = [&](nn::Model& m) {
    std::vector<float> prediction = m.predict(x).to_vector();  // first: it may make a plan
    Observed o{m.name(), m.compiled(), m.stop_training(), m.structure_id(), m.optimizer().learning_rate, {}, m.loss_weights(),
               m.gradient_bucket_bytes(), m.plan_count(), m.arena_bytes(), m.backend()->name(), {}, {}};
    for (const Loss& l : m.losses()) o.losses.push_back(l.name);
    for (const nn::Weight& w : m.weights()) o.weights.push_back(w.value.to_vector());
    o.prediction = std::move(prediction);
    return o;
  };
  auto expect_same = [](const Observed& a, const Observed& b) {
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.compiled, b.compiled);
    EXPECT_EQ(a.stop_training, b.stop_training);
    EXPECT_EQ(a.structure_id, b.structure_id);
    EXPECT_EQ(a.lr, b.lr);
    EXPECT_EQ(a.losses, b.losses);
    EXPECT_EQ(a.loss_weights, b.loss_weights);
    EXPECT_EQ(a.bucket_bytes, b.bucket_bytes);
    EXPECT_EQ(a.plans, b.plans);
    EXPECT_EQ(a.arena, b.arena);
    EXPECT_EQ(a.backend, b.backend);
    EXPECT_EQ(a.weights, b.weights);
    EXPECT_EQ(a.prediction, b.prediction);
  };
  auto expect_released = [](nn::Model& from, uint64_t moved_id, const std::string& backend) {
    EXPECT_TRUE(from.released());
    EXPECT_NE(from.structure_id(), moved_id);
    EXPECT_EQ(from.backend()->name(), backend);
    EXPECT_NE(message_of<StateError>([&] { from.predict(Tensor::zeros({1, 4})); }).find("freed"), std::string::npos);
  };
  for (bool assign : {false, true}) {
    SCOPED_TRACE(assign ? "move assignment" : "move construction");
    Sequential a = make(0.01f);
    const Observed before = observe(a);
    Sequential b = make(0.5f);
    if (assign) b = std::move(a);
    Sequential constructed = assign ? make(0.1f) : std::move(a);
    Sequential& moved = assign ? b : constructed;
    expect_same(observe(moved), before);
    EXPECT_EQ(moved.take_initial_epoch(), std::optional<int>(3));
    // The training state came along: one more step continues Adam's moments
    // exactly as the unmoved model would have.
    Sequential reference = make(0.01f);
    (void)reference.take_initial_epoch();
    moved.set_stop_training(false);
    reference.set_stop_training(false);
    moved.fit(x, y, quiet());
    reference.fit(x, y, quiet());
    for (size_t i = 0; i < reference.weights().size(); ++i)
      EXPECT_EQ(moved.weights()[i].value.to_vector(), reference.weights()[i].value.to_vector()) << i;
    expect_released(a, before.structure_id, before.backend);
  }
}

// The rest of what a model shows after a move, by move construction and by
// move assignment: its metrics, learning rate, gradient hooks (they still
// run), structure (names, summary), and what compile() recorded: a layer
// whose trainable flag changed after compile, or a model changed by add(),
// is refused by the moved-to model as by the original.
TEST(Usage, AMovedToModelKeepsItsHooksMetricsAndCompileRecord) {
  const Tensor x = random_rows(8, 4, 3), y = random_rows(8, 2, 4);
  auto make = [&](int* hook_calls) {
    manual_seed(9);
    Sequential m({4});
    m.add(Dense(3, "relu"));
    m.add(Dense(2));
    m.compile(OptimizerSpec::adam(0.01f), "mse", {"mae"});
    m.set_learning_rate(0.02);
    if (hook_calls) m.add_gradient_hook([hook_calls](std::span<NamedGradient>) { ++*hook_calls; });
    return m;
  };
  // Moves `from` into a new model (construction) or over a live one (assignment).
  auto moved = [&](bool assign, Sequential& from) {
    if (!assign) return Sequential(std::move(from));
    Sequential to = make(nullptr);
    to = std::move(from);
    return to;
  };
  for (bool assign : {false, true}) {
    SCOPED_TRACE(assign ? "move assignment" : "move construction");
    int calls = 0;
    Sequential a = make(&calls);
    const std::string summary = a.summary();
    const std::vector<std::string> inputs = a.input_names(), outputs = a.output_names();
    Sequential b = moved(assign, a);
    EXPECT_EQ(b.metrics(), std::vector<std::string>{"mae"});
    EXPECT_EQ(b.output_metrics(), std::vector<std::vector<std::string>>{{"mae"}});
    EXPECT_FLOAT_EQ(float(b.learning_rate()), 0.02f);  // held in float32
    EXPECT_EQ(b.summary(), summary);
    EXPECT_EQ(b.input_names(), inputs);
    EXPECT_EQ(b.output_names(), outputs);
    EXPECT_EQ(b.dtype_policy(), DTypePolicy::kFloat32);
    EXPECT_EQ(b.communicator(), nullptr);
    EXPECT_EQ(b.layers()[0]->name(), b.get_layer(b.layers()[0]->name())->name());
    EXPECT_EQ(b.evaluate(x, y, 8).count("mae"), 1u);
    b.fit(x, y, quiet());
    EXPECT_EQ(calls, 1);  // one batch: the hook came along and ran once
    EXPECT_NE(message_of<StateError>([&] { a.add_gradient_hook([](std::span<NamedGradient>) {}); }).find("freed"),
              std::string::npos);

    Sequential c = make(nullptr);
    c.layers()[0]->trainable = false;  // after compile: refused until compile() again
    Sequential d = moved(assign, c);
    EXPECT_TRUE(test_support::throws<StateError>([&] { d.fit(x, y, quiet()); },
                                                 {"made trainable = false after compile()", "call compile() again"}));

    Sequential e = make(nullptr);
    e.add(Dense(2));
    Sequential f = moved(assign, e);
    EXPECT_FALSE(f.compiled());
    EXPECT_TRUE(test_support::throws<StateError>([&] { f.fit(x, y, quiet()); },
                                                 {"the model changed after compile()", "call compile() again"}));
  }
}

TEST(Usage, UpdateTargetRefusesAMovedFromTarget) {
  manual_seed(6);
  Sequential m({4});
  m.add(Dense(2));
  m.compile(OptimizerSpec::adam(), "mse");
  nn::Trainer trainer(m, nn::TrainerOptions{8});
  nn::Model target = trainer.snapshot();
  trainer.update_target(target, 0.5f);
  { nn::Model elsewhere = std::move(target); }
  EXPECT_NE(message_of<StateError>([&] { trainer.update_target(target, 0.5f); }).find("freed"), std::string::npos);
}

TEST(Usage, StaleOptimizerContextThrowsInsteadOfCrashing) {
  Sequential m({3});
  m.add(Dense(4));
  m.add(nn::BatchNormalization());
  m.add(Dense(1));
  m.compile(OptimizerSpec::adam(), "mse");
  OptimizerContext& ctx = m.optimizer_context(4);
  const Tensor x = random_rows(4, 3, 12), y = random_rows(4, 1, 13);
  ctx.step(x, y);
  m.freeze_bn_stats();
  EXPECT_NE(message_of<StateError>([&] { ctx.step(x, y); }).find("freeze_bn_stats"), std::string::npos);
  OptimizerContext& fresh = m.optimizer_context(4);
  EXPECT_NO_THROW(fresh.step(x, y));
  m.compile(OptimizerSpec::adam(), "mse");
  EXPECT_NE(message_of<StateError>([&] { fresh.step(x, y); }).find("compile"), std::string::npos);
}

TEST(Usage, CloneKeepsTiedWeightsTied) {
  manual_seed(7);
  auto shared = std::make_shared<Dense>(3, "tanh");
  Sequential s({3});
  s.add(shared);
  s.add(shared);
  s.add(Dense(1));
  s.compile(OptimizerSpec::sgd(0.1f), "mse");
  EXPECT_EQ(s.weights().size(), 4u);  // the shared layer's weights once, then the last Dense
  Sequential c = s.clone();
  ASSERT_EQ(c.layers()[0], c.layers()[1]);
  EXPECT_NE(c.layers()[0], s.layers()[0]);
  // Trained the same way, the clone and the original stay equal.
  const Tensor x = random_rows(8, 3, 14), y = random_rows(8, 1, 15);
  nn::FitOptions f = quiet(8);
  f.epochs = 3;
  f.shuffle = false;
  s.fit(x, y, f);
  c.fit(x, y, f);
  EXPECT_EQ(s.predict(x).to_vector(), c.predict(x).to_vector());
}

// Keras splits sample weights with the rows: with y = [1, 2, 3, 4], a model
// that predicts 0 and weights [2, 0, 1, 0], the last half validates to
// (1 * 3^2 + 0 * 4^2) / 2 = 4.5 (the loss divides by the row count).
TEST(Usage, ValidationKeepsTheSampleWeights) {
  Sequential m({1});
  m.add(Dense(1, "linear", false));
  m.weights()[0].value.fill(0.0f);
  m.compile(OptimizerSpec::sgd(0.1f), "mse");
  const Tensor x = Tensor::zeros(Shape{4, 1});  // zero inputs: the prediction stays 0 while training
  const Tensor y = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, Shape{4, 1});
  nn::FitOptions f = quiet(2);
  f.shuffle = false;
  f.validation_split = 0.5;
  f.sample_weight = Tensor::from_vector(std::vector<float>{2, 0, 1, 0}, Shape{4});
  nn::History h = m.fit(x, y, f);
  EXPECT_DOUBLE_EQ(h["loss"][0], (2.0 * 1 + 0.0 * 4) / 2);
  EXPECT_DOUBLE_EQ(h["val_loss"][0], 4.5);

  // The same rows as validation_data, with their weights given apart.
  nn::FitOptions g = quiet(2);
  g.validation_data = std::make_pair(x.rows(2, 4), y.rows(2, 4));
  g.validation_sample_weight = Tensor::from_vector(std::vector<float>{1, 0}, Shape{2, 1});
  EXPECT_DOUBLE_EQ(m.fit(x.rows(0, 2), y.rows(0, 2), g)["val_loss"][0], 4.5);
  // And evaluate takes them as Keras' evaluate does.
  EXPECT_DOUBLE_EQ(m.evaluate(x.rows(2, 4), y.rows(2, 4), 32, g.validation_sample_weight).at("loss"), 4.5);
  EXPECT_DOUBLE_EQ(m.evaluate(x.rows(2, 4), y.rows(2, 4)).at("loss"), (9.0 + 16.0) / 2);

  nn::FitOptions bad = quiet(2);
  bad.validation_sample_weight = Tensor::full(Shape{2}, 1.0f);
  EXPECT_NE(message_of<ValueError>([&] { m.fit(x, y, bad); }).find("validation_data"), std::string::npos);
  bad.validation_data = std::make_pair(x.rows(2, 4), y.rows(2, 4));
  bad.validation_sample_weight = Tensor::full(Shape{3}, 1.0f);
  EXPECT_NE(message_of<ShapeError>([&] { m.fit(x, y, bad); }).find("validation_sample_weight"), std::string::npos);
}

// class_weight (Keras' fit argument): the same training as sample weights
// made by hand from each row's class (ids or one-hot argmax), times
// sample_weight; validation rows are not class-weighted; refused for several
// outputs and negative weights.
TEST(Usage, ClassWeightIsPerRowWeightByClass) {
  std::mt19937 rng(12);
  const Tensor x = test_support::uniform({10, 3}, rng, -1, 1);
  std::vector<int32_t> ids{0, 1, 2, 1, 0, 2, 2, 1, 0, 1};
  const Tensor y = Tensor::from_vector(std::span<const int32_t>(ids), {10});
  std::vector<float> onehot(30, 0.0f);
  for (size_t i = 0; i < 10; ++i) onehot[i * 3 + size_t(ids[i])] = 1.0f;
  const Tensor y1 = Tensor::from_vector(onehot, {10, 3});
  const std::vector<float> sw{1, 2, 1, 1, 3, 1, 1, 1, 0.5f, 1};
  const std::map<int, float> cw{{0, 2.0f}, {2, 0.25f}};  // class 1 absent: weight 1
  std::vector<float> by_hand;
  for (size_t i = 0; i < 10; ++i) by_hand.push_back(sw[i] * (ids[i] == 0 ? 2.0f : ids[i] == 2 ? 0.25f : 1.0f));
  auto train = [&](const Tensor& labels, const char* loss, bool class_weighted) {
    manual_seed(4);
    nn::Sequential m({3});
    m.add(nn::Dense(3, "softmax"));
    m.compile(OptimizerSpec::sgd(0.5f), loss, {"accuracy"});
    nn::FitOptions o;
    o.verbose = 0;
    o.epochs = 2;
    o.batch_size = 4;
    o.shuffle = false;
    o.validation_split = 0.2;
    if (class_weighted) {
      o.class_weight = cw;
      o.sample_weight = Tensor::from_vector(sw, {10});
    } else {
      std::vector<float> w = by_hand;
      for (size_t i = 8; i < 10; ++i) w[i] = sw[i];  // validation rows keep their sample weight only
      o.sample_weight = Tensor::from_vector(w, {10});
    }
    const nn::History h = m.fit(x, labels, o);
    return std::make_pair(m.get_weights()[0].to_vector(), h["val_loss"]);
  };
  const auto ref = train(y, "sparse_categorical_crossentropy", false);
  EXPECT_EQ(train(y, "sparse_categorical_crossentropy", true), ref);
  const auto ref1 = train(y1, "categorical_crossentropy", false);
  EXPECT_EQ(train(y1, "categorical_crossentropy", true), ref1);

  manual_seed(4);
  const nn::SymbolicTensor in = nn::Input({3});
  nn::Model two({in}, {nn::Dense(3, "softmax")(in), nn::Dense(3, "softmax")(in)});
  two.compile(OptimizerSpec::sgd(0.5f), "sparse_categorical_crossentropy");
  nn::FitOptions o;
  o.verbose = 0;
  o.class_weight = cw;
  EXPECT_TRUE(test_support::throws<ValueError>([&] { two.fit(std::vector<Tensor>{x}, std::vector<Tensor>{y, y}, o); },
                                               {"class_weight", "single output", "2"}));
  nn::Sequential one({3});
  one.add(nn::Dense(3, "softmax"));
  one.compile(OptimizerSpec::sgd(0.5f), "sparse_categorical_crossentropy");
  o.class_weight = {{1, -1.0f}};
  EXPECT_TRUE(test_support::throws<ValueError>([&] { one.fit(x, y, o); }, {"class_weight of class 1", ">= 0", "-1"}));
}
