#pragma once
// The LLaMA-style language model of the main job's `--model llama` and of
// the benchmark's llama rows: GCIDE's English text as bytes (or as the
// tokens of a byte-level BPE trained on it), and the model, initialisation,
// batches and optimizer of the `llama` workload in the PyTorch peer
// (../shared/bench/peer_pytorch.py), built with nn::LlamaCausalLM.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "char_gpt.h"
#include "tensorgrad/tensorgrad.h"

namespace char_llama {

namespace tg = tensorgrad;

inline constexpr int64_t kWidth = 192, kLayers = 4, kHeads = 6, kKvHeads = 2, kFeedForward = 512,
                         kContext = char_gpt::kContext, kBatch = char_gpt::kBatch;

/// The peer's model for a vocabulary of `vocabulary` tokens: width 192, 4
/// blocks, 6 query heads and 2 key-value heads of 32, SwiGLU 512, RMS norm
/// epsilon 1e-5, rotary theta 10000 on rotate_half's pairs, context 128,
/// an untied head.
inline tg::nn::LlamaConfig config(int64_t vocabulary = 256) {
  tg::nn::LlamaConfig c;
  c.vocabulary_size = vocabulary;
  c.hidden_dim = kWidth;
  c.num_layers = kLayers;
  c.num_query_heads = kHeads;
  c.num_key_value_heads = kKvHeads;
  c.intermediate_dim = kFeedForward;
  c.max_sequence_length = kContext;
  c.rope_max_wavelength = 10000.0f;
  c.rope_pairing = tg::RopePairing::Halves;
  c.layer_norm_epsilon = 1e-5f;
  c.tie_word_embeddings = false;
  return c;
}

/// PyTorch's default initialisation, as the peer's modules have it:
/// embeddings N(0, 1); every Linear weight uniform in +-1 / sqrt(fan_in)
/// (fan_in: E for the query, key, value, gate, up and head projections,
/// heads x head_dim for the output projection, the feed-forward width for
/// down); RMS norm scales 1.
inline void init_like_pytorch(tg::nn::Model& m, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto ends_with = [](const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  for (const tg::nn::Weight& w : m.weights()) {
    float* v = w.value.data<float>();
    const int64_t n = w.value.numel();
    const tg::Shape& s = w.value.shape();
    if (ends_with(w.name, "/embeddings")) {
      std::normal_distribution<float> d(0.0f, 1.0f);
      for (int64_t i = 0; i < n; ++i) v[i] = d(rng);
      continue;
    }
    if (ends_with(w.name, "scale")) continue;  // RMS norm: as built, 1
    int64_t fan_in = 0;
    if (ends_with(w.name, "output_kernel"))
      fan_in = s[0] * s[1];
    else if (ends_with(w.name, "kernel") || ends_with(w.name, "reverse_embeddings"))
      fan_in = s[0];
    else
      throw tg::ValueError("char_llama: no initialisation rule for weight " + w.name);
    const float bound = 1.0f / std::sqrt(float(fan_in));
    std::uniform_real_distribution<float> d(-bound, bound);
    for (int64_t i = 0; i < n; ++i) v[i] = d(rng);
  }
}

/// Random windows of kContext + 1 tokens: inputs {kBatch, kContext} and the
/// next tokens as targets, both int32 (the peer's batches).
struct Batches {
  std::span<const int32_t> tokens;
  std::mt19937_64 rng;
  tg::Tensor x = tg::Tensor::zeros(tg::Shape{kBatch, kContext}, tg::DType::Int32);
  tg::Tensor y = tg::Tensor::zeros(tg::Shape{kBatch, kContext}, tg::DType::Int32);
  /// Throws ValueError for fewer tokens than a window and its next one.
  Batches(std::span<const int32_t> t, uint64_t seed) : tokens(t), rng(seed) {
    if (t.size() < size_t(kContext) + 2)
      throw tg::ValueError("char_llama::Batches: " + std::to_string(t.size()) + " tokens hold no window of " +
                           std::to_string(kContext + 1));
  }
  void next() {
    std::uniform_int_distribution<size_t> start(0, tokens.size() - size_t(kContext) - 2);
    int32_t* px = x.data<int32_t>();
    int32_t* py = y.data<int32_t>();
    for (int64_t r = 0; r < kBatch; ++r) {
      const size_t s = start(rng);
      std::copy_n(tokens.data() + s, kContext, px + r * kContext);
      std::copy_n(tokens.data() + s + 1, kContext, py + r * kContext);
    }
  }
};

/// What `--model llama` runs.
struct RunOptions {
  int64_t steps = 2000;                    ///< optimizer steps (the cosine schedule's length)
  std::string prompt = "Abdication \\Ab";  ///< the peer's prompt: the start of a GCIDE entry
  int64_t sample_bytes = 300;              ///< tokens generated after the prompt (bytes with the byte vocabulary)
  tg::nn::SamplerOptions sampler;          ///< greedy by default, as the peer
  uint64_t seed = 0;                       ///< weights and batches
  std::string text = char_gpt::kGcide;     ///< the corpus (gzip or plain)
  int verbose = 1;                         ///< 0: results only
  std::string tokenizer = "bytes";         ///< "bytes" (vocabulary 256) or "bpe" (trained on the training text)
  int64_t vocab = 4096;                    ///< the BPE vocabulary, special tokens included
  std::string save_gguf;                   ///< a llama.cpp GGUF file for the trained model; empty: none
};

/// `bytes` as valid UTF-8: each byte that does not start a well-formed
/// sequence becomes U+FFFD (as Python's errors="replace" reads it), since a
/// BPE tokenizer takes text, and GCIDE's first 4 MiB hold Latin-1 bytes and
/// end inside a character.
inline std::string valid_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    const auto b = static_cast<unsigned char>(bytes[i]);
    const size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
    bool ok = n > 0 && i + n <= bytes.size();
    uint32_t cp = n == 1 ? b : n == 2 ? (b & 0x1Fu) : n == 3 ? (b & 0x0Fu) : (b & 0x07u);
    for (size_t k = 1; ok && k < n; ++k) {
      const auto c = static_cast<unsigned char>(bytes[i + k]);
      ok = (c >> 6) == 0x2;
      cp = (cp << 6) | (c & 0x3Fu);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are not UTF-8 either.
    static constexpr uint32_t kLeast[5] = {0, 0, 0x80, 0x800, 0x10000};
    ok = ok && cp >= kLeast[n] && !(cp >= 0xD800 && cp <= 0xDFFF) && cp <= 0x10FFFF;
    if (ok) {
      out.append(bytes.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

/// The tokenizer of the run: the 256 bytes, or a byte-level BPE trained on
/// the training text.
inline tg::text::Tokenizer make_tokenizer(const RunOptions& o, std::string_view train_text) {
  if (o.tokenizer == "bytes") return tg::text::Tokenizer::byte_level();
  const auto t0 = std::chrono::steady_clock::now();
  // The model trains on windows of running text without a BOS token, so the file says not to add one
  // (tokenizer.ggml.add_bos_token false): llama.cpp then feeds a prompt as the model was trained.
  tg::text::BpeTrainerOptions options;
  options.add_bos = false;
  tg::text::Tokenizer t = tg::text::BpeTokenizer::train(valid_utf8(train_text), o.vocab, options);
  std::printf("tokenizer: byte-level BPE of %lld tokens trained on %zu bytes in %.1f s\n", (long long)t.vocab_size(),
              train_text.size(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return t;
}

/// Trains on the first 4 MiB of the text (the last 5% held out), then prints
/// the validation loss over 32 fixed batches, the prompt, and a sample
/// generated with the key-value cache; with save_gguf, writes the model and
/// its tokenizer as a GGUF file llama.cpp runs.
inline void run(const RunOptions& o) {
  using Clock = std::chrono::steady_clock;
  if (o.prompt.empty()) throw tg::ValueError("--prompt: give at least one byte to start the sample from");
  if (!(o.sampler.temperature >= 0.0f) || !std::isfinite(o.sampler.temperature))
    throw tg::ValueError("--temperature: expected a finite number >= 0 (0: greedy); got " +
                         std::to_string(o.sampler.temperature));
  if (o.sampler.top_k > 0 && o.sampler.temperature == 0.0f)
    throw tg::ValueError("--top-k samples among the likeliest tokens, which needs --temperature > 0 (0 is greedy)");
  if (o.sampler.top_p < 1.0f && o.sampler.temperature == 0.0f)
    throw tg::ValueError("--top-p samples among the likeliest tokens, which needs --temperature > 0 (0 is greedy)");
  if (o.tokenizer != "bytes" && o.tokenizer != "bpe")
    throw tg::ValueError("--tokenizer: expected bytes or bpe; got " + o.tokenizer);
  if (o.tokenizer == "bpe" && o.vocab < 260)
    throw tg::ValueError("--vocab: a byte-level BPE needs at least 260 tokens (256 bytes and specials); got " +
                         std::to_string(o.vocab));
  if (!o.save_gguf.empty()) {
    const std::filesystem::path dir = std::filesystem::absolute(o.save_gguf).parent_path();
    if (!std::filesystem::is_directory(dir))
      throw tg::IOError("--save-gguf " + o.save_gguf + ": the directory " + dir.string() + " does not exist");
  }
  const std::vector<uint8_t> text = char_gpt::read_text(o.text);
  const size_t n_val = text.size() / 20;
  const std::string_view train_text(reinterpret_cast<const char*>(text.data()), text.size() - n_val),
      val_text(reinterpret_cast<const char*>(text.data()) + train_text.size(), n_val);
  const tg::text::Tokenizer tok = make_tokenizer(o, train_text);
  std::vector<int32_t> train, val;
  if (o.tokenizer == "bytes") {  // the bytes as they are, whatever their encoding
    train.assign(text.begin(), text.end() - ptrdiff_t(n_val)), val.assign(text.end() - ptrdiff_t(n_val), text.end());
  } else {
    train = tok.encode(valid_utf8(train_text), false), val = tok.encode(valid_utf8(val_text), false);
  }
  tg::manual_seed(o.seed);
  tg::nn::LlamaCausalLM m(config(tok.vocab_size()));
  init_like_pytorch(m, o.seed);
  m.compile(char_gpt::optimizer(o.steps), "sparse_categorical_crossentropy");
  std::printf(
      "tensorgrad: LLaMA-style language model on %s (%zu training and %zu validation tokens of a %s vocabulary of "
      "%lld), %lld blocks of width %lld, %lld query and %lld key-value heads, SwiGLU %lld, context %lld, batch %lld, "
      "AdamW lr 1e-3 cosine over %lld steps, %d threads\n",
      o.text.c_str(), train.size(), val.size(), o.tokenizer == "bytes" ? "byte" : "BPE",
      (long long)tok.vocab_size(), (long long)kLayers, (long long)kWidth, (long long)kHeads, (long long)kKvHeads,
      (long long)kFeedForward, (long long)kContext, (long long)kBatch, (long long)o.steps, tg::num_threads());
  tg::nn::Trainer trainer(m, {.batch_size = kBatch});
  Batches batches(train, o.seed + 1);
  const double step_seconds = char_gpt::train_steps(trainer, batches, o.steps, o.verbose);
  std::printf("training step: %.1f ms median\n", 1e3 * step_seconds);
  Batches held_out(val, 1);
  const double val_loss = char_gpt::validation_loss(trainer, held_out);
  std::printf("validation loss %.4f nats per token, %.4f bits per token (32 batches of %lld x %lld tokens)\n",
              val_loss, val_loss / std::log(2.0), (long long)kBatch, (long long)kContext);
  // The trainer trains its own copy of the weights: bring them into the model generation and saving read.
  for (const tg::nn::Weight& trained : trainer.weights())
    for (const tg::nn::Weight& w : m.weights())
      if (w.name == trained.name) std::copy_n(trained.value.data<float>(), w.value.numel(), w.value.data<float>());
  tg::nn::CausalLM lm(m);
  const std::vector<int32_t> prompt =
      o.tokenizer == "bytes" ? char_gpt::tokens_of(o.prompt) : tok.encode(o.prompt, false);
  if (prompt.empty()) throw tg::ValueError("--prompt \"" + o.prompt + "\" gives no tokens");
  const auto t0 = Clock::now();
  const std::vector<int32_t> made = lm.generate(prompt, o.sample_bytes, o.sampler);
  const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("prompt \"%s\"\n", o.prompt.c_str());
  // The byte vocabulary's ids are the bytes themselves (decode() would tidy spaces, as llama.cpp does for GPT-2's).
  std::string sample;
  if (o.tokenizer == "bytes")
    for (int32_t t : made) sample.push_back(char(t));
  else
    sample = tok.decode(made);
  std::printf("sample (%lld tokens at %.0f tokens/s, %s):\n", (long long)made.size(), double(made.size()) / dt,
              o.sampler.temperature > 0.0f ? "sampled" : "greedy");
  std::fwrite(o.prompt.data(), 1, o.prompt.size(), stdout);
  std::fwrite(sample.data(), 1, sample.size(), stdout);
  std::printf("\n");
  if (!o.save_gguf.empty()) {
    tg::io::save_llama(m, o.save_gguf, {.type = tg::io::TensorType::F32, .tokenizer = &tok});
    std::printf("model saved for llama.cpp to %s\n", o.save_gguf.c_str());
  }
}

}  // namespace char_llama
