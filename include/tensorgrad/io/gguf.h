#pragma once
// GGUF version 3 files (ggml's docs/gguf.md), the container of every file
// tensorgrad saves: a header, typed key/value metadata, a table of tensor
// infos and the tensors' data, each aligned to general.alignment (default
// 32).
//
// Dimension order: GGUF lists a tensor's dimensions as ggml's ne[0], ne[1],
// ..., ne[0] the fastest-varying (innermost) axis. tensorgrad's shapes list
// the outermost axis first (row-major, as NumPy). The two are reverses of each
// other: a Dense kernel of shape {in, out} is stored with ne = {out, in}. Every
// Shape in this header is in tensorgrad's order; the reversal happens only
// inside the reader and writer.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tensorgrad/core/shape.h"
#include "tensorgrad/core/tensor.h"
#include "tensorgrad/io/quants.h"  // TensorType, its names, sizes and block formats

namespace tensorgrad::io {

/// The keys where a file lists the tensors whose names GGUF does not take
/// as they are (GGUFWriter::add_tensor): the names in the tensor table
/// and the full names, ARRAY[STRING] each, element i of one naming the same
/// tensor as element i of the other (parallel arrays, as ggml's own
/// tokenizer.ggml.tokens and tokenizer.ggml.scores).
///@{
inline constexpr const char* kLongNamesStoredKey = "tensorgrad.long_names.stored";
inline constexpr const char* kLongNamesFullKey = "tensorgrad.long_names.full";
///@}

/// Metadata value types, with gguf_type's ids.
enum class ValueType : uint32_t {
  UInt8 = 0, Int8 = 1, UInt16 = 2, Int16 = 3, UInt32 = 4, Int32 = 5, Float32 = 6,
  Bool = 7, String = 8, Array = 9, UInt64 = 10, Int64 = 11, Float64 = 12
};
/// GGUF's names: "UINT8", ..., "STRING", "ARRAY", "FLOAT64".
const char* value_type_name(ValueType type);

/// One metadata value: a scalar, a string, or an array of scalars or
/// strings (arrays of arrays are refused: tensorgrad never writes them, and
/// the reader's FormatError names the key). Integers and bools are held in
/// `ints` (unsigned values as their bit pattern), floats in `floats`,
/// strings in `strings`: a scalar is one element, an array its elements.
struct MetadataValue {
  ValueType type = ValueType::UInt64;         ///< the value's type; Array for an array
  ValueType element_type = ValueType::UInt8;  ///< for Array: its elements' type
  std::vector<int64_t> ints;                  ///< integers and bools (0/1); unsigned ones as their bits
  std::vector<double> floats;                 ///< FLOAT32 and FLOAT64 values
  std::vector<std::string> strings;           ///< STRING values
};

/// One key/value pair, in file order.
struct MetadataEntry {
  std::string key;      ///< the key ("general.architecture")
  MetadataValue value;  ///< its value
};

/// One tensor of a file, as its tensor-info table gives it.
struct TensorInfo {
  /// Its name: the one given to GGUFWriter::add_tensor, any bytes of any length.
  std::string name;
  /// The name in the file's tensor table, what ggml and other GGUF readers
  /// see: `name` itself when GGUF takes it (1 to 63 bytes, no NUL), else
  /// the short name the writer stored it under (see GGUFWriter::add_tensor).
  std::string stored_name;
  TensorType type = TensorType::F32;  ///< its element type in the file
  Shape shape;          ///< tensorgrad's order, outermost first (the file's ne reversed)
  uint64_t offset = 0;  ///< of the data, from the start of the file, in bytes
  uint64_t nbytes = 0;  ///< the data's size in bytes
};

/// Time spent by GGUFWriter::write, in seconds: building the header and
/// copying data to the file (`write`), and the fsync of the file and its
/// folder (`fsync`), reported apart because it depends on the disk.
struct WriteStats {
  double write_seconds = 0.0;  ///< building the header and writing, in seconds
  double fsync_seconds = 0.0;  ///< fsync of the file and its folder, in seconds
  uint64_t bytes = 0;          ///< the file's size in bytes
};

/// Collects metadata and tensors, then writes one GGUF v3 file. Holds the
/// tensors by handle (Tensor copies share memory): they must not change
/// until write() returns.
class GGUFWriter {
 public:
  /// general.alignment: a power of two, at least 8 (ValueError otherwise);
  /// written as a UINT32 key when not 32.
  explicit GGUFWriter(uint32_t alignment = 32);
  /// Scalars and strings. A key given twice is a ValueError; so is an empty
  /// key, one longer than 65535 bytes, one with a NUL byte (ggml reads keys
  /// as C strings), "general.alignment" (the writer
  /// writes that key itself from the constructor's alignment), or one of
  /// kLongNamesStoredKey and kLongNamesFullKey (the writer's own, see
  /// add_tensor). Keys are written in the order they were set.
  ///@{
  void set_string(const std::string& key, const std::string& value);
  void set_bool(const std::string& key, bool value);
  void set_u32(const std::string& key, uint32_t value);
  void set_i32(const std::string& key, int32_t value);
  void set_u64(const std::string& key, uint64_t value);
  void set_i64(const std::string& key, int64_t value);
  void set_f32(const std::string& key, float value);
  void set_f64(const std::string& key, double value);
  ///@}
  /// Arrays (random-number state is stored as UINT64 arrays); the keys as
  /// for scalars.
  ///@{
  void set_u64_array(const std::string& key, std::span<const uint64_t> values);
  void set_i64_array(const std::string& key, std::span<const int64_t> values);
  void set_f64_array(const std::string& key, std::span<const double> values);
  /// INT32 and FLOAT32 arrays, the types llama.cpp reads for
  /// tokenizer.ggml.token_type and tokenizer.ggml.scores.
  ///@{
  void set_i32_array(const std::string& key, std::span<const int32_t> values);
  void set_f32_array(const std::string& key, std::span<const float> values);
  ///@}
  /// STRING arrays (tokenizer.ggml.tokens and tokenizer.ggml.merges).
  void set_string_array(const std::string& key, const std::vector<std::string>& values);
  ///@}
  /// A tensor stored as `type`: a float32 tensor as F32, F16 or BF16
  /// (rounded to nearest even; NaN stays NaN, infinities stay infinite) or
  /// quantized as Q8_0, Q4_0, Q4_K or Q6_K (quantize_row: Q8_0 and Q4_0 by
  /// ggml's reference quantizers, Q4_K and Q6_K by tensorgrad's own encoder,
  /// which ggml decodes), an int32 one as I32, an int64 one as I64. A
  /// quantized tensor's innermost (last) dimension must be a multiple of the
  /// type's block size, 32 or 256 (ValueError naming the tensor, its shape
  /// and the block size), and its values finite (ValueError naming the
  /// tensor, here and again when the file is written).
  ///
  /// Every name is taken. GGUF tensor names hold 1 to 63 bytes (ggml's
  /// GGML_MAX_NAME of 64 counts the terminating NUL) and no NUL byte (ggml
  /// reads them as C strings), so any other name (a longer one, in
  /// practice) is stored under a short one: its first bytes (at most 54, up
  /// to any NUL, cut at a UTF-8 character boundary), "~" and the CRC-32
  /// (zlib's crc32) of the whole name as 8 lowercase hex digits:
  /// "optimizer/token_and_position_embedding/token_embedding.embeddings/m"
  /// is stored as "optimizer/token_and_position_embedding/token_embedding~32dceb9c".
  /// The file then lists the stored names and the full ones, in
  /// the same order, in two ARRAY[STRING] keys, kLongNamesStoredKey and
  /// kLongNamesFullKey, which GGUFFile reads back: its tensors are found by
  /// their full names. The stored names are chosen when the file is
  /// written: deterministic (the same names give the same file) and
  /// distinct from every other name in the file (if one is taken, the
  /// CRC-32 is seeded with 1, 2, ... until one is free). Files of names
  /// GGUF takes have no such keys and are what earlier versions wrote.
  ///
  /// Throws ValueError for a name given twice, an undefined tensor or (see
  /// above) a quantized one that does not fit its blocks; TypeError for a dtype that cannot be stored as `type`;
  /// ShapeError for a tensor of more than 4 dimensions (GGUF's limit) or no
  /// elements. A scalar (shape {}) is stored with one dimension of 1 and
  /// reads back as shape {1}. A CPU tensor is read when the file is
  /// written; a tensor on another device is copied to the host here.
  void add_tensor(const std::string& name, const Tensor& tensor, TensorType type = TensorType::F32);
  /// The whole file in memory (tests, the fuzzing corpus).
  std::vector<uint8_t> to_bytes() const;
  /// Writes the file crash-safely: to a temporary file in the same folder,
  /// flushed and fsynced, then renamed over `path` (and the folder fsynced),
  /// so `path` always holds either its old contents or the complete new
  /// file. Throws IOError naming the path and the system's reason; the
  /// temporary file is removed on any error.
  WriteStats write(const std::string& path) const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

/// A GGUF file opened for reading: the file is memory-mapped, and the
/// header, metadata and tensor table are parsed and checked at open; tensor
/// data is read only when asked for. Every count, string length, offset and
/// size is checked against the file's length before use, and absurd
/// dimensions or element counts are refused before anything is allocated.
/// Move-only; the mapping lives as long as the object.
class GGUFFile {
 public:
  /// Opens and checks `path`. Throws IOError for a missing or unreadable
  /// file, FormatError for anything malformed: the message names what is
  /// wrong and where (byte offset, key, tensor name). Malformed includes what
  /// ggml refuses or misreads: a tensor name longer than 63 bytes
  /// (GGML_MAX_NAME = 64 counts the terminating NUL), and a tensor name or
  /// metadata key with a NUL byte (ggml reads them as C strings); and a list
  /// of long names (kLongNamesStoredKey, kLongNamesFullKey) that is not two
  /// ARRAY[STRING] of one length, names a tensor the file lacks or twice, or
  /// gives two tensors one name; a tensor of a type tensorgrad does not read
  /// (named by ggml's name and id, with the types read), and a quantized
  /// tensor whose innermost dimension (ne[0]) is not a whole number of its
  /// blocks. When a file has that list, tensors(),
  /// find_tensor(), read() and data() name its tensors by their full names
  /// (TensorInfo::stored_name is the name in the file).
  static GGUFFile open(const std::string& path);
  /// The same checks over bytes in memory (copied), for tests and fuzzing.
  static GGUFFile parse(std::span<const uint8_t> bytes);
  /// Moves the mapping and tables; the moved-from object may only be
  /// assigned to or destroyed (any other call throws StateError).
  ///@{
  GGUFFile(GGUFFile&&) noexcept;
  GGUFFile& operator=(GGUFFile&&) noexcept;
  ///@}
  /// Unmaps the file.
  ~GGUFFile();

