// Models trained on a Vulkan device against the same models on the CPU:
// fit, evaluate and predict through the planned graphs, recorded command
// buffers and the kernels together. The two backends sum in different
// orders, so values agree within a tolerance, not bit for bit: 2e-4
// relative (plus 1e-5 absolute) after a few AdamW steps; dropout masks come
// from the same counter-based hash, so a mask that differed would move the
// losses far beyond that. A Vulkan run repeated gives the same bits.
#include <gtest/gtest.h>

#include <functional>

#include "tensorgrad/io/onnx.h"
#include "vulkan_support.h"

using namespace tensorgrad;
using test_support::all_weights;
using test_support::close;

namespace {

constexpr double kRtol = 2e-4, kAtol = 1e-5;

Tensor features(int64_t rows, int64_t cols, uint32_t seed) { return test_support::random_tensor(Shape{rows, cols}, seed); }

Tensor class_ids(int64_t rows, int classes) {
  std::vector<int32_t> v(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) v[size_t(r)] = int32_t((r * 7 + 3) % classes);
  return Tensor::from_vector(v, Shape{rows});
}

// The main job's MLP, small: Dense + ReLU, Dropout, Dense + softmax.
nn::Sequential mlp(Device device, OptimizerSpec opt = OptimizerSpec::adamw(1e-2f)) {
  nn::clear_session();
  manual_seed(3);
  nn::Sequential m({20});
  m.add(nn::Dense(32, "relu"));
  m.add(nn::Dropout(0.3f));
  m.add(nn::Dense(10, "softmax"));
  m.compile(opt, "sparse_categorical_crossentropy", {"accuracy"}, device);
  return m;
}

void expect_histories_close(const nn::History& got, const nn::History& want, const std::vector<std::string>& keys) {
  for (const std::string& k : keys) EXPECT_TRUE(close(got[k], want[k], kRtol, kAtol)) << k;
}

}  // namespace

TEST(VulkanModels, AnMlpWithDropoutTrainsAsOnTheCpu) {
  TG_VULKAN_OR_SKIP(vk);
  const Tensor x = features(80, 20, 1), y = class_ids(80, 10);
  nn::FitOptions fo;
  fo.epochs = 2;
  fo.batch_size = 16;
  fo.shuffle = false;
  fo.verbose = 0;
  nn::Sequential cpu = mlp(Device::CPU), dev = mlp(vk->device());
  for (const nn::Weight& w : dev.weights()) EXPECT_EQ(w.value.device(), vk->device()) << w.name;
  ASSERT_EQ(all_weights(cpu), all_weights(dev));
  const nn::History hc = cpu.fit(x, y, fo), hd = dev.fit(x, y, fo);
  expect_histories_close(hd, hc, {"loss", "accuracy"});
  EXPECT_TRUE(close(all_weights(dev), all_weights(cpu), kRtol, kAtol));
  const auto ec = cpu.evaluate(x, y, 7), ed = dev.evaluate(x, y, 7);
  for (const auto& [k, v] : ec) EXPECT_TRUE(close({ed.at(k)}, {v}, kRtol, kAtol)) << k;
  // Batches of 7 rows over 80: the last batch is short (a plan runs any batch up to its own).
  const Tensor pc = cpu.predict(x, 7), pd = dev.predict(x, 7);
  EXPECT_EQ(pd.device(), Device::CPU);
  EXPECT_TRUE(close(test_support::values(pd), test_support::values(pc), kRtol, kAtol));
  const Tensor one = x.rows(5, 6);
  EXPECT_TRUE(close(test_support::values(dev.predict(one, 1)), test_support::values(cpu.predict(one, 1)), kRtol, kAtol));
}

TEST(VulkanModels, ARunRepeatedGivesTheSameBits) {
  TG_VULKAN_OR_SKIP(vk);
  const Tensor x = features(64, 20, 2), y = class_ids(64, 10);
  nn::FitOptions fo;
  fo.epochs = 2;
  fo.batch_size = 16;
  fo.verbose = 0;
  std::vector<std::vector<double>> runs;
  for (int run = 0; run < 2; ++run) {
    nn::Sequential m = mlp(vk->device());
    (void)m.fit(x, y, fo);
    runs.push_back(all_weights(m));
  }
  EXPECT_EQ(runs[0], runs[1]);
}

