// A model's and a Trainer's training state as a public value
// (nn/training_state.h): taken, kept while training goes on, and put back
// with the weights, training continues bit for bit as it did from the moment
// it was taken; states that do not fit are refused before anything changes.
#include <gtest/gtest.h>

#include "test_files.h"
#include "test_support.h"

#include <random>
#include <vector>

#include "tensorgrad/tensorgrad.h"

using namespace tensorgrad;
using namespace tensorgrad::nn;
using test_support::bit_equal;
using test_support::throws;

namespace {

// Dropout (the dropout counter), Adam (moments and iterations), shuffled
// batches (the random stream): every part of the state matters. The layers
// are named, so that the slots of two models built alike match by name.
Sequential dropout_model(int64_t width = 8) {
  manual_seed(11);
  Sequential model(Shape{3});
  auto named = [](auto layer, const char* name) {
    layer.set_name(name);
    return layer;
  };
  model.add(named(Dense(width, "relu"), "hidden"));
  model.add(named(Dropout(0.25f), "dropout"));
  model.add(named(Dense(1), "out"));
  model.compile(OptimizerSpec::adam(0.01f), "mse");
  return model;
}

struct Data {
  Tensor x, y;
};

Data make_data(int64_t rows) {
  std::mt19937 gen(5);
  const Tensor x = test_support::uniform(Shape{rows, 3}, gen, -1.0f, 1.0f);
  std::vector<float> y(static_cast<size_t>(rows));
  const std::vector<float> xs = x.to_vector();
  for (int64_t r = 0; r < rows; ++r) y[size_t(r)] = xs[size_t(3 * r)] - 2.0f * xs[size_t(3 * r + 1)] + 0.5f;
  return {x, Tensor::from_vector(y, {rows, 1})};
}

::testing::AssertionResult same_weights(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << a.size() << " vs " << b.size() << " weights";
  for (size_t i = 0; i < a.size(); ++i)
    if (!bit_equal(a[i], b[i])) return ::testing::AssertionFailure() << "weight " << i << " differs";
  return ::testing::AssertionSuccess();
}

std::vector<Tensor> values_of(const std::vector<Weight>& weights) {
  std::vector<Tensor> out;
  for (const Weight& w : weights) out.push_back(w.value.clone());
  return out;
}

}  // namespace

TEST(TrainingState, ModelRoundTripContinuesTrainingBitForBit) {
  test_support::ThreadsGuard threads;
  set_num_threads(2);
  const Data d = make_data(40);
  Sequential model = dropout_model();
  FitOptions options;
  options.epochs = 2;
  options.batch_size = 8;
  options.nbatch_logical = 16;
  options.verbose = 0;
  model.fit(d.x, d.y, options);
  const std::vector<Tensor> weights = model.get_weights();
  const TrainingState state = model.training_state();
  EXPECT_TRUE(state.compiled);
  EXPECT_EQ(state.steps, 0);  // a Model's state counts no steps
  EXPECT_FALSE(state.slots.empty());

  const History first = model.fit(d.x, d.y, options);
  const std::vector<Tensor> first_weights = model.get_weights();
  // The value is a copy: training on has not changed it.
  EXPECT_FALSE(bit_equal(state.iterations, model.training_state().iterations));

  model.set_weights(weights);
  model.set_training_state(state);
  const History again = model.fit(d.x, d.y, options);
  EXPECT_EQ(again.history, first.history);
  EXPECT_TRUE(same_weights(model.get_weights(), first_weights));

  // Into another model built and compiled alike.
  Sequential other = dropout_model();
  other.set_weights(weights);
  other.set_training_state(state);
  const History elsewhere = other.fit(d.x, d.y, options);
  EXPECT_EQ(elsewhere.history, first.history);
  EXPECT_TRUE(same_weights(other.get_weights(), first_weights));
}

