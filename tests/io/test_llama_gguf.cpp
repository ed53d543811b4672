// LLaMA models in llama.cpp's GGUF layout (io/llama.h): files tensorgrad
// writes read back to the same model (the Q/K rows permuted for ggml's
// rotary pairs and back), the reader's refusals, and llama.cpp itself
// (node-llama-cpp, tests/support/llama_js.h) as the referee: its tokens,
// log-probabilities and 64 greedy tokens on files tensorgrad wrote at F32,
// F16, Q8_0 and Q4_0, random and trained weights, three tokenizers, tied and
// untied heads, grouped and plain multi-head attention.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "llama_js.h"
#include "llama_reference.h"
#include "tensorgrad/tensorgrad.h"
#include "test_files.h"

using namespace tensorgrad;

namespace {

// E and I multiples of 32 (the quantized blocks), 4 query heads of 16.
nn::LlamaConfig small(int64_t vocabulary, int64_t kv_heads, bool tied, RopePairing pairing) {
  nn::LlamaConfig c;
  c.vocabulary_size = vocabulary;
  c.hidden_dim = 64;
  c.num_layers = 2;
  c.num_query_heads = 4;
  c.num_key_value_heads = kv_heads;
  c.intermediate_dim = 96;
  c.max_sequence_length = 128;
  c.rope_pairing = pairing;
  c.tie_word_embeddings = tied;
  return c;
}

void randomize(const nn::Model& m, uint32_t seed) {
  std::mt19937 rng(seed);
  for (const nn::Weight& w : m.weights()) {
    const bool scale = w.name.find("scale") != std::string::npos;
    std::uniform_real_distribution<float> d(scale ? 0.5f : -0.3f, scale ? 1.5f : 0.3f);
    for (int64_t i = 0; i < w.value.numel(); ++i) w.value.data<float>()[i] = d(rng);
  }
}

const char* kText = "The quick  brown fox\tjumps over 13 lazy dogs.\n\n  Caf\xC3\xA9 na\xC3\xAFve \xE6\x97\xA5\xE6\x9C\xAC   end ";

// A small English text to train on and to train a BPE from.
std::string corpus() {
  std::string s;
  const char* words[] = {"the ", "model ", "reads ", "a ", "file ", "and ", "writes ", "another ", "token ",
                         "llama ", "runs ", "it. ", "Then ", "we ", "compare ", "logits\n"};
  std::mt19937 rng(1);
  for (int i = 0; i < 3000; ++i) s += words[rng() % 16];
  return s;
}

// A few Adam steps on the corpus's tokens: trained, not random, weights.
void train_briefly(nn::LlamaCausalLM& m, const std::vector<int32_t>& tokens) {
  m.compile(OptimizerSpec::adam(3e-3f), "sparse_categorical_crossentropy");
  const int64_t t = 32, rows = 16;
  Tensor x = Tensor::zeros(Shape{rows, 128}, DType::Int32), y = Tensor::zeros(Shape{rows, 128}, DType::Int32);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < 128; ++i) {
      const size_t at = size_t((r * t + i) % int64_t(tokens.size() - 1));
      x.data<int32_t>()[r * 128 + i] = tokens[at], y.data<int32_t>()[r * 128 + i] = tokens[at + 1];
    }
  m.fit(x, y, {.epochs = 8, .batch_size = 8, .verbose = 0});
}

Tensor logits_of(nn::Model& m, const std::vector<int32_t>& ids, int64_t context) {
  Tensor x = Tensor::zeros(Shape{1, context}, DType::Int32);
  std::copy(ids.begin(), ids.end(), x.data<int32_t>());
  return m.predict(x, 1);  // {1, context, V}; rows past ids.size() are not read
}

struct Case {
  const char* name;
  io::TensorType type;
  const char* tokenizer;  // "bytes", "spm", "bpe"
  int64_t kv_heads;
  bool tied, trained;
  RopePairing pairing;
  double tolerance;  // on log-probabilities, |a - b| / (1 + |b|)
};

