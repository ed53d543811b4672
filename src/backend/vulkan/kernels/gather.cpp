// Vulkan kernels: the gather family (kernels.h).
#include "backend/vulkan/kernels/kernels.h"

namespace tensorgrad::vulkan {

void add_gather_kernels(KernelTable&) {}

}  // namespace tensorgrad::vulkan
