// Saving and loading (io/saving.h): whole models of every layer type, a
// functional model with shared layers and several inputs and outputs, F16 and
// BF16 weights, weights alone with their mismatch lists, user layer types and
// losses, and the header checks. Checkpoints and exact resume are in
// test_checkpoint.cpp.
#include <gtest/gtest.h>

#include "test_files.h"
#include "test_support.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "tensorgrad/tensorgrad.h"

using namespace tensorgrad;
using nn::Dense;
using nn::Input;
using nn::Model;
using nn::Sequential;
using nn::SymbolicTensor;
using test_support::TempDir;
using test_support::ThreadsGuard;
using test_support::bit_equal;
using test_support::throws;
using test_support::uniform;

namespace {

std::vector<float> flat(const Tensor& t) { return t.to_vector(); }

// Every weight of two models equal by name, shape and bits.
::testing::AssertionResult same_weights(const Model& a, const Model& b) {
  const std::vector<nn::Weight> wa = a.weights(), wb = b.weights();
  if (wa.size() != wb.size()) return ::testing::AssertionFailure() << wa.size() << " vs " << wb.size() << " weights";
  for (size_t i = 0; i < wa.size(); ++i) {
    if (wa[i].name != wb[i].name) return ::testing::AssertionFailure() << wa[i].name << " vs " << wb[i].name;
    if (wa[i].trainable != wb[i].trainable) return ::testing::AssertionFailure() << wa[i].name << " trainable";
    if (!bit_equal(wa[i].value, wb[i].value)) return ::testing::AssertionFailure() << wa[i].name << " differs";
  }
  return ::testing::AssertionSuccess();
}

// The model's outputs for `xs` equal bit for bit, before and after a round trip.
void expect_round_trip(Model& model, const std::vector<Tensor>& xs, const std::vector<Tensor>& ys,
                       const TempDir& dir) {
  const std::string path = dir / (model.name() + ".gguf");
  io::save_model(model, path);
  const std::vector<uint64_t> before_draws = [] {
    std::mt19937_64 copy = global_generator();
    return std::vector<uint64_t>{copy(), copy()};
  }();
  Model loaded = io::load_model(path);
  // Loading drew nothing from the global generator.
  EXPECT_EQ(global_generator()(), before_draws[0]);
  EXPECT_EQ(global_generator()(), before_draws[1]);
  EXPECT_EQ(loaded.name(), model.name());
  EXPECT_EQ(loaded.summary(), model.summary());
  EXPECT_EQ(loaded.input_names(), model.input_names());
  EXPECT_EQ(loaded.output_names(), model.output_names());
  EXPECT_TRUE(same_weights(model, loaded));
  ASSERT_EQ(loaded.compiled(), model.compiled());
  const std::vector<Tensor> p0 = model.predict(xs, 8), p1 = loaded.predict(xs, 8);
  ASSERT_EQ(p0.size(), p1.size());
  for (size_t i = 0; i < p0.size(); ++i) EXPECT_TRUE(bit_equal(p0[i], p1[i])) << model.name() << " output " << i;
  if (!model.compiled()) return;
  // Both train on identically: the optimizer state came along.
  nn::FitOptions fo;
  fo.epochs = 2;
  fo.batch_size = 8;
  fo.verbose = 0;
  const nn::History h0 = model.fit(xs, ys, fo), h1 = loaded.fit(xs, ys, fo);
  EXPECT_EQ(h0.history.at("loss"), h1.history.at("loss")) << model.name();
  EXPECT_TRUE(same_weights(model, loaded)) << model.name() << " after training on";
}

void train_briefly(Model& m, const std::vector<Tensor>& xs, const std::vector<Tensor>& ys) {
  nn::FitOptions fo;
  fo.epochs = 1;
  fo.batch_size = 8;
  fo.verbose = 0;
  m.fit(xs, ys, fo);
}

}  // namespace

