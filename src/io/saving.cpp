// Models, weights and checkpoints in GGUF files (io/saving.h).
#include "tensorgrad/io/saving.h"

#include <cxxabi.h>

#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <typeinfo>
#include <type_traits>

#include "io/model_config.h"
#include "io/training_state.h"
#include "nn/loading.h"
#include "tensorgrad/core/error.h"
#include "tensorgrad/core/logging.h"

namespace tensorgrad::io {

namespace detail {

namespace {
constexpr uint32_t kFormatVersion = 1;
constexpr const char* kSlotNames[] = {"m", "v", "momentum", "acc"};

template <class S>
auto& slot_tensor(S& s, int k) {
  std::remove_reference_t<decltype((s.m))>* const slots[] = {&s.m, &s.v, &s.momentum, &s.acc};  // in kSlotNames' order
  return *slots[k];
}

std::string slot_key(const std::string& weight, int k) { return "optimizer/" + weight + "/" + kSlotNames[k]; }

// Tensors of the training state, not weights: the optimizer's and the callbacks'.
bool is_state_tensor(const std::string& name) {
  return name.rfind("optimizer/", 0) == 0 || name.rfind("callbacks/", 0) == 0;
}

std::string callback_prefix(size_t index, const std::string& type) {
  return "tensorgrad.callbacks." + std::to_string(index) + "." + type + ".";
}

TensorType stored_type(const Tensor& t) {
  switch (t.dtype()) {
    case DType::Float32: return TensorType::F32;
    case DType::Int32: return TensorType::I32;
    case DType::Int64: return TensorType::I64;
  }
  throw ValueError("a callback state tensor has an unknown dtype " + std::to_string(int(t.dtype())));
}

nlohmann::json parse_json(const GGUFFile& f, const std::string& key) {
  try {
    return nlohmann::json::parse(f.get_string(key));
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(f.path() + ": " + key + " is not valid JSON: " + e.what());
  }
}
}  // namespace

void write_header(GGUFWriter& w, const char* kind) {
  w.set_string("general.architecture", "tensorgrad");
  w.set_string("tensorgrad.file_kind", kind);
  w.set_u32("tensorgrad.format_version", kFormatVersion);
}

std::string check_header(const GGUFFile& f, std::initializer_list<const char*> kinds, const char* call) {
  const MetadataValue* arch = f.find("general.architecture");
  if (!arch || arch->type != ValueType::String || arch->strings.empty() || arch->strings[0] != "tensorgrad")
    throw FormatError(f.path() + " is not a tensorgrad file: general.architecture is " +
                      (arch && arch->type == ValueType::String && !arch->strings.empty()
                           ? "'" + arch->strings[0] + "'"
                           : std::string("missing")) +
                      ", expected 'tensorgrad'; " + call + " reads files written by tensorgrad's io::save_*");
  const uint32_t version = f.get_u32("tensorgrad.format_version");
  if (version > kFormatVersion || version == 0)
    throw FormatError(f.path() + ": unsupported version " + std::to_string(version) +
                      " of tensorgrad's file format (this build reads version " + std::to_string(kFormatVersion) +
                      "); update tensorgrad to read it");
  const std::string kind = f.get_string("tensorgrad.file_kind");
  std::string accepted;
  for (const char* k : kinds) {
    if (kind == k) return kind;
    accepted += std::string(accepted.empty() ? "" : " or ") + "'" + k + "'";
  }
  const char* reader = kind == "weights" ? "; load it with io::load_weights into a model built by your code"
                       : kind == "checkpoint" ? "; load it with io::load_checkpoint or io::load_model"
                       : kind == "model" ? "; load it with io::load_model"
                                         : "";
  throw FormatError(f.path() + " holds a '" + kind + "' file; " + call + " reads " + accepted + " files" + reader);
}

void add_weights(GGUFWriter& w, const nn::Model& model, TensorType type) {
  if (type != TensorType::F32 && type != TensorType::F16 && type != TensorType::BF16)
    throw ValueError(std::string("weights are stored as F32, F16 or BF16; got ") + tensor_type_name(type));
  std::set<std::string> names;
  for (const nn::Weight& weight : model.weights()) {
    if (!names.insert(weight.name).second) {
      const std::string layer = weight.name.substr(0, weight.name.rfind('/'));
      throw ValueError("the model has two weights named '" + weight.name + "': two of its layers are named '" +
                       layer + "', and weights are saved by name; give each layer a distinct name with set_name "
                       "before saving");
    }
    if (is_state_tensor(weight.name))
      throw ValueError("the model has a layer named '" + weight.name.substr(0, weight.name.find('/')) +
                       "': saved files keep the optimizer's and the callbacks' state under 'optimizer/' and "
                       "'callbacks/', so a layer of that name would be mistaken for it; give the layer another "
                       "name with set_name before saving");
    w.add_tensor(weight.name, weight.value, type);
  }
}

WeightMatch match_weights(const GGUFFile& f, const std::vector<nn::Weight>& weights) {
  WeightMatch m;
  std::set<std::string> in_model;
  for (const nn::Weight& w : weights) {
    in_model.insert(w.name);
    const TensorInfo* t = f.find_tensor(w.name);
    if (!t) {
      m.missing_in_file.push_back(w.name);
    } else if (t->shape != w.value.shape()) {
      m.shape_mismatches.push_back(w.name + ": model " + w.value.shape().str() + " vs file " + t->shape.str());
    } else {
      m.matched.emplace_back(w, t);
    }
  }
  for (const TensorInfo& t : f.tensors())
    if (!is_state_tensor(t.name) && !in_model.count(t.name)) m.not_in_model.push_back(t.name);
  return m;
}

std::string WeightMatch::describe() const {
  auto list = [](const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& n : v) s += (s.empty() ? "" : ", ") + n;
    return s;
  };
  std::string s;
  if (!missing_in_file.empty()) s += "\n  missing in the file: " + list(missing_in_file);
  if (!not_in_model.empty()) s += "\n  not in the model: " + list(not_in_model);
  if (!shape_mismatches.empty()) s += "\n  shape mismatches: " + list(shape_mismatches);
  return s;
}

void check_weights_match(const GGUFFile& f, const WeightMatch& m, const char* call) {
  if (m.complete()) return;
  // Names that differ on both sides are most often layers numbered again
  // (Keras' rule: dense, dense_1, ... per process), not another architecture.
  const std::string renamed =
      !m.missing_in_file.empty() && !m.not_in_model.empty()
          ? "\nIf the architecture is the same, the layers' names differ: layer names are numbered per process "
            "(dense, dense_1, ...), so build the model after nn::clear_session() or name its layers as in the file"
          : "";
  throw ValueError(std::string(call) + ": the weights in " + f.path() + " do not match the model's (nothing was " +
                   "loaded):" + m.describe() + renamed +
                   "\nLoad into a model of the same architecture, or pass skip_mismatch");
}

void read_matched(const GGUFFile& f, const WeightMatch& m) {
  for (const auto& [w, t] : m.matched) {
    Tensor out = w.value;
    f.read_into(t->name, out);
  }
}

std::vector<uint64_t> stream_state(const std::mt19937_64& rng) {
  std::ostringstream os;
  os << rng;
  std::istringstream is(os.str());
  std::vector<uint64_t> words;
  uint64_t x;
  while (is >> x) words.push_back(x);
  return words;
}

void set_stream_state(std::mt19937_64& rng, const std::vector<uint64_t>& words, const std::string& path) {
  std::ostringstream os;
  for (size_t i = 0; i < words.size(); ++i) os << (i ? " " : "") << words[i];
  std::istringstream is(os.str());
  std::mt19937_64 restored;
  is >> restored;
  if (is.fail() || words.size() != stream_state(restored).size())
    throw FormatError(path + ": tensorgrad.random_stream holds " + std::to_string(words.size()) +
                      " words, not the state of a 64-bit Mersenne twister (313 words)");
  rng = restored;
}

void add_optimizer_state(GGUFWriter& w, const nn::TrainingState& state) {
  w.set_u64_array("tensorgrad.random_stream", stream_state(state.random_stream));
  if (!state.compiled) return;
  w.set_u64("tensorgrad.optimizer.rng_counter", uint64_t(state.dropout_counter));
  w.set_i64("tensorgrad.optimizer.micro_step", state.micro_step);
  w.add_tensor("optimizer/hyper", state.hyper, TensorType::F32);
  w.add_tensor("optimizer/iterations", state.iterations, TensorType::I64);
  for (const nn::WeightSlots& slots : state.slots)
    for (int k = 0; k < 4; ++k) {
      const Tensor& t = slot_tensor(slots, k);
      if (t.defined()) w.add_tensor(slot_key(slots.weight, k), t, TensorType::F32);
    }
}

bool has_optimizer_state(const GGUFFile& f) { return f.find_tensor("optimizer/iterations") != nullptr; }

nn::TrainingState read_training_state(const GGUFFile& f) {
  nn::TrainingState state;
  set_stream_state(state.random_stream, f.get_u64_array("tensorgrad.random_stream"), f.path());
  if (!has_optimizer_state(f)) return state;
  for (const char* name : {"optimizer/hyper", "optimizer/iterations"})
    if (!f.find_tensor(name)) throw FormatError(f.path() + ": the optimizer state has no tensor '" + name + "'");
  state.compiled = true;
  state.hyper = f.read("optimizer/hyper");
  state.iterations = f.read("optimizer/iterations");
  state.dropout_counter = int64_t(f.get_u64("tensorgrad.optimizer.rng_counter"));
  state.micro_step = f.get_i64("tensorgrad.optimizer.micro_step");
  // "optimizer/<layer>/<weight>/<slot>", in the order the file has them.
  const std::string prefix = "optimizer/";
  std::map<std::string, size_t> index;
  for (const TensorInfo& t : f.tensors()) {
    const size_t cut = t.name.rfind('/');
    if (t.name.rfind(prefix, 0) != 0 || cut <= prefix.size()) continue;
    const std::string weight = t.name.substr(prefix.size(), cut - prefix.size());
    for (int k = 0; k < 4; ++k) {
      if (t.name.compare(cut + 1, std::string::npos, kSlotNames[k]) != 0) continue;
      auto [it, added] = index.try_emplace(weight, state.slots.size());
      if (added) state.slots.push_back({weight, {}, {}, {}, {}});
      slot_tensor(state.slots[it->second], k) = f.read(t.name);
    }
  }
  return state;
}

void add_training_state(GGUFWriter& w, const nn::Model& model, const nn::TrainingState& state, const char* call) {
  if (!model.compiled())
    throw StateError(std::string(call) + ": the model is not compiled, so it has no optimizer state to save; "
                                         "compile it first (or save it with save_model or save_weights)");
  write_header(w, "checkpoint");
  w.set_string("tensorgrad.model_config", architecture_json(model).dump());
  w.set_string("tensorgrad.compile_config", compile_json(model).dump());
  add_weights(w, model, TensorType::F32);
  add_optimizer_state(w, state);
}

void check_checkpoint_optimizer(const GGUFFile& f, const nn::Model& model, const char* call) {
  const nlohmann::json config = parse_json(f, "tensorgrad.compile_config");
  const std::string saved = config.is_object() && config.contains("optimizer")
                                ? config["optimizer"].value("class_name", "?")
                                : std::string("?");
  const std::string mine = optimizer_name(model.optimizer().kind);
  if (saved != mine)
    throw ValueError(std::string(call) + ": " + f.path() + " was saved from a model with the " + saved +
                     " optimizer; this one's is " + mine + ". Compile the model with " + saved + " to resume");
}

namespace {

// How checkpoints named a callback before Callback::type(): its class name as
// the Itanium C++ ABI's demangler gives it (GCC, Clang), without namespaces
// ("EarlyStopping", a user's "MyCallback"). Kept to read those files only.
std::string class_name(const nn::Stateful& object) {
  const char* mangled = typeid(object).name();
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(abi::__cxa_demangle(mangled, nullptr, nullptr, &status),
                                                   std::free);
  std::string name = status == 0 && demangled ? demangled.get() : mangled;
  const size_t bracket = name.find('<');
  const size_t colons = name.rfind("::", bracket);
  return colons == std::string::npos ? name : name.substr(colons + 2);
}

}  // namespace

std::string callback_type_name(const nn::Stateful& object) {
  const char* type = object.type();
  if (!type || !*type)
    throw ValueError("the " + std::string(dynamic_cast<const nn::Callback*>(&object) ? "callback" : "state") +
                     " of class " + class_name(object) + "'s type() returned " +
                     (type ? "an empty name" : std::string("null")) +
                     "; return the name checkpoints record it by, as \"MyCallback\"");
  return type;
}

void add_callback_states(GGUFWriter& w, const std::vector<nn::Stateful*>& callbacks) {
  std::vector<std::string> types;
  for (size_t i = 0; i < callbacks.size(); ++i) {
    const std::string type = callback_type_name(*callbacks[i]);
    types.push_back(type);
    const nn::CallbackState state = callbacks[i]->get_state();
    const std::string prefix = callback_prefix(i, type);
    for (const auto& [key, value] : state.values) w.set_f64(prefix + "value." + key, value);
    if (state.tensors.empty()) continue;
    std::vector<std::string> names;
    for (size_t j = 0; j < state.tensors.size(); ++j) {
      names.push_back(state.tensors[j].first);
      // By position, as files have always stored them; the state's own names go in tensor_names.
      w.add_tensor("callbacks/" + std::to_string(i) + "/" + std::to_string(j), state.tensors[j].second,
                   stored_type(state.tensors[j].second));
    }
    w.set_string_array(prefix + "tensor_names", names);
  }
  if (!types.empty()) w.set_string_array("tensorgrad.callbacks.types", types);
}

std::vector<nn::CallbackState> read_callback_states(const GGUFFile& f, const std::vector<nn::Stateful*>& callbacks,
                                                    const char* call, const char* what) {
  const std::vector<std::string> saved =
      f.find("tensorgrad.callbacks.types") ? f.get_string_array("tensorgrad.callbacks.types")
                                           : std::vector<std::string>{};
  std::vector<std::string> mine;
  for (const nn::Stateful* c : callbacks) mine.push_back(callback_type_name(*c));
  // A file written before Callback::type() names each callback by its class.
  bool same = saved.size() == mine.size();
  for (size_t i = 0; same && i < saved.size(); ++i)
    same = saved[i] == mine[i] || saved[i] == class_name(*callbacks[i]);
  if (!same) {
    auto list = [](const std::vector<std::string>& v) {
      std::string s;
      for (const std::string& n : v) s += (s.empty() ? "" : ", ") + n;
      return "[" + s + "]";
    };
    throw ValueError(std::string(call) + ": " + f.path() + " holds the states of " + list(saved) +
                     "; the " + what + " given are " + list(mine) + ". Resume with the same " + what +
                     ", in the same order, as the run that saved it");
  }
  std::vector<nn::CallbackState> states(callbacks.size());
  for (size_t i = 0; i < callbacks.size(); ++i) {
    const std::string prefix = callback_prefix(i, saved[i]);
    for (const MetadataEntry& e : f.metadata())
      if (e.key.rfind(prefix + "value.", 0) == 0)
        states[i].values[e.key.substr(prefix.size() + 6)] = f.get_f64(e.key);
    if (!f.find(prefix + "tensor_names")) continue;
    const std::vector<std::string> names = f.get_string_array(prefix + "tensor_names");
    for (size_t j = 0; j < names.size(); ++j) {
      const std::string tensor = "callbacks/" + std::to_string(i) + "/" + std::to_string(j);
      if (!f.find_tensor(tensor))
        throw FormatError(f.path() + ": the state of " + what + "[" + std::to_string(i) + "] (" + mine[i] +
                          ") names " + std::to_string(names.size()) + " tensors but '" + tensor + "' is missing");
      states[i].tensors.emplace_back(names[j], f.read(tensor));
    }
  }
  return states;
}

}  // namespace detail

