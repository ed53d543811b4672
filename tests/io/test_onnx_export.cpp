// io::save_onnx: every built-in layer (in small models of a few layers
// each), the main job's MLP, CNN and resnet, a two-input two-output
// functional model with an embedding, nested models, both image layouts,
// and PyTorch models imported by load_onnx and exported again;
// each file is checked two ways against the model's own predict(): read
// back by load_onnx, and run by a third-party runtime, ONNX Runtime for
// Node (onnxruntime-node, pinned by tests/onnx_js/package-lock.json; the
// second test skips, saying why, without node or the package). Bad input:
// a custom layer with no ONNX form, an unwritable path, a file kept whole.
#include <gtest/gtest.h>

#include "tensorgrad/io/onnx.h"
#include "tensorgrad/tensorgrad.h"
#include "test_support.h"

#ifdef TENSORGRAD_WITH_ONNX

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "../../apps/fashion_models.h"
#include "onnx_tensors.h"
#include "run_process.h"

#ifndef TENSORGRAD_SOURCE_DIR
#error "tests/CMakeLists.txt defines TENSORGRAD_SOURCE_DIR (the source tree, for tests/onnx_js)"
#endif

using namespace tensorgrad;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

Tensor uniform(const Shape& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Tensor t = Tensor::empty(s);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

Tensor ids(const Shape& s, int32_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> v(size_t(s.numel()));
  for (int32_t& x : v) x = int32_t(rng() % uint32_t(n));
  return Tensor::from_vector(std::span<const int32_t>(v), s);
}

// {B, H, W, C} -> {B, C, H, W}.
Tensor nchw(const Tensor& x) {
  const Shape& s = x.shape();
  Tensor out = Tensor::empty({s[0], s[3], s[1], s[2]});
  for (int64_t b = 0; b < s[0]; ++b)
    for (int64_t h = 0; h < s[1]; ++h)
      for (int64_t w = 0; w < s[2]; ++w)
        for (int64_t c = 0; c < s[3]; ++c)
          out.data<float>()[((b * s[3] + c) * s[1] + h) * s[2] + w] =
              x.data<float>()[((b * s[1] + h) * s[2] + w) * s[3] + c];
  return out;
}

// One model to export, its inputs (3 rows), and how the file takes them.
struct Case {
  std::string name;
  std::function<nn::Model()> make;
  std::function<std::vector<Tensor>()> inputs;
  io::OnnxImageLayout layout = io::OnnxImageLayout::NHWC;
  // ONNX Runtime only: load_onnx does not read attention's composed form when heads are merged with the batch
  // (its Concat of the log-sum-exp column over {batch x heads, L, dim}).
  bool runtime_only = false;
};

nn::SymbolicTensor apply(std::shared_ptr<nn::Layer> l, const nn::SymbolicTensor& x) { return (*l)(x); }

// Moving statistics away from 0 and 1, so that they matter.
void randomize_batch_norm(nn::Model& m) {
  uint32_t seed = 50;
  for (const nn::Weight& w : m.weights())
    if (w.name.find("moving_") != std::string::npos) {
      Tensor t = w.value;
      const Tensor r = uniform(t.shape(), seed++);
      for (int64_t i = 0; i < t.numel(); ++i)
        t.data<float>()[i] =
            w.name.find("variance") != std::string::npos ? 1.0f + 0.5f * r.data<float>()[i] : 0.3f * r.data<float>()[i];
    }
}

// Causal self-attention with a padding bias, by the fused Attention op (a custom layer: any op-built layer exports).
class CausalSelfAttention final : public nn::Layer {
 public:
  CausalSelfAttention() : Layer("causal_self_attention") {}
  const char* type() const override { return "CausalSelfAttention"; }
  Shape build(const Shape& s) override { return s; }
  Value call(Builder& b, Value x, const nn::CallOptions&) override {
    Builder::AttentionOptions o;
    o.causal = true;
    const Shape s = b.shape(x);
    Tensor bias = Tensor::zeros({1, 1, s[1]});
    bias.data<float>()[0] = 0.5f;
    o.mask = b.parameter(bias, "bias", false);
    return b.scaled_dot_product_attention(x, x, x, o);
  }
  std::shared_ptr<nn::Layer> clone() const override { return nn::clone_layer(*this); }
};

// RMS normalization (the fused RmsNorm op, exported as ReduceMean, Sqrt, Div and Mul) with a fixed weight.
class RmsNormLayer final : public nn::Layer {
 public:
  RmsNormLayer() : Layer("rms_norm") {}
  const char* type() const override { return "RmsNormLayer"; }
  Shape build(const Shape& s) override {
    weight_ = uniform({s[-1]}, 21);
    return s;
  }
  Value call(Builder& b, Value x, const nn::CallOptions&) override {
    return b.rms_norm(x, 1e-5f, b.parameter(weight_, "weight", false));
  }
  std::shared_ptr<nn::Layer> clone() const override { return nn::clone_layer(*this); }

 private:
  Tensor weight_;
};

// Grouped-query self-attention by the fused Attention op: x {B, L, 4} split into two query heads of 2 features
// ({B 2, L, 2}, batch-major) against one key-value head (x's first 2 features, {B, L, 2}): each key-value row
// serves two query rows. Output {B, L 4} (the heads' outputs in turn).
class GroupedQueryAttention final : public nn::Layer {
 public:
  GroupedQueryAttention() : Layer("grouped_query_attention") {}
  const char* type() const override { return "GroupedQueryAttentionTest"; }
  Shape build(const Shape& s) override { return Shape{s[0] * 4}; }
  Value call(Builder& b, Value x, const nn::CallOptions&) override {
    const Shape s = b.shape(x);
    const Value q = b.reshape(b.transpose(b.reshape(x, Shape{s[0], s[1], 2, 2}), 1, 2), Shape{s[0] * 2, s[1], 2});
    const Value kv = b.slice(x, 2, 0, 2);
    Builder::AttentionOptions o;
    o.causal = true;
    return b.reshape(b.scaled_dot_product_attention(q, kv, kv, o), Shape{s[0], s[1] * 4});
  }
  std::shared_ptr<nn::Layer> clone() const override { return nn::clone_layer(*this); }
};

std::vector<Case> cases() {
  std::vector<Case> c;
  c.push_back({"activations",
               [] {
                 auto x = nn::Input({6}, DType::Float32, "x");
                 auto h = nn::Dense(8)(x);
                 std::vector<nn::SymbolicTensor> outs;
                 for (const char* a : {"linear", "relu", "sigmoid", "tanh", "softmax", "gelu", "gelu_tanh", "silu",
                                       "elu", "leaky_relu", "softplus", "relu6", "hard_sigmoid", "hard_swish"})
                   outs.push_back(nn::ActivationLayer(a)(h));
                 return nn::Model(x, nn::Concatenate()(outs), "activations");
               },
               [] {
                 return std::vector<Tensor>{uniform({3, 6}, 1)};
               }});
  c.push_back({"dense_dropout",
               [] {
                 nn::Sequential s(Shape{5});
                 s.add(nn::Dense(7, "relu"));
                 s.add(nn::Dropout(0.5f));
                 s.add(nn::Dense(3, "linear", false));
                 return nn::Model(std::move(s));
               },
               [] {
                 return std::vector<Tensor>{uniform({3, 5}, 2)};
               }});
  c.push_back({"convolutions_and_pooling",
               [] {
                 auto x = nn::Input({9, 9, 3}, DType::Float32, "image");
                 auto h = nn::Conv2D(4, 3, "same", "relu")(x);
                 auto a = nn::Conv2D(5, {3, 3}, {2, 2}, "valid")(h);
                 auto d = nn::Conv2D(3, {3, 3}, {1, 1}, "same", {2, 2}, "tanh")(h);
                 auto p = nn::AveragePooling2D({2, 2}, {0, 0}, "same")(nn::MaxPooling2D()(d));
                 auto g1 = nn::GlobalAveragePooling2D()(a), g2 = nn::GlobalMaxPooling2D()(p);
                 auto f = nn::Flatten()(p);
                 return nn::Model(x, nn::Concatenate()({g1, g2, nn::Dense(2)(f)}), "convs");
               },
               [] {
                 return std::vector<Tensor>{uniform({3, 9, 9, 3}, 3)};
               }});
  c.push_back({"grouped_depthwise_separable",
               [] {
                 auto x = nn::Input({9, 9, 4}, DType::Float32, "image");
                 auto h = nn::ZeroPadding2D({{{1, 0}, {0, 1}}})(x);
                 h = nn::Conv2D(6, {3, 3}, {1, 1}, "same", {1, 1}, "relu6", true, 2)(h);
                 h = nn::DepthwiseConv2D({3, 3}, {2, 2}, "same", 2, {1, 1}, "hard_swish")(h);
                 h = nn::DepthwiseConv2D({3, 3}, {1, 1}, "valid", 1, {2, 2})(h);
                 h = nn::SeparableConv2D(5, {3, 3}, {1, 1}, "same", 1, {1, 1}, "hard_sigmoid")(h);
                 return nn::Model(x, nn::Flatten()(h), "grouped");
               },
               [] {
                 return std::vector<Tensor>{uniform({3, 9, 9, 4}, 5)};
               }});
  c.push_back({"conv1d_groups",
               [] {
                 nn::Sequential s(Shape{12, 4});
                 s.add(nn::Conv1D(6, 3, 1, "same", 1, "relu", true, 2));
                 s.add(nn::Flatten());
                 return nn::Model(std::move(s));
               },
               [] {
                 return std::vector<Tensor>{uniform({3, 12, 4}, 6)};
               }});
  c.push_back({"conv1d",
               [] {
                 nn::Sequential s(Shape{12, 3});
                 s.add(nn::Conv1D(4, 3, 2, "same", 1, "relu"));
                 s.add(nn::Flatten());
                 return nn::Model(std::move(s));
               },
               [] {
                 return std::vector<Tensor>{uniform({3, 12, 3}, 4)};
               }});
  c.push_back({"normalization",
               [] {
                 auto x = nn::Input({6, 6, 2}, DType::Float32, "x");
                 auto b = nn::BatchNormalization()(nn::Conv2D(3, 3, "same")(x));
                 auto l = nn::LayerNormalization()(nn::Reshape({36, 3})(b));
                 nn::Model m(x, nn::Dense(2)(nn::Flatten()(l)), "norms");
                 randomize_batch_norm(m);
                 return m;
               },
               [] {
                 return std::vector<Tensor>{uniform({3, 6, 6, 2}, 5)};
               }});
  c.push_back({"embedding_lstm_gru",
               [] {
                 nn::Sequential s(Shape{7});
                 s.add(nn::Embedding(20, 6));
                 s.add(nn::LSTM(5, true));
                 s.add(nn::GRU(4));
                 s.add(nn::Dense(3, "softmax"));
                 return nn::Model(std::move(s));
               },
               [] {
                 return std::vector<Tensor>{ids({3, 7}, 20, 6)};
               }});
  c.push_back(
      {"two_inputs_two_outputs",
       [] {
         auto tokens = nn::Input({5}, DType::Int32, "tokens");
         auto features = nn::Input({4}, DType::Float32, "features");
         auto e = nn::Flatten()(nn::Embedding(11, 4)(tokens));
         auto a = nn::Dense(4)(e), f = nn::Dense(4)(features);
         std::vector<nn::SymbolicTensor> merged;
         for (auto layer : std::vector<std::shared_ptr<nn::Layer>>{
                  std::make_shared<nn::Add>(), std::make_shared<nn::Subtract>(), std::make_shared<nn::Multiply>(),
                  std::make_shared<nn::Average>(), std::make_shared<nn::Maximum>(), std::make_shared<nn::Minimum>()})
           merged.push_back((*layer)({a, f}));
         auto all = nn::Concatenate()(merged);
         auto grid = nn::Reshape({6, 4})(all);
         return nn::Model({tokens, features},
                          {nn::Dense(3, "softmax")(nn::Flatten()(grid)), nn::Dense(1, "sigmoid")(a)}, "two_heads");
       },
       [] {
         return std::vector<Tensor>{ids({3, 5}, 11, 7), uniform({3, 4}, 8)};
       }});
  c.push_back({"nested",
               [] {
                 nn::Sequential inner(Shape{6});
                 inner.add(nn::Dense(5, "relu"));
                 inner.add(nn::Dense(4));
                 auto x = nn::Input({6}, DType::Float32, "x");
                 auto y = nn::Input({6}, DType::Float32, "y");
                 auto encoder = std::make_shared<nn::Sequential>(std::move(inner));
                 auto d = nn::Subtract()({(*encoder)(x), (*encoder)(y)});  // a Siamese pair: one encoder, twice
                 return nn::Model({x, y}, {nn::Dense(1)(d)}, "siamese");
               },
               [] {
                 return std::vector<Tensor>{uniform({3, 6}, 9), uniform({3, 6}, 10)};
               }});
  c.push_back({"fused_attention",
               [] {
                 auto x = nn::Input({6, 4}, DType::Float32, "x");
                 auto a = CausalSelfAttention()(x);
                 return nn::Model(x, nn::Dense(2)(nn::Flatten()(a)), "attention");
               },
               [] {
                 return std::vector<Tensor>{uniform({3, 6, 4}, 15)};
               }});
  c.push_back({"rms_norm",
               [] {
                 auto x = nn::Input({3, 5}, DType::Float32, "x");
                 return nn::Model(x, nn::Dense(2)(nn::Flatten()(std::make_shared<RmsNormLayer>()->operator()(x))),
                                  "rms_norm");
               },
               [] {
                 return std::vector<Tensor>{uniform({3, 3, 5}, 16)};
               }});
  // Queries viewed {N, 2, L, D} against keys and values unsqueezed {N, 1, L, D}: ONNX Runtime only, as tiny_gpt.
  c.push_back({"grouped_query_attention",
               [] {
                 auto x = nn::Input({6, 4}, DType::Float32, "x");
                 auto a = std::make_shared<GroupedQueryAttention>()->operator()(x);
                 return nn::Model(x, nn::Dense(2)(a), "gqa");
               },
               [] {
                 return std::vector<Tensor>{uniform({3, 6, 4}, 17)};
               },
               io::OnnxImageLayout::NHWC,
               true});
  c.push_back({"main_job_mlp",
               [] {
                 nn::Sequential s(Shape{784});
                 s.add(nn::Dense(500, "relu"));
                 s.add(nn::Dense(10, "softmax"));
                 return nn::Model(std::move(s));
               },
               [] {
                 return std::vector<Tensor>{uniform({3, 784}, 11)};
               }});
  auto cnn = [] {
    nn::Sequential s(Shape{28, 28, 1});
    s.add(nn::Conv2D(8, 3, "same", "relu"));
    s.add(nn::MaxPooling2D());
    s.add(nn::Conv2D(16, 3, "same", "relu"));
    s.add(nn::MaxPooling2D());
    s.add(nn::Flatten());
    s.add(nn::Dense(10, "softmax"));
    return nn::Model(std::move(s));
  };
  c.push_back({"main_job_cnn", cnn, [] { return std::vector<Tensor>{uniform({3, 28, 28, 1}, 12)}; }});
  c.push_back({"main_job_cnn_nchw", cnn,
               [] {
                 return std::vector<Tensor>{uniform({3, 28, 28, 1}, 13)};
               },
               io::OnnxImageLayout::NCHW});
  c.push_back({"main_job_resnet",
               [] {
                 nn::Model m = fashion::resnet();
                 randomize_batch_norm(m);
                 return m;
               },
               [] {
                 return std::vector<Tensor>{uniform({3, 28, 28, 1}, 14)};
               }});
  // The transformer layers: a small GPT (embeddings, a pre-norm causal decoder block, a head), and an encoder
  // and a post-norm decoder with cross-attention and both padding masks.
  c.push_back({"tiny_gpt",
               [] {
                 auto x = nn::Input({6}, DType::Int32, "bytes");
                 auto h = nn::TokenAndPositionEmbedding(13, 8, 8)(x);
                 h = nn::TransformerDecoder(16, 2, 0.1f, "gelu", 1e-5f, true)(h);
                 return nn::Model(x, nn::Dense(13, "linear", false)(nn::LayerNormalization(1e-5f)(h)), "tiny_gpt");
               },
               [] {
                 return std::vector<Tensor>{ids({3, 6}, 13, 15)};
               },
               io::OnnxImageLayout::NHWC,
               true});
  c.push_back({"encoder_decoder",
               [] {
                 auto src = nn::Input({5, 8}, DType::Float32, "source");
                 auto tgt = nn::Input({4, 8}, DType::Float32, "target");
                 auto src_mask = nn::Input({5}, DType::Float32, "source_mask");
                 auto tgt_mask = nn::Input({4}, DType::Float32, "target_mask");
                 auto memory = nn::TransformerEncoder(12, 2)({src, src_mask});
                 auto y = nn::TransformerDecoder(12, 4)({tgt, memory, tgt_mask, src_mask});
                 return nn::Model({src, tgt, src_mask, tgt_mask}, {y}, "encoder_decoder");
               },
               [] {
                 Tensor sm = Tensor::full(Shape{3, 5}, 1.0f), tm = Tensor::full(Shape{3, 4}, 1.0f);
                 sm.data<float>()[4] = 0.0f, sm.data<float>()[8] = 0.0f, tm.data<float>()[3] = 0.0f;
                 return std::vector<Tensor>{uniform({3, 5, 8}, 16), uniform({3, 4, 8}, 17), sm, tm};
               },
               io::OnnxImageLayout::NHWC,
               true});
  // Imported models (PyTorch's exports) export again: their OnnxNode layers are tensorgrad ops too.
  for (const char* name : {"transformer_encoder", "masked_attention", "gru_bidirectional"})
    c.push_back({std::string("reexported_") + name,
                 [name] { return io::load_onnx(std::string(TENSORGRAD_ONNX_FIXTURES) + "/" + name + ".onnx"); },
                 [name] {
                   std::vector<Tensor> xs;
                   for (int k = 0;; ++k) {
                     const std::string p =
                         std::string(TENSORGRAD_ONNX_FIXTURES) + "/" + name + ".input_" + std::to_string(k) + ".pb";
                     if (!fs::exists(p)) break;
                     xs.push_back(test_support::read_onnx_tensor(p).rows(0, 2));
                   }
                   return xs;
                 }});
  return c;
}

// The inputs as the file takes them.
std::vector<Tensor> file_inputs(const Case& c, const std::vector<Tensor>& xs) {
  std::vector<Tensor> out;
  for (const Tensor& x : xs)
    out.push_back(c.layout == io::OnnxImageLayout::NCHW && x.shape().rank() == 4 ? nchw(x) : x);
  return out;
}

void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.numel(), want.numel()) << what;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const float g = got.data<float>()[i], w = want.data<float>()[i];
    ASSERT_NEAR(g, w, 1e-5f * std::abs(w) + 1e-6f) << what << " element " << i;
  }
}

