#pragma once
// The Vulkan functions the backend calls, loaded at run time from the
// system's loader (libvulkan.so.1) with dlopen, so that a tensorgrad built
// with Vulkan runs on a machine without it. The table is ours, in our
// namespace, rather than volk's global vkXxx symbols, which would collide
// with a program that links the loader itself.
#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include <string>

namespace tensorgrad::vulkan {

// Functions the loader exports itself (vkGetInstanceProcAddr with a null instance).
#define TG_VK_GLOBAL_FUNCTIONS(X) \
  X(vkCreateInstance)             \
  X(vkEnumerateInstanceVersion)   \
  X(vkEnumerateInstanceLayerProperties)

#define TG_VK_INSTANCE_FUNCTIONS(X)            \
  X(vkDestroyInstance)                         \
  X(vkEnumeratePhysicalDevices)                \
  X(vkGetPhysicalDeviceProperties)             \
  X(vkGetPhysicalDeviceProperties2)            \
  X(vkGetPhysicalDeviceFeatures2)              \
  X(vkGetPhysicalDeviceMemoryProperties)       \
  X(vkGetPhysicalDeviceQueueFamilyProperties)  \
  X(vkCreateDevice)                            \
  X(vkGetDeviceProcAddr)

// Optional instance functions (VK_EXT_debug_utils, loaded when the
// validation layer is asked for).
#define TG_VK_DEBUG_FUNCTIONS(X)   \
  X(vkCreateDebugUtilsMessengerEXT) \
  X(vkDestroyDebugUtilsMessengerEXT)

#define TG_VK_DEVICE_FUNCTIONS(X)       \
  X(vkDestroyDevice)                    \
  X(vkGetDeviceQueue)                   \
  X(vkCreateBuffer)                     \
  X(vkDestroyBuffer)                    \
  X(vkGetBufferMemoryRequirements)      \
  X(vkAllocateMemory)                   \
  X(vkFreeMemory)                       \
  X(vkBindBufferMemory)                 \
  X(vkMapMemory)                        \
  X(vkGetBufferDeviceAddress)           \
  X(vkCreateCommandPool)                \
  X(vkDestroyCommandPool)               \
  X(vkAllocateCommandBuffers)           \
  X(vkFreeCommandBuffers)               \
  X(vkBeginCommandBuffer)               \
  X(vkEndCommandBuffer)                 \
  X(vkResetCommandBuffer)               \
  X(vkCmdBindPipeline)                  \
  X(vkCmdPushConstants)                 \
  X(vkCmdDispatch)                      \
  X(vkCmdPipelineBarrier)               \
  X(vkCmdCopyBuffer)                    \
  X(vkCmdUpdateBuffer)                  \
  X(vkCreateFence)                      \
  X(vkDestroyFence)                     \
  X(vkResetFences)                      \
  X(vkWaitForFences)                    \
  X(vkQueueSubmit)                      \
  X(vkCreateShaderModule)               \
  X(vkDestroyShaderModule)              \
  X(vkCreatePipelineLayout)             \
  X(vkCreateComputePipelines)           \
  X(vkDestroyPipeline)

/// The loaded entry points. Members keep the Vulkan names.
struct Api {
#define TG_VK_MEMBER(name) PFN_##name name = nullptr;
  TG_VK_GLOBAL_FUNCTIONS(TG_VK_MEMBER)
  TG_VK_INSTANCE_FUNCTIONS(TG_VK_MEMBER)
  TG_VK_DEBUG_FUNCTIONS(TG_VK_MEMBER)
  TG_VK_DEVICE_FUNCTIONS(TG_VK_MEMBER)
#undef TG_VK_MEMBER
  PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
};

/// The process's table (device functions from the first device made,
/// through vkGetInstanceProcAddr: valid for every device of the instance).
Api& api();

/// Opens the loader and fills the global functions. Returns an empty string
/// on success, else why not (for "no Vulkan device: ..." messages). The
/// library's name comes from TENSORGRAD_VULKAN_LOADER when set (tests point
/// it at a missing file), else libvulkan.so.1. Called once; later calls
/// return the first answer.
const std::string& load_loader();
/// Fills the instance functions (and the device ones, through
/// vkGetInstanceProcAddr) for `instance`.
void load_instance_functions(VkInstance instance);

/// Vulkan's name of a result code ("VK_ERROR_OUT_OF_DEVICE_MEMORY").
const char* result_name(VkResult result);

/// Throws for a failed call: MemoryError for the out-of-memory results,
/// Error for VK_ERROR_DEVICE_LOST (the device's memory is gone: reload the
/// last checkpoint), StateError otherwise; `what` names the call.
void check(VkResult result, const char* what);

}  // namespace tensorgrad::vulkan
