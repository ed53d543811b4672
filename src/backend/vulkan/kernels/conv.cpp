// Vulkan kernels: the conv family (kernels.h).
#include "backend/vulkan/kernels/kernels.h"

namespace tensorgrad::vulkan {

void add_conv_kernels(KernelTable&) {}

}  // namespace tensorgrad::vulkan
