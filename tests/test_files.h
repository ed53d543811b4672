#pragma once
// Helpers of the tests that write files and pin the thread count
// (test_saving.cpp, test_fit_checkpoint.cpp).
#include <unistd.h>

#include <filesystem>
#include <string>

#include "tensorgrad/core/threads.h"

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

}  // namespace test_support
