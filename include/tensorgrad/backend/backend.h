#pragma once
// The device seam's backend half: a backend owns its device's memory
// (core/storage.h), its kernel lookup per op, and makes executables from
// planned graphs. Backends are found by device in the registry
// (backend/registry.h). The CPU backend always exists; Vulkan's where the
// build has it and the machine a Vulkan driver.
#include <array>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tensorgrad/core/kernel_arg.h"
#include "tensorgrad/core/storage.h"
#include "tensorgrad/graph/fuse.h"
#include "tensorgrad/graph/graph.h"

namespace tensorgrad {

class Executable;
struct BatchRule;

/// A model's compute precision, after Keras' dtype policies: kFloat32
/// computes everything in float32; kMixedBFloat16 (Keras' "mixed_bfloat16")
/// keeps weights, optimizer state and every other op in float32 while
/// MatMul (Dense layers, their gradients) and the convolutions (Conv2D, its
/// input and filter gradients) round their inputs to bfloat16 and
/// accumulate in float32, on CPUs with AVX512-BF16 (detected at run time;
/// elsewhere they stay float32, which the log says once). On CPUs with AMX
/// (Intel's Sapphire Rapids and later) MatMul runs on AMX tiles and the
/// convolutions stay float32, which is faster there (BENCHMARKS.md). The
/// recurrent layers' fused kernels stay float32 under both. Where the
/// policy computes an op in float32 (no AVX512-BF16, AMX's convolutions,
/// strided input gradients, products under 16 along a side) it takes the
/// float32 policy's own kernel, Winograd's included: the same bits as
/// kFloat32, at any thread count.
enum class DTypePolicy { kFloat32, kMixedBFloat16 };
/// Keras' name of the policy: "float32", "mixed_bfloat16".
const char* dtype_policy_name(DTypePolicy policy);
/// Whether kMixedBFloat16 computes in bfloat16 on this machine (libxsmm
/// generates AVX512-BF16 code for this CPU and TENSORGRAD_CPU allows it).
bool bfloat16_supported();
/// The CPU kernel path chosen at run time: "avx2", "avx512" (libxsmm's
/// generated code of that width), "avx512bf16" (also mixed_bfloat16's
/// bfloat16 products) or "amx" (also its MatMul on AMX tiles). The best
/// this CPU has, or the environment variable TENSORGRAD_CPU's value, which
/// forces a lesser path (for testing each path on one machine); it also sets
/// libxsmm's target (as LIBXSMM_TARGET would). Read once per process.
/// Throws ValueError when TENSORGRAD_CPU names no path or one above this
/// CPU's; so does the first computation on the CPU backend.
const char* cpu_kernel_path();
/// Whether kMixedBFloat16's convolutions compute in bfloat16 here:
/// bfloat16_supported() on a CPU without AMX (with AMX they stay float32;
/// MatMul then runs on the tiles). On a CPU with AMX the first call asks
/// Linux for the tile state (arch_prctl), as the policy's first product does.
bool bfloat16_convolutions_supported();
/// Whether 3x3 convolutions with unit stride, no dilation, padding 0 to 2
/// on each side and at least 16 channels in and out run by Winograd's
/// minimal filtering (Lavin and Gray, 2016): F(4x4, 3x3) on images of 8 or
/// more outputs a side (36 multiplications per 4x4 outputs and channel pair
/// where the direct sum takes 144), F(2x2, 3x3) below (16 for 36). Applies
/// to Conv2D and its input gradient in float32, and to its filter gradient
/// by F(4x4, 3x3) on images of 8 or more outputs a side (smaller ones keep
/// the direct kernel); the mixed_bfloat16 policy's bfloat16
/// convolutions stay direct. On by default. The transforms add roundings,
/// so results differ from the direct sum in the last bits: on random data
/// about 100 float32 epsilons of the sum of the terms' magnitudes at most,
/// near an image's edges (the tests allow 256); they stay the same at every
/// thread count. Off: the direct kernels for every convolution (to compare
/// against, as PyTorch's torch.backends flags choose algorithms).
/// Process-wide; read at each convolution. Neither function throws.
///@{
void set_winograd_convolutions(bool enabled);
bool winograd_convolutions();
///@}

/// Runs one backend's kernels, holding what its kernels need besides their
/// tensors (the CPU's: the thread pool, or none for small work). Made by
/// Backend::make_launcher for the default CompiledGraph of one executable,
/// or for one eager op.
class KernelLauncher {
 public:
  virtual ~KernelLauncher() = default;
  /// Brackets the launches of one run (the CPU takes its thread pool in
  /// begin_run, so that set_num_threads between runs takes effect).
  /// end_run may throw what the run's kernels reported: a device backend
  /// that queues its launches learns of bad input (an id outside a table:
  /// IndexError) or a lost device only when it submits them.
  ///@{
  virtual void begin_run() = 0;
  virtual void end_run() = 0;
  ///@}
  /// Runs op on `in`, writing `out` (for in-place ops, their first input),
  /// on this backend's device: every argument's address is this device's
  /// (KernelArg). Kernels trust their inputs (shape rules checked them when
  /// the op was made).
  virtual void launch(OpKind op, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg& out) = 0;
};

/// A planned graph as its backend sees it: the kernel calls of one
/// Executable, in schedule order, with every argument's device address and
/// its shape at the current batch. The Executable owns it and fills it in
/// before Backend::compile; afterwards it changes only in place (the
/// vectors never grow or move, so addresses into them stay valid):
/// Executable::set_rows rewrites `rows`, the argument shapes and the steps'
/// attributes; Executable::bind rewrites the addresses of the arguments that
/// read an input (or a view of one). Each such change reaches the compiled
/// graph through CompiledGraph::update before the next run. The idea is
/// ggml's graph plans (ggml_backend_graph_plan_create) and CUDA graphs: the
/// layer above hands over a whole graph once, and the backend decides how to
/// run it.
struct GraphProgram {
  /// One kernel call: `op` on the arguments args[first_arg + 1 ...
  /// first_arg + n_inputs], writing args[first_arg] (for in-place ops, the
  /// address of their first input).
  struct Step {
    int32_t node = 0;  ///< the graph node it computes; steps are in increasing node order
    OpKind op = OpKind::Count;  ///< the node's op
    OpAttrs attrs;  ///< at the current rows (a mean over the batch rescales with it)
    uint32_t first_arg = 0;  ///< where its output sits in GraphProgram::args
    uint32_t n_inputs = 0;  ///< how many inputs follow the output there
    double flops = 0;  ///< the op list's flop rule at the planned batch (op_flops)
  };
  /// The fused graph the steps come from (names and planned shapes, for
  /// messages and profiles); owned by the Executable.
  const Graph* graph = nullptr;
  std::vector<Step> steps;  ///< the kernel calls, in schedule order
  /// Every step's output and inputs, in step order. An input that is not
  /// bound yet has a null address; the Executable never runs a step whose
  /// arguments include one.
  std::vector<KernelArg> args;
  /// The planned graph's scratch memory: one allocation of this backend,
  /// which the arena arguments point into at the planner's offsets.
  std::shared_ptr<Storage> arena;
  /// The steps' work summed at the planned batch (what the CPU decides
  /// threading on).
  double flops = 0;
  /// The batch the shapes and attributes describe now (0 for a graph
  /// without inputs).
  int64_t rows = 0;