namespace {

void check_model_live(const nn::Model& model, const char* call) {
  if (model.released())
    throw StateError(std::string(call) + ": the model was released by free(); save it before freeing it");
}

// A checkpoint resumes exactly only into the model it was saved from: the
// same optimizer, weights, and configuration (an activation or a dropout
// seed that differs would resume, but not exactly). Returns the weights'
// match; throws before anything changes.
detail::WeightMatch checkpoint_match(const GGUFFile& f, const nn::Model& model) {
  detail::check_header(f, {"checkpoint"}, "load_checkpoint");
  detail::check_checkpoint_optimizer(f, model, "load_checkpoint");
  detail::WeightMatch m = detail::match_weights(f, model.weights());
  detail::check_weights_match(f, m, "load_checkpoint");
  const std::string difference = detail::architecture_difference(
      detail::architecture_json(model), detail::parse_json(f, "tensorgrad.model_config"));
  if (!difference.empty())
    throw ValueError("load_checkpoint: " + f.path() + " was saved from another model: " + difference +
                     ". Build the model with the same code after the same manual_seed (dropout layers draw their "
                     "seeds when made), then load the checkpoint");
  return m;
}

nn::Model load_any(const std::string& path, std::string* class_name) {
  const GGUFFile f = GGUFFile::open(path);
  detail::check_header(f, {"model", "checkpoint"}, "load_model");
  const nlohmann::json arch = detail::parse_json(f, "tensorgrad.model_config");
  nn::detail::LoadingScope loading;  // weights and streams come from the file: draw nothing
  nn::Model model = detail::model_from_architecture(arch);
  if (class_name) *class_name = arch.value("class_name", "");
  const MetadataValue* compile = f.find("tensorgrad.compile_config");
  bool compiled = false;
  if (compile) {
    const nlohmann::json config = detail::parse_json(f, "tensorgrad.compile_config");
    compiled = !config.is_null() && detail::compile_from_json(model, config);
  }
  const detail::WeightMatch m = detail::match_weights(f, model.weights());
  detail::check_weights_match(f, m, "load_model");
  detail::read_matched(f, m);
  if (compiled && detail::has_optimizer_state(f)) {
    const nn::TrainingState state = detail::read_training_state(f);
    detail::with_file_context(f, "load_model", [&] { model.set_training_state(state); });
  }
  return model;
}

}  // namespace

