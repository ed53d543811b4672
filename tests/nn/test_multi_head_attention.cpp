// nn::MultiHeadAttention (keras.layers.MultiHeadAttention) against PyTorch's
// nn.MultiheadAttention with the same weights (tests/fixtures/
// make_mha_reference.py, float64): outputs and the gradients of the inputs
// and of every weight, for cross-attention with a mask and causal
// self-attention; causality itself; saving, loading and cloning; bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "fixtures/mha_reference.h"
#include "tensorgrad/tensorgrad.h"
#include "test_support.h"

using namespace tensorgrad;
namespace ref = tensorgrad_fixtures::mha;

namespace {

using test_support::from_array;

// One fixture case's tensors, by name, with its shapes.
struct Fixture {
  int64_t b, tq, tv, e, heads;
  bool causal, masked;
  std::map<std::string, Tensor> t;
};

#define TG_MHA_FIXTURE(c)                                                                                              \
  [] {                                                                                                                 \
    Fixture f{ref::c##_B, ref::c##_Tq, ref::c##_Tv, ref::c##_E, ref::c##_heads, ref::c##_causal, ref::c##_masked, {}}; \
    const int64_t kd = f.e / f.heads;                                                                                  \
    const Shape q{f.b, f.tq, f.e}, kv{f.b, f.tv, f.e}, kernel{f.e, f.heads, kd}, bias{f.heads, kd},                    \
        out_kernel{f.heads, kd, f.e};                                                                                  \
    f.t["query"] = from_array(ref::c##_query, q), f.t["key"] = from_array(ref::c##_key, kv);                           \
    f.t["value"] = from_array(ref::c##_value, kv), f.t["mask"] = from_array(ref::c##_mask, {f.b, f.tq, f.tv});         \
    f.t["w"] = from_array(ref::c##_w, q), f.t["y"] = from_array(ref::c##_y, q);                                        \
    f.t["grad_query"] = from_array(ref::c##_grad_query, q), f.t["grad_key"] = from_array(ref::c##_grad_key, kv);       \
    f.t["grad_value"] = from_array(ref::c##_grad_value, kv);                                                           \
    f.t["query_kernel"] = from_array(ref::c##_query_kernel, kernel),                                                   \
    f.t["query_bias"] = from_array(ref::c##_query_bias, bias);                                                         \
    f.t["key_kernel"] = from_array(ref::c##_key_kernel, kernel),                                                       \
    f.t["key_bias"] = from_array(ref::c##_key_bias, bias);                                                             \
    f.t["value_kernel"] = from_array(ref::c##_value_kernel, kernel),                                                   \
    f.t["value_bias"] = from_array(ref::c##_value_bias, bias);                                                         \
    f.t["output_kernel"] = from_array(ref::c##_output_kernel, out_kernel);                                             \
    f.t["output_bias"] = from_array(ref::c##_output_bias, {f.e});                                                      \
    f.t["grad_query_kernel"] = from_array(ref::c##_grad_query_kernel, kernel);                                         \
    f.t["grad_query_bias"] = from_array(ref::c##_grad_query_bias, bias);                                               \
    f.t["grad_key_kernel"] = from_array(ref::c##_grad_key_kernel, kernel);                                             \
    f.t["grad_key_bias"] = from_array(ref::c##_grad_key_bias, bias);                                                   \
    f.t["grad_value_kernel"] = from_array(ref::c##_grad_value_kernel, kernel);                                         \
    f.t["grad_value_bias"] = from_array(ref::c##_grad_value_bias, bias);                                               \
    f.t["grad_output_kernel"] = from_array(ref::c##_grad_output_kernel, out_kernel);                                   \
    f.t["grad_output_bias"] = from_array(ref::c##_grad_output_bias, {f.e});                                            \
    return f;                                                                                                          \
  }()

std::vector<Fixture> fixtures() { return {TG_MHA_FIXTURE(cross), TG_MHA_FIXTURE(causal)}; }

// The fixture's model: {query, value, key[, mask]} -> MultiHeadAttention, with the fixture's weights.
nn::Model model_of(const Fixture& f) {
  auto query = nn::Input({f.tq, f.e}, DType::Float32, "query");
  auto value = nn::Input({f.tv, f.e}, DType::Float32, "value");
  auto key = nn::Input({f.tv, f.e}, DType::Float32, "key");
  std::vector<nn::SymbolicTensor> ins{query, value, key};
  if (f.masked) ins.push_back(nn::Input({f.tq, f.tv}, DType::Float32, "mask"));
  auto mha = std::make_shared<nn::MultiHeadAttention>(f.heads, f.e / f.heads, 0, 0.0f, true, 0, f.causal);
  mha->set_name("mha");
  nn::Model m(ins, {(*mha)(ins)}, "attention");
  for (const nn::Weight& w : m.weights()) {
    Tensor slot = w.value;
    slot.copy_from(f.t.at(w.name.substr(w.name.find('/') + 1)));
  }
  return m;
}

std::vector<Tensor> inputs_of(const Fixture& f) {
  std::vector<Tensor> xs{f.t.at("query"), f.t.at("value"), f.t.at("key")};
  if (f.masked) xs.push_back(f.t.at("mask"));
  return xs;
}

void expect_close(const Tensor& got, const Tensor& want, double rtol, double atol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double g = got.data<float>()[i], w = want.data<float>()[i];
    EXPECT_NEAR(g, w, atol + rtol * std::abs(w)) << what << " element " << i;
  }
}

}  // namespace

TEST(MultiHeadAttention, MatchesPyTorchsOutputs) {
  for (const Fixture& f : fixtures()) {
    SCOPED_TRACE(f.causal ? "causal" : "cross");
    nn::Model m = model_of(f);
    expect_close(m.predict(inputs_of(f), f.b).at(0), f.t.at("y"), 1e-4, 1e-5, "y");
  }
}

// d(sum(y * w)) for the inputs and every weight, against PyTorch's.
TEST(MultiHeadAttention, MatchesPyTorchsGradients) {
  for (const Fixture& f : fixtures()) {
    SCOPED_TRACE(f.causal ? "causal" : "cross");
    nn::Model m = model_of(f);
    const ModelFunction fn = m.model_function();
    Graph g;
    const std::vector<Tensor> xs = inputs_of(f);
    std::vector<Value> in;
    for (size_t i = 0; i < xs.size(); ++i) in.push_back(g.input(fn.inputs[i].name, xs[i].shape()));
    const Value y = fn.forward(g, in, false).at(0);
    const Value w = g.input("w", f.t.at("w").shape());
    const Value loss = g.sum(g.mul(y, w));
    std::vector<Value> wrt{in[0], in[2], in[1]};  // query, key, value
    const std::vector<Value> params = g.trainable_parameters();
    wrt.insert(wrt.end(), params.begin(), params.end());
    const std::vector<Value> grads = g.gradients(loss, wrt);
    std::vector<std::string> names{"grad_query", "grad_key", "grad_value"};
    for (Value p : params) names.push_back("grad_" + g.node(p).name.substr(g.node(p).name.find('/') + 1));
    Executable exe(std::move(g), grads);
    for (size_t i = 0; i < xs.size(); ++i) exe.bind(in[i], xs[i]);
    exe.bind(w, f.t.at("w"));
    exe.run();
    ASSERT_EQ(params.size(), 8u);
    for (size_t i = 0; i < grads.size(); ++i)
      expect_close(exe.output(grads[i]), f.t.at(names[i]), 1e-4, 1e-5, names[i]);
  }
}

// use_causal_mask: changing the inputs at the last position changes no output before it.
TEST(MultiHeadAttention, CausalOutputsIgnoreLaterPositions) {
  const Fixture f = fixtures().at(1);
  ASSERT_TRUE(f.causal);
  nn::Model m = model_of(f);
  std::vector<Tensor> xs = inputs_of(f);
  const Tensor before = m.predict(xs, f.b).at(0).clone();
  for (Tensor& x : xs) {
    x = x.clone();
    for (int64_t b = 0; b < f.b; ++b)
      for (int64_t e = 0; e < f.e; ++e) x.data<float>()[(b * f.tq + f.tq - 1) * f.e + e] += 3.0f;
  }
  const Tensor after = m.predict(xs, f.b).at(0);
  for (int64_t b = 0; b < f.b; ++b)
    for (int64_t t = 0; t < f.tq; ++t)
      for (int64_t e = 0; e < f.e; ++e) {
        const int64_t i = (b * f.tq + t) * f.e + e;
        if (t < f.tq - 1)
          EXPECT_EQ(after.data<float>()[i], before.data<float>()[i]) << "step " << t;
        else
          EXPECT_NE(after.data<float>()[i], before.data<float>()[i]) << "step " << t;
      }
}

TEST(MultiHeadAttention, SavesLoadsAndClones) {
  const Fixture f = fixtures().at(0);
  nn::Model m = model_of(f);
  const std::string path = ::testing::TempDir() + "/mha.gguf";
  io::save_model(m, path);
  nn::Model back = io::load_model(path);
  const std::vector<Tensor> xs = inputs_of(f);
  EXPECT_EQ(back.predict(xs, f.b).at(0).to_vector(), m.predict(xs, f.b).at(0).to_vector());
  const auto copy = m.get_layer("mha")->clone();
  EXPECT_EQ(copy->config().get_int("num_heads"), 2);
  EXPECT_EQ(copy->weights().size(), 8u);
  std::filesystem::remove(path);
}

TEST(MultiHeadAttention, BadInputIsATypedError) {
  EXPECT_TRUE(test_support::throws<ValueError>([] { nn::MultiHeadAttention(0, 4); }, {"num_heads", "got num_heads 0"}));
  EXPECT_TRUE(test_support::throws<ValueError>([] { nn::MultiHeadAttention(2, 4, 0, 1.0f); }, {"dropout", "[0, 1)"}));
  auto q = nn::Input({4, 6}), v = nn::Input({5, 6}), k = nn::Input({3, 6});
  EXPECT_TRUE(test_support::throws<ShapeError>(
      [&] {
        nn::MultiHeadAttention(2, 3)({q, v, k});
      },
      {"key and value", "{3, 6}", "{5, 6}"}));
  EXPECT_TRUE(test_support::throws<ValueError>([&] { nn::MultiHeadAttention(2, 3)(q); }, {"{query, value}"}));
  auto bad_mask = nn::Input({5, 4});
  EXPECT_TRUE(test_support::throws<ShapeError>(
      [&] {
        nn::MultiHeadAttention(2, 3)({q, v, v, bad_mask});
      },
      {"attention_mask", "{4, 5}", "{5, 4}"}));
}
