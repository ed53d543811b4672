#pragma once
// Helpers of the tests that write files: a temporary folder, and comparing
// and rewriting GGUF files (tests/io/, tests/ag/, tests/nn/, tests/data/).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <system_error>

#include "tensorgrad/core/tensor.h"
#include "tensorgrad/io/gguf.h"

namespace test_support {

/// A fresh folder under the system's temporary one, removed with everything
/// in it when the object goes; `dir / "name"` is a path inside it.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix = "tg_test") {
    static int n = 0;
    path = std::filesystem::temp_directory_path() /
           (prefix + "_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

/// Same shape, dtype and bits.
inline bool bit_equal(const tensorgrad::Tensor& a, const tensorgrad::Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         (a.nbytes() == 0 || std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0);
}

inline bool same_bytes(const void* a, const void* b, size_t n) { return n == 0 || std::memcmp(a, b, n) == 0; }

/// Two GGUF files with the same metadata and tensors, in the same order, bit for bit.
inline ::testing::AssertionResult same_files(const std::string& a_path, const std::string& b_path) {
  namespace io = tensorgrad::io;
  const io::GGUFFile a = io::GGUFFile::open(a_path), b = io::GGUFFile::open(b_path);
  if (a.metadata().size() != b.metadata().size())
    return ::testing::AssertionFailure() << a.metadata().size() << " vs " << b.metadata().size() << " keys";
  for (size_t i = 0; i < a.metadata().size(); ++i) {
    const io::MetadataEntry &x = a.metadata()[i], &y = b.metadata()[i];
    const bool floats_equal =
        x.value.floats.size() == y.value.floats.size() &&
        same_bytes(x.value.floats.data(), y.value.floats.data(), x.value.floats.size() * sizeof(double));
    if (x.key != y.key || x.value.type != y.value.type || x.value.ints != y.value.ints || !floats_equal ||
        x.value.strings != y.value.strings)
      return ::testing::AssertionFailure() << "metadata '" << x.key << "' differs";
  }
  if (a.tensors().size() != b.tensors().size())
    return ::testing::AssertionFailure() << a.tensors().size() << " vs " << b.tensors().size() << " tensors";
  for (size_t i = 0; i < a.tensors().size(); ++i) {
    const io::TensorInfo &x = a.tensors()[i], &y = b.tensors()[i];
    const auto dx = a.data(x.name), dy = b.data(y.name);
    if (x.name != y.name || x.shape != y.shape || x.type != y.type || dx.size() != dy.size() ||
        !same_bytes(dx.data(), dy.data(), dx.size()))
      return ::testing::AssertionFailure() << "tensor '" << x.name << "' differs";
  }
  return ::testing::AssertionSuccess() << a.tensors().size() << " tensors, " << a.metadata().size() << " keys";
}

/// Writes to `to` the metadata and tensors of the GGUF file `from`, in the
/// same order and alignment, each pair first handed to `edit`, which may
/// change its key and value or return false to drop it: a file as another
/// writer (an older tensorgrad) would have written it. Copies the value types
/// tensorgrad's files hold (STRING, BOOL, UINT32, INT32, UINT64, INT64,
/// FLOAT32, FLOAT64 and arrays of UINT64, INT64, FLOAT64, STRING); another
/// fails the test.
inline void copy_gguf(const std::string& from, const std::string& to,
                      const std::function<bool(std::string& key, tensorgrad::io::MetadataValue& value)>& edit) {
  namespace io = tensorgrad::io;
  using VT = io::ValueType;
  const io::GGUFFile f = io::GGUFFile::open(from);
  io::GGUFWriter w(f.alignment());
  for (io::MetadataEntry e : f.metadata()) {
    // The writer writes these itself: the alignment from its constructor, the long names from add_tensor's.
    if (e.key == "general.alignment" || e.key == io::kLongNamesStoredKey || e.key == io::kLongNamesFullKey) continue;
    if (!edit(e.key, e.value)) continue;
    const io::MetadataValue& v = e.value;
    switch (v.type) {
      case VT::String: w.set_string(e.key, v.strings.at(0)); break;
      case VT::Bool: w.set_bool(e.key, v.ints.at(0) != 0); break;
      case VT::UInt32: w.set_u32(e.key, uint32_t(v.ints.at(0))); break;
      case VT::Int32: w.set_i32(e.key, int32_t(v.ints.at(0))); break;
      case VT::UInt64: w.set_u64(e.key, uint64_t(v.ints.at(0))); break;
      case VT::Int64: w.set_i64(e.key, v.ints.at(0)); break;
      case VT::Float32: w.set_f32(e.key, float(v.floats.at(0))); break;
      case VT::Float64: w.set_f64(e.key, v.floats.at(0)); break;
      case VT::Array:
        if (v.element_type == VT::UInt64) {
          const std::vector<uint64_t> u(v.ints.begin(), v.ints.end());
          w.set_u64_array(e.key, u);
        } else if (v.element_type == VT::Int64) {
          w.set_i64_array(e.key, v.ints);
        } else if (v.element_type == VT::Float64) {
          w.set_f64_array(e.key, v.floats);
        } else if (v.element_type == VT::String) {
          w.set_string_array(e.key, v.strings);
        } else {
          ADD_FAILURE() << "copy_gguf: '" << e.key << "' is an array of " << io::value_type_name(v.element_type)
                        << ", which it does not copy";
        }
        break;
      case VT::UInt8:
      case VT::Int8:
      case VT::UInt16:
      case VT::Int16:
        ADD_FAILURE() << "copy_gguf: '" << e.key << "' is " << io::value_type_name(v.type)
                      << ", which it does not copy";
        break;
    }
  }
  for (const io::TensorInfo& t : f.tensors()) w.add_tensor(t.name, f.read(t.name), t.type);
  w.write(to);
}

}  // namespace test_support