TEST(TrainingState, TrainerRoundTripContinuesStepsBitForBit) {
  test_support::ThreadsGuard threads;
  set_num_threads(2);
  const Data d = make_data(8);
  Sequential model = dropout_model();
  Trainer trainer(model, {.batch_size = 8, .nbatch_logical = 16});
  for (int i = 0; i < 3; ++i) trainer.step(d.x, d.y);  // the third leaves a period open
  const std::vector<Tensor> weights = values_of(trainer.weights());
  const TrainingState state = trainer.training_state();
  EXPECT_EQ(state.steps, 3);
  EXPECT_EQ(state.micro_step, 1);
  EXPECT_EQ(state.accumulation_period, 2);

  std::vector<float> first;
  for (int i = 0; i < 4; ++i) first.push_back(trainer.step(d.x, d.y));
  const std::vector<Tensor> first_weights = values_of(trainer.weights());

  // A fresh trainer of the same model and options, given the weights and the state.
  Trainer resumed(model, {.batch_size = 8, .nbatch_logical = 16});
  const std::vector<Weight> views = resumed.weights();
  for (size_t i = 0; i < views.size(); ++i) Tensor(views[i].value).copy_from(weights[i]);
  resumed.set_training_state(state);
  EXPECT_EQ(resumed.n_steps(), 3);
  std::vector<float> again;
  for (int i = 0; i < 4; ++i) again.push_back(resumed.step(d.x, d.y));
  EXPECT_EQ(again, first);
  EXPECT_EQ(resumed.n_steps(), 7);
  EXPECT_TRUE(same_weights(values_of(resumed.weights()), first_weights));
  EXPECT_EQ(resumed.training_model().learning_rate(), trainer.learning_rate());

  // An open period of another length is refused, and nothing changes.
  Trainer longer(model, {.batch_size = 8, .nbatch_logical = 24});
  const TrainingState before = longer.training_state();
  EXPECT_TRUE(throws<ValueError>([&] { longer.set_training_state(state); },
                                 {"1 micro-steps into an accumulation period of 2 batches", "period is 3 batches",
                                  "nbatch_logical"}));
  EXPECT_EQ(longer.n_steps(), 0);
  EXPECT_TRUE(bit_equal(longer.training_state().hyper, before.hyper));
  EXPECT_EQ(longer.training_state().micro_step, 0);
}

TEST(TrainingState, StatesThatDoNotFitAreRefusedBeforeAnythingChanges) {
  Sequential model = dropout_model();
  const TrainingState state = model.training_state();

  Sequential uncompiled(Shape{3});
  uncompiled.add(Dense(8, "relu"));
  EXPECT_TRUE(throws<StateError>([&] { uncompiled.set_training_state(state); }, {"not compiled", "compile"}));
  TrainingState stream_only;
  stream_only.random_stream.seed(42);
  uncompiled.set_training_state(stream_only);  // a state without an optimizer part: the stream only
  EXPECT_EQ(uncompiled.random_stream(), stream_only.random_stream);

  // A model whose first layer is wider: its slots do not fit.
  Sequential wider = dropout_model(9);
  const Data d = make_data(8);
  wider.fit(d.x, d.y, {.batch_size = 8, .verbose = 0});
  model.fit(d.x, d.y, {.batch_size = 8, .verbose = 0});
  const TrainingState trained = model.training_state();
  const TrainingState wider_before = wider.training_state();
  EXPECT_TRUE(throws<ValueError>([&] { wider.set_training_state(trained); },
                                 {"optimizer slot", "another optimizer or model"}));
  const TrainingState wider_after = wider.training_state();
  EXPECT_TRUE(bit_equal(wider_after.iterations, wider_before.iterations));
  ASSERT_EQ(wider_after.slots.size(), wider_before.slots.size());
  for (size_t i = 0; i < wider_after.slots.size(); ++i)
    EXPECT_TRUE(bit_equal(wider_after.slots[i].m, wider_before.slots[i].m)) << wider_after.slots[i].weight;

  TrainingState negative = trained;
  negative.micro_step = -1;
  EXPECT_TRUE(throws<ValueError>([&] { model.set_training_state(negative); }, {"micro_step", "-1"}));
  TrainingState no_hyper = trained;
  no_hyper.hyper = Tensor();
  EXPECT_TRUE(throws<ValueError>([&] { model.set_training_state(no_hyper); }, {"hyper-parameters", "undefined"}));

  model.free();
  EXPECT_TRUE(throws<StateError>([&] { model.training_state(); }, {"training_state"}));
}

TEST(TrainingState, SequentialTakesOverOnlyAChainOfLayers) {
  manual_seed(2);
  const SymbolicTensor in = Input(Shape{4});
  const SymbolicTensor h = Dense(3)(in);
  Model chain(in, Dense(2)(h));
  const std::vector<Tensor> weights = chain.get_weights();
  Sequential sequential(std::move(chain));
  EXPECT_EQ(sequential.layers().size(), 2u);
  EXPECT_TRUE(same_weights(sequential.get_weights(), weights));

  const SymbolicTensor a = Input(Shape{4}), b = Input(Shape{4});
  Model two_inputs({a, b}, {Add()({a, b})});
  EXPECT_TRUE(throws<ValueError>([&] { Sequential s(std::move(two_inputs)); }, {"2 inputs", "Keep it as a Model"}));
  EXPECT_EQ(two_inputs.inputs().size(), 2u);  // left as it was

  const SymbolicTensor x = Input(Shape{4});
  const SymbolicTensor left = Dense(3)(x), right = Dense(3)(x);
  Model branches(x, Add()({left, right}));
  EXPECT_TRUE(throws<ValueError>([&] { Sequential s(std::move(branches)); }, {"not a chain"}));
}