// Two inputs of losses: a softmax head with sparse cross-entropy and a
// linear head with MSE, weighted, each with its metric.
TEST(VulkanModels, ATwoOutputFunctionalMlpTrainsAsOnTheCpu) {
  TG_VULKAN_OR_SKIP(vk);
  auto make = [](Device device) {
    nn::clear_session();
    manual_seed(5);
    const nn::SymbolicTensor in = nn::Input({12});
    const nn::SymbolicTensor h = nn::Dense(16, "tanh")(in);
    auto cls = std::make_shared<nn::Dense>(4, "softmax");
    auto reg = std::make_shared<nn::Dense>(2);
    cls->set_name("cls");
    reg->set_name("reg");
    nn::Model m({in}, {(*cls)(h), (*reg)(h)});
    m.compile(OptimizerSpec::adam(5e-3f), std::vector<Loss>{"sparse_categorical_crossentropy", "mse"}, {1.0f, 0.5f},
              {{"accuracy"}, {"mae"}}, device);
    return m;
  };
  const Tensor x = features(48, 12, 3), y1 = class_ids(48, 4), y2 = features(48, 2, 4);
  nn::FitOptions fo;
  fo.epochs = 2;
  fo.batch_size = 12;
  fo.shuffle = false;
  fo.verbose = 0;
  nn::Model cpu = make(Device::CPU), dev = make(vk->device());
  const std::vector<Tensor> xs{x}, ys{y1, y2};
  const nn::History hc = cpu.fit(xs, ys, fo), hd = dev.fit(xs, ys, fo);
  expect_histories_close(hd, hc, {"loss", "cls_loss", "reg_loss", "cls_accuracy", "reg_mae"});
  EXPECT_TRUE(close(all_weights(dev), all_weights(cpu), kRtol, kAtol));
}

// Validation, sample and class weights, gradient accumulation and a
// callback, each as on the CPU.
TEST(VulkanModels, FitOptionsWorkAsOnTheCpu) {
  TG_VULKAN_OR_SKIP(vk);
  const Tensor x = features(96, 20, 6), y = class_ids(96, 10);
  std::vector<float> w(96);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.5f + float(i % 3);
  struct Case {
    const char* name;
    std::function<void(nn::FitOptions&)> set;
  };
  const std::vector<Case> cases = {
      {"validation_split", [](nn::FitOptions& o) { o.validation_split = 0.25; }},
      {"sample_weight", [&](nn::FitOptions& o) { o.sample_weight = Tensor::from_vector(w, Shape{96}); }},
      {"class_weight", [](nn::FitOptions& o) { o.class_weight = {{0, 2.0f}, {3, 0.25f}}; }},
      {"accumulation", [](nn::FitOptions& o) { o.nbatch_logical = 32; }},
      {"early stopping", [](nn::FitOptions& o) {
         o.epochs = 6;
         o.callbacks = {std::make_shared<nn::EarlyStopping>(nn::EarlyStoppingOptions{.monitor = "loss", .min_delta = 0.5})};
       }}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    nn::FitOptions fo;
    fo.epochs = 2;
    fo.batch_size = 16;
    fo.shuffle = false;
    fo.verbose = 0;
    c.set(fo);
    // SGD with Nesterov momentum and gradient clipping: more of the update kernels than AdamW.
    const OptimizerSpec sgd = OptimizerSpec::sgd({.learning_rate = 0.05f, .momentum = 0.9f, .nesterov = true,
                                                  .clipnorm = 1.0f});
    nn::Sequential cpu = mlp(Device::CPU, sgd), dev = mlp(vk->device(), sgd);
    const nn::History hc = cpu.fit(x, y, fo), hd = dev.fit(x, y, fo);
    EXPECT_EQ(hd["loss"].size(), hc["loss"].size());
    expect_histories_close(hd, hc, {"loss", "accuracy"});
    if (fo.validation_split > 0) expect_histories_close(hd, hc, {"val_loss", "val_accuracy"});
    EXPECT_TRUE(close(all_weights(dev), all_weights(cpu), kRtol, kAtol));
  }
}

// fit and evaluate from a generator (batches of varying rows).
TEST(VulkanModels, FitFromAGeneratorAsOnTheCpu) {
  TG_VULKAN_OR_SKIP(vk);
  const Tensor x = features(50, 20, 7), y = class_ids(50, 10);
  auto generator = [&] {
    auto at = std::make_shared<int64_t>(0);
    return nn::Generator([&, at]() -> std::optional<nn::Batch> {
      if (*at >= 50) {
        *at = 0;
        return std::nullopt;
      }
      const int64_t end = std::min<int64_t>(*at + 16, 50);
      nn::Batch b{{x.rows(*at, end)}, {y.rows(*at, end)}, {}};
      *at = end;
      return b;
    });
  };
  nn::GeneratorFitOptions go;
  go.epochs = 2;
  go.batch_size = 16;
  go.verbose = 0;
  nn::Sequential cpu = mlp(Device::CPU), dev = mlp(vk->device());
  const nn::History hc = cpu.fit(generator(), go), hd = dev.fit(generator(), go);
  expect_histories_close(hd, hc, {"loss", "accuracy"});
  const auto ec = cpu.evaluate(generator(), 0, 16), ed = dev.evaluate(generator(), 0, 16);
  for (const auto& [k, v] : ec) EXPECT_TRUE(close({ed.at(k)}, {v}, kRtol, kAtol)) << k;
}

