#pragma once
// Small-object pooling for the eager API's bookkeeping: a tensor's handle, a
// recorded op and a storage holder are each a small heap object made and
// freed at every op. Kept on per-thread free lists by size class, they stop
// costing a malloc and a free per op in a steady training loop.
#include <cstddef>
#include <new>

namespace tensorgrad::ag::detail {

/// Blocks of at most kMaxPooledBytes from the calling thread's free lists
/// (others from operator new). A block may be freed on another thread; it
/// then joins that thread's lists. The lists are never given back to the
/// system (they hold what the largest step needed).
void* pool_allocate(size_t bytes);
void pool_deallocate(void* p, size_t bytes) noexcept;
inline constexpr size_t kMaxPooledBytes = 512;

/// A standard allocator over the pool, for std::allocate_shared and the
/// control blocks of std::shared_ptr.
template <class T>
struct PoolAllocator {
  using value_type = T;
  PoolAllocator() = default;
  template <class U>
  PoolAllocator(const PoolAllocator<U>&) noexcept {}  // NOLINT: rebinding converts implicitly
  T* allocate(size_t n) { return static_cast<T*>(pool_allocate(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { pool_deallocate(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const PoolAllocator<U>&) const noexcept { return true; }
};

}  // namespace tensorgrad::ag::detail
