// Layer configurations and the factories that rebuild layers from them
// (Keras' get_config / from_config and its serializable registry).
#include <cmath>
#include <mutex>

#include "tensorgrad/core/error.h"
#include "tensorgrad/nn/attention.h"
#include "tensorgrad/nn/conv.h"
#include "tensorgrad/nn/layers.h"
#include "tensorgrad/nn/llama.h"
#include "tensorgrad/nn/merge.h"
#include "tensorgrad/nn/normalization.h"
#include "tensorgrad/nn/recurrent.h"

namespace tensorgrad::nn {

namespace {

const char* kind_name(const LayerConfig::Value& v) {
  switch (v.index()) {
    case 0: return "a bool";
    case 1: return "an integer";
    case 2: return "a number";
    case 3: return "a string";
    case 4: return "a list of integers";
  }
  return "?";
}

// Conv2D's and Conv1D's groups: 1 in configs saved before it existed.
int64_t groups_of(const LayerConfig& c) { return c.has("groups") ? c.get_int("groups") : 1; }

std::array<int64_t, 2> pair_of(const LayerConfig& c, const char* key) {
  const std::vector<int64_t> v = c.get_ints(key);
  if (v.size() != 2)
    throw ValueError(c.type() + " config: '" + key + "' must hold 2 integers; got " + std::to_string(v.size()));
  return {v[0], v[1]};
}

using Registry = std::map<std::string, LayerFactory>;

// KerasHub's transformer blocks share their arguments.
template <class Block>
std::shared_ptr<Layer> transformer_block(const LayerConfig& c) {
  return std::make_shared<Block>(c.get_int("intermediate_dim"), c.get_int("num_heads"), float(c.get_double("dropout")),
                                 c.get_string("activation"), float(c.get_double("layer_norm_epsilon")),
                                 c.get_bool("normalize_first"), uint64_t(c.get_int("seed")));
}

Registry built_in_layers() {
  Registry r;
  r["Dense"] = [](const LayerConfig& c) {
    return std::make_shared<Dense>(c.get_int("units"), c.get_string("activation"), c.get_bool("use_bias"));
  };
  r["Flatten"] = [](const LayerConfig&) { return std::make_shared<Flatten>(); };
  r["Activation"] = [](const LayerConfig& c) { return std::make_shared<ActivationLayer>(c.get_string("activation")); };
  r["Dropout"] = [](const LayerConfig& c) {
    return std::make_shared<Dropout>(float(c.get_double("rate")), uint64_t(c.get_int("seed")));
  };
  r["Conv2D"] = [](const LayerConfig& c) {
    return std::make_shared<Conv2D>(c.get_int("filters"), pair_of(c, "kernel_size"), pair_of(c, "strides"),
                                    c.get_string("padding"), pair_of(c, "dilation_rate"), c.get_string("activation"),
                                    c.get_bool("use_bias"), groups_of(c));
  };
  r["DepthwiseConv2D"] = [](const LayerConfig& c) {
    return std::make_shared<DepthwiseConv2D>(pair_of(c, "kernel_size"), pair_of(c, "strides"), c.get_string("padding"),
                                             c.get_int("depth_multiplier"), pair_of(c, "dilation_rate"),
                                             c.get_string("activation"), c.get_bool("use_bias"));
  };
  r["SeparableConv2D"] = [](const LayerConfig& c) {
    return std::make_shared<SeparableConv2D>(c.get_int("filters"), pair_of(c, "kernel_size"), pair_of(c, "strides"),
                                             c.get_string("padding"), c.get_int("depth_multiplier"),
                                             pair_of(c, "dilation_rate"), c.get_string("activation"),
                                             c.get_bool("use_bias"));
  };
  r["ZeroPadding2D"] = [](const LayerConfig& c) {
    const std::vector<int64_t> p = c.get_ints("padding");
    if (p.size() != 4)
      throw ValueError("ZeroPadding2D config: 'padding' must hold 4 integers (top, bottom, left, right); got " +
                       std::to_string(p.size()));
    return std::make_shared<ZeroPadding2D>(std::array<std::array<int64_t, 2>, 2>{{{p[0], p[1]}, {p[2], p[3]}}});
  };
  r["Conv1D"] = [](const LayerConfig& c) {
    return std::make_shared<Conv1D>(c.get_int("filters"), c.get_int("kernel_size"), c.get_int("strides"),
                                    c.get_string("padding"), c.get_int("dilation_rate"), c.get_string("activation"),
                                    c.get_bool("use_bias"), groups_of(c));
  };
  r["MaxPooling2D"] = [](const LayerConfig& c) {
    return std::make_shared<MaxPooling2D>(pair_of(c, "pool_size"), pair_of(c, "strides"), c.get_string("padding"));
  };
  r["AveragePooling2D"] = [](const LayerConfig& c) {
    return std::make_shared<AveragePooling2D>(pair_of(c, "pool_size"), pair_of(c, "strides"),
                                              c.get_string("padding"));
  };
  r["GlobalAveragePooling2D"] = [](const LayerConfig&) { return std::make_shared<GlobalAveragePooling2D>(); };
  r["GlobalMaxPooling2D"] = [](const LayerConfig&) { return std::make_shared<GlobalMaxPooling2D>(); };
  r["BatchNormalization"] = [](const LayerConfig& c) {
    auto l = std::make_shared<BatchNormalization>(float(c.get_double("momentum")), float(c.get_double("epsilon")));
    l->freeze_stats = c.get_bool("freeze_stats");
    return l;
  };
  r["LayerNormalization"] = [](const LayerConfig& c) {
    return std::make_shared<LayerNormalization>(float(c.get_double("epsilon")));
  };
  r["Embedding"] = [](const LayerConfig& c) {
    // mask_zero: absent from files written before it existed.
    return std::make_shared<Embedding>(c.get_int("input_dim"), c.get_int("output_dim"),
                                       c.has("mask_zero") && c.get_bool("mask_zero"));
  };
  r["LSTM"] = [](const LayerConfig& c) {
    return std::make_shared<LSTM>(c.get_int("units"), c.get_bool("return_sequences"));
  };
  r["GRU"] = [](const LayerConfig& c) {
    return std::make_shared<GRU>(c.get_int("units"), c.get_bool("return_sequences"));
  };
  r["Add"] = [](const LayerConfig&) { return std::make_shared<Add>(); };
  r["Subtract"] = [](const LayerConfig&) { return std::make_shared<Subtract>(); };
  r["Multiply"] = [](const LayerConfig&) { return std::make_shared<Multiply>(); };
  r["Average"] = [](const LayerConfig&) { return std::make_shared<Average>(); };
  r["Maximum"] = [](const LayerConfig&) { return std::make_shared<Maximum>(); };
  r["Minimum"] = [](const LayerConfig&) { return std::make_shared<Minimum>(); };
  r["Concatenate"] = [](const LayerConfig& c) { return std::make_shared<Concatenate>(int(c.get_int("axis"))); };
  r["Reshape"] = [](const LayerConfig& c) { return std::make_shared<Reshape>(c.get_ints("target_shape")); };
  r["PositionEmbedding"] = [](const LayerConfig& c) {
    return std::make_shared<PositionEmbedding>(c.get_int("sequence_length"));
  };
  r["TokenAndPositionEmbedding"] = [](const LayerConfig& c) {
    return std::make_shared<TokenAndPositionEmbedding>(c.get_int("vocabulary_size"), c.get_int("sequence_length"),
                                                       c.get_int("embedding_dim"),
                                                       c.has("mask_zero") && c.get_bool("mask_zero"));
  };
  r["TransformerEncoder"] = transformer_block<TransformerEncoder>;
  r["TransformerDecoder"] = transformer_block<TransformerDecoder>;
  r["MultiHeadAttention"] = [](const LayerConfig& c) {
    return std::make_shared<MultiHeadAttention>(c.get_int("num_heads"), c.get_int("key_dim"), c.get_int("value_dim"),
                                                float(c.get_double("dropout")), c.get_bool("use_bias"),
                                                c.get_int("output_shape"), c.get_bool("use_causal_mask"),
                                                uint64_t(c.get_int("seed")));
  };
  r["RMSNormalization"] = [](const LayerConfig& c) {
    return std::make_shared<RMSNormalization>(float(c.get_double("epsilon")));
  };
  r["RotaryEmbedding"] = [](const LayerConfig& c) {
    return std::make_shared<RotaryEmbedding>(float(c.get_double("max_wavelength")),
                                             float(c.get_double("scaling_factor")),
                                             rope_pairing_from_name(c.get_string("pairing")), c.get_int("dims"));
  };
  r["GroupedQueryAttention"] = [](const LayerConfig& c) {
    std::optional<RopeOptions> rotary;
    if (c.get_bool("rotary"))
      rotary = RopeOptions{.dims = c.get_int("rope_dims"),
                           .theta = float(c.get_double("rope_max_wavelength")),
                           .scaling_factor = float(c.get_double("rope_scaling_factor")),
                           .pairing = rope_pairing_from_name(c.get_string("rope_pairing"))};
    return std::make_shared<GroupedQueryAttention>(c.get_int("head_dim"), c.get_int("num_query_heads"),
                                                   c.get_int("num_key_value_heads"), float(c.get_double("dropout")),
                                                   c.get_bool("use_bias"), rotary, uint64_t(c.get_int("seed")));
  };
  r["GatedFeedForward"] = [](const LayerConfig& c) {
    return std::make_shared<GatedFeedForward>(c.get_int("intermediate_dim"), c.get_string("activation"));
  };
  r["ReversibleEmbedding"] = [](const LayerConfig& c) {
    return std::make_shared<ReversibleEmbedding>(c.get_int("input_dim"), c.get_int("output_dim"),
                                                 c.get_bool("tie_weights"));
  };
  r["LlamaDecoder"] = [](const LayerConfig& c) {
    LlamaConfig l;
    l.hidden_dim = c.get_int("hidden_dim");
    l.num_query_heads = c.get_int("num_query_heads");
    l.num_key_value_heads = c.get_int("num_key_value_heads");
    l.intermediate_dim = c.get_int("intermediate_dim");
    l.rope_max_wavelength = float(c.get_double("rope_max_wavelength"));
    l.rope_scaling_factor = float(c.get_double("rope_scaling_factor"));
    l.rope_pairing = rope_pairing_from_name(c.get_string("rope_pairing"));
    l.layer_norm_epsilon = float(c.get_double("layer_norm_epsilon"));
    l.dropout = float(c.get_double("dropout"));
    return std::make_shared<LlamaDecoder>(l, uint64_t(c.get_int("seed")));
  };
  return r;
}

struct Registries {
  std::mutex mutex;
  const Registry built_in = built_in_layers();
  Registry user;
};

Registries& registries() {
  static Registries r;
  return r;
}

}  // namespace

LayerConfig& LayerConfig::set(const std::string& key, Value value) {
  values_[key] = std::move(value);
  return *this;
}

template <class T>
static const T& config_get(const LayerConfig& c, const std::string& key, const char* want) {
  const auto it = c.values().find(key);
  if (it == c.values().end())
    throw ValueError(c.type() + " config: '" + key + "' is missing; it needs " + want);
  if (const T* v = std::get_if<T>(&it->second)) return *v;
  throw ValueError(c.type() + " config: '" + key + "' must be " + want + "; got " + kind_name(it->second));
}

bool LayerConfig::get_bool(const std::string& key) const { return config_get<bool>(*this, key, "a bool"); }

int64_t LayerConfig::get_int(const std::string& key) const {
  const auto it = values_.find(key);
  if (it != values_.end())
    if (const double* d = std::get_if<double>(&it->second))
      if (std::isfinite(*d) && *d == std::trunc(*d) && std::fabs(*d) < 9.0e15) return int64_t(*d);
  return config_get<int64_t>(*this, key, "an integer");
}

double LayerConfig::get_double(const std::string& key) const {
  const auto it = values_.find(key);
  if (it != values_.end())
    if (const int64_t* i = std::get_if<int64_t>(&it->second)) return double(*i);
  return config_get<double>(*this, key, "a number");
}

std::string LayerConfig::get_string(const std::string& key) const {
  return config_get<std::string>(*this, key, "a string");
}

std::vector<int64_t> LayerConfig::get_ints(const std::string& key) const {
  return config_get<std::vector<int64_t>>(*this, key, "a list of integers");
}

void register_layer(const std::string& type, LayerFactory factory) {
  if (type.empty()) throw ValueError("register_layer: the layer type is empty; give what the layer's type() returns");
  if (!factory) throw ValueError("register_layer: the factory for '" + type + "' is empty");
  Registries& r = registries();
  if (r.built_in.count(type))
    throw ValueError("register_layer: '" + type + "' is a built-in layer type; give your layer a type() of its own");
  std::lock_guard lock(r.mutex);
  r.user[type] = std::move(factory);
}

std::shared_ptr<Layer> layer_from_config(const std::string& type, const LayerConfig& config) {
  Registries& r = registries();
  LayerFactory factory;
  if (auto it = r.built_in.find(type); it != r.built_in.end()) {
    factory = it->second;
  } else {
    std::lock_guard lock(r.mutex);
    auto u = r.user.find(type);
    if (u == r.user.end())
      throw ValueError("unknown layer type '" + type +
                       "': it is not a built-in layer and no factory is registered for it; call "
                       "nn::register_layer(\"" + type + "\", factory) before loading");
    factory = u->second;
  }
  std::shared_ptr<Layer> layer = factory(config);
  if (!layer) throw ValueError("the factory registered for layer type '" + type + "' returned no layer");
  if (type != layer->type())
    throw ValueError("the factory registered for layer type '" + type + "' made a layer of type '" +
                     layer->type() + "'");
  return layer;
}

}  // namespace tensorgrad::nn
