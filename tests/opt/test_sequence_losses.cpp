// Cross-entropy on sequence outputs {batch, steps, classes} (Keras: every
// position is a sample of the loss, averaged over all of them; PyTorch:
// CrossEntropyLoss on the logits reshaped to {batch * steps, classes}):
// the loss and accuracy against their definitions on predict's outputs,
// sparse and one-hot agreeing, and the targets' errors.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <span>
#include <vector>

#include "tensorgrad/tensorgrad.h"
#include "test_support.h"

using namespace tensorgrad;

namespace {

constexpr int64_t kB = 3, kT = 5, kV = 7;

// ids {T} -> Embedding -> Dense(V) per position: logits {T, V}.
nn::Model token_model(const Loss& loss) {
  auto ids = nn::Input({kT}, DType::Int32, "ids");
  nn::Model m(ids, nn::Dense(kV)(nn::Embedding(kV, 4)(ids)), "per_token");
  m.compile(OptimizerSpec::adamw(1e-2f), loss, {"accuracy"});
  return m;
}

Tensor ids_of(std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> d(0, kV - 1);
  std::vector<int32_t> v(size_t(kB * kT));
  for (int32_t& i : v) i = d(rng);
  return Tensor::from_vector(std::span<const int32_t>(v), Shape{kB, kT});
}

// The mean over every position of -log softmax(logits)[y], and the share of
// positions whose largest logit is y's.
std::pair<double, double> reference(const Tensor& logits, const Tensor& y) {
  double loss = 0.0, correct = 0.0;
  for (int64_t r = 0; r < kB * kT; ++r) {
    const float* z = logits.data<float>() + r * kV;
    double mx = z[0], sum = 0.0;
    int64_t arg = 0;
    for (int64_t c = 1; c < kV; ++c)
      if (z[c] > mx) mx = z[c], arg = c;
    for (int64_t c = 0; c < kV; ++c) sum += std::exp(double(z[c]) - mx);
    const int32_t id = y.data<int32_t>()[r];
    loss += mx + std::log(sum) - double(z[id]);
    correct += arg == id ? 1.0 : 0.0;
  }
  return {loss / double(kB * kT), correct / double(kB * kT)};
}

}  // namespace

TEST(SequenceLosses, SparseCrossEntropyAveragesOverEveryPosition) {
  std::mt19937 rng(4);
  nn::Model m = token_model("sparse_categorical_crossentropy");
  const Tensor x = ids_of(rng), y = ids_of(rng);
  for (int step = 0; step < 3; ++step) {  // after updates too: the gradient reaches every position's row
    const auto [want_loss, want_acc] = reference(m.predict(x), y);
    const std::map<std::string, double> got = m.evaluate(x, y, kB);
    EXPECT_NEAR(got.at("loss"), want_loss, 1e-5 * want_loss) << "step " << step;
    EXPECT_NEAR(got.at("accuracy"), want_acc, 1e-6) << "step " << step;
    m.fit(x, y, {.epochs = 1, .batch_size = kB, .verbose = 0});
  }
  // Float ids holding whole numbers read as the int32 ones.
  std::vector<float> fy(y.data<int32_t>(), y.data<int32_t>() + y.numel());
  const Tensor yf = Tensor::from_vector(std::span<const float>(fy), Shape{kB, kT});
  EXPECT_EQ(m.evaluate(x, yf, kB).at("loss"), m.evaluate(x, y, kB).at("loss"));
}

TEST(SequenceLosses, OneHotAndSparseAgree) {
  std::mt19937 rng(9);
  nn::Model sparse = token_model("sparse_categorical_crossentropy");
  nn::Model dense = token_model("categorical_crossentropy");
  dense.set_weights(sparse.get_weights());
  const Tensor x = ids_of(rng), y = ids_of(rng);
  Tensor one_hot = Tensor::zeros(Shape{kB, kT, kV});
  for (int64_t r = 0; r < kB * kT; ++r) one_hot.data<float>()[r * kV + y.data<int32_t>()[r]] = 1.0f;
  EXPECT_NEAR(dense.evaluate(x, one_hot, kB).at("loss"), sparse.evaluate(x, y, kB).at("loss"), 1e-6);
  nn::Trainer a(sparse, {.batch_size = kB}), b(dense, {.batch_size = kB});
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(a.step(x, y), b.step(x, one_hot), 1e-5) << "step " << i;
}

TEST(SequenceLosses, TargetsOfTheWrongShapeOrRangeAreTypedErrors) {
  std::mt19937 rng(1);
  nn::Model m = token_model("sparse_categorical_crossentropy");
  const Tensor x = ids_of(rng);
  EXPECT_TRUE(test_support::throws<ShapeError>([&] { m.evaluate(x, Tensor::zeros(Shape{kB}, DType::Int32), kB); },
                                               {"one class id per position", "{3, 5}", "got {3}"}));
  Tensor y = ids_of(rng);
  y.data<int32_t>()[7] = int32_t(kV);
  EXPECT_TRUE(test_support::throws<IndexError>([&] { m.evaluate(x, y, kB); }, {"class id 7", "element 7", "[0, 7)"}));
  EXPECT_TRUE(test_support::throws<ValueError>([&] { m.evaluate(x, ids_of(rng), kB, Tensor::full(Shape{kB}, 1.0f)); },
                                               {"sequence output", "loss weights"}));
}
