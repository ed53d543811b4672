#pragma once
// The Vulkan backend's entry points (device kind "vulkan"). Built from
// vulkan/*.cpp when CMake's TENSORGRAD_VULKAN finds the Vulkan headers and
// glslc, else from vulkan_unavailable.cpp, whose registration lists no
// device and says why.
#include <cstdint>

#include "tensorgrad/backend/registry.h"

namespace tensorgrad::vulkan {

/// The registration of kind "vulkan": one device per usable physical device.
BackendRegistration registration();
/// Whether the Vulkan backend was built.
bool built();
/// The driver's host allocations through the allocation callbacks given to
/// its devices (0 without the backend).
uint64_t driver_allocation_count();
/// backend.h's inject_vulkan_fault.
void inject(VulkanFault fault);

}  // namespace tensorgrad::vulkan
