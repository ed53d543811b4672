#pragma once
// A model's architecture and compile settings as JSON (Keras' model config
// and compile config), stored in GGUF metadata as tensorgrad.model_config and
// tensorgrad.compile_config. nlohmann-json stays out of public headers.
// Private to the library.
#include <nlohmann/json.hpp>

#include "tensorgrad/nn/model.h"

namespace tensorgrad::io::detail {

/// A layer's or a module's configuration as a JSON object (its keys and
/// values), and back (the type given apart). FormatError for a value of
/// another kind than bool, integer, number, string or integer array.
nlohmann::json config_json(const nn::LayerConfig& config);
nn::LayerConfig config_from_json(const std::string& type, const nlohmann::json& j);

/// {"class_name", "name", "inputs", "layers", "calls", "outputs"}: every
/// layer once (type, name, trainable, config; a nested model as its own
/// architecture), every call in topological order with its inbound tensors.
nlohmann::json architecture_json(const nn::Model& model);
/// Rebuilds the model (uncompiled, weights zero: call inside a
/// nn::detail::LoadingScope). Throws FormatError for a malformed
/// architecture (naming the key), ValueError for an unknown layer type.
nn::Model model_from_architecture(const nlohmann::json& architecture);

/// Where two architectures differ: the first layer whose type, name or
/// config differs ("layer 'dropout' (Dropout): seed 12 here, 34 in the file"),
/// or that the inputs or connections differ; empty when they are the same.
std::string architecture_difference(const nlohmann::json& mine, const nlohmann::json& file);

/// {"optimizer", "losses", "loss_weights", "metrics"}, or null when not compiled.
nlohmann::json compile_json(const nn::Model& model);
/// Compiles `model` as `config` says. Returns false (and logs a warning)
/// when a custom loss is not registered (the model stays uncompiled).
/// Throws FormatError for a malformed config.
bool compile_from_json(nn::Model& model, const nlohmann::json& config);

/// The custom loss registered under `name`, or an empty function.
LossFunction registered_loss(const std::string& name);

}  // namespace tensorgrad::io::detail
