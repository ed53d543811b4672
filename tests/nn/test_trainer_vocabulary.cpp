// The Trainer names what the Model names alike (learning_rate,
// set_learning_rate, released); its earlier names (lr, set_lr, freed) stay
// as deprecated aliases that do exactly what the new ones do.
#include <gtest/gtest.h>

#include "test_support.h"

#include <vector>

#include "tensorgrad/tensorgrad.h"

using namespace tensorgrad;
using namespace tensorgrad::nn;
using test_support::throws;

namespace {

Sequential small_model() {
  manual_seed(3);
  Sequential model(Shape{2});
  model.add(Dense(3, "relu"));
  model.add(Dense(1));
  model.compile(OptimizerSpec::adam(0.01f), "mse");
  return model;
}

}  // namespace

TEST(TrainerVocabulary, LearningRateAndReleasedAsTheModelNamesThem) {
  Sequential model = small_model();
  Trainer trainer(model, {.batch_size = 4});
  EXPECT_EQ(trainer.learning_rate(), model.learning_rate());
  trainer.set_learning_rate(0.125);
  model.set_learning_rate(0.125);
  EXPECT_EQ(trainer.learning_rate(), 0.125);
  EXPECT_EQ(trainer.learning_rate(), model.learning_rate());
  // Stored in float32 as the model stores it: the same value read back.
  trainer.set_learning_rate(0.1);
  model.set_learning_rate(0.1);
  EXPECT_EQ(trainer.learning_rate(), model.learning_rate());
  EXPECT_EQ(trainer.learning_rate(), double(0.1f));
  EXPECT_TRUE(throws<ValueError>([&] { trainer.set_learning_rate(-1.0); }, {"learning rate", "positive"}));
  EXPECT_FALSE(trainer.released());
  trainer.free();
  EXPECT_TRUE(trainer.released());
  EXPECT_TRUE(throws<StateError>([&] { trainer.learning_rate(); }, {"learning_rate", "freed"}));
  model.free();
  EXPECT_TRUE(model.released());
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
TEST(TrainerVocabulary, DeprecatedAliasesDoWhatTheNewNamesDo) {
  Sequential model = small_model();
  Trainer aliased(model, {.batch_size = 4}), renamed(model, {.batch_size = 4});
  aliased.set_lr(0.03f);
  renamed.set_learning_rate(0.03f);
  EXPECT_EQ(aliased.lr(), 0.03f);
  EXPECT_EQ(aliased.learning_rate(), renamed.learning_rate());
  const Tensor x = Tensor::from_vector(std::vector<float>{0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f}, {4, 2});
  const Tensor y = Tensor::from_vector(std::vector<float>{0.3f, 0.7f, 1.1f, 1.5f}, {4, 1});
  for (int i = 0; i < 3; ++i) EXPECT_EQ(aliased.step(x, y), renamed.step(x, y)) << "step " << i;
  EXPECT_TRUE(throws<ValueError>([&] { aliased.set_lr(0.0f); }, {"learning rate"}));
  EXPECT_FALSE(aliased.freed());
  aliased.free();
  EXPECT_TRUE(aliased.freed());
  EXPECT_TRUE(aliased.released());
}
#pragma GCC diagnostic pop
