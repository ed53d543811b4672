// The LLaMA family's layers and models on the fused RMS norm, rotary and
// attention ops (KerasHub's Llama*, Keras 3's RMSNormalization and
// GroupedQueryAttention).
#include "tensorgrad/nn/llama.h"

#include <cmath>
#include <map>
#include <mutex>
#include <memory>
#include <string>

#include "nn/token_ids.h"
#include "tensorgrad/core/error.h"
#include "tensorgrad/core/random.h"
#include "tensorgrad/nn/attention.h"

namespace tensorgrad::nn {

namespace detail {

// Positions 0..T-1 (int32 {T}) of a full sequence, bound as a constant: one
// tensor per length for the process, so every graph of that length binds the
// same memory (Builder::parameter gives one Value per tensor).
Value positions_from_zero(Builder& b, int64_t t) {
  static std::mutex mutex;
  static std::map<int64_t, Tensor> tables;
  Tensor table;
  {
    std::lock_guard<std::mutex> lock(mutex);
    Tensor& slot = tables[t];
    if (!slot.defined()) {
      slot = Tensor::zeros(Shape{t}, DType::Int32);
      for (int64_t i = 0; i < t; ++i) slot.data<int32_t>()[i] = int32_t(i);
    }
    table = slot;
  }
  return b.parameter(table, "rotary_positions", false);
}

// The bound weights of one grouped-query attention: kernels in Keras 3's
// EinsumDense layouts ({E, heads, D}, the output {Hq, D, E}); biases
// optional (invalid: none).
struct GqaWeights {
  Value query, key, value, output, query_bias, key_bias, value_bias, output_bias;
};

struct GqaCall {
  int64_t num_query_heads = 0, num_key_value_heads = 0, head_dim = 0;
  const std::optional<RopeOptions>* rotary = nullptr;
  Value positions;  // int32 {T}; invalid: 0..T-1
  float dropout = 0.0f;
  uint64_t seed = 0;
  const DecoderCache* cache = nullptr;
};

// x {B, T, E} -> {B, T, E}.
Value grouped_query_attention(Builder& b, const GqaWeights& w, const GqaCall& c, Value x) {
  const Shape s = b.shape(x);
  const int64_t batch = s[0], t = s[1], e = s[2], d = c.head_dim;
  const Value rows = b.reshape(x, Shape{batch * t, e});
  // rows W {E, heads D} as {B, T, heads, D}, rotated when the layer has rotary positions.
  auto project = [&](Value kernel, Value bias, int64_t heads, bool rotate) {
    const Value k2 = b.reshape(kernel, Shape{e, heads * d});
    Value y = bias.valid() ? b.matmul(rows, k2, b.reshape(bias, Shape{heads * d})) : b.matmul(rows, k2);
    y = b.reshape(y, Shape{batch, t, heads, d});
    if (rotate && c.rotary && c.rotary->has_value())
      y = b.rotary_embedding(y, c.positions.valid() ? c.positions : positions_from_zero(b, t), **c.rotary);
    return b.reshape(b.transpose(y, 1, 2), Shape{batch * heads, t, d});  // {B heads, T, D}
  };
  const Value q = project(w.query, w.query_bias, c.num_query_heads, true);
  Value k = project(w.key, w.key_bias, c.num_key_value_heads, true);
  Value v = project(w.value, w.value_bias, c.num_key_value_heads, false);
  Builder::AttentionOptions o;
  if (c.cache) {
    // The step's keys and values written into the cache at its slot, attended from it.
    auto write = [&](Value cache, Value fresh) {
      const Value all = b.add(cache, b.mul(c.cache->slot, b.sub(fresh, cache)));
      c.cache->updates->push_back(b.apply(OpKind::Assign, {cache, all}));
      return all;
    };
    k = write(c.cache->key, k), v = write(c.cache->value, v);
    o.mask = c.cache->visible;
  } else {
    o.causal = true;
  }
  o.scale = 1.0f / std::sqrt(float(d));
  o.dropout = c.dropout, o.seed = c.seed;
  const Value a = b.scaled_dot_product_attention(q, k, v, o);  // {B Hq, T, D}, key/value heads shared
  const int64_t hq = c.num_query_heads;
  const Value merged = b.reshape(b.transpose(b.reshape(a, Shape{batch, hq, t, d}), 1, 2), Shape{batch * t, hq * d});
  const Value ok = b.reshape(w.output, Shape{hq * d, e});
  const Value y = w.output_bias.valid() ? b.matmul(merged, ok, w.output_bias) : b.matmul(merged, ok);
  return b.reshape(y, Shape{batch, t, e});
}

// down(activation(x gate) * (x up)) on x {..., E}.
Value gated_feed_forward(Builder& b, Value x, Value gate, Value up, Value down, Activation activation) {
  const Shape s = b.shape(x);
  const Value rows = b.reshape(x, Shape{s.numel() / s[-1], s[-1]});
  const Value h = b.mul(apply_activation(b, activation, b.matmul(rows, gate)), b.matmul(rows, up));
  return b.reshape(b.matmul(h, down), s);
}

}  // namespace detail

namespace {

std::string pairing_name(RopePairing p) {
  switch (p) {
    case RopePairing::Halves: return "halves";
    case RopePairing::Adjacent: return "adjacent";
  }
  throw ValueError("RotaryEmbedding: unknown pairing " + std::to_string(int(p)));
}

void check_rope(const char* who, const RopeOptions& o) {
  if (!(o.theta > 0.0f) || !std::isfinite(o.theta) || !(o.scaling_factor > 0.0f) || !std::isfinite(o.scaling_factor))
    throw ValueError(std::string(who) + ": max_wavelength (theta) and scaling_factor must be finite and > 0; got " +
                     std::to_string(o.theta) + " and " + std::to_string(o.scaling_factor));
  if (o.dims < 0 || o.dims % 2 != 0)
    throw ValueError(std::string(who) + ": dims must be even and >= 0 (0: every feature); got " +
                     std::to_string(o.dims));
}

}  // namespace

// ---- RMSNormalization ----

RMSNormalization::RMSNormalization(float epsilon) : Layer("rms_normalization"), epsilon_(epsilon) {
  if (!(epsilon > 0.0f)) throw ValueError("RMSNormalization: epsilon must be > 0; got " + std::to_string(epsilon));
}

Shape RMSNormalization::build(const Shape& input_shape) {
  if (input_shape.rank() < 1 || input_shape[-1] < 1)
    throw ShapeError("RMSNormalization '" + name() + "' takes inputs with a last axis of features; got " +
                     input_shape.str());
  if (scale_.valid()) return input_shape;  // shared: the same scale
  scale_ = add_weight({.name = "scale", .shape = {input_shape[-1]}, .initializer = initializers::ones()});
  return input_shape;
}

Value RMSNormalization::call(Builder& b, Value x, const CallOptions&) {
  return b.rms_norm(x, epsilon_, bind_weight(b, scale_));
}

LayerConfig RMSNormalization::config() const { return LayerConfig(type()).set("epsilon", double(epsilon_)); }

// ---- RotaryEmbedding ----

RotaryEmbedding::RotaryEmbedding(float max_wavelength, float scaling_factor, RopePairing pairing, int64_t dims)
    : RotaryEmbedding(RopeOptions{.dims = dims, .theta = max_wavelength, .scaling_factor = scaling_factor,
                                  .pairing = pairing}) {}

RotaryEmbedding::RotaryEmbedding(const RopeOptions& options) : Layer("rotary_embedding"), options_(options) {
  check_rope("RotaryEmbedding", options);
  (void)pairing_name(options.pairing);
}

Shape RotaryEmbedding::build(const Shape& s) {
  if (s.rank() != 3)
    throw ShapeError("RotaryEmbedding '" + name() + "' takes {steps, heads, head_dim}; got " + s.str() +
                     " (reshape {steps, features} to heads first)");
  if (options_.dims > s[2] || (options_.dims == 0 && s[2] % 2 != 0))
    throw ShapeError("RotaryEmbedding '" + name() + "' rotates " +
                     (options_.dims == 0 ? "every feature, an even count," : std::to_string(options_.dims)) +
                     " of each head's " + std::to_string(s[2]) + " features; got " + s.str());
  return s;
}

Value RotaryEmbedding::call(Builder& b, Value x, const CallOptions&) {
  return b.rotary_embedding(x, detail::positions_from_zero(b, b.shape(x)[1]), options_);
}

LayerConfig RotaryEmbedding::config() const {
  return LayerConfig(type())
      .set("max_wavelength", double(options_.theta))
      .set("scaling_factor", double(options_.scaling_factor))
      .set("pairing", pairing_name(options_.pairing))
      .set("dims", options_.dims);
}

RopePairing rope_pairing_from_name(const std::string& name) {
  if (name == "halves") return RopePairing::Halves;
  if (name == "adjacent") return RopePairing::Adjacent;
  throw ValueError("RotaryEmbedding: pairing must be \"halves\" or \"adjacent\"; got \"" + name + "\"");
}

// ---- GroupedQueryAttention ----

GroupedQueryAttention::GroupedQueryAttention(int64_t head_dim, int64_t num_query_heads, int64_t num_key_value_heads,
                                             float dropout, bool use_bias, std::optional<RopeOptions> rotary,
                                             std::optional<uint64_t> seed)
    : Layer("grouped_query_attention"),
      head_dim_(head_dim),
      num_query_heads_(num_query_heads),
      num_key_value_heads_(num_key_value_heads),
      dropout_(dropout),
      use_bias_(use_bias),
      rotary_(rotary) {
  if (head_dim < 1 || num_query_heads < 1 || num_key_value_heads < 1)
    throw ValueError("GroupedQueryAttention: head_dim, num_query_heads and num_key_value_heads must be >= 1; got " +
                     std::to_string(head_dim) + ", " + std::to_string(num_query_heads) + " and " +
                     std::to_string(num_key_value_heads));
  if (num_query_heads % num_key_value_heads != 0)
    throw ValueError("GroupedQueryAttention: num_key_value_heads (" + std::to_string(num_key_value_heads) +
                     ") must divide num_query_heads (" + std::to_string(num_query_heads) +
                     "): each key/value head serves an equal group of query heads");
  if (!(dropout >= 0.0f && dropout < 1.0f))
    throw ValueError("GroupedQueryAttention: dropout must be in [0, 1); got " + std::to_string(dropout));
  if (rotary) check_rope("GroupedQueryAttention", *rotary);
  if (rotary && rotary->dims > head_dim)
    throw ValueError("GroupedQueryAttention: the rotary dims (" + std::to_string(rotary->dims) +
                     ") exceed head_dim (" + std::to_string(head_dim) + ")");
  if (rotary && rotary->dims == 0 && head_dim % 2 != 0)
    throw ValueError("GroupedQueryAttention: rotary embedding of every feature needs an even head_dim; got " +
                     std::to_string(head_dim));
  seed_ = seed ? *seed : global_generator()();
}

Shape GroupedQueryAttention::build(const Shape& s) {
  if (s.rank() != 2)
    throw ShapeError("GroupedQueryAttention '" + name() + "' takes a sequence {steps, features}; got " + s.str());
  if (w_[0].valid()) {
    if (s[1] != built_features_)
      throw ShapeError("GroupedQueryAttention '" + name() + "' was built for " + std::to_string(built_features_) +
                       " features; a shared layer takes the same features in every call");
    return s;
  }
  built_features_ = s[1];
  const int64_t e = s[1], hq = num_query_heads_, hkv = num_key_value_heads_, d = head_dim_;
  auto kernel = [&](const char* n, const Shape& shape) {
    return add_weight({.name = n, .shape = shape, .initializer = initializers::glorot_uniform()});
  };
  auto bias = [&](const char* n, const Shape& shape) {
    return use_bias_ ? add_weight({.name = n, .shape = shape, .initializer = initializers::zeros()}) : WeightId();
  };
  w_[0] = kernel("query_kernel", {e, hq, d});
  w_[1] = bias("query_bias", {hq, d});
  w_[2] = kernel("key_kernel", {e, hkv, d});
  w_[3] = bias("key_bias", {hkv, d});
  w_[4] = kernel("value_kernel", {e, hkv, d});
  w_[5] = bias("value_bias", {hkv, d});
  w_[6] = kernel("output_kernel", {hq, d, e});
  w_[7] = bias("output_bias", {e});
  return s;
}

Value GroupedQueryAttention::call(Builder& b, Value x, const CallOptions& options) {
  auto bind = [&](WeightId id) { return id.valid() ? bind_weight(b, id) : Value{}; };
  detail::GqaWeights w;
  w.query = bind(w_[0]), w.query_bias = bind(w_[1]), w.key = bind(w_[2]), w.key_bias = bind(w_[3]);
  w.value = bind(w_[4]), w.value_bias = bind(w_[5]), w.output = bind(w_[6]), w.output_bias = bind(w_[7]);
  detail::GqaCall c;
  c.num_query_heads = num_query_heads_, c.num_key_value_heads = num_key_value_heads_, c.head_dim = head_dim_;
  c.rotary = &rotary_;
  if (options.training && dropout_ > 0.0f) c.dropout = dropout_, c.seed = seed_;
  return detail::grouped_query_attention(b, w, c, x);
}

LayerConfig GroupedQueryAttention::config() const {
  LayerConfig c(type());
  c.set("head_dim", head_dim_)
      .set("num_query_heads", num_query_heads_)
      .set("num_key_value_heads", num_key_value_heads_)
      .set("dropout", double(dropout_))
      .set("use_bias", use_bias_)
      .set("seed", int64_t(seed_))
      .set("rotary", rotary_.has_value());
  if (rotary_)
    c.set("rope_max_wavelength", double(rotary_->theta))
        .set("rope_scaling_factor", double(rotary_->scaling_factor))
        .set("rope_pairing", pairing_name(rotary_->pairing))
        .set("rope_dims", rotary_->dims);
  return c;
}

// ---- GatedFeedForward ----

GatedFeedForward::GatedFeedForward(int64_t intermediate_dim, const std::string& activation)
    : Layer("gated_feed_forward"), intermediate_dim_(intermediate_dim), activation_(activation) {
  if (intermediate_dim < 1)
    throw ValueError("GatedFeedForward: intermediate_dim must be >= 1; got " + std::to_string(intermediate_dim));
  (void)activation_from_name(activation);  // throws for an unknown name
}

Shape GatedFeedForward::build(const Shape& s) {
  if (s.rank() < 1) throw ShapeError("GatedFeedForward '" + name() + "' takes {..., features}; got " + s.str());
  if (gate_.valid()) return s;
  const int64_t e = s[-1], i = intermediate_dim_;
  auto kernel = [&](const char* n, const Shape& shape) {
    return add_weight({.name = n, .shape = shape, .initializer = initializers::glorot_uniform()});
  };
  gate_ = kernel("gate_kernel", {e, i});
  up_ = kernel("up_kernel", {e, i});
  down_ = kernel("down_kernel", {i, e});
  return s;
}

Value GatedFeedForward::call(Builder& b, Value x, const CallOptions&) {
  const Value gate = bind_weight(b, gate_), up = bind_weight(b, up_), down = bind_weight(b, down_);
  return detail::gated_feed_forward(b, x, gate, up, down, activation_from_name(activation_));
}

LayerConfig GatedFeedForward::config() const {
  return LayerConfig(type()).set("intermediate_dim", intermediate_dim_).set("activation", activation_);
}

// ---- ReversibleEmbedding ----

ReversibleEmbedding::ReversibleEmbedding(int64_t input_dim, int64_t output_dim, bool tie_weights)
    : Layer("reversible_embedding"), input_dim_(input_dim), output_dim_(output_dim), tie_weights_(tie_weights) {
  if (input_dim < 1 || output_dim < 1)
    throw ValueError("ReversibleEmbedding: input_dim and output_dim must be >= 1; got " + std::to_string(input_dim) +
                     " and " + std::to_string(output_dim));
}

Shape ReversibleEmbedding::build_inputs(std::span<const Shape> s) {
  if (s.size() != 1)
    throw ValueError("ReversibleEmbedding '" + name() + "' takes one input; got " + std::to_string(s.size()));
  return build(s[0]);
}

Shape ReversibleEmbedding::build(const Shape& s) {
  if (s.rank() == 1) {  // token ids {T}
    if (!embeddings_.valid())
      embeddings_ = add_weight({.name = "embeddings",
                                .shape = {input_dim_, output_dim_},
                                .initializer = initializers::random_uniform(-0.05f, 0.05f)});
    return Shape{s[0], output_dim_};
  }
  if (s.rank() != 2 || s[1] != output_dim_)
    throw ShapeError("ReversibleEmbedding '" + name() + "' takes token ids {steps} or, in reverse, a sequence {steps, " +
                     std::to_string(output_dim_) + "}; got " + s.str());
  if (!embeddings_.valid())
    throw ValueError("ReversibleEmbedding '" + name() +
                     "' is called in reverse before it embedded any ids; call it on token ids first");
  if (!tie_weights_ && !reverse_.valid())
    reverse_ = add_weight({.name = "reverse_embeddings",
                           .shape = {output_dim_, input_dim_},
                           .initializer = initializers::random_uniform(-0.05f, 0.05f)});
  return Shape{s[0], input_dim_};
}

Value ReversibleEmbedding::call(Builder& b, Value x, const CallOptions&) {
  const Shape s = b.shape(x);
  if (s.rank() == 2) {  // ids {B, T}
    const Value ids = b.dtype(x) == DType::Int32 ? x : b.apply(OpKind::ToIndex, {x});
    return b.apply(OpKind::Gather, {bind_weight(b, embeddings_), ids});
  }
  const Value rows = b.reshape(x, Shape{s[0] * s[1], s[2]});
  Value logits;
  if (tie_weights_) {
    OpAttrs a;
    a.trans_b = true;  // x embeddings^T without a transposed copy
    logits = b.apply(OpKind::MatMul, std::vector<Value>{rows, bind_weight(b, embeddings_)}, a);
  } else {
    logits = b.matmul(rows, bind_weight(b, reverse_));
  }
  return b.reshape(logits, Shape{s[0], s[1], input_dim_});
}

void ReversibleEmbedding::validate_input(const Tensor& x) const { detail::check_token_ids(name(), x, input_dim_); }

LayerConfig ReversibleEmbedding::config() const {
  return LayerConfig(type())
      .set("input_dim", input_dim_)
      .set("output_dim", output_dim_)
      .set("tie_weights", tie_weights_);
}

// ---- LlamaConfig ----

void LlamaConfig::validate() const {
  auto positive = [](const char* what, int64_t v) {
    if (v < 1) throw ValueError(std::string("LlamaConfig: ") + what + " must be >= 1; got " + std::to_string(v));
  };
  positive("vocabulary_size", vocabulary_size);
  positive("hidden_dim", hidden_dim);
  positive("num_layers", num_layers);
  positive("num_query_heads", num_query_heads);
  positive("num_key_value_heads", num_key_value_heads);
  positive("intermediate_dim", intermediate_dim);
  positive("max_sequence_length", max_sequence_length);
  if (hidden_dim % num_query_heads != 0)
    throw ValueError("LlamaConfig: num_query_heads (" + std::to_string(num_query_heads) +
                     ") must divide hidden_dim (" + std::to_string(hidden_dim) + ")");
  if (num_query_heads % num_key_value_heads != 0)
    throw ValueError("LlamaConfig: num_key_value_heads (" + std::to_string(num_key_value_heads) +
                     ") must divide num_query_heads (" + std::to_string(num_query_heads) + ")");
  if (head_dim() % 2 != 0)
    throw ValueError("LlamaConfig: head_dim = hidden_dim / num_query_heads must be even for rotary embedding; got " +
                     std::to_string(head_dim()));
  check_rope("LlamaConfig", RopeOptions{.theta = rope_max_wavelength, .scaling_factor = rope_scaling_factor});
  (void)pairing_name(rope_pairing);
  if (!(layer_norm_epsilon > 0.0f))
    throw ValueError("LlamaConfig: layer_norm_epsilon must be > 0; got " + std::to_string(layer_norm_epsilon));
  if (!(dropout >= 0.0f && dropout < 1.0f))
    throw ValueError("LlamaConfig: dropout must be in [0, 1); got " + std::to_string(dropout));
}

namespace {

RopeOptions rope_of(const LlamaConfig& c) {
  return RopeOptions{.dims = 0, .theta = c.rope_max_wavelength, .scaling_factor = c.rope_scaling_factor,
                     .pairing = c.rope_pairing};
}

const LlamaConfig& validated(const LlamaConfig& c) {
  c.validate();
  return c;
}

}  // namespace

// ---- LlamaDecoder ----

LlamaDecoder::LlamaDecoder(const LlamaConfig& config, std::optional<uint64_t> seed)
    : Layer("llama_decoder"), config_(validated(config)) {
  seed_ = seed ? *seed : global_generator()();
}

Shape LlamaDecoder::build(const Shape& s) {
  const int64_t e = config_.hidden_dim;
  if (s.rank() != 2 || s[1] != e)
    throw ShapeError("LlamaDecoder '" + name() + "' takes a sequence {steps, " + std::to_string(e) + "}; got " +
                     s.str());
  if (attention_[0].valid()) return s;
  const int64_t hq = config_.num_query_heads, hkv = config_.num_key_value_heads, d = config_.head_dim(),
                i = config_.intermediate_dim;
  auto kernel = [&](const std::string& n, const Shape& shape) {
    return add_weight({.name = n, .shape = shape, .initializer = initializers::glorot_uniform()});
  };
  attention_norm_ =
      add_weight({.name = "self_attention_layernorm.scale", .shape = {e}, .initializer = initializers::ones()});
  attention_[0] = kernel("self_attention.query_kernel", {e, hq, d});
  attention_[1] = kernel("self_attention.key_kernel", {e, hkv, d});
  attention_[2] = kernel("self_attention.value_kernel", {e, hkv, d});
  attention_[3] = kernel("self_attention.output_kernel", {hq, d, e});
  feed_forward_norm_ =
      add_weight({.name = "feedforward_layernorm.scale", .shape = {e}, .initializer = initializers::ones()});
  feed_forward_[0] = kernel("feedforward_gate_kernel", {e, i});
  feed_forward_[1] = kernel("feedforward_up_kernel", {e, i});
  feed_forward_[2] = kernel("feedforward_down_kernel", {i, e});
  return s;
}

Value LlamaDecoder::block(Builder& b, Value x, Value positions, const CallOptions& options,
                          const DecoderCache* cache) {
  const bool drop = options.training && config_.dropout > 0.0f;
  auto bind = [&](WeightId id) { return bind_weight(b, id); };
  auto dropped = [&](Value v, uint64_t stream) { return drop ? b.dropout(v, config_.dropout, seed_ + stream) : v; };
  const float eps = config_.layer_norm_epsilon;
  const std::optional<RopeOptions> rotary = rope_of(config_);
  detail::GqaWeights w;
  w.query = bind(attention_[0]), w.key = bind(attention_[1]), w.value = bind(attention_[2]);
  w.output = bind(attention_[3]);
  detail::GqaCall c;
  c.num_query_heads = config_.num_query_heads, c.num_key_value_heads = config_.num_key_value_heads;
  c.head_dim = config_.head_dim(), c.rotary = &rotary, c.positions = positions, c.cache = cache;
  if (drop) c.dropout = config_.dropout, c.seed = seed_;
  const Value norm1 = bind(attention_norm_);
  const Value h = b.add(x, dropped(detail::grouped_query_attention(b, w, c, b.rms_norm(x, eps, norm1)), 1));
  const Value norm2 = bind(feed_forward_norm_);
  const Value gate = bind(feed_forward_[0]), up = bind(feed_forward_[1]), down = bind(feed_forward_[2]);
  const Value f = detail::gated_feed_forward(b, b.rms_norm(h, eps, norm2), gate, up, down, Activation::Silu);
  return b.add(h, dropped(f, 2));
}

Value LlamaDecoder::call(Builder& b, Value x, const CallOptions& options) {
  return block(b, x, Value{}, options, nullptr);
}

Value LlamaDecoder::call_with_cache(Builder& b, Value x, Value positions, const DecoderCache& cache) {
  const Shape s = b.shape(x);
  if (s.rank() != 3 || s[0] != 1 || s[2] != config_.hidden_dim)
    throw ShapeError("LlamaDecoder '" + name() + "': a cached step takes {1, steps, " +
                     std::to_string(config_.hidden_dim) + "}; got " + s.str());
  return block(b, x, positions, CallOptions{false, false}, &cache);
}

LayerConfig LlamaDecoder::config() const {
  const LlamaConfig& c = config_;
  return LayerConfig(type())
      .set("hidden_dim", c.hidden_dim)
      .set("num_query_heads", c.num_query_heads)
      .set("num_key_value_heads", c.num_key_value_heads)
      .set("intermediate_dim", c.intermediate_dim)
      .set("rope_max_wavelength", double(c.rope_max_wavelength))
      .set("rope_scaling_factor", double(c.rope_scaling_factor))
      .set("rope_pairing", pairing_name(c.rope_pairing))
      .set("layer_norm_epsilon", double(c.layer_norm_epsilon))
      .set("dropout", double(c.dropout))
      .set("seed", int64_t(seed_));
}

// ---- the models ----

namespace {

// ids {T} -> hidden {T, E} (the backbone), and the embedding for the head.
struct Trunk {
  SymbolicTensor ids, hidden;
  std::shared_ptr<ReversibleEmbedding> embedding;
};

Trunk trunk(const LlamaConfig& c) {
  c.validate();
  Trunk t;
  t.ids = Input({c.max_sequence_length}, DType::Int32, "token_ids");
  t.embedding = std::make_shared<ReversibleEmbedding>(c.vocabulary_size, c.hidden_dim, c.tie_word_embeddings);
  t.embedding->set_name("token_embedding");
  SymbolicTensor h = (*t.embedding)(t.ids);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    auto block = std::make_shared<LlamaDecoder>(c);
    block->set_name("transformer_layer_" + std::to_string(i));
    h = (*block)(h);
  }
  auto norm = std::make_shared<RMSNormalization>(c.layer_norm_epsilon);
  norm->set_name("sequence_output_layernorm");
  t.hidden = (*norm)(h);
  return t;
}

Model backbone_model(const LlamaConfig& c, const std::string& name) {
  Trunk t = trunk(c);
  return Model(t.ids, t.hidden, name);
}

Model causal_lm_model(const LlamaConfig& c, const std::string& name) {
  Trunk t = trunk(c);
  return Model(t.ids, (*t.embedding)(t.hidden), name);
}

}  // namespace

LlamaBackbone::LlamaBackbone(const LlamaConfig& config, const std::string& name)
    : Model(backbone_model(config, name)), config_(config) {}

LlamaCausalLM::LlamaCausalLM(const LlamaConfig& config, const std::string& name)
    : Model(causal_lm_model(config, name)), config_(config) {}

}  // namespace tensorgrad::nn
