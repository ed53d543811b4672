// The llama.cpp harness (tests/support/llama_js.h, tests/llama_js/run.mjs) on
// three tiny LLaMA GGUF files written without tensorgrad
// (tests/llama_js/tiny_llama.py: random float32 weights, byte vocabularies;
// grouped-query attention with a tied output and multi-head with its own
// output, both with a SentencePiece vocabulary, and grouped-query with a GPT-2
// byte-level one) against their numpy forward (tests/fixtures/llama_reference.h):
// llama.cpp's tokens, its log-probabilities at every prompt position and its
// greedy tokens. Skips, saying what to install, without node or
// tests/llama_js/node_modules.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "fixtures/llama_reference.h"
#include "llama_js.h"

namespace fx = tensorgrad_fixtures::llama;
namespace fs = std::filesystem;

namespace {

struct TinyLlama {
  const char* name;
  const char* file;
  int64_t n_vocab;
  int32_t bos, eos;
  std::span<const int32_t> prompt;       // prompt_text's bytes as tokens
  std::span<const int32_t> text_tokens;  // llama.cpp's tokens for fx::text
  const float* logits;                   // prompt positions x n_vocab
  const int32_t* greedy;                 // n_greedy
};

#define TINY_LLAMA(name)                                                                                     \
  TinyLlama {                                                                                                \
    #name, fx::name##_file, fx::name##_n_vocab, fx::name##_bos, fx::name##_eos, fx::name##_prompt,          \
        fx::name##_text_tokens, fx::name##_logits, fx::name##_greedy                                         \
  }
const TinyLlama kTinyLlamas[] = {TINY_LLAMA(gqa_tied), TINY_LLAMA(mha_untied), TINY_LLAMA(gqa_untied_gpt2)};
#undef TINY_LLAMA

std::string source_path(const char* relative) { return (fs::path(TENSORGRAD_SOURCE_DIR) / relative).string(); }

}  // namespace

TEST(LlamaJs, LlamaCppAgreesWithNumpyOnTinyLlamaFiles) {
  std::string why;
  if (!test_support::llama_js_available(&why)) GTEST_SKIP() << why;
  for (const TinyLlama& m : kTinyLlamas) {
    SCOPED_TRACE(m.name);
    test_support::LlamaJsRequest request;
    request.tokenize = {fx::text, fx::prompt_text};
    request.prompt_tokens.assign(m.prompt.begin(), m.prompt.end());
    request.logits = test_support::LlamaJsRequest::Logits::All;
    request.greedy = int(fx::n_greedy);
    const test_support::LlamaJsResult got = test_support::llama_js_run(source_path(m.file), request);
    EXPECT_EQ(got.n_vocab, m.n_vocab);
    EXPECT_EQ(got.bos, m.bos);
    EXPECT_EQ(got.eos, m.eos);
    EXPECT_FALSE(got.add_bos);
    ASSERT_EQ(got.tokens.size(), 2u);
    EXPECT_EQ(got.tokens[0], std::vector<int32_t>(m.text_tokens.begin(), m.text_tokens.end()));
    if (m.bos == 256) {  // GPT-2's byte-level vocabulary: the prompt text is its bytes, spaces too
      EXPECT_EQ(got.tokens[1], std::vector<int32_t>(m.prompt.begin(), m.prompt.end()));
    }
    ASSERT_EQ(int64_t(got.log_probs.size()), fx::n_prompt);
    for (int64_t i = 0; i < fx::n_prompt; ++i) {
      const std::span<const float> want(m.logits + i * m.n_vocab, size_t(m.n_vocab));
      EXPECT_LE(test_support::log_prob_error(got.log_probs[size_t(i)], want), 1e-4) << "prompt position " << i;
    }
    EXPECT_EQ(got.greedy, std::vector<int32_t>(m.greedy, m.greedy + fx::n_greedy));
  }
}