WriteStats save_model(const nn::Model& model, const std::string& path, bool include_optimizer, TensorType weight_type) {
  check_model_live(model, "save_model");
  GGUFWriter w;
  detail::write_header(w, "model");
  w.set_string("tensorgrad.model_config", detail::architecture_json(model).dump());
  if (model.compiled()) w.set_string("tensorgrad.compile_config", detail::compile_json(model).dump());
  detail::add_weights(w, model, weight_type);
  if (include_optimizer && model.compiled()) detail::add_optimizer_state(w, model.training_state());
  return w.write(path);
}

nn::Model load_model(const std::string& path) { return load_any(path, nullptr); }

nn::Sequential load_sequential(const std::string& path) {
  std::string class_name;
  nn::Model model = load_any(path, &class_name);
  if (class_name != "Sequential")
    throw ValueError("load_sequential: " + path + " holds a " + class_name +
                     " model, not a Sequential; load it with io::load_model");
  return nn::Sequential(std::move(model));
}

WriteStats save_weights(const nn::Model& model, const std::string& path, TensorType weight_type) {
  check_model_live(model, "save_weights");
  GGUFWriter w;
  detail::write_header(w, "weights");
  detail::add_weights(w, model, weight_type);
  return w.write(path);
}

void load_weights(nn::Model& model, const std::string& path, bool skip_mismatch) {
  check_model_live(model, "load_weights");
  const GGUFFile f = GGUFFile::open(path);
  detail::check_header(f, {"weights", "model", "checkpoint"}, "load_weights");
  const detail::WeightMatch m = detail::match_weights(f, model.weights());
  if (!skip_mismatch) detail::check_weights_match(f, m, "load_weights");
  detail::read_matched(f, m);
  if (!m.complete())
    log_message(LogLevel::Warning, "load_weights(skip_mismatch): loaded " + std::to_string(m.matched.size()) +
                                       " weights from " + path + "; left out:" + m.describe());
}

