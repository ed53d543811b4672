// Vulkan kernels: the loss family (kernels.h).
#include "backend/vulkan/kernels/kernels.h"

namespace tensorgrad::vulkan {

void add_loss_kernels(KernelTable&) {}

}  // namespace tensorgrad::vulkan
