// GGUF v3 reader and writer. See include/tensorgrad/io/gguf.h for the
// contract and ggml's docs/gguf.md for the format:
//
//   header       "GGUF", uint32 version, uint64 tensor_count, uint64 kv_count
//   metadata     kv_count × (string key, uint32 value type, value)
//   tensor infos tensor_count × (string name, uint32 n_dims, uint64 ne[n_dims],
//                                uint32 ggml type, uint64 offset)
//   padding      to general.alignment (default 32)
//   data         each tensor at its offset from here, padded to the alignment
//
// A string is a uint64 byte count and the bytes; an array a uint32 element
// type, a uint64 count and the elements. Everything is little-endian.
#include "tensorgrad/io/gguf.h"

#include <fcntl.h>
#include <fp16.h>
#include <zlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "io/atomic_file.h"
#include "tensorgrad/core/error.h"

namespace tensorgrad::io {

static_assert(std::endian::native == std::endian::little,
              "the GGUF reader and writer copy little-endian values as they are");

namespace {

constexpr uint8_t kMagic[4] = {0x47, 0x47, 0x55, 0x46};  // "GGUF"
constexpr uint32_t kVersion = 3;
constexpr uint32_t kDefaultAlignment = 32;
constexpr const char* kAlignmentKey = "general.alignment";
constexpr size_t kMaxNameBytes = 63;     // ggml's GGML_MAX_NAME (64) counts the NUL
// A long name's stored form: up to kStoredPrefixBytes of it, '~', 8 hex digits.
constexpr size_t kStoredPrefixBytes = kMaxNameBytes - 1 - 8;
constexpr size_t kMaxKeyBytes = 65535;
constexpr uint32_t kMaxDims = 4;
constexpr uint64_t kMaxElements = uint64_t(1) << 40;
// The fewest bytes one metadata pair or one tensor info can take, to bound
// the counts a header declares before anything is reserved for them.
constexpr uint64_t kMinPairBytes = 8 + 4 + 1;              // empty key, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // empty name, n_dims, one ne, type, offset
constexpr size_t kConvertChunk = size_t(1) << 18;          // elements per F16/BF16 conversion chunk

std::string quoted(const std::string& s) { return "'" + s + "'"; }

// A name or key in single quotes with its control and non-ASCII bytes as
// \xNN, for messages about a name whose bytes are the problem: a NUL would
// cut the message where a terminal or a C string reads it.
std::string escaped(const std::string& s) {
  std::string out = "'";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c >= 0x7F || c == '\\') {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "'";
}

// Where the first NUL byte of `s` is, or npos. ggml reads GGUF names and keys
// as C strings (gguf_get_key, gguf_get_tensor_name, ggml_set_name), so a NUL
// inside one makes ggml see a shorter, different name than the file holds.
size_t nul_position(const std::string& s) { return s.find('\0'); }

// Whether ggml and every GGUF reader take `name` as a tensor name as it is:
// 1 to 63 bytes (GGML_MAX_NAME counts the NUL), none of them NUL (ggml reads
// names as C strings).
bool valid_gguf_name(const std::string& name) {
  return !name.empty() && name.size() <= kMaxNameBytes && nul_position(name) == std::string::npos;
}

// The name a tensor named `name` (not valid_gguf_name) is stored under, on
// try `attempt` (0 first; a later one when the earlier is taken): its first
// bytes up to any NUL, cut back to a UTF-8 character's start so the stored
// name is valid UTF-8 (GGUF's strings are), '~', and the CRC-32 (zlib's,
// seeded with `attempt`) of the whole name in 8 hex digits.
std::string stored_name_of(const std::string& name, uint32_t attempt) {
  size_t keep = std::min({name.size(), kStoredPrefixBytes, nul_position(name)});
  while (keep > 0 && (static_cast<unsigned char>(name[keep]) & 0xC0) == 0x80) --keep;  // name[keep] continues a character
  const uLong crc = ::crc32_z(attempt, reinterpret_cast<const Bytef*>(name.data()), name.size());
  char hex[16];
  std::snprintf(hex, sizeof hex, "~%08lx", static_cast<unsigned long>(crc & 0xFFFFFFFFu));
  return name.substr(0, keep) + hex;
}

// ggml's names for its type ids, to name a type tensorgrad does not read.
const char* ggml_type_name(uint32_t id) {
  static const char* const names[] = {
      "F32",     "F16",    "Q4_0",    "Q4_1",  "Q4_2 (removed)", "Q4_3 (removed)", "Q5_0",
      "Q5_1",    "Q8_0",   "Q8_1",    "Q2_K",  "Q3_K",           "Q4_K",           "Q5_K",
      "Q6_K",    "Q8_K",   "IQ2_XXS", "IQ2_XS", "IQ3_XXS",       "IQ1_S",          "IQ4_NL",
      "IQ3_S",   "IQ2_S",  "IQ4_XS",  "I8",    "I16",            "I32",            "I64",
      "F64",     "IQ1_M",  "BF16",    "Q4_0_4_4 (removed)", "Q4_0_4_8 (removed)",
      "Q4_0_8_8 (removed)", "TQ1_0", "TQ2_0", "IQ4_NL_4_4 (removed)", "IQ4_NL_4_8 (removed)",
      "IQ4_NL_8_8 (removed)", "MXFP4"};
  return id < std::size(names) ? names[id] : "not a ggml type";
}

bool tensor_type_known(uint32_t id) {
  switch (TensorType(id)) {
    case TensorType::F32:
    case TensorType::F16:
    case TensorType::Q4_0:
    case TensorType::Q8_0:
    case TensorType::Q4_K:
    case TensorType::Q6_K:
    case TensorType::I32:
    case TensorType::I64:
    case TensorType::BF16: return true;
  }
  return false;
}

// The types tensorgrad reads and writes, for messages.
constexpr const char* kTypesRead = "F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, I32, I64";

bool value_type_known(uint32_t id) { return id <= uint32_t(ValueType::Float64); }

// Bytes of one element on disk; a string's is its smallest (the length).
uint64_t value_min_size(ValueType t) {
  switch (t) {
    case ValueType::UInt8:
    case ValueType::Int8:
    case ValueType::Bool: return 1;
    case ValueType::UInt16:
    case ValueType::Int16: return 2;
    case ValueType::UInt32:
    case ValueType::Int32:
    case ValueType::Float32: return 4;
    case ValueType::UInt64:
    case ValueType::Int64:
    case ValueType::Float64:
    case ValueType::String: return 8;
    case ValueType::Array: return 4 + 8;
  }
  return 1;
}

bool is_unsigned(ValueType t) {
  return t == ValueType::UInt8 || t == ValueType::UInt16 || t == ValueType::UInt32 || t == ValueType::UInt64;
}
bool is_signed(ValueType t) {
  return t == ValueType::Int8 || t == ValueType::Int16 || t == ValueType::Int32 || t == ValueType::Int64;
}
bool is_float(ValueType t) { return t == ValueType::Float32 || t == ValueType::Float64; }

// "UINT32", or "ARRAY of UINT64".
std::string describe_type(const MetadataValue& v) {
  if (v.type == ValueType::Array) return std::string("ARRAY of ") + value_type_name(v.element_type);
  return value_type_name(v.type);
}

// Elements in a value (1 for a scalar).
size_t element_count(const MetadataValue& v) {
  const ValueType t = v.type == ValueType::Array ? v.element_type : v.type;
  if (t == ValueType::String) return v.strings.size();
  if (is_float(t)) return v.floats.size();
  return v.ints.size();
}

uint64_t align_up(uint64_t x, uint64_t alignment) { return (x + alignment - 1) / alignment * alignment; }

bool is_power_of_two(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

DType dtype_for(TensorType t) {
  switch (t) {
    case TensorType::F32:
    case TensorType::F16:
    case TensorType::BF16:
    case TensorType::Q4_0:
    case TensorType::Q8_0:
    case TensorType::Q4_K:
    case TensorType::Q6_K: return DType::Float32;
    case TensorType::I32: return DType::Int32;
    case TensorType::I64: return DType::Int64;
  }
  throw std::logic_error("dtype_for: not a TensorType");
}

std::string ne_str(const std::vector<uint64_t>& ne) {
  std::string s = "{";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "}";
}

// ---------------------------------------------------------------- writing

// Appends little-endian values to a byte vector.
struct ByteWriter {
  std::vector<uint8_t>& out;
  void put(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  }
  template <class T> void num(T v) { put(&v, sizeof v); }
  void str(const std::string& s) {
    num<uint64_t>(s.size());
    put(s.data(), s.size());
  }
};

void put_element(ByteWriter& w, ValueType t, const MetadataValue& v, size_t i) {
  switch (t) {
    case ValueType::UInt8: w.num(uint8_t(v.ints[i])); return;
    case ValueType::Int8: w.num(int8_t(v.ints[i])); return;
    case ValueType::UInt16: w.num(uint16_t(v.ints[i])); return;
    case ValueType::Int16: w.num(int16_t(v.ints[i])); return;
    case ValueType::UInt32: w.num(uint32_t(v.ints[i])); return;
    case ValueType::Int32: w.num(int32_t(v.ints[i])); return;
    case ValueType::UInt64: w.num(uint64_t(v.ints[i])); return;
    case ValueType::Int64: w.num(int64_t(v.ints[i])); return;
    case ValueType::Float32: w.num(float(v.floats[i])); return;
    case ValueType::Float64: w.num(double(v.floats[i])); return;
    case ValueType::Bool: w.num(uint8_t(v.ints[i] != 0 ? 1 : 0)); return;
    case ValueType::String: w.str(v.strings[i]); return;
    case ValueType::Array: break;
  }
  throw std::logic_error("GGUF writer: an array element cannot be an array");
}

void put_value(ByteWriter& w, const MetadataValue& v) {
  w.num(uint32_t(v.type));
  if (v.type == ValueType::Array) {
    w.num(uint32_t(v.element_type));
    const size_t n = element_count(v);
    w.num(uint64_t(n));
    for (size_t i = 0; i < n; ++i) put_element(w, v.element_type, v, i);
  } else {
    put_element(w, v.type, v, 0);
  }
}

// ---------------------------------------------------------------- reading

// The one reader of file bytes: every read is checked against what remains,
// and a short read is a FormatError naming the file, the byte offset and
// `context` (the item being read, set by the parser).
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size, const std::string& path) : data_(data), size_(size), path_(path) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }
  size_t size() const { return size_; }
  std::string context;

