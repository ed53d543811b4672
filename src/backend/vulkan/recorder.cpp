// Recorder::dispatch_bytes (recorder.h).
#include "backend/vulkan/recorder.h"

#include "kernels/index_errors.h"

#include <string>

namespace tensorgrad::vulkan {

namespace {

// common.glsl's Status.
struct StatusWords {
  uint32_t flag, code;
  int32_t id;
  uint32_t position, bound;
};

}  // namespace

KernelStatus::KernelStatus(std::shared_ptr<Context> context)
    : context_(std::move(context)), a_(context_->allocate(sizeof(StatusWords), true)) {
  std::memset(a_.mapped, 0, sizeof(StatusWords));
}

KernelStatus::~KernelStatus() { context_->free(a_); }

void KernelStatus::throw_if_set() {
  StatusWords s;
  std::memcpy(&s, a_.mapped, sizeof s);
  if (s.flag == 0) return;
  std::memset(a_.mapped, 0, sizeof s);
  switch (s.code) {
    case kGatherId:
      throw kernels::gather_id_error(s.id, s.position, s.bound);
    case kClassId:
      throw kernels::class_id_error(s.id, s.position, s.bound);
  }
  throw StateError("Vulkan: a kernel reported an unknown status code " + std::to_string(s.code));
}

void Recorder::dispatch_bytes(std::string_view shader, std::span<const uint32_t> constants, const void* push,
                              size_t bytes, uint32_t gx, uint32_t gy, uint32_t gz) {
  const DeviceCaps& c = caps();
  if (gx == 0 || gy == 0 || gz == 0 || gx > c.max_group_count[0] || gy > c.max_group_count[1] ||
      gz > c.max_group_count[2])
    throw StateError("Vulkan: shader " + std::string(shader) + " asked for " + std::to_string(gx) + " x " +
                     std::to_string(gy) + " x " + std::to_string(gz) + " workgroups, beyond this device's " +
                     std::to_string(c.max_group_count[0]) + " x " + std::to_string(c.max_group_count[1]) + " x " +
                     std::to_string(c.max_group_count[2]));
  Api& a = api();
  if (dispatches_ > 0) {
    // Every dispatch may read what an earlier one wrote: one global memory
    // barrier between consecutive dispatches (ggml's Vulkan backend does the
    // same, keyed on dependencies).
    context_.barrier(cmd_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT,
                     VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
  }
  const Pipeline p = context_.pipeline(shader, constants);
  a.vkCmdBindPipeline(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, p.handle);
  unsigned char block[kPushConstantBytes] = {};
  std::memcpy(block, push, bytes);
  a.vkCmdPushConstants(cmd_, context_.layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushConstantBytes, block);
  a.vkCmdDispatch(cmd_, gx, gy, gz);
  context_.counters().dispatches.fetch_add(1, std::memory_order_relaxed);
  ++dispatches_;
}

}  // namespace tensorgrad::vulkan
