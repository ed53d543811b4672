#pragma once
// How much memory a plan may ask for: bad input is refused with an exception
// before it costs anything.
#include <cstdint>
#include <string>

namespace tensorgrad {

/// Bytes of physical memory of this machine (sysconf(_SC_PHYS_PAGES) times
/// the page size); 0 when the system does not say.
uint64_t physical_memory_bytes();

/// Throws ValueError when `bytes` exceed the machine's physical memory (no
/// plan that large can run without swapping the machine to a halt). The
/// message reads "<what> would need <bytes> bytes (<GiB>), more than this
/// machine's physical memory (<bytes>); <advice>". Allocates nothing when the
/// bytes fit.
void check_fits_in_memory(uint64_t bytes, const std::string& what, const char* advice);

}  // namespace tensorgrad
