#pragma once
// The Vulkan runtime under the backend: the instance and its physical
// devices (found once per process), and per device a Context holding the
// logical device, its compute queue, memory, pipelines and one-shot
// submissions. Contexts live for the process, as the CPU backend does.
#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/vulkan/api.h"
#include "tensorgrad/backend/registry.h"
#include "tensorgrad/core/storage.h"

namespace tensorgrad::vulkan {

/// What the backend reads of a device's limits and features.
struct DeviceCaps {
  uint32_t max_group_count[3] = {65535, 65535, 65535};
  uint32_t max_group_invocations = 128;
  uint32_t max_shared_bytes = 16384;
  uint32_t max_push_constant_bytes = 128;
  uint32_t subgroup_size = 0;  // for the device list and messages only: no shader assumes one
  bool float64 = false;         // shaderFloat64
};

/// The process's Vulkan instance and the devices it lists.
class Instance {
 public:
  /// The instance, made at the first call. Throws StateError starting "no
  /// Vulkan device:" with the reason when the loader cannot be opened or
  /// makes no instance (no driver installed).
  static Instance& get();
  VkInstance handle() const { return instance_; }
  /// The usable devices, in the loader's order, and what each is.
  const std::vector<VkPhysicalDevice>& physical() const { return physical_; }
  const std::vector<DeviceInfo>& infos() const { return infos_; }
  /// Why devices the loader listed were left out ("llvmpipe: no shaderInt64"), for messages.
  const std::vector<std::string>& refused() const { return refused_; }
  /// Whether VK_LAYER_KHRONOS_validation is on (TENSORGRAD_VULKAN_VALIDATION=1), and the
  /// messages it sent (warnings and errors), counted since the process began.
  bool validation() const { return validation_; }
  static uint64_t validation_messages();

 private:
  Instance();
  VkInstance instance_ = VK_NULL_HANDLE;
  std::vector<VkPhysicalDevice> physical_;
  std::vector<DeviceInfo> infos_;
  std::vector<std::string> refused_;
  bool validation_ = false;
};

/// Memory on a device: a buffer with its own allocation, its device
/// address (what Storage::data() holds: shaders reach tensors through
/// buffer device addresses), and its host mapping when the memory is host
/// visible.
class Context;
/// One buffer with its own memory (Context::allocate).
struct Allocation {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  char* mapped = nullptr;  // null on the staging path
  VkDeviceAddress address = 0;
};
class VulkanStorage final : public Storage {
 public:
  /// Throws MemoryError naming the bytes when the device has no room.
  VulkanStorage(std::shared_ptr<Context> context, size_t bytes);
  ~VulkanStorage() override;
  void copy_from_host(size_t offset, const void* src, size_t bytes) override;
  void copy_to_host(size_t offset, void* dst, size_t bytes) const override;
  void copy_within_device(size_t offset, const Storage& src, size_t src_offset, size_t bytes) override;
  VkBuffer buffer() const { return a_.buffer; }

 private:
  VulkanStorage(std::shared_ptr<Context> context, size_t bytes, Allocation a);
  std::shared_ptr<Context> context_;
  Allocation a_;
};

/// A compute pipeline made from one embedded shader and its specialization
/// constants (constant_id 0, 1, ... in order).
struct Pipeline {
  VkPipeline handle = VK_NULL_HANDLE;
};

/// Kernels recorded but not yet submitted (the eager API's queue of one
/// device): the Context makes every host access to device memory, every
/// free and every graph's submission wait for them, so that a queued op
/// is never overtaken.
class PendingWork {
 public:
  virtual ~PendingWork() = default;
  /// Submits what is queued and waits for it. With `report`, throws what
  /// its kernels reported (KernelStatus) or a lost device; without (a
  /// destructor's flush) it throws nothing, and a kernel's report stays set
  /// for the next flush with `report` to throw.
  virtual void flush(bool report) = 0;
};

/// What a device has done since its Context was made: backend.h's DeviceCounters.
struct Counters {
  std::atomic<uint64_t> submits{0}, dispatches{0}, barriers{0};
  std::array<std::atomic<uint64_t>, size_t(OpKind::Count)> ops{};
};

/// One logical device.
class Context : public std::enable_shared_from_this<Context> {
 public:
  /// The device `index` of Instance::get(), made at the first call and kept
  /// for the process. Throws StateError as Instance::get, or when the device
  /// cannot be made.
  static std::shared_ptr<Context> get(int index);

  VkDevice device() const { return device_; }
  const DeviceCaps& caps() const { return caps_; }
  const DeviceInfo& info() const { return info_; }
  VkPipelineLayout layout() const { return layout_; }
  /// Whether host copies go through a staging buffer (device-local memory
  /// the host cannot map: discrete GPUs, or TENSORGRAD_VULKAN_STAGING=1)
  /// rather than through the memory's own mapping (lavapipe, integrated GPUs).
  bool staging() const { return use_staging_; }

