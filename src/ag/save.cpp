// Eager modules and state dicts in GGUF files (ag/save.h).
#include "tensorgrad/ag/save.h"

#include "tensorgrad/backend/backend.h"

#include <cstdint>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "io/model_config.h"
#include "tensorgrad/ag/nn/modules.h"
#include "tensorgrad/core/error.h"
#include "tensorgrad/core/version.h"

namespace tensorgrad::ag {

using nlohmann::json;

namespace {

constexpr uint32_t kFormatVersion = 1;
constexpr const char* kModuleConfigKey = "tensorgrad.module_config";
constexpr const char* kIndexKey = "tensorgrad.state_dict_index";
// Where a file came from, for people and tools looking at it; load ignores
// them. GGUF names no key for the writing software or the time (its
// general.version is the model's version), hence tensorgrad's own.
constexpr const char* kVersionKey = "tensorgrad.version";
constexpr const char* kCreatedKey = "tensorgrad.created";

// "state_dict" -> "state dict", for messages.
std::string kind_words(const std::string& kind) {
  std::string s = kind;
  for (char& c : s)
    if (c == '_') c = ' ';
  return s;
}

// ---- architecture ----

using io::detail::config_from_json;
using io::detail::config_json;

json architecture_json(const nn::Module& m) {
  json node;
  node["type"] = m.type();
  node["config"] = config_json(m.config());
  json children = json::array();
  for (const auto& [name, child] : m.named_children()) children.push_back({{"name", name}, {"module", architecture_json(*child)}});
  node["children"] = std::move(children);
  return node;
}

const json& member(const json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key))
    throw FormatError(std::string(kModuleConfigKey) + ": key '" + key + "' is missing at " + where);
  return j.at(key);
}

// The module `node` describes, with its children (`where`: its dotted path, for messages).
std::shared_ptr<nn::Module> rebuild(const json& node, const std::string& where) {
  const json& type_j = member(node, "type", where);
  if (!type_j.is_string()) throw FormatError(std::string(kModuleConfigKey) + ": 'type' is not a string at " + where);
  const std::string type = type_j.get<std::string>();
  std::shared_ptr<nn::Module> m = nn::module_from_config(config_from_json(type, member(node, "config", where)));
  if (!m) throw ValueError("the factory registered for '" + type + "' returned null (at " + where + ")");
  const json children = node.contains("children") ? node.at("children") : json::array();
  if (!children.is_array()) throw FormatError(std::string(kModuleConfigKey) + ": 'children' is not an array at " + where);
  if (children.empty() || !m->named_children().empty()) return m;  // a module that builds its own children
  auto* seq = dynamic_cast<nn::Sequential*>(m.get());
  if (!seq)
    throw ValueError("the file lists " + std::to_string(children.size()) + " children of the " + type + " at " +
                     where + ", but a " + type + " built from its config has none and only a Sequential takes "
                     "children back; pass a factory to ag::load, or register (nn::register_module_type) a factory "
                     "for '" + type + "' that builds its children");
  for (size_t i = 0; i < children.size(); ++i) {
    const json& c = children[i];
    const json& name = member(c, "name", where);
    if (!name.is_string() || name.get<std::string>() != std::to_string(i))
      throw FormatError(std::string(kModuleConfigKey) + ": child " + std::to_string(i) + " of the Sequential at " +
                        where + " is named " + name.dump() + ", expected \"" + std::to_string(i) + "\"");
    seq->push_back(rebuild(member(c, "module", where), where + "." + std::to_string(i)));
  }
  return m;
}

// ---- writing ----

// Now in UTC as ISO 8601 to the second, "2025-03-01T12:34:56Z".
std::string utc_now_iso8601() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  char buf[32];
  if (now == std::time_t(-1) || !::gmtime_r(&now, &utc) ||
      std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &utc) == 0)
    throw IOError("ag::save: the system clock gave no date for tensorgrad.created (time() returned " +
                  std::to_string(static_cast<long long>(now)) + "); set the system clock and save again");
  return buf;
}

io::TensorType stored_type(DType d) {
  switch (d) {
    case DType::Float32: return io::TensorType::F32;
    case DType::Int32: return io::TensorType::I32;
    case DType::Int64: return io::TensorType::I64;
  }
  throw TypeError("ag::save: unknown dtype " + std::to_string(int(d)));
}