// The tolerances: float32 files within 1e-4. The others' weights are equal
// (tensorgrad reads the blocks as ggml defines them, tests/io/
// test_gguf_quants.cpp), but llama.cpp rounds its activations where
// tensorgrad's float32 model of those weights does not: to F16 for an F16
// weight (ggml's vec_dot_f16) and to Q8_0 blocks for a Q8_0 or Q4_0 weight
// (vec_dot_q8_0_q8_0, vec_dot_q4_0_q8_0), about 2^-11 and 2^-8 of each
// value; through two blocks of random weights that gives up to 1e-3 (F16),
// 5e-2 (Q8_0) and 1e-1 (Q4_0) on the log-probabilities.
const Case kCases[] = {
    {"f32_random_bytes_untied_gqa_halves", io::TensorType::F32, "bytes", 2, false, false, RopePairing::Halves, 1e-4},
    {"f32_trained_spm_tied_mha_adjacent", io::TensorType::F32, "spm", 4, true, true, RopePairing::Adjacent, 1e-4},
    {"f16_trained_bpe_untied_gqa_halves", io::TensorType::F16, "bpe", 2, false, true, RopePairing::Halves, 2e-3},
    {"q8_0_random_bytes_tied_gqa_halves", io::TensorType::Q8_0, "bytes", 1, true, false, RopePairing::Halves, 6e-2},
    {"q4_0_trained_bpe_untied_mha_adjacent", io::TensorType::Q4_0, "bpe", 4, false, true, RopePairing::Adjacent,
     1e-1},
};

text::Tokenizer tokenizer_of(const std::string& kind) {
  if (kind == "bytes") return text::Tokenizer::byte_level();
  if (kind == "bpe") return text::BpeTokenizer::train(corpus(), 300);
  // A SentencePiece vocabulary: every byte, then the corpus's words scored by length.
  text::Tokenizer::Parts p;
  p.model = "llama";
  p.tokens = {"<unk>", "<s>", "</s>"};
  auto type = [](text::TokenType t) { return static_cast<int32_t>(t); };
  p.types = {type(text::TokenType::Unknown), type(text::TokenType::Control), type(text::TokenType::Control)};
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "<0x%02X>", b);
    p.tokens.push_back(hex), p.types.push_back(type(text::TokenType::Byte));
  }
  for (const char* piece : {"\xE2\x96\x81the", "\xE2\x96\x81model", "\xE2\x96\x81reads", "\xE2\x96\x81a", "e", "t",
                            "h", "th", "\xE2\x96\x81", "o", "r", "re", "s", "\xE2\x96\x81t", "n", "l", "a", "d"}) {
    p.tokens.push_back(piece), p.types.push_back(type(text::TokenType::Normal));
  }
  for (size_t i = 0; i < p.tokens.size(); ++i) p.scores.push_back(p.types[i] == type(text::TokenType::Normal) ? -float(i) : 0.0f);
  p.unk = 0, p.bos = 1, p.eos = 2;
  p.add_bos = true;
  return text::Tokenizer::from_parts(std::move(p));
}

}  // namespace

TEST(LlamaGGUF, WrittenAndReadBackGivesTheSameLogitsAtEveryType) {
  const test_support::TempDir dir;
  const text::Tokenizer bytes = text::Tokenizer::byte_level();
  for (io::TensorType type : {io::TensorType::F32, io::TensorType::F16, io::TensorType::BF16, io::TensorType::Q8_0,
                              io::TensorType::Q4_0}) {
    for (RopePairing pairing : {RopePairing::Halves, RopePairing::Adjacent}) {
      SCOPED_TRACE(std::string(io::tensor_type_name(type)) + (pairing == RopePairing::Halves ? " halves" : " adjacent"));
      nn::LlamaCausalLM m(small(256, 2, pairing == RopePairing::Adjacent, pairing));
      randomize(m, 3);
      const std::string path = dir / "m.gguf";
      io::save_llama(m, path, {.type = type, .tokenizer = &bytes});
      io::LlamaFile back = io::load_llama(path);
      ASSERT_TRUE(back.tokenizer.has_value());
      EXPECT_EQ(back.tokenizer->vocab_size(), 256);
      EXPECT_EQ(back.model->llama_config().rope_pairing, RopePairing::Adjacent);
      EXPECT_EQ(back.model->llama_config().tie_word_embeddings, pairing == RopePairing::Adjacent);
      const std::vector<int32_t> ids{72, 101, 108, 108, 111, 32, 119, 111, 114, 108, 100};
      const std::vector<double> want = test_support::llama_reference_logits(m, ids);
      const Tensor got = logits_of(*back.model, ids, 128);
      // F32 is exact up to float32 sums; the others as their rounding of each weight gives.
      const double tol = type == io::TensorType::F32 ? 1e-4
                         : type == io::TensorType::F16 ? 5e-3
                         : type == io::TensorType::BF16 ? 5e-2
                         : type == io::TensorType::Q8_0 ? 5e-2 : 5e-1;
      double scale = 1;
      for (double v : want) scale = std::max(scale, std::abs(v));
      for (size_t t = 0; t < ids.size(); ++t)
        for (int64_t v = 0; v < 256; ++v)
          ASSERT_NEAR(got.data<float>()[int64_t(t) * 256 + v], want[t * 256 + size_t(v)], tol * scale)
              << "position " << t << " token " << v;
      // What a file holds is what it gives back: the model read, written again at the same type, reads back
      // to the same weights bit for bit (its values are already on the type's grid, and its pairs adjacent).
      const std::string again = dir / "again.gguf";
      io::save_llama(*back.model, again, {.type = type, .tokenizer = &bytes});
      io::LlamaFile twice = io::load_llama(again);
      const std::vector<nn::Weight> a = back.model->weights(), b = twice.model->weights();
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i].name, b[i].name);
        EXPECT_TRUE(test_support::bit_equal(a[i].value, b[i].value)) << a[i].name;
      }
    }
  }
}