  void need(uint64_t n, const char* what) const {
    if (n <= remaining()) return;
    throw FormatError("GGUF file " + quoted(path_) + " is truncated: " + context + (context.empty() ? "" : ": ") +
                      what + " at byte " + std::to_string(pos_) + " needs " + std::to_string(n) +
                      " bytes, but only " + std::to_string(remaining()) + " remain before the end of the file (file size " +
                      std::to_string(size_) + " bytes); the file is incomplete or corrupt");
  }
  template <class T> T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  std::string string(const char* what) {
    const uint64_t len = read<uint64_t>(what);
    need(len, what);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), size_t(len));
    pos_ += size_t(len);
    return s;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& path_;
};

}  // namespace

// ---------------------------------------------------------------- names and conversions

const char* value_type_name(ValueType type) {
  switch (type) {
    case ValueType::UInt8: return "UINT8";
    case ValueType::Int8: return "INT8";
    case ValueType::UInt16: return "UINT16";
    case ValueType::Int16: return "INT16";
    case ValueType::UInt32: return "UINT32";
    case ValueType::Int32: return "INT32";
    case ValueType::Float32: return "FLOAT32";
    case ValueType::Bool: return "BOOL";
    case ValueType::String: return "STRING";
    case ValueType::Array: return "ARRAY";
    case ValueType::UInt64: return "UINT64";
    case ValueType::Int64: return "INT64";
    case ValueType::Float64: return "FLOAT64";
  }
  return "?";
}

uint16_t float_to_f16(float value) { return fp16_ieee_from_fp32_value(value); }
float f16_to_float(uint16_t value) { return fp16_ieee_to_fp32_value(value); }

uint16_t float_to_bf16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  // A NaN keeps its sign and top payload bits and is made quiet, so that
  // truncation cannot turn it into an infinity.
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((bits >> 16) | 0x0040u);
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);  // to nearest, ties to even
  return uint16_t((bits + rounding) >> 16);
}

float bf16_to_float(uint16_t value) { return std::bit_cast<float>(uint32_t(value) << 16); }

// ---------------------------------------------------------------- GGUFWriter

struct GGUFWriter::Impl {
  struct Entry {
    std::string name;
    Tensor tensor;
    TensorType type;
    std::vector<uint64_t> ne;  // GGUF order, innermost first
    uint64_t offset;           // from the data section's start
    uint64_t nbytes;
  };
  uint32_t alignment = kDefaultAlignment;
  std::vector<MetadataEntry> metadata;
  std::unordered_set<std::string> keys;
  std::vector<Entry> tensors;
  std::unordered_set<std::string> names;
  uint64_t data_size = 0;  // bytes of the data section so far, padded

  void add(const std::string& key, MetadataValue value) {
    const char* fix = "; give each metadata key once, at most 65535 bytes long";
    if (key.empty()) throw ValueError(std::string("GGUFWriter: a metadata key is empty") + fix);
    if (key.size() > kMaxKeyBytes)
      throw ValueError("GGUFWriter: metadata key '" + key.substr(0, 40) + "...' is " + std::to_string(key.size()) +
                       " bytes long" + fix);
    if (const size_t nul = nul_position(key); nul != std::string::npos)
      throw ValueError("GGUFWriter: metadata key " + escaped(key) + " has a NUL byte at position " +
                       std::to_string(nul) + "; ggml reads keys as C strings and GGUF readers refuse it, so give a "
                       "key without NUL bytes");
    if (key == kAlignmentKey)
      throw ValueError(
          "GGUFWriter: metadata key 'general.alignment' is written by the writer itself; pass the alignment to "
          "the GGUFWriter constructor instead");
    if (key == kLongNamesStoredKey || key == kLongNamesFullKey)
      throw ValueError("GGUFWriter: metadata key " + quoted(key) +
                       " is written by the writer itself: it lists the tensors whose names are longer than GGUF's "
                       "63 bytes; give your key another name");
    if (!keys.insert(key).second) throw ValueError("GGUFWriter: metadata key " + quoted(key) + " is given twice" + fix);
    metadata.push_back({key, std::move(value)});
  }

