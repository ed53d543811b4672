#pragma once
// The character-level GPT of the main job's `--model gpt` and of the
// benchmark's gpt row: GCIDE's English text (Debian's dict-gcide) as bytes,
// and the model, initialisation, batches and optimizer of the `gpt` workload
// in the PyTorch peer (../shared/bench/peer_pytorch.py), written with the
// library's Keras-style layers.
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "tensorgrad/tensorgrad.h"

namespace char_gpt {

namespace tg = tensorgrad;

inline constexpr int64_t kContext = 128, kWidth = 128, kHeads = 4, kLayers = 4, kFeedForward = 512, kBatch = 32,
                         kVocabulary = 256;
inline constexpr const char* kGcide = "/usr/share/dictd/gcide.dict.dz";

/// The fewest bytes a corpus may hold: its last 5% validates, and a window
/// is kContext + 1 bytes.
inline constexpr size_t kMinTextBytes = 20 * size_t(kContext + 2);

/// The first `bytes` bytes of a gzip (or plain) file. Throws IOError when it
/// cannot be read or holds fewer than kMinTextBytes.
inline std::vector<uint8_t> read_text(const std::string& path, size_t bytes = size_t(4) << 20) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f)
    throw tg::IOError("cannot open " + path +
                      (path == kGcide ? std::string(" (Debian's dict-gcide installs it: scripts/setup.sh)")
                                      : std::string(": give --text a readable file, gzip or plain")));
  std::vector<uint8_t> text(bytes);
  size_t got = 0;
  while (got < bytes) {
    const int n = gzread(f, text.data() + got, unsigned(std::min<size_t>(bytes - got, 1u << 20)));
    if (n < 0) {
      int code = 0;
      const std::string why = gzerror(f, &code);
      gzclose(f);
      throw tg::IOError("cannot read " + path + ": " + why);
    }
    if (n == 0) break;
    got += size_t(n);
  }
  gzclose(f);
  if (got < kMinTextBytes)
    throw tg::IOError(path + " holds " + std::to_string(got) + " bytes; the language model needs at least " +
                      std::to_string(kMinTextBytes) + " (its last 5% validates in windows of " +
                      std::to_string(kContext + 1) + " bytes): give --text a longer text");
  text.resize(got);
  return text;
}

/// Token and position embeddings of width 128, dropout 0.1, 4 pre-norm
/// decoder blocks (4 heads, GELU MLP of 512, dropout 0.1 on the attention
/// weights and after each sub-block), a final LayerNormalization and an
/// untied 256-way head without bias: bytes {128} -> logits {128, 256}.
inline tg::nn::Model model(float dropout = 0.1f) {
  auto ids = tg::nn::Input({kContext}, tg::DType::Int32, "bytes");
  auto h = tg::nn::TokenAndPositionEmbedding(kVocabulary, kContext, kWidth)(ids);
  h = tg::nn::Dropout(dropout)(h);
  for (int64_t i = 0; i < kLayers; ++i)
    h = tg::nn::TransformerDecoder(kFeedForward, kHeads, dropout, "gelu", 1e-5f, /*normalize_first=*/true)(h);
  h = tg::nn::LayerNormalization(1e-5f)(h);
  return tg::nn::Model(ids, tg::nn::Dense(kVocabulary, "linear", /*use_bias=*/false)(h), "char_gpt");
}

