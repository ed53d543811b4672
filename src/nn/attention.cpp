// keras.layers.MultiHeadAttention on the fused attention op.
#include "tensorgrad/nn/attention.h"

#include <cmath>
#include <string>

#include "nn/attention_block.h"
#include "nn/token_ids.h"
#include "tensorgrad/core/error.h"
#include "tensorgrad/core/random.h"

namespace tensorgrad::nn {

namespace {

// keep {B, Tq, Tk} from a padding mask {B, Tk}: every query attends to the tokens.
Value keys_kept(Builder& b, Value padding_mask, int64_t tq) {
  const Shape s = b.shape(padding_mask);
  return b.broadcast_to(b.reshape(padding_mask, Shape{s[0], 1, s[1]}), Shape{s[0], tq, s[1]});
}

// A mask given as an input and one that came with a tensor, combined (either may be absent).
Value both_masks(Builder& b, Value given, Value carried) {
  if (!given.valid()) return carried;
  return carried.valid() ? b.mul(given, carried) : given;
}

}  // namespace

namespace detail {

Value multi_head_attention(Builder& b, const AttentionWeights& w, int64_t h, const AttentionCall& c) {
  const Shape sq = b.shape(c.query), sv = b.shape(c.value), sk = b.shape(c.key);
  const int64_t n = sq[0], tq = sq[1], tv = sv[1], key_dim = b.shape(w.query_kernel)[2],
                value_dim = b.shape(w.value_kernel)[2], out = b.shape(w.output_kernel)[2];
  // x {B, T, E} W {E, h, dim} (+ bias {h, dim}) as {B h, T, dim}.
  auto heads = [&](Value x, const Shape& s, Value kernel, Value bias, int64_t dim) {
    const Value rows = b.reshape(x, Shape{s[0] * s[1], s[2]}), k2 = b.reshape(kernel, Shape{s[2], h * dim});
    const Value y = bias.valid() ? b.matmul(rows, k2, b.reshape(bias, Shape{h * dim})) : b.matmul(rows, k2);
    return b.reshape(b.transpose(b.reshape(y, Shape{s[0], s[1], h, dim}), 1, 2), Shape{s[0] * h, s[1], dim});
  };
  const Value q = heads(c.query, sq, w.query_kernel, w.query_bias, key_dim);
  Value k = heads(c.key, sk, w.key_kernel, w.key_bias, key_dim);
  Value v = heads(c.value, sv, w.value_kernel, w.value_bias, value_dim);
  Builder::AttentionOptions o;
  if (c.key_cache.valid()) {
    // The new position's key and value written into the cache (cache + slot (new - cache)), attended from it.
    auto write = [&](Value cache, Value fresh) {
      const Value all = b.add(cache, b.mul(c.slot, b.sub(fresh, cache)));
      c.updates->push_back(b.apply(OpKind::Assign, {cache, all}));
      return all;
    };
    k = write(c.key_cache, k), v = write(c.value_cache, v);
    o.mask = c.visible;
  }
  o.causal = c.causal;
  o.scale = 1.0f / std::sqrt(float(key_dim));
  o.dropout = c.dropout, o.seed = c.seed;
  if (c.keep.valid()) {
    // Keras' mask (1 attends) as the op's additive one, the same for every head.
    const Value hidden = b.masked_fill(b.fill({}, 1.0f), c.keep, 0.0f);
    const Value additive = b.masked_fill(b.fill({}, 0.0f), hidden, -INFINITY);  // {B, Tq, Tv}
    o.mask =
        b.reshape(b.broadcast_to(b.reshape(additive, Shape{n, 1, tq, tv}), Shape{n, h, tq, tv}), Shape{n * h, tq, tv});
  }
  const Value a = b.scaled_dot_product_attention(q, k, v, o);  // {B h, Tq, value_dim}
  const Value merged =
      b.reshape(b.transpose(b.reshape(a, Shape{n, h, tq, value_dim}), 1, 2), Shape{n * tq, h * value_dim});
  const Value ok = b.reshape(w.output_kernel, Shape{h * value_dim, out});
  const Value y = w.output_bias.valid() ? b.matmul(merged, ok, w.output_bias) : b.matmul(merged, ok);
  return b.reshape(y, Shape{n, tq, out});
}

}  // namespace detail

MultiHeadAttention::MultiHeadAttention(int64_t num_heads, int64_t key_dim, int64_t value_dim, float dropout,
                                       bool use_bias, int64_t output_shape, bool use_causal_mask,
                                       std::optional<uint64_t> seed)
    : Layer("multi_head_attention"),
      num_heads_(num_heads),
      key_dim_(key_dim),
      value_dim_(value_dim == 0 ? key_dim : value_dim),
      output_shape_(output_shape),
      dropout_(dropout),
      use_bias_(use_bias),
      use_causal_mask_(use_causal_mask) {
  if (num_heads < 1 || key_dim < 1 || value_dim < 0 || output_shape < 0)
    throw ValueError(
        "MultiHeadAttention: num_heads and key_dim must be >= 1, value_dim and output_shape >= 0 (0: "
        "the default); got num_heads " +
        std::to_string(num_heads) + ", key_dim " + std::to_string(key_dim) + ", value_dim " +
        std::to_string(value_dim) + ", output_shape " + std::to_string(output_shape));
  if (!(dropout >= 0.0f && dropout < 1.0f))
    throw ValueError("MultiHeadAttention: dropout must be in [0, 1); got " + std::to_string(dropout));
  seed_ = seed ? *seed : global_generator()();
}

Shape MultiHeadAttention::build(const Shape&) {
  throw ValueError("MultiHeadAttention '" + name() +
                   "' takes {query, value} at least (self-attention: call it on {x, x})");
}

Shape MultiHeadAttention::build_inputs(std::span<const Shape> s) {
  if (s.size() < 2 || s.size() > 4)
    throw ValueError("MultiHeadAttention '" + name() +
                     "' takes {query, value}, {query, value, key} or {query, "
                     "value, key, attention_mask}; got " +
                     std::to_string(s.size()) + " inputs");
  const char* roles[] = {"query", "value", "key"};
  for (size_t i = 0; i < std::min<size_t>(s.size(), 3); ++i)
    if (s[i].rank() != 2)
      throw ShapeError("MultiHeadAttention '" + name() + "': the " + roles[i] + " must be a sequence {steps, " +
                       "features}; got " + s[i].str());
  const Shape &q = s[0], &v = s[1], &k = s.size() > 2 ? s[2] : s[1];
  if (k[0] != v[0])
    throw ShapeError("MultiHeadAttention '" + name() + "': key and value must have one length; got " + k.str() +
                     " and " + v.str());
  if (s.size() == 4 && s[3] != Shape{q[0], v[0]})
    throw ShapeError("MultiHeadAttention '" + name() +
                     "': attention_mask must be {Tq, Tv} = " + Shape{q[0], v[0]}.str() + "; got " + s[3].str());
  const int64_t h = num_heads_, out = output_shape_ == 0 ? q[1] : output_shape_;
  if (query_kernel_.valid()) {  // called again (shared): the same weights, any sequence lengths
    if (built_features_ != std::array<int64_t, 3>{q[1], v[1], k[1]})
      throw ShapeError("MultiHeadAttention '" + name() + "' was built for query, value and key features " +
                       std::to_string(built_features_[0]) + ", " + std::to_string(built_features_[1]) + " and " +
                       std::to_string(built_features_[2]) + "; a shared layer takes the same features in every call");
    return Shape{q[0], out};
  }
  built_features_ = {q[1], v[1], k[1]};
  auto kernel = [&](const char* n, int64_t in, int64_t dim) {
    return add_weight({.name = n, .shape = {in, h, dim}, .initializer = initializers::glorot_uniform()});
  };
  auto bias = [&](const char* n, const Shape& shape) {
    return add_weight({.name = n, .shape = shape, .initializer = initializers::zeros()});
  };
  query_kernel_ = kernel("query_kernel", q[1], key_dim_);
  if (use_bias_) query_bias_ = bias("query_bias", {h, key_dim_});
  key_kernel_ = kernel("key_kernel", k[1], key_dim_);
  if (use_bias_) key_bias_ = bias("key_bias", {h, key_dim_});
  value_kernel_ = kernel("value_kernel", v[1], value_dim_);
  if (use_bias_) value_bias_ = bias("value_bias", {h, value_dim_});
  output_kernel_ = add_weight(
      {.name = "output_kernel", .shape = {h, value_dim_, out}, .initializer = initializers::glorot_uniform()});
  if (use_bias_) output_bias_ = bias("output_bias", {out});
  return Shape{q[0], out};
}

Value MultiHeadAttention::call(Builder&, Value, const CallOptions&) {
  throw ValueError("MultiHeadAttention '" + name() + "' takes {query, value} at least (self-attention: {x, x})");
}

Value MultiHeadAttention::call_inputs(Builder& b, std::span<const Value> in, const CallOptions& options) {
  detail::AttentionWeights w;
  w.query_kernel = bind_weight(b, query_kernel_), w.key_kernel = bind_weight(b, key_kernel_);
  w.value_kernel = bind_weight(b, value_kernel_), w.output_kernel = bind_weight(b, output_kernel_);
  if (use_bias_) {
    w.query_bias = bind_weight(b, query_bias_), w.key_bias = bind_weight(b, key_bias_);
    w.value_bias = bind_weight(b, value_bias_), w.output_bias = bind_weight(b, output_bias_);
  }
  detail::AttentionCall c;
  c.query = in[0], c.value = in[1], c.key = in.size() > 2 ? in[2] : in[1];
  if (in.size() == 4) c.keep = in[3];
  if (!options.masks.empty()) {
    // Keras' masks: a query attends where it and the key are tokens (value's mask, and key's when given).
    const int64_t n = b.shape(in[0])[0], tq = b.shape(in[0])[1], tv = b.shape(in[1])[1];
    const Value qm = options.masks[0], vm = options.masks[1], km = in.size() > 2 ? options.masks[2] : Value{};
    for (Value m : {vm, km})
      if (m.valid()) c.keep = both_masks(b, c.keep, keys_kept(b, m, tq));
    if (qm.valid()) c.keep = both_masks(b, c.keep, b.broadcast_to(b.reshape(qm, Shape{n, tq, 1}), Shape{n, tq, tv}));
  }
  c.causal = use_causal_mask_;
  if (options.training && dropout_ > 0.0f) c.dropout = dropout_, c.seed = seed_;
  return detail::multi_head_attention(b, w, num_heads_, c);
}

LayerConfig MultiHeadAttention::config() const {
  return LayerConfig(type())
      .set("num_heads", num_heads_)
      .set("key_dim", key_dim_)
      .set("value_dim", value_dim_)
      .set("dropout", double(dropout_))
      .set("use_bias", use_bias_)
      .set("output_shape", output_shape_)
      .set("use_causal_mask", use_causal_mask_)
      .set("seed", int64_t(seed_));
}

}  // namespace tensorgrad::nn