  // Each tensor's name in the file (add_tensor's rule for names past 63
  // bytes, empty or with a NUL), in `tensors`' order. Chosen over all the names at once, so that
  // no stored name is another tensor's name whatever order they came in.
  std::vector<std::string> stored_names() const {
    std::vector<std::string> out;
    out.reserve(tensors.size());
    std::unordered_set<std::string> taken;
    for (const Entry& t : tensors)
      if (valid_gguf_name(t.name)) taken.insert(t.name);
    for (const Entry& t : tensors) {
      if (valid_gguf_name(t.name)) {
        out.push_back(t.name);
        continue;
      }
      std::string stored;
      for (uint32_t attempt = 0;; ++attempt) {
        stored = stored_name_of(t.name, attempt);
        if (taken.insert(stored).second) break;
      }
      out.push_back(std::move(stored));
    }
    return out;
  }

  // Header, metadata, tensor infos and the padding up to the data section.
  std::vector<uint8_t> header() const {
    const std::vector<std::string> stored = stored_names();
    MetadataValue long_stored, long_full;
    long_stored.type = long_full.type = ValueType::Array;
    long_stored.element_type = long_full.element_type = ValueType::String;
    for (size_t i = 0; i < tensors.size(); ++i)
      if (stored[i] != tensors[i].name) {
        long_stored.strings.push_back(stored[i]);
        long_full.strings.push_back(tensors[i].name);
      }
    const bool write_long_names = !long_full.strings.empty();
    std::vector<uint8_t> out;
    ByteWriter w{out};
    w.put(kMagic, 4);
    w.num<uint32_t>(kVersion);
    w.num<uint64_t>(tensors.size());
    const bool write_alignment = alignment != kDefaultAlignment;
    w.num<uint64_t>(metadata.size() + (write_alignment ? 1 : 0) + (write_long_names ? 2 : 0));
    if (write_alignment) {
      w.str(kAlignmentKey);
      w.num(uint32_t(ValueType::UInt32));
      w.num<uint32_t>(alignment);
    }
    for (const MetadataEntry& e : metadata) {
      w.str(e.key);
      put_value(w, e.value);
    }
    if (write_long_names) {
      w.str(kLongNamesStoredKey);
      put_value(w, long_stored);
      w.str(kLongNamesFullKey);
      put_value(w, long_full);
    }
    for (size_t i = 0; i < tensors.size(); ++i) {
      const Entry& t = tensors[i];
      w.str(stored[i]);
      w.num<uint32_t>(uint32_t(t.ne.size()));
      for (uint64_t d : t.ne) w.num<uint64_t>(d);
      w.num<uint32_t>(uint32_t(t.type));
      w.num<uint64_t>(t.offset);
    }
    out.resize(size_t(align_up(out.size(), alignment)), 0);
    return out;
  }

  // Streams the data section to `sink(const void*, size_t)`: each tensor from
  // its own memory (converted in chunks for F16 and BF16), then padding.
  template <class Sink> void write_data(Sink&& sink) const {
    static const uint8_t zeros[4096] = {};
    uint64_t written = 0;
    for (const Entry& t : tensors) {
      switch (t.type) {
        case TensorType::F32:
        case TensorType::I32:
        case TensorType::I64: sink(t.tensor.raw(), size_t(t.nbytes)); break;
        case TensorType::F16:
        case TensorType::BF16:
        case TensorType::Q4_0:
        case TensorType::Q8_0:
        case TensorType::Q4_K:
        case TensorType::Q6_K: {
          // Converted in chunks of whole blocks (kConvertChunk is a multiple
          // of every block size, and numel one of the tensor's).
          const float* src = t.tensor.data<float>();
          const size_t n = size_t(t.tensor.numel());
          const size_t step = std::min(n, kConvertChunk);
          std::vector<uint8_t> chunk(size_t(tensor_type_row_bytes(t.type, int64_t(step))));
          for (size_t i = 0; i < n; i += step) {
            const size_t m = std::min(step, n - i);
            const size_t bytes = size_t(tensor_type_row_bytes(t.type, int64_t(m)));
            try {
              quantize_row(t.type, {src + i, m}, {chunk.data(), bytes});
            } catch (const ValueError& e) {  // a value changed since add_tensor, or past f16's range
              throw ValueError("GGUFWriter: tensor " + escaped(t.name) + " of shape " + t.tensor.shape().str() +
                               " (elements " + std::to_string(i) + " on): " + e.what());
            }
            sink(chunk.data(), bytes);
          }
          break;
        }
      }
      written = t.offset + t.nbytes;
      for (uint64_t pad = align_up(written, alignment) - written; pad > 0;) {
        const size_t n = size_t(std::min<uint64_t>(pad, sizeof zeros));
        sink(zeros, n);
        pad -= n;
      }
    }
  }
};

GGUFWriter::GGUFWriter(uint32_t alignment) : impl_(std::make_shared<Impl>()) {
  if (alignment < 8 || !is_power_of_two(alignment))
    throw ValueError("GGUFWriter: alignment must be a power of two of at least 8 (GGUF's default is 32); got " +
                     std::to_string(alignment));
  impl_->alignment = alignment;
}

namespace {
MetadataValue scalar_int(ValueType t, int64_t v) {
  MetadataValue m;
  m.type = t;
  m.ints = {v};
  return m;
}
MetadataValue scalar_float(ValueType t, double v) {
  MetadataValue m;
  m.type = t;
  m.floats = {v};
  return m;
}
}  // namespace

