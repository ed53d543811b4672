#pragma once
// Crash-safe replacement of a file (DESIGN.md, "saved files"): the new
// contents go to a temporary file `<target>.tmp-XXXXXX` in the target's
// folder, which is flushed to disk and renamed over the target, and the
// folder is then synced, so the target always holds either its old contents
// or the complete new ones. Private to the io layer.
#include <cstddef>
#include <string>

namespace tensorgrad::io {

/// A temporary file that becomes `target` on commit(). Destroying it without
/// commit() (an exception on the way) removes the temporary file.
class AtomicFile {
 public:
  /// Creates the temporary file next to `target`. Throws IOError naming the
  /// target, the folder and the system's reason (a missing folder, no
  /// permission).
  explicit AtomicFile(std::string target);
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();

  /// Appends `size` bytes. Throws IOError (disk full, ...).
  void write(const void* data, size_t size);
  /// Bytes written so far.
  size_t bytes_written() const { return written_; }
  /// fsyncs and closes the file, renames it over the target, and fsyncs the
  /// folder. Returns the seconds spent in the two fsyncs. Throws IOError;
  /// the temporary file is then removed.
  double commit();
  /// The temporary file's path (tests).
  const std::string& temp_path() const { return temp_; }

 private:
  [[noreturn]] void fail(const std::string& what, int err);
  void discard() noexcept;

  std::string target_;
  std::string dir_;
  std::string temp_;
  int fd_ = -1;
  size_t written_ = 0;
  bool committed_ = false;
};

}  // namespace tensorgrad::io
