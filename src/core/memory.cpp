#include "tensorgrad/core/memory.h"

#include <unistd.h>

#include <cstdio>

#include "tensorgrad/core/error.h"

namespace tensorgrad {

uint64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
}

void check_fits_in_memory(uint64_t bytes, const std::string& what, const char* advice) {
  const uint64_t physical = physical_memory_bytes();
  if (physical == 0 || bytes <= physical) return;
  char sizes[128];
  std::snprintf(sizes, sizeof sizes, " bytes (%.1f GiB), more than this machine's physical memory (%llu bytes, %.1f GiB); ",
                double(bytes) / double(1ull << 30), (unsigned long long)physical, double(physical) / double(1ull << 30));
  throw ValueError(what + " would need " + std::to_string(bytes) + sizes + advice);
}

}  // namespace tensorgrad