io::WriteStats write_file(const nn::StateDict& dict, const std::string& path, const std::string& kind,
                          const json* architecture) {
  io::GGUFWriter w;
  w.set_string("general.architecture", "tensorgrad");
  w.set_string("tensorgrad.file_kind", kind);
  w.set_u32("tensorgrad.format_version", kFormatVersion);
  w.set_string(kVersionKey, tensorgrad::version());
  w.set_string(kCreatedKey, utc_now_iso8601());
  if (architecture) w.set_string(kModuleConfigKey, architecture->dump());
  json index = json::array();
  std::vector<std::pair<std::string, tensorgrad::Tensor>> tensors;
  for (const auto& [name, t] : dict) {
    if (!t.defined()) throw ValueError("ag::save: the state-dict entry '" + name + "' is an undefined tensor");
    const tensorgrad::Tensor& data = t.data();
    index.push_back({{"name", name},
                     {"dtype", dtype_name(data.dtype())},
                     {"shape", std::vector<int64_t>(data.shape().begin(), data.shape().end())}});
    if (data.numel() == 0) continue;  // rebuilt from the index
    const int rank = data.shape().rank();
    tensors.emplace_back(name, rank == 0 || rank > 4 ? data.reshape(Shape{data.numel()}) : data);
  }
  w.set_string(kIndexKey, index.dump());
  for (const auto& [name, data] : tensors) w.add_tensor(name, data, stored_type(data.dtype()));
  return w.write(path);
}

// ---- reading ----

bool starts_with_gguf_magic(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::string(magic, 4) == "GGUF";
}

// Opens `path` and checks it is a tensorgrad file of `kind` this build reads.
io::GGUFFile open_checked(const std::string& path, const std::string& kind) {
  const std::string what = "tensorgrad " + kind_words(kind);
  io::GGUFFile f = [&] {
    try {
      return io::GGUFFile::open(path);
    } catch (const FormatError& e) {
      if (starts_with_gguf_magic(path)) throw;  // a damaged GGUF file: the reader's message says where
      throw FormatError(path + " is not a " + what + ": it is not a GGUF file (" + e.what() + ")");
    }
  }();
  const io::MetadataValue* arch = f.find("general.architecture");
  if (!arch || arch->type != io::ValueType::String || arch->strings.empty() || arch->strings[0] != "tensorgrad")
    throw FormatError(path + " is not a " + what + ": general.architecture is " +
                      (arch && arch->type == io::ValueType::String && !arch->strings.empty()
                           ? "'" + arch->strings[0] + "'"
                           : std::string("missing")) +
                      ", expected 'tensorgrad'; ag::load reads files written by ag::save");
  const io::MetadataValue* kind_v = f.find("tensorgrad.file_kind");
  if (!kind_v || kind_v->type != io::ValueType::String || kind_v->strings.empty())
    throw FormatError(path + " is not a " + what + ": tensorgrad.file_kind is missing or not a string");
  const uint32_t version = f.get_u32("tensorgrad.format_version");
  if (version == 0 || version > kFormatVersion)
    throw FormatError(path + ": unsupported version " + std::to_string(version) + " (this build reads " +
                      std::to_string(kFormatVersion) + ") of tensorgrad's file format; update tensorgrad to read it");
  const std::string& file_kind = kind_v->strings[0];
  if (file_kind != kind) {
    const std::string hint = file_kind == "model" || file_kind == "checkpoint" ? "; load it with io::load_model"
                             : file_kind == "weights" ? "; load it with io::load_weights"
                             : "; read it with ag::load_state_dict(path, \"" + file_kind + "\")";
    throw FormatError(path + " holds a file of kind '" + file_kind + "' (tensorgrad.file_kind), not a " + what + hint);
  }
  return f;
}

json parse_json(const io::GGUFFile& f, const char* key) {
  try {
    return json::parse(f.get_string(key));
  } catch (const json::exception& e) {
    throw FormatError(f.path() + ": " + key + " is not valid JSON: " + e.what());
  }
}

DType dtype_from_name(const std::string& s, const std::string& where) {
  if (s == "float32") return DType::Float32;
  if (s == "int32") return DType::Int32;
  if (s == "int64") return DType::Int64;
  throw FormatError(where + ": unknown dtype '" + s + "'");
}

