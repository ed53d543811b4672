// Loading the Vulkan loader at run time (api.h).
#include "backend/vulkan/api.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include "tensorgrad/core/error.h"

namespace tensorgrad::vulkan {

Api& api() {
  static Api* table = new Api();  // never destroyed: storages may outlive statics
  return *table;
}

const std::string& load_loader() {
  static const std::string* reason = [] {
    const char* env = std::getenv("TENSORGRAD_VULKAN_LOADER");
    const std::string name = env && *env ? env : "libvulkan.so.1";
    void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* err = dlerror();
      return new std::string("the Vulkan loader " + name + " could not be opened (" + (err ? err : "unknown") +
                             "); install it (Debian: apt-get install libvulkan1 mesa-vulkan-drivers)");
    }
    Api& a = api();
    a.vkGetInstanceProcAddr = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(lib, "vkGetInstanceProcAddr"));
    if (!a.vkGetInstanceProcAddr)
      return new std::string("the Vulkan loader " + name + " has no vkGetInstanceProcAddr; it is not a Vulkan loader");
#define TG_VK_LOAD(fn) a.fn = reinterpret_cast<PFN_##fn>(a.vkGetInstanceProcAddr(nullptr, #fn));
    TG_VK_GLOBAL_FUNCTIONS(TG_VK_LOAD)
#undef TG_VK_LOAD
    if (!a.vkCreateInstance || !a.vkEnumerateInstanceVersion)
      return new std::string("the Vulkan loader " + name + " is older than Vulkan 1.1; tensorgrad needs 1.2");
    return new std::string();
  }();
  return *reason;
}

void load_instance_functions(VkInstance instance) {
  Api& a = api();
#define TG_VK_LOAD(fn) a.fn = reinterpret_cast<PFN_##fn>(a.vkGetInstanceProcAddr(instance, #fn));
  TG_VK_INSTANCE_FUNCTIONS(TG_VK_LOAD)
  TG_VK_DEBUG_FUNCTIONS(TG_VK_LOAD)
  TG_VK_DEVICE_FUNCTIONS(TG_VK_LOAD)
#undef TG_VK_LOAD
#define TG_VK_REQUIRE(fn) \
  if (!a.fn) throw StateError("no Vulkan device: the Vulkan loader does not give " #fn "; update the Vulkan loader");
  TG_VK_INSTANCE_FUNCTIONS(TG_VK_REQUIRE)
  TG_VK_DEVICE_FUNCTIONS(TG_VK_REQUIRE)
#undef TG_VK_REQUIRE
}

const char* result_name(VkResult result) {
  // Not a switch: VkResult has codes of many extensions this backend never
  // meets, and drivers may return ones newer than the header.
#define TG_VK_RESULT(r) \
  if (result == r) return #r;
  TG_VK_RESULT(VK_SUCCESS)
  TG_VK_RESULT(VK_NOT_READY)
  TG_VK_RESULT(VK_TIMEOUT)
  TG_VK_RESULT(VK_INCOMPLETE)
  TG_VK_RESULT(VK_ERROR_OUT_OF_HOST_MEMORY)
  TG_VK_RESULT(VK_ERROR_OUT_OF_DEVICE_MEMORY)
  TG_VK_RESULT(VK_ERROR_INITIALIZATION_FAILED)
  TG_VK_RESULT(VK_ERROR_DEVICE_LOST)
  TG_VK_RESULT(VK_ERROR_MEMORY_MAP_FAILED)
  TG_VK_RESULT(VK_ERROR_LAYER_NOT_PRESENT)
  TG_VK_RESULT(VK_ERROR_EXTENSION_NOT_PRESENT)
  TG_VK_RESULT(VK_ERROR_FEATURE_NOT_PRESENT)
  TG_VK_RESULT(VK_ERROR_INCOMPATIBLE_DRIVER)
  TG_VK_RESULT(VK_ERROR_TOO_MANY_OBJECTS)
  TG_VK_RESULT(VK_ERROR_FORMAT_NOT_SUPPORTED)
  TG_VK_RESULT(VK_ERROR_FRAGMENTED_POOL)
  TG_VK_RESULT(VK_ERROR_UNKNOWN)
  TG_VK_RESULT(VK_ERROR_OUT_OF_POOL_MEMORY)
  TG_VK_RESULT(VK_ERROR_INVALID_EXTERNAL_HANDLE)
  TG_VK_RESULT(VK_ERROR_FRAGMENTATION)
  TG_VK_RESULT(VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS)
  TG_VK_RESULT(VK_ERROR_VALIDATION_FAILED_EXT)
#undef TG_VK_RESULT
  return "an unknown VkResult";
}

void check(VkResult result, const char* what) {
  if (result == VK_SUCCESS) return;
  const std::string text = std::string(what) + " failed with " + result_name(result);
  if (result == VK_ERROR_OUT_OF_DEVICE_MEMORY || result == VK_ERROR_OUT_OF_HOST_MEMORY)
    throw MemoryError("Vulkan: " + text + "; use a smaller batch or model, or free other models on this device");
  if (result == VK_ERROR_DEVICE_LOST)
    throw Error("Vulkan: " + text + ": the device was lost (a driver reset or a hung kernel); the weights on it are "
                "gone, so reload the last checkpoint (the model cannot be used any more)");
  throw StateError("Vulkan: " + text);
}

}  // namespace tensorgrad::vulkan