// Puts `saved` into `states`, then runs `then` (the model's or trainer's own state): the objects check
// their states as they take them, and on any error the ones already changed go back.
template <class Then>
void restore_states(const std::vector<nn::Stateful*>& states, const std::vector<nn::CallbackState>& saved, Then then) {
  std::vector<nn::CallbackState> before;
  for (nn::Stateful* c : states) before.push_back(c->get_state());
  try {
    for (size_t i = 0; i < states.size(); ++i) states[i]->set_state(saved[i]);
    then();
  } catch (...) {
    for (size_t i = 0; i < states.size(); ++i) {
      try {
        states[i]->set_state(before[i]);
      } catch (...) {  // the first error is the one to report; put back the others still
      }
    }
    throw;
  }
}

// Refuses a null among the states given beside a checkpoint.
void check_states(const std::vector<nn::Stateful*>& states, const char* call, const char* what) {
  for (size_t i = 0; i < states.size(); ++i)
    if (!states[i]) throw ValueError(std::string(call) + ": " + what + "[" + std::to_string(i) + "] is null");
}

std::vector<nn::Stateful*> as_states(const std::vector<nn::Callback*>& callbacks) {
  return std::vector<nn::Stateful*>(callbacks.begin(), callbacks.end());
}

WriteStats save_checkpoint(const nn::Trainer& trainer, const std::string& path,
                           const std::vector<nn::Stateful*>& states) {
  if (trainer.released()) throw StateError("save_checkpoint: the trainer was released by free()");
  check_states(states, "save_checkpoint", "states");
  const nn::TrainingState state = trainer.training_state();
  GGUFWriter w;
  detail::add_training_state(w, trainer.training_model(), state, "save_checkpoint");
  w.set_i64("tensorgrad.trainer.n_steps", state.steps);
  w.set_i64("tensorgrad.trainer.accumulation_period", state.accumulation_period);
  detail::add_callback_states(w, states);
  return w.write(path);
}

