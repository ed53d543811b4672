// The eager LLaMA modules (ag/nn/llama.h): Hugging Face's parameter names,
// logits equal to the graph model's (nn::LlamaCausalLM, itself checked
// against a plain forward in tests/nn/test_llama.cpp) with the same weights,
// and gradients reaching every parameter.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>

#include "llama_reference.h"
#include "tensorgrad/tensorgrad.h"

using namespace tensorgrad;

namespace {

nn::LlamaConfig tiny(bool tied, RopePairing pairing) {
  nn::LlamaConfig c;
  c.vocabulary_size = 23;
  c.hidden_dim = 16;
  c.num_layers = 2;
  c.num_query_heads = 4;
  c.num_key_value_heads = 2;
  c.intermediate_dim = 20;
  c.max_sequence_length = 7;
  c.tie_word_embeddings = tied;
  c.rope_pairing = pairing;
  return c;
}

// W {out, in} (PyTorch) into a kernel {in, out...} (Keras).
void transpose_into(const Tensor& w, const Tensor& kernel) {
  const int64_t out = w.shape()[0], in = w.shape()[1];
  ASSERT_EQ(kernel.numel(), out * in);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) kernel.data<float>()[i * out + o] = w.data<float>()[o * in + i];
}

}  // namespace

TEST(AgLlama, HuggingFaceNamesAndTheGraphModelsLogits) {
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    const nn::LlamaConfig c = tiny(tied, tied ? RopePairing::Adjacent : RopePairing::Halves);
    ag::manual_seed(3);
    ag::nn::LlamaForCausalLM eager(c);
    const ag::nn::StateDict sd = eager.state_dict();
    EXPECT_TRUE(sd.contains("model.embed_tokens.weight"));
    EXPECT_TRUE(sd.contains("model.layers.1.self_attn.k_proj.weight"));
    EXPECT_TRUE(sd.contains("model.layers.0.mlp.down_proj.weight"));
    EXPECT_TRUE(sd.contains("model.layers.0.post_attention_layernorm.weight"));
    EXPECT_TRUE(sd.contains("model.norm.weight"));
    EXPECT_EQ(sd.contains("lm_head.weight"), !tied);
    EXPECT_EQ(sd.at("model.layers.0.self_attn.k_proj.weight").shape(), (Shape{8, 16}));
    std::map<std::string, Tensor> e;  // the parameters' own memory
    for (const auto& [name, t] : sd.items()) e[name] = t.data();

    // Norm weights away from 1, so that they show.
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> d(0.5f, 1.5f);
    for (auto& [name, t] : e)
      if (name.find("norm") != std::string::npos)
        for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);

    nn::LlamaCausalLM graph(c);
    std::map<std::string, Tensor> g;
    for (const nn::Weight& w : graph.weights()) g[w.name] = w.value;
    auto copy = [](const Tensor& from, const Tensor& to) {
      std::copy_n(from.data<float>(), from.numel(), to.data<float>());
    };
    copy(e.at("model.embed_tokens.weight"), g.at("token_embedding/embeddings"));
    copy(e.at("model.norm.weight"), g.at("sequence_output_layernorm/scale"));
    if (!tied) transpose_into(e.at("lm_head.weight"), g.at("token_embedding/reverse_embeddings"));
    for (int l = 0; l < 2; ++l) {
      const std::string pre = "model.layers." + std::to_string(l) + ".", k = "transformer_layer_" + std::to_string(l) + "/";
      copy(e.at(pre + "input_layernorm.weight"), g.at(k + "self_attention_layernorm.scale"));
      copy(e.at(pre + "post_attention_layernorm.weight"), g.at(k + "feedforward_layernorm.scale"));
      transpose_into(e.at(pre + "self_attn.q_proj.weight"), g.at(k + "self_attention.query_kernel"));
      transpose_into(e.at(pre + "self_attn.k_proj.weight"), g.at(k + "self_attention.key_kernel"));
      transpose_into(e.at(pre + "self_attn.v_proj.weight"), g.at(k + "self_attention.value_kernel"));
      transpose_into(e.at(pre + "self_attn.o_proj.weight"), g.at(k + "self_attention.output_kernel"));
      transpose_into(e.at(pre + "mlp.gate_proj.weight"), g.at(k + "feedforward_gate_kernel"));
      transpose_into(e.at(pre + "mlp.up_proj.weight"), g.at(k + "feedforward_up_kernel"));
      transpose_into(e.at(pre + "mlp.down_proj.weight"), g.at(k + "feedforward_down_kernel"));
    }
    const std::vector<int32_t> ids{5, 0, 22, 7, 7, 13, 2};
    Tensor x = Tensor::zeros(Shape{1, 7}, DType::Int32);
    std::copy(ids.begin(), ids.end(), x.data<int32_t>());
    const Tensor got = eager.forward(ag::Tensor(x)).data();
    ASSERT_EQ(got.shape(), (Shape{1, 7, 23}));
    const std::vector<double> want = test_support::llama_reference_logits(graph, ids);
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got.data<float>()[i], want[i], 1e-4 * (1 + std::abs(want[i])));
  }
}

TEST(AgLlama, EveryParameterGetsAGradient) {
  ag::nn::LlamaForCausalLM m(tiny(false, RopePairing::Halves));
  Tensor x = Tensor::zeros(Shape{2, 5}, DType::Int32);
  for (int i = 0; i < 10; ++i) x.data<int32_t>()[i] = (i * 7) % 23;
  ag::sum(m.forward(ag::Tensor(x)) * m.forward(ag::Tensor(x))).backward();
  for (const auto& [name, p] : m.named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    double norm = 0;
    for (float v : p.grad().data().to_vector()) norm += double(v) * v;
    EXPECT_GT(norm, 0.0) << name;
  }
}

TEST(AgLlama, BadShapesAndSettingsAreRefused) {
  EXPECT_THROW(ag::nn::RMSNorm(0), ValueError);
  EXPECT_THROW(ag::nn::RMSNorm(4, 0.0f), ValueError);
  ag::nn::RMSNorm norm(4);
  EXPECT_THROW(norm.forward(ag::zeros(Shape{2, 5})), ShapeError);
  nn::LlamaConfig c = tiny(false, RopePairing::Halves);
  c.num_key_value_heads = 3;
  EXPECT_THROW(ag::nn::LlamaForCausalLM{c}, ValueError);
  ag::nn::LlamaForCausalLM m(tiny(false, RopePairing::Halves));
  EXPECT_THROW(m.forward(ag::Tensor(Tensor::zeros(Shape{1, 8}, DType::Int32))), ShapeError);  // past the context
}
