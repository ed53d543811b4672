#include "ag/pool.h"

#include <mutex>
#include <vector>

namespace tensorgrad::ag::detail {

namespace {

constexpr size_t kClassBytes = 16;
constexpr size_t kClasses = kMaxPooledBytes / kClassBytes;
static_assert(alignof(std::max_align_t) <= kClassBytes, "size classes keep operator new's alignment");

struct FreeLists {
  std::vector<void*> by_class[kClasses];
};

// Every thread's lists stay reachable from here and are never destroyed:
// a block freed during static destruction, or after its thread ended, still
// has a list to go to.
FreeLists* new_lists() {
  static std::mutex mutex;
  static auto* all = new std::vector<FreeLists*>();
  auto* lists = new FreeLists();
  std::lock_guard<std::mutex> lock(mutex);
  all->push_back(lists);
  return lists;
}

FreeLists& lists() {
  thread_local FreeLists* mine = new_lists();
  return *mine;
}

size_t size_class(size_t bytes) { return (bytes + kClassBytes - 1) / kClassBytes - 1; }

}  // namespace

void* pool_allocate(size_t bytes) {
  if (bytes == 0 || bytes > kMaxPooledBytes) return ::operator new(bytes);
  std::vector<void*>& list = lists().by_class[size_class(bytes)];
  if (list.empty()) return ::operator new((size_class(bytes) + 1) * kClassBytes);
  void* p = list.back();
  list.pop_back();
  return p;
}

void pool_deallocate(void* p, size_t bytes) noexcept {
  if (bytes == 0 || bytes > kMaxPooledBytes) {
    ::operator delete(p);
    return;
  }
  try {
    lists().by_class[size_class(bytes)].push_back(p);
  } catch (...) {  // no memory to grow the list: give the block back instead
    ::operator delete(p);
  }
}

}  // namespace tensorgrad::ag::detail
