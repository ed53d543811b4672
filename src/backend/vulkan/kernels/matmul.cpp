// Vulkan kernels: the matmul family (kernels.h).
#include "backend/vulkan/kernels/kernels.h"

namespace tensorgrad::vulkan {

void add_matmul_kernels(KernelTable&) {}

}  // namespace tensorgrad::vulkan
