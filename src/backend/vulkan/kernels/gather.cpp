// Vulkan kernels: the gather family (kernels.h), the embedding lookup and
// its gradient (shaders gather.comp and gather_backward.comp; the latter
// sums each row's gradients in the CPU's order without atomics).
#include <algorithm>

#include "backend/vulkan/kernels/kernels.h"

namespace tensorgrad::vulkan {

namespace {

constexpr uint32_t kGroup = 256;
constexpr uint32_t kIdsPerLane = 8;  // gather_backward.comp's PER: chunks of 2048 ids
constexpr uint32_t kMinGroups = 128;  // enough workgroups for a large GPU, and for lavapipe's threads
static_assert(kGroup * kIdsPerLane <= 65536, "gather_backward.comp packs a place in a chunk in 16 bits");

// in: table{V, D}, ids int32{...}.
void gather(Recorder& r, const OpAttrs&, std::span<const KernelArg> in, const KernelArg& out) {
  count32(in[0].numel(), "gather");
  count32(in[1].numel(), "gather");
  struct {
    uint64_t table, ids, y;
    uint32_t n, d, vocab;
  } push{address(in[0]), address(in[1]), address(out), count32(out.numel(), "gather"),
         uint32_t(in[0].shape[1]), uint32_t(in[0].shape[0])};
  if (push.n == 0) return;
  r.dispatch("gather", {kGroup}, push, r.groups(push.n, kGroup));
}

// in: g{..., D}, ids{...}; out: dtable{V, D}. A workgroup scans all the ids
// for its rows, so the fewer lanes per row (each adding several columns),
// the more rows per workgroup and the fewer scans (N V / rows id reads): one
// lane per row, unless that leaves fewer than kMinGroups workgroups (a small
// vocabulary), then lanes doubled up to D or the workgroup.
void gather_backward(Recorder& r, const OpAttrs&, std::span<const KernelArg> in, const KernelArg& out) {
  count32(in[0].numel(), "gather_backward");
  count32(out.numel(), "gather_backward");
  const uint32_t vocab = uint32_t(out.shape[0]), d = uint32_t(out.shape[1]);
  if (vocab == 0 || d == 0) return;
  uint32_t lanes = 1;
  while (lanes < kGroup && lanes < d && (vocab + kGroup / lanes - 1) / (kGroup / lanes) < kMinGroups) lanes *= 2;
  lanes = std::min(lanes, d);
  const uint32_t rows = kGroup / lanes;
  struct {
    uint64_t g, ids, dt;
    uint32_t n, d, vocab, rows, lanes;
  } push{address(in[0]), address(in[1]), address(out), count32(in[1].numel(), "gather_backward"), d, vocab, rows,
         lanes};
  r.dispatch("gather_backward", {kGroup, kIdsPerLane}, push, r.groups(vocab, rows));
}

}  // namespace

void add_gather_kernels(KernelTable& t) {
  t[size_t(OpKind::Gather)] = gather;
  t[size_t(OpKind::GatherBackward)] = gather_backward;
}

}  // namespace tensorgrad::vulkan
