// Models exported by PyTorch 1.13's ONNX exporter (tests/fixtures/
// make_onnx_pytorch.py, run offline; the files are checked in under
// tests/fixtures/onnx/) import and give PyTorch's outputs; the imported MLP
// trains on Fashion-MNIST.
#include <gtest/gtest.h>

#include "model_gradient_check.h"
#include "tensorgrad/data/idx.h"
#include "tensorgrad/io/onnx.h"
#include "test_support.h"

#ifdef TENSORGRAD_WITH_ONNX

#include <onnx/onnx_pb.h>

#include "onnx_tensors.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>
#include <utility>

using namespace tensorgrad;

namespace {

const std::string kFixtures = TENSORGRAD_ONNX_FIXTURES;

// A fixture's stored tensor, which must be there.
Tensor read_pb(const std::string& path) {
  const Tensor t = test_support::read_onnx_tensor(path);
  if (!t.defined()) throw IOError("cannot read " + path + " as float32 or int64");
  return t;
}

// A fixture's stored inputs, input_0 on.
std::vector<Tensor> read_inputs(const std::string& name) {
  std::vector<Tensor> xs;
  for (int k = 0; std::filesystem::exists(kFixtures + "/" + name + ".input_" + std::to_string(k) + ".pb"); ++k)
    xs.push_back(read_pb(kFixtures + "/" + name + ".input_" + std::to_string(k) + ".pb"));
  return xs;
}

// The fixture `name` imported and run on its stored inputs, against PyTorch's output.
void expect_matches_pytorch(const std::string& name) {
  SCOPED_TRACE(name);
  nn::Model model = io::load_onnx(kFixtures + "/" + name + ".onnx");
  const std::vector<Tensor> xs = read_inputs(name);
  const Tensor want = read_pb(kFixtures + "/" + name + ".output_0.pb");
  const std::vector<Tensor> got = model.predict(xs, xs.at(0).shape()[0]);
  ASSERT_EQ(got.at(0).shape(), want.shape());
  for (int64_t i = 0; i < want.numel(); ++i) {
    const float g = got[0].data<float>()[i], w = want.data<float>()[i];
    EXPECT_NEAR(g, w, 1e-5f * std::abs(w) + 1e-6f) << "element " << i;
  }
}

}  // namespace

TEST(OnnxPytorch, TheMainJobsMlpCnnAndResnetGivePytorchsOutputs) {
  for (const char* name : {"mlp", "cnn", "resnet"}) expect_matches_pytorch(name);
}

// Token ids - embedding - LSTM or GRU (forward and bidirectional, PyTorch's
// batch_first, exported sequence first with zero initial states made from
// the input's shape) - the last step - dense.
TEST(OnnxPytorch, LstmAndGruTextClassifiersGivePytorchsOutputs) {
  for (const char* name : {"lstm", "lstm_bidirectional", "gru", "gru_bidirectional"}) expect_matches_pytorch(name);
}

// An import's gradients (every trainable weight: recurrent kernels and
// biases per direction, an embedding table, dense layers, attention
// projections and layer norms) agree with central
// finite differences. The smooth models: a step of 1e-2 across a ReLU's or a
// max pooling's kink (the CNN's) makes the difference quotient meaningless.
TEST(OnnxPytorch, ImportedModelsGradientsMatchFiniteDifferences) {
  for (const char* name : {"lstm_bidirectional", "gru", "transformer_encoder"}) {
    SCOPED_TRACE(name);
    nn::Model model = io::load_onnx(kFixtures + "/" + name + ".onnx");
    const Tensor x = read_pb(kFixtures + "/" + name + ".input_0.pb");
    EXPECT_EQ(test_support::check_gradients(model, {x.rows(0, 2)}, 7), "");
  }
}

// nn.TransformerEncoderLayer(16, 4, 32, batch_first=True, norm_first=True,
// activation="gelu") as PyTorch 1.13 exports it at opset 14: its attention
// runs sequence first and folds the batch into the heads ({L, B * 4, 4}),
// which the import holds as {B, L, 4, 4} without moving data.
TEST(OnnxPytorch, ATransformerEncoderLayerGivesPytorchsOutputs) { expect_matches_pytorch("transformer_encoder"); }

