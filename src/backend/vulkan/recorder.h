#pragma once
// Recording kernels into a command buffer: what every Vulkan kernel
// (kernels/*.cpp) is handed. A kernel picks its shader and specialization
// constants, fills its push constants (tensor addresses first, then sizes)
// and dispatches; the recorder puts a barrier before each dispatch, so a
// kernel may read what any earlier one wrote.
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <span>
#include <string_view>

#include "backend/vulkan/context.h"
#include "tensorgrad/core/error.h"
#include "tensorgrad/core/kernel_arg.h"

namespace tensorgrad::vulkan {

/// What kernels report of bad input they cannot throw for, as the CPU's
/// kernels do (an id outside its table): a few words of host-visible memory
/// of the graph or launcher whose kernels write them, read after each
/// submit. Kernels that change state (optimizer updates, moving averages,
/// target-network updates) read it first and do nothing once it is set, so
/// a step with a bad id changes no weight, as on the CPU, where the throw
/// comes before the update. Layout: common.glsl's Status.
class KernelStatus {
 public:
  /// Throws MemoryError as Context::allocate.
  explicit KernelStatus(std::shared_ptr<Context> context);
  ~KernelStatus();
  KernelStatus(const KernelStatus&) = delete;
  KernelStatus& operator=(const KernelStatus&) = delete;
  uint64_t address() const { return a_.address; }
  /// After a submit: when a kernel reported bad input, clears the report
  /// and throws what the CPU throws there (IndexError naming the id and its
  /// position: a gather's id, a cross-entropy's class id).
  void throw_if_set();

  /// common.glsl's Status::code.
  static constexpr uint32_t kGatherId = 1;
  /// A class id of a sparse cross-entropy outside [0, classes).
  static constexpr uint32_t kClassId = 2;

 private:
  std::shared_ptr<Context> context_;
  Allocation a_;
};

class Recorder {
 public:
  /// `status`: the KernelStatus address the recorded kernels report to.
  Recorder(Context& context, VkCommandBuffer cmd, uint64_t status) : context_(context), cmd_(cmd), status_(status) {}
  Context& context() const { return context_; }
  /// The KernelStatus address, for push constants.
  uint64_t status() const { return status_; }
  const DeviceCaps& caps() const { return context_.caps(); }

  /// Records one dispatch of embedded shader `shader` specialised by
  /// `constants` (constant_id 0, 1, ...; by convention constant 0 is the
  /// workgroup's x size), with push constants `push` (a struct of at most
  /// kPushConstantBytes laid out as the shader's push block: 8-byte
  /// addresses first) and `gx` x `gy` x `gz` workgroups. Throws StateError
  /// for a grid beyond the device's limits.
  template <class Push>
  void dispatch(std::string_view shader, std::initializer_list<uint32_t> constants, const Push& push, uint32_t gx,
                uint32_t gy = 1, uint32_t gz = 1) {
    static_assert(sizeof(Push) <= kPushConstantBytes, "push constants beyond the guaranteed 128 bytes");
    dispatch_bytes(shader, {constants.begin(), constants.size()}, &push, sizeof(Push), gx, gy, gz);
  }
  void dispatch_bytes(std::string_view shader, std::span<const uint32_t> constants, const void* push, size_t bytes,
                      uint32_t gx, uint32_t gy, uint32_t gz);

  /// Workgroups of `size` invocations that cover `n` items, at most the
  /// device's limit in x (shaders loop over the rest by grid stride).
  uint32_t groups(uint64_t n, uint32_t size) const {
    const uint64_t g = (n + size - 1) / size;
    return uint32_t(std::max<uint64_t>(1, std::min<uint64_t>(g, caps().max_group_count[0])));
  }
  /// How many dispatches were recorded.
  uint32_t dispatches() const { return dispatches_; }

 private:
  Context& context_;
  VkCommandBuffer cmd_;
  uint64_t status_;
  uint32_t dispatches_ = 0;
};

/// A tensor's device address, for push constants.
inline uint64_t address(const KernelArg& a) { return reinterpret_cast<uint64_t>(a.data); }

/// An element count as a shader's uint; throws ValueError past 2^31 - 1
/// elements (the shaders index with 32-bit integers).
inline uint32_t count32(int64_t n, const char* op) {
  if (n < 0 || n > int64_t(INT32_MAX))
    throw ValueError(std::string("Vulkan ") + op + ": " + std::to_string(n) +
                     " elements; the Vulkan kernels take at most 2^31 - 1 per tensor. Split the batch");
  return uint32_t(n);
}

}  // namespace tensorgrad::vulkan