TEST(Saving, DenseNormalizationDropoutActivationFlatten) {
  ThreadsGuard threads;
  set_num_threads(1);
  manual_seed(3);
  nn::clear_session();
  std::mt19937 rng(1);
  const SymbolicTensor in = Input({4, 4, 1});
  SymbolicTensor h = nn::Flatten()(in);
  h = Dense(8, "relu")(h);
  h = nn::BatchNormalization(0.9f)(h);
  h = nn::Dropout(0.3f)(h);
  h = Dense(6, "linear", false)(h);
  h = nn::LayerNormalization(1e-4f)(h);
  h = nn::ActivationLayer("tanh")(h);
  Model m(in, Dense(3, "softmax")(h), "mlp");
  m.compile(OptimizerSpec::adamw(1e-2f, 0.01f), "categorical_crossentropy", {"accuracy"});
  std::vector<Tensor> xs{uniform({32, 4, 4, 1}, rng, -1, 1)};
  Tensor y = Tensor::zeros({32, 3});
  for (int64_t i = 0; i < 32; ++i) y.data<float>()[i * 3 + i % 3] = 1.0f;
  train_briefly(m, xs, {y});
  TempDir dir;
  expect_round_trip(m, xs, {y}, dir);
}

// "gelu_tanh" (Keras' gelu(approximate=True)) in a Dense layer: the loss falls, and the name survives a
// round trip (a load that read "gelu" instead would predict other bits).
TEST(Saving, GeluTanhActivationTrainsAndRoundTrips) {
  ThreadsGuard threads;
  set_num_threads(1);
  manual_seed(8);
  nn::clear_session();
  std::mt19937 rng(3);
  const SymbolicTensor in = Input({4});
  Model m(in, Dense(2)(Dense(16, "gelu_tanh")(in)), "gelu_tanh_mlp");
  m.compile(OptimizerSpec::adam(1e-2f), "mse");
  std::vector<Tensor> xs{uniform({64, 4}, rng, -2, 2)};
  Tensor y = Tensor::zeros({64, 2});
  for (int64_t i = 0; i < 64; ++i) {
    const float* row = xs[0].data<float>() + i * 4;
    y.data<float>()[i * 2] = row[0] * row[1];
    y.data<float>()[i * 2 + 1] = std::fabs(row[2]) - row[3];
  }
  nn::FitOptions fo;
  fo.epochs = 30;
  fo.batch_size = 16;
  fo.verbose = 0;
  const std::vector<double> loss = m.fit(xs, std::vector<Tensor>{y}, fo).history.at("loss");
  EXPECT_LT(loss.back(), 0.5 * loss.front());
  TempDir dir;
  expect_round_trip(m, xs, {y}, dir);
  const Model loaded = io::load_model(dir / (m.name() + ".gguf"));
  int gelu_tanh_layers = 0;
  for (const auto& layer : loaded.layers())
    gelu_tanh_layers += layer->config().has("activation") && layer->config().get_string("activation") == "gelu_tanh";
  EXPECT_EQ(gelu_tanh_layers, 1);
}

TEST(Saving, ConvolutionAndPooling) {
  ThreadsGuard threads;
  set_num_threads(1);
  manual_seed(4);
  nn::clear_session();
  std::mt19937 rng(2);
  const SymbolicTensor in = Input({8, 8, 2});
  SymbolicTensor a = nn::Conv2D(4, 3, "same", "relu")(in);
  a = nn::MaxPooling2D()(a);
  a = nn::Conv2D(3, {2, 2}, {1, 1}, "valid", {2, 1}, "linear", false)(a);
  a = nn::AveragePooling2D({2, 2}, {1, 1}, "same")(a);
  const SymbolicTensor g1 = nn::GlobalAveragePooling2D()(a);
  const SymbolicTensor g2 = nn::GlobalMaxPooling2D()(nn::Conv2D(2, {3, 3}, {2, 2}, "same")(in));
  Model m(in, Dense(2)(nn::Concatenate()({g1, g2})), "convnet");
  m.compile(OptimizerSpec::sgd({.learning_rate = 0.05f, .momentum = 0.9f, .nesterov = true}), "mse", {"mae"});
  std::vector<Tensor> xs{uniform({16, 8, 8, 2}, rng, -1, 1)};
  std::vector<Tensor> ys{uniform({16, 2}, rng, -1, 1)};
  train_briefly(m, xs, ys);
  TempDir dir;
  expect_round_trip(m, xs, ys, dir);
}

