#include "ag/allocator.h"

#include "ag/pool.h"

#include <atomic>
#include <deque>
#include <optional>
#include <cstdlib>
#include <thread>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "tensorgrad/ag/tensor.h"
#include "tensorgrad/backend/backend.h"
#include "tensorgrad/core/error.h"

namespace tensorgrad::ag {

namespace {

constexpr size_t kAlignment = 64;
constexpr size_t kDeviceAlignment = 256;

// The cache's lock is held for a few instructions, by the thread running the
// eager ops, so a spin is cheaper than a mutex (which cost 2% of the eager
// Adam step).
class SpinLock {
 public:
  void lock() noexcept {
    while (flag_.exchange(true, std::memory_order_acquire))
      while (flag_.load(std::memory_order_relaxed)) std::this_thread::yield();
  }
  void unlock() noexcept { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};

class CachingAllocator {
 public:
  void* take(size_t bytes) {
    {
      std::lock_guard<SpinLock> lock(lock_);
      auto it = free_.find(bytes);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        ++stats_.hits;
        ++stats_.live_blocks;
        stats_.cached_bytes -= bytes;
        --stats_.cached_blocks;
        return p;
      }
      ++stats_.misses;
      ++stats_.live_blocks;
    }
    void* p = std::aligned_alloc(kAlignment, bytes);
    if (!p) {
      std::lock_guard<SpinLock> lock(lock_);
      --stats_.live_blocks;
      throw MemoryError("out of memory allocating " + std::to_string(bytes) +
                        " bytes for an eager tensor; call ag::empty_cache() to return cached blocks, or use smaller "
                        "tensors");
    }
    return p;
  }

  void give_back(void* p, size_t bytes) {
    std::lock_guard<SpinLock> lock(lock_);
    free_[bytes].push_back(p);
    --stats_.live_blocks;
    stats_.cached_bytes += bytes;
    ++stats_.cached_blocks;
  }

  void empty() {
    std::lock_guard<SpinLock> lock(lock_);
    for (auto& [bytes, blocks] : free_)
      for (void* p : blocks) std::free(p);
    free_.clear();
    stats_.cached_bytes = 0;
    stats_.cached_blocks = 0;
  }

  MemoryStats stats() {
    std::lock_guard<SpinLock> lock(lock_);
    return stats_;
  }

  void reset_counts() {
    std::lock_guard<SpinLock> lock(lock_);
    stats_.hits = stats_.misses = 0;
  }

 private:
  SpinLock lock_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  MemoryStats stats_;
};

// Never destroyed: tensors may outlive static destruction order, and their
// blocks come back here. Cached blocks stay reachable from it at exit.
CachingAllocator& allocator() {
  static CachingAllocator* a = new CachingAllocator();
  return *a;
}

// A cached block as a CPU storage: given back to the cache, not freed, with
// the last tensor that views it.
class CachedBlock final : public CpuStorage {
 public:
  CachedBlock(void* p, size_t bytes, size_t rounded) : CpuStorage(p, bytes, false), rounded_(rounded) {}
  ~CachedBlock() override { allocator().give_back(data(), rounded_); }

 private:
  size_t rounded_;
};

// Device memory, kept as the backend's own storages by device and byte
// size: a block handed out is the backend's storage itself (the backend's
// copies need their own type), shared with a deleter that gives it back.
class DeviceCache {
 public:
  // Never destroyed, as allocator().
  static DeviceCache& instance() {
    static DeviceCache* c = new DeviceCache();
    return *c;
  }

  std::shared_ptr<Storage> take(Device device, size_t bytes) {
    std::shared_ptr<Storage> block;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      PerDevice& d = of(device);
      auto it = d.free.find(bytes);
      if (it != d.free.end() && !it->second.empty()) {
        block = std::move(it->second.back());
        it->second.pop_back();
        ++d.stats.hits;
        --d.stats.cached_blocks;
        d.stats.cached_bytes -= bytes;
      } else {
        ++d.stats.misses;
      }
      ++d.stats.live_blocks;
    }
    try {
      if (!block) {
        const std::shared_ptr<const Backend> b = backend(device);
        try {
          block = b->allocate(bytes);
        } catch (const MemoryError&) {
          empty(device);  // as PyTorch's allocator: free the cached blocks, then try once more
          block = b->allocate(bytes);
        }
      }
      Storage* raw = block.get();
      return std::shared_ptr<Storage>(raw, [block = std::move(block), bytes](Storage*) mutable {
        instance().give_back(std::move(block), bytes);
      });
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      --of(device).stats.live_blocks;
      throw;
    }
  }