TEST(LlamaGGUF, LlamaCppAgreesOnTokensLogProbabilitiesAndGreedyTokens) {
  std::string why;
  if (!test_support::llama_js_available(&why)) GTEST_SKIP() << why;
  const test_support::TempDir dir;
  for (const Case& k : kCases) {
    SCOPED_TRACE(k.name);
    const text::Tokenizer tok = tokenizer_of(k.tokenizer);
    nn::LlamaCausalLM m(small(tok.vocab_size(), k.kv_heads, k.tied, k.pairing));
    randomize(m, 11);
    if (k.trained) train_briefly(m, tok.encode(corpus(), false));
    const std::string path = dir / (std::string(k.name) + ".gguf");
    io::save_llama(m, path, {.type = k.type, .tokenizer = &tok});
    // tensorgrad's side: the model as the file holds it (dequantized weights).
    io::LlamaFile back = io::load_llama(path);
    const std::vector<int32_t> prompt = tok.encode("the model reads a file", false);
    ASSERT_GE(prompt.size(), 3u);

    test_support::LlamaJsRequest r;
    r.tokenize = {kText, corpus().substr(0, 200)};
    r.prompt_tokens = prompt;
    r.logits = test_support::LlamaJsRequest::Logits::All;
    r.greedy = 64;
    const test_support::LlamaJsResult got = test_support::llama_js_run(path, r);
    EXPECT_EQ(got.n_vocab, tok.vocab_size());
    EXPECT_EQ(got.tokens[0], tok.encode(kText, false));
    EXPECT_EQ(got.tokens[1], tok.encode(corpus().substr(0, 200), false));

    const Tensor logits = logits_of(*back.model, prompt, 128);
    const int64_t V = tok.vocab_size();
    ASSERT_EQ(got.log_probs.size(), prompt.size());
    for (size_t t = 0; t < prompt.size(); ++t) {
      const std::span<const float> row(logits.data<float>() + int64_t(t) * V, size_t(V));
      EXPECT_LE(test_support::log_prob_error(got.log_probs[t], row), k.tolerance) << "position " << t;
    }
    // Greedy tokens: equal, token for token. Where llama.cpp rounds what
    // tensorgrad does not (F16 and quantized activations), a near tie may
    // go the other way; from there the texts differ by right. So a token
    // may differ only where tensorgrad's log-probabilities of the two
    // tokens are within the case's tolerance, and the comparison stops there.
    nn::CausalLM lm(*back.model);
    const Tensor* z = nullptr;
    for (int32_t id : prompt) z = &lm.next(id);
    size_t same = 0;
    for (; same < got.greedy.size(); ++same) {
      const std::span<const float> row(z->data<float>(), size_t(V));
      const std::vector<double> lp = test_support::log_softmax(row);
      const int32_t best = int32_t(std::max_element(lp.begin(), lp.end()) - lp.begin());
      const int32_t theirs = got.greedy[same];
      if (best != theirs) {
        const double gap = lp[size_t(best)] - lp[size_t(theirs)];
        EXPECT_LE(gap, 2 * k.tolerance * (1 + std::abs(lp[size_t(best)])))
            << "greedy token " << same << ": tensorgrad chose " << best << ", llama.cpp " << theirs;
        EXPECT_NE(k.type, io::TensorType::F32) << "float32 files give the same tokens";
        break;
      }
      z = &lm.next(best);
    }
    if (k.type == io::TensorType::F32) EXPECT_EQ(same, got.greedy.size());
    std::printf("%s: %zu of %zu greedy tokens equal\n", k.name, same, got.greedy.size());
  }
}

