#include "tensorgrad/core/storage.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "core/device_allocators.h"
#include "tensorgrad/core/error.h"

namespace tensorgrad {

namespace {
constexpr size_t kAlignment = 64;

struct DeviceAllocators {
  std::mutex mutex;
  std::map<std::string, DeviceAllocator> by_kind;
};
DeviceAllocators& allocators() {
  static DeviceAllocators* a = new DeviceAllocators();  // never destroyed: storages may outlive statics
  return *a;
}
}  // namespace

std::shared_ptr<CpuStorage> CpuStorage::allocate(size_t bytes) {
  if (bytes > (size_t(1) << 48))
    throw ValueError("cannot allocate " + std::to_string(bytes) + " bytes (more than 2^48); use smaller dimensions");
  const size_t rounded = bytes == 0 ? kAlignment : (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (!p)
    throw MemoryError("out of memory allocating " + std::to_string(bytes) + " bytes; use a smaller batch or model");
  try {
    return std::make_shared<CpuStorage>(p, bytes, true);
  } catch (...) {
    std::free(p);
    throw;
  }
}

std::shared_ptr<CpuStorage> CpuStorage::wrap(void* data, size_t bytes) {
  return std::make_shared<CpuStorage>(data, bytes, false);
}

CpuStorage::~CpuStorage() {
  if (owned_) std::free(data());
}

void CpuStorage::copy_from_host(size_t offset, const void* src, size_t bytes) {
  if (bytes) std::memmove(static_cast<char*>(data()) + offset, src, bytes);
}

void CpuStorage::copy_to_host(size_t offset, void* dst, size_t bytes) const {
  if (bytes) std::memmove(dst, static_cast<const char*>(data()) + offset, bytes);
}

void CpuStorage::copy_within_device(size_t offset, const Storage& src, size_t src_offset, size_t bytes) {
  char* to = static_cast<char*>(data()) + offset;
  const char* from = static_cast<const char*>(src.data()) + src_offset;
  if (bytes && to != from) std::memmove(to, from, bytes);
}

void copy_bytes(Storage& dst, size_t dst_offset, const Storage& src, size_t src_offset, size_t bytes) {
  if (dst.device() == src.device()) {
    dst.copy_within_device(dst_offset, src, src_offset, bytes);
  } else if (dst.device() == Device::CPU) {
    src.copy_to_host(src_offset, static_cast<char*>(dst.data()) + dst_offset, bytes);
  } else if (src.device() == Device::CPU) {
    dst.copy_from_host(dst_offset, static_cast<const char*>(src.data()) + src_offset, bytes);
  } else {
    throw StateError(std::string("no copy from ") + device_name(src.device()) + " to " + device_name(dst.device()) +
                     " exists; copy through a CPU tensor");
  }
}

std::shared_ptr<Storage> allocate_storage(Device device, size_t bytes) {
  if (device == Device::CPU) return CpuStorage::allocate(bytes);
  DeviceAllocator allocate;
  {
    std::lock_guard<std::mutex> lock(allocators().mutex);
    const auto it = allocators().by_kind.find(device.kind());
    if (it != allocators().by_kind.end()) allocate = it->second;
  }
  if (!allocate) throw_unregistered_device(device);
  return allocate(device, bytes);
}

void install_device_allocator(const std::string& kind, DeviceAllocator allocator) {
  std::lock_guard<std::mutex> lock(allocators().mutex);
  allocators().by_kind[kind] = std::move(allocator);
}

void throw_unregistered_device(Device device) {
  std::string kinds;
  {
    std::lock_guard<std::mutex> lock(allocators().mutex);
    for (const auto& [kind, allocator] : allocators().by_kind) kinds += (kinds.empty() ? "" : ", ") + kind;
  }
  throw StateError("no backend is registered for device " + device.str() + " (its kind '" + device.kind() +
                   "' is not one of the registered kinds: " + (kinds.empty() ? std::string("cpu") : kinds) +
                   "); use a device that tensorgrad::devices() lists, or Device::CPU");
}

}  // namespace tensorgrad
