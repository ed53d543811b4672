#pragma once
// The Vulkan kernel table: per op, the function that records its dispatches
// (null where the Vulkan backend has no kernel for the op yet). Each family
// file of this folder fills in its ops; a family's forward and backward sit
// side by side, with its shaders in ../shaders/.
#include <array>
#include <span>

#include "backend/vulkan/recorder.h"
#include "tensorgrad/ops/op.h"

namespace tensorgrad::vulkan {

/// Records op on `in`, writing `out` (for in-place ops, their first input's
/// memory). Arguments are contiguous, row-major, on the recorder's device;
/// their shapes are those of the current batch.
using Kernel = void (*)(Recorder& r, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg& out);
using KernelTable = std::array<Kernel, size_t(OpKind::Count)>;

/// The table, filled once.
const KernelTable& kernel_table();

// The families (one .cpp each).
void add_elementwise_kernels(KernelTable& t);  // element-wise and activation ops with their gradients, Fill, Scale
void add_reduction_kernels(KernelTable& t);    // Sum, Mean, SumTo, BroadcastTo, axis reductions
void add_matmul_kernels(KernelTable& t);       // MatMul, AccumulateGrad
void add_loss_kernels(KernelTable& t);         // softmax, losses and their gradients, metrics
void add_optimizer_kernels(KernelTable& t);    // optimizer tick and updates
void add_stateful_kernels(KernelTable& t);     // clipping, moving averages, counters, dropout, state copies
void add_conv_kernels(KernelTable& t);         // Conv2D and its input and filter gradients
void add_window_kernels(KernelTable& t);       // max and average pooling and their gradients
void add_gather_kernels(KernelTable& t);       // Gather (embeddings) and its gradient
void add_batch_norm_kernels(KernelTable& t);   // batch statistics, batch norm and its gradients
void add_recurrent_kernels(KernelTable& t);    // the fused LSTM and GRU sequences and their gradients
void add_attention_kernels(KernelTable& t);    // the fused attention and its gradient
void add_rms_norm_kernels(KernelTable& t);     // RMS normalization and its gradient
void add_rope_kernels(KernelTable& t);         // the rotary position embedding (its gradient is itself, inverted)

}  // namespace tensorgrad::vulkan
