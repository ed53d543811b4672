// Vulkan kernels: the gather family (kernels.h), the embedding lookup and
// its gradient (shaders gather.comp and gather_backward.comp; the latter
// sums each row's gradients in the CPU's order without atomics).
#include <algorithm>

#include "backend/vulkan/kernels/kernels.h"

namespace tensorgrad::vulkan {

namespace {

constexpr uint32_t kGroup = 256;
// gather_backward.comp: every lane of a workgroup walks the list of its
// hits, so a small workgroup (64: 4 teams) walks each hit fewer times
// (lavapipe, V = 10000, D = 64, N = 4096: 15 ms, against 60 to 85 with 256).
constexpr uint32_t kBackwardGroup = 64;
constexpr uint32_t kIdsPerLane = 8;  // gather_backward.comp's PER: chunks of 512 ids
constexpr uint32_t kMinGroups = 64;  // workgroups enough for a large GPU; on lavapipe fewer scans matter more
constexpr uint32_t kTeamLanes = 16;  // lanes that add one g row (lavapipe runs 8 wide, GPUs 32 or 64)
static_assert(kBackwardGroup * kIdsPerLane <= 65536, "gather_backward.comp packs a place in a chunk in 16 bits");

// in: table{V, D}, ids int32{...}.
void gather(Recorder& r, const OpAttrs&, std::span<const KernelArg> in, const KernelArg& out) {
  count32(in[0].numel(), "gather");
  count32(in[1].numel(), "gather");
  struct {
    uint64_t table, ids, y, status;
    uint32_t n, d, vocab;
  } push{address(in[0]), address(in[1]), address(out), r.status(), count32(out.numel(), "gather"),
         uint32_t(in[0].shape[1]), uint32_t(in[0].shape[0])};
  if (push.n == 0) return;
  r.dispatch("gather", {kGroup}, push, r.groups(push.n, kGroup));
}

// in: g{..., D}, ids{...}; out: dtable{V, D}. Teams of kTeamLanes lanes
// (fewer for a narrow D) add whole g rows, so that every lane of a team has
// work for each hit; a workgroup scans all the ids for its rows, so it owns
// as many rows as leave kMinGroups workgroups (N V / rows id reads in all).
void gather_backward(Recorder& r, const OpAttrs&, std::span<const KernelArg> in, const KernelArg& out) {
  count32(in[0].numel(), "gather_backward");
  count32(out.numel(), "gather_backward");
  const uint32_t vocab = uint32_t(out.shape[0]), d = uint32_t(out.shape[1]);
  if (vocab == 0 || d == 0) return;
  uint32_t lanes = 1;
  while (lanes < kTeamLanes && lanes < d) lanes *= 2;
  const uint32_t teams = kBackwardGroup / lanes;
  const uint32_t per_team = std::clamp<uint32_t>(vocab / (teams * kMinGroups), 1, 65535 / teams);
  const uint32_t rows = teams * per_team;
  struct {
    uint64_t g, ids, dt;
    uint32_t n, d, vocab, rows, lanes;
  } push{address(in[0]), address(in[1]), address(out), count32(in[1].numel(), "gather_backward"), d, vocab, rows,
         lanes};
  r.dispatch("gather_backward", {kBackwardGroup, kIdsPerLane}, push, r.groups(vocab, rows));
}

}  // namespace

void add_gather_kernels(KernelTable& t) {
  t[size_t(OpKind::Gather)] = gather;
  t[size_t(OpKind::GatherBackward)] = gather_backward;
}

}  // namespace tensorgrad::vulkan