// The exported file of a case (written once per test run).
std::string exported(const Case& c, nn::Model& m) {
  const std::string path = ::testing::TempDir() + "/export_" + c.name + ".onnx";
  io::save_onnx(m, path, {.image_layout = c.layout});
  return path;
}

}  // namespace

// Every case's file read back by load_onnx predicts what the model predicts.
TEST(OnnxExport, EveryExportReimportsToTheSamePredictions) {
  for (const Case& c : cases()) {
    if (c.runtime_only) continue;
    SCOPED_TRACE(c.name);
    nn::Model m = c.make();
    const std::vector<Tensor> xs = c.inputs();
    const std::vector<Tensor> want = m.predict(xs, xs[0].shape()[0]);
    nn::Model back = io::load_onnx(exported(c, m));
    const std::vector<Tensor> got = back.predict(file_inputs(c, xs), xs[0].shape()[0]);
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < want.size(); ++k) expect_close(got[k], want[k], "output " + std::to_string(k));
  }
}

// Every case's file run by ONNX Runtime gives what the model predicts, by output name.
TEST(OnnxExport, OnnxRuntimeRunsEveryExportToTheSamePredictions) {
  const std::string node = test_support::find_on_path("node");
  if (node.empty()) GTEST_SKIP() << "`node` is not on PATH: install Node.js (scripts/setup.sh --test)";
  const fs::path js = fs::path(TENSORGRAD_SOURCE_DIR) / "tests" / "onnx_js";
  if (!fs::exists(js / "node_modules" / "onnxruntime-node" / "package.json"))
    GTEST_SKIP() << "onnxruntime-node is not installed: run `npm ci --ignore-scripts --prefix tests/onnx_js` "
                    "(scripts/test.sh does)";
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    nn::Model m = c.make();
    const std::vector<Tensor> xs = c.inputs();
    const std::vector<Tensor> want = m.predict(xs, xs[0].shape()[0]);
    const std::string file = exported(c, m);
    const std::vector<Tensor> fx = file_inputs(c, xs);
    json feeds;
    const std::vector<std::string> in_names = m.input_names();
    for (size_t i = 0; i < fx.size(); ++i) {
      json t;
      t["type"] = fx[i].dtype() == DType::Int32 ? "int32" : "float32";
      std::vector<int64_t> dims;
      for (int d = 0; d < fx[i].shape().rank(); ++d) dims.push_back(fx[i].shape()[d]);
      t["dims"] = dims;
      t["data"] = json::array();
      for (int64_t k = 0; k < fx[i].numel(); ++k)
        t["data"].push_back(fx[i].dtype() == DType::Int32 ? double(fx[i].data<int32_t>()[k])
                                                          : double(fx[i].data<float>()[k]));
      feeds[in_names[i]] = t;
    }
    const std::string feeds_path = ::testing::TempDir() + "/feeds_" + c.name + ".json";
    std::ofstream(feeds_path) << feeds.dump();
    const test_support::RunResult run = test_support::run_capture({node, (js / "run.mjs").string(), file, feeds_path});
    ASSERT_EQ(run.exit_status, 0) << "node run.mjs " << file << " failed (its message is above)";
    const json got = json::parse(run.out);
    const std::vector<std::string> out_names = m.output_names();
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < want.size(); ++k) {
      const json& o = got.at(out_names[k]);
      std::vector<int64_t> dims = o.at("dims").get<std::vector<int64_t>>();
      std::vector<float> v;
      for (double x : o.at("data")) v.push_back(float(x));
      ASSERT_EQ(Shape(dims), want[k].shape()) << out_names[k];
      expect_close(Tensor::from_vector(std::span<const float>(v), Shape(dims)), want[k], out_names[k]);
    }
  }
}

