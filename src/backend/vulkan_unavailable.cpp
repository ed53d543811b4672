// The Vulkan entry points of a build without the Vulkan backend
// (TENSORGRAD_VULKAN=OFF, or AUTO without the headers or glslc): selecting
// Vulkan says so.
#include "backend/vulkan/vulkan_backend.h"
#include "tensorgrad/core/error.h"

#ifndef TENSORGRAD_WITH_VULKAN
namespace tensorgrad::vulkan {

BackendRegistration registration() {
  return {"vulkan", [] { return std::vector<DeviceInfo>{}; },
          [](int) -> std::shared_ptr<const Backend> {
            throw StateError(
                "no Vulkan device: this tensorgrad was built without its Vulkan backend (TENSORGRAD_VULKAN=OFF, or "
                "AUTO found no Vulkan headers or glslc); install them (scripts/setup.sh does: libvulkan-dev, glslc) "
                "and rebuild, or use Device::CPU");
          }};
}

bool built() { return false; }
uint64_t driver_allocation_count() { return 0; }
void inject(VulkanFault) {}

}  // namespace tensorgrad::vulkan
#endif
