// The Vulkan instance, devices, memory, pipelines and submissions (context.h).
#include "backend/vulkan/context.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include <malloc.h>

#include "backend/vulkan/shaders.h"
#include "tensorgrad/core/error.h"
#include "tensorgrad/core/logging.h"
#include "tensorgrad/core/memory.h"

namespace tensorgrad::vulkan {

namespace {

std::atomic<uint64_t> g_validation_messages{0};
std::atomic<uint64_t> g_driver_allocations{0};

// The host memory the driver asks for through the device's allocation
// callbacks: plain aligned allocations, counted, so that the allocation test
// can tell the driver's per-submit allocations from tensorgrad's own.
void* VKAPI_CALL driver_allocate(void*, size_t size, size_t alignment, VkSystemAllocationScope) {
  ++g_driver_allocations;
  void* p = nullptr;
  return posix_memalign(&p, std::max(alignment, sizeof(void*)), size ? size : 1) == 0 ? p : nullptr;
}
void* VKAPI_CALL driver_reallocate(void*, void* old, size_t size, size_t alignment, VkSystemAllocationScope) {
  if (!old) return driver_allocate(nullptr, size, alignment, VK_SYSTEM_ALLOCATION_SCOPE_OBJECT);
  if (size == 0) {
    std::free(old);
    return nullptr;
  }
  ++g_driver_allocations;
  void* p = nullptr;
  if (posix_memalign(&p, std::max(alignment, sizeof(void*)), size) != 0) return nullptr;
  std::memcpy(p, old, std::min(size, malloc_usable_size(old)));
  std::free(old);
  return p;
}
void VKAPI_CALL driver_free(void*, void* p) { std::free(p); }
const VkAllocationCallbacks kDriverAllocator{nullptr, driver_allocate, driver_reallocate, driver_free, nullptr, nullptr};

VKAPI_ATTR VkBool32 VKAPI_CALL on_validation_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                     VkDebugUtilsMessageTypeFlagsEXT,
                                                     const VkDebugUtilsMessengerCallbackDataEXT* data, void*) {
  if (severity >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT) {
    ++g_validation_messages;
    log_message(LogLevel::Warning, std::string("Vulkan validation: ") + (data && data->pMessage ? data->pMessage : ""));
  }
  return VK_FALSE;
}

bool env_on(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}

DeviceType device_type(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return DeviceType::kDiscreteGpu;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return DeviceType::kIntegratedGpu;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return DeviceType::kCpuImplementation;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return DeviceType::kDiscreteGpu;
    case VK_PHYSICAL_DEVICE_TYPE_OTHER: return DeviceType::kDiscreteGpu;
    case VK_PHYSICAL_DEVICE_TYPE_MAX_ENUM: return DeviceType::kDiscreteGpu;
  }
  return DeviceType::kDiscreteGpu;
}

// Why `pd` cannot run tensorgrad's shaders, or "".
std::string refusal(VkPhysicalDevice pd, const VkPhysicalDeviceProperties& props) {
  if (props.apiVersion < VK_API_VERSION_1_2) return "it supports Vulkan " + std::to_string(VK_API_VERSION_MAJOR(props.apiVersion)) + "." + std::to_string(VK_API_VERSION_MINOR(props.apiVersion)) + ", tensorgrad needs 1.2";
  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  VkPhysicalDeviceFeatures2 f{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, &f12, {}};
  api().vkGetPhysicalDeviceFeatures2(pd, &f);
  if (!f12.bufferDeviceAddress) return "it lacks the feature bufferDeviceAddress";
  if (!f.features.shaderInt64) return "it lacks the feature shaderInt64 (the optimizer's step counters and dropout's hash are 64-bit)";
  VkPhysicalDeviceFloatControlsProperties controls{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FLOAT_CONTROLS_PROPERTIES};
  VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, &controls, {}};
  api().vkGetPhysicalDeviceProperties2(pd, &p2);
  if (!controls.shaderSignedZeroInfNanPreserveFloat32)
    return "it lacks shaderSignedZeroInfNanPreserveFloat32 (NaN and infinities must propagate as on the CPU)";
  uint32_t n = 0;
  api().vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, nullptr);
  std::vector<VkQueueFamilyProperties> families(n);
  api().vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, families.data());
  for (const auto& q : families)
    if (q.queueFlags & VK_QUEUE_COMPUTE_BIT) return "";
  return "it has no compute queue";
}

}  // namespace