nn::StateDict read_state_dict(const io::GGUFFile& f) {
  const json index = parse_json(f, kIndexKey);
  const std::string where = f.path() + ": " + kIndexKey;
  if (!index.is_array()) throw FormatError(where + " is not a JSON array");
  nn::StateDict dict;
  std::set<std::string> names;
  try {
    for (const json& e : index) {
      if (!e.is_object() || !e.contains("name") || !e.contains("dtype") || !e.contains("shape"))
        throw FormatError(where + ": an entry lacks name, dtype or shape: " + e.dump());
      const std::string name = e.at("name").get<std::string>();
      if (!names.insert(name).second) throw FormatError(where + " lists '" + name + "' twice");
      const DType dtype = dtype_from_name(e.at("dtype").get<std::string>(), where + " '" + name + "'");
      const std::vector<int64_t> dims = e.at("shape").get<std::vector<int64_t>>();
      int64_t numel = 1;
      bool empty = false;
      for (int64_t d : dims) {
        if (d < 0) throw FormatError(where + ": '" + name + "' has a negative dimension");
        if (d == 0) empty = true;
      }
      const io::TensorInfo* info = f.find_tensor(name);
      if (empty) {
        if (info) throw FormatError(where + ": '" + name + "' is empty in the index but stored as a tensor");
        dict.insert(name, Tensor(tensorgrad::Tensor::zeros(Shape(std::span<const int64_t>(dims)), dtype)));
        continue;
      }
      if (!info) throw FormatError(where + " lists '" + name + "', but the file holds no tensor of that name");
      for (int64_t d : dims)
        if (__builtin_mul_overflow(numel, d, &numel) || numel > info->shape.numel())
          throw FormatError(where + ": '" + name + "' has " + std::to_string(info->shape.numel()) +
                            " elements in the file; the index's shape does not fit");
      tensorgrad::Tensor data = f.read(name);
      if (numel != data.numel())
        throw FormatError(where + ": '" + name + "' has " + std::to_string(data.numel()) +
                          " elements in the file; the index's shape has " + std::to_string(numel));
      if (data.dtype() != dtype)
        throw FormatError(where + ": '" + name + "' is " + dtype_name(data.dtype()) + " in the file, " +
                          dtype_name(dtype) + " in the index");
      dict.insert(name, Tensor(data.reshape(Shape(std::span<const int64_t>(dims)))));
    }
  } catch (const json::exception& e) {
    throw FormatError(where + " is malformed: " + e.what());
  }
  for (const io::TensorInfo& t : f.tensors())
    if (!names.count(t.name))
      throw FormatError(where + " does not list the file's tensor '" + t.name + "'");
  return dict;
}

// Restores ag::default_generator() on the way out: building modules draws
// their initial weights, which loading then overwrites.
struct GeneratorRestore {
  Generator saved = default_generator();
  ~GeneratorRestore() { default_generator() = saved; }
};

}  // namespace

io::WriteStats save(const nn::Module& module, const std::string& path) {
  const json architecture = architecture_json(module);
  return write_file(module.state_dict(), path, kStateDictKind, &architecture);
}

io::WriteStats save(const nn::StateDict& dict, const std::string& path, const std::string& kind) {
  if (kind.empty()) throw ValueError("ag::save: the file kind is empty; use \"state_dict\", \"optimizer_state\" or \"scheduler_state\"");
  if (kind == "model" || kind == "weights" || kind == "checkpoint")
    throw ValueError("ag::save: the file kind '" + kind + "' belongs to io::save_model / save_weights / "
                     "save_checkpoint, whose layout differs; use \"state_dict\", \"optimizer_state\" or "
                     "\"scheduler_state\"");
  return write_file(dict, path, kind, nullptr);
}

nn::StateDict load_state_dict(const std::string& path, const std::string& kind) {
  const io::GGUFFile f = open_checked(path, kind);
  return read_state_dict(f);
}

std::shared_ptr<nn::Module> load(const std::string& path, const ModuleBuilder& factory) {
  const io::GGUFFile f = open_checked(path, kStateDictKind);
  const nn::StateDict dict = read_state_dict(f);
  std::shared_ptr<nn::Module> module;
  {
    GeneratorRestore restore;
    if (factory) {
      module = factory();
      if (!module) throw ValueError("ag::load(" + path + "): the factory returned null");
    } else {
      if (!f.find(kModuleConfigKey))
        throw ValueError("ag::load(" + path + "): the file holds a state dict without an architecture (saved "
                         "from a StateDict); pass a factory that builds the module");
      const json architecture = parse_json(f, kModuleConfigKey);
      try {
        module = rebuild(architecture, "the root module");
      } catch (const ValueError& e) {
        // module_from_config's message says to register the type or pass a factory.
        throw ValueError("ag::load(" + path + "): cannot rebuild the saved module: " + e.what());
      } catch (const json::exception& e) {
        throw FormatError(f.path() + ": " + kModuleConfigKey + " is malformed: " + e.what());
      }
    }
  }
  try {
    module->load_state_dict(dict, true);
  } catch (const ValueError& e) {
    throw ValueError("ag::load(" + path + "): the file's state dict does not fit the module" +
                     (factory ? std::string(" the factory built") : std::string(" rebuilt from the file")) + ": " +
                     e.what());
  } catch (const TypeError& e) {
    throw TypeError("ag::load(" + path + "): " + e.what());
  }
  module->eval();
  return module;
}

std::shared_ptr<nn::Module> load(const std::string& path, Device device, const ModuleBuilder& factory) {
  (void)backend(device);  // an unavailable device is refused before the file is read
  std::shared_ptr<nn::Module> module = load(path, factory);
  module->to(device);
  return module;
}

nn::StateDict load_state_dict(const std::string& path, Device device, const std::string& kind) {
  (void)backend(device);
  nn::StateDict dict;
  for (const auto& [name, t] : load_state_dict(path, kind)) dict.insert(name, t.to(device));
  return dict;
}

}  // namespace tensorgrad::ag
