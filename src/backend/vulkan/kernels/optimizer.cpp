// Vulkan kernels: the optimizer family (kernels.h).
#include "backend/vulkan/kernels/kernels.h"

namespace tensorgrad::vulkan {

void add_optimizer_kernels(KernelTable&) {}

}  // namespace tensorgrad::vulkan