// The mobile networks' layers: grouped Conv2D and Conv1D, DepthwiseConv2D,
// SeparableConv2D, ZeroPadding2D and the hard activations come back with
// their configurations and weights.
TEST(Saving, GroupedDepthwiseSeparableAndPadding) {
  ThreadsGuard threads;
  set_num_threads(1);
  manual_seed(5);
  nn::clear_session();
  std::mt19937 rng(3);
  const SymbolicTensor in = Input({8, 8, 4});
  SymbolicTensor a = nn::ZeroPadding2D({{{1, 0}, {2, 1}}})(in);
  a = nn::Conv2D(6, {3, 3}, {1, 1}, "same", {1, 1}, "relu6", true, 2)(a);
  a = nn::DepthwiseConv2D({3, 3}, {2, 2}, "same", 2, {1, 1}, "hard_swish")(a);
  a = nn::SeparableConv2D(5, {3, 3}, {1, 1}, "valid", 1, {1, 1}, "hard_sigmoid", false)(a);
  const SymbolicTensor seq = Input({10, 4});
  const SymbolicTensor b = nn::Conv1D(4, 3, 1, "same", 1, "linear", true, 4)(seq);
  Model m({in, seq}, {Dense(2)(nn::Concatenate()({nn::Flatten()(a), nn::Flatten()(b)}))}, "mobile");
  m.compile(OptimizerSpec::sgd({.learning_rate = 0.05f}), "mse");
  std::vector<Tensor> xs{uniform({16, 8, 8, 4}, rng, -1, 1), uniform({16, 10, 4}, rng, -1, 1)};
  std::vector<Tensor> ys{uniform({16, 2}, rng, -1, 1)};
  train_briefly(m, xs, ys);
  TempDir dir;
  expect_round_trip(m, xs, ys, dir);
}

TEST(Saving, SequencesEmbeddingRecurrentReshape) {
  ThreadsGuard threads;
  set_num_threads(1);
  manual_seed(5);
  nn::clear_session();
  std::mt19937 rng(3);
  const SymbolicTensor ids = Input({6}, DType::Int32, "tokens");
  SymbolicTensor e = nn::Embedding(20, 4)(ids);
  e = nn::Conv1D(5, 3, 1, "same", 2, "relu")(e);
  e = nn::LSTM(5, true)(e);
  e = nn::GRU(3, true)(e);
  e = nn::Reshape({6, 3, 1})(e);
  Model m(ids, Dense(2)(nn::Flatten()(e)), "sequence_model");
  m.compile(OptimizerSpec::rmsprop({.learning_rate = 1e-2f, .momentum = 0.5f, .centered = true}), "mse");
  Tensor tokens = Tensor::empty({16, 6}, DType::Int32);
  for (int64_t i = 0; i < tokens.numel(); ++i) tokens.data<int32_t>()[i] = int32_t(rng() % 20);
  std::vector<Tensor> ys{uniform({16, 2}, rng, -1, 1)};
  train_briefly(m, {tokens}, ys);
  TempDir dir;
  expect_round_trip(m, {tokens}, ys, dir);
}

// Two inputs, two outputs, a layer called twice (its weights shared), every
// merge layer, and a nested model.
TEST(Saving, FunctionalSharedLayersSeveralInputsAndOutputs) {
  ThreadsGuard threads;
  set_num_threads(1);
  manual_seed(6);
  nn::clear_session();
  std::mt19937 rng(4);
  const SymbolicTensor inner_in = Input({5});
  Model encoder(inner_in, Dense(4, "tanh")(inner_in), "encoder");
  const SymbolicTensor a = Input({5}, DType::Float32, "left"), b = Input({5}, DType::Float32, "right");
  auto shared = std::make_shared<Dense>(4, "relu");
  const SymbolicTensor sa = (*shared)(a), sb = (*shared)(b);
  const SymbolicTensor ea = encoder(a), eb = encoder(b);
  const SymbolicTensor merged = nn::Concatenate()(
      {nn::Add()({sa, sb}), nn::Subtract()({sa, sb}), nn::Multiply()({sa, sb}), nn::Average()({ea, eb}),
       nn::Maximum()({sa, ea}), nn::Minimum()({sb, eb})});
  const SymbolicTensor score = Dense(1, "sigmoid")(merged);
  const SymbolicTensor value = Dense(2)(merged);
  Model m({a, b}, {score, value}, "two_heads");
  m.compile(OptimizerSpec::adagrad({.learning_rate = 0.05f}), std::vector<Loss>{"binary_crossentropy", "mse"},
            {1.0f, 0.5f}, {{"binary_accuracy"}, {"mae"}});
  std::vector<Tensor> xs{uniform({16, 5}, rng, -1, 1), uniform({16, 5}, rng, -1, 1)};
  Tensor cls = Tensor::empty({16, 1});
  for (int64_t i = 0; i < 16; ++i) cls.data<float>()[i] = float(i % 2);
  std::vector<Tensor> ys{cls, uniform({16, 2}, rng, -1, 1)};
  train_briefly(m, xs, ys);
  TempDir dir;
  expect_round_trip(m, xs, ys, dir);
  // The shared layer is one layer in the loaded model too.
  Model loaded = io::load_model(dir / "two_heads.gguf");
  size_t dense_kernels = 0;
  for (const nn::Weight& w : loaded.weights()) dense_kernels += w.name == shared->name() + "/kernel";
  EXPECT_EQ(dense_kernels, 1u);
}

