// Vulkan kernels: the stateful family (kernels.h).
#include "backend/vulkan/kernels/kernels.h"

namespace tensorgrad::vulkan {

void add_stateful_kernels(KernelTable&) {}

}  // namespace tensorgrad::vulkan
