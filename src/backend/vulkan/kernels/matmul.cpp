// Vulkan kernels: the matmul family (kernels.h): MatMul and AccumulateGrad.
#include <algorithm>

#include "backend/vulkan/kernels/kernels.h"

namespace tensorgrad::vulkan {

namespace {

// matmul.comp's flags.
constexpr uint32_t kBias = 1, kRelu = 2, kAccumulate = 4;

// A tiling of matmul.comp (its constants 1 to 5). Every tiling sums each
// element in the same order, so the choice changes the speed only.
struct Tiling {
  uint32_t tm, tn, tk, rm, rn;
  uint32_t invocations() const { return (tm / rm) * (tn / rn); }
  uint32_t shared_bytes() const { return tk * (tm + tn) * 4; }
};

// 64 x 64 tiles of 8 x 8 blocks per invocation: 64 fmas per 4 vector reads
// of shared memory (what lavapipe, whose every memory access loops over the
// SIMD lanes, is bound by). A narrow C (a classifier's few outputs) or a few
// rows (one sample) take a thinner tile rather than computing padding.
Tiling choose_tiling(const DeviceCaps& caps, uint32_t m, uint32_t n) {
  Tiling t{64, 64, 16, 8, 8};
  if (n <= 32 && m > n) t = {64, 16, 16, 8, 4};
  else if (m <= 32 && n > m) t = {16, 64, 16, 4, 8};
  else if (m <= 32 && n <= 32) t = {32, 32, 16, 4, 4};
  // Fallbacks within Vulkan's guaranteed minimums (128 invocations, 16 KiB
  // of shared memory): every tiling above is within them already.
  if (t.invocations() > caps.max_group_invocations || t.shared_bytes() > caps.max_shared_bytes) t = {16, 16, 8, 4, 4};
  return t;
}

// C{M,N} = init + op(A) op(B) (flags: kBias, kRelu, kAccumulate), over
// `batch` matrices; a{rows, cols} and b as stored (before trans_a / trans_b).
void record_matmul(Recorder& r, const OpAttrs& attrs, const KernelArg& a, const KernelArg& b, const KernelArg* bias,
                   const KernelArg& c, uint32_t flags, const char* op) {
  const int rank = c.shape.rank();
  count32(a.numel(), op), count32(b.numel(), op);
  struct {
    uint64_t a, b, c, bias;
    uint32_t m, n, k, batch, flags;
  } push{address(a),
         address(b),
         address(c),
         bias ? address(*bias) : 0,
         uint32_t(c.shape[rank - 2]),
         uint32_t(c.shape[rank - 1]),
         uint32_t(attrs.trans_a ? a.shape[rank - 2] : a.shape[rank - 1]),
         rank == 3 ? uint32_t(c.shape[0]) : 1u,
         flags};
  if (count32(c.numel(), op) == 0) return;
  // acc + (an empty sum) leaves acc as it is, -0 included.
  if (push.k == 0 && (flags & kAccumulate)) return;
  const Tiling t = choose_tiling(r.caps(), push.m, push.n);
  const uint32_t* lim = r.caps().max_group_count;
  const uint32_t gx = std::min((push.n + t.tn - 1) / t.tn, lim[0]), gy = std::min((push.m + t.tm - 1) / t.tm, lim[1]),
                 gz = std::min(push.batch, lim[2]);
  r.dispatch("matmul", {t.invocations(), t.tm, t.tn, t.tk, t.rm, t.rn, attrs.trans_a ? 1u : 0u, attrs.trans_b ? 1u : 0u},
             push, gx, gy, gz);
}

void matmul(Recorder& r, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg& out) {
  const uint32_t flags = (in.size() == 3 ? kBias : 0) | (attrs.flags & kReluOutput ? kRelu : 0);
  record_matmul(r, attrs, in[0], in[1], in.size() == 3 ? &in[2] : nullptr, out, flags, "matmul");
}

// (acc, g): acc += g; (acc, A, B): acc += op(A) op(B) in the product's own
// pass (out is acc's memory).
void accumulate_grad(Recorder& r, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg& out) {
  if (in.size() == 3) return record_matmul(r, attrs, in[1], in[2], nullptr, out, kAccumulate, "accumulate_grad");
  constexpr uint32_t kGroup = 256;
  struct {
    uint64_t acc, g;
    uint32_t n;
  } push{address(out), address(in[1]), count32(out.numel(), "accumulate_grad")};
  if (push.n == 0) return;
  r.dispatch("matmul_add", {kGroup}, push, r.groups(push.n, kGroup));
}

}  // namespace

void add_matmul_kernels(KernelTable& t) {
  t[size_t(OpKind::MatMul)] = matmul;
  t[size_t(OpKind::AccumulateGrad)] = accumulate_grad;
}

}  // namespace tensorgrad::vulkan