void GGUFWriter::set_string(const std::string& key, const std::string& value) {
  MetadataValue m;
  m.type = ValueType::String;
  m.strings = {value};
  impl_->add(key, std::move(m));
}
void GGUFWriter::set_bool(const std::string& key, bool value) {
  impl_->add(key, scalar_int(ValueType::Bool, value ? 1 : 0));
}
void GGUFWriter::set_u32(const std::string& key, uint32_t value) {
  impl_->add(key, scalar_int(ValueType::UInt32, int64_t(value)));
}
void GGUFWriter::set_i32(const std::string& key, int32_t value) { impl_->add(key, scalar_int(ValueType::Int32, value)); }
void GGUFWriter::set_u64(const std::string& key, uint64_t value) {
  impl_->add(key, scalar_int(ValueType::UInt64, int64_t(value)));
}
void GGUFWriter::set_i64(const std::string& key, int64_t value) { impl_->add(key, scalar_int(ValueType::Int64, value)); }
void GGUFWriter::set_f32(const std::string& key, float value) {
  impl_->add(key, scalar_float(ValueType::Float32, value));
}
void GGUFWriter::set_f64(const std::string& key, double value) {
  impl_->add(key, scalar_float(ValueType::Float64, value));
}
void GGUFWriter::set_u64_array(const std::string& key, std::span<const uint64_t> values) {
  MetadataValue m;
  m.type = ValueType::Array;
  m.element_type = ValueType::UInt64;
  m.ints.reserve(values.size());
  for (uint64_t v : values) m.ints.push_back(int64_t(v));
  impl_->add(key, std::move(m));
}
void GGUFWriter::set_i64_array(const std::string& key, std::span<const int64_t> values) {
  MetadataValue m;
  m.type = ValueType::Array;
  m.element_type = ValueType::Int64;
  m.ints.assign(values.begin(), values.end());
  impl_->add(key, std::move(m));
}
void GGUFWriter::set_i32_array(const std::string& key, std::span<const int32_t> values) {
  MetadataValue m;
  m.type = ValueType::Array;
  m.element_type = ValueType::Int32;
  m.ints.assign(values.begin(), values.end());
  impl_->add(key, std::move(m));
}
void GGUFWriter::set_f32_array(const std::string& key, std::span<const float> values) {
  MetadataValue m;
  m.type = ValueType::Array;
  m.element_type = ValueType::Float32;
  m.floats.assign(values.begin(), values.end());
  impl_->add(key, std::move(m));
}
void GGUFWriter::set_f64_array(const std::string& key, std::span<const double> values) {
  MetadataValue m;
  m.type = ValueType::Array;
  m.element_type = ValueType::Float64;
  m.floats.assign(values.begin(), values.end());
  impl_->add(key, std::move(m));
}
void GGUFWriter::set_string_array(const std::string& key, const std::vector<std::string>& values) {
  MetadataValue m;
  m.type = ValueType::Array;
  m.element_type = ValueType::String;
  m.strings = values;
  impl_->add(key, std::move(m));
}

void GGUFWriter::add_tensor(const std::string& name, const Tensor& tensor, TensorType type) {
  const std::string where = "GGUFWriter::add_tensor: tensor " + escaped(name);
  if (impl_->names.count(name)) throw ValueError(where + " is added twice; give each tensor a distinct name");
  if (!tensor_type_known(uint32_t(type)))
    throw ValueError(where + ": " + std::to_string(uint32_t(type)) +
                     " is not a TensorType; use " + kTypesRead);
  if (!tensor.defined()) throw ValueError(where + " is an undefined Tensor; pass a tensor holding data");
  if (tensor.dtype() != dtype_for(type))
    throw TypeError(where + " is " + dtype_name(tensor.dtype()) + ", which cannot be stored as " +
                    tensor_type_name(type) +
                    "; store float32 tensors as F32, F16, BF16, Q8_0, Q4_0, Q4_K or Q6_K, int32 as I32, int64 as I64");
  const Shape& shape = tensor.shape();
  if (shape.rank() > int(kMaxDims))
    throw ShapeError(where + " has shape " + shape.str() + " (" + std::to_string(shape.rank()) +
                     " dimensions); GGUF holds at most 4, reshape it before saving");
  if (tensor.numel() == 0)
    throw ShapeError(where + " has shape " + shape.str() + ", which holds no elements; GGUF tensors hold at least one");
  // Written from host memory: a device tensor is copied to the host now
  // (a CPU tensor is shared, so later changes before write() are saved).
  Impl::Entry e{name, tensor.to(Device::CPU), type, {}, impl_->data_size, 0};
  for (int i = shape.rank() - 1; i >= 0; --i) e.ne.push_back(uint64_t(shape[i]));
  if (e.ne.empty()) e.ne.push_back(1);  // a scalar is stored as one dimension of 1
  const int64_t block = tensor_type_block_size(type);
  if (int64_t(e.ne[0]) % block != 0)
    throw ValueError(where + " has shape " + shape.str() + ": its innermost (last) dimension, " +
                     std::to_string(e.ne[0]) + ", is not a multiple of " + std::to_string(block) + ", the block size of " +
                     tensor_type_name(type) + " (ggml quantizes rows in whole blocks); store it as F32, F16 or BF16, "
                     "or pad the dimension");
  if (tensor_type_is_quantized(type)) {
    const float* v = e.tensor.data<float>();
    for (int64_t i = 0; i < tensor.numel(); ++i)
      if (!std::isfinite(v[i]))
        throw ValueError(where + " of shape " + shape.str() + " holds " + std::to_string(v[i]) + " at flat index " +
                         std::to_string(i) + "; a " + tensor_type_name(type) +
                         " block shares one scale, which a NaN or infinity would turn into NaN for the whole "
                         "block; replace non-finite values or store the tensor as F32");
  }
  e.nbytes = uint64_t(tensor.numel() / int64_t(e.ne[0])) * tensor_type_row_bytes(type, int64_t(e.ne[0]));
  impl_->data_size = align_up(e.offset + e.nbytes, impl_->alignment);
  impl_->names.insert(name);
  impl_->tensors.push_back(std::move(e));
}

std::vector<uint8_t> GGUFWriter::to_bytes() const {
  std::vector<uint8_t> out = impl_->header();
  out.reserve(out.size() + size_t(impl_->data_size));
  impl_->write_data([&](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  });
  return out;
}

WriteStats GGUFWriter::write(const std::string& path) const {
  const auto t0 = std::chrono::steady_clock::now();
  AtomicFile file(path);
  const std::vector<uint8_t> header = impl_->header();
  file.write(header.data(), header.size());
  impl_->write_data([&](const void* p, size_t n) { file.write(p, n); });
  WriteStats stats;
  stats.bytes = file.bytes_written();
  stats.fsync_seconds = file.commit();
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stats.write_seconds = std::max(0.0, total - stats.fsync_seconds);
  return stats;
}

// ---------------------------------------------------------------- GGUFFile

struct GGUFFile::Impl {
  std::string path;
  const uint8_t* bytes = nullptr;
  size_t size = 0;
  void* map = nullptr;  // the mapping of open(), or null
  size_t map_size = 0;
  std::vector<uint8_t> owned;  // the copy of parse()
  uint32_t version = 0;
  uint32_t alignment = kDefaultAlignment;
  std::vector<MetadataEntry> metadata;
  std::unordered_map<std::string, size_t> key_index;
  std::vector<TensorInfo> tensors;
  std::unordered_map<std::string, size_t> tensor_index;

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() {
    if (map) ::munmap(map, map_size);
  }

  std::string prefix() const { return "GGUF file " + quoted(path) + ": "; }
  // Drops the mapped pages of `t`'s bytes from the process (they are read
  // from the file again if touched: a read-only private file mapping),
  // rounded out to whole pages; another tensor's bytes in a shared page are
  // only re-read, never lost. Nothing for parse()'s copy. Advisory: an error
  // leaves the pages resident, which is harmless.
  void release(const TensorInfo& t) const {
    if (!map || t.nbytes == 0) return;
    static const uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
    const uint64_t begin = t.offset / page * page;
    const uint64_t end = std::min<uint64_t>(align_up(t.offset + t.nbytes, page), map_size);
    (void)::madvise(static_cast<uint8_t*>(map) + begin, size_t(end - begin), MADV_DONTNEED);
  }
  [[noreturn]] void fail(const std::string& what) const { throw FormatError(prefix() + what); }

