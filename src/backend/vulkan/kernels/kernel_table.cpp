// The Vulkan kernel table (kernels.h): every family adds its ops once.
#include "backend/vulkan/kernels/kernels.h"

namespace tensorgrad::vulkan {

const KernelTable& kernel_table() {
  static const KernelTable table = [] {
    KernelTable t{};
    add_elementwise_kernels(t);
    add_reduction_kernels(t);
    add_matmul_kernels(t);
    add_loss_kernels(t);
    add_optimizer_kernels(t);
    add_stateful_kernels(t);
    add_conv_kernels(t);
    add_window_kernels(t);
    add_gather_kernels(t);
    add_batch_norm_kernels(t);
    add_recurrent_kernels(t);
    add_attention_kernels(t);
    add_rms_norm_kernels(t);
    add_rope_kernels(t);
    return t;
  }();
  return table;
}

}  // namespace tensorgrad::vulkan