TEST(LlamaGGUF, TheReaderRefusesWhatItCannotRead) {
  const test_support::TempDir dir;
  const text::Tokenizer bytes = text::Tokenizer::byte_level();
  auto expect = [&](auto edit, const std::vector<std::string>& words) {
    io::GGUFWriter w;
    edit(w);
    const std::string path = dir / "bad.gguf";
    w.write(path);
    try {
      io::load_llama(path);
      ADD_FAILURE() << "no error; expected one with " << words[0];
    } catch (const FormatError& e) {
      for (const std::string& word : words) EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
    }
  };
  // The keys of a valid two-layer file, written before whatever a case changes.
  auto keys = [&](io::GGUFWriter& w, const std::string& skip = "") {
    auto u = [&](const std::string& k, uint32_t v) {
      if (k != skip) w.set_u32(k, v);
    };
    if (skip != "general.architecture") w.set_string("general.architecture", "llama");
    u("llama.context_length", 16), u("llama.embedding_length", 8), u("llama.block_count", 1);
    u("llama.feed_forward_length", 8), u("llama.attention.head_count", 2), u("llama.attention.head_count_kv", 2);
    bytes.write_gguf(w);
  };
  const Tensor embd = Tensor::zeros(Shape{256, 8});
  expect([&](io::GGUFWriter& w) { w.set_string("general.architecture", "gpt2"); },
         {"general.architecture is \"gpt2\"", "\"llama\""});
  expect([&](io::GGUFWriter& w) { keys(w, "llama.block_count"); }, {"llama.block_count", "missing"});
  expect([&](io::GGUFWriter& w) { keys(w); }, {"token_embd.weight", "missing"});
  expect([&](io::GGUFWriter& w) {
           keys(w);
           w.add_tensor("token_embd.weight", Tensor::zeros(Shape{255, 8}));
         },
         {"tokenizer.ggml.tokens holds 256 tokens", "token_embd.weight has 255 rows"});
  expect([&](io::GGUFWriter& w) {
           keys(w);
           w.add_tensor("token_embd.weight", embd);
           w.add_tensor("blk.0.attn_norm.weight", Tensor::zeros(Shape{8}));
         },
         {"blk.0.attn_q.weight", "missing"});
  expect([&](io::GGUFWriter& w) {
           keys(w);
           w.add_tensor("token_embd.weight", embd);
           w.add_tensor("blk.0.attn_norm.weight", Tensor::zeros(Shape{8}));
           w.add_tensor("blk.0.attn_q.weight", Tensor::zeros(Shape{8, 4}));
         },
         {"blk.0.attn_q.weight", "{8, 4}", "expected {8, 8}"});
  expect([&](io::GGUFWriter& w) {
           w.set_string("general.architecture", "llama");
           w.set_u32("llama.context_length", 16), w.set_u32("llama.embedding_length", 8);
           w.set_u32("llama.block_count", 1), w.set_u32("llama.feed_forward_length", 8);
           w.set_u32("llama.attention.head_count", 3);
         },
         {"llama.attention.head_count (3) must divide", "embedding_length (8)"});
  expect([&](io::GGUFWriter& w) {
           w.set_string("general.architecture", "llama");
           w.set_u32("llama.context_length", 16), w.set_u32("llama.embedding_length", 8);
           w.set_u32("llama.block_count", 1), w.set_u32("llama.feed_forward_length", 8);
           w.set_u32("llama.attention.head_count", 4), w.set_u32("llama.attention.head_count_kv", 3);
         },
         {"head_count_kv (3) must divide", "head_count (4)"});
  // save_llama's own refusals.
  nn::LlamaCausalLM m(small(256, 2, false, RopePairing::Halves));
  const text::Tokenizer bpe = text::BpeTokenizer::train(corpus(), 300);
  EXPECT_THROW(io::save_llama(m, dir / "x.gguf", {.type = io::TensorType::F32, .tokenizer = &bpe}), ValueError);
  EXPECT_THROW(io::save_llama(m, dir / "x.gguf", {.type = io::TensorType::F32}), ValueError);
  EXPECT_THROW(io::save_llama(m, dir / "x.gguf", {.type = io::TensorType::I32, .tokenizer = &bytes}), ValueError);
}