  void parse();
  // Names the tensors listed under kLongNamesStoredKey by their full names.
  void apply_long_names();
  void parse_value(Cursor& c, MetadataValue& v, const std::string& key, size_t at);
  void read_element(Cursor& c, ValueType t, MetadataValue& v, const std::string& key, size_t at);
  const MetadataValue& value(const std::string& key, const char* wanted) const;
  const TensorInfo& tensor(const std::string& name, const char* caller) const;
  [[noreturn]] void wrong_type(const std::string& key, const MetadataValue& v, const char* wanted) const {
    fail("metadata key " + quoted(key) + " is " + describe_type(v) + ", expected " + wanted);
  }
};

void GGUFFile::Impl::read_element(Cursor& c, ValueType t, MetadataValue& v, const std::string& key, size_t at) {
  switch (t) {
    case ValueType::UInt8: v.ints.push_back(c.read<uint8_t>("a UINT8")); return;
    case ValueType::Int8: v.ints.push_back(c.read<int8_t>("an INT8")); return;
    case ValueType::UInt16: v.ints.push_back(c.read<uint16_t>("a UINT16")); return;
    case ValueType::Int16: v.ints.push_back(c.read<int16_t>("an INT16")); return;
    case ValueType::UInt32: v.ints.push_back(c.read<uint32_t>("a UINT32")); return;
    case ValueType::Int32: v.ints.push_back(c.read<int32_t>("an INT32")); return;
    case ValueType::UInt64: v.ints.push_back(int64_t(c.read<uint64_t>("a UINT64"))); return;
    case ValueType::Int64: v.ints.push_back(c.read<int64_t>("an INT64")); return;
    case ValueType::Float32: v.floats.push_back(c.read<float>("a FLOAT32")); return;
    case ValueType::Float64: v.floats.push_back(c.read<double>("a FLOAT64")); return;
    case ValueType::Bool: {
      const size_t pos = c.pos();
      const uint8_t b = c.read<uint8_t>("a BOOL");
      if (b > 1)
        fail("metadata key " + quoted(key) + " (pair at byte " + std::to_string(at) + ") holds BOOL byte " +
             std::to_string(b) + " at byte " + std::to_string(pos) + "; a GGUF bool is 0 or 1");
      v.ints.push_back(b);
      return;
    }
    case ValueType::String: v.strings.push_back(c.string("a STRING")); return;
    case ValueType::Array: break;
  }
  throw std::logic_error("GGUF reader: read_element on an array");
}

void GGUFFile::Impl::parse_value(Cursor& c, MetadataValue& v, const std::string& key, size_t at) {
  const std::string where = "metadata key " + quoted(key) + " (pair at byte " + std::to_string(at) + ")";
  size_t pos = c.pos();
  const uint32_t type = c.read<uint32_t>("the value type");
  if (!value_type_known(type))
    fail(where + " has value type " + std::to_string(type) + " at byte " + std::to_string(pos) +
         ", which is not a GGUF value type (0 to 12)");
  v.type = ValueType(type);
  if (v.type != ValueType::Array) {
    read_element(c, v.type, v, key, at);
    return;
  }
  pos = c.pos();
  const uint32_t elem = c.read<uint32_t>("the array's element type");
  if (!value_type_known(elem))
    fail(where + " is an array whose element type " + std::to_string(elem) + " at byte " + std::to_string(pos) +
         " is not a GGUF value type (0 to 12)");
  v.element_type = ValueType(elem);
  if (v.element_type == ValueType::Array)
    fail(where + " is an array of arrays (element type at byte " + std::to_string(pos) +
         "), which tensorgrad does not read");
  pos = c.pos();
  const uint64_t count = c.read<uint64_t>("the array's element count");
  const uint64_t min_size = value_min_size(v.element_type);
  if (count > c.remaining() / min_size)
    fail(where + " declares an array of " + std::to_string(count) + " " + value_type_name(v.element_type) +
         " elements at byte " + std::to_string(pos) + ", but only " + std::to_string(c.remaining()) +
         " bytes follow (each element takes at least " + std::to_string(min_size) +
         "); the file is truncated or corrupt");
  if (v.element_type == ValueType::String)
    v.strings.reserve(size_t(count));
  else if (is_float(v.element_type))
    v.floats.reserve(size_t(count));
  else
    v.ints.reserve(size_t(count));
  for (uint64_t i = 0; i < count; ++i) read_element(c, v.element_type, v, key, at);
}

