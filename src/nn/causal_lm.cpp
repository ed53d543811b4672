// Generation with a key-value cache: the model's layer calls walked once into
// a graph of one position, whose TransformerDecoders read and write their
// caches (state tensors of the graph) in place.
#include "tensorgrad/nn/causal_lm.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>
#include <string>
#include <unordered_map>

#include "tensorgrad/backend/executable.h"
#include "tensorgrad/core/error.h"
#include "tensorgrad/graph/graph.h"
#include "tensorgrad/nn/attention.h"
#include "tensorgrad/nn/llama.h"

namespace tensorgrad::nn {

struct CausalLM::Impl {
  std::unique_ptr<Executable> exe;
  Value ids, positions, slot, visible, logits_value;
  Tensor ids_t, positions_t, slot_t, visible_t, logits;
  std::vector<Tensor> caches;
  int64_t capacity = 0, vocabulary = 0, position = 0;
  bool zero_is_padding = false;  // mask_zero: the full forward hides token 0, which the cache would not
};

namespace {

// Layers that act on each position alone: with one position they compute
// what they compute at that position of a whole sequence.
bool position_wise(const Layer& layer) {
  static const std::set<std::string> kinds{"Dense",          "LayerNormalization",  "Dropout", "Activation",
                                           "Add",            "Subtract",            "Multiply", "Average",
                                           "Maximum",        "Minimum",             "RMSNormalization",
                                           "GatedFeedForward", "ReversibleEmbedding"};
  return kinds.count(layer.type()) > 0;
}

}  // namespace

CausalLM::CausalLM(const Model& model) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  const std::vector<SymbolicTensor>& inputs = model.inputs();
  if (inputs.size() != 1 || inputs[0].shape().rank() != 1)
    throw ValueError("CausalLM takes a model of one input, token ids {steps}; '" + model.name() + "' has " +
                     std::to_string(inputs.size()) + " input(s)" +
                     (inputs.size() == 1 ? " of shape " + inputs[0].shape().str() : std::string()));
  const std::vector<SymbolicTensor>& outputs = model.outputs();
  if (outputs.size() != 1 || outputs[0].shape().rank() != 2)
    throw ValueError("CausalLM takes a model of one output, logits {steps, vocabulary}; '" + model.name() + "' gives " +
                     std::to_string(outputs.size()) + " output(s)" +
                     (outputs.empty() ? std::string() : ", the first " + outputs[0].shape().str()));
  m.vocabulary = model.outputs()[0].shape()[1];
  // The capacity is the shortest position table: positions past it have no embedding.
  m.capacity = std::numeric_limits<int64_t>::max();
  bool rotary = false;  // LlamaDecoders take positions from the step itself; the capacity is the model's input length
  for (const LayerCall* c : model.layer_calls()) {
    if (dynamic_cast<const LlamaDecoder*>(c->layer.get())) rotary = true;
    if (const auto* e = dynamic_cast<const ReversibleEmbedding*>(c->layer.get()); e && e->input_dim() != m.vocabulary)
      throw ValueError("CausalLM: the embedding '" + e->name() + "' reads " + std::to_string(e->input_dim()) +
                       " token ids but the model gives logits over " + std::to_string(m.vocabulary) +
                       "; a language model's output is its vocabulary");
    if (const auto* e = dynamic_cast<const TokenAndPositionEmbedding*>(c->layer.get())) {
      m.capacity = std::min(m.capacity, e->sequence_length());
      if (e->vocabulary_size() != m.vocabulary)  // a chosen token is fed back: both are one vocabulary
        throw ValueError("CausalLM: the embedding '" + e->name() + "' reads " + std::to_string(e->vocabulary_size()) +
                         " token ids but the model gives logits over " + std::to_string(m.vocabulary) +
                         "; a language model's output is its vocabulary");
    }
    m.zero_is_padding = m.zero_is_padding || c->masked;
  }
  if (m.capacity == std::numeric_limits<int64_t>::max() && rotary) m.capacity = inputs[0].shape()[0];
  if (m.capacity == std::numeric_limits<int64_t>::max())
    throw ValueError("CausalLM: '" + model.name() +
                     "' has no TokenAndPositionEmbedding or LlamaDecoder (rotary positions) to give positions");