TEST(Saving, SequentialComesBackAsSequential) {
  ThreadsGuard threads;
  set_num_threads(1);
  manual_seed(7);
  nn::clear_session();
  std::mt19937 rng(5);
  Sequential m({3});
  m.add(Dense(5, "relu"));
  m.add(Dense(2));
  m.compile(OptimizerSpec::adam(1e-2f), "mse");
  const std::vector<Tensor> xs{uniform({8, 3}, rng, -1, 1)}, ys{uniform({8, 2}, rng, -1, 1)};
  TempDir dir;
  io::save_model(m, dir / "seq.gguf");
  Sequential s = io::load_sequential(dir / "seq.gguf");
  EXPECT_STREQ(s.type(), "Sequential");
  EXPECT_EQ(s.layers().size(), 2u);
  EXPECT_EQ(s.summary(), m.summary());
  EXPECT_TRUE(bit_equal(s.predict(xs[0]), m.predict(xs[0])));
  // The loaded Sequential still grows.
  s.add(Dense(1));
  EXPECT_EQ(s.predict(xs[0]).shape(), Shape({8, 1}));
  // A functional model is not a Sequential.
  const SymbolicTensor in = Input({3});
  Model f(in, Dense(2)(in), "functional_one");
  io::save_model(f, dir / "f.gguf");
  EXPECT_TRUE(throws<ValueError>([&] { io::load_sequential(dir / "f.gguf"); }, {"Functional", "load_model"}));
  // An uncompiled model loads uncompiled.
  Model g = io::load_model(dir / "f.gguf");
  EXPECT_FALSE(g.compiled());
  EXPECT_TRUE(bit_equal(g.predict(xs[0]), f.predict(xs[0])));
}

TEST(Saving, HalfPrecisionWeightsWithinTheirPrecision) {
  manual_seed(8);
  nn::clear_session();
  std::mt19937 rng(6);
  const SymbolicTensor in = Input({64});
  Model m(in, Dense(32)(Dense(64, "relu")(in)), "half");
  TempDir dir;
  io::save_model(m, dir / "f32.gguf", false);
  for (io::TensorType type : {io::TensorType::F16, io::TensorType::BF16}) {
    const std::string path = dir / (std::string(io::tensor_type_name(type)) + ".gguf");
    io::save_model(m, path, false, type);
    // Half the bytes of the weights.
    EXPECT_LT(std::filesystem::file_size(path), std::filesystem::file_size(dir / "f32.gguf") * 6 / 10);
    const io::GGUFFile f = io::GGUFFile::open(path);
    for (const io::TensorInfo& t : f.tensors()) EXPECT_EQ(t.type, type) << t.name;
    Model loaded = io::load_model(path);
    // Relative error of one rounding: 2^-11 (F16) or 2^-8 (BF16).
    const double tol = type == io::TensorType::F16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
    const std::vector<nn::Weight> wa = m.weights(), wb = loaded.weights();
    ASSERT_EQ(wa.size(), wb.size());
    size_t inexact = 0;
    for (size_t i = 0; i < wa.size(); ++i) {
      const std::vector<float> a = flat(wa[i].value), b = flat(wb[i].value);
      for (size_t k = 0; k < a.size(); ++k) {
        EXPECT_LE(std::fabs(double(a[k]) - double(b[k])), tol * std::fabs(double(a[k])) + 1e-30)
            << wa[i].name << "[" << k << "]";
        inexact += a[k] != b[k];
      }
    }
    EXPECT_GT(inexact, 0u);  // the file really held half-precision values
  }
  EXPECT_TRUE(throws<ValueError>([&] { io::save_model(m, dir / "i32.gguf", false, io::TensorType::I32); },
                                 {"F32, F16 or BF16", "I32"}));
}