void GGUFFile::Impl::parse() {
  if (size == 0)
    fail("the file is empty (0 bytes); a GGUF file starts with the magic \"GGUF\"; it was not written completely");
  Cursor c(bytes, size, path);
  c.context = "the header";
  c.need(4, "the magic \"GGUF\"");
  if (std::memcmp(bytes, kMagic, 4) != 0) {
    char found[32];
    std::snprintf(found, sizeof found, "%02X %02X %02X %02X", bytes[0], bytes[1], bytes[2], bytes[3]);
    fail(std::string("not a GGUF file: expected the magic \"GGUF\" (47 47 55 46) at byte 0, found ") + found);
  }
  (void)c.read<uint32_t>("the magic");
  version = c.read<uint32_t>("the version");
  if (version != kVersion)
    fail("unsupported GGUF version " + std::to_string(version) +
         " (at byte 4); tensorgrad reads version 3; convert the file with a current ggml");
  const uint64_t tensor_count = c.read<uint64_t>("the tensor count");
  const uint64_t kv_count = c.read<uint64_t>("the metadata pair count");
  if (kv_count > c.remaining() / kMinPairBytes)
    fail("the header declares " + std::to_string(kv_count) + " metadata pairs (count at byte 16), but the " +
         std::to_string(c.remaining()) + " bytes after the header can hold at most " +
         std::to_string(c.remaining() / kMinPairBytes) + "; the file is truncated or corrupt");

  // Metadata.
  metadata.reserve(size_t(kv_count));
  std::vector<size_t> key_offsets;
  for (uint64_t i = 0; i < kv_count; ++i) {
    const size_t at = c.pos();
    c.context = "metadata pair " + std::to_string(i) + " (at byte " + std::to_string(at) + ")";
    std::string key = c.string("the key");
    if (const size_t nul = nul_position(key); nul != std::string::npos)
      fail("metadata pair " + std::to_string(i) + " (at byte " + std::to_string(at) + "): the key " + escaped(key) +
           " has a NUL byte at byte " + std::to_string(at + 8 + nul) +
           "; ggml reads keys as C strings and would see " + escaped(key.substr(0, nul)) +
           "; the file is corrupt or its writer does not follow GGUF");
    if (auto it = key_index.find(key); it != key_index.end())
      fail("duplicate metadata key " + quoted(key) + " at byte " + std::to_string(at) + " (first at byte " +
           std::to_string(key_offsets[it->second]) + ")");
    c.context = "metadata key " + quoted(key) + " (pair at byte " + std::to_string(at) + ")";
    MetadataEntry entry{std::move(key), {}};
    parse_value(c, entry.value, entry.key, at);
    key_index.emplace(entry.key, metadata.size());
    key_offsets.push_back(at);
    metadata.push_back(std::move(entry));
  }
  if (auto it = key_index.find(kAlignmentKey); it != key_index.end()) {
    const MetadataValue& v = metadata[it->second].value;
    const std::string where = std::string("metadata key '") + kAlignmentKey + "' (pair at byte " +
                              std::to_string(key_offsets[it->second]) + ")";
    if (v.type != ValueType::UInt32) fail(where + " is " + describe_type(v) + "; GGUF requires a UINT32");
    if (!is_power_of_two(uint64_t(v.ints[0])))
      fail(where + " is " + std::to_string(v.ints[0]) + "; the alignment must be a nonzero power of two");
    alignment = uint32_t(v.ints[0]);
  }

  // Tensor infos (the count is checked here rather than with the header's,
  // so that a file cut inside its metadata is reported as truncated there).
  if (tensor_count > c.remaining() / kMinTensorInfoBytes)
    fail("the header declares " + std::to_string(tensor_count) + " tensors (count at byte 8), but the " +
         std::to_string(c.remaining()) + " bytes after the metadata (from byte " + std::to_string(c.pos()) +
         ") can hold at most " + std::to_string(c.remaining() / kMinTensorInfoBytes) +
         " tensor infos; the file is truncated or corrupt");
  tensors.reserve(size_t(tensor_count));
  std::vector<uint64_t> relative(static_cast<size_t>(tensor_count));
  std::vector<size_t> info_offsets;
  for (uint64_t i = 0; i < tensor_count; ++i) {
    const size_t at = c.pos();
    c.context = "tensor info " + std::to_string(i) + " (at byte " + std::to_string(at) + ")";
    TensorInfo info;
    info.name = c.string("the name");
    const std::string info_at = "tensor info " + std::to_string(i) + " (at byte " + std::to_string(at) + "): the name ";
    if (const size_t nul = nul_position(info.name); nul != std::string::npos)
      fail(info_at + escaped(info.name) + " has a NUL byte at byte " + std::to_string(at + 8 + nul) +
           "; ggml reads names as C strings and would see " + escaped(info.name.substr(0, nul)) +
           "; the file is corrupt or its writer does not follow GGUF");
    if (info.name.size() > kMaxNameBytes)
      fail(info_at + escaped(info.name.substr(0, 40)) + "... is " + std::to_string(info.name.size()) +
           " bytes long; GGUF tensor names hold at most 63 bytes (ggml's GGML_MAX_NAME = 64 counts the "
           "terminating NUL, and ggml refuses longer ones); the file's writer does not follow GGUF");
    const std::string where = "tensor " + quoted(info.name) + " (info at byte " + std::to_string(at) + ")";
    if (auto it = tensor_index.find(info.name); it != tensor_index.end())
      fail("duplicate tensor name " + quoted(info.name) + " at byte " + std::to_string(at) + " (first at byte " +
           std::to_string(info_offsets[it->second]) + ")");
    c.context = where;
    size_t pos = c.pos();
    const uint32_t n_dims = c.read<uint32_t>("n_dims");
    if (n_dims < 1 || n_dims > kMaxDims)
      fail(where + " has n_dims " + std::to_string(n_dims) + " at byte " + std::to_string(pos) +
           "; GGUF tensors have 1 to 4 dimensions");
    std::vector<uint64_t> ne;
    uint64_t numel = 1;
    for (uint32_t j = 0; j < n_dims; ++j) {
      pos = c.pos();
      ne.push_back(c.read<uint64_t>("a dimension (ne)"));
      if (ne[j] == 0)
        fail(where + " has ne[" + std::to_string(j) + "] = 0 at byte " + std::to_string(pos) +
             "; every dimension must be at least 1");
      if (ne[j] > kMaxElements || numel > kMaxElements / ne[j])
        fail(where + " has dimensions ne = " + ne_str(ne) + (j + 1 < n_dims ? "..." : "") +
             " (GGUF order), more than 2^40 elements in all, which tensorgrad refuses to allocate; the file is "
             "corrupt");
      numel *= ne[j];
    }
    pos = c.pos();
    const uint32_t type = c.read<uint32_t>("the ggml type");
    if (!tensor_type_known(type))
      fail("tensor " + quoted(info.name) + " has GGML type " + std::to_string(type) + " (" + ggml_type_name(type) +
           ") at byte " + std::to_string(pos) +
           ", which tensorgrad does not read; types read: " + kTypesRead +
           "; convert the file to one of them (llama.cpp's llama-quantize)");
    info.type = TensorType(type);
    pos = c.pos();
    const uint64_t offset = c.read<uint64_t>("the data offset");
    if (offset % alignment != 0)
      fail(where + " has data offset " + std::to_string(offset) + " at byte " + std::to_string(pos) +
           ", which is not a multiple of the alignment " + std::to_string(alignment));
    std::vector<int64_t> dims(ne.rbegin(), ne.rend());
    info.shape = Shape(std::span<const int64_t>(dims));
    // ggml_row_size: rows of ne[0] elements in whole blocks.
    const int64_t block = tensor_type_block_size(info.type);
    if (ne[0] % uint64_t(block) != 0)
      fail(where + " is " + tensor_type_name(info.type) + " with ne[0] = " + std::to_string(ne[0]) +
           " (dimensions ne = " + ne_str(ne) + ", GGUF order), which is not a multiple of " + std::to_string(block) +
           ", the type's block size: ggml stores each row of ne[0] elements in whole blocks; the file is corrupt");
    info.nbytes = (numel / ne[0]) * tensor_type_row_bytes(info.type, int64_t(ne[0]));
    relative[size_t(i)] = offset;
    info.stored_name = info.name;
    tensor_index.emplace(info.name, tensors.size());
    info_offsets.push_back(at);
    tensors.push_back(std::move(info));
  }

  // Data ranges.
  c.context.clear();
  const uint64_t data_start = align_up(c.pos(), alignment);
  if (!tensors.empty() && data_start > size)
    fail("the data section should start at byte " + std::to_string(data_start) +
         " (after the tensor infos, padded to the alignment " + std::to_string(alignment) +
         "), past the end of the file (" + std::to_string(size) + " bytes); the file is truncated");
  const uint64_t data_size = size - std::min<uint64_t>(data_start, size);
  for (size_t i = 0; i < tensors.size(); ++i) {
    TensorInfo& t = tensors[i];
    if (relative[i] > data_size || t.nbytes > data_size - relative[i])
      fail("tensor " + quoted(t.name) + " (info at byte " + std::to_string(info_offsets[i]) + "): its " +
           std::to_string(t.nbytes) + " bytes of data at offset " + std::to_string(relative[i]) +
           " of the data section (which starts at byte " + std::to_string(data_start) +
           ") run past the end of the file (" + std::to_string(size) + " bytes); the file is truncated");
    t.offset = data_start + relative[i];
  }
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return tensors[a].offset < tensors[b].offset; });
  for (size_t k = 1; k < order.size(); ++k) {
    const TensorInfo& a = tensors[order[k - 1]];
    const TensorInfo& b = tensors[order[k]];
    if (b.offset < a.offset + a.nbytes)
      fail("the data of tensors " + quoted(a.name) + " and " + quoted(b.name) + " overlap: " + quoted(a.name) +
           " occupies bytes [" + std::to_string(a.offset) + ", " + std::to_string(a.offset + a.nbytes) + ") and " +
           quoted(b.name) + " starts at byte " + std::to_string(b.offset));
  }
  apply_long_names();
}