  Graph g;
  m.ids = g.input("ids", Shape{1, 1}, DType::Int32);
  m.positions = g.input("positions", Shape{1, 1}, DType::Int32);
  m.slot = g.input("slot", Shape{1, m.capacity, 1});
  m.visible = g.input("visible", Shape{1, 1, m.capacity});
  std::vector<Value> updates;
  std::unordered_map<const LayerCall*, Value> values;
  values[inputs[0].call().get()] = m.ids;
  const CallOptions inference{false, false};
  for (const LayerCall* c : model.layer_calls()) {
    std::vector<Value> args;
    for (const SymbolicTensor& t : c->inputs) args.push_back(values.at(t.call().get()));
    Layer* layer = c->layer.get();
    if (auto* e = dynamic_cast<TokenAndPositionEmbedding*>(layer)) {
      values[c] = e->call_at(g, args.at(0), m.positions);
    } else if (auto* d = dynamic_cast<TransformerDecoder*>(layer)) {
      if (args.size() != 1)
        throw ValueError("CausalLM: TransformerDecoder '" + d->name() + "' is called on " +
                         std::to_string(args.size()) + " inputs; generation takes blocks on the sequence alone");
      DecoderCache cache;
      for (Value* v : {&cache.key, &cache.value}) {
        m.caches.push_back(Tensor::zeros(Shape{d->num_heads(), m.capacity, d->head_dim()}));
        *v = g.state(m.caches.back(), d->name() + (v == &cache.key ? "/key_cache" : "/value_cache"));
      }
      cache.slot = m.slot, cache.visible = m.visible, cache.updates = &updates;
      values[c] = d->call_with_cache(g, args.at(0), cache);
    } else if (auto* l = dynamic_cast<LlamaDecoder*>(layer)) {
      DecoderCache cache;
      for (Value* v : {&cache.key, &cache.value}) {
        m.caches.push_back(Tensor::zeros(Shape{l->num_key_value_heads(), m.capacity, l->head_dim()}));
        *v = g.state(m.caches.back(), l->name() + (v == &cache.key ? "/key_cache" : "/value_cache"));
      }
      cache.slot = m.slot, cache.visible = m.visible, cache.updates = &updates;
      values[c] = l->call_with_cache(g, args.at(0), g.reshape(m.positions, Shape{1}), cache);
    } else if (position_wise(*layer)) {
      values[c] = layer->call_inputs(g, args, inference);
    } else {
      throw ValueError("CausalLM: layer '" + layer->name() + "' (" + layer->type() +
                       ") is not one generation can run a position at a time; it takes TokenAndPositionEmbedding, "
                       "TransformerDecoder, LlamaDecoder and position-wise layers (Dense, LayerNormalization, "
                       "RMSNormalization, GatedFeedForward, ReversibleEmbedding, Dropout, Activation, "
                       "element-wise merges)");
    }
  }
  m.logits_value = g.reshape(values.at(model.outputs()[0].call().get()), Shape{m.vocabulary});
  std::vector<Value> outs{m.logits_value};
  outs.insert(outs.end(), updates.begin(), updates.end());
  m.exe = std::make_unique<Executable>(std::move(g), outs);
  m.ids_t = Tensor::zeros(Shape{1, 1}, DType::Int32);
  m.positions_t = Tensor::zeros(Shape{1, 1}, DType::Int32);
  m.slot_t = Tensor::zeros(Shape{1, m.capacity, 1});
  m.visible_t = Tensor::zeros(Shape{1, 1, m.capacity});
  m.logits = Tensor::zeros(Shape{m.vocabulary});
  reset();
}

CausalLM::~CausalLM() = default;
CausalLM::CausalLM(CausalLM&&) noexcept = default;
CausalLM& CausalLM::operator=(CausalLM&&) noexcept = default;

void CausalLM::reset() {
  Impl& m = live();
  m.position = 0;
  std::fill_n(m.visible_t.data<float>(), m.capacity, -INFINITY);
  std::fill_n(m.slot_t.data<float>(), m.capacity, 0.0f);
  for (Tensor& c : m.caches) std::fill_n(c.data<float>(), c.numel(), 0.0f);
}

CausalLM::Impl& CausalLM::live() const {
  if (!impl_) throw StateError("CausalLM: this object was moved from; use the one it was moved to");
  return *impl_;
}

const Tensor& CausalLM::next(int32_t token) {
  Impl& m = live();
  if (token < 0 || token >= m.vocabulary)
    throw IndexError("CausalLM: token " + std::to_string(token) + " is outside [0, " + std::to_string(m.vocabulary) +
                     ")");
  if (token == 0 && m.zero_is_padding)
    throw IndexError(
        "CausalLM: token 0 is padding for this model (its embedding has mask_zero), not text to "
        "continue; feed tokens in [1, " +
        std::to_string(m.vocabulary) + ")");
  if (m.position >= m.capacity)
    throw ValueError("CausalLM: all " + std::to_string(m.capacity) +
                     " positions are used; reset() and feed the recent tokens again (generate does)");
  const int64_t p = m.position;
  m.ids_t.data<int32_t>()[0] = token;
  m.positions_t.data<int32_t>()[0] = int32_t(p);
  float* slot = m.slot_t.data<float>();
  if (p > 0) slot[p - 1] = 0.0f;
  slot[p] = 1.0f;
  m.visible_t.data<float>()[p] = 0.0f;
  m.exe->bind(m.ids, m.ids_t);
  m.exe->bind(m.positions, m.positions_t);
  m.exe->bind(m.slot, m.slot_t);
  m.exe->bind(m.visible, m.visible_t);
  m.exe->run();
  m.exe->copy_output(m.logits_value, m.logits);
  ++m.position;
  return m.logits;
}

