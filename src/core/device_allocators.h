#pragma once
// The storage allocators of the devices other than the CPU, by device kind.
// The backend registry (backend/registry.h) installs one for every kind it
// registers and allocate_storage calls it: core cannot call the registry
// (a layer only uses the ones below it), so the registry hands its
// allocators down.
#include <functional>
#include <memory>
#include <string>

#include "tensorgrad/core/storage.h"

namespace tensorgrad {

/// Memory on `device` (of the kind the allocator was installed for).
using DeviceAllocator = std::function<std::shared_ptr<Storage>(Device device, size_t bytes)>;

/// Installs `kind`'s allocator, replacing an earlier one.
void install_device_allocator(const std::string& kind, DeviceAllocator allocator);

/// Throws StateError: no backend is registered for `device`'s kind (the
/// message names the kinds that are).
[[noreturn]] void throw_unregistered_device(Device device);

}  // namespace tensorgrad