TEST(Saving, WeightsByNameWithMismatchLists) {
  manual_seed(9);
  nn::clear_session();
  std::mt19937 rng(7);
  TempDir dir;
  const SymbolicTensor in = Input({4});
  auto d1 = std::make_shared<Dense>(3, "relu");
  d1->set_name("hidden");
  auto d2 = std::make_shared<Dense>(2);
  d2->set_name("head");
  Model a(in, (*d2)((*d1)(in)), "a");
  io::save_weights(a, dir / "a.gguf");
  // Same architecture, other values: load_weights brings a's back.
  manual_seed(10);
  const SymbolicTensor in2 = Input({4});
  auto e1 = std::make_shared<Dense>(3, "relu");
  e1->set_name("hidden");
  auto e2 = std::make_shared<Dense>(2);
  e2->set_name("head");
  Model b(in2, (*e2)((*e1)(in2)), "b");
  EXPECT_FALSE(same_weights(a, b));
  io::load_weights(b, dir / "a.gguf");
  EXPECT_TRUE(same_weights(a, b));

  // Another architecture: every kind of mismatch listed, nothing changed.
  const SymbolicTensor in3 = Input({4});
  auto f1 = std::make_shared<Dense>(5, "relu");  // hidden {4, 5}: shape mismatch
  f1->set_name("hidden");
  auto f2 = std::make_shared<Dense>(2);
  f2->set_name("output");  // head/* missing in the model, output/* missing in the file
  Model c(in3, (*f2)((*f1)(in3)), "c");
  const std::vector<Tensor> before = c.get_weights();
  EXPECT_TRUE(throws<ValueError>([&] { io::load_weights(c, dir / "a.gguf"); },
                                 {"missing in the file: output/kernel, output/bias",
                                  "not in the model: head/kernel, head/bias",
                                  "hidden/kernel: model {4, 5} vs file {4, 3}", "hidden/bias: model {5} vs file {3}",
                                  "layer names are numbered per process", "nn::clear_session()",
                                  "skip_mismatch"}));
  const std::vector<Tensor> after = c.get_weights();
  for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(bit_equal(before[i], after[i]));

  // skip_mismatch loads what matches and warns about the rest.
  const SymbolicTensor in4 = Input({4});
  auto g1 = std::make_shared<Dense>(3, "relu");
  g1->set_name("hidden");
  auto g2 = std::make_shared<Dense>(2);
  g2->set_name("other");
  Model d(in4, (*g2)((*g1)(in4)), "d");
  std::vector<std::string> warnings;
  set_log_handler([&](LogLevel, const std::string& m) { warnings.push_back(m); });
  io::load_weights(d, dir / "a.gguf", true);
  set_log_handler(nullptr);
  EXPECT_TRUE(bit_equal(d.weights()[0].value, a.weights()[0].value));
  EXPECT_TRUE(bit_equal(d.weights()[1].value, a.weights()[1].value));
  EXPECT_FALSE(bit_equal(d.weights()[2].value, a.weights()[2].value));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("other/kernel"), std::string::npos) << warnings[0];

  // A weights file is not a model.
  EXPECT_TRUE(throws<FormatError>([&] { io::load_model(dir / "a.gguf"); }, {"'weights'", "load_model"}));
}

namespace {
// A user's layer: y = scale * x, with its scale in the config.
class Scale : public nn::Layer {
 public:
  explicit Scale(double scale) : Layer("scale"), scale_(scale) {}
  const char* type() const override { return "TestScale"; }
  Shape build(const Shape& input_shape) override { return input_shape; }
  Value call(Builder& b, Value x, const nn::CallOptions&) override { return b.scale(x, float(scale_)); }
  std::shared_ptr<nn::Layer> clone() const override { return nn::clone_layer(*this); }
  std::vector<Tensor*> weight_slots() { return {}; }
  nn::LayerConfig config() const override { return nn::LayerConfig(type()).set("scale", scale_); }

 private:
  double scale_;
};
}  // namespace

