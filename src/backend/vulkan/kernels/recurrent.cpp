// Vulkan kernels: the recurrent family (kernels.h).
#include "backend/vulkan/kernels/kernels.h"

namespace tensorgrad::vulkan {

void add_recurrent_kernels(KernelTable&) {}

}  // namespace tensorgrad::vulkan
