// Vulkan kernels: RmsNorm and RmsNormBackward (shader rms_norm.comp), one
// invocation per row of the last axis, summing in the row's order: the
// CPU's formulas (kernels/rms_norm.cpp), its sums in another order.
#include "backend/vulkan/kernels/kernels.h"

namespace tensorgrad::vulkan {

namespace {

constexpr uint32_t kGroup = 64;
enum Mode : uint32_t { kForward = 0, kBackward = 1 };

struct Push {
  uint64_t x, g, w, y;
  uint32_t rows, d, has_weight;
  float eps;
};

// Forward in: x [, w]; backward in: x, g [, w]. out: y or dx.
void record(Recorder& r, const OpAttrs& at, std::span<const KernelArg> in, const KernelArg& out, Mode mode) {
  const char* name = mode == kForward ? "rms_norm" : "rms_norm_backward";
  count32(in[0].numel(), name);
  const size_t weight = mode == kForward ? 1 : 2;
  Push p{};
  p.x = address(in[0]);
  if (mode == kBackward) p.g = address(in[1]);
  if (in.size() > weight) p.w = address(in[weight]), p.has_weight = 1;
  p.y = address(out);
  p.d = uint32_t(in[0].shape[-1]);
  p.rows = uint32_t(in[0].numel() / in[0].shape[-1]);
  p.eps = at.eps;
  if (p.rows == 0) return;
  r.dispatch("rms_norm", {kGroup, mode}, p, r.groups(p.rows, kGroup));
}

void rms_norm(Recorder& r, const OpAttrs& at, std::span<const KernelArg> in, const KernelArg& out) {
  record(r, at, in, out, kForward);
}
void rms_norm_backward(Recorder& r, const OpAttrs& at, std::span<const KernelArg> in, const KernelArg& out) {
  record(r, at, in, out, kBackward);
}

}  // namespace

void add_rms_norm_kernels(KernelTable& t) {
  t[size_t(OpKind::RmsNorm)] = rms_norm;
  t[size_t(OpKind::RmsNormBackward)] = rms_norm_backward;
}

}  // namespace tensorgrad::vulkan