uint64_t Instance::validation_messages() { return g_validation_messages.load(); }
uint64_t driver_allocations() { return g_driver_allocations.load(); }

Instance& Instance::get() {
  static Instance* instance = nullptr;
  static std::string failure;
  static std::once_flag once;
  std::call_once(once, [] {
    try {
      instance = new Instance();  // never destroyed: contexts and storages may outlive statics
    } catch (const std::exception& e) {
      failure = e.what();
    }
  });
  if (!instance) throw StateError(failure);
  return *instance;
}

Instance::Instance() {
  const std::string& reason = load_loader();
  if (!reason.empty()) throw StateError("no Vulkan device: " + reason);
  Api& a = api();
  validation_ = env_on("TENSORGRAD_VULKAN_VALIDATION");
  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "tensorgrad";
  app.pEngineName = "tensorgrad";
  app.apiVersion = VK_API_VERSION_1_2;
  VkInstanceCreateInfo info{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  info.pApplicationInfo = &app;
  const char* layers[] = {"VK_LAYER_KHRONOS_validation"};
  const char* extensions[] = {VK_EXT_DEBUG_UTILS_EXTENSION_NAME};
  const VkValidationFeatureEnableEXT enables[] = {VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT};
  VkValidationFeaturesEXT features{VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT};
  features.enabledValidationFeatureCount = 1;
  features.pEnabledValidationFeatures = enables;
  VkDebugUtilsMessengerCreateInfoEXT messenger{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
  messenger.messageSeverity =
      VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
  messenger.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                          VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
  messenger.pfnUserCallback = on_validation_message;
  if (validation_) {
    uint32_t n = 0;
    a.vkEnumerateInstanceLayerProperties(&n, nullptr);
    std::vector<VkLayerProperties> found(n);
    a.vkEnumerateInstanceLayerProperties(&n, found.data());
    bool present = false;
    for (const auto& l : found) present = present || std::strcmp(l.layerName, layers[0]) == 0;
    if (!present)
      throw StateError("no Vulkan device: TENSORGRAD_VULKAN_VALIDATION is set but VK_LAYER_KHRONOS_validation is not "
                       "installed (Debian: apt-get install vulkan-validationlayers)");
    info.enabledLayerCount = 1;
    info.ppEnabledLayerNames = layers;
    info.enabledExtensionCount = 1;
    info.ppEnabledExtensionNames = extensions;
    features.pNext = &messenger;
    info.pNext = &features;
  }
  const VkResult r = a.vkCreateInstance(&info, nullptr, &instance_);
  if (r == VK_ERROR_INCOMPATIBLE_DRIVER)
    throw StateError("no Vulkan device: the Vulkan loader found no driver (vkCreateInstance: "
                     "VK_ERROR_INCOMPATIBLE_DRIVER); install one (Debian: apt-get install mesa-vulkan-drivers, whose "
                     "lavapipe runs Vulkan on the CPU), or use Device::CPU");
  if (r != VK_SUCCESS)
    throw StateError(std::string("no Vulkan device: vkCreateInstance failed with ") + result_name(r));
  load_instance_functions(instance_);
  if (validation_) {
    VkDebugUtilsMessengerEXT handle;
    if (a.vkCreateDebugUtilsMessengerEXT) a.vkCreateDebugUtilsMessengerEXT(instance_, &messenger, nullptr, &handle);
  }
  uint32_t n = 0;
  check(a.vkEnumeratePhysicalDevices(instance_, &n, nullptr), "vkEnumeratePhysicalDevices");
  std::vector<VkPhysicalDevice> all(n);
  check(a.vkEnumeratePhysicalDevices(instance_, &n, all.data()), "vkEnumeratePhysicalDevices");
  for (VkPhysicalDevice pd : all) {
    VkPhysicalDeviceProperties props;
    a.vkGetPhysicalDeviceProperties(pd, &props);
    const std::string why = refusal(pd, props);
    if (!why.empty()) {
      refused_.push_back(std::string(props.deviceName) + ": " + why);
      continue;
    }
    DeviceInfo d{Device("vulkan", int(physical_.size())), props.deviceName, device_type(props.deviceType), 0};
    VkPhysicalDeviceMemoryProperties mem;
    a.vkGetPhysicalDeviceMemoryProperties(pd, &mem);
    for (uint32_t h = 0; h < mem.memoryHeapCount; ++h)
      if (mem.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) d.memory_bytes += mem.memoryHeaps[h].size;
    if (d.type == DeviceType::kCpuImplementation) d.memory_bytes = physical_memory_bytes();
    physical_.push_back(pd);
    infos_.push_back(std::move(d));
  }
}

namespace {
std::mutex g_contexts_mutex;
std::map<int, std::shared_ptr<Context>>& made_contexts() {
  static auto* made = new std::map<int, std::shared_ptr<Context>>();  // never destroyed, as the registry
  return *made;
}
}  // namespace

std::shared_ptr<Context> Context::get(int index) {
  auto* made = &made_contexts();
  Instance& instance = Instance::get();
  std::lock_guard<std::mutex> lock(g_contexts_mutex);
  auto it = made->find(index);
  if (it != made->end()) return it->second;
  if (index < 0 || size_t(index) >= instance.physical().size())
    throw StateError("no Vulkan device vulkan:" + std::to_string(index) + ": " +
                     std::to_string(instance.physical().size()) + " usable Vulkan device(s)");
  auto context = std::make_shared<Context>(index, instance.physical()[size_t(index)], instance.infos()[size_t(index)]);
  (*made)[index] = context;
  return context;
}

Context::Context(int, VkPhysicalDevice physical, DeviceInfo info) : physical_(physical), info_(std::move(info)) {
  Api& a = api();
  VkPhysicalDeviceSubgroupProperties subgroup{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
  VkPhysicalDeviceProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, &subgroup, {}};
  a.vkGetPhysicalDeviceProperties2(physical_, &props);
  const VkPhysicalDeviceLimits& limits = props.properties.limits;
  for (int i = 0; i < 3; ++i) caps_.max_group_count[i] = limits.maxComputeWorkGroupCount[i];
  caps_.max_group_invocations = limits.maxComputeWorkGroupInvocations;
  caps_.max_shared_bytes = limits.maxComputeSharedMemorySize;
  caps_.max_push_constant_bytes = limits.maxPushConstantsSize;
  caps_.subgroup_size = subgroup.subgroupSize;

  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  VkPhysicalDeviceFeatures2 supported{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, &f12, {}};
  a.vkGetPhysicalDeviceFeatures2(physical_, &supported);
  caps_.float64 = supported.features.shaderFloat64 && !env_on("TENSORGRAD_VULKAN_NO_FP64");

  uint32_t n = 0;
  a.vkGetPhysicalDeviceQueueFamilyProperties(physical_, &n, nullptr);
  std::vector<VkQueueFamilyProperties> families(n);
  a.vkGetPhysicalDeviceQueueFamilyProperties(physical_, &n, families.data());
  for (uint32_t q = 0; q < n; ++q)
    if (families[q].queueFlags & VK_QUEUE_COMPUTE_BIT) {
      queue_family_ = q;
      break;
    }
  const float priority = 1.0f;
  VkDeviceQueueCreateInfo queue{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  queue.queueFamilyIndex = queue_family_;
  queue.queueCount = 1;
  queue.pQueuePriorities = &priority;
  VkPhysicalDeviceVulkan12Features enable12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  enable12.bufferDeviceAddress = VK_TRUE;
  VkPhysicalDeviceFeatures2 enable{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, &enable12, {}};
  enable.features.shaderInt64 = VK_TRUE;
  enable.features.shaderFloat64 = supported.features.shaderFloat64;
  VkDeviceCreateInfo dinfo{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  dinfo.pNext = &enable;
  dinfo.queueCreateInfoCount = 1;
  dinfo.pQueueCreateInfos = &queue;
  check(a.vkCreateDevice(physical_, &dinfo, &kDriverAllocator, &device_), "vkCreateDevice");
  a.vkGetDeviceQueue(device_, queue_family_, 0, &queue_);

  VkPhysicalDeviceMemoryProperties mem;
  a.vkGetPhysicalDeviceMemoryProperties(physical_, &mem);
  const VkMemoryPropertyFlags host = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  uint32_t device_local = UINT32_MAX, mapped_local = UINT32_MAX;
  for (uint32_t t = 0; t < mem.memoryTypeCount; ++t) {
    const VkMemoryPropertyFlags f = mem.memoryTypes[t].propertyFlags;
    if ((f & host) == host && host_type_ == UINT32_MAX) host_type_ = t;
    if ((f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) && device_local == UINT32_MAX) device_local = t;
    if ((f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) && (f & host) == host && mapped_local == UINT32_MAX) mapped_local = t;
  }
  if (host_type_ == UINT32_MAX) throw StateError("no Vulkan device: " + info_.name + " has no host-visible memory");
  // Discrete GPUs keep tensors in device-local memory and copy through a
  // staging buffer (their host-visible device memory, where it exists, is a
  // small window); devices whose memory is the host's map it directly.
  const bool unified = info_.type != DeviceType::kDiscreteGpu && mapped_local != UINT32_MAX;
  use_staging_ = !unified || env_on("TENSORGRAD_VULKAN_STAGING");
  device_type_ = use_staging_ ? (device_local != UINT32_MAX ? device_local : host_type_) : mapped_local;

  VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushConstantBytes};
  VkPipelineLayoutCreateInfo linfo{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  linfo.pushConstantRangeCount = 1;
  linfo.pPushConstantRanges = &range;
  check(a.vkCreatePipelineLayout(device_, &linfo, nullptr, &layout_), "vkCreatePipelineLayout");

  VkCommandPoolCreateInfo pinfo{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pinfo.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pinfo.queueFamilyIndex = queue_family_;
  check(a.vkCreateCommandPool(device_, &pinfo, nullptr, &once_pool_), "vkCreateCommandPool");
  VkCommandBufferAllocateInfo cinfo{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  cinfo.commandPool = once_pool_;
  cinfo.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  cinfo.commandBufferCount = 1;
  check(a.vkAllocateCommandBuffers(device_, &cinfo, &once_cmd_), "vkAllocateCommandBuffers");
  VkFenceCreateInfo finfo{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  check(a.vkCreateFence(device_, &finfo, nullptr, &once_fence_), "vkCreateFence");
}

Context::~Context() = default;  // contexts live for the process

namespace {
std::atomic<int> g_failing_allocations{0};
std::atomic<bool> g_fail_next_submit{false};
}  // namespace

void inject_fault(Fault fault) {
  switch (fault) {
    case Fault::kOutOfDeviceMemory: ++g_failing_allocations; return;
    case Fault::kDeviceLost: g_fail_next_submit = true; return;
    case Fault::kNone: {
      g_failing_allocations = 0;
      g_fail_next_submit = false;
      std::lock_guard<std::mutex> lock(g_contexts_mutex);
      for (auto& [index, context] : made_contexts()) context->clear_lost_for_tests();
      return;
    }
  }
}

void Context::check_not_lost(const char* what) const {
  if (lost_)
    throw Error(std::string("Vulkan: ") + what + " on " + info_.device.str() + " (" + info_.name +
                "), which was lost (VK_ERROR_DEVICE_LOST: a driver reset or a hung kernel): the weights on it are "
                "gone; reload the last checkpoint (the models on this device cannot be used any more)");
}

void Context::clear_lost_for_tests() { lost_ = false; }

Allocation Context::allocate(size_t bytes, bool host_visible) {
  Api& a = api();
  check_not_lost("allocating memory");
  bytes = std::max<size_t>(bytes, 256);
  Allocation out;
  VkBufferCreateInfo binfo{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  binfo.size = bytes;
  binfo.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT;
  binfo.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  // A buffer or its memory refused for its size: a MemoryError naming the bytes.
  auto refused = [&](VkResult r, const char* call) {
    if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY)
      throw MemoryError("out of memory on " + info_.device.str() + " (" + info_.name + "): allocating " +
                        std::to_string(bytes) + " bytes failed with " + result_name(r) +
                        "; use a smaller batch or model, or free other models on this device");
    check(r, call);
  };
  const VkResult created = a.vkCreateBuffer(device_, &binfo, nullptr, &out.buffer);
  if (created != VK_SUCCESS) refused(created, "vkCreateBuffer");
  VkMemoryRequirements req;
  a.vkGetBufferMemoryRequirements(device_, out.buffer, &req);
  VkMemoryAllocateFlagsInfo flags{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO};
  flags.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
  VkMemoryAllocateInfo minfo{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, &flags};
  minfo.allocationSize = req.size;
  minfo.memoryTypeIndex = host_visible ? host_type_ : device_type_;
  int failing = g_failing_allocations.load();
  while (failing > 0 && !g_failing_allocations.compare_exchange_weak(failing, failing - 1)) {
  }
  const VkResult r =
      failing > 0 ? VK_ERROR_OUT_OF_DEVICE_MEMORY : a.vkAllocateMemory(device_, &minfo, nullptr, &out.memory);
  if (r != VK_SUCCESS) {
    a.vkDestroyBuffer(device_, out.buffer, nullptr);
    refused(r, "vkAllocateMemory");
  }
  check(a.vkBindBufferMemory(device_, out.buffer, out.memory, 0), "vkBindBufferMemory");
  VkBufferDeviceAddressInfo ainfo{VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO};
  ainfo.buffer = out.buffer;
  out.address = a.vkGetBufferDeviceAddress(device_, &ainfo);
  if (!use_staging_ || host_visible) {
    void* p = nullptr;
    check(a.vkMapMemory(device_, out.memory, 0, VK_WHOLE_SIZE, 0, &p), "vkMapMemory");
    out.mapped = static_cast<char*>(p);
  }
  return out;
}

void Context::free(const Allocation& a) {
  api().vkDestroyBuffer(device_, a.buffer, nullptr);
  api().vkFreeMemory(device_, a.memory, nullptr);
}

Pipeline Context::pipeline(std::string_view name, std::span<const uint32_t> constants) {
  std::lock_guard<std::mutex> lock(pipeline_mutex_);
  for (const CachedPipeline& c : pipelines_)
    if (c.shader == name && std::equal(c.constants.begin(), c.constants.end(), constants.begin(), constants.end()))
      return c.pipeline;
  Api& a = api();
  auto mod = modules_.find(name);
  if (mod == modules_.end()) {
    const ShaderCode* code = nullptr;
    for (const ShaderCode& s : shaders())
      if (s.name == name) code = &s;
    if (!code) throw StateError("Vulkan: no embedded shader named '" + std::string(name) + "'");
    VkShaderModuleCreateInfo sinfo{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    sinfo.codeSize = code->count * 4;
    sinfo.pCode = code->words;
    VkShaderModule m;
    check(a.vkCreateShaderModule(device_, &sinfo, nullptr, &m), "vkCreateShaderModule");
    mod = modules_.emplace(std::string(name), m).first;
  }
  std::vector<VkSpecializationMapEntry> entries(constants.size());
  for (size_t i = 0; i < constants.size(); ++i) entries[i] = {uint32_t(i), uint32_t(4 * i), 4};
  VkSpecializationInfo spec{uint32_t(entries.size()), entries.data(), constants.size() * 4, constants.data()};
  VkComputePipelineCreateInfo pinfo{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  pinfo.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
  pinfo.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  pinfo.stage.module = mod->second;
  pinfo.stage.pName = "main";
  pinfo.stage.pSpecializationInfo = constants.empty() ? nullptr : &spec;
  pinfo.layout = layout_;
  Pipeline p;
  check(a.vkCreateComputePipelines(device_, VK_NULL_HANDLE, 1, &pinfo, nullptr, &p.handle), "vkCreateComputePipelines");
  pipelines_.push_back({std::string(name), std::vector<uint32_t>(constants.begin(), constants.end()), p});
  return p;
}

void Context::submit_and_wait(VkCommandBuffer cmd, VkFence fence) {
  Api& a = api();
  VkSubmitInfo submit{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  submit.commandBufferCount = 1;
  submit.pCommandBuffers = &cmd;
  check_not_lost("submitting work");
  counters_.submits.fetch_add(1, std::memory_order_relaxed);
  auto checked = [this](VkResult r, const char* what) {
    if (r == VK_ERROR_DEVICE_LOST) {
      lost_ = true;
      check_not_lost(what);
    }
    check(r, what);
  };
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    checked(a.vkResetFences(device_, 1, &fence), "vkResetFences");
    checked(g_fail_next_submit.exchange(false) ? VK_ERROR_DEVICE_LOST : a.vkQueueSubmit(queue_, 1, &submit, fence),
            "vkQueueSubmit");
  }
  checked(a.vkWaitForFences(device_, 1, &fence, VK_TRUE, UINT64_MAX), "vkWaitForFences");
}

void Context::begin_once() {
  VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  check(api().vkBeginCommandBuffer(once_cmd_, &begin), "vkBeginCommandBuffer");
  barrier(once_cmd_, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_ACCESS_MEMORY_WRITE_BIT, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT,
          VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT);
}

void Context::barrier(VkCommandBuffer cmd, VkPipelineStageFlags src_stage, VkAccessFlags src_access,
                      VkPipelineStageFlags dst_stage, VkAccessFlags dst_access) {
  VkMemoryBarrier b{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  b.srcAccessMask = src_access;
  b.dstAccessMask = dst_access;
  api().vkCmdPipelineBarrier(cmd, src_stage, dst_stage, 0, 1, &b, 0, nullptr, 0, nullptr);
  counters_.barriers.fetch_add(1, std::memory_order_relaxed);
}

void Context::end_once() {
  barrier(once_cmd_, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_ACCESS_MEMORY_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT,
          VK_ACCESS_HOST_READ_BIT);
  check(api().vkEndCommandBuffer(once_cmd_), "vkEndCommandBuffer");
  submit_and_wait(once_cmd_, once_fence_);
}

char* Context::staging_buffer(size_t bytes, VkBuffer& buffer) {
  if (bytes > staging_bytes_) {
    Api& a = api();
    if (staging_.buffer) free(staging_);
    staging_ = {};
    staging_bytes_ = 0;
    VkBufferCreateInfo binfo{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
    binfo.size = bytes;
    binfo.usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    check(a.vkCreateBuffer(device_, &binfo, nullptr, &staging_.buffer), "vkCreateBuffer");
    VkMemoryRequirements req;
    a.vkGetBufferMemoryRequirements(device_, staging_.buffer, &req);
    VkMemoryAllocateInfo minfo{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
    minfo.allocationSize = req.size;
    minfo.memoryTypeIndex = host_type_;
    check(a.vkAllocateMemory(device_, &minfo, nullptr, &staging_.memory), "vkAllocateMemory (staging)");
    check(a.vkBindBufferMemory(device_, staging_.buffer, staging_.memory, 0), "vkBindBufferMemory");
    void* p = nullptr;
    check(a.vkMapMemory(device_, staging_.memory, 0, VK_WHOLE_SIZE, 0, &p), "vkMapMemory");
    staging_.mapped = static_cast<char*>(p);
    staging_bytes_ = bytes;
  }
  buffer = staging_.buffer;
  return staging_.mapped;
}

// ---- storage ----

namespace {
constexpr size_t kStagingChunk = size_t(64) << 20;

void copy_buffer(VkCommandBuffer cmd, VkBuffer src, size_t src_offset, VkBuffer dst, size_t dst_offset, size_t bytes) {
  VkBufferCopy region{src_offset, dst_offset, bytes};
  api().vkCmdCopyBuffer(cmd, src, dst, 1, &region);
}
}  // namespace

VulkanStorage::VulkanStorage(std::shared_ptr<Context> context, size_t bytes)
    : VulkanStorage(context, bytes, context->allocate(bytes)) {}

VulkanStorage::VulkanStorage(std::shared_ptr<Context> context, size_t bytes, Allocation a)
    : Storage(context->info().device, reinterpret_cast<void*>(a.address), bytes), context_(std::move(context)), a_(a) {}

VulkanStorage::~VulkanStorage() {
  context_->flush_pending(false);  // queued kernels may still read or write this memory
  context_->free(a_);
}

void VulkanStorage::copy_from_host(size_t offset, const void* src, size_t bytes) {
  if (bytes == 0) return;
  context_->flush_pending();
  context_->check_not_lost("copying memory");
  if (a_.mapped) {
    std::memcpy(a_.mapped + offset, src, bytes);
    return;
  }
  for (size_t done = 0; done < bytes; done += kStagingChunk) {
    const size_t n = std::min(kStagingChunk, bytes - done);
    context_->run_once([&](VkCommandBuffer cmd) {
      VkBuffer staging;
      std::memcpy(context_->staging_buffer(n, staging), static_cast<const char*>(src) + done, n);
      copy_buffer(cmd, staging, 0, a_.buffer, offset + done, n);
    });
  }
}

void VulkanStorage::copy_to_host(size_t offset, void* dst, size_t bytes) const {
  if (bytes == 0) return;
  context_->flush_pending();
  context_->check_not_lost("copying memory");
  if (a_.mapped) {
    std::memcpy(dst, a_.mapped + offset, bytes);
    return;
  }
  for (size_t done = 0; done < bytes; done += kStagingChunk) {
    const size_t n = std::min(kStagingChunk, bytes - done);
    char* host = nullptr;
    context_->run_once(
        [&](VkCommandBuffer cmd) {
          VkBuffer staging;
          host = context_->staging_buffer(n, staging);
          copy_buffer(cmd, a_.buffer, offset + done, staging, 0, n);
        },
        [&] { std::memcpy(static_cast<char*>(dst) + done, host, n); });
  }
}

void VulkanStorage::copy_within_device(size_t offset, const Storage& src, size_t src_offset, size_t bytes) {
  if (bytes == 0) return;
  context_->flush_pending();
  context_->check_not_lost("copying memory");
  const auto& from = dynamic_cast<const VulkanStorage&>(src);
  if (a_.mapped && from.a_.mapped) {
    std::memmove(a_.mapped + offset, from.a_.mapped + src_offset, bytes);
    return;
  }
  const bool overlap = &from == this && offset < src_offset + bytes && src_offset < offset + bytes;
  if (overlap) {  // vkCmdCopyBuffer forbids overlapping regions: through the host
    std::vector<char> tmp(bytes);
    copy_to_host(src_offset, tmp.data(), bytes);
    copy_from_host(offset, tmp.data(), bytes);
    return;
  }
  context_->run_once([&](VkCommandBuffer cmd) { copy_buffer(cmd, from.a_.buffer, src_offset, a_.buffer, offset, bytes); });
}

}  // namespace tensorgrad::vulkan
