#pragma once
// Text generation from a trained causal language model, one position at a
// time with a key-value cache (KerasHub's CausalLM.generate and its
// samplers).
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "tensorgrad/core/tensor.h"
#include "tensorgrad/nn/model.h"

namespace tensorgrad::nn {

/// How the next token is chosen from the logits (KerasHub's samplers):
/// temperature 0 takes the largest logit (greedy, the first of equal ones,
/// as torch.argmax); temperature > 0 draws from softmax(logits /
/// temperature), restricted to the top_k largest logits when top_k > 0,
/// and then to the nucleus when top_p < 1: the fewest most likely tokens
/// whose probabilities (after temperature and top_k) sum to at least top_p
/// (Holtzman et al. 2019; KerasHub's TopPSampler, Hugging Face's top_p).
struct SamplerOptions {
  float temperature = 0.0f;  ///< >= 0; 0: greedy
  int64_t top_k = 0;         ///< >= 0; 0: every token
  float top_p = 1.0f;        ///< in (0, 1]; 1: every token top_k keeps
  uint64_t seed = 0;         ///< the draws' random stream (std::mt19937_64)
};

/// A causal language model run one position at a time for generation. The
/// model maps token ids {T} to logits {T, V}: a TokenAndPositionEmbedding,
/// TransformerDecoder blocks without cross-attention, and position-wise
/// layers (Dense, LayerNormalization, Dropout, Activation, Add), in any
/// functional arrangement; or a LLaMA model (LlamaCausalLM: a
/// ReversibleEmbedding, LlamaDecoder blocks with rotary positions,
/// RMSNormalization), whose capacity is its input length T. Each TransformerDecoder keeps the keys and values
/// of the positions seen so far in a cache that is part of the decoding
/// graph (preallocated for the embedding's sequence_length positions and
/// written in place), so a token costs one position's work rather than the
/// whole context's. The graph is planned once, for one sequence, and runs on
/// the CPU on the model's own weight tensors (not a copy): training the model
/// further changes what it generates, and the positions already in the cache
/// keep the keys and values of the old weights, so reset() (generate does)
/// after training. Every method but the move operations throws StateError on
/// a moved-from object.
class CausalLM {
 public:
  /// Throws ValueError when the model is not such a chain (naming the first
  /// layer that is not one of those above, or the input that is not token
  /// ids {T}), or when the embedding's vocabulary is not the logits' V,
  /// StateError for a released model.
  explicit CausalLM(const Model& model);
  ~CausalLM();
  /// Moves the graph and its cache; the moved-from object is empty.
  ///@{
  CausalLM(CausalLM&&) noexcept;
  CausalLM& operator=(CausalLM&&) noexcept;
  ///@}

  /// Forgets every position: the next token is at position 0.
  void reset();
  /// Feeds `token` at the next position; returns the logits {V} for the
  /// token after it (valid until the next call). Throws IndexError for a
  /// token outside [0, V), or 0 in a model whose embedding has mask_zero
  /// (padding, not text), and ValueError when all capacity() positions are
  /// used (reset, or feed the recent tokens again, as generate does).
  const Tensor& next(int32_t token);
  /// Positions fed since the last reset.
  int64_t position() const;
  /// The most positions the cache holds: the embedding's sequence_length.
  int64_t capacity() const;
  /// V: the logits per position.
  int64_t vocabulary_size() const;
  /// Feeds `prompt` (after a reset), then chooses and feeds max_new_tokens
  /// tokens; returns those tokens. Each token is chosen from the logits at
  /// the last position of the window in the cache: the whole text so far
  /// (prompt and generated tokens) while it fits in capacity() positions, a
  /// full window included. When a chosen token does not fit, the window
  /// starts again from the last capacity() / 2 tokens (at least one) of the
  /// text, that token included; a prompt longer than capacity() starts from
  /// its last capacity() / 2 tokens. Greedy decoding thus gives the tokens
  /// that predict() on each window gives at its last position. A model
  /// whose embedding has mask_zero never
  /// gets token 0 (its padding). Throws ValueError for an empty prompt, a negative
  /// max_new_tokens or bad sampler options, IndexError for a prompt token
  /// outside [0, V).
  std::vector<int32_t> generate(std::span<const int32_t> prompt, int64_t max_new_tokens,
                                const SamplerOptions& sampler = {});
  /// The token `sampler` chooses from logits {V}, drawing from `rng` when
  /// the temperature is > 0. Throws ShapeError for logits that are not
  /// float32 {V} with V >= 1, ValueError for a negative or NaN temperature,
  /// a negative top_k, a top_p outside (0, 1], or non-finite logits.
  static int32_t sample(const Tensor& logits, const SamplerOptions& sampler, std::mt19937_64& rng);

 private:
  struct Impl;
  Impl& live() const;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tensorgrad::nn
