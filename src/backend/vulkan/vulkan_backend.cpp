// The Vulkan backend: device memory (VulkanStorage), the kernel table
// (kernels/), and planned graphs recorded into command buffers and replayed
// every run (VulkanGraph), as ggml's Vulkan backend and CUDA graphs do.
#include "backend/vulkan/vulkan_backend.h"

#include <cstdlib>
#include <map>
#include <optional>
#include <mutex>
#include <vector>

#include "backend/vulkan/context.h"
#include "backend/vulkan/kernels/kernels.h"
#include "backend/vulkan/recorder.h"
#include "tensorgrad/backend/backend.h"
#include "tensorgrad/core/error.h"

namespace tensorgrad::vulkan {

namespace {

// A command pool, its command buffers, a fence and the kernels' status
// words, owned by one graph or launcher: replaying needs no Vulkan object
// made per run.
class Commands {
 public:
  explicit Commands(std::shared_ptr<Context> context) : context_(std::move(context)), status_(context_) {
    VkCommandPoolCreateInfo pinfo{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    pinfo.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    check(api().vkCreateCommandPool(context_->device(), &pinfo, nullptr, &pool_), "vkCreateCommandPool");
    VkFenceCreateInfo finfo{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    const VkResult r = api().vkCreateFence(context_->device(), &finfo, nullptr, &fence_);
    if (r != VK_SUCCESS) api().vkDestroyCommandPool(context_->device(), pool_, nullptr);
    check(r, "vkCreateFence");
  }
  ~Commands() {
    // Every submission was waited for: nothing of ours is in flight.
    api().vkDestroyFence(context_->device(), fence_, nullptr);
    api().vkDestroyCommandPool(context_->device(), pool_, nullptr);  // frees its command buffers
  }
  Commands(const Commands&) = delete;
  Commands& operator=(const Commands&) = delete;

  VkCommandBuffer make_buffer() {
    VkCommandBufferAllocateInfo info{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    info.commandPool = pool_;
    info.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    info.commandBufferCount = 1;
    VkCommandBuffer cmd;
    check(api().vkAllocateCommandBuffers(context_->device(), &info, &cmd), "vkAllocateCommandBuffers");
    return cmd;
  }
  // Starts recording `cmd` (reset first), after a barrier that makes every
  // earlier submission's writes visible to the kernels.
  void begin(VkCommandBuffer cmd) {
    check(api().vkResetCommandBuffer(cmd, 0), "vkResetCommandBuffer");
    VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    check(api().vkBeginCommandBuffer(cmd, &begin), "vkBeginCommandBuffer");
    context_->barrier(cmd, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_ACCESS_MEMORY_WRITE_BIT,
                      VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
  }
  // Ends recording, after a barrier that makes the kernels' writes (and a
  // queued copy's) visible to the host and to later copies.
  void end(VkCommandBuffer cmd) {
    context_->barrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                      VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                      VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                      VK_ACCESS_HOST_READ_BIT | VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT);
    check(api().vkEndCommandBuffer(cmd), "vkEndCommandBuffer");
  }
  // Throws what a kernel of `cmd` reported (KernelStatus::throw_if_set).
  // The eager queue's work goes first unless `cmd` is that queue's.
  void submit(VkCommandBuffer cmd, bool after_queued = true) {
    if (after_queued) context_->flush_pending();
    context_->submit_and_wait(cmd, fence_);
    status_.throw_if_set();
  }
  // submit's form for a destructor: nothing thrown, a kernel's report left
  // set for the next submit to throw.
  void submit_quietly(VkCommandBuffer cmd) noexcept {
    try {
      context_->submit_and_wait(cmd, fence_);
    } catch (...) {  // a lost device: every later use of the device says so
    }
  }
  // Throws a report a quiet submit left set.
  void status_check() { status_.throw_if_set(); }
  Context& context() const { return *context_; }
  uint64_t status() const { return status_.address(); }

 private:
  std::shared_ptr<Context> context_;
  KernelStatus status_;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
};

// TG_PROFILE in the environment (backend.cpp prints the profile).
bool profiling() {
  static const bool on = std::getenv("TG_PROFILE") != nullptr;
  return on;
}

void record_step(Recorder& r, OpKind op, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg& out) {
  const Kernel k = kernel_table()[size_t(op)];
  if (!k)  // check_kernels refused such graphs when they were planned
    throw StateError(std::string("the vulkan backend has no kernel for op ") + op_info(op).name);
  k(r, attrs, in, out);
  r.context().counters().ops[size_t(op)].fetch_add(1, std::memory_order_relaxed);
}

// A planned graph as command buffers: one per range of steps the executable
// runs (the whole graph; an optimizer's forward and update parts), recorded
// at its first run and replayed after; re-recorded after the program changed
// (set_rows: new shapes and grids; bind: new input addresses). Recording
// again makes no Vulkan object.
class VulkanGraph final : public CompiledGraph {
 public:
  VulkanGraph(std::shared_ptr<Context> context, const GraphProgram& program)
      : commands_(std::move(context)), program_(program) {}

  void run(size_t first_step, size_t last_step) override {
    if (first_step >= last_step) return;
    Range* range = nullptr;
    for (Range& r : ranges_)
      if (r.first == first_step && r.last == last_step) range = &r;
    if (!range) {
      ranges_.push_back({first_step, last_step, commands_.make_buffer(), false, 0});
      range = &ranges_.back();
    }
    if (!range->recorded) record(*range);
    if (range->dispatches > 0) commands_.submit(range->cmd);
  }

  void update(const ProgramChange&) override {
    for (Range& r : ranges_) r.recorded = false;
  }

 private:
  struct Range {
    size_t first, last;
    VkCommandBuffer cmd;
    bool recorded;
    uint32_t dispatches;
  };

  void record(Range& range) {
    commands_.begin(range.cmd);
    Recorder rec(commands_.context(), range.cmd, commands_.status());
    for (size_t s = range.first; s < range.last; ++s) {
      const GraphProgram::Step& step = program_.steps[s];
      record_step(rec, step.op, step.attrs, program_.inputs(step), program_.output(step));
    }
    commands_.end(range.cmd);
    range.dispatches = rec.dispatches();
    range.recorded = true;
  }

  Commands commands_;
  const GraphProgram& program_;
  std::vector<Range> ranges_;  // few: a deque is not needed, pointers are not kept across calls
};

// One op at a time (the eager API's path, and Backend's default compile):
// the ops of one run are recorded into one command buffer and submitted at
// its end; under TG_PROFILE each op is submitted and waited for on its own,
// so that the profile's clock around a launch times the kernel.
class VulkanLauncher final : public KernelLauncher {
 public:
  explicit VulkanLauncher(std::shared_ptr<Context> context)
      : commands_(std::move(context)), cmd_(commands_.make_buffer()), each_op_(profiling()) {}
  void begin_run() override {
    commands_.begin(cmd_);
    recorder_.emplace(commands_.context(), cmd_, commands_.status());
  }
  void end_run() override {
    commands_.end(cmd_);
    const bool any = recorder_->dispatches() > 0;
    recorder_.reset();
    if (any) commands_.submit(cmd_);
  }
  void launch(OpKind op, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg& out) override {
    record_step(*recorder_, op, attrs, in, out);
    if (each_op_) {
      end_run();
      begin_run();
    }
  }

 private:
  Commands commands_;
  VkCommandBuffer cmd_;
  std::optional<Recorder> recorder_;
  bool each_op_;
};

// The eager API's queue of one device, as a CUDA stream is PyTorch's: each
// op is recorded into one command buffer when it is called, and the buffer
// is submitted at a sync point (a host access of the device's memory, a
// free, another submission on the device, Backend::synchronize) or once
// kMaxQueuedOps ops wait, rather than one submit per op. Threads share it
// (queue order is call order, under the lock).
class EagerQueue final : public PendingWork {
 public:
  static constexpr uint32_t kMaxQueuedOps = 256;

  explicit EagerQueue(std::shared_ptr<Context> context) : commands_(std::move(context)), cmd_(commands_.make_buffer()) {}

  void launch(OpKind op, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg& out) {
    std::lock_guard<std::mutex> lock(mutex_);
    open_locked();
    // Its inputs may be cached blocks: nothing else would notice the loss.
    recorder_->context().check_not_lost("running an op");
    record_step(*recorder_, op, attrs, in, out);
    if (recorder_->dispatches() >= kMaxQueuedOps) submit_locked(true);
  }

  void flush(bool report) override {
    std::lock_guard<std::mutex> lock(mutex_);
    submit_locked(report);
  }

  // vkCmdUpdateBuffer's limits: at most 65,536 bytes, offset and size
  // multiples of 4. Larger copies go through the storage after a flush.
  static bool queueable(size_t offset, size_t bytes) {
    return bytes > 0 && bytes <= 65536 && offset % 4 == 0 && bytes % 4 == 0;
  }

  // Queues a host-to-device copy of a few bytes (a scalar, an optimizer's
  // hyperparameters) between the kernels: the bytes go into the command
  // buffer, with a barrier on each side (earlier kernels may still read the
  // old values; later ones read the new).
  void update(VkBuffer buffer, size_t offset, const void* src, size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    open_locked();
    Context& c = commands_.context();
    c.barrier(cmd_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT,
              VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT);
    api().vkCmdUpdateBuffer(cmd_, buffer, offset, bytes, src);
    c.barrier(cmd_, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
              VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
    ++updates_;
  }

 private:
  // Starts a recording unless one is open.
  void open_locked() {
    if (recorder_) return;
    commands_.begin(cmd_);
    recorder_.emplace(commands_.context(), cmd_, commands_.status());
  }

  void submit_locked(bool report) {
    if (!recorder_) {
      if (report) commands_.status_check();
      return;
    }
    commands_.end(cmd_);
    const bool any = recorder_->dispatches() > 0 || updates_ > 0;
    recorder_.reset();
    updates_ = 0;
    if (!any) return;
    if (report) commands_.submit(cmd_, false);
    else commands_.submit_quietly(cmd_);
  }

  std::mutex mutex_;
  Commands commands_;
  VkCommandBuffer cmd_;
  std::optional<Recorder> recorder_;  // set while a recording is open
  uint32_t updates_ = 0;              // copies queued in the open recording
};

// The eager API's launcher: runs go into the device's EagerQueue.
class EagerLauncher final : public KernelLauncher {
 public:
  explicit EagerLauncher(EagerQueue& queue) : queue_(queue) {}
  void begin_run() override {}
  void end_run() override {}
  void launch(OpKind op, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg& out) override {
    queue_.launch(op, attrs, in, out);
  }

 private:
  EagerQueue& queue_;
};

class VulkanBackend final : public Backend {
 public:
  explicit VulkanBackend(std::shared_ptr<Context> context)
      : context_(std::move(context)), queue_(std::make_unique<EagerQueue>(context_)) {
    context_->set_pending_work(queue_.get());
  }
  Device device() const override { return context_->info().device; }
  std::string name() const override { return "vulkan"; }
  bool has_kernel(OpKind op) const override {
    if (size_t(op) >= size_t(OpKind::Count)) return false;
    const OpInfo& info = op_info(op);
    return op == OpKind::Leaf || info.view || kernel_table()[size_t(op)] != nullptr;
  }
  std::shared_ptr<Storage> allocate(size_t bytes) const override {
    if (bytes > (size_t(1) << 48))
      throw ValueError("Vulkan: an allocation of " + std::to_string(bytes) + " bytes is beyond any device");
    return std::make_shared<VulkanStorage>(context_, bytes);
  }
  // The ReLU rewrite only: the batch-statistics rewrite's Conv2D form has
  // no Vulkan kernel (conv2d throws for kBatchStatsOutput), and the Add
  // rewrite's fused forms are not checked against the CPU on models here.
  FusionOptions fusions() const override { return {true, false, false}; }
  std::unique_ptr<KernelLauncher> make_launcher(double) const override {
    return std::make_unique<VulkanLauncher>(context_);
  }
  // Under TG_PROFILE each eager op is its own submit too, so that the
  // profile's clock times the kernel.
  std::unique_ptr<KernelLauncher> make_eager_launcher(double flops) const override {
    if (profiling()) return make_launcher(flops);
    return std::make_unique<EagerLauncher>(*queue_);
  }
  void synchronize() const override { queue_->flush(true); }
  void copy_from_host_in_order(Storage& dst, size_t offset, const void* src, size_t bytes) const override {
    auto* vk = dynamic_cast<VulkanStorage*>(&dst);
    if (!vk || vk->device() != device())
      throw ValueError("Vulkan copy_from_host_in_order: the destination is not memory of " + device().str());
    if (offset > vk->nbytes() || bytes > vk->nbytes() - offset)
      throw IndexError("Vulkan copy_from_host_in_order: bytes [" + std::to_string(offset) + ", " +
                       std::to_string(offset + bytes) + ") are outside a storage of " + std::to_string(vk->nbytes()));
    context_->check_not_lost("copying memory");
    if (EagerQueue::queueable(offset, bytes)) queue_->update(vk->buffer(), offset, src, bytes);
    else vk->copy_from_host(offset, src, bytes);  // waits for the queue first
  }
  DeviceCounters counters() const override {
    Counters& c = context_->counters();
    DeviceCounters out{c.submits.load(), c.dispatches.load(), c.barriers.load(), {}};
    for (size_t i = 0; i < out.ops.size(); ++i) out.ops[i] = c.ops[i].load();
    return out;
  }
  // Under TG_PROFILE, node by node through the launcher (Backend's
  // default), which the profile times op by op.
  std::unique_ptr<CompiledGraph> compile(const GraphProgram& program) const override {
    if (profiling()) return Backend::compile(program);
    return std::make_unique<VulkanGraph>(context_, program);
  }

 private:
  std::shared_ptr<Context> context_;
  std::unique_ptr<EagerQueue> queue_;  // lives with the backend, for the process
};

}  // namespace

BackendRegistration registration() {
  return {"vulkan",
          []() -> std::vector<DeviceInfo> {
            try {
              return Instance::get().infos();
            } catch (const StateError&) {
              return {};  // the backend function below says why
            }
          },
          [](int index) -> std::shared_ptr<const Backend> {
            Instance& instance = Instance::get();  // throws "no Vulkan device: ..." with the reason
            if (instance.physical().empty()) {
              std::string why = "the Vulkan loader lists no device";
              for (const std::string& r : instance.refused()) why += "; " + r;
              throw StateError("no Vulkan device: " + why + "; use Device::CPU");
            }
            static std::mutex mutex;
            static auto* made = new std::map<int, std::shared_ptr<const Backend>>();  // one per device, for the process
            std::lock_guard<std::mutex> lock(mutex);
            auto it = made->find(index);
            if (it == made->end()) it = made->emplace(index, std::make_shared<VulkanBackend>(Context::get(index))).first;
            return it->second;
          }};
}

bool built() { return true; }
uint64_t driver_allocation_count() { return driver_allocations(); }

void inject(VulkanFault fault) {
  switch (fault) {
    case VulkanFault::kNone: inject_fault(Fault::kNone); return;
    case VulkanFault::kOutOfDeviceMemory: inject_fault(Fault::kOutOfDeviceMemory); return;
    case VulkanFault::kDeviceLost: inject_fault(Fault::kDeviceLost); return;
  }
}

}  // namespace tensorgrad::vulkan
