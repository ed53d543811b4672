// Vulkan kernels: the batch_norm family (kernels.h), the CPU's
// kernels/batch_norm.cpp on the {rows, C} view of x (C its last axis). Two
// shaders: batch_norm_reduce.comp (the per-channel sums of BatchNormStats
// and BatchNormParamGrad, one workgroup per group of channels, in a fixed
// order) and batch_norm_map.comp (the element-wise BatchNorm and
// BatchNormBackward); their shared rules are in shaders/batch_norm.glsl.
// The CPU sums in double; the shaders in compensated float pairs, with the
// variance from the deviations (a second pass) and sum(g xhat) from exact
// products, so no float cancellation separates them from the CPU's.
#include "backend/vulkan/kernels/kernels.h"

namespace tensorgrad::vulkan {

namespace {

constexpr uint32_t kGroup = 256;
// Channels per workgroup of the reductions: at most 16 (a row's 64 bytes
// read together), at least 8 (32 bytes, a GPU's memory sector), fewer
// where that makes more workgroups, up to 32: with no scratch memory a
// channel's rows are summed by one workgroup, so the channel groups are all
// the parallelism there is (lavapipe runs a workgroup on one thread, a GPU
// on one multiprocessor).
constexpr uint32_t kMaxCols = 16, kMinCols = 8, kWantedGroups = 32;

enum Reduce : uint32_t { kStats = 0, kParamGrad = 1 };
enum Map : uint32_t { kForward = 0, kBackward = 1 };
enum MapFlag : uint32_t { kRelu = 1, kResidual = 2, kOwnStats = 4 };

int64_t channels(const KernelArg& x) { return x.shape.rank() == 0 ? 1 : x.shape[-1]; }
int64_t rows_of(const KernelArg& x) {
  const int64_t C = channels(x);
  return C ? x.numel() / C : 0;
}

struct ReducePush {
  uint64_t x, stats, g, gamma, beta, y;
  uint32_t rows, C, relu;
  float eps;
};

// The reductions' workgroup: the largest power of two the device allows up
// to 256 (128 is guaranteed), as the shader's tree halves it.
uint32_t reduce_group(const Recorder& r) { return r.caps().max_group_invocations >= kGroup ? kGroup : 128; }

// One workgroup per group of channels (kMaxCols), looping over the channel
// groups beyond the device's grid.
void reduce(Recorder& r, Reduce op, const ReducePush& push) {
  uint32_t cols = 1;
  while (cols < kMaxCols && cols < push.C) cols *= 2;
  while (cols > kMinCols && (push.C + cols - 1) / cols < kWantedGroups) cols /= 2;
  r.dispatch("batch_norm_reduce", {reduce_group(r), uint32_t(op), cols}, push, r.groups(push.C, cols));
}

void batch_norm_stats(Recorder& r, const OpAttrs&, std::span<const KernelArg> in, const KernelArg& out) {
  const KernelArg& x = in[0];
  const ReducePush push{address(x), address(x), address(x), address(x), address(x), address(out),
                        count32(rows_of(x), "batch_norm_stats"), count32(channels(x), "batch_norm_stats"), 0u,
                        0.0f};
  count32(x.numel(), "batch_norm_stats");
  if (push.C == 0) return;
  reduce(r, kStats, push);
}

// in: x, stats, g [, gamma, beta: kReluOutput's mask].
void batch_norm_param_grad(Recorder& r, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg& out) {
  const KernelArg& x = in[0];
  const bool relu = (attrs.flags & kReluOutput) != 0;
  if (relu && in.size() < 5) throw ValueError("Vulkan batch_norm_param_grad: kReluOutput needs gamma and beta");
  const ReducePush push{address(x),
                        address(in[1]),
                        address(in[2]),
                        address(relu ? in[3] : x),
                        address(relu ? in[4] : x),
                        address(out),
                        count32(rows_of(x), "batch_norm_param_grad"),
                        count32(channels(x), "batch_norm_param_grad"),
                        relu ? 1u : 0u,
                        attrs.eps};
  count32(x.numel(), "batch_norm_param_grad");
  if (push.C == 0) return;
  reduce(r, kParamGrad, push);
}

struct MapPush {
  uint64_t x, stats, gamma, beta, g, sums, y;
  uint32_t rows, C, flags;
  float eps, inv_n;
};

// About kRowsPerInvocation rows of one channel per invocation: each
// computes its channel's coefficients once (lavapipe: about 100 -> 40 ms for
// the forward of {64, 28, 28, 32} with ReLU, where every element computed
// them and divided its index by C).
constexpr uint64_t kRowsPerInvocation = 16;

void map(Recorder& r, Map op, const MapPush& push) {
  if (uint64_t(push.rows) * push.C == 0) return;
  const uint64_t invocations = (push.rows + kRowsPerInvocation - 1) / kRowsPerInvocation * push.C;
  r.dispatch("batch_norm_map", {kGroup, uint32_t(op)}, push, r.groups(invocations, kGroup));
}

// in: x, stats, gamma, beta [, residual].
void batch_norm(Recorder& r, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg& out) {
  const KernelArg& x = in[0];
  const bool residual = in.size() > 4;
  const uint32_t flags = ((attrs.flags & kReluOutput) ? kRelu : 0u) | (residual ? kResidual : 0u);
  count32(x.numel(), "batch_norm");
  const MapPush push{address(x),
                     address(in[1]),
                     address(in[2]),
                     address(in[3]),
                     address(residual ? in[4] : x),
                     address(x),
                     address(out),
                     uint32_t(rows_of(x)),
                     uint32_t(channels(x)),
                     flags,
                     attrs.eps,
                     0.0f};
  map(r, kForward, push);
}

// in: x, stats, gamma, g, param_grad [, beta: kReluOutput's mask].
void batch_norm_backward(Recorder& r, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg& out) {
  const KernelArg& x = in[0];
  const bool relu = (attrs.flags & kReluOutput) != 0;
  if (relu && in.size() < 6) throw ValueError("Vulkan batch_norm_backward: kReluOutput needs beta");
  const int64_t rows = rows_of(x);
  count32(x.numel(), "batch_norm_backward");
  const uint32_t flags = (relu ? kRelu : 0u) | (attrs.own_stats ? kOwnStats : 0u);
  const MapPush push{address(x),
                     address(in[1]),
                     address(in[2]),
                     address(relu ? in[5] : x),
                     address(in[3]),
                     address(in[4]),
                     address(out),
                     count32(rows, "batch_norm_backward"),
                     count32(channels(x), "batch_norm_backward"),
                     flags,
                     attrs.eps,
                     rows ? 1.0f / float(rows) : 0.0f};  // as the CPU rounds it
  map(r, kBackward, push);
}

}  // namespace

void add_batch_norm_kernels(KernelTable& t) {
  t[size_t(OpKind::BatchNormStats)] = batch_norm_stats;
  t[size_t(OpKind::BatchNorm)] = batch_norm;
  t[size_t(OpKind::BatchNormParamGrad)] = batch_norm_param_grad;
  t[size_t(OpKind::BatchNormBackward)] = batch_norm_backward;
}

}  // namespace tensorgrad::vulkan