int64_t CausalLM::position() const { return live().position; }
int64_t CausalLM::capacity() const { return live().capacity; }
int64_t CausalLM::vocabulary_size() const { return live().vocabulary; }

int32_t CausalLM::sample(const Tensor& logits, const SamplerOptions& s, std::mt19937_64& rng) {
  if (!(s.temperature >= 0.0f) || s.top_k < 0 || !(s.top_p > 0.0f && s.top_p <= 1.0f))
    throw ValueError(
        "CausalLM: the sampler takes temperature >= 0 (0: greedy), top_k >= 0 (0: all) and top_p in (0, 1]; got " +
        std::to_string(s.temperature) + ", " + std::to_string(s.top_k) + " and " + std::to_string(s.top_p));
  if (logits.shape().rank() != 1 || logits.numel() == 0 || logits.dtype() != DType::Float32)
    throw ShapeError("CausalLM: the sampler takes float32 logits {vocabulary} of at least one token; got " +
                     logits.shape().str() + " " + dtype_name(logits.dtype()));
  const float* z = logits.data<float>();
  const int64_t n = logits.numel();
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(z[i]))
      throw ValueError("CausalLM: logit " + std::to_string(i) + " is " + std::to_string(z[i]) +
                       "; the model's weights or inputs hold non-finite values");
  if (s.temperature == 0.0f) return int32_t(std::max_element(z, z + n) - z);
  std::vector<int32_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  const int64_t k = s.top_k > 0 ? std::min(s.top_k, n) : n;
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [z](int32_t a, int32_t b) { return z[a] > z[b]; });
  std::vector<double> p(static_cast<size_t>(k));
  double total = 0.0;
  for (int64_t i = 0; i < k; ++i)
    total += p[size_t(i)] = std::exp(double(z[order[size_t(i)]] - z[order[0]]) / s.temperature);
  if (s.top_p < 1.0f) {
    // The fewest most likely tokens whose probability reaches top_p (the nucleus): p is sorted, largest first.
    double kept = 0.0;
    int64_t n_kept = 0;
    while (n_kept < k && kept < double(s.top_p) * total) kept += p[size_t(n_kept++)];
    p.resize(size_t(std::max<int64_t>(n_kept, 1)));
  }
  std::discrete_distribution<int64_t> draw(p.begin(), p.end());
  return order[size_t(draw(rng))];
}

std::vector<int32_t> CausalLM::generate(std::span<const int32_t> prompt, int64_t max_new_tokens,
                                        const SamplerOptions& sampler) {
  if (prompt.empty() || max_new_tokens < 0)
    throw ValueError("CausalLM::generate takes a prompt of at least one token and max_new_tokens >= 0; got " +
                     std::to_string(prompt.size()) + " tokens and " + std::to_string(max_new_tokens));
  Impl& m = live();
  std::mt19937_64 rng(sampler.seed);
  std::vector<int32_t> text(prompt.begin(), prompt.end()), made;
  auto feed = [&](std::span<const int32_t> tokens) {
    reset();
    for (int32_t t : tokens) next(t);
  };
  // A prompt longer than the cache starts from its last half-window, as a full cache does.
  const size_t half = size_t(std::max<int64_t>(capacity() / 2, 1));
  feed(prompt.size() <= size_t(capacity()) ? prompt : prompt.subspan(prompt.size() - half));
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    // The logits are those of the window fed so far, full or not: a full
    // cache restarts only when the chosen token does not fit (below).
    int32_t t;
    if (m.zero_is_padding) {  // never choose the padding
      Tensor z = m.logits.clone();
      z.data<float>()[0] = std::numeric_limits<float>::lowest();
      t = sample(z, sampler, rng);
    } else {
      t = sample(m.logits, sampler, rng);
    }
    made.push_back(t), text.push_back(t);
    if (i + 1 == max_new_tokens) break;
    if (position() == capacity())
      feed(std::span<const int32_t>(text).subspan(text.size() - half));  // 1 position
    else
      next(t);
  }
  return made;
}

}  // namespace tensorgrad::nn