void load_checkpoint(nn::Trainer& trainer, const std::string& path, const std::vector<nn::Stateful*>& states) {
  if (trainer.released()) throw StateError("load_checkpoint: the trainer was released by free()");
  check_states(states, "load_checkpoint", "states");
  const nn::Model& model = trainer.training_model();
  const GGUFFile f = GGUFFile::open(path);
  const detail::WeightMatch m = checkpoint_match(f, model);
  nn::TrainingState state = detail::read_training_state(f);
  state.steps = f.get_i64("tensorgrad.trainer.n_steps");
  // 0 (unknown) in files written before the period was: the trainer then
  // checks only that the open period fits in its own.
  state.accumulation_period = f.find("tensorgrad.trainer.accumulation_period")
                                  ? f.get_i64("tensorgrad.trainer.accumulation_period")
                                  : 0;
  const std::vector<nn::CallbackState> saved = detail::read_callback_states(f, states, "load_checkpoint", "states");
  restore_states(states, saved, [&] {
    detail::with_file_context(f, "load_checkpoint", [&] { trainer.set_training_state(state); });
    detail::read_matched(f, m);
  });
}

WriteStats save_checkpoint(const nn::Model& model, const std::string& path, int initial_epoch,
                     const std::vector<nn::Callback*>& callbacks) {
  check_model_live(model, "save_checkpoint");
  if (initial_epoch < 0)
    throw ValueError("save_checkpoint: initial_epoch (the epoch a resumed fit starts at) must be >= 0; got " +
                     std::to_string(initial_epoch));
  const std::vector<nn::Stateful*> states = as_states(callbacks);
  check_states(states, "save_checkpoint", "callbacks");
  GGUFWriter w;
  detail::add_training_state(w, model, model.training_state(), "save_checkpoint");
  w.set_i64("tensorgrad.fit.initial_epoch", initial_epoch);
  detail::add_callback_states(w, states);
  return w.write(path);
}