TEST(VulkanModels, SummaryNamesTheDevice) {
  TG_VULKAN_OR_SKIP(vk);
  nn::Sequential m = mlp(vk->device());
  EXPECT_NE(m.summary().find("Device: " + vk->device().str() + " ("), std::string::npos) << m.summary();
  EXPECT_EQ(mlp(Device::CPU).summary().find("Device:"), std::string::npos);
}

// An out-of-range class id or token id is an IndexError naming it, and the
// step's update is not applied, as on the CPU: batches come from the host,
// where their ids are checked before they are uploaded.
TEST(VulkanModels, OutOfRangeIdsAreRefusedAndNothingIsUpdated) {
  TG_VULKAN_OR_SKIP(vk);
  nn::clear_session();
  manual_seed(4);
  nn::Sequential m({5});
  m.add(nn::Embedding(12, 4));
  m.add(nn::Flatten());
  m.add(nn::Dense(3, "softmax"));
  m.compile(OptimizerSpec::adam(1e-2f), "sparse_categorical_crossentropy", {"accuracy"}, vk->device());
  std::vector<int32_t> tokens(40), labels(8);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(i % 12);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = int32_t(i % 3);
  nn::FitOptions fo;
  fo.verbose = 0;
  fo.batch_size = 8;
  (void)m.fit(Tensor::from_vector(tokens, Shape{8, 5}), Tensor::from_vector(labels, Shape{8}), fo);
  const std::vector<double> before = all_weights(m);
  std::vector<int32_t> bad_tokens = tokens, bad_labels = labels;
  bad_tokens[17] = 12;
  bad_labels[6] = 3;
  for (const auto& [x, y, id] : {std::tuple{bad_tokens, labels, std::string("token id 12")},
                                 std::tuple{tokens, bad_labels, std::string("class id 3")}}) {
    try {
      (void)m.fit(Tensor::from_vector(x, Shape{8, 5}), Tensor::from_vector(y, Shape{8}), fo);
      ADD_FAILURE() << id << " was accepted";
    } catch (const IndexError& e) {
      EXPECT_NE(std::string(e.what()).find(id), std::string::npos) << e.what();
    }
    EXPECT_EQ(all_weights(m), before) << id;
  }
}

// The other layers' models, fit on both devices: a small CNN (convolution
// with batch norm and ReLU, max pooling, a residual addition, global
// average pooling) and LSTM and GRU text models over an embedding.
TEST(VulkanModels, CnnAndRecurrentModelsTrainAsOnTheCpu) {
  TG_VULKAN_OR_SKIP(vk);
  nn::FitOptions fo;
  fo.epochs = 2;
  fo.batch_size = 8;
  fo.shuffle = false;
  fo.verbose = 0;
  auto cnn = [](Device device) {
    nn::clear_session();
    manual_seed(6);
    const nn::SymbolicTensor in = nn::Input({8, 8, 2});
    // No bias before the batch norm (as ResNets): its gradient is zero up to
    // rounding, which Adam would blow up into steps of noise on both devices.
    nn::SymbolicTensor h = nn::Conv2D(6, {3, 3}, {1, 1}, "same", {1, 1}, "linear", false)(in);
    h = nn::BatchNormalization()(h);
    h = nn::ActivationLayer("relu")(h);
    const nn::SymbolicTensor r = nn::Conv2D(6, 3, "same", "relu")(h);
    h = nn::Add()({h, r});
    h = nn::MaxPooling2D()(h);
    h = nn::GlobalAveragePooling2D()(h);
    nn::Model m({in}, {nn::Dense(3, "softmax")(h)});
    m.compile(OptimizerSpec::adam(1e-2f), "sparse_categorical_crossentropy", {"accuracy"}, device);
    return m;
  };
  const Tensor images = test_support::random_tensor(Shape{16, 8, 8, 2}, 8), labels = class_ids(16, 3);
  {
    SCOPED_TRACE("cnn");
    nn::Model cpu = cnn(Device::CPU), dev = cnn(vk->device());
    const nn::History hc = cpu.fit(images, labels, fo), hd = dev.fit(images, labels, fo);
    expect_histories_close(hd, hc, {"loss", "accuracy"});
    EXPECT_TRUE(close(all_weights(dev), all_weights(cpu), kRtol, kAtol));
  }
  std::vector<float> tokens(16 * 7);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = float((i * 5 + 1) % 11);
  const Tensor text = Tensor::from_vector(tokens, Shape{16, 7});
  for (const bool lstm : {true, false}) {
    SCOPED_TRACE(lstm ? "lstm" : "gru");
    auto make = [&](Device device) {
      nn::clear_session();
      manual_seed(7);
      nn::Sequential m({7});
      m.add(nn::Embedding(11, 5));
      if (lstm) m.add(nn::LSTM(6));
      else m.add(nn::GRU(6));
      m.add(nn::Dense(3, "softmax"));
      m.compile(OptimizerSpec::adam(1e-2f), "sparse_categorical_crossentropy", {"accuracy"}, device);
      return m;
    };
    nn::Sequential cpu = make(Device::CPU), dev = make(vk->device());
    const nn::History hc = cpu.fit(text, labels, fo), hd = dev.fit(text, labels, fo);
    expect_histories_close(hd, hc, {"loss", "accuracy"});
    EXPECT_TRUE(close(all_weights(dev), all_weights(cpu), kRtol, kAtol));
  }
}