  /// A step's output argument and its input arguments.
  ///@{
  const KernelArg& output(const Step& step) const { return args[step.first_arg]; }
  std::span<const KernelArg> inputs(const Step& step) const {
    return {args.data() + step.first_arg + 1, step.n_inputs};
  }
  ///@}
};

/// What changed in a GraphProgram since its compiled graph last saw it.
struct ProgramChange {
  bool rows = false;       ///< set_rows: rows, argument shapes, step attributes
  bool addresses = false;  ///< bind: argument addresses of inputs and their views
};

/// A backend's executable form of one GraphProgram, made once when the
/// graph is planned (Backend::compile) and run every step. The CPU's runs
/// the steps one kernel launch at a time, reading the program at each run;
/// a backend that records the whole graph (a command buffer, a CUDA graph)
/// records at compile and replays, as ggml_backend_graph_compute runs a
/// graph plan and cudaGraphLaunch a captured graph.
class CompiledGraph {
 public:
  virtual ~CompiledGraph() = default;
  /// Runs steps [first_step, last_step) of the program in order, on the
  /// program's addresses as of the last update. One executable uses a few
  /// fixed ranges (the whole graph; an optimizer's forward and update
  /// parts), so a recording backend may record per range. Allocates
  /// nothing in steady state. Throws what the backend's kernels throw.
  virtual void run(size_t first_step, size_t last_step) = 0;
  /// Told once, before the next run, after the program changed in place:
  /// a recording backend re-records or patches what `change` names here;
  /// the default (for one that reads the program at every run) ignores it.
  /// Not called for a bind that leaves every address as it was (a device
  /// backend's batch is copied into the same upload buffer each step), nor
  /// for set_rows to the current rows. Allocates nothing unless the backend
  /// must; throws as run.
  virtual void update(const ProgramChange& change) { (void)change; }
};

/// What a device backend has done since the process began, for finding
/// out how work reaches a GPU (a debug counter, as PyTorch's profiler
/// counts kernel launches): queue submissions, and the kernel dispatches
/// and pipeline barriers recorded into command buffers (a recorded graph
/// counts its dispatches once, when it is recorded, however often it is
/// replayed). All 0 on the CPU.
struct DeviceCounters {
  uint64_t submits = 0;     ///< queue submissions
  uint64_t dispatches = 0;  ///< kernel dispatches recorded
  uint64_t barriers = 0;    ///< pipeline barriers recorded
  /// Ops recorded, by OpKind (indexed by size_t(kind)): an op counts once
  /// however many dispatches its kernel records, or none (a view).
  std::array<uint64_t, size_t(OpKind::Count)> ops{};
};

/// A device's implementation of the engine: memory, kernels, executables.
/// Selected per model (Model::compile(..., device)); the CPU by default.
class Backend {
 public:
  virtual ~Backend() = default;
  /// The device it runs on (Device::CPU for the CPU backend).
  virtual Device device() const = 0;
  /// "cpu", "cuda", or a custom backend's name, for messages.
  virtual std::string name() const = 0;
  /// Whether this backend has a kernel for `op`.
  virtual bool has_kernel(OpKind op) const = 0;
  /// Uninitialised memory on this backend's device. Throws ValueError for an
  /// impossible size, MemoryError when the device is out of memory.
  virtual std::shared_ptr<Storage> allocate(size_t bytes) const = 0;
  /// A launcher for work of `flops` in total (op_flops, by the op list's
  /// flop rules, summed over a graph, or one op's): the CPU runs work under
  /// kernels::kParallelFlops on the calling thread.
  virtual std::unique_ptr<KernelLauncher> make_launcher(double flops) const = 0;
  /// The eager API's launcher for work of `flops`: make_launcher's unless a
  /// backend queues eager ops (as a CUDA stream does) and runs them in order
  /// later: then its end_run may return before the work ran, every host
  /// access of the device's memory and every other run on the device waits
  /// for the queued work first, and synchronize() waits for it.
  virtual std::unique_ptr<KernelLauncher> make_eager_launcher(double flops) const { return make_launcher(flops); }
  /// Waits until every queued eager op of this device ran
  /// (torch.cuda.synchronize), and throws what their kernels reported (an
  /// IndexError for an id outside a table) or a lost device. Nothing to
  /// wait for on the CPU.
  virtual void synchronize() const {}
  /// Copies `bytes` host bytes from `src` into [offset, offset + bytes) of
  /// `dst` (this device's memory) in order with the queued eager ops: after
  /// those queued before it, before those queued after it (a small copy is
  /// queued itself, as cudaMemcpyAsync on a stream; a large one waits for
  /// the queue). `src` may be reused when this returns. The default copies
  /// at once (Storage::copy_from_host), which is in order for a backend
  /// that queues nothing.
  virtual void copy_from_host_in_order(Storage& dst, size_t offset, const void* src, size_t bytes) const {
    dst.copy_from_host(offset, src, bytes);
  }
  /// DeviceCounters of this backend's device (zeros unless it counts).
  virtual DeviceCounters counters() const { return {}; }
  /// The fused ops it has kernels for (FusionOptions: the fusion pass makes
  /// only these); none unless a backend says otherwise, so a new backend
  /// runs every graph unfused.
  virtual FusionOptions fusions() const { return FusionOptions::none(); }
  /// The precision its kernels compute in (DTypePolicy); kFloat32 unless a
  /// backend says otherwise.
  virtual DTypePolicy dtype_policy() const { return DTypePolicy::kFloat32; }
  /// Makes the executable form of a planned graph; called once per
  /// Executable, which keeps `program` alive and unmoved for the result's
  /// lifetime (GraphProgram says what may change and how the result hears
  /// of it). The default runs the steps node by node through one launcher
  /// of make_launcher(program.flops), and times each kernel under the
  /// environment variable TG_PROFILE; a backend that records whole graphs
  /// overrides it. Throws what make_launcher throws (the CPU: ValueError
  /// for a TENSORGRAD_CPU this machine cannot run).
  virtual std::unique_ptr<CompiledGraph> compile(const GraphProgram& program) const;