  /// A new buffer of `bytes` (at least 256) with its memory: where tensors
  /// live, or, with `host_visible`, memory the host maps on every device (a
  /// kernel's status word). Throws MemoryError naming the bytes when the
  /// device has no room.
  Allocation allocate(size_t bytes, bool host_visible = false);
  void free(const Allocation& a);

  /// The pipeline of embedded shader `name` specialised by `constants`,
  /// made at its first use and cached. Throws StateError for an unknown
  /// shader.
  Pipeline pipeline(std::string_view name, std::span<const uint32_t> constants);

  /// Submits `cmd` and waits on `fence` (reset first). Queue submissions are
  /// serialised across threads. Throws as check().
  void submit_and_wait(VkCommandBuffer cmd, VkFence fence);
  /// Records commands with `record` into a command buffer of the context's
  /// own, submits, waits, then calls `after` (still holding the context's
  /// copy lock, so that a staging buffer read there is not overwritten):
  /// copies outside graphs.
  template <class F, class G>
  void run_once(F&& record, G&& after) {
    std::lock_guard<std::mutex> lock(once_mutex_);
    begin_once();
    record(once_cmd_);
    end_once();
    after();
  }
  template <class F>
  void run_once(F&& record) {
    run_once(std::forward<F>(record), [] {});
  }
  /// A host-visible buffer of at least `bytes` for staging copies (grown as
  /// needed); only under run_once's lock.
  char* staging_buffer(size_t bytes, VkBuffer& buffer);

  /// The device's eager queue, set once by its backend (null until then).
  void set_pending_work(PendingWork* work) { pending_ = work; }
  /// PendingWork::flush of the eager queue, if there is one.
  void flush_pending(bool report = true) {
    if (PendingWork* p = pending_.load()) p->flush(report);
  }
  Counters& counters() { return counters_; }
  /// Records one global memory barrier into `cmd` (writes of `src_access`
  /// at `src_stage` made visible to `dst_access` at `dst_stage`) and counts it.
  void barrier(VkCommandBuffer cmd, VkPipelineStageFlags src_stage, VkAccessFlags src_access,
               VkPipelineStageFlags dst_stage, VkAccessFlags dst_access);

  /// Throws Error saying the device was lost and what to do, once a submit
  /// returned VK_ERROR_DEVICE_LOST: nothing of the device's memory is read
  /// or written after that.
  void check_not_lost(const char* what) const;
  /// The fault-injection tests' undo of a simulated loss (the VkDevice
  /// itself was never lost).
  void clear_lost_for_tests();

  Context(int index, VkPhysicalDevice physical, DeviceInfo info);
  ~Context();

 private:
  void begin_once();
  void end_once();

  VkPhysicalDevice physical_;
  DeviceInfo info_;
  DeviceCaps caps_;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t queue_family_ = 0;
  uint32_t host_type_ = UINT32_MAX;    // host-visible, coherent
  uint32_t device_type_ = UINT32_MAX;  // what tensors live in
  bool use_staging_ = false;
  std::atomic<bool> lost_{false};
  VkPipelineLayout layout_ = VK_NULL_HANDLE;
  std::mutex queue_mutex_;
  std::mutex pipeline_mutex_;
  std::map<std::string, VkShaderModule, std::less<>> modules_;
  // Searched in order at every dispatch a recording makes: a hit allocates
  // nothing, so re-recording (a new batch size) allocates nothing either.
  struct CachedPipeline {
    std::string shader;
    std::vector<uint32_t> constants;
    Pipeline pipeline;
  };
  std::vector<CachedPipeline> pipelines_;
  std::mutex once_mutex_;
  VkCommandPool once_pool_ = VK_NULL_HANDLE;
  VkCommandBuffer once_cmd_ = VK_NULL_HANDLE;
  VkFence once_fence_ = VK_NULL_HANDLE;
  Allocation staging_;
  size_t staging_bytes_ = 0;
  std::atomic<PendingWork*> pending_{nullptr};
  Counters counters_;
};

/// Simulated device failures for tests (backend.h's inject_vulkan_fault).
enum class Fault { kNone, kOutOfDeviceMemory, kDeviceLost };
void inject_fault(Fault fault);

/// The driver's host allocations through the devices' allocation callbacks
/// since the process began.
uint64_t driver_allocations();

/// The bytes of push constants every pipeline takes (the limit every
/// Vulkan device guarantees).
inline constexpr uint32_t kPushConstantBytes = 128;

}  // namespace tensorgrad::vulkan