namespace tensorgrad::nn {

namespace {

// One sub-block with its residual connection: pre-norm x + drop(f(norm(x))),
// post-norm norm(x + drop(f(x))) (KerasHub's blocks, either normalize_first).
template <class F, class Norm, class Drop>
Value residual(Builder& b, bool normalize_first, Value x, F f, Norm norm, Drop drop) {
  const Value y = b.add(drop(f(normalize_first ? norm(x) : x)), x);
  return normalize_first ? y : norm(y);
}

// The position-wise feed-forward network on x {B, T, E}.
Value feedforward(Builder& b, Value x, Value k1, Value b1, Value k2, Value b2, Activation activation) {
  const Shape s = b.shape(x);
  Value f = b.matmul(b.reshape(x, Shape{s[0] * s[1], s[2]}), k1, b1);  // the bias in the GEMM
  f = b.matmul(apply_activation(b, activation, f), k2, b2);
  return b.reshape(f, s);
}

// The weights of one attention sub-block, '<prefix>.query_kernel' ... in
// Keras 3's layout (kernels Glorot-uniform, biases zero), through the layer's
// add_weight; {query, key, value, output} x {kernel, bias}.
template <class Add>
std::array<WeightId, 8> declare_attention(Add add, const std::string& prefix, int64_t eq, int64_t ekv, int64_t h,
                                          int64_t kd, int64_t out) {
  auto kernel = [&](const char* n, const Shape& shape) {
    return add(WeightSpec{.name = prefix + n, .shape = shape, .initializer = initializers::glorot_uniform()});
  };
  auto bias = [&](const char* n, const Shape& shape) {
    return add(WeightSpec{.name = prefix + n, .shape = shape, .initializer = initializers::zeros()});
  };
  std::array<WeightId, 8> ids;
  ids[0] = kernel(".query_kernel", {eq, h, kd}), ids[1] = bias(".query_bias", {h, kd});
  ids[2] = kernel(".key_kernel", {ekv, h, kd}), ids[3] = bias(".key_bias", {h, kd});
  ids[4] = kernel(".value_kernel", {ekv, h, kd}), ids[5] = bias(".value_bias", {h, kd});
  ids[6] = kernel(".output_kernel", {h, kd, out}), ids[7] = bias(".output_bias", {out});
  return ids;
}

template <class Bind>
detail::AttentionWeights bind_attention(Bind bind, const std::array<WeightId, 8>& ids) {
  return {bind(ids[0]), bind(ids[1]), bind(ids[2]), bind(ids[3]),
          bind(ids[4]), bind(ids[5]), bind(ids[6]), bind(ids[7])};
}

void check_block_options(const char* type, int64_t intermediate_dim, int64_t num_heads, float dropout, float epsilon) {
  const std::string t = type;
  if (intermediate_dim < 1 || num_heads < 1)
    throw ValueError(t + ": intermediate_dim and num_heads must be >= 1; got " + std::to_string(intermediate_dim) +
                     " and " + std::to_string(num_heads));
  if (!(dropout >= 0.0f && dropout < 1.0f))
    throw ValueError(t + ": dropout must be in [0, 1); got " + std::to_string(dropout));
  if (!(epsilon > 0.0f)) throw ValueError(t + ": layer_norm_epsilon must be > 0; got " + std::to_string(epsilon));
}

}  // namespace

TransformerBlock::TransformerBlock(const char* prefix, const char* type, int64_t intermediate_dim, int64_t num_heads,
                                   float dropout, const std::string& activation, float layer_norm_epsilon,
                                   bool normalize_first, std::optional<uint64_t> seed)
    : Layer(prefix),
      intermediate_dim_(intermediate_dim),
      num_heads_(num_heads),
      dropout_(dropout),
      epsilon_(layer_norm_epsilon),
      activation_(activation_from_name(activation)),
      normalize_first_(normalize_first) {
  check_block_options(type, intermediate_dim, num_heads, dropout, layer_norm_epsilon);
  seed_ = seed ? *seed : global_generator()();
}

std::array<WeightId, 8> TransformerBlock::declare_attention_block(const std::string& prefix, int64_t e, int64_t kv) {
  return declare_attention([&](WeightSpec w) { return add_weight(std::move(w)); }, prefix, e, kv, num_heads_,
                           e / num_heads_, e);
}

std::array<WeightId, 2> TransformerBlock::declare_norm(const std::string& prefix, int64_t e) {
  return {add_weight({.name = prefix + ".gamma", .shape = {e}, .initializer = initializers::constant(1)}),
          add_weight({.name = prefix + ".beta", .shape = {e}, .initializer = initializers::constant(0)})};
}

void TransformerBlock::declare_feedforward(int64_t e) {
  const int64_t ff = intermediate_dim_;
  auto glorot = [&](const char* n, const Shape& shape) {
    return add_weight({.name = n, .shape = shape, .initializer = initializers::glorot_uniform()});
  };
  auto zeros = [&](const char* n, const Shape& shape) {
    return add_weight({.name = n, .shape = shape, .initializer = initializers::constant(0)});
  };
  ff1_k_ = glorot("feedforward_intermediate_dense.kernel", {e, ff});
  ff1_b_ = zeros("feedforward_intermediate_dense.bias", {ff});
  ff2_k_ = glorot("feedforward_output_dense.kernel", {ff, e});
  ff2_b_ = zeros("feedforward_output_dense.bias", {e});
  ff_norm_ = declare_norm("feedforward_layer_norm", e);
}

Value TransformerBlock::sub_block(Builder& b, Value x, const std::function<Value(Value)>& f,
                                  const std::array<WeightId, 2>& norm, bool training, uint64_t stream) {
  auto normalize = [&](Value v) { return b.layer_norm(v, epsilon_, bind_weight(b, norm[0]), bind_weight(b, norm[1])); };
  auto drop = [&](Value v) { return training && dropout_ > 0.0f ? b.dropout(v, dropout_, seed_ + stream) : v; };
  return residual(b, normalize_first_, x, f, normalize, drop);
}

Value TransformerBlock::feedforward_block(Builder& b, Value h, bool training) {
  auto ffn = [&](Value v) {
    return feedforward(b, v, bind_weight(b, ff1_k_), bind_weight(b, ff1_b_), bind_weight(b, ff2_k_),
                       bind_weight(b, ff2_b_), activation_);
  };
  return sub_block(b, h, ffn, ff_norm_, training, 2);
}

LayerConfig TransformerBlock::config() const {
  return LayerConfig(type())
      .set("intermediate_dim", intermediate_dim_)
      .set("num_heads", num_heads_)
      .set("dropout", double(dropout_))
      .set("activation", activation_name(activation_))
      .set("layer_norm_epsilon", double(epsilon_))
      .set("normalize_first", normalize_first_)
      .set("seed", int64_t(seed_));
}

TransformerEncoder::TransformerEncoder(int64_t intermediate_dim, int64_t num_heads, float dropout,
                                       const std::string& activation, float layer_norm_epsilon, bool normalize_first,
                                       std::optional<uint64_t> seed)
    : TransformerBlock("transformer_encoder", "TransformerEncoder", intermediate_dim, num_heads, dropout, activation,
                       layer_norm_epsilon, normalize_first, seed) {}

Shape TransformerEncoder::build_inputs(std::span<const Shape> s) {
  if (s.empty() || s.size() > 2)
    throw ValueError("TransformerEncoder '" + name() + "' takes x or {x, padding_mask}; got " +
                     std::to_string(s.size()) + " inputs");
  const Shape& x = s[0];
  if (x.rank() != 2 || x[1] % num_heads_ != 0)
    throw ShapeError("TransformerEncoder '" + name() + "' takes sequences {steps, features} whose features divide by " +
                     std::to_string(num_heads_) + " heads; got " + x.str());
  if (s.size() == 2 && s[1] != Shape{x[0]})
    throw ShapeError("TransformerEncoder '" + name() + "': padding_mask must be {steps} = " + Shape{x[0]}.str() +
                     "; got " + s[1].str());
  const int64_t e = x[1];
  if (attention_norm_[0].valid()) {  // called again (shared): the same weights, any sequence length
    if (e != built_features_)
      throw ShapeError("TransformerEncoder '" + name() + "' was built for " + std::to_string(built_features_) +
                       " features; a shared layer takes the same features in every call; got " + x.str());
    return x;
  }
  built_features_ = e;
  attention_ = declare_attention_block("self_attention", e, e);
  attention_norm_ = declare_norm("self_attention_layer_norm", e);
  declare_feedforward(e);
  return x;
}

Value TransformerEncoder::call_inputs(Builder& b, std::span<const Value> in, const CallOptions& options) {
  const Value x = in[0];
  const bool drop = options.training && dropout_ > 0.0f;
  const detail::AttentionWeights w = bind_attention([&](WeightId id) { return bind_weight(b, id); }, attention_);
  // The padding: the padding_mask input, and x's mask (Embedding(mask_zero)), both when given.
  const Value padding =
      both_masks(b, in.size() == 2 ? in[1] : Value{}, options.masks.empty() ? Value{} : options.masks[0]);
  auto attend = [&](Value v) {
    detail::AttentionCall c;
    c.query = c.value = c.key = v;
    if (padding.valid()) c.keep = keys_kept(b, padding, b.shape(x)[1]);
    if (drop) c.dropout = dropout_, c.seed = seed_;
    return detail::multi_head_attention(b, w, num_heads_, c);
  };
  return feedforward_block(b, sub_block(b, x, attend, attention_norm_, options.training, 1), options.training);
}

TransformerDecoder::TransformerDecoder(int64_t intermediate_dim, int64_t num_heads, float dropout,
                                       const std::string& activation, float layer_norm_epsilon, bool normalize_first,
                                       std::optional<uint64_t> seed)
    : TransformerBlock("transformer_decoder", "TransformerDecoder", intermediate_dim, num_heads, dropout, activation,
                       layer_norm_epsilon, normalize_first, seed) {}

Shape TransformerDecoder::build_inputs(std::span<const Shape> s) {
  const std::string me = "TransformerDecoder '" + name() + "'";
  if (s.empty() || s.size() > 4)
    throw ValueError(me +
                     " takes decoder_sequence, then optionally encoder_sequence, decoder_padding_mask and "
                     "encoder_padding_mask; got " +
                     std::to_string(s.size()) + " inputs");
  const Shape& x = s[0];
  if (x.rank() != 2 || x[1] % num_heads_ != 0)
    throw ShapeError(me + " takes sequences {steps, features} whose features divide by " + std::to_string(num_heads_) +
                     " heads; got " + x.str());
  const bool cross = s.size() > 1 && s[1].rank() == 2;
  if (self_norm_[0].valid() &&
      (cross != cross_ || x[1] != built_features_[0] || (cross && s[1][1] != built_features_[1])))
    throw ShapeError(me + " was built " + (cross_ ? "with an encoder_sequence of " : "without an encoder_sequence") +
                     (cross_ ? std::to_string(built_features_[1]) + " features" : std::string()) + " for " +
                     std::to_string(built_features_[0]) +
                     " features; a shared layer takes the same inputs in every call; got " + x.str() +
                     (cross ? " and an encoder_sequence " + s[1].str() : std::string(" alone")));
  cross_ = cross;
  const size_t masks = cross_ ? 2 : 1;  // where decoder_padding_mask is
  if (!cross_ && s.size() > 2)
    throw ValueError(me +
                     ": without an encoder_sequence it takes {decoder_sequence, decoder_padding_mask} at most; "
                     "got " +
                     std::to_string(s.size()) + " inputs");
  if (s.size() > masks && s[masks] != Shape{x[0]})
    throw ShapeError(me + ": decoder_padding_mask must be {steps} = " + Shape{x[0]}.str() + "; got " + s[masks].str());
  if (cross_ && s.size() == 4 && s[3] != Shape{s[1][0]})
    throw ShapeError(me + ": encoder_padding_mask must be {encoder steps} = " + Shape{s[1][0]}.str() + "; got " +
                     s[3].str());
  const int64_t e = x[1];
  if (self_norm_[0].valid()) return x;  // called again (shared): the same weights, any sequence lengths
  built_features_ = {e, cross_ ? s[1][1] : 0};
  head_dim_ = e / num_heads_;
  self_attention_ = declare_attention_block("self_attention", e, e);
  self_norm_ = declare_norm("self_attention_layer_norm", e);
  if (cross_) {
    cross_attention_ = declare_attention_block("cross_attention", e, s[1][1]);
    cross_norm_ = declare_norm("cross_attention_layer_norm", e);
  }
  declare_feedforward(e);
  return x;
}

Value TransformerDecoder::call_inputs(Builder& b, std::span<const Value> in, const CallOptions& options) {
  if (cross_ && in.size() < 2)
    throw ValueError("TransformerDecoder '" + name() + "' was built with an encoder_sequence; call it with one");
  const size_t masks = cross_ ? 2 : 1;
  const Value encoder = cross_ ? in[1] : Value{};
  // The padding masks given as inputs, and the masks that came with the sequences (Embedding(mask_zero)).
  auto carried = [&](size_t i) { return options.masks.size() > i ? options.masks[i] : Value{}; };
  const Value decoder_mask = both_masks(b, in.size() > masks ? in[masks] : Value{}, carried(0));
  const Value encoder_mask = both_masks(b, cross_ && in.size() == 4 ? in[3] : Value{}, cross_ ? carried(1) : Value{});
  return block(b, in[0], encoder, decoder_mask, encoder_mask, options, nullptr);
}

Value TransformerDecoder::call_with_cache(Builder& b, Value x, const DecoderCache& cache) {
  if (!self_norm_[0].valid())
    throw StateError("TransformerDecoder '" + name() + "' is not built: call it on a sequence (in a model) first");
  if (cross_)
    throw ValueError("TransformerDecoder '" + name() +
                     "': call_with_cache decodes blocks without cross-attention; this one attends to an encoder");
  const Shape s = b.shape(x), k = b.shape(cache.key);
  if (s.rank() != 3 || s[1] != 1 || k.rank() != 3 || k[0] != s[0] * num_heads_ || k[2] != head_dim_ ||
      b.shape(cache.value) != k || b.shape(cache.slot) != Shape{1, k[1], 1} ||
      b.shape(cache.visible) != Shape{1, 1, k[1]} || cache.updates == nullptr)
    throw ShapeError("TransformerDecoder '" + name() +
                     "': call_with_cache takes x {batch, 1, features}, key and "
                     "value {batch x " +
                     std::to_string(num_heads_) + " heads, capacity, " + std::to_string(head_dim_) +
                     "}, slot {1, capacity, 1}, visible {1, 1, capacity} and updates; "
                     "got x " +
                     s.str() + ", key " + k.str() + ", value " + b.shape(cache.value).str() + ", slot " +
                     b.shape(cache.slot).str() + ", visible " + b.shape(cache.visible).str());
  return block(b, x, {}, {}, {}, CallOptions{false, false}, &cache);
}

Value TransformerDecoder::block(Builder& b, Value x, Value encoder, Value decoder_mask, Value encoder_mask,
                                const CallOptions& options, const DecoderCache* cache) {
  const bool drop = options.training && dropout_ > 0.0f;
  auto bind = [&](WeightId id) { return bind_weight(b, id); };
  const int64_t t = b.shape(x)[1];
  auto self_attention = [&](Value v) {
    detail::AttentionCall c;
    c.query = c.value = c.key = v;
    c.causal = cache == nullptr;  // a cached step's single query sees every written position
    if (decoder_mask.valid()) c.keep = keys_kept(b, decoder_mask, t);
    if (drop) c.dropout = dropout_, c.seed = seed_;
    if (cache) {
      c.key_cache = cache->key, c.value_cache = cache->value, c.slot = cache->slot, c.visible = cache->visible;
      c.updates = cache->updates;
    }
    return detail::multi_head_attention(b, bind_attention(bind, self_attention_), num_heads_, c);
  };
  Value h = sub_block(b, x, self_attention, self_norm_, options.training, 1);
  if (cross_) {
    auto cross_attention = [&](Value v) {
      detail::AttentionCall c;
      c.query = v, c.value = c.key = encoder;
      if (encoder_mask.valid()) c.keep = keys_kept(b, encoder_mask, t);
      if (drop) c.dropout = dropout_, c.seed = seed_ + 3;
      return detail::multi_head_attention(b, bind_attention(bind, cross_attention_), num_heads_, c);
    };
    h = sub_block(b, h, cross_attention, cross_norm_, options.training, 4);
  }
  return feedforward_block(b, h, options.training);
}

}  // namespace tensorgrad::nn

