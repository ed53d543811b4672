// The LLaMA family's layers and models (nn/llama.h) against a plain
// double-precision LLaMA forward (tests/support/llama_reference.h): logits
// for both rotary pairings, grouped and plain multi-head attention, tied
// and untied heads; gradients against finite differences; generation with
// the key-value cache against greedy decoding by full forwards; saving and
// loading; the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "llama_reference.h"
#include "model_gradient_check.h"
#include "tensorgrad/tensorgrad.h"
#include "test_files.h"
#include "test_support.h"

using namespace tensorgrad;

namespace {

nn::LlamaConfig tiny(int64_t hq, int64_t hkv, bool tied, RopePairing pairing) {
  nn::LlamaConfig c;
  c.vocabulary_size = 29;
  c.hidden_dim = 16;
  c.num_layers = 2;
  c.num_query_heads = hq;
  c.num_key_value_heads = hkv;
  c.intermediate_dim = 24;
  c.max_sequence_length = 9;
  c.rope_pairing = pairing;
  c.tie_word_embeddings = tied;
  c.layer_norm_epsilon = 1e-5f;
  return c;
}

// Weights far from their initial values, so every part of the model shows in the logits.
void randomize(const nn::Model& m, uint32_t seed) {
  std::mt19937 rng(seed);
  for (const nn::Weight& w : m.weights()) {
    const bool scale = w.name.find("scale") != std::string::npos;
    std::uniform_real_distribution<float> d(scale ? 0.5f : -0.5f, scale ? 1.5f : 0.5f);
    float* v = w.value.data<float>();
    for (int64_t i = 0; i < w.value.numel(); ++i) v[i] = d(rng);
  }
}

std::vector<int32_t> some_ids(int64_t n, int64_t vocabulary, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, int32_t(vocabulary - 1));
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int32_t& i : ids) i = d(rng);
  return ids;
}

Tensor logits_of(nn::Model& m, const std::vector<int32_t>& ids) {
  Tensor x = Tensor::zeros(Shape{1, int64_t(ids.size())}, DType::Int32);
  std::copy(ids.begin(), ids.end(), x.data<int32_t>());
  return m.predict(x, 1);
}

double max_rel_error(const Tensor& got, const std::vector<double>& want) {
  double worst = 0, scale = 1e-3;
  for (double v : want) scale = std::max(scale, std::abs(v));
  const float* g = got.data<float>();
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(double(g[i]) - want[i]) / scale);
  return worst;
}

struct Case {
  const char* name;
  int64_t hq, hkv;
  bool tied;
  RopePairing pairing;
};

const Case kCases[] = {
    {"mha_untied_halves", 4, 4, false, RopePairing::Halves},
    {"gqa_tied_adjacent", 4, 2, true, RopePairing::Adjacent},
    {"mqa_untied_adjacent", 4, 1, false, RopePairing::Adjacent},
    {"gqa_tied_halves", 2, 1, true, RopePairing::Halves},
};

}  // namespace

TEST(Llama, CausalLMLogitsEqualThePlainForwardForEveryAttentionAndPairing) {
  for (const Case& k : kCases) {
    SCOPED_TRACE(k.name);
    nn::LlamaCausalLM m(tiny(k.hq, k.hkv, k.tied, k.pairing));
    randomize(m, 7);
    const std::vector<int32_t> ids = some_ids(9, 29, 3);
    const Tensor got = logits_of(m, ids);
    ASSERT_EQ(got.shape(), (Shape{1, 9, 29}));
    EXPECT_LT(max_rel_error(got, test_support::llama_reference_logits(m, ids)), 1e-5);
  }
}

TEST(Llama, RopeScalingFactorDividesThePositions) {
  nn::LlamaConfig c = tiny(4, 2, false, RopePairing::Halves);
  c.rope_scaling_factor = 4.0f;
  c.rope_max_wavelength = 500.0f;
  nn::LlamaCausalLM m(c);
  randomize(m, 8);
  const std::vector<int32_t> ids = some_ids(9, 29, 4);
  EXPECT_LT(max_rel_error(logits_of(m, ids), test_support::llama_reference_logits(m, ids)), 1e-5);
}

TEST(Llama, GradientsOfEveryWeightMatchFiniteDifferences) {
  for (const Case& k : {kCases[0], kCases[1]}) {
    SCOPED_TRACE(k.name);
    nn::LlamaConfig c = tiny(k.hq, k.hkv, k.tied, k.pairing);
    c.max_sequence_length = 5, c.num_layers = 1, c.vocabulary_size = 11;
    nn::LlamaCausalLM m(c);
    randomize(m, 9);
    Tensor ids = Tensor::zeros(Shape{2, 5});
    const std::vector<int32_t> v = some_ids(10, 11, 5);
    for (int i = 0; i < 10; ++i) ids.data<float>()[i] = float(v[size_t(i)]);
    EXPECT_EQ(test_support::check_gradients(m, {ids}, 3, 2e-3f), "");
  }
}

