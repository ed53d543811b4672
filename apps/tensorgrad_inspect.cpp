// tensorgrad-inspect: prints what a GGUF or ONNX file holds. For GGUF: its version and
// alignment, which tensorgrad wrote it and when (the provenance keys of
// ag::save, when the file has them), every metadata key with its type and
// value, and a table of its
// tensors (name, type, shape in tensorgrad's order, bytes; a name longer
// than GGUF's 63 bytes in full, with the short name the file stores it
// under on the line below). Long strings and
// arrays are abbreviated unless --full is given. For ONNX (a file that does
// not start with GGUF's magic): its producer, opset, inputs and outputs with
// their types and dimensions, how many nodes of each op type, and a table of
// its initializers. A missing or malformed file
// prints "tensorgrad-inspect: <reason>" to stderr and exits with status 1.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <string>

#include "tensorgrad/core/error.h"
#include "tensorgrad/io/gguf.h"
#include "tensorgrad/io/onnx.h"

namespace tg = tensorgrad;
namespace io = tensorgrad::io;

namespace {

constexpr size_t kShortArray = 8;     // array elements shown without --full
constexpr size_t kShortString = 80;   // string bytes shown without --full

// The first n bytes of s with control and non-ASCII bytes, quotes and
// backslashes escaped, so that a file's bytes cannot garble the terminal.
std::string escape(const std::string& s, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c >= 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  return out;
}

// A string in double quotes, escaped, cut to kShortString bytes unless `full`.
std::string quote(const std::string& s, bool full) {
  const size_t n = full ? s.size() : std::min(s.size(), kShortString);
  std::string out = "\"" + escape(s, n) + "\"";
  if (n < s.size()) out += "... (" + std::to_string(s.size()) + " bytes)";
  return out;
}

// Shortest-enough decimal: 9 digits recover a float32, 17 a float64.
std::string format_double(double v, int digits) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

// Element i of a value whose elements have type `t`.
std::string element(const io::MetadataValue& v, io::ValueType t, size_t i, bool full) {
  switch (t) {
    case io::ValueType::UInt8:
    case io::ValueType::UInt16:
    case io::ValueType::UInt32:
    case io::ValueType::UInt64: return std::to_string(uint64_t(v.ints[i]));
    case io::ValueType::Int8:
    case io::ValueType::Int16:
    case io::ValueType::Int32:
    case io::ValueType::Int64: return std::to_string(v.ints[i]);
    case io::ValueType::Float32: return format_double(v.floats[i], 9);
    case io::ValueType::Float64: return format_double(v.floats[i], 17);
    case io::ValueType::Bool: return v.ints[i] ? "true" : "false";
    case io::ValueType::String: return quote(v.strings[i], full);
    case io::ValueType::Array: return "(array)";
  }
  return "?";
}

size_t count_of(const io::MetadataValue& v) {
  const io::ValueType t = v.type == io::ValueType::Array ? v.element_type : v.type;
  if (t == io::ValueType::String) return v.strings.size();
  if (t == io::ValueType::Float32 || t == io::ValueType::Float64) return v.floats.size();
  return v.ints.size();
}

std::string type_of(const io::MetadataValue& v) {
  if (v.type != io::ValueType::Array) return io::value_type_name(v.type);
  return std::string("ARRAY[") + io::value_type_name(v.element_type) + "]";
}

std::string value_of(const io::MetadataValue& v, bool full) {
  if (v.type != io::ValueType::Array) return element(v, v.type, 0, full);
  const size_t n = count_of(v);
  const size_t shown = full ? n : std::min(n, kShortArray);
  std::string out = "[";
  for (size_t i = 0; i < shown; ++i) out += (i ? ", " : "") + element(v, v.element_type, i, full);
  if (shown < n) out += ", ... (" + std::to_string(n) + " total)";
  return out + "]";
}

void inspect(const std::string& path, bool full) {
  const io::GGUFFile f = io::GGUFFile::open(path);
  std::printf("file:      %s\n", path.c_str());
  std::printf("version:   %u\n", f.version());
  std::printf("alignment: %u\n", f.alignment());
  // The provenance keys of ag::save (ag/save.h); files of other writers, and
  // older ones, have none.
  auto string_key = [&](const char* key) -> std::string {
    const io::MetadataValue* v = f.find(key);
    if (!v || v->type != io::ValueType::String) return "";
    const std::string& s = v->strings.at(0);
    return escape(s, full ? s.size() : std::min(s.size(), kShortString));
  };
  if (const std::string v = string_key("tensorgrad.version"); !v.empty())
    std::printf("software:  tensorgrad %s\n", v.c_str());
  if (const std::string v = string_key("tensorgrad.created"); !v.empty()) std::printf("created:   %s\n", v.c_str());

  std::printf("\nmetadata (%zu keys):\n", f.metadata().size());
  size_t key_width = 3, type_width = 4;
  for (const io::MetadataEntry& e : f.metadata()) {
    key_width = std::max(key_width, e.key.size());
    type_width = std::max(type_width, type_of(e.value).size());
  }
  if (!full) key_width = std::min<size_t>(key_width, 48);
  for (const io::MetadataEntry& e : f.metadata())
    std::printf("  %-*s  %-*s  %s\n", int(key_width), e.key.c_str(), int(type_width), type_of(e.value).c_str(),
                value_of(e.value, full).c_str());

  std::printf("\ntensors (%zu):\n", f.tensors().size());
  size_t name_width = 4, shape_width = 5, renamed = 0;
  uint64_t total = 0;
  for (const io::TensorInfo& t : f.tensors()) {
    name_width = std::max(name_width, escape(t.name, t.name.size()).size());
    shape_width = std::max(shape_width, t.shape.str().size());
    total += t.nbytes;
    renamed += t.stored_name != t.name;
  }
  if (!full) name_width = std::min<size_t>(name_width, 64);
  std::printf("  %-*s  %-4s  %-*s  %12s\n", int(name_width), "name", "type", int(shape_width), "shape", "bytes");
  for (const io::TensorInfo& t : f.tensors()) {
    std::printf("  %-*s  %-4s  %-*s  %12" PRIu64 "\n", int(name_width), escape(t.name, t.name.size()).c_str(),
                io::tensor_type_name(t.type), int(shape_width), t.shape.str().c_str(), t.nbytes);
    // A name past GGUF's 63 bytes: what ggml and other readers see instead.
    if (t.stored_name != t.name) std::printf("    stored as %s\n", quote(t.stored_name, true).c_str());
  }
  std::printf("  %" PRIu64 " bytes of tensor data in all\n", total);
  if (renamed > 0)
    std::printf("  %zu tensor name%s longer than GGUF's 63 bytes: the file stores %s under the short name%s "
                "shown, and lists both in %s and %s\n",
                renamed, renamed == 1 ? " is" : "s are", renamed == 1 ? "it" : "them", renamed == 1 ? "" : "s",
                io::kLongNamesStoredKey, io::kLongNamesFullKey);
}

std::string dims_of(const std::vector<std::string>& d) {
  std::string out = "{";
  for (size_t i = 0; i < d.size(); ++i) out += (i ? ", " : "") + d[i];
  return out + "}";
}

void inspect_onnx(const std::string& path, bool full) {
  io::OnnxInfo f;
  try {
    f = io::read_onnx_info(path);
  } catch (const tg::FormatError& e) {
    throw tg::FormatError("'" + path + "' is not a GGUF file (no GGUF magic), and reading it as ONNX: " + e.what());
  }
  auto text = [&](const std::string& s) { return escape(s, full ? s.size() : std::min(s.size(), kShortString)); };
  std::printf("file:      %s\n", path.c_str());
  std::printf("format:    ONNX, IR version %" PRId64 ", opset %" PRId64 "\n", f.ir_version, f.opset);
  std::printf("producer:  %s %s\n", text(f.producer_name).c_str(), text(f.producer_version).c_str());
  std::printf("graph:     %s\n", text(f.graph_name).c_str());
  for (const auto* group : {&f.inputs, &f.outputs}) {
    std::printf("\n%s (%zu):\n", group == &f.inputs ? "inputs" : "outputs", group->size());
    for (const io::OnnxValueInfo& v : *group)
      std::printf("  %s  %s  %s\n", text(v.name).c_str(), v.type.c_str(), dims_of(v.dims).c_str());
  }
  int nodes = 0;
  for (const auto& [op, n] : f.op_counts) nodes += n;
  std::printf("\nnodes (%d):\n", nodes);
  for (const auto& [op, n] : f.op_counts) std::printf("  %-24s %d\n", text(op).c_str(), n);
  std::printf("\ninitializers (%zu):\n", f.initializers.size());
  size_t name_width = 4;
  int64_t total = 0;
  for (const io::OnnxTensorInfo& t : f.initializers) {
    name_width = std::max(name_width, text(t.name).size());
    total += t.bytes;
  }
  if (!full) name_width = std::min<size_t>(name_width, 48);
  std::printf("  %-*s  %-7s  %-20s  %12s\n", int(name_width), "name", "type", "shape", "bytes");
  for (const io::OnnxTensorInfo& t : f.initializers) {
    std::vector<std::string> d;
    for (int64_t x : t.dims) d.push_back(std::to_string(x));
    std::printf("  %-*s  %-7s  %-20s  %12" PRId64 "\n", int(name_width), text(t.name).c_str(), t.type.c_str(),
                dims_of(d).c_str(), t.bytes);
  }
  std::printf("  %" PRId64 " bytes of initializer data in all\n", total);
}

// Whether the file starts with GGUF's magic (else it is read as ONNX).
bool is_gguf(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return true;  // the GGUF reader says why it cannot be opened
  char magic[4] = {};
  const size_t n = std::fread(magic, 1, 4, f);
  std::fclose(f);
  return n == 4 && std::string(magic, 4) == "GGUF";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Print the metadata and tensor table of a GGUF file, or the summary of an ONNX file"};
  std::string path;
  bool full = false;
  app.add_option("file", path, "the GGUF or ONNX file")->required();
  app.add_flag("--full", full, "print every array element and whole strings");
  CLI11_PARSE(app, argc, argv);
  try {
    if (is_gguf(path)) inspect(path, full);
    else inspect_onnx(path, full);
  } catch (const tg::Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "tensorgrad-inspect: %s\n", e.what());
    return 1;
  }
  return 0;
}