void GGUFFile::Impl::apply_long_names() {
  const auto stored_it = key_index.find(kLongNamesStoredKey);
  const auto full_it = key_index.find(kLongNamesFullKey);
  if (stored_it == key_index.end() && full_it == key_index.end()) return;
  const std::string both = std::string("the keys '") + kLongNamesStoredKey + "' and '" + kLongNamesFullKey +
                           "' (the tensors whose names are longer than 63 bytes)";
  if (stored_it == key_index.end() || full_it == key_index.end())
    fail(both + " come together, but only '" +
         (stored_it == key_index.end() ? kLongNamesFullKey : kLongNamesStoredKey) +
         "' is in the file; the file is corrupt or its writer does not follow tensorgrad's layout");
  const MetadataValue& stored = metadata[stored_it->second].value;
  const MetadataValue& full = metadata[full_it->second].value;
  for (const MetadataEntry* e : {&metadata[stored_it->second], &metadata[full_it->second]})
    if (e->value.type != ValueType::Array || e->value.element_type != ValueType::String)
      fail("metadata key " + quoted(e->key) + " is " + describe_type(e->value) + ", expected an ARRAY of STRING");
  if (stored.strings.size() != full.strings.size())
    fail(both + " must list as many names each; they list " + std::to_string(stored.strings.size()) + " and " +
         std::to_string(full.strings.size()));
  std::vector<std::string> names(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) names[i] = tensors[i].name;
  std::vector<bool> renamed(tensors.size(), false);
  for (size_t k = 0; k < stored.strings.size(); ++k) {
    const std::string& s = stored.strings[k];
    const std::string& f = full.strings[k];
    const auto it = tensor_index.find(s);
    if (it == tensor_index.end())
      fail(std::string("metadata key '") + kLongNamesStoredKey + "' lists " + escaped(s) + " (element " +
           std::to_string(k) + "), which is not a tensor of the file");
    if (renamed[it->second])
      fail(std::string("metadata key '") + kLongNamesStoredKey + "' lists " + escaped(s) + " twice");
    renamed[it->second] = true;
    names[it->second] = f;
  }
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < tensors.size(); ++i)
    if (!index.emplace(names[i], i).second)
      fail(both + " give tensors " + quoted(tensors[index[names[i]]].stored_name) + " and " +
           quoted(tensors[i].stored_name) + " the one name " + escaped(names[i]));
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].name = std::move(names[i]);
  tensor_index = std::move(index);
}

const MetadataValue& GGUFFile::Impl::value(const std::string& key, const char* wanted) const {
  auto it = key_index.find(key);
  if (it == key_index.end()) fail("metadata key " + quoted(key) + " is missing; expected " + wanted);
  return metadata[it->second].value;
}

const TensorInfo& GGUFFile::Impl::tensor(const std::string& name, const char* caller) const {
  auto it = tensor_index.find(name);
  if (it == tensor_index.end())
    throw ValueError(std::string("GGUFFile::") + caller + ": no tensor named " + quoted(name) + " in GGUF file " +
                     quoted(path) + " (it has " + std::to_string(tensors.size()) +
                     " tensors; tensors() lists them)");
  return tensors[it->second];
}

GGUFFile::GGUFFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GGUFFile::GGUFFile(GGUFFile&&) noexcept = default;
GGUFFile& GGUFFile::operator=(GGUFFile&&) noexcept = default;
GGUFFile::~GGUFFile() = default;

GGUFFile GGUFFile::open(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw IOError("cannot open GGUF file " + quoted(path) + ": " + std::strerror(err) +
                  "; check the path and the file's permissions");
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw IOError("cannot read GGUF file " + quoted(path) + ": " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw IOError("cannot read GGUF file " + quoted(path) + ": it is not a regular file (a folder or a device)");
  }
  impl->size = size_t(st.st_size);
  if (impl->size > 0) {
    void* map = ::mmap(nullptr, impl->size, PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);
    if (map == MAP_FAILED)
      throw IOError("cannot map GGUF file " + quoted(path) + " into memory: " + std::strerror(err));
    impl->map = map;
    impl->map_size = impl->size;
    impl->bytes = static_cast<const uint8_t*>(map);
  } else {
    ::close(fd);
  }
  impl->parse();
  return GGUFFile(std::move(impl));
}

GGUFFile GGUFFile::parse(std::span<const uint8_t> bytes) {
  auto impl = std::make_unique<Impl>();
  impl->path = "<memory>";
  impl->owned.assign(bytes.begin(), bytes.end());
  impl->bytes = impl->owned.data();
  impl->size = impl->owned.size();
  impl->parse();
  return GGUFFile(std::move(impl));
}

const GGUFFile::Impl* GGUFFile::live(const char* call) const {
  if (!impl_)
    throw StateError(std::string("GGUFFile::") + call + ": this GGUFFile was moved from; use the object it was "
                     "moved to, or assign an opened file to this one");
  return impl_.get();
}

uint32_t GGUFFile::version() const { return live(__func__)->version; }
uint32_t GGUFFile::alignment() const { return live(__func__)->alignment; }
const std::string& GGUFFile::path() const { return live(__func__)->path; }
const std::vector<MetadataEntry>& GGUFFile::metadata() const& { return live(__func__)->metadata; }
std::vector<MetadataEntry> GGUFFile::metadata() && { return live(__func__)->metadata; }

const MetadataValue* GGUFFile::find(const std::string& key) const {
  const Impl& im = *live(__func__);
  auto it = im.key_index.find(key);
  return it == im.key_index.end() ? nullptr : &im.metadata[it->second].value;
}

