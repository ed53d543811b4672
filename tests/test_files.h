#pragma once
// Helpers of the tests that write files and pin the thread count
// (test_saving.cpp, test_checkpoint.cpp, test_fit_checkpoint.cpp,
// test_io_trial.cpp).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "tensorgrad/core/tensor.h"
#include "tensorgrad/core/threads.h"
#include "tensorgrad/io/gguf.h"

namespace test_support {

/// Restores the thread count when a test ends, whatever happens in it.
struct ThreadsGuard {
  int saved = tensorgrad::num_threads();
  ~ThreadsGuard() { tensorgrad::set_num_threads(saved); }
};

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
  ~TempDir() { std::filesystem::remove_all(path); }
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

}  // namespace test_support