  /// The file's GGUF version (always 3: open refuses others).
  uint32_t version() const;
  /// The data alignment: general.alignment, or 32 when the key is absent.
  uint32_t alignment() const;
  /// The file's path ("<memory>" for parse()).
  const std::string& path() const;
  /// Every key/value pair, in file order. On a temporary file (as in
  /// `for (auto& e : GGUFFile::open(p).metadata())`) a copy, so the loop
  /// never reads a file already closed.
  ///@{
  const std::vector<MetadataEntry>& metadata() const&;
  std::vector<MetadataEntry> metadata() &&;
  ///@}
  /// The value of `key`, or null.
  const MetadataValue* find(const std::string& key) const;
  /// Typed access; each throws FormatError naming the key (and the file)
  /// when it is missing or of another type. Narrower types of the same kind
  /// are accepted: get_u32 takes UINT8/16/32, get_u64 any unsigned integer,
  /// get_i64 any signed integer, get_f64 FLOAT32 or FLOAT64; the array
  /// getters likewise for their elements.
  ///@{
  std::string get_string(const std::string& key) const;
  uint32_t get_u32(const std::string& key) const;
  uint64_t get_u64(const std::string& key) const;
  int64_t get_i64(const std::string& key) const;
  double get_f64(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  std::vector<uint64_t> get_u64_array(const std::string& key) const;
  std::vector<int64_t> get_i64_array(const std::string& key) const;
  std::vector<double> get_f64_array(const std::string& key) const;
  std::vector<std::string> get_string_array(const std::string& key) const;
  ///@}

  /// The tensor table, in file order (a copy on a temporary file, as metadata()).
  ///@{
  const std::vector<TensorInfo>& tensors() const&;
  std::vector<TensorInfo> tensors() &&;
  ///@}
  /// The tensor named `name`, or null.
  const TensorInfo* find_tensor(const std::string& name) const;
  /// A new tensor holding the tensor's values: float32 for F32, F16 and BF16
  /// (converted) and for Q8_0, Q4_0, Q4_K and Q6_K (dequantized by ggml's
  /// block formats, dequantize_row), int32 for I32, int64 for I64. Nothing
  /// but the result is allocated. Throws ValueError for a name not in the
  /// file.
  ///
  /// A file opened with open() is memory-mapped: once the tensor is read,
  /// its pages are given back to the system (madvise MADV_DONTNEED), so that
  /// loading a whole file holds its tensors' values and not also the file.
  /// data() stays valid: the pages are read from the file again if touched.
  Tensor read(const std::string& name) const;
  /// The same into `out`, which must have the tensor's shape (ShapeError
  /// naming both) and its dtype (TypeError): loading weights in place.
  /// Converted types reach a tensor on another device through a small host
  /// buffer, in chunks; the file's pages are given back as by read().
  void read_into(const std::string& name, Tensor& out) const;
  /// The tensor's raw bytes in the file (valid while this object lives):
  /// its blocks, for a quantized type (tensor_type_row_bytes per row).
  /// Throws ValueError for a name not in the file.
  std::span<const uint8_t> data(const std::string& name) const;
  /// Gives the memory-mapped pages of the tensor's bytes back to the system
  /// (what read() does after reading), for a caller that used data(): the
  /// process's resident memory no longer counts them, and data() stays valid
  /// (the pages are read from the file again when touched). Nothing happens
  /// for parse()'s in-memory copy. Throws ValueError for a name not in the
  /// file.
  void release_pages(const std::string& name) const;

 private:
  struct Impl;
  explicit GGUFFile(std::unique_ptr<Impl> impl);
  // impl_, or StateError naming `call` for a moved-from object.
  const Impl* live(const char* call) const;
  std::unique_ptr<Impl> impl_;
};

/// IEEE half and bfloat16 conversions (round to nearest even; NaN stays NaN).
///@{
uint16_t float_to_f16(float value);
float f16_to_float(uint16_t value);
uint16_t float_to_bf16(float value);
float bf16_to_float(uint16_t value);
///@}

}  // namespace tensorgrad::io
