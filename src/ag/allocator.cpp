#include "ag/allocator.h"

#include "ag/pool.h"

#include <atomic>
#include <cstdlib>
#include <thread>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "tensorgrad/ag/tensor.h"
#include "tensorgrad/core/error.h"

namespace tensorgrad::ag {

namespace {

constexpr size_t kAlignment = 64;

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

}  // namespace

MemoryStats memory_stats() { return allocator().stats(); }
void reset_memory_stats() { allocator().reset_counts(); }
void empty_cache() { allocator().empty(); }

namespace detail {

tensorgrad::Tensor cached_empty(const Shape& shape, DType dtype) {
  size_t bytes = 0;
  if (__builtin_mul_overflow(size_t(shape.numel()), dtype_size(dtype), &bytes) || bytes > (size_t(1) << 48))
    throw ValueError("a tensor of shape " + shape.str() + " is too large to allocate; use smaller dimensions");
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

}  // namespace detail

}  // namespace tensorgrad::ag