TEST(Llama, GenerationWithTheCacheIsGreedyDecodingByFullForwards) {
  for (const Case& k : {kCases[1], kCases[0]}) {
    SCOPED_TRACE(k.name);
    nn::LlamaCausalLM m(tiny(k.hq, k.hkv, k.tied, k.pairing));
    randomize(m, 11);
    nn::CausalLM lm(m);
    EXPECT_EQ(lm.capacity(), 9);
    const std::vector<int32_t> prompt{3, 1, 4};
    const std::vector<int32_t> made = lm.generate(prompt, 6);
    std::vector<int32_t> text = prompt;
    for (size_t i = 0; i < made.size(); ++i) {
      const std::vector<double> z = test_support::llama_reference_logits(m, text);
      const int64_t last = int64_t(text.size()) - 1, V = 29;
      const int32_t want = int32_t(std::max_element(z.begin() + last * V, z.begin() + (last + 1) * V) -
                                   (z.begin() + last * V));
      EXPECT_EQ(made[i], want) << "token " << i;
      text.push_back(made[i]);
    }
    // next() gives the full forward's logits position by position.
    lm.reset();
    const std::vector<int32_t> ids = some_ids(9, 29, 6);
    const std::vector<double> z = test_support::llama_reference_logits(m, ids);
    for (size_t t = 0; t < ids.size(); ++t) {
      const Tensor& got = lm.next(ids[t]);
      for (int64_t v = 0; v < 29; ++v)
        ASSERT_NEAR(got.data<float>()[v], z[t * 29 + size_t(v)], 1e-4) << "position " << t;
    }
  }
}

TEST(Llama, TrainsToPredictARepeatedSequence) {
  manual_seed(1);
  nn::LlamaConfig c = tiny(4, 2, true, RopePairing::Halves);
  c.max_sequence_length = 8, c.vocabulary_size = 8;
  nn::LlamaCausalLM m(c);
  m.compile(OptimizerSpec::adam(1e-2f), "sparse_categorical_crossentropy");
  Tensor x = Tensor::zeros(Shape{8, 8}, DType::Int32), y = Tensor::zeros(Shape{8, 8}, DType::Int32);
  for (int r = 0; r < 8; ++r)
    for (int t = 0; t < 8; ++t) x.data<int32_t>()[r * 8 + t] = (r + t) % 8, y.data<int32_t>()[r * 8 + t] = (r + t + 1) % 8;
  const nn::History h = m.fit(x, y, {.epochs = 60, .batch_size = 8, .verbose = 0});
  const std::vector<double>& loss = h.history.at("loss");
  EXPECT_GT(loss.front(), 1.5);  // about log(8) at the start
  EXPECT_LT(loss.back(), 0.05);  // every next token is known from the current one
}

TEST(Llama, SavedAndLoadedWithTheModelFormatPredictsTheSame) {
  nn::LlamaCausalLM m(tiny(4, 2, false, RopePairing::Adjacent));
  randomize(m, 12);
  const test_support::TempDir dir;
  const std::string path = dir / "llama_model.gguf";
  io::save_model(m, path);
  nn::Model back = io::load_model(path);
  const std::vector<int32_t> ids = some_ids(9, 29, 7);
  const Tensor a = logits_of(m, ids), b = logits_of(back, ids);
  for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(a.data<float>()[i], b.data<float>()[i]);
}

TEST(Llama, LayersAloneComputeTheirFormulas) {
  // RMSNormalization: x / sqrt(mean(x^2) + eps) * scale.
  auto in = nn::Input({3, 4});
  nn::Model rms(in, nn::RMSNormalization(0.5f)(in));
  Tensor x = Tensor::zeros(Shape{1, 3, 4});
  for (int i = 0; i < 12; ++i) x.data<float>()[i] = float(i) - 5.0f;
  const Tensor y = rms.predict(x, 1);
  for (int r = 0; r < 3; ++r) {
    double ss = 0;
    for (int e = 0; e < 4; ++e) ss += std::pow(double(r * 4 + e) - 5.0, 2);
    for (int e = 0; e < 4; ++e)
      EXPECT_NEAR(y.data<float>()[r * 4 + e], (double(r * 4 + e) - 5.0) / std::sqrt(ss / 4 + 0.5), 1e-5);
  }
  // RotaryEmbedding on {T, heads, D}, adjacent pairs: step t, pair i turns by t * theta^(-2i/D).
  auto seq = nn::Input({3, 1, 4});
  nn::Model rot(seq, nn::RotaryEmbedding(100.0f, 1.0f, RopePairing::Adjacent)(seq));
  Tensor ones = Tensor::zeros(Shape{1, 3, 1, 4});
  std::fill_n(ones.data<float>(), ones.numel(), 1.0f);
  const Tensor r = rot.predict(ones, 1);
  for (int t = 0; t < 3; ++t)
    for (int i = 0; i < 2; ++i) {
      const double a = t * std::pow(100.0, -2.0 * i / 4.0);
      EXPECT_NEAR(r.data<float>()[t * 4 + 2 * i], std::cos(a) - std::sin(a), 1e-5);
      EXPECT_NEAR(r.data<float>()[t * 4 + 2 * i + 1], std::cos(a) + std::sin(a), 1e-5);
    }
}

TEST(Llama, ConfigErrorsNameTheSetting) {
  auto expect = [](nn::LlamaConfig c, const std::string& words) {
    try {
      nn::LlamaCausalLM m(c);
      ADD_FAILURE() << "no error for " << words;
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  nn::LlamaConfig c = tiny(4, 2, false, RopePairing::Halves);
  c.num_key_value_heads = 3;
  expect(c, "num_key_value_heads (3) must divide num_query_heads (4)");
  c = tiny(4, 2, false, RopePairing::Halves);
  c.num_query_heads = 3;
  expect(c, "num_query_heads (3) must divide hidden_dim (16)");
  c = tiny(4, 2, false, RopePairing::Halves);
  c.layer_norm_epsilon = 0.0f;
  expect(c, "layer_norm_epsilon must be > 0");
  c = tiny(4, 2, false, RopePairing::Halves);
  c.vocabulary_size = 0;
  expect(c, "vocabulary_size must be >= 1");
  EXPECT_THROW(nn::GroupedQueryAttention(8, 4, 3), ValueError);
  EXPECT_THROW(nn::RMSNormalization(-1.0f), ValueError);
  EXPECT_THROW(nn::RotaryEmbedding(10000.0f, 1.0f, RopePairing::Halves, 3), ValueError);
}
