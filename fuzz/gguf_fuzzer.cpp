// libFuzzer target for tensorgrad's GGUF reader (scripts/fuzz.sh builds and
// runs it; fuzz/README.md). Each input is parsed as a whole file; when it
// parses, every tensor is read and every metadata key is asked for through
// every typed getter. A tensorgrad::Error is the reader's correct answer to
// a malformed file; anything else (another exception, a crash, an
// AddressSanitizer or UndefinedBehaviorSanitizer report, a trap on a broken
// invariant below) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>

#include "tensorgrad/core/error.h"
#include "tensorgrad/io/gguf.h"

namespace {

using namespace tensorgrad;
using namespace tensorgrad::io;

// What the reads add up to, stored so the compiler keeps them.
volatile uint64_t g_sink = 0;

[[noreturn]] void broken(const char* what, const std::string& detail) {
  std::fprintf(stderr, "gguf_fuzzer: broken invariant: %s (%s)\n", what, detail.c_str());
  __builtin_trap();
}

/// Runs `f`; a tensorgrad::Error is an accepted answer, anything else escapes.
template <class F>
bool tolerant(F&& f) {
  try {
    f();
    return true;
  } catch (const Error&) {
    return false;
  }
}

void touch_metadata(const GGUFFile& file) {
  uint64_t sink = 0;
  for (const MetadataEntry& entry : file.metadata()) {
    const std::string& key = entry.key;
    if (file.find(key) == nullptr) broken("find() misses a key metadata() lists", key);
    // Every getter on every key: the matching one must succeed (checked
    // below for the unambiguous cases), the others throw a typed error.
    const bool s = tolerant([&] { sink += file.get_string(key).size(); });
    tolerant([&] { sink += file.get_u32(key); });
    const bool u64 = tolerant([&] { sink += file.get_u64(key); });
    tolerant([&] { sink += uint64_t(file.get_i64(key)); });
    tolerant([&] { sink += uint64_t(file.get_f64(key) != 0.0); });
    tolerant([&] { sink += file.get_bool(key); });
    tolerant([&] { sink += file.get_u64_array(key).size(); });
    tolerant([&] { sink += file.get_i64_array(key).size(); });
    tolerant([&] { sink += file.get_f64_array(key).size(); });
    const bool sa = tolerant([&] { sink += file.get_string_array(key).size(); });
    const MetadataValue& v = entry.value;
    if (v.type == ValueType::String && !s) broken("get_string refuses a STRING key", key);
    if (v.type == ValueType::UInt64 && !u64) broken("get_u64 refuses a UINT64 key", key);
    if (v.type == ValueType::Array && v.element_type == ValueType::String && !sa)
      broken("get_string_array refuses an array of strings", key);
  }
  tolerant([&] { sink += file.get_string("tensorgrad.no-such-key").size(); });
  g_sink = g_sink + sink;
}

void touch_tensors(const GGUFFile& file) {
  uint64_t sink = 0;
  for (const TensorInfo& info : file.tensors()) {
    if (file.find_tensor(info.name) == nullptr) broken("find_tensor() misses a tensor tensors() lists", info.name);
    tolerant([&] {
      const std::span<const uint8_t> bytes = file.data(info.name);
      if (bytes.size() != info.nbytes) broken("data() size differs from nbytes", info.name);
      for (uint8_t b : bytes) sink += b;
    });
    tolerant([&] {
      const Tensor t = file.read(info.name);
      if (t.shape() != info.shape) broken("read() shape differs from the table's", info.name);
      // ggml_row_size: rows of the innermost dimension (the last of tensorgrad's shape) in whole blocks.
      const int64_t inner = info.shape[info.shape.rank() - 1];
      if (uint64_t(t.numel() / inner) * tensor_type_row_bytes(info.type, inner) != info.nbytes)
        broken("rows times row bytes differs from nbytes", info.name);
      const size_t n = t.nbytes();
      const auto* p = static_cast<const uint8_t*>(t.raw());
      for (size_t i = 0; i < n; ++i) sink += p[i];
      Tensor again = Tensor::zeros(t.shape(), t.dtype());
      file.read_into(info.name, again);
    });
  }
  tolerant([&] { sink += uint64_t(file.read("tensorgrad/no-such-tensor").numel()); });
  g_sink = g_sink + sink;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const GGUFFile file = GGUFFile::parse(std::span<const uint8_t>(data, size));
    g_sink = g_sink + file.version() + file.alignment() + file.path().size();
    touch_metadata(file);
    touch_tensors(file);
  } catch (const Error&) {
    // A typed refusal of a malformed file: the expected outcome.
  }
  return 0;
}
