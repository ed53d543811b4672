#include "tensorgrad/backend/backend.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "backend/vulkan/vulkan_backend.h"
#include "tensorgrad/core/error.h"

namespace tensorgrad {

namespace {

// TG_PROFILE=1 in the environment: time every kernel and print the totals per
// op at exit (a developer's tool; off by default, one branch per node), with
// the products' floating-point operations and the bytes each kernel reads
// and writes, for the roofline (bench/roofline.py). TG_PROFILE=shapes also
// splits each op by its input and output shapes (which layer costs what).
struct OpProfile {
  bool enabled = std::getenv("TG_PROFILE") != nullptr;
  bool by_shape = enabled && std::strcmp(std::getenv("TG_PROFILE"), "shapes") == 0;
  double seconds[size_t(OpKind::Count)] = {};
  int64_t calls[size_t(OpKind::Count)] = {};
  double flops[size_t(OpKind::Count)] = {};
  double bytes[size_t(OpKind::Count)] = {};
  struct Split {
    double seconds = 0;
    int64_t calls = 0;
  };
  std::map<std::string, Split> shapes;
  int64_t runs = 0;
  ~OpProfile() {
    if (!enabled) return;
    double total = 0;
    for (double t : seconds) total += t;
    std::fprintf(stderr, "TG_PROFILE: %.3f s in kernels, %lld runs\n", total, (long long)runs);
    for (size_t i = 0; i < size_t(OpKind::Count); ++i)
      if (calls[i])
        std::fprintf(stderr, "  %-32s %8.3f s %5.1f%% %10lld calls %12.3f GFLOP %12.3f GB\n", op_info(OpKind(i)).name,
                     seconds[i], 100.0 * seconds[i] / total, (long long)calls[i], flops[i] * 1e-9, bytes[i] * 1e-9);
    for (const auto& [key, split] : shapes)
      std::fprintf(stderr, "  %-80s %8.3f s %10lld calls\n", key.c_str(), split.seconds, (long long)split.calls);
  }
};
OpProfile g_profile;

double profile_bytes(const Graph& g, const Node& n) {
  double b = double(n.shape.numel() * dtype_size(n.dtype));
  for (int k = 0; k < n.n_inputs; ++k) {
    const Node& in = g.node(n.inputs[size_t(k)]);
    b += double(in.shape.numel() * dtype_size(in.dtype));
  }
  return b;
}

// The default CompiledGraph: one launch per step, reading the program at
// each run, so changes to it need no update.
class NodeByNode final : public CompiledGraph {
 public:
  NodeByNode(const GraphProgram& program, std::unique_ptr<KernelLauncher> launcher)
      : program_(program), launcher_(std::move(launcher)) {}

  void run(size_t first_step, size_t last_step) override {
    // end_run may throw (a device backend learns of its kernels' errors
    // there), so the scope ends the run only when a launch threw, and then
    // swallows what end_run says: the launch's error is the one to report.
    struct RunScope {
      KernelLauncher& launcher;
      bool ended = false;
      explicit RunScope(KernelLauncher& l) : launcher(l) { launcher.begin_run(); }
      ~RunScope() {
        if (ended) return;
        try {
          launcher.end_run();
        } catch (...) {
        }
      }
    } scope(*launcher_);
    for (size_t s = first_step; s < last_step; ++s) {
      const GraphProgram::Step& step = program_.steps[s];
      if (g_profile.enabled) timed(step);
      else launcher_->launch(step.op, step.attrs, program_.inputs(step), program_.output(step));
    }
    scope.ended = true;
    launcher_->end_run();
    if (g_profile.enabled && first_step == 0) ++g_profile.runs;
  }

 private:
  void timed(const GraphProgram::Step& step) {
    const auto t0 = std::chrono::steady_clock::now();
    launcher_->launch(step.op, step.attrs, program_.inputs(step), program_.output(step));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const Graph& g = *program_.graph;
    const Node& n = g.nodes()[size_t(step.node)];
    g_profile.seconds[size_t(n.op)] += seconds;
    if (g_profile.by_shape) {
      std::string key = op_info(n.op).name;
      for (int k = 0; k < n.n_inputs; ++k) key.append(" ").append(g.node(n.inputs[size_t(k)]).shape.str());
      key.append(" -> ").append(n.shape.str());
      OpProfile::Split& split = g_profile.shapes[key];
      split.seconds += seconds;
      ++split.calls;
    }
    ++g_profile.calls[size_t(n.op)];
    g_profile.flops[size_t(n.op)] += step.flops;
    g_profile.bytes[size_t(n.op)] += profile_bytes(g, n);
  }

  const GraphProgram& program_;
  std::unique_ptr<KernelLauncher> launcher_;
};

}  // namespace

std::unique_ptr<CompiledGraph> Backend::compile(const GraphProgram& program) const {
  return std::make_unique<NodeByNode>(program, make_launcher(program.flops));
}

void Backend::check_kernels(const Graph& graph) const {
  const auto& nodes = graph.nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (has_kernel(n.op)) continue;
    throw StateError(std::string("the ") + name() + " backend has no kernel for op " + op_info(n.op).name +
                     " (node " + std::to_string(i) + (n.name.empty() ? "" : ", '" + n.name + "'") +
                     "): this model cannot run on " + device_name(device()) +
                     "; compile it for Device::CPU, or leave out the layer that needs the op");
  }
}

std::shared_ptr<const Backend> backend(Device device, DTypePolicy policy) {
  switch (policy) {
    case DTypePolicy::kFloat32: return backend(device);
    case DTypePolicy::kMixedBFloat16:
      if (device != Device::CPU)
        throw ValueError(std::string("compile: the mixed_bfloat16 policy is built for the CPU only; ") +
                         device_name(device) + " has no bfloat16 kernels yet. Compile for Device::CPU, or with "
                         "DTypePolicy::kFloat32");
      return cpu_backend(policy);
  }
  throw ValueError("backend: unknown dtype policy");
}

const char* dtype_policy_name(DTypePolicy policy) {
  switch (policy) {
    case DTypePolicy::kFloat32: return "float32";
    case DTypePolicy::kMixedBFloat16: return "mixed_bfloat16";
  }
  return "unknown";
}

bool built_with_vulkan() { return vulkan::built(); }
uint64_t vulkan_driver_allocations() { return vulkan::driver_allocation_count(); }
void inject_vulkan_fault(VulkanFault fault) { vulkan::inject(fault); }

}  // namespace tensorgrad
