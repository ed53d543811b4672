#include "tensorgrad/backend/backend.h"

#include "backend/cuda/cuda_backend.h"
#include "tensorgrad/core/error.h"

namespace tensorgrad {

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

bool built_with_cuda() { return cuda::built(); }

}  // namespace tensorgrad