namespace tensorgrad::nn {

PositionEmbedding::PositionEmbedding(int64_t sequence_length)
    : Layer("position_embedding"), sequence_length_(sequence_length) {
  if (sequence_length < 1)
    throw ValueError("PositionEmbedding: sequence_length must be >= 1; got " + std::to_string(sequence_length));
}

Shape PositionEmbedding::build(const Shape& s) {
  if (s.rank() != 2 || s[0] > sequence_length_)
    throw ShapeError("PositionEmbedding '" + name() + "' takes sequences {steps, features} of at most " +
                     std::to_string(sequence_length_) + " steps; got " + s.str());
  embeddings_ = add_weight(
      {.name = "embeddings", .shape = {sequence_length_, s[1]}, .initializer = initializers::glorot_uniform()});
  return s;
}

Value PositionEmbedding::call(Builder& b, Value x, const CallOptions&) {
  const Shape s = b.shape(x);
  const Value rows = b.slice(bind_weight(b, embeddings_), 0, 0, s[1]);
  return b.broadcast_to(b.reshape(rows, Shape{1, s[1], s[2]}), s);
}

LayerConfig PositionEmbedding::config() const { return LayerConfig(type()).set("sequence_length", sequence_length_); }

TokenAndPositionEmbedding::TokenAndPositionEmbedding(int64_t vocabulary_size, int64_t sequence_length,
                                                     int64_t embedding_dim, bool mask_zero)
    : Layer("token_and_position_embedding"),
      vocabulary_size_(vocabulary_size),
      sequence_length_(sequence_length),
      embedding_dim_(embedding_dim),
      mask_zero_(mask_zero) {
  if (vocabulary_size < 1 || sequence_length < 1 || embedding_dim < 1)
    throw ValueError(
        "TokenAndPositionEmbedding: vocabulary_size, sequence_length and embedding_dim must be >= 1; "
        "got " +
        std::to_string(vocabulary_size) + ", " + std::to_string(sequence_length) + " and " +
        std::to_string(embedding_dim));
}

Shape TokenAndPositionEmbedding::build(const Shape& s) {
  if (s.rank() != 1 || s[0] > sequence_length_)
    throw ShapeError("TokenAndPositionEmbedding '" + name() + "' takes token ids {steps} of at most " +
                     std::to_string(sequence_length_) + " steps; got input_shape " + s.str());
  tokens_ = add_weight({.name = "token_embedding.embeddings",
                        .shape = {vocabulary_size_, embedding_dim_},
                        .initializer = initializers::random_uniform(-0.05f, 0.05f)});
  positions_ = add_weight({.name = "position_embedding.embeddings",
                           .shape = {sequence_length_, embedding_dim_},
                           .initializer = initializers::glorot_uniform()});
  return Shape{s[0], embedding_dim_};
}

void TokenAndPositionEmbedding::validate_input(const Tensor& x) const {
  detail::check_token_ids(name(), x, vocabulary_size_);
}

Value TokenAndPositionEmbedding::call_at(Builder& b, Value ids, Value positions) {
  const Shape s = b.shape(ids);
  if (s.rank() != 2 || b.shape(positions) != s || b.dtype(positions) != DType::Int32)
    throw ShapeError("TokenAndPositionEmbedding '" + name() +
                     "': call_at takes ids {batch, steps} and int32 "
                     "positions of the same shape; got ids " +
                     s.str() + " and positions " + b.shape(positions).str() + " " + dtype_name(b.dtype(positions)));
  const Value i = b.dtype(ids) == DType::Int32 ? ids : b.apply(OpKind::ToIndex, {ids});
  return b.add(b.apply(OpKind::Gather, {bind_weight(b, tokens_), i}),
               b.apply(OpKind::Gather, {bind_weight(b, positions_), positions}));
}

Value TokenAndPositionEmbedding::call(Builder& b, Value x, const CallOptions&) {
  const Value ids = b.dtype(x) == DType::Int32 ? x : b.apply(OpKind::ToIndex, {x});
  const Value tokens = b.apply(OpKind::Gather, {bind_weight(b, tokens_), ids});  // {B, T, E}
  const int64_t t = b.shape(x)[1];
  return b.add(tokens, b.reshape(b.slice(bind_weight(b, positions_), 0, 0, t), Shape{1, t, embedding_dim_}));
}

Value TokenAndPositionEmbedding::compute_mask(Builder& b, std::span<const Value> inputs, std::span<const Value>) {
  const Value ids = b.dtype(inputs[0]) == DType::Int32 ? inputs[0] : b.apply(OpKind::ToIndex, {inputs[0]});
  return detail::padding_mask(b, ids, vocabulary_size_);
}

LayerConfig TokenAndPositionEmbedding::config() const {
  return LayerConfig(type())
      .set("vocabulary_size", vocabulary_size_)
      .set("sequence_length", sequence_length_)
      .set("embedding_dim", embedding_dim_)
      .set("mask_zero", mask_zero_);
}

}  // namespace tensorgrad::nn