  void give_back(std::shared_ptr<Storage> block, size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    PerDevice& d = of(block->device());
    d.free[bytes].push_back(std::move(block));
    --d.stats.live_blocks;
    ++d.stats.cached_blocks;
    d.stats.cached_bytes += bytes;
  }

  // Frees the cached blocks of `device`, or of every device. The storages
  // are destroyed outside the lock: a device storage waits for the
  // device's queued work when it is freed.
  void empty(std::optional<Device> device = std::nullopt) {
    std::vector<std::shared_ptr<Storage>> freed;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (PerDevice& d : devices_) {
        if (device && d.device != *device) continue;
        for (auto& [bytes, blocks] : d.free)
          for (auto& b : blocks) freed.push_back(std::move(b));
        d.free.clear();
        d.stats.cached_blocks = d.stats.cached_bytes = 0;
      }
    }
  }

  MemoryStats stats(Device device) {
    std::lock_guard<std::mutex> lock(mutex_);
    return of(device).stats;
  }

  void reset_counts() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (PerDevice& d : devices_) d.stats.hits = d.stats.misses = 0;
  }

 private:
  struct PerDevice {
    Device device;
    std::unordered_map<size_t, std::vector<std::shared_ptr<Storage>>> free;
    MemoryStats stats;
  };
  PerDevice& of(Device device) {
    for (PerDevice& d : devices_)
      if (d.device == device) return d;
    devices_.push_back({device, {}, {}});
    return devices_.back();
  }
  std::mutex mutex_;
  std::deque<PerDevice> devices_;  // few; references stay valid as it grows
};

DeviceCache& device_cache() { return DeviceCache::instance(); }

size_t checked_bytes(const Shape& shape, DType dtype) {
  size_t bytes = 0;
  if (__builtin_mul_overflow(size_t(shape.numel()), dtype_size(dtype), &bytes) || bytes > (size_t(1) << 48))
    throw ValueError("a tensor of shape " + shape.str() + " is too large to allocate; use smaller dimensions");
  return bytes;
}

}  // namespace

MemoryStats memory_stats() { return allocator().stats(); }
MemoryStats memory_stats(Device device) {
  return device == Device::CPU ? allocator().stats() : device_cache().stats(device);
}
void reset_memory_stats() {
  allocator().reset_counts();
  device_cache().reset_counts();
}
void empty_cache() {
  allocator().empty();
  device_cache().empty();
}

namespace detail {

tensorgrad::Tensor cached_empty(const Shape& shape, DType dtype) {
  const size_t bytes = checked_bytes(shape, dtype);
  const size_t rounded = bytes == 0 ? kAlignment : (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = allocator().take(rounded);
  std::shared_ptr<Storage> block;
  try {
    block = std::allocate_shared<CachedBlock>(PoolAllocator<CachedBlock>(), p, bytes, rounded);
  } catch (...) {
    allocator().give_back(p, rounded);
    throw;
  }
  return tensorgrad::Tensor::adopt(std::move(block), shape, dtype);
}

tensorgrad::Tensor cached_empty(const Shape& shape, DType dtype, Device device) {
  if (device == Device::CPU) return cached_empty(shape, dtype);
  // Device blocks are rounded to 256 bytes (the Vulkan backend's smallest
  // allocation), so that sizes that differ a little share blocks.
  const size_t bytes = checked_bytes(shape, dtype);
  const size_t rounded = bytes == 0 ? kDeviceAlignment : (bytes + kDeviceAlignment - 1) / kDeviceAlignment * kDeviceAlignment;
  return tensorgrad::Tensor::adopt(device_cache().take(device, rounded), shape, dtype);
}

}  // namespace detail

}  // namespace tensorgrad::ag
