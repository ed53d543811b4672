// Token ids through every path that runs a model (defects issue, items 1 and
// 5): int32 ids are bound in place, float32 ids holding whole numbers give the
// same result, and an id outside a gather's table is an IndexError raised
// before any update runs.
#include <gtest/gtest.h>

#include "test_support.h"

#include <vector>

#include "tensorgrad/tensorgrad.h"

using namespace tensorgrad;
using nn::Dense;
using nn::Embedding;
using nn::Flatten;
using nn::Sequential;
using test_support::throws;

namespace {
// Embedding(4, 1) with table [0, 0.5, 0, 0], Flatten, Dense(1, linear, no
// bias) with kernel [1, 2, 3]; SGD lr 0.01, mse. On ids [[1, 1, 2]] and target
// [[0]]: prediction 0.5 * 1 + 0.5 * 2 + 0 * 3 = 1.5, loss 1.5^2 = 2.25;
// dloss/dpred = 3, so table row 1 moves by -0.01 * 3 * (1 + 2) = -0.09 and row
// 2 by -0.01 * 3 * 3 = -0.09: table [0, 0.41, -0.09, 0]; the kernel moves by
// -0.01 * 3 * [0.5, 0.5, 0]: [0.985, 1.985, 3]. The next prediction on the
// same ids is 0.41 * 0.985 + 0.41 * 1.985 - 0.09 * 3 = 0.9477.
Sequential lookup_model() {
  Sequential m({3});
  m.add(Embedding(4, 1));
  m.add(Flatten());
  m.add(Dense(1, "linear", false));
  m.weights()[0].value.copy_from(Tensor::from_vector(std::vector<float>{0, 0.5f, 0, 0}, Shape{4, 1}));
  m.weights()[1].value.copy_from(Tensor::from_vector(std::vector<float>{1, 2, 3}, Shape{3, 1}));
  m.compile(OptimizerSpec::sgd(0.01f), "mse");
  return m;
}

Tensor ids(bool as_int32) {
  return as_int32 ? Tensor::from_vector(std::vector<int32_t>{1, 1, 2}, Shape{1, 3})
                  : Tensor::from_vector(std::vector<float>{1, 1, 2}, Shape{1, 3});
}

const std::vector<float> kTrainedTable{0.0f, 0.41f, -0.09f, 0.0f};
constexpr float kNextPrediction = 0.9477f;

void expect_table(const std::vector<float>& table) {
  ASSERT_EQ(table.size(), kTrainedTable.size());
  for (size_t i = 0; i < table.size(); ++i) EXPECT_NEAR(table[i], kTrainedTable[i], 1e-6f) << "row " << i;
}

nn::TrainerOptions one_row() {
  nn::TrainerOptions o;
  o.batch_size = 1;
  return o;
}
}  // namespace

TEST(TokenIds, TrainerStepAndEvalReadInt32AndFloatIdsAlike) {
  const Tensor target = Tensor::zeros(Shape{1, 1});
  for (bool as_int32 : {true, false}) {
    SCOPED_TRACE(as_int32 ? "int32 ids" : "float32 ids");
    nn::Trainer tr(lookup_model(), one_row());
    EXPECT_FLOAT_EQ(tr.eval(ids(as_int32), target), 2.25f);
    EXPECT_FLOAT_EQ(tr.step(ids(as_int32), target), 2.25f);
    expect_table(tr.weights()[0].value.to_vector());
    // The ids of the previous step are gone; a new tensor is read afresh.
    EXPECT_NEAR(tr.eval(ids(as_int32), target), kNextPrediction * kNextPrediction, 1e-5f);
  }
}

TEST(TokenIds, OptimizerContextStepAndFitGiveTheSameUpdate) {
  const Tensor target = Tensor::zeros(Shape{1, 1});
  for (bool as_int32 : {true, false}) {
    SCOPED_TRACE(as_int32 ? "int32 ids" : "float32 ids");
    Sequential m = lookup_model();
    EXPECT_FLOAT_EQ(m.optimizer_context(1).step(ids(as_int32), target).loss, 2.25f);
    expect_table(m.weights()[0].value.to_vector());

    Sequential f = lookup_model();
    nn::FitOptions o;
    o.batch_size = 1;
    o.verbose = 0;
    EXPECT_FLOAT_EQ(float(f.fit(ids(as_int32), target, o)["loss"][0]), 2.25f);
    expect_table(f.weights()[0].value.to_vector());
    EXPECT_NEAR(f.predict(ids(as_int32)).item(), kNextPrediction, 1e-6f);
  }
}

TEST(TokenIds, OutOfVocabularyInt32IdIsIndexErrorAndNothingTrains) {
  nn::Trainer tr(lookup_model(), one_row());
  const Tensor bad = Tensor::from_vector(std::vector<int32_t>{1, 4, 2}, Shape{1, 3});
  EXPECT_TRUE(throws<IndexError>([&] { tr.step(bad, Tensor::zeros(Shape{1, 1})); }, {"token id 4", "[0, 4)"}));
  EXPECT_EQ(tr.weights()[0].value.to_vector(), (std::vector<float>{0, 0.5f, 0, 0}));
  EXPECT_EQ(tr.n_steps(), 0);
}

// Through the graph API, where no layer checks the ids first: the gather
// kernel does, and the SGD update after it in the same run never happens.
TEST(TokenIds, GatherRefusesAnIdOutsideTheTableBeforeTheUpdateRuns) {
  Tensor table = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}, Shape{4, 2});
  Tensor hyper = Tensor::zeros(Shape{kHyperSize});
  hyper.data<float>()[kLr] = 0.5f;
  Graph g;
  const Value t = g.parameter(table, "table", true);
  const Value idx = g.input("ids", Shape{3}, DType::Int32);
  const Value loss = g.apply(OpKind::Sum, {g.apply(OpKind::Gather, {t, idx})});
  const Value grad = g.gradients(loss, std::vector<Value>{t})[0];
  g.apply(OpKind::SgdUpdate, {t, grad, g.state(hyper, "hyper")});
  Executable exe(std::move(g), {loss});
  for (int32_t bad : {4, -1, 1 << 30}) {
    const Tensor id = Tensor::from_vector(std::vector<int32_t>{0, bad, 1}, Shape{3});
    exe.bind(idx, id);
    EXPECT_TRUE(throws<IndexError>([&] { exe.run(); },
                                   {"id " + std::to_string(bad), "position 1", "table of 4 rows"}));
    EXPECT_EQ(table.to_vector(), (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));
  }
  // Good ids run, and the update lands: rows 0 and 1 each move by -0.5.
  const Tensor good = Tensor::from_vector(std::vector<int32_t>{0, 3, 1}, Shape{3});
  exe.bind(idx, good);
  exe.run();
  EXPECT_FLOAT_EQ(exe.scalar(loss), 1 + 2 + 7 + 8 + 3 + 4);
  EXPECT_EQ(table.to_vector(), (std::vector<float>{0.5f, 1.5f, 2.5f, 3.5f, 5, 6, 6.5f, 7.5f}));
}