namespace {

// Monte-Carlo dropout: dropout applied at inference too, which no file can compute.
class McDropout final : public nn::Layer {
 public:
  McDropout() : Layer("mc_dropout") {}
  const char* type() const override { return "McDropout"; }
  Shape build(const Shape& s) override { return s; }
  Value call(Builder& b, Value x, const nn::CallOptions&) override {
    OpAttrs at;
    at.rate = 0.5f;
    return b.apply(OpKind::Dropout, {x, b.rng_counter()}, at);
  }
  std::shared_ptr<nn::Layer> clone() const override { return nn::clone_layer(*this); }
};

// A rotary position embedding of x {L, 1, 4} per sample, at positions 0..L-1.
class RopeLayer final : public nn::Layer {
 public:
  RopeLayer() : Layer("rope") {}
  const char* type() const override { return "RopeLayer"; }
  Shape build(const Shape& s) override { return s; }
  Value call(Builder& b, Value x, const nn::CallOptions&) override {
    const Shape s = b.shape(x);
    std::vector<int32_t> p(static_cast<size_t>(s[1]));
    for (size_t i = 0; i < p.size(); ++i) p[i] = int32_t(i);
    positions_ = Tensor::from_vector(std::span<const int32_t>(p), Shape{s[1]});
    return b.rotary_embedding(x, b.parameter(positions_, "positions", false), {});
  }
  std::shared_ptr<nn::Layer> clone() const override { return nn::clone_layer(*this); }

