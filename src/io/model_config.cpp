// Architecture and compile settings as JSON (see model_config.h).
#include "io/model_config.h"

#include <map>
#include <mutex>
#include <unordered_map>

#include "nn/functional.h"
#include "tensorgrad/core/error.h"
#include "tensorgrad/core/logging.h"

namespace tensorgrad::io::detail {

using nlohmann::json;

namespace {

// A malformed config is a FormatError naming what is wrong (the JSON library's
// own exceptions never leave this file).
template <class F>
auto guarded(const char* what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const json::exception& e) {
    throw FormatError(std::string("malformed ") + what + " in the file: " + e.what());
  }
}

const json& at(const json& j, const char* key, const char* where) {
  if (!j.is_object() || !j.contains(key))
    throw FormatError(std::string("malformed ") + where + " in the file: key '" + key + "' is missing");
  return j.at(key);
}


// The parts of a model's graph the architecture is written from: the
// public Model's, or a nested model's graph.
struct GraphParts {
  const std::vector<nn::SymbolicTensor>& inputs;
  const std::vector<std::shared_ptr<nn::Layer>>& layers;
  const std::vector<const nn::LayerCall*>& order;
  const std::vector<nn::SymbolicTensor>& outputs;
};

json architecture_of(const GraphParts& graph, const std::string& class_name, const std::string& name) {
  json arch;
  arch["class_name"] = class_name;
  arch["name"] = name;
  std::unordered_map<const nn::LayerCall*, int64_t> input_index, call_index;
  json inputs = json::array();
  for (size_t i = 0; i < graph.inputs.size(); ++i) {
    const nn::SymbolicTensor& t = graph.inputs[i];
    input_index[t.call().get()] = int64_t(i);
    inputs.push_back({{"name", t.name()},
                      {"shape", std::vector<int64_t>(t.shape().begin(), t.shape().end())},
                      {"dtype", dtype_name(t.dtype())}});
  }
  arch["inputs"] = inputs;
  std::unordered_map<const nn::Layer*, int64_t> layer_index;
  json layers = json::array();
  for (const auto& l : graph.layers) {
    layer_index[l.get()] = int64_t(layers.size());
    json entry = {{"class_name", l->type()}, {"name", l->name()}, {"trainable", l->trainable}};
    if (const auto* nested = dynamic_cast<const nn::ModelLayer*>(l.get()))
      entry["model"] = architecture_of({nested->graph().inputs, nested->graph().layers, nested->graph().order,
                                        nested->graph().outputs},
                                       l->type(), l->name());
    else
      entry["config"] = config_json(l->config());
    layers.push_back(std::move(entry));
  }
  arch["layers"] = layers;
  auto ref = [&](const nn::SymbolicTensor& t) -> json {
    const nn::LayerCall* c = t.call().get();
    if (auto it = input_index.find(c); it != input_index.end()) return {{"input", it->second}};
    return {{"call", call_index.at(c)}, {"index", t.index()}};
  };
  json calls = json::array();
  for (const nn::LayerCall* c : graph.order) {
    json inbound = json::array();
    for (const nn::SymbolicTensor& t : c->inputs) inbound.push_back(ref(t));
    calls.push_back({{"layer", layer_index.at(c->layer.get())}, {"inbound", inbound}});
    call_index[c] = int64_t(calls.size()) - 1;
  }
  arch["calls"] = calls;
  json outputs = json::array();
  for (const nn::SymbolicTensor& t : graph.outputs) outputs.push_back(ref(t));
  arch["outputs"] = outputs;
  return arch;
}

DType dtype_from_name(const std::string& name) {
  if (name == "float32") return DType::Float32;
  if (name == "int32") return DType::Int32;
  throw FormatError("malformed model config in the file: input dtype '" + name + "' (expected float32 or int32)");
}

// Layers rebuilt so far, by name: a layer shared between a nested model and
// its outer graph is rebuilt once and stays shared.
using Rebuilt = std::map<std::string, std::shared_ptr<nn::Layer>>;

nn::Model rebuild(const json& arch, Rebuilt& rebuilt);

struct CallableLayer {
  std::shared_ptr<nn::Layer> layer;  // a plain layer
  std::shared_ptr<nn::Model> model;  // or a nested model
};

std::vector<nn::SymbolicTensor> call_layer(const CallableLayer& l, const std::vector<nn::SymbolicTensor>& in) {
  if (l.model) return l.model->call_outputs(in);
  return {in.size() == 1 ? (*l.layer)(in[0]) : (*l.layer)(in)};
}

nn::Model rebuild(const json& arch, Rebuilt& rebuilt) {
  const char* where = "model config";
  std::vector<nn::SymbolicTensor> inputs;
  for (const json& in : at(arch, "inputs", where)) {
    const std::vector<int64_t> dims = at(in, "shape", where).get<std::vector<int64_t>>();
    inputs.push_back(nn::Input(Shape(dims), dtype_from_name(at(in, "dtype", where).get<std::string>()),
                               at(in, "name", where).get<std::string>()));
  }
  std::vector<CallableLayer> layers;
  for (const json& entry : at(arch, "layers", where)) {
    const std::string type = at(entry, "class_name", where).get<std::string>();
    const std::string name = at(entry, "name", where).get<std::string>();
    CallableLayer l;
    if (entry.contains("model")) {
      l.model = std::make_shared<nn::Model>(rebuild(entry.at("model"), rebuilt));
    } else if (auto it = rebuilt.find(name); it != rebuilt.end()) {
      l.layer = it->second;
    } else {
      l.layer = nn::layer_from_config(type, config_from_json(type, at(entry, "config", where)));
      l.layer->set_name(name);
      l.layer->trainable = at(entry, "trainable", where).get<bool>();
      rebuilt[name] = l.layer;
    }
    layers.push_back(std::move(l));
  }
  std::vector<std::vector<nn::SymbolicTensor>> outputs_of_call;
  auto resolve = [&](const json& r) -> nn::SymbolicTensor {
    if (r.contains("input")) return inputs.at(r.at("input").get<size_t>());
    const auto& outs = outputs_of_call.at(at(r, "call", where).get<size_t>());
    return outs.at(at(r, "index", where).get<size_t>());
  };
  for (const json& call : at(arch, "calls", where)) {
    std::vector<nn::SymbolicTensor> in;
    for (const json& r : at(call, "inbound", where)) in.push_back(resolve(r));
    outputs_of_call.push_back(call_layer(layers.at(at(call, "layer", where).get<size_t>()), in));
  }
  std::vector<nn::SymbolicTensor> outputs;
  for (const json& r : at(arch, "outputs", where)) outputs.push_back(resolve(r));
  return nn::Model(inputs, outputs, at(arch, "name", where).get<std::string>());
}

json schedule_json(const LearningRateSchedule& schedule) {
  json j;
  j["class_name"] = schedule_name(schedule);
  std::visit(
      [&](const auto& s) {
        using S = std::decay_t<decltype(s)>;
        if constexpr (std::is_same_v<S, PiecewiseConstantDecay>) {
          j["boundaries"] = s.boundaries;
          j["values"] = s.values;
        } else if constexpr (std::is_same_v<S, ExponentialDecay>) {
          j["initial_learning_rate"] = s.initial_learning_rate;
          j["decay_steps"] = s.decay_steps;
          j["decay_rate"] = s.decay_rate;
          j["staircase"] = s.staircase;
        } else if constexpr (std::is_same_v<S, CosineDecay>) {
          j["initial_learning_rate"] = s.initial_learning_rate;
          j["decay_steps"] = s.decay_steps;
          j["alpha"] = s.alpha;
          j["warmup_target"] = s.warmup_target ? json(*s.warmup_target) : json(nullptr);
          j["warmup_steps"] = s.warmup_steps;
        } else {
          static_assert(std::is_same_v<S, CosineDecayRestarts>);
          j["initial_learning_rate"] = s.initial_learning_rate;
          j["first_decay_steps"] = s.first_decay_steps;
          j["t_mul"] = s.t_mul;
          j["m_mul"] = s.m_mul;
          j["alpha"] = s.alpha;
        }
      },
      schedule);
  return j;
}

LearningRateSchedule schedule_from_json(const json& j) {
  const char* where = "learning-rate schedule";
  const std::string name = at(j, "class_name", where).get<std::string>();
  if (name == "PiecewiseConstantDecay")
    return PiecewiseConstantDecay{at(j, "boundaries", where).get<std::vector<int64_t>>(),
                                  at(j, "values", where).get<std::vector<float>>()};
  if (name == "ExponentialDecay")
    return ExponentialDecay{at(j, "initial_learning_rate", where).get<float>(), at(j, "decay_steps", where).get<int64_t>(),
                            at(j, "decay_rate", where).get<float>(), at(j, "staircase", where).get<bool>()};
  if (name == "CosineDecay") {
    CosineDecay s{at(j, "initial_learning_rate", where).get<float>(), at(j, "decay_steps", where).get<int64_t>(),
                  at(j, "alpha", where).get<float>(), std::nullopt, at(j, "warmup_steps", where).get<int64_t>()};
    if (!at(j, "warmup_target", where).is_null()) s.warmup_target = j.at("warmup_target").get<float>();
    return s;
  }
  if (name == "CosineDecayRestarts")
    return CosineDecayRestarts{at(j, "initial_learning_rate", where).get<float>(),
                               at(j, "first_decay_steps", where).get<int64_t>(), at(j, "t_mul", where).get<float>(),
                               at(j, "m_mul", where).get<float>(), at(j, "alpha", where).get<float>()};
  throw FormatError("malformed compile config in the file: unknown learning-rate schedule '" + name + "'");
}

json optimizer_json(const OptimizerSpec& s) {
  json j = {{"class_name", optimizer_name(s.kind)},
            {"learning_rate", s.learning_rate},
            {"beta_1", s.beta_1},
            {"beta_2", s.beta_2},
            {"epsilon", s.epsilon},
            {"weight_decay", s.weight_decay},
            {"decoupled_weight_decay", s.decoupled_weight_decay},
            {"momentum", s.momentum},
            {"nesterov", s.nesterov},
            {"dampening", s.dampening},
            {"rho", s.rho},
            {"centered", s.centered},
            {"epsilon_inside_sqrt", s.epsilon_inside_sqrt},
            {"initial_accumulator_value", s.initial_accumulator_value},
            {"clipnorm", s.clipnorm},
            {"global_clipnorm", s.global_clipnorm},
            {"clipvalue", s.clipvalue}};
  j["learning_rate_schedule"] = s.learning_rate_schedule ? schedule_json(*s.learning_rate_schedule) : json(nullptr);
  return j;
}

OptimizerSpec optimizer_from_json(const json& j) {
  const char* where = "optimizer config";
  OptimizerSpec s;
  const std::string name = at(j, "class_name", where).get<std::string>();
  bool known = false;
  for (OptimizerSpec::Kind k : {OptimizerSpec::Kind::AdamW, OptimizerSpec::Kind::SGD, OptimizerSpec::Kind::RMSprop,
                                OptimizerSpec::Kind::Adagrad})
    if (name == optimizer_name(k)) s.kind = k, known = true;
  if (!known) throw FormatError("malformed compile config in the file: unknown optimizer '" + name + "'");
  s.learning_rate = at(j, "learning_rate", where).get<float>();
  s.beta_1 = at(j, "beta_1", where).get<float>();
  s.beta_2 = at(j, "beta_2", where).get<float>();
  s.epsilon = at(j, "epsilon", where).get<float>();
  s.weight_decay = at(j, "weight_decay", where).get<float>();
  s.decoupled_weight_decay = at(j, "decoupled_weight_decay", where).get<bool>();
  s.momentum = at(j, "momentum", where).get<float>();
  s.nesterov = at(j, "nesterov", where).get<bool>();
  s.dampening = at(j, "dampening", where).get<float>();
  s.rho = at(j, "rho", where).get<float>();
  s.centered = at(j, "centered", where).get<bool>();
  s.epsilon_inside_sqrt = at(j, "epsilon_inside_sqrt", where).get<bool>();
  s.initial_accumulator_value = at(j, "initial_accumulator_value", where).get<float>();
  s.clipnorm = at(j, "clipnorm", where).get<float>();
  s.global_clipnorm = at(j, "global_clipnorm", where).get<float>();
  s.clipvalue = at(j, "clipvalue", where).get<float>();
  if (!at(j, "learning_rate_schedule", where).is_null())
    s.learning_rate_schedule = schedule_from_json(j.at("learning_rate_schedule"));
  return s;
}

struct LossRegistry {
  std::mutex mutex;
  std::map<std::string, LossFunction> losses;
};
LossRegistry& loss_registry() {
  static LossRegistry r;
  return r;
}

}  // namespace

