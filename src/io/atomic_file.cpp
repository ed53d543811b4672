// See atomic_file.h.
#include "io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "tensorgrad/core/error.h"

namespace tensorgrad::io {

namespace {

// The folder part of `path` ("." for a bare file name).
std::string folder_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// The process's umask, read without changing it (umask() would, racily).
mode_t current_umask() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Umask:", 0) == 0) return mode_t(std::strtoul(line.c_str() + 6, nullptr, 8));
  }
  return 022;
}

// A symbolic link is written through: the file it points to is replaced and
// the link stays (as `cp` and editors that save in place do). A dangling
// link is replaced itself, there being nothing behind it.
std::string through_links(std::string path) {
  std::error_code ec;
  if (!std::filesystem::is_symlink(path, ec)) return path;
  const std::filesystem::path resolved = std::filesystem::canonical(path, ec);
  return ec ? path : resolved.string();
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

AtomicFile::AtomicFile(std::string target) : target_(through_links(std::move(target))), dir_(folder_of(target_)) {
  std::vector<char> name(target_.begin(), target_.end());
  const char suffix[] = ".tmp-XXXXXX";
  name.insert(name.end(), suffix, suffix + sizeof suffix);  // with the NUL
  fd_ = ::mkstemp(name.data());
  if (fd_ < 0) {
    const int err = errno;
    throw IOError("cannot write '" + target_ + "': creating a temporary file in folder '" + dir_ +
                  "' failed: " + std::strerror(err) + "; check that the folder exists and is writable");
  }
  temp_ = name.data();
  // mkstemp makes the file 0600; give it the mode the target has, or the one
  // a plain create would give.
  struct stat st {};
  const mode_t mode = ::stat(target_.c_str(), &st) == 0 ? (st.st_mode & 07777) : (0666 & ~current_umask());
  if (::fchmod(fd_, mode) != 0) fail("setting the temporary file's permissions", errno);
}

AtomicFile::~AtomicFile() {
  if (!committed_) discard();
}

void AtomicFile::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_.empty()) ::unlink(temp_.c_str());
  temp_.clear();
}

void AtomicFile::fail(const std::string& what, int err) {
  const std::string temp = temp_;
  discard();
  throw IOError("cannot write '" + target_ + "': " + what + " (temporary file '" + temp + "') failed: " +
                std::strerror(err) + "; the target is unchanged");
}

void AtomicFile::write(const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const size_t chunk = size < (size_t(1) << 30) ? size : (size_t(1) << 30);
    const ssize_t n = ::write(fd_, p, chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("writing", errno);
    }
    p += n;
    size -= size_t(n);
    written_ += size_t(n);
  }
}

double AtomicFile::commit() {
  double fsync_seconds = 0.0;
  auto t0 = std::chrono::steady_clock::now();
  if (::fsync(fd_) != 0) fail("fsync", errno);
  fsync_seconds += seconds_since(t0);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("closing", errno);
  if (::rename(temp_.c_str(), target_.c_str()) != 0) fail("renaming over the target", errno);
  committed_ = true;
  temp_.clear();
  // The rename is durable once the folder's entry is on disk.
  t0 = std::chrono::steady_clock::now();
  const int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    const int err = errno;
    throw IOError("wrote '" + target_ + "' but could not open its folder '" + dir_ + "' to sync it: " +
                  std::strerror(err));
  }
  const int rc = ::fsync(dfd);
  const int err = errno;
  ::close(dfd);
  if (rc != 0 && err != EINVAL)  // some file systems cannot sync a folder
    throw IOError("wrote '" + target_ + "' but syncing its folder '" + dir_ + "' failed: " + std::strerror(err));
  fsync_seconds += seconds_since(t0);
  return fsync_seconds;
}

}  // namespace tensorgrad::io
