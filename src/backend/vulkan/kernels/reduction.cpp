// Vulkan kernels: the reduction family (kernels.h): Sum, Mean, SumTo,
// BroadcastTo, SumAxis, MeanAxis, MaxAxis, MaxAxisBackward, MeanLastAxis.
// Every reduction is one dispatch of reduce_slices.comp, which views x as
// outputs (the kept axes) times slices (the reduced axes) and sums each
// slice in a fixed order, so a run's bits never change.
#include <algorithm>
#include <cmath>

#include "backend/vulkan/kernels/kernels.h"

namespace tensorgrad::vulkan {

namespace {

constexpr uint32_t kGroup = 256;

// reduce_slices.comp's OP codes.
enum Reduce : uint32_t { kSum = 0, kMean = 1, kMax = 2, kMaxBackward = 3 };

// Axes merged into groups (size, stride of the innermost axis), outermost
// first. Axes of size 1 are dropped, and neighbours of one kind merge, so a
// rank-6 tensor has at most 3 kept and 3 reduced groups (they alternate).
struct Groups {
  uint32_t rank = 0;
  uint32_t size[3] = {1, 1, 1};
  uint32_t stride[3] = {0, 0, 0};
};

// x (contiguous, row-major) viewed as n_out slices of count elements.
struct Slices {
  Groups kept, red;
  uint32_t n_out = 1, count = 1;
};

Slices slices(const Shape& x, const bool* reduced, const char* op) {
  count32(x.numel(), op);
  Slices s;
  int64_t stride = 1;
  int64_t strides[Shape::kMaxRank];
  for (int d = x.rank() - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= x[d];
  }
  int last = -1;  // the kind of the last group: 0 kept, 1 reduced
  for (int d = 0; d < x.rank(); ++d) {
    if (x[d] == 1) continue;
    const int kind = reduced[d] ? 1 : 0;
    Groups& g = kind ? s.red : s.kept;
    if (kind == last) {
      g.size[g.rank - 1] *= uint32_t(x[d]);
      g.stride[g.rank - 1] = uint32_t(strides[d]);
    } else {
      if (g.rank == 3) throw StateError(std::string("Vulkan ") + op + ": more than 3 groups of axes");
      g.size[g.rank] = uint32_t(x[d]);
      g.stride[g.rank] = uint32_t(strides[d]);
      ++g.rank;
    }
    last = kind;
  }
  for (uint32_t d = 0; d < s.kept.rank; ++d) s.n_out *= s.kept.size[d];
  for (uint32_t d = 0; d < s.red.rank; ++d) s.count *= s.red.size[d];
  return s;
}

// The workgroup: 256 invocations, or the device's largest power of two below.
uint32_t group_size(const Recorder& r) {
  uint32_t g = kGroup;
  while (g > r.caps().max_group_invocations) g /= 2;
  return g;
}

// Invocations per output (lanes): a long slice is split while the outputs
// alone leave a GPU idle (under 64K invocations), each lane keeping at least
// 16 elements. A slice contiguous in x puts its lanes side by side (coalesced
// reads); otherwise neighbouring invocations take neighbouring outputs, at
// least 8 of them (a 32-byte memory sector) where there are 8. Shapes
// alone decide, so a shape always gets the same order of additions.
struct Layout {
  uint32_t lanes = 1;
  bool lanes_fast = false;
};

Layout layout_for(const Slices& s, uint32_t group) {
  Layout l;
  l.lanes_fast = s.red.rank > 0 && s.red.stride[s.red.rank - 1] == 1;
  const uint32_t min_outputs = l.lanes_fast || s.n_out < 8 ? 1 : 8;
  while (l.lanes < group / min_outputs && s.count / (l.lanes * 2) >= 16 && uint64_t(s.n_out) * l.lanes < 65536)
    l.lanes *= 2;
  return l;
}

void reduce(Recorder& r, Reduce op, const Slices& s, const KernelArg& x, const KernelArg& y, const KernelArg* g,
            float empty) {
  if (s.n_out == 0) return;
  struct {
    uint64_t x, y, g;
    uint32_t n_out, count, kept_rank, red_rank;
    uint32_t kept_size[3], kept_stride[3], red_size[3], red_stride[3];
    float empty;
  } push{address(x), address(y), address(g ? *g : x), s.n_out, s.count, s.kept.rank, s.red.rank, {}, {}, {}, {}, empty};
  std::copy_n(s.kept.size, 3, push.kept_size);
  std::copy_n(s.kept.stride, 3, push.kept_stride);
  std::copy_n(s.red.size, 3, push.red_size);
  std::copy_n(s.red.stride, 3, push.red_stride);
  const uint32_t group = group_size(r);
  const Layout l = layout_for(s, group);
  r.dispatch("reduce_slices", {group, uint32_t(op), l.lanes, uint32_t(l.lanes_fast)}, push,
             r.groups(s.n_out, group / l.lanes));
}

void sum(Recorder& r, const OpAttrs&, std::span<const KernelArg> in, const KernelArg& out) {
  const bool all[Shape::kMaxRank] = {true, true, true, true, true, true};
  reduce(r, kSum, slices(in[0].shape, all, "sum"), in[0], out, nullptr, 0.0f);
}

// The CPU's mean of nothing is 0.
void mean(Recorder& r, const OpAttrs&, std::span<const KernelArg> in, const KernelArg& out) {
  const bool all[Shape::kMaxRank] = {true, true, true, true, true, true};
  reduce(r, kMean, slices(in[0].shape, all, "mean"), in[0], out, nullptr, 0.0f);
}

// The axes where out (NumPy-aligned to x's right) has 1 and x has more.
void sum_to(Recorder& r, const OpAttrs&, std::span<const KernelArg> in, const KernelArg& out) {
  const Shape& xs = in[0].shape;
  const Shape& os = out.shape;
  bool reduced[Shape::kMaxRank] = {};
  for (int d = 0; d < xs.rank(); ++d) {
    const int od = d - (xs.rank() - os.rank());
    reduced[d] = od < 0 || os[od] == 1;
  }
  reduce(r, kSum, slices(xs, reduced, "sum_to"), in[0], out, nullptr, 0.0f);
}

template <Reduce op>
void along_axis(Recorder& r, int axis, float empty, std::span<const KernelArg> in, const KernelArg& out,
                const char* name) {
  bool reduced[Shape::kMaxRank] = {};
  reduced[axis] = true;
  reduce(r, op, slices(in[0].shape, reduced, name), in[0], out, op == kMaxBackward ? &in[1] : nullptr, empty);
}

void sum_axis(Recorder& r, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg& out) {
  along_axis<kSum>(r, attrs.axis, 0.0f, in, out, "sum_axis");
}
// An empty axis gives 0 / 0 = NaN, as the CPU's (and torch.mean).
void mean_axis(Recorder& r, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg& out) {
  along_axis<kMean>(r, attrs.axis, NAN, in, out, "mean_axis");
}
// The CPU's mean over an empty last axis is 0.
void mean_last_axis(Recorder& r, const OpAttrs&, std::span<const KernelArg> in, const KernelArg& out) {
  along_axis<kMean>(r, in[0].shape.rank() - 1, 0.0f, in, out, "mean_last_axis");
}
void max_axis(Recorder& r, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg& out) {
  along_axis<kMax>(r, attrs.axis, NAN, in, out, "max_axis");
}
// in: x, g; out: dx in x's shape, every element written.
void max_axis_backward(Recorder& r, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg& out) {
  along_axis<kMaxBackward>(r, attrs.axis, 0.0f, in, out, "max_axis_backward");
}

// y's axes merged into groups of one kind (copied from x, or broadcast:
// stride 0), so that most broadcasts index with one or two divisions.
void broadcast_to(Recorder& r, const OpAttrs&, std::span<const KernelArg> in, const KernelArg& out) {
  const Shape& xs = in[0].shape;
  const Shape& ys = out.shape;
  struct {
    uint64_t x, y;
    uint32_t n, rank;
    uint32_t size[Shape::kMaxRank], stride[Shape::kMaxRank];
  } push{address(in[0]), address(out), count32(out.numel(), "broadcast_to"), 0, {}, {}};
  if (push.n == 0) return;
  count32(in[0].numel(), "broadcast_to");
  int64_t stride = 1;
  int last = -1;  // 0 copied, 1 broadcast
  for (int d = ys.rank() - 1; d >= 0; --d) {
    if (ys[d] == 1) continue;
    const int xd = d - (ys.rank() - xs.rank());
    const int kind = xd < 0 || xs[xd] == 1 ? 1 : 0;
    // Built innermost first; reversed below.
    if (kind == last) {
      push.size[push.rank - 1] *= uint32_t(ys[d]);
    } else {
      push.size[push.rank] = uint32_t(ys[d]);
      push.stride[push.rank] = kind ? 0 : uint32_t(stride);
      ++push.rank;
    }
    if (!kind) stride *= ys[d];
    last = kind;
  }
  std::reverse(push.size, push.size + push.rank);
  std::reverse(push.stride, push.stride + push.rank);
  const uint32_t group = group_size(r);
  r.dispatch("reduce_broadcast", {group}, push, r.groups(push.n, group));
}

}  // namespace

void add_reduction_kernels(KernelTable& t) {
  t[size_t(OpKind::Sum)] = sum;
  t[size_t(OpKind::Mean)] = mean;
  t[size_t(OpKind::SumTo)] = sum_to;
  t[size_t(OpKind::BroadcastTo)] = broadcast_to;
  t[size_t(OpKind::SumAxis)] = sum_axis;
  t[size_t(OpKind::MeanAxis)] = mean_axis;
  t[size_t(OpKind::MaxAxis)] = max_axis;
  t[size_t(OpKind::MaxAxisBackward)] = max_axis_backward;
  t[size_t(OpKind::MeanLastAxis)] = mean_last_axis;
}

}  // namespace tensorgrad::vulkan