json config_json(const nn::LayerConfig& config) {
  json out = json::object();
  for (const auto& [key, value] : config.values()) {
    switch (value.index()) {
      case 0: out[key] = std::get<bool>(value); break;
      case 1: out[key] = std::get<int64_t>(value); break;
      case 2: out[key] = std::get<double>(value); break;
      case 3: out[key] = std::get<std::string>(value); break;
      case 4: out[key] = std::get<std::vector<int64_t>>(value); break;
    }
  }
  return out;
}

nn::LayerConfig config_from_json(const std::string& type, const json& j) {
  nn::LayerConfig c(type);
  if (!j.is_object()) throw FormatError("malformed config of a " + type + ": not a JSON object");
  for (const auto& [key, value] : j.items()) {
    if (value.is_boolean()) {
      c.set(key, value.get<bool>());
    } else if (value.is_number_integer()) {
      c.set(key, value.get<int64_t>());
    } else if (value.is_number_float()) {
      c.set(key, value.get<double>());
    } else if (value.is_string()) {
      c.set(key, value.get<std::string>());
    } else if (value.is_array()) {
      c.set(key, value.get<std::vector<int64_t>>());
    } else {
      throw FormatError("malformed config of a " + type + ": '" + key + "' holds " + value.type_name());
    }
  }
  return c;
}

