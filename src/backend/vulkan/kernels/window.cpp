// Vulkan kernels: the window family (kernels.h).
#include "backend/vulkan/kernels/kernels.h"

namespace tensorgrad::vulkan {

void add_window_kernels(KernelTable&) {}

}  // namespace tensorgrad::vulkan