  /// Throws StateError naming the first op of `graph` (its name, node and
  /// layer name) that this backend has no kernel for: a model is refused at
  /// compile time, never run half on another device.
  void check_kernels(const Graph& graph) const;
};

/// The CPU backend (kernels for every op on OpenBLAS, libxsmm and SLEEF, threads from oneTBB).
const std::shared_ptr<const Backend>& cpu_backend();
/// The backend of `device`, from the backend registry (backend/registry.h):
/// cpu_backend() for Device::CPU. Throws StateError when the device is not
/// available: its kind is not registered (naming the registered kinds), or
/// its backend found fewer devices than the index needs (naming those it
/// found). For "cuda" the message starts "no CUDA device": tensorgrad has no
/// CUDA backend, and the message points to the Vulkan backend, which runs on
/// NVIDIA GPUs.
std::shared_ptr<const Backend> backend(Device device);
/// The CPU backend under `policy`: cpu_backend() for kFloat32; for
/// kMixedBFloat16 one named "cpu (mixed_bfloat16)" whose MatMul and
/// convolution kernels take bfloat16 inputs where bfloat16_supported()
/// (the convolutions where bfloat16_convolutions_supported()), and compute
/// in float32 where not (logged once, at the first call with that
/// policy: a warning without AVX512-BF16, an info line with it).
const std::shared_ptr<const Backend>& cpu_backend(DTypePolicy policy);
/// backend(device) under `policy`. Throws ValueError for kMixedBFloat16 on
/// Device::CUDA (tensorgrad has no CUDA backend), and as backend(device)
/// otherwise.
std::shared_ptr<const Backend> backend(Device device, DTypePolicy policy);
/// backend(device)->synchronize(): waits for the device's queued eager ops
/// and throws what they reported. Throws StateError as backend().
void synchronize(Device device);
/// backend(device)->counters(). Throws StateError as backend().
DeviceCounters device_counters(Device device);
/// Whether this build contains the Vulkan backend (TENSORGRAD_VULKAN): then
/// Device("vulkan:N") names the N-th Vulkan device that supports Vulkan 1.2
/// with bufferDeviceAddress and shaderInt64, when the system's Vulkan loader
/// and a driver are installed (found at run time; without them compiling for
/// "vulkan" throws StateError starting "no Vulkan device:" with the reason).
bool built_with_vulkan();
/// How many host allocations Vulkan drivers made through the allocation
/// callbacks (VkAllocationCallbacks) tensorgrad gives each Vulkan device,
/// since the process began; 0 without the Vulkan backend. Drivers allocate
/// on submits (Mesa does on every one); tensorgrad's own code allocates
/// nothing in a training step, and this count lets a test tell the two
/// apart.
uint64_t vulkan_driver_allocations();
/// Device failures on demand, for tests of what a program sees when a GPU
/// fails (fault injection): kOutOfDeviceMemory makes the next device-memory
/// allocation on a Vulkan device (each call one more) fail as out of memory
/// (VK_ERROR_OUT_OF_DEVICE_MEMORY: a MemoryError naming the bytes), and
/// kDeviceLost the next queue submission as a lost device
/// (VK_ERROR_DEVICE_LOST: an Error saying to reload the last checkpoint;
/// every later use of that device's memory throws the same, never reading
/// it), each through the path a real failure takes. kNone clears what is
/// pending and undoes a simulated loss (the device was never really lost).
/// No effect without the Vulkan backend.
///@{
enum class VulkanFault { kNone, kOutOfDeviceMemory, kDeviceLost };
void inject_vulkan_fault(VulkanFault fault);
///@}

}  // namespace tensorgrad
