// FitOptions::validation_batch_size and GeneratorFitOptions::
// validation_batch_size (Keras' argument): validation batches of their own
// size, larger than the training batch too, planned apart from training;
// left out, validation runs at batch_size as before.
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <random>

#include "tensorgrad/tensorgrad.h"
#include "test_support.h"

using namespace tensorgrad;
using namespace tensorgrad::nn;
using test_support::throws;

namespace {

// y = x0 - 2 x1 + 0.5 + noise on `rows` rows; Dense(8, relu) -> Dense(1), Adam.
struct Data {
  Tensor x, y;
  explicit Data(int64_t rows, unsigned seed) {
    std::mt19937 rng(seed);
    x = test_support::uniform(Shape{rows, 2}, rng, -1.0f, 1.0f);
    y = Tensor::zeros(Shape{rows, 1});
    for (int64_t i = 0; i < rows; ++i)
      y.data<float>()[i] = x.data<float>()[2 * i] - 2 * x.data<float>()[2 * i + 1] + 0.5f + 0.01f * float(i % 3);
  }
};

Sequential small_model() {
  manual_seed(6);
  Sequential m({2});
  m.add(Dense(8, "relu"));
  m.add(Dense(1));
  m.compile(OptimizerSpec::adam(0.01f), "mse", {"mae"});
  return m;
}

FitOptions quiet(int64_t batch_size) {
  FitOptions o;
  o.epochs = 2;
  o.batch_size = batch_size;
  o.shuffle = false;
  o.verbose = 0;
  return o;
}

// Batches of `rows` rows of `d`, restarting after the last.
Generator batches_of(const Data& d, int64_t rows) {
  auto next = std::make_shared<int64_t>(0);
  return [&d, rows, next]() -> std::optional<Batch> {
    const int64_t n = d.x.shape()[0];
    if (*next >= n) {
      *next = 0;
      return std::nullopt;
    }
    const int64_t begin = *next, end = std::min(n, begin + rows);
    *next = end;
    return Batch{{d.x.rows(begin, end)}, {d.y.rows(begin, end)}, {}};
  };
}

}  // namespace

// Arrays: validation batches of 20 and of 7 rows (the last short) while
// training at 4; each epoch's val_loss and val_mae are evaluate's at that
// batch on the epoch's final weights. Without the option, batch_size as
// before.
TEST(ValidationBatchSize, ArraysValidateAtTheirOwnBatchSize) {
  const Data train(24, 1), held(20, 2);
  for (std::optional<int64_t> vbs : {std::optional<int64_t>(), std::optional<int64_t>(20), std::optional<int64_t>(7)}) {
    SCOPED_TRACE(vbs ? *vbs : 0);
    Sequential m = small_model();
    FitOptions o = quiet(4);
    o.epochs = 1;
    o.validation_data = std::make_pair(held.x, held.y);
    o.validation_batch_size = vbs;
    const History h = m.fit(train.x, train.y, o);
    const auto want = m.evaluate(held.x, held.y, vbs.value_or(4));
    ASSERT_EQ(h["val_loss"].size(), 1u);
    EXPECT_DOUBLE_EQ(h["val_loss"][0], want.at("loss"));
    EXPECT_DOUBLE_EQ(h["val_mae"][0], want.at("mae"));
  }
  // validation_split and validation_x too.
  Sequential m = small_model();
  FitOptions o = quiet(4);
  o.epochs = 1;
  o.validation_split = 0.5;
  o.validation_batch_size = 12;
  const History h = m.fit(train.x, train.y, o);
  EXPECT_DOUBLE_EQ(h["val_loss"][0], m.evaluate(train.x.rows(12, 24), train.y.rows(12, 24), 12).at("loss"));
}

// Generators: validation batches of 10 rows while training at 4 are
// refused without the option (the hint names it, not the training batch)
// and validate with it, as evaluate does.
TEST(ValidationBatchSize, AGeneratorsLargerValidationBatches) {
  const Data train(16, 3), held(20, 4);
  GeneratorFitOptions o;
  o.epochs = 2;
  o.batch_size = 4;
  o.prefetch = 0;
  o.verbose = 0;
  o.validation_generator = batches_of(held, 10);
  {
    Sequential m = small_model();
    EXPECT_TRUE(throws<ShapeError>([&] { m.fit(batches_of(train, 4), o); },
                                   {"validation batch 1 of epoch 1", "10 rows", "more than validation_batch_size 4",
                                    "raise validation_batch_size"}));
  }
  Sequential m = small_model();
  o.validation_batch_size = 10;
  const History h = m.fit(batches_of(train, 4), o);
  ASSERT_EQ(h["val_loss"].size(), 2u);
  EXPECT_DOUBLE_EQ(h["val_loss"][1], m.evaluate(held.x, held.y, 10).at("loss"));
  EXPECT_DOUBLE_EQ(h["val_mae"][1], m.evaluate(held.x, held.y, 10).at("mae"));
}

TEST(ValidationBatchSize, BadValuesAreRefused) {
  const Data train(8, 5);
  Sequential m = small_model();
  FitOptions o = quiet(4);
  o.validation_split = 0.25;
  o.validation_batch_size = 0;
  EXPECT_TRUE(throws<ValueError>([&] { m.fit(train.x, train.y, o); }, {"validation_batch_size", "at least 1", "0"}));
  o.validation_split = 0.0;
  o.validation_batch_size = 8;
  EXPECT_TRUE(throws<ValueError>([&] { m.fit(train.x, train.y, o); }, {"validation_batch_size", "without validation"}));
  GeneratorFitOptions g;
  g.verbose = 0;
  g.validation_batch_size = 8;
  EXPECT_TRUE(throws<ValueError>([&] { m.fit(batches_of(train, 4), g); },
                                 {"validation_batch_size", "without a validation_generator"}));
  g.validation_generator = batches_of(train, 4);
  g.validation_batch_size = -1;
  EXPECT_TRUE(throws<ValueError>([&] { m.fit(batches_of(train, 4), g); }, {"validation_batch_size", "-1"}));
}
