// Vulkan kernels: the batch_norm family (kernels.h).
#include "backend/vulkan/kernels/kernels.h"

namespace tensorgrad::vulkan {

void add_batch_norm_kernels(KernelTable&) {}

}  // namespace tensorgrad::vulkan