int load_checkpoint(nn::Model& model, const std::string& path, const std::vector<nn::Callback*>& callbacks) {
  check_model_live(model, "load_checkpoint");
  if (!model.compiled())
    throw StateError("load_checkpoint: the model is not compiled; compile it as the saved one was (the same "
                     "optimizer), then load the checkpoint");
  const std::vector<nn::Stateful*> states = as_states(callbacks);
  check_states(states, "load_checkpoint", "callbacks");
  const GGUFFile f = GGUFFile::open(path);
  const detail::WeightMatch m = checkpoint_match(f, model);
  const int64_t epoch = f.find("tensorgrad.fit.initial_epoch") ? f.get_i64("tensorgrad.fit.initial_epoch") : 0;
  if (epoch < 0 || epoch > std::numeric_limits<int>::max())
    throw FormatError(path + ": tensorgrad.fit.initial_epoch is " + std::to_string(epoch) +
                      ", not an epoch number");
  const std::vector<nn::CallbackState> saved = detail::read_callback_states(f, states, "load_checkpoint", "callbacks");
  const nn::TrainingState training = detail::read_training_state(f);
  restore_states(states, saved, [&] {
    detail::with_file_context(f, "load_checkpoint", [&] { model.set_training_state(training); });
    detail::read_matched(f, m);
  });
  return int(epoch);
}

}  // namespace tensorgrad::io
