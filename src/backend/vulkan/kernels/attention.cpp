// Vulkan kernels: Attention and AttentionBackward (shaders attention.comp
// and attention_backward.comp, helpers in attention.glsl). One invocation
// per query row forward; backward, one per query row for dq and one per key
// for dk and dv, each summing in a fixed order. The shaders read q, k and v
// from device memory for every pair (no tiles in shared memory yet), so they
// are the CPU's results on any device, not yet a GPU's speed. Grouped-query
// attention: query row b reads key-value row b / group; backward, the
// invocation of key (kv, j) walks the queries of the kv row's whole group.
#include "backend/vulkan/kernels/kernels.h"

namespace tensorgrad::vulkan {

namespace {

constexpr uint32_t kGroup = 64;

struct Push {
  uint64_t q, k, v, y, g, mask, counter, dx;
  uint32_t n, lq, lk, d, dv, mask_n, mask_q, flags, group;
  float scale, rate;
  uint64_t seed;
};

// attention.glsl's flag bits.
constexpr uint32_t kShaderCausal = 1, kShaderMask = 2;

// The push block for in = q, k, v [, y, g] [, mask] [, counter].
Push push_of(const OpAttrs& at, std::span<const KernelArg> in, bool backward) {
  Push p{};
  p.q = address(in[0]), p.k = address(in[1]), p.v = address(in[2]);
  for (size_t i = 0; i < 3; ++i) count32(in[i].numel(), "attention");
  p.n = uint32_t(in[0].shape[0]), p.lq = uint32_t(in[0].shape[1]), p.d = uint32_t(in[0].shape[2]);
  p.lk = uint32_t(in[1].shape[1]), p.dv = uint32_t(in[2].shape[2]);
  p.group = uint32_t(in[0].shape[0] / in[1].shape[0]);
  size_t next = 3;
  if (backward) p.y = address(in[3]), p.g = address(in[4]), next = 5;
  if (at.flags & kAttentionMask) {
    p.mask = address(in[next]);
    p.mask_n = uint32_t(in[next].shape[0]), p.mask_q = uint32_t(in[next].shape[1]);
    p.flags |= kShaderMask;
    ++next;
  }
  if (at.rate > 0.0f) p.counter = address(in[next]);
  if (at.flags & kCausal) p.flags |= kShaderCausal;
  p.scale = at.factor, p.rate = at.rate, p.seed = at.seed;
  return p;
}

void attention(Recorder& r, const OpAttrs& at, std::span<const KernelArg> in, const KernelArg& out) {
  Push p = push_of(at, in, false);
  p.y = address(out);
  count32(out.numel(), "attention");
  r.dispatch("attention", {kGroup}, p, r.groups(p.n * p.lq, kGroup));
}

void attention_backward(Recorder& r, const OpAttrs& at, std::span<const KernelArg> in, const KernelArg& out) {
  Push p = push_of(at, in, true);
  p.dx = address(out);
  count32(out.numel(), "attention_backward");
  r.dispatch("attention_backward", {kGroup, 0}, p, r.groups(p.n * p.lq, kGroup));
  r.dispatch("attention_backward", {kGroup, 1}, p, r.groups(p.n / p.group * p.lk, kGroup));
}

}  // namespace

void add_attention_kernels(KernelTable& t) {
  t[size_t(OpKind::Attention)] = attention;
  t[size_t(OpKind::AttentionBackward)] = attention_backward;
}

}  // namespace tensorgrad::vulkan