json architecture_json(const nn::Model& model) {
  const std::vector<std::shared_ptr<nn::Layer>> layers = model.layers();
  return architecture_of({model.inputs(), layers, model.layer_calls(), model.outputs()}, model.type(), model.name());
}

nn::Model model_from_architecture(const json& architecture) {
  return guarded("model config", [&] {
    Rebuilt rebuilt;
    return rebuild(architecture, rebuilt);
  });
}

std::string architecture_difference(const json& mine, const json& file) {
  const json none;
  auto field = [&](const json& j, const char* key) -> const json& { return j.is_object() && j.contains(key) ? j.at(key) : none; };
  const json& la = field(mine, "layers");
  const json& lb = field(file, "layers");
  if (!la.is_array() || !lb.is_array() || la.size() != lb.size())
    return "this model has " + std::to_string(la.size()) + " layers, the file's " + std::to_string(lb.size());
  for (size_t i = 0; i < la.size(); ++i) {
    const json &a = la[i], &b = lb[i];
    const std::string what = "layer " + std::to_string(i) + " '" + field(a, "name").dump() + "' (" +
                             field(a, "class_name").dump() + ")";
    if (field(a, "class_name") != field(b, "class_name") || field(a, "name") != field(b, "name"))
      return what + " is " + field(b, "name").dump() + " (" + field(b, "class_name").dump() + ") in the file";
    if (a.contains("model")) {
      const std::string inner = architecture_difference(a.at("model"), field(b, "model"));
      if (!inner.empty()) return "in " + what + ": " + inner;
      continue;
    }
    const json& ca = field(a, "config");
    const json& cb = field(b, "config");
    if (ca == cb) continue;
    for (const auto& [key, value] : ca.items())
      if (field(cb, key.c_str()) != value)
        return what + ": " + key + " " + value.dump() + " here, " + field(cb, key.c_str()).dump() + " in the file";
    return what + ": its configuration differs from the file's";
  }
  if (field(mine, "inputs") != field(file, "inputs")) return "the inputs differ from the file's";
  if (field(mine, "calls") != field(file, "calls") || field(mine, "outputs") != field(file, "outputs"))
    return "the layers are connected differently from the file's";
  return "";
}