// One attention head masked twice by masked_fill(-inf) (exported as Where):
// a causal mask, a bool constant of the file, and a key padding mask, a bool
// input given as float32 0/1 and negated by Not; then torch.where(h > 0, h,
// 0.1 h) (Greater, Where on computed tensors). Outputs match PyTorch's, and
// the gradients of every weight match finite differences (the -inf entries
// reach neither the result nor a gradient).
TEST(OnnxPytorch, MaskedAttentionGivesPytorchsOutputsAndGradients) {
  expect_matches_pytorch("masked_attention");
  nn::Model model = io::load_onnx(kFixtures + "/masked_attention.onnx");
  ASSERT_EQ(model.inputs().at(1).dtype(), DType::Float32);
  // The file's float initializers train; its causal mask (a bool initializer) and Constant nodes do not.
  std::vector<std::string> trainable;
  for (const nn::Weight& w : model.weights())
    if (w.trainable) trainable.push_back(w.name.substr(w.name.find('/') + 1));
  std::sort(trainable.begin(), trainable.end());
  EXPECT_EQ(trainable, (std::vector<std::string>{"fc.bias", "fc.weight", "onnx::MatMul_49", "qkv.bias"}));
  const std::vector<Tensor> xs = read_inputs("masked_attention");
  // A step of 1e-3: one of 1e-2 crosses the leaky gate's kink at 0 for some weights (weight 0[92] here).
  EXPECT_EQ(test_support::check_gradients(model, {xs[0].rows(0, 2), xs[1].rows(0, 2)}, 7, 1e-3f), "");
}

// Models that fold the batch into the rows before their output, as PyTorch
// writes logits.view(-1, V) before a cross-entropy and x.reshape(-1) (the
// import once crashed on them): ONNX's output {B * T, V} is given as
// {B, T, V}, PyTorch's values in PyTorch's order. One folds the rows for a
// log-softmax and unfolds them after (view(B, -1, V)).
TEST(OnnxPytorch, AViewThatFoldsTheBatchIntoTheRowsGivesPytorchsValues) {
  for (const auto& [name, rows] : std::vector<std::pair<std::string, Shape>>{
           {"logits_view", Shape{3, 5, 20}}, {"reshape_flat", Shape{2, 12}}, {"view_softmax_back", Shape{3, 4, 5}}}) {
    SCOPED_TRACE(name);
    nn::Model model = io::load_onnx(kFixtures + "/" + name + ".onnx");
    const std::vector<Tensor> xs = read_inputs(name);
    const Tensor want = read_pb(kFixtures + "/" + name + ".output_0.pb");
    const Tensor got = model.predict(xs, xs.at(0).shape()[0]).at(0);
    EXPECT_EQ(got.shape(), rows);
    ASSERT_EQ(got.numel(), want.numel());
    for (int64_t i = 0; i < want.numel(); ++i) {
      const float g = got.data<float>()[i], w = want.data<float>()[i];
      EXPECT_NEAR(g, w, 1e-5f * std::abs(w) + 1e-6f) << "element " << i;
    }
  }
}

// An imported PyTorch CNN (its input NCHW {1, 28, 28}) written back with
// the NCHW image layout takes {batch, 1, 28, 28}, its real input (not
// {batch, 28, 1, 28}, its input taken for NHWC), and gives PyTorch's outputs.
TEST(OnnxPytorch, AnImportedCnnExportedWithTheNchwLayoutTakesItsRealInput) {
  nn::Model model = io::load_onnx(kFixtures + "/cnn.onnx");
  const std::string path = ::testing::TempDir() + "/cnn_nchw_again.onnx";
  io::save_onnx(model, path, {io::OnnxImageLayout::NCHW});
  const io::OnnxInfo info = io::read_onnx_info(path);
  ASSERT_EQ(info.inputs.size(), 1u);
  EXPECT_EQ(info.inputs[0].dims, (std::vector<std::string>{"batch", "1", "28", "28"}));
  nn::Model again = io::load_onnx(path);
  const Tensor x = read_pb(kFixtures + "/cnn.input_0.pb"), want = read_pb(kFixtures + "/cnn.output_0.pb");
  const Tensor got = again.predict(x);
  ASSERT_EQ(got.shape(), want.shape());
  for (int64_t i = 0; i < want.numel(); ++i)
    EXPECT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-5f * std::abs(want.data<float>()[i]) + 1e-6f) << i;
}

// The imported MLP (PyTorch's initial weights) trained one epoch with fit
// on Fashion-MNIST: its test accuracy rises from chance.
TEST(OnnxPytorch, TheImportedMlpTrainsOnFashionMnist) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::is_directory(dir)) GTEST_SKIP() << dir << " not installed (Debian: dataset-fashion-mnist)";
  const data::MnistFiles d = data::load_mnist(dir);
  nn::Model model = io::load_onnx(kFixtures + "/mlp.onnx");
  model.compile(OptimizerSpec::adam(1e-3f), "sparse_categorical_crossentropy", {"accuracy"});
  const double before = model.evaluate(d.test.x, d.test.y, 1000).at("accuracy");
  nn::FitOptions fo;
  fo.epochs = 1;
  fo.batch_size = 128;
  fo.verbose = 0;
  model.fit(d.train.x, d.train.y, fo);
  const double after = model.evaluate(d.test.x, d.test.y, 1000).at("accuracy");
  std::printf("imported MLP: test accuracy %.4f before, %.4f after one epoch\n", before, after);
  EXPECT_LT(before, 0.3);
  EXPECT_GT(after, 0.8);
}

#endif