std::string GGUFFile::get_string(const std::string& key) const {
  const Impl& im = *live(__func__);
  const MetadataValue& v = im.value(key, "a STRING");
  if (v.type != ValueType::String) im.wrong_type(key, v, "a STRING");
  return v.strings[0];
}
uint32_t GGUFFile::get_u32(const std::string& key) const {
  const Impl& im = *live(__func__);
  const char* wanted = "a UINT32 (or UINT8, UINT16)";
  const MetadataValue& v = im.value(key, wanted);
  if (v.type != ValueType::UInt8 && v.type != ValueType::UInt16 && v.type != ValueType::UInt32)
    im.wrong_type(key, v, wanted);
  return uint32_t(v.ints[0]);
}
uint64_t GGUFFile::get_u64(const std::string& key) const {
  const Impl& im = *live(__func__);
  const char* wanted = "an unsigned integer (UINT8 to UINT64)";
  const MetadataValue& v = im.value(key, wanted);
  if (!is_unsigned(v.type)) im.wrong_type(key, v, wanted);
  return uint64_t(v.ints[0]);
}
int64_t GGUFFile::get_i64(const std::string& key) const {
  const Impl& im = *live(__func__);
  const char* wanted = "a signed integer (INT8 to INT64)";
  const MetadataValue& v = im.value(key, wanted);
  if (!is_signed(v.type)) im.wrong_type(key, v, wanted);
  return v.ints[0];
}
double GGUFFile::get_f64(const std::string& key) const {
  const Impl& im = *live(__func__);
  const char* wanted = "a FLOAT64 (or FLOAT32)";
  const MetadataValue& v = im.value(key, wanted);
  if (!is_float(v.type)) im.wrong_type(key, v, wanted);
  return v.floats[0];
}
bool GGUFFile::get_bool(const std::string& key) const {
  const Impl& im = *live(__func__);
  const MetadataValue& v = im.value(key, "a BOOL");
  if (v.type != ValueType::Bool) im.wrong_type(key, v, "a BOOL");
  return v.ints[0] != 0;
}
std::vector<uint64_t> GGUFFile::get_u64_array(const std::string& key) const {
  const Impl& im = *live(__func__);
  const char* wanted = "an ARRAY of unsigned integers (UINT8 to UINT64)";
  const MetadataValue& v = im.value(key, wanted);
  if (v.type != ValueType::Array || !is_unsigned(v.element_type)) im.wrong_type(key, v, wanted);
  return std::vector<uint64_t>(v.ints.begin(), v.ints.end());
}
std::vector<int64_t> GGUFFile::get_i64_array(const std::string& key) const {
  const Impl& im = *live(__func__);
  const char* wanted = "an ARRAY of signed integers (INT8 to INT64)";
  const MetadataValue& v = im.value(key, wanted);
  if (v.type != ValueType::Array || !is_signed(v.element_type)) im.wrong_type(key, v, wanted);
  return v.ints;
}
std::vector<double> GGUFFile::get_f64_array(const std::string& key) const {
  const Impl& im = *live(__func__);
  const char* wanted = "an ARRAY of FLOAT64 (or FLOAT32)";
  const MetadataValue& v = im.value(key, wanted);
  if (v.type != ValueType::Array || !is_float(v.element_type)) im.wrong_type(key, v, wanted);
  return v.floats;
}
std::vector<std::string> GGUFFile::get_string_array(const std::string& key) const {
  const Impl& im = *live(__func__);
  const char* wanted = "an ARRAY of STRING";
  const MetadataValue& v = im.value(key, wanted);
  if (v.type != ValueType::Array || v.element_type != ValueType::String) im.wrong_type(key, v, wanted);
  return v.strings;
}

const std::vector<TensorInfo>& GGUFFile::tensors() const& { return live(__func__)->tensors; }
std::vector<TensorInfo> GGUFFile::tensors() && { return live(__func__)->tensors; }

const TensorInfo* GGUFFile::find_tensor(const std::string& name) const {
  const Impl& im = *live(__func__);
  auto it = im.tensor_index.find(name);
  return it == im.tensor_index.end() ? nullptr : &im.tensors[it->second];
}

std::span<const uint8_t> GGUFFile::data(const std::string& name) const {
  const Impl& im = *live(__func__);
  const TensorInfo& t = im.tensor(name, "data");
  return {im.bytes + t.offset, size_t(t.nbytes)};
}

void GGUFFile::release_pages(const std::string& name) const {
  const Impl& im = *live(__func__);
  im.release(im.tensor(name, "release_pages"));
}

namespace {
// Converts a tensor's file bytes into `out`, which holds numel elements of
// the tensor's dtype.
void convert(const TensorInfo& t, const uint8_t* src, void* out) {
  switch (t.type) {
    case TensorType::I32:
    case TensorType::I64: std::memcpy(out, src, size_t(t.nbytes)); return;
    case TensorType::F32:
    case TensorType::F16:
    case TensorType::BF16:
    case TensorType::Q4_0:
    case TensorType::Q8_0:
    case TensorType::Q4_K:
    case TensorType::Q6_K:
      dequantize_row(t.type, {src, size_t(t.nbytes)}, {static_cast<float*>(out), size_t(t.shape.numel())});
      return;
  }
}
}  // namespace

Tensor GGUFFile::read(const std::string& name) const {
  const Impl& im = *live(__func__);
  const TensorInfo& t = im.tensor(name, "read");
  Tensor out = Tensor::empty(t.shape, dtype_for(t.type));
  convert(t, im.bytes + t.offset, out.raw());
  im.release(t);
  return out;
}

void GGUFFile::read_into(const std::string& name, Tensor& out) const {
  const Impl& im = *live(__func__);
  const TensorInfo& t = im.tensor(name, "read_into");
  const std::string where = "GGUFFile::read_into: tensor " + quoted(name) + " of GGUF file " + quoted(im.path);
  if (!out.defined())
    throw ValueError(where + ": the output tensor is undefined; pass a tensor of shape " + t.shape.str());
  if (out.shape() != t.shape)
    throw ShapeError(where + " has shape " + t.shape.str() + ", but the output tensor has shape " +
                     out.shape().str() + "; pass a tensor of the file's shape");
  const DType want = dtype_for(t.type);
  if (out.dtype() != want)
    throw TypeError(where + " is " + tensor_type_name(t.type) + ", read as " + dtype_name(want) +
                    ", but the output tensor is " + dtype_name(out.dtype()) + "; pass a " + dtype_name(want) +
                    " tensor");
  // The loaded bytes reach the (persistent) output by one copy: the file's
  // own bytes viewed where they are stored as is; converted ones straight
  // into a CPU output, else through a host buffer of whole blocks at a time.
  if (t.type == TensorType::F32 || t.type == TensorType::I32 || t.type == TensorType::I64) {
    out.copy_from(Tensor::view(const_cast<uint8_t*>(im.bytes + t.offset), t.shape, want));  // read only
  } else if (out.device() == Device::CPU) {
    convert(t, im.bytes + t.offset, out.raw());
  } else {
    const size_t n = size_t(t.shape.numel());
    const size_t step = std::min(n, kConvertChunk);  // a multiple of every block size, as n is of the tensor's
    std::vector<float> staging(step);
    for (size_t i = 0; i < n; i += step) {
      const size_t m = std::min(step, n - i);
      const uint64_t at = tensor_type_row_bytes(t.type, int64_t(i));
      dequantize_row(t.type, {im.bytes + t.offset + at, size_t(tensor_type_row_bytes(t.type, int64_t(m)))},
                     {staging.data(), m});
      out.copy_from_host(staging.data(), m * sizeof(float), i * sizeof(float));
    }
  }
  im.release(t);
}

}  // namespace tensorgrad::io