json compile_json(const nn::Model& model) {
  if (!model.compiled()) return nullptr;
  json losses = json::array();
  for (const Loss& l : model.losses())
    losses.push_back({{"name", l.name}, {"custom", l.kind == LossKind::Custom}});
  return {{"optimizer", optimizer_json(model.optimizer())},
          {"losses", losses},
          {"loss_weights", model.loss_weights()},
          {"metrics", model.output_metrics()}};
}

bool compile_from_json(nn::Model& model, const json& config) {
  return guarded("compile config", [&] {
    const char* where = "compile config";
    const OptimizerSpec optimizer = optimizer_from_json(at(config, "optimizer", where));
    std::vector<Loss> losses;
    for (const json& l : at(config, "losses", where)) {
      const std::string name = at(l, "name", where).get<std::string>();
      if (!at(l, "custom", where).get<bool>()) {
        losses.emplace_back(name);
        continue;
      }
      LossFunction fn = registered_loss(name);
      if (!fn) {
        log_message(LogLevel::Warning, "load_model: the model was compiled with the custom loss '" + name +
                                           "', which is not registered; it is loaded uncompiled. Call "
                                           "io::register_loss(\"" + name + "\", function) before loading, or compile it yourself");
        return false;
      }
      losses.emplace_back(name, std::move(fn));
    }
    model.compile(optimizer, losses, at(config, "loss_weights", where).get<std::vector<float>>(),
                  at(config, "metrics", where).get<std::vector<std::vector<std::string>>>());
    return true;
  });
}

LossFunction registered_loss(const std::string& name) {
  LossRegistry& r = loss_registry();
  std::lock_guard lock(r.mutex);
  auto it = r.losses.find(name);
  return it == r.losses.end() ? LossFunction{} : it->second;
}

}  // namespace tensorgrad::io::detail

namespace tensorgrad::io {

void register_loss(const std::string& name, LossFunction function) {
  if (name.empty()) throw ValueError("register_loss: the name is empty; give the name the loss was compiled with");
  if (!function) throw ValueError("register_loss: the function for '" + name + "' is empty");
  bool built_in = true;
  try {
    (void)loss_from_name(name);
  } catch (const ValueError&) {
    built_in = false;
  }
  if (built_in) throw ValueError("register_loss: '" + name + "' is a built-in loss name; choose another name");
  detail::LossRegistry& r = detail::loss_registry();
  std::lock_guard lock(r.mutex);
  r.losses[name] = std::move(function);
}

}  // namespace tensorgrad::io
