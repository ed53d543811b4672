// Vulkan kernels: the reduction family (kernels.h).
#include "backend/vulkan/kernels/kernels.h"

namespace tensorgrad::vulkan {

void add_reduction_kernels(KernelTable&) {}

}  // namespace tensorgrad::vulkan