// Only the last position's log-probabilities when asked so; the greedy tokens do not depend on it.
TEST(LlamaJs, LastPositionOnly) {
  std::string why;
  if (!test_support::llama_js_available(&why)) GTEST_SKIP() << why;
  const TinyLlama& m = kTinyLlamas[1];
  test_support::LlamaJsRequest request;
  request.prompt_tokens.assign(m.prompt.begin(), m.prompt.end());
  request.logits = test_support::LlamaJsRequest::Logits::Last;
  request.greedy = 4;
  const test_support::LlamaJsResult got = test_support::llama_js_run(source_path(m.file), request);
  ASSERT_EQ(got.log_probs.size(), 1u);
  const int64_t last = fx::n_prompt - 1;
  EXPECT_LE(test_support::log_prob_error(got.log_probs[0], {m.logits + last * m.n_vocab, size_t(m.n_vocab)}), 1e-4);
  EXPECT_EQ(got.greedy, std::vector<int32_t>(m.greedy, m.greedy + 4));
  EXPECT_TRUE(got.tokens.empty());
}

// The comparison tells models apart: the other file's logits are far off.
TEST(LlamaJs, LogProbErrorSeesAnotherModel) {
  std::string why;
  if (!test_support::llama_js_available(&why)) GTEST_SKIP() << why;
  const TinyLlama &a = kTinyLlamas[0], &b = kTinyLlamas[1];  // same vocabulary and prompt
  test_support::LlamaJsRequest request;
  request.prompt_tokens.assign(a.prompt.begin(), a.prompt.end());
  request.logits = test_support::LlamaJsRequest::Logits::Last;
  const test_support::LlamaJsResult got = test_support::llama_js_run(source_path(a.file), request);
  const int64_t last = fx::n_prompt - 1;
  EXPECT_GT(test_support::log_prob_error(got.log_probs[0], {b.logits + last * b.n_vocab, size_t(b.n_vocab)}), 0.1);
}

// A file llama.cpp cannot load, a token outside the vocabulary and a context too small are
// failures of the run (run.mjs's message on stderr), not answers.
TEST(LlamaJs, RefusalsAreErrors) {
  std::string why;
  if (!test_support::llama_js_available(&why)) GTEST_SKIP() << why;
  const std::string missing = (fs::path(::testing::TempDir()) / "no_such_model.gguf").string();
  test_support::LlamaJsRequest request;
  request.prompt_tokens = {5, 6};
  EXPECT_THROW(test_support::llama_js_run(missing, request), std::runtime_error);
  const std::string file = source_path(kTinyLlamas[0].file);
  request.prompt_tokens = {5, int32_t(kTinyLlamas[0].n_vocab)};
  EXPECT_THROW(test_support::llama_js_run(file, request), std::runtime_error);
  request.prompt_tokens = {5, 6, 7};
  request.greedy = 4;
  request.context = 4;  // needs 3 + 4 - 1 + 1 = 7
  EXPECT_THROW(test_support::llama_js_run(file, request), std::runtime_error);
}

TEST(LlamaJs, LogProbErrorIgnoresOnlyUnderflowedEntries) {
  const std::vector<float> logits = {0.f, 1.f, -200.f};
  std::vector<double> want = test_support::log_softmax(logits);
  std::vector<float> got(want.begin(), want.end());
  EXPECT_LE(test_support::log_prob_error(got, logits), 1e-7);
  got[2] = -std::numeric_limits<float>::infinity();  // probability 0 in float32: fine
  EXPECT_LE(test_support::log_prob_error(got, logits), 1e-7);
  got[2] = -5.f;  // a probability that should have underflowed
  EXPECT_EQ(test_support::log_prob_error(got, logits), std::numeric_limits<double>::infinity());
  got[2] = float(want[2]);
  got[0] = float(want[0] + 1e-3);
  EXPECT_NEAR(test_support::log_prob_error(got, logits), 1e-3 / (1 + std::fabs(want[0])), 1e-7);
}
