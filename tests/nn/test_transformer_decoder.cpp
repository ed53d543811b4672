// nn::TransformerDecoder (KerasHub's block) against PyTorch with the same
// weights (tests/fixtures/make_decoder_reference.py, float64): with
// cross-attention, as nn.TransformerDecoderLayer (post-norm with padding
// masks, pre-norm with GELU), and without, as a causal
// nn.TransformerEncoderLayer (a GPT block); outputs and the gradients of the
// inputs and of every weight. Then nn::CausalLM: its key-value cache gives
// the full forward's logits position by position, generation equals greedy
// decoding by full forwards, and its errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "../../apps/char_gpt.h"
#include "fixtures/decoder_reference.h"
#include "model_gradient_check.h"
#include "tensorgrad/tensorgrad.h"
#include "test_support.h"

using namespace tensorgrad;
namespace ref = tensorgrad_fixtures::decoder;

namespace {

using test_support::from_array;

struct Fixture {
  std::string name;
  int64_t b, t, s, e, heads, ff;
  std::string activation;
  bool normalize_first, padded;
  Tensor x, encoder, decoder_mask, encoder_mask, w, y, grad_x, grad_encoder;
  std::vector<std::string> names;
  std::vector<const float*> weights, grads;
};

#define TG_DECODER_FIXTURE(c)                                                                             \
  [] {                                                                                                    \
    Fixture f;                                                                                            \
    f.name = #c, f.b = ref::c##_B, f.t = ref::c##_T, f.s = ref::c##_S, f.e = ref::c##_E;                  \
    f.heads = ref::c##_heads, f.ff = ref::c##_ff, f.activation = ref::c##_activation;                     \
    f.normalize_first = ref::c##_normalize_first, f.padded = ref::c##_padded;                             \
    const Shape sx{f.b, f.t, f.e}, se{f.b, std::max<int64_t>(f.s, 1), f.e};                               \
    f.x = from_array(ref::c##_x, sx), f.w = from_array(ref::c##_w, sx), f.y = from_array(ref::c##_y, sx); \
    f.grad_x = from_array(ref::c##_grad_x, sx), f.encoder = from_array(ref::c##_encoder, se);             \
    f.grad_encoder = from_array(ref::c##_grad_encoder, se);                                               \
    f.decoder_mask = from_array(ref::c##_decoder_padding_mask, {f.b, f.t});                               \
    f.encoder_mask = from_array(ref::c##_encoder_padding_mask, {f.b, se[1]});                             \
    f.names.assign(std::begin(ref::c##_weight_names), std::end(ref::c##_weight_names));                   \
    f.weights.assign(std::begin(ref::c##_weights), std::end(ref::c##_weights));                           \
    f.grads.assign(std::begin(ref::c##_grads), std::end(ref::c##_grads));                                 \
    return f;                                                                                             \
  }()

std::vector<Fixture> fixtures() {
  return {TG_DECODER_FIXTURE(cross_post_norm), TG_DECODER_FIXTURE(cross_pre_norm), TG_DECODER_FIXTURE(causal_pre_norm)};
}

// The fixture's inputs in KerasHub's order: decoder_sequence, [encoder_sequence], [decoder_padding_mask,
// [encoder_padding_mask]].
std::vector<Tensor> inputs_of(const Fixture& f) {
  std::vector<Tensor> in{f.x};
  if (f.s) in.push_back(f.encoder);
  if (f.padded) in.push_back(f.decoder_mask);
  if (f.padded && f.s) in.push_back(f.encoder_mask);
  return in;
}

nn::Model model_of(const Fixture& f) {
  std::vector<nn::SymbolicTensor> ins;
  for (const Tensor& t : inputs_of(f)) {
    std::vector<int64_t> d(t.shape().begin() + 1, t.shape().end());
    ins.push_back(nn::Input(Shape(std::span<const int64_t>(d)), DType::Float32, "in" + std::to_string(ins.size())));
  }
  auto block = std::make_shared<nn::TransformerDecoder>(f.ff, f.heads, 0.0f, f.activation, 1e-5f, f.normalize_first);
  block->set_name("decoder");
  nn::Model m(ins, {(*block)(ins)}, "decoder_model");
  const std::vector<nn::Weight> ws = m.weights();
  EXPECT_EQ(ws.size(), f.names.size());
  for (size_t i = 0; i < std::min(ws.size(), f.names.size()); ++i) {
    EXPECT_EQ(ws[i].name, "decoder/" + f.names[i]);
    Tensor slot = ws[i].value;
    std::copy(f.weights[i], f.weights[i] + slot.numel(), slot.data<float>());
  }
  return m;
}

void expect_close(const float* got, const float* want, int64_t n, const std::string& what) {
  for (int64_t i = 0; i < n; ++i)
    EXPECT_NEAR(got[i], want[i], 2e-5 + 1e-4 * std::abs(want[i])) << what << " element " << i;
}

}  // namespace

TEST(TransformerDecoder, MatchesPyTorch) {
  for (const Fixture& f : fixtures()) {
    SCOPED_TRACE(f.name);
    nn::Model m = model_of(f);
    const Tensor y = m.predict(inputs_of(f), f.b).at(0);
    expect_close(y.data<float>(), f.y.data<float>(), f.y.numel(), "y");
  }
}

TEST(TransformerDecoder, MatchesPyTorchsGradients) {
  for (const Fixture& f : fixtures()) {
    SCOPED_TRACE(f.name);
    const std::vector<size_t> wrt = f.s ? std::vector<size_t>{0, 1} : std::vector<size_t>{0};  // x, the encoder's
    const test_support::ProjectionGradients got =
        test_support::projection_gradients(model_of(f), inputs_of(f), f.w, wrt);
    expect_close(got.inputs[0].data<float>(), f.grad_x.data<float>(), f.grad_x.numel(), "grad x");
    if (f.s)
      expect_close(got.inputs[1].data<float>(), f.grad_encoder.data<float>(), f.grad_encoder.numel(), "grad enc");
    ASSERT_EQ(got.weights.size(), f.names.size());
    for (const auto& [name, grad] : got.weights) {
      const size_t k = size_t(std::find(f.names.begin(), f.names.end(), name) - f.names.begin());
      ASSERT_LT(k, f.names.size()) << name;
      expect_close(grad.data<float>(), f.grads[k], grad.numel(), "grad " + name);
    }
  }
}

TEST(TransformerDecoder, SavesLoadsAndClones) {
  for (const Fixture& f : fixtures()) {
    SCOPED_TRACE(f.name);
    nn::Model m = model_of(f);
    const std::string path = ::testing::TempDir() + "/decoder.gguf";
    io::save_model(m, path);
    const std::vector<float> want = m.predict(inputs_of(f), f.b).at(0).to_vector();
    EXPECT_EQ(io::load_model(path).predict(inputs_of(f), f.b).at(0).to_vector(), want);
    EXPECT_EQ(m.clone().predict(inputs_of(f), f.b).at(0).to_vector(), want);
    std::filesystem::remove(path);
  }
}

TEST(TransformerDecoder, BadInputIsATypedError) {
  EXPECT_TRUE(test_support::throws<ValueError>([] { nn::TransformerDecoder(0, 2); }, {"intermediate_dim"}));
  EXPECT_TRUE(test_support::throws<ValueError>([] { nn::TransformerDecoder(8, 2, 1.0f); }, {"dropout", "[0, 1)"}));
  EXPECT_TRUE(test_support::throws<ShapeError>(
      [] {
        nn::TransformerDecoder(8, 3)(nn::Input({5, 8}));
      },
      {"3 heads", "{5, 8}"}));
  EXPECT_TRUE(test_support::throws<ShapeError>(
      [] {
        nn::TransformerDecoder(8, 2)({nn::Input({5, 8}), nn::Input({4})});
      },
      {"decoder_padding_mask", "{5}", "{4}"}));
  EXPECT_TRUE(test_support::throws<ShapeError>(
      [] {
        nn::TransformerDecoder(8, 2)({nn::Input({5, 8}), nn::Input({3, 6}), nn::Input({5}), nn::Input({5})});
      },
      {"encoder_padding_mask", "{3}", "{5}"}));
  EXPECT_TRUE(test_support::throws<ValueError>(
      [] {
        nn::TransformerDecoder(8, 2)({nn::Input({5, 8}), nn::Input({5}), nn::Input({5})});
      },
      {"without an encoder_sequence", "3 inputs"}));
}

namespace {

// A small GPT: token and position embeddings, dropout, two pre-norm decoder
// blocks, a final LayerNormalization and an untied head without bias.
nn::Model tiny_gpt(int64_t vocab, int64_t context) {
  auto ids = nn::Input({context}, DType::Int32, "ids");
  auto h = nn::TokenAndPositionEmbedding(vocab, context, 8)(ids);
  h = nn::Dropout(0.1f)(h);
  for (int i = 0; i < 2; ++i) h = nn::TransformerDecoder(16, 2, 0.1f, "gelu", 1e-5f, true)(h);
  return nn::Model(ids, nn::Dense(vocab, "linear", false)(nn::LayerNormalization()(h)), "tiny_gpt");
}

}  // namespace

// The cache's logits at each position are the full forward's at that
// position (the full forward of the whole window sees the same prefix, as
// the blocks are causal).
TEST(CausalLM, TheKeyValueCacheGivesTheFullForwardsLogits) {
  constexpr int64_t kV = 13, kC = 9;
  manual_seed(5);
  nn::Model m = tiny_gpt(kV, kC);
  std::mt19937 rng(2);
  std::vector<int32_t> tokens(kC);
  for (int32_t& t : tokens) t = int32_t(rng() % kV);
  const Tensor full = m.predict(Tensor::from_vector(std::span<const int32_t>(tokens), Shape{1, kC}));  // {1, C, V}
  nn::CausalLM lm(m);
  EXPECT_EQ(lm.capacity(), kC);
  EXPECT_EQ(lm.vocabulary_size(), kV);
  for (int round = 0; round < 2; ++round) {  // a reset cache serves again
    for (int64_t p = 0; p < kC; ++p) {
      const Tensor& logits = lm.next(tokens[size_t(p)]);
      for (int64_t v = 0; v < kV; ++v)
        EXPECT_NEAR(logits.data<float>()[v], full.data<float>()[p * kV + v], 2e-5)
            << "round " << round << " position " << p << " logit " << v;
    }
    EXPECT_EQ(lm.position(), kC);
    EXPECT_TRUE(test_support::throws<ValueError>([&] { lm.next(0); }, {"all 9 positions", "reset"}));
    lm.reset();
  }
  EXPECT_TRUE(test_support::throws<IndexError>([&] { lm.next(int32_t(kV)); }, {"token 13", "[0, 13)"}));
}

namespace {

// The window generate documents, run through the whole model (predict at
// batch 1): each token is the largest logit at the window's last position;
// the window is the whole text while it fits in `capacity` positions, and
// when a chosen token would overflow it, the last capacity / 2 tokens of the
// text (that token included); a longer prompt starts from its last
// capacity / 2 tokens.
std::vector<int32_t> greedy_by_full_forwards(nn::Model& m, const std::vector<int32_t>& prompt, size_t n,
                                             int64_t capacity, int64_t vocabulary) {
  const size_t c = size_t(capacity), half = std::max<size_t>(c / 2, 1);
  std::vector<int32_t> text = prompt, made;
  size_t start = prompt.size() <= c ? 0 : prompt.size() - half;
  for (size_t i = 0; i < n; ++i) {
    std::vector<int32_t> window(text.begin() + std::ptrdiff_t(start), text.end());
    const size_t last = window.size() - 1;
    window.resize(c, 0);  // positions after the window do not reach it (causal)
    const Tensor y = m.predict(Tensor::from_vector(std::span<const int32_t>(window), Shape{1, capacity}));
    const float* z = y.data<float>() + int64_t(last) * vocabulary;
    made.push_back(int32_t(std::max_element(z, z + vocabulary) - z));
    text.push_back(made.back());
    if (text.size() - start > c) start = text.size() - half;
  }
  return made;
}

}  // namespace

// Greedy generation picks, at every step, the largest logit of a full
// forward over the documented window: for prompts of every length from 1 to
// past twice the capacity (a prompt that fills the cache exactly included),
// each generating past twice the capacity.
TEST(CausalLM, GreedyGenerationEqualsFullForwards) {
  constexpr int64_t kV = 11, kC = 6;
  manual_seed(8);
  nn::Model m = tiny_gpt(kV, kC);
  nn::CausalLM lm(m);
  std::mt19937 rng(4);
  for (size_t length = 1; length <= size_t(2 * kC + 1); ++length)
    for (int draw = 0; draw < 4; ++draw) {
      std::vector<int32_t> prompt(length);
      for (int32_t& t : prompt) t = int32_t(rng() % kV);
      const std::vector<int32_t> made = lm.generate(prompt, 2 * kC + 2);
      EXPECT_EQ(made, greedy_by_full_forwards(m, prompt, made.size(), kC, kV))
          << "a prompt of " << length << " tokens, draw " << draw;
    }
  const std::vector<int32_t> prompt{3, 1, 4};
  // Sampling at a temperature draws only among the top_k, reproducibly per seed.
  const std::vector<int32_t> a = lm.generate(prompt, 20, {.temperature = 1.0f, .top_k = 2, .seed = 3});
  EXPECT_EQ(lm.generate(prompt, 20, {.temperature = 1.0f, .top_k = 2, .seed = 3}), a);
  EXPECT_TRUE(test_support::throws<ValueError>([&] { lm.generate({}, 3); }, {"at least one token"}));
  EXPECT_TRUE(
      test_support::throws<ValueError>([&] { lm.generate(prompt, 3, {.temperature = -1.0f}); }, {"temperature"}));
}

TEST(CausalLM, TopKSamplingDrawsOnlyAmongTheLargest) {
  const std::vector<float> z{0.0f, 3.0f, -1.0f, 2.9f, 1.0f};
  const Tensor logits = Tensor::from_vector(std::span<const float>(z), Shape{5});
  std::mt19937_64 rng(1);
  int counts[5] = {};
  for (int i = 0; i < 2000; ++i) ++counts[nn::CausalLM::sample(logits, {.temperature = 0.5f, .top_k = 2}, rng)];
  EXPECT_EQ(counts[0] + counts[2] + counts[4], 0);
  // exp((3 - 2.9) / 0.5) = 1.22: token 1 is drawn 55% of the time; 4 standard deviations is 4.5%.
  EXPECT_NEAR(counts[1] / 2000.0, 1.0 / (1.0 + std::exp(-0.2)), 0.045);
  EXPECT_EQ(nn::CausalLM::sample(logits, {}, rng), 1);
  std::vector<float> bad = z;
  bad[2] = NAN;
  EXPECT_TRUE(test_support::throws<ValueError>(
      [&] { nn::CausalLM::sample(Tensor::from_vector(std::span<const float>(bad), Shape{5}), {}, rng); },
      {"logit 2", "non-finite"}));
}

TEST(CausalLM, ModelsItCannotRunAreRefused) {
  auto x = nn::Input({4}, DType::Int32, "ids");
  auto h = nn::TokenAndPositionEmbedding(7, 4, 4)(x);
  nn::Model with_mha(x, nn::Dense(7)((nn::MultiHeadAttention(2, 2))({h, h})), "mha");
  EXPECT_TRUE(test_support::throws<ValueError>([&] { nn::CausalLM{with_mha}; }, {"MultiHeadAttention", "position"}));
  auto f = nn::Input({4, 3}, DType::Float32, "f");
  nn::Model floats(f, nn::Dense(7)(f), "floats");
  EXPECT_TRUE(test_support::throws<ValueError>([&] { nn::CausalLM{floats}; }, {"token ids {steps}", "{4, 3}"}));
}

// Padding masks: a sequence padded at the end with garbage, its padding
// masked, gives at its tokens what the unpadded sequence gives alone, for the
// encoder (padding_mask) and the decoder (decoder_padding_mask, and the
// encoder sequence's encoder_padding_mask).
TEST(TransformerDecoder, PaddingMasksEqualTheUnpaddedSequence) {
  constexpr int64_t kE = 8, kT = 4, kPad = 3, kS = 3, kSPad = 2;
  manual_seed(21);
  std::mt19937 rng(4);
  const Tensor x = test_support::uniform({1, kT, kE}, rng, -1.0f, 1.0f);
  const Tensor enc = test_support::uniform({1, kS, kE}, rng, -1.0f, 1.0f);
  // The padded copies: garbage after the tokens, and masks of 1 for tokens and 0 for padding.
  auto padded = [&](const Tensor& t, int64_t steps, int64_t pad) {
    Tensor p = test_support::uniform({1, steps + pad, kE}, rng, -50.0f, 50.0f);
    std::copy(t.data<float>(), t.data<float>() + t.numel(), p.data<float>());
    Tensor mask = Tensor::zeros(Shape{1, steps + pad});
    std::fill_n(mask.data<float>(), steps, 1.0f);
    return std::pair{p, mask};
  };
  const auto [xp, xm] = padded(x, kT, kPad);
  const auto [ep, em] = padded(enc, kS, kSPad);
  auto expect_prefix = [](const Tensor& full, const Tensor& part, const char* what) {
    for (int64_t i = 0; i < part.numel(); ++i)
      EXPECT_NEAR(full.data<float>()[i], part.data<float>()[i], 1e-5) << what << " element " << i;
  };
  {  // the encoder
    auto block = std::make_shared<nn::TransformerEncoder>(16, 2);
    auto a = nn::Input({kT, kE});
    nn::Model plain(a, (*block)(a), "plain");
    auto b = nn::Input({kT + kPad, kE});
    auto bm = nn::Input({kT + kPad});
    nn::Model masked({b, bm}, {(*block)({b, bm})}, "masked");  // the same block: the same weights
    expect_prefix(masked.predict(std::vector<Tensor>{xp, xm}).at(0), plain.predict(x), "encoder");
  }
  {  // the decoder with cross-attention
    auto block = std::make_shared<nn::TransformerDecoder>(16, 2);
    auto a = nn::Input({kT, kE});
    auto ae = nn::Input({kS, kE});
    auto am = nn::Input({kT});
    auto aem = nn::Input({kS});
    nn::Model plain({a, ae, am, aem}, {(*block)({a, ae, am, aem})}, "plain");
    auto b = nn::Input({kT + kPad, kE});
    auto be = nn::Input({kS + kSPad, kE});
    auto bm = nn::Input({kT + kPad});
    auto bem = nn::Input({kS + kSPad});
    nn::Model masked({b, be, bm, bem}, {(*block)({b, be, bm, bem})}, "masked");
    const Tensor ones_t = Tensor::full(Shape{1, kT}, 1.0f), ones_s = Tensor::full(Shape{1, kS}, 1.0f);
    expect_prefix(masked.predict(std::vector<Tensor>{xp, ep, xm, em}).at(0),
                  plain.predict(std::vector<Tensor>{x, enc, ones_t, ones_s}).at(0), "decoder");
  }
}

// A shared block keeps its weights when called again, on any sequence
// length; a call of another kind (another width, or an encoder sequence
// where the first had none) is a ShapeError naming both.
TEST(TransformerDecoder, ASharedBlockKeepsItsWeights) {
  auto d = std::make_shared<nn::TransformerDecoder>(16, 2);
  auto x = nn::Input({5, 8});
  nn::Model a(x, (*d)(x), "a");
  const std::vector<float> before = a.weights().at(0).value.to_vector();
  auto x2 = nn::Input({7, 8});
  nn::Model b(x2, (*d)(x2), "b");
  EXPECT_EQ(a.weights().size(), b.weights().size());
  EXPECT_EQ(a.weights().at(0).value.to_vector(), before);
  EXPECT_EQ(b.weights().at(0).value.to_vector(), before);
  EXPECT_TRUE(test_support::throws<ShapeError>([&] { (*d)(nn::Input({5, 6})); }, {"8 features", "{5, 6}"}));
  EXPECT_TRUE(test_support::throws<ShapeError>(
      [&] {
        (*d)({nn::Input({5, 8}), nn::Input({3, 8})});
      },
      {"without an encoder_sequence", "{3, 8}"}));
}

TEST(CausalLM, BadUseIsATypedError) {
  manual_seed(9);
  auto ids = nn::Input({4}, DType::Int32, "ids");
  auto h = nn::TransformerDecoder(8, 2)(nn::TokenAndPositionEmbedding(5, 4, 4)(ids));
  nn::Model mismatched(ids, nn::Dense(7)(h), "mismatched");
  EXPECT_TRUE(test_support::throws<ValueError>([&] { nn::CausalLM{mismatched}; }, {"reads 5 token ids", "over 7"}));
  std::mt19937_64 rng(1);
  EXPECT_TRUE(test_support::throws<ShapeError>([&] { nn::CausalLM::sample(Tensor::zeros(Shape{0}), {}, rng); },
                                               {"{vocabulary}", "{0}"}));
  EXPECT_TRUE(test_support::throws<ShapeError>(
      [&] {
        nn::CausalLM::sample(Tensor::zeros(Shape{2, 3}), {}, rng);
      },
      {"{2, 3}"}));
  nn::Model ok(ids, nn::Dense(5)(h), "ok");
  nn::CausalLM lm(ok);
  nn::CausalLM moved = std::move(lm);
  EXPECT_TRUE(test_support::throws<StateError>([&] { lm.next(1); }, {"moved from"}));  // NOLINT: the test
  // A context of one position: each token is predicted from the last one alone.
  auto one = nn::Input({1}, DType::Int32, "ids");
  nn::Model single(one, nn::Dense(5)(nn::TransformerDecoder(8, 2)(nn::TokenAndPositionEmbedding(5, 1, 4)(one))),
                   "single");
  nn::CausalLM short_lm(single);
  EXPECT_EQ(short_lm.generate(std::vector<int32_t>{4, 2}, 3), short_lm.generate(std::vector<int32_t>{2}, 3));
}

// The main job's corpus: too short a text is refused before training, with
// the minimum it needs.
TEST(CharGpt, AShortTextIsRefused) {
  const std::string path = ::testing::TempDir() + "/short.txt";
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    const std::string text(2000, 'a');
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
  }
  EXPECT_TRUE(test_support::throws<IOError>([&] { char_gpt::read_text(path); }, {"2000 bytes", "at least 2600"}));
  std::filesystem::remove(path);
  const std::vector<uint8_t> few(100, 7);
  EXPECT_TRUE(test_support::throws<ValueError>([&] { char_gpt::Batches(few, 1); }, {"100 bytes"}));
}
