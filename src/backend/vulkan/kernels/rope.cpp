// Vulkan kernel: Rope (shader rope.comp), one invocation per output
// element. The angle and its cosine and sine are float32 here (the CPU's
// are double, rounded to float32 at the end), so the two differ by about
// position x 1e-7 in the angle.
#include "backend/vulkan/kernels/kernels.h"

namespace tensorgrad::vulkan {

namespace {

constexpr uint32_t kGroup = 256;
// rope.comp's flag bits.
constexpr uint32_t kShaderAdjacent = 1, kShaderInverse = 2;

// in: x {B, T, H, D}, positions int32 {T}.
void rope(Recorder& r, const OpAttrs& at, std::span<const KernelArg> in, const KernelArg& out) {
  struct {
    uint64_t x, pos, y;
    uint32_t n, steps, heads, d, dims, flags;
    float theta, scaling;
  } p{};
  p.x = address(in[0]), p.pos = address(in[1]), p.y = address(out);
  p.n = count32(in[0].numel(), "rope");
  p.steps = uint32_t(in[0].shape[1]), p.heads = uint32_t(in[0].shape[2]), p.d = uint32_t(in[0].shape[3]);
  p.dims = uint32_t(at.rope.dims ? at.rope.dims : in[0].shape[3]);
  p.flags = (at.rope.pairing == RopePairing::Adjacent ? kShaderAdjacent : 0u) |
            (at.flags & kRopeInverse ? kShaderInverse : 0u);
  p.theta = at.rope.theta, p.scaling = at.rope.scaling_factor;
  if (p.n == 0) return;
  r.dispatch("rope", {kGroup}, p, r.groups(p.n, kGroup));
}

}  // namespace

void add_rope_kernels(KernelTable& t) { t[size_t(OpKind::Rope)] = rope; }

}  // namespace tensorgrad::vulkan
