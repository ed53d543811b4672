#pragma once
// The device seam: a tensor owns its memory through a Storage, which a
// backend implements for its device. The CPU's storage lives here, beside
// the interface, because every layer makes host tensors; other devices'
// storage comes from their backend in the registry (backend/registry.h).
#include <cstddef>
#include <memory>

#include "tensorgrad/core/dtype.h"

namespace tensorgrad {

/// A block of bytes on one device, shared by the tensors that view it.
/// `data()` is the device's address of byte 0 (a host pointer on the CPU, a
/// device pointer elsewhere): only the backend of that device may read or
/// write through it; everyone else copies with the functions below.
class Storage {
 public:
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  virtual ~Storage() = default;

  /// The device the memory is on.
  Device device() const { return device_; }
  /// The memory's size in bytes.
  size_t nbytes() const { return nbytes_; }
  /// The device address of byte 0.
  void* data() const { return data_; }

  /// Copies `bytes` host bytes from `src` into [offset, offset + bytes).
  /// The caller has checked the range (Tensor does).
  virtual void copy_from_host(size_t offset, const void* src, size_t bytes) = 0;
  /// Copies [offset, offset + bytes) into the host memory at `dst`.
  virtual void copy_to_host(size_t offset, void* dst, size_t bytes) const = 0;
  /// Copies `bytes` from `src` at `src_offset` into [offset, offset + bytes),
  /// both on this storage's device (copy_bytes routes copies between devices
  /// through the host side of one of them). Overlapping ranges are allowed.
  virtual void copy_within_device(size_t offset, const Storage& src, size_t src_offset, size_t bytes) = 0;

 protected:
  /// For a backend's subclass: `nbytes` at device address `data` on
  /// `device`, which the subclass owns and frees.
  Storage(Device device, void* data, size_t nbytes) : device_(device), data_(data), nbytes_(nbytes) {}

 private:
  Device device_;
  void* data_;
  size_t nbytes_;
};

/// Host memory: owned (64-byte aligned, from `allocate`) or a view of
/// caller memory (`wrap`: no copy, not freed). An allocator that keeps its
/// own blocks (the eager API's cache) derives from it, passing owned = false
/// and returning the block in its destructor.
class CpuStorage : public Storage {
 public:
  /// Owned, uninitialised, 64-byte aligned (at least 64 bytes are taken, so
  /// an empty tensor has an address too). Throws ValueError for more than
  /// 2^48 bytes and MemoryError when the allocation fails.
  static std::shared_ptr<CpuStorage> allocate(size_t bytes);
  /// Caller memory, not freed here; the caller keeps it alive.
  static std::shared_ptr<CpuStorage> wrap(void* data, size_t bytes);

  /// `owned`: free `data` (from std::aligned_alloc) in the destructor.
  CpuStorage(void* data, size_t bytes, bool owned) : Storage(Device::CPU, data, bytes), owned_(owned) {}
  ~CpuStorage() override;
  void copy_from_host(size_t offset, const void* src, size_t bytes) override;
  void copy_to_host(size_t offset, void* dst, size_t bytes) const override;
  void copy_within_device(size_t offset, const Storage& src, size_t src_offset, size_t bytes) override;

 private:
  bool owned_;
};

/// Copies `bytes` from `src` at `src_offset` to `dst` at `dst_offset`,
/// whatever their devices: within one device its backend copies; between
/// the host and a device the device's storage copies in or out. Throws
/// StateError for two different non-CPU devices (no such pair exists yet).
void copy_bytes(Storage& dst, size_t dst_offset, const Storage& src, size_t src_offset, size_t bytes);

/// Allocates `bytes` of uninitialised memory on `device`. The CPU's is
/// CpuStorage::allocate; every other device's comes from its backend
/// (Backend::allocate), found in the backend registry (backend/registry.h),
/// as ggml's backends each own their buffers' allocation. Throws ValueError
/// for an impossible size, MemoryError when the device is out of memory,
/// and StateError when the device is not available: no backend registered
/// its kind, its backend found no such device, or the backend cannot run
/// (CUDA's message starts "no CUDA device" and says why).
std::shared_ptr<Storage> allocate_storage(Device device, size_t bytes);

}  // namespace tensorgrad