// Two inputs (token ids through an embedding, features through a dense
// layer) joined, and two outputs (a class and a regression), fit on both
// devices.
TEST(VulkanModels, ATwoInputTwoOutputModelWithAnEmbeddingTrainsAsOnTheCpu) {
  TG_VULKAN_OR_SKIP(vk);
  auto make = [](Device device) {
    nn::clear_session();
    manual_seed(12);
    const nn::SymbolicTensor ids = nn::Input({6}), feats = nn::Input({4});
    const nn::SymbolicTensor e = nn::Flatten()(nn::Embedding(9, 3)(ids));
    const nn::SymbolicTensor h = nn::Concatenate()({e, nn::Dense(5, "relu")(feats)});
    auto cls = std::make_shared<nn::Dense>(3, "softmax");
    auto reg = std::make_shared<nn::Dense>(1);
    cls->set_name("cls");
    reg->set_name("reg");
    nn::Model m({ids, feats}, {(*cls)(h), (*reg)(h)});
    m.compile(OptimizerSpec::adam(1e-2f), std::vector<Loss>{"sparse_categorical_crossentropy", "mse"}, {1.0f, 0.5f},
              {{"accuracy"}, {"mae"}}, device);
    return m;
  };
  std::vector<float> tokens(24 * 6);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = float((i * 7 + 2) % 9);
  const std::vector<Tensor> xs{Tensor::from_vector(tokens, Shape{24, 6}), test_support::random_tensor(Shape{24, 4}, 13)};
  const std::vector<Tensor> ys{class_ids(24, 3), test_support::random_tensor(Shape{24, 1}, 14)};
  nn::FitOptions fo;
  fo.epochs = 2;
  fo.batch_size = 8;
  fo.shuffle = false;
  fo.verbose = 0;
  nn::Model cpu = make(Device::CPU), dev = make(vk->device());
  const nn::History hc = cpu.fit(xs, ys, fo), hd = dev.fit(xs, ys, fo);
  expect_histories_close(hd, hc, {"loss", "cls_loss", "reg_loss", "cls_accuracy", "reg_mae"});
  EXPECT_TRUE(close(all_weights(dev), all_weights(cpu), kRtol, kAtol));
}

// A model trained on the device exports as one trained on the CPU: its
// weights are read back from the device, and the file (read back by
// load_onnx, run on the CPU) predicts what the device predicts.
TEST(VulkanModels, AModelTrainedOnTheDeviceExportsToOnnx) {
  TG_VULKAN_OR_SKIP(vk);
  if (!io::onnx_available()) GTEST_SKIP() << "built without ONNX support (Debian: libonnx-dev)";
  nn::clear_session();
  manual_seed(9);
  const nn::SymbolicTensor in = nn::Input({8, 8, 2});
  nn::SymbolicTensor h = nn::Conv2D(4, 3, "same", "relu")(in);
  h = nn::BatchNormalization()(h);
  h = nn::GlobalAveragePooling2D()(h);
  nn::Model m({in}, {nn::Dense(3, "softmax")(h)});
  m.compile(OptimizerSpec::adam(1e-2f), "sparse_categorical_crossentropy", {"accuracy"}, vk->device());
  nn::FitOptions fo;
  fo.epochs = 2;
  fo.batch_size = 8;
  fo.verbose = 0;
  const Tensor images = test_support::random_tensor(Shape{16, 8, 8, 2}, 10);
  m.fit(images, class_ids(16, 3), fo);
  const std::string path = ::testing::TempDir() + "/vulkan_trained.onnx";
  io::save_onnx(m, path);
  nn::Model back = io::load_onnx(path);
  auto doubles = [](const Tensor& t) {
    const std::vector<float> v = t.to_vector();
    return std::vector<double>(v.begin(), v.end());
  };
  EXPECT_TRUE(close(doubles(back.predict(images)), doubles(m.predict(images)), kRtol, kAtol));
}