 private:
  Tensor positions_;
};

}  // namespace

TEST(OnnxExport, BadInputIsATypedErrorAndLeavesNothingBehind) {
  nn::Sequential rope(Shape{3, 1, 4});
  rope.add(std::make_shared<RopeLayer>());
  EXPECT_TRUE(test_support::throws<ValueError>(
      [&] { io::save_onnx(rope, ::testing::TempDir() + "/rope.onnx"); },
      {"layer 'rope'", "rotary position embedding", "opset 23", "no ONNX form"}));

  nn::Sequential s(Shape{4});
  s.add(nn::Dense(3));
  s.add(std::make_shared<McDropout>());
  const std::string path = ::testing::TempDir() + "/mc_dropout.onnx";
  std::ofstream(path) << "an older file";
  EXPECT_TRUE(test_support::throws<ValueError>([&] { io::save_onnx(s, path); },
                                               {"layer 'mc_dropout'", "dropout", "no ONNX form"}));
  std::ifstream in(path);
  std::string kept((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(kept, "an older file");

  nn::Sequential ok(Shape{4});
  ok.add(nn::Dense(3));
  EXPECT_TRUE(
      test_support::throws<IOError>([&] { io::save_onnx(ok, "/nonexistent-folder/m.onnx"); }, {"/nonexistent-folder"}));
  EXPECT_FALSE(fs::exists("/nonexistent-folder"));
}

#endif  // TENSORGRAD_WITH_ONNX