TEST(Saving, UserLayersAndLossesByRegisteredName) {
  manual_seed(11);
  nn::clear_session();
  std::mt19937 rng(8);
  TempDir dir;
  const SymbolicTensor in = Input({3});
  Model m(in, Scale(2.5)(Dense(3)(in)), "custom");
  const LossFunction l1 = [](Builder& b, Value y_true, Value y_pred) {
    const Value diff = b.sub(y_pred, y_true);
    const Value abs = b.add(b.relu(diff), b.relu(b.scale(diff, -1.0f)));
    return b.reshape(b.apply(OpKind::MeanLastAxis, {abs}), Shape{b.shape(abs)[0]});
  };
  m.compile(OptimizerSpec::adam(), Loss("test_l1", l1));
  const Tensor x = uniform({4, 3}, rng, -1, 1);
  io::save_model(m, dir / "custom.gguf");
  // Unregistered layer type: a ValueError naming it.
  EXPECT_TRUE(throws<ValueError>([&] { io::load_model(dir / "custom.gguf"); }, {"TestScale", "register_layer"}));
  nn::register_layer("TestScale", [](const nn::LayerConfig& c) {
    return std::make_shared<Scale>(c.get_double("scale"));
  });
  // Unregistered loss: loaded uncompiled, with a warning.
  std::vector<std::string> warnings;
  set_log_handler([&](LogLevel, const std::string& msg) { warnings.push_back(msg); });
  Model uncompiled = io::load_model(dir / "custom.gguf");
  set_log_handler(nullptr);
  EXPECT_FALSE(uncompiled.compiled());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("test_l1"), std::string::npos) << warnings[0];
  EXPECT_TRUE(bit_equal(uncompiled.predict(x), m.predict(x)));
  io::register_loss("test_l1", l1);
  Model loaded = io::load_model(dir / "custom.gguf");
  EXPECT_TRUE(loaded.compiled());
  EXPECT_EQ(loaded.losses()[0].name, "test_l1");
  EXPECT_TRUE(bit_equal(loaded.predict(x), m.predict(x)));
  EXPECT_TRUE(throws<ValueError>([&] { io::register_loss("mse", l1); }, {"built-in"}));
  EXPECT_TRUE(throws<ValueError>([&] { nn::register_layer("Dense", nullptr); }, {"empty"}));
  EXPECT_TRUE(throws<ValueError>(
      [&] { nn::register_layer("Dense", [](const nn::LayerConfig&) { return std::make_shared<Dense>(1); }); },
      {"built-in"}));
}

TEST(Saving, HeaderChecks) {
  TempDir dir;
  EXPECT_TRUE(throws<IOError>([&] { io::load_model(dir / "missing.gguf"); }, {"missing.gguf"}));
  {
    io::GGUFWriter w;
    w.set_string("general.architecture", "llama");
    w.write(dir / "llama.gguf");
  }
  EXPECT_TRUE(throws<FormatError>([&] { io::load_model(dir / "llama.gguf"); }, {"not a tensorgrad file", "llama"}));
  {
    io::GGUFWriter w;
    w.set_string("general.architecture", "tensorgrad");
    w.set_string("tensorgrad.file_kind", "model");
    w.set_u32("tensorgrad.format_version", 2);
    w.write(dir / "v2.gguf");
  }
  EXPECT_TRUE(throws<FormatError>([&] { io::load_model(dir / "v2.gguf"); }, {"unsupported version 2"}));
  {
    io::GGUFWriter w;
    w.set_string("general.architecture", "tensorgrad");
    w.set_string("tensorgrad.file_kind", "model");
    w.set_u32("tensorgrad.format_version", 1);
    w.set_string("tensorgrad.model_config", "{not json");
    w.write(dir / "badjson.gguf");
  }
  EXPECT_TRUE(throws<FormatError>([&] { io::load_model(dir / "badjson.gguf"); }, {"model_config", "JSON"}));
  {
    io::GGUFWriter w;
    w.set_string("general.architecture", "tensorgrad");
    w.set_string("tensorgrad.file_kind", "model");
    w.set_u32("tensorgrad.format_version", 1);
    w.set_string("tensorgrad.model_config", R"({"class_name": "Functional", "name": "x", "inputs": []})");
    w.write(dir / "nolayers.gguf");
  }
  EXPECT_TRUE(throws<FormatError>([&] { io::load_model(dir / "nolayers.gguf"); }, {"'layers' is missing"}));
  // A layer named like the saved training state is refused, the file kept.
  {
    const SymbolicTensor x = Input({2});
    auto d = std::make_shared<Dense>(1);
    d->set_name("optimizer");
    Model reserved(x, (*d)(x));
    EXPECT_TRUE(throws<ValueError>([&] { io::save_model(reserved, dir / "v2.gguf"); }, {"'optimizer'", "set_name"}));
    EXPECT_TRUE(throws<FormatError>([&] { io::load_model(dir / "v2.gguf"); }, {"unsupported version 2"}));
  }
  // A freed model cannot be saved.
  const SymbolicTensor in = Input({2});
  Model m(in, Dense(1)(in));
  m.free();
  EXPECT_TRUE(throws<StateError>([&] { io::save_model(m, dir / "freed.gguf"); }, {"free()"}));
  EXPECT_FALSE(std::filesystem::exists(dir / "freed.gguf"));
}