/// PyTorch's default initialisation, as the peer's modules have it:
/// embeddings N(0, 1); each Linear's weight and bias uniform in +-1 /
/// sqrt(fan_in) (kaiming_uniform with a = sqrt(5)); LayerNorm 1 and 0. The
/// attention kernels {E, heads, head_dim} take E inputs, the output kernel
/// {heads, head_dim, E} heads x head_dim; a bias takes its kernel's bound.
inline void init_like_pytorch(tg::nn::Model& m, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto ends_with = [](const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  for (const tg::nn::Weight& w : m.weights()) {
    float* v = w.value.data<float>();
    const int64_t n = w.value.numel();
    const tg::Shape& s = w.value.shape();
    if (ends_with(w.name, ".embeddings")) {
      std::normal_distribution<float> d(0.0f, 1.0f);
      for (int64_t i = 0; i < n; ++i) v[i] = d(rng);
      continue;
    }
    if (ends_with(w.name, "gamma") || ends_with(w.name, "beta")) continue;  // LayerNorm: as built, 1 and 0
    int64_t fan_in = 0;
    if (ends_with(w.name, "output_kernel"))
      fan_in = s[0] * s[1];
    else if (ends_with(w.name, "kernel"))
      fan_in = s[0];
    else if (ends_with(w.name, "output_bias"))
      fan_in = kWidth;  // the output projection's inputs: heads x head_dim
    else if (ends_with(w.name, "_bias"))
      fan_in = kWidth;  // query, key, value: their projection's E inputs
    else if (ends_with(w.name, "intermediate_dense.bias"))
      fan_in = kWidth;
    else if (ends_with(w.name, "output_dense.bias"))
      fan_in = kFeedForward;
    else
      throw tg::ValueError("char_gpt: no initialisation rule for weight " + w.name);
    const float bound = 1.0f / std::sqrt(float(fan_in));
    std::uniform_real_distribution<float> d(-bound, bound);
    for (int64_t i = 0; i < n; ++i) v[i] = d(rng);
  }
}

/// AdamW lr 1e-3 (betas 0.9 and 0.999, epsilon 1e-8, weight decay 0.01 on
/// every weight, as torch.optim.AdamW) on a cosine schedule to 0 over
/// `steps` updates.
inline tg::OptimizerSpec optimizer(int64_t steps) {
  return tg::OptimizerSpec::adamw(
      tg::CosineDecay{.initial_learning_rate = 1e-3f, .decay_steps = std::max<int64_t>(steps, 1)}, 0.01f);
}

/// Random windows of kContext + 1 bytes of `text`: inputs {kBatch, kContext}
/// and the next bytes as targets, both int32.
struct Batches {
  std::span<const uint8_t> text;
  std::mt19937_64 rng;
  tg::Tensor x = tg::Tensor::zeros(tg::Shape{kBatch, kContext}, tg::DType::Int32);
  tg::Tensor y = tg::Tensor::zeros(tg::Shape{kBatch, kContext}, tg::DType::Int32);
  /// Throws ValueError for a text shorter than a window and its next byte.
  Batches(std::span<const uint8_t> t, uint64_t seed) : text(t), rng(seed) {
    if (t.size() < size_t(kContext) + 2)
      throw tg::ValueError("char_gpt::Batches: a text of " + std::to_string(t.size()) + " bytes holds no window of " +
                           std::to_string(kContext + 1) + " bytes");
  }
  void next() {
    std::uniform_int_distribution<size_t> start(0, text.size() - size_t(kContext) - 2);
    int32_t* px = x.data<int32_t>();
    int32_t* py = y.data<int32_t>();
    for (int64_t r = 0; r < kBatch; ++r) {
      const size_t s = start(rng);
      for (int64_t t = 0; t < kContext; ++t) {
        px[r * kContext + t] = text[s + size_t(t)];
        py[r * kContext + t] = text[s + size_t(t) + 1];
      }
    }
  }
};

/// A string's bytes as tokens (0..255).
inline std::vector<int32_t> tokens_of(const std::string& text) {
  std::vector<int32_t> t;
  for (char c : text) t.push_back(int32_t(static_cast<unsigned char>(c)));
  return t;
}

/// What `--model gpt` runs.
struct RunOptions {
  int64_t steps = 2000;                    ///< optimizer steps (the cosine schedule's length)
  std::string prompt = "Abdication \\Ab";  ///< the peer's prompt: the start of a GCIDE entry
  int64_t sample_bytes = 300;              ///< bytes generated after the prompt
  tg::nn::SamplerOptions sampler;          ///< greedy by default, as the peer
  uint64_t seed = 0;                       ///< weights, batches and dropout
  std::string text = kGcide;               ///< the corpus (gzip or plain)
  int verbose = 1;                         ///< 0: results only
  std::string save_path;                   ///< a GGUF file for the trained model; empty: none
};

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

/// Steps `trainer` on `steps` batches of `batches` (next() fills its x and
/// y), printing the mean training loss every 100 steps when verbose; returns
/// the median step time in seconds, the first min(10, steps / 2) steps
/// left out as the peer leaves out its warm-up.
template <class Source>
double train_steps(tg::nn::Trainer& trainer, Source& batches, int64_t steps, int verbose) {
  using Clock = std::chrono::steady_clock;
  std::vector<double> times;
  double loss_sum = 0.0;
  int64_t loss_n = 0;
  const auto start = Clock::now();
  for (int64_t i = 0; i < steps; ++i) {
    batches.next();
    const auto t0 = Clock::now();
    const float loss = trainer.step(batches.x, batches.y);
    if (i >= std::min<int64_t>(10, steps / 2)) times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    loss_sum += loss, ++loss_n;
    if (verbose && ((i + 1) % 100 == 0 || i + 1 == steps)) {
      std::printf("step %5lld/%lld  train loss %.4f  (%.0f ms/step, %.0f s)\n", (long long)(i + 1), (long long)steps,
                  loss_sum / double(loss_n), 1e3 * median(times),
                  std::chrono::duration<double>(Clock::now() - start).count());
      std::fflush(stdout);
      loss_sum = 0.0, loss_n = 0;
    }
  }
  return median(times);
}

/// The mean loss over the next 32 batches of `held_out` (the peer's fixed validation batches).
template <class Source>
double validation_loss(tg::nn::Trainer& trainer, Source& held_out) {
  double sum = 0.0;
  for (int b = 0; b < 32; ++b) {
    held_out.next();
    sum += trainer.eval(held_out.x, held_out.y);
  }
  return sum / 32.0;
}

/// Trains on the first 4 MiB of the text (the last 5% held out), then prints
/// the validation loss over 32 fixed batches (nats and bits per byte) and
/// a sample from the prompt, generated with the key-value cache.
inline void run(const RunOptions& o) {
  using Clock = std::chrono::steady_clock;
  // What would fail only after the training, checked before it.
  if (o.prompt.empty()) throw tg::ValueError("--prompt: give at least one byte to start the sample from");
  if (!(o.sampler.temperature >= 0.0f) || !std::isfinite(o.sampler.temperature))
    throw tg::ValueError("--temperature: expected a finite number >= 0 (0: greedy); got " +
                         std::to_string(o.sampler.temperature));
  if (o.sampler.top_k > 0 && o.sampler.temperature == 0.0f)
    throw tg::ValueError("--top-k samples among the likeliest bytes, which needs --temperature > 0 (0 is greedy)");
  if (o.sampler.top_p < 1.0f && o.sampler.temperature == 0.0f)
    throw tg::ValueError("--top-p samples among the likeliest bytes, which needs --temperature > 0 (0 is greedy)");
  if (!o.save_path.empty()) {
    const std::filesystem::path dir = std::filesystem::absolute(o.save_path).parent_path();
    if (!std::filesystem::is_directory(dir))
      throw tg::IOError("--save " + o.save_path + ": the directory " + dir.string() + " does not exist");
  }
  const std::vector<uint8_t> text = read_text(o.text);
  const size_t n_val = text.size() / 20;
  const std::span<const uint8_t> train(text.data(), text.size() - n_val), val(text.data() + train.size(), n_val);
  tg::manual_seed(o.seed);
  tg::nn::Model m = model();
  init_like_pytorch(m, o.seed);
  m.compile(optimizer(o.steps), "sparse_categorical_crossentropy");
  std::printf(
      "tensorgrad: character-level GPT on %s (%zu training bytes, %zu validation bytes), %lld blocks of "
      "width %lld, %lld heads, context %lld, batch %lld, AdamW lr 1e-3 cosine over %lld steps, %d threads\n",
      o.text.c_str(), train.size(), val.size(), (long long)kLayers, (long long)kWidth, (long long)kHeads,
      (long long)kContext, (long long)kBatch, (long long)o.steps, tg::num_threads());
  tg::nn::Trainer trainer(m, {.batch_size = kBatch});
  Batches batches(train, o.seed + 1);
  const double step_seconds = train_steps(trainer, batches, o.steps, o.verbose);
  std::printf("training step: %.1f ms median\n", 1e3 * step_seconds);
  Batches held_out(val, 1);
  const double val_loss = validation_loss(trainer, held_out);
  std::printf("validation loss %.4f nats per byte, %.4f bits per byte (32 batches of %lld x %lld bytes)\n", val_loss,
              val_loss / std::log(2.0), (long long)kBatch, (long long)kContext);
  tg::nn::Model trained = trainer.model();
  tg::nn::CausalLM lm(trained);
  const std::vector<int32_t> prompt = tokens_of(o.prompt);
  const auto t0 = Clock::now();
  const std::vector<int32_t> made = lm.generate(prompt, o.sample_bytes, o.sampler);
  const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("prompt \"%s\"\n", o.prompt.c_str());
  std::string sample = o.prompt;
  for (int32_t t : made) sample.push_back(char(t));
  std::printf("sample (%lld bytes at %.0f bytes/s, %s):\n", (long long)o.sample_bytes, double(o.sample_bytes) / dt,
              o.sampler.temperature > 0.0f ? "sampled" : "greedy");
  std::fwrite(sample.data(), 1, sample.size(), stdout);  // the bytes as they are, a 0 byte included
  std::printf("\n");
  if (!o.save_path.empty()) {
    tg::io::save_model(trained, o.save_path);
    std::printf("model saved to %s\n", o.save_path.c_str());
  }
}

}  // namespace char_gpt
