#pragma once
// A device whose memory the host cannot read, to prove that everything above
// the backend reaches device memory only through it. Its storage's data() is
// an address in a reserved mapping without access rights (a host read
// through it faults); the bytes live in a private buffer that only its
// copies and its launcher reach. The launcher translates each kernel
// argument's address into that buffer and runs the CPU's kernels there, so
// results are the CPU's bit for bit. Every copy between host and device is
// counted.
#include <sys/mman.h>

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "tensorgrad/tensorgrad.h"

namespace test_support {

class SealedStorage final : public tensorgrad::Storage {
 public:
  SealedStorage(tensorgrad::Device device, size_t bytes)
      : Storage(device, reserve(bytes), bytes), bytes_(bytes ? bytes : 1) {
    std::lock_guard lock(mutex());
    live()[reinterpret_cast<uintptr_t>(data())] = this;
  }
  ~SealedStorage() override {
    {
      std::lock_guard lock(mutex());
      live().erase(reinterpret_cast<uintptr_t>(data()));
    }
    munmap(data(), span(nbytes()));
  }
  void copy_from_host(size_t offset, const void* src, size_t bytes) override {
    ++uploads;
    upload_bytes += bytes;
    std::memmove(bytes_.data() + offset, src, bytes);
  }
  void copy_to_host(size_t offset, void* dst, size_t bytes) const override {
    ++downloads;
    download_bytes += bytes;
    std::memmove(dst, bytes_.data() + offset, bytes);
  }
  void copy_within_device(size_t offset, const Storage& src, size_t src_offset, size_t bytes) override {
    ++within;
    const auto& from = dynamic_cast<const SealedStorage&>(src);
    std::memmove(bytes_.data() + offset, from.bytes_.data() + src_offset, bytes);
  }

  /// The private host address behind a device address of a live storage;
  /// throws std::logic_error for any other address (host memory reaching a
  /// kernel is a hole in the seam).
  static void* translate(void* device_address) {
    const auto at = reinterpret_cast<uintptr_t>(device_address);
    std::lock_guard lock(mutex());
    auto it = live().upper_bound(at);
    if (it != live().begin()) {
      --it;
      SealedStorage* s = it->second;
      if (at - it->first <= s->nbytes()) return s->bytes_.data() + (at - it->first);
    }
    throw std::logic_error("a kernel of the sealed device was handed memory that is not the device's");
  }

  static void reset_counts() { uploads = downloads = within = 0, upload_bytes = download_bytes = 0; }
  static inline int uploads = 0, downloads = 0, within = 0;
  static inline size_t upload_bytes = 0, download_bytes = 0;

 private:
  static size_t span(size_t bytes) { return bytes ? bytes : 1; }
  static void* reserve(size_t bytes) {
    void* p = mmap(nullptr, span(bytes), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw tensorgrad::MemoryError("sealed device: no address space left");
    return p;
  }
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::map<uintptr_t, SealedStorage*>& live() {
    static std::map<uintptr_t, SealedStorage*> m;
    return m;
  }
  std::vector<char> bytes_;
};

class SealedLauncher final : public tensorgrad::KernelLauncher {
 public:
  explicit SealedLauncher(std::unique_ptr<tensorgrad::KernelLauncher> cpu) : cpu_(std::move(cpu)) {}
  void begin_run() override { cpu_->begin_run(); }
  void end_run() override { cpu_->end_run(); }
  void launch(tensorgrad::OpKind op, const tensorgrad::OpAttrs& attrs, std::span<const tensorgrad::KernelArg> in,
              const tensorgrad::KernelArg& out) override {
    tensorgrad::KernelArg args[tensorgrad::Node::kMaxInputs];
    for (size_t k = 0; k < in.size(); ++k) args[k] = {SealedStorage::translate(in[k].data), in[k].shape, in[k].dtype};
    const tensorgrad::KernelArg o{SealedStorage::translate(out.data), out.shape, out.dtype};
    cpu_->launch(op, attrs, {args, in.size()}, o);
  }

 private:
  std::unique_ptr<tensorgrad::KernelLauncher> cpu_;
};

class SealedBackend : public tensorgrad::Backend {
 public:
  explicit SealedBackend(tensorgrad::Device device) : device_(device) {}
  tensorgrad::Device device() const override { return device_; }
  std::string name() const override { return "sealed test device"; }
  bool has_kernel(tensorgrad::OpKind op) const override { return tensorgrad::cpu_backend()->has_kernel(op); }
  std::shared_ptr<tensorgrad::Storage> allocate(size_t bytes) const override {
    return std::make_shared<SealedStorage>(device_, bytes);
  }
  std::unique_ptr<tensorgrad::KernelLauncher> make_launcher(double flops) const override {
    return std::make_unique<SealedLauncher>(tensorgrad::cpu_backend()->make_launcher(flops));
  }
  // The CPU's fused kernels too, so that the graphs and the numbers are the CPU's.
  tensorgrad::FusionOptions fusions() const override { return tensorgrad::cpu_backend()->fusions(); }

 private:
  tensorgrad::Device device_;
};

}  // namespace test_support
