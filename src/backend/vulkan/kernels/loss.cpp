// Vulkan kernels: the loss family (kernels.h): softmax and log-softmax with
// their gradients, the losses and their gradients, the metrics. Shaders:
// loss_*.comp with loss.glsl. Row-wise ops give each row a team of
// invocations sized to the row; the scalar outputs (a mean loss, a count)
// come from one workgroup summing in a fixed order, so that a run's bits never
// change from one run to the next.
#include <algorithm>
#include <limits>

#include "backend/vulkan/kernels/kernels.h"

namespace tensorgrad::vulkan {

namespace {

// loss.glsl's trees hold at most 256 invocations and need powers of two.
uint32_t group_size(const Recorder& r) {
  uint32_t w = 256;
  while (w > r.caps().max_group_invocations) w /= 2;
  return w;
}

// Invocations per row: about 8 classes each (C = 10: 2, C = 1000: 128), so
// that small rows pack many to a workgroup and large ones share the work;
// a power of two up to the workgroup.
uint32_t team_size(int64_t cols, uint32_t group) {
  uint32_t t = 1;
  while (t < group && int64_t(t) * 8 < cols) t *= 2;
  return t;
}

// The team size of the one-workgroup kernels (a scalar out of B rows): the
// group's time is about B C / group plus the trees' barriers, which grow with
// the team, so the team shrinks until the group holds one per row (down to a
// single invocation): large teams only for batches too small to fill the group.
uint32_t single_group_team(int64_t rows, int64_t cols, uint32_t group) {
  uint32_t t = team_size(cols, group);
  while (t > 1 && int64_t(group / t) < rows) t /= 2;
  return t;
}

// Workgroups for `rows` rows at group / team rows each (the shaders loop over the rest).
uint32_t row_groups(const Recorder& r, int64_t rows, uint32_t group, uint32_t team) {
  return r.groups(uint64_t(rows), group / team);
}

// loss_softmax.comp's OP codes.
enum Rows : uint32_t { kSoftmax = 0, kLogSoftmax = 1, kSoftmaxBackward = 2, kLogSoftmaxBackward = 3 };

// Along the last axis of any shape: rows = numel / C. Backward: in = (y, g).
template <Rows op>
void rows_op(Recorder& r, const OpAttrs&, std::span<const KernelArg> in, const KernelArg& out) {
  const int64_t cols = in[0].shape[-1];
  struct {
    uint64_t x, g, y;
    uint32_t rows, cols;
  } push{address(in[0]), op >= kSoftmaxBackward ? address(in[1]) : 0, address(out), 0,
         count32(cols, "softmax")};
  count32(in[0].numel(), "softmax");
  push.rows = cols > 0 ? uint32_t(in[0].numel() / cols) : 0;
  if (push.rows == 0) return;
  const uint32_t w = group_size(r), t = team_size(cols, w);
  r.dispatch("loss_softmax", {w, uint32_t(op), t}, push, row_groups(r, push.rows, w, t));
}

// Cross-entropy: in = (logits{B,C}, labels [, weights{B}]) forward, the
// same then the scalar g backward. Forward: one workgroup (loss_xent.comp).
template <bool backward>
void cross_entropy(Recorder& r, const OpAttrs&, std::span<const KernelArg> in, const KernelArg& out) {
  const KernelArg &z = in[0], &t = in[1];
  const bool weighted = in.size() == (backward ? 4u : 3u);
  const int64_t b = z.shape[0], c = z.shape[1];
  count32(z.numel(), "softmax_cross_entropy");
  struct {
    uint64_t z, t, w, g, out;
    uint32_t rows, cols, sparse, weighted;
    uint64_t status;
  } push{address(z),
         address(t),
         weighted ? address(in[2]) : 0,
         backward ? address(in.back()) : 0,
         address(out),
         uint32_t(b),
         uint32_t(c),
         t.shape.rank() == 1 ? 1u : 0u,
         weighted ? 1u : 0u,
         r.status()};
  const uint32_t w = group_size(r);
  if (backward) {
    if (b == 0) return;
    const uint32_t team = team_size(c, w);
    r.dispatch("loss_xent", {w, 1u, team}, push, row_groups(r, b, w, team));
  } else {
    r.dispatch("loss_xent", {w, 0u, single_group_team(b, c, w)}, push, 1);
  }
}

// loss_elem.comp's and loss_elem_grad.comp's OP codes.
enum Elem : uint32_t { kMse = 0, kMae = 1, kHuber = 2, kBce = 3, kBinaryAccuracy = 4 };

// Weights: 0 none, 1 per row {B}, 2 per element {B,N}.
uint32_t weight_mode(std::span<const KernelArg> in, size_t count_with_weights) {
  if (in.size() != count_with_weights) return 0;
  return in[2].shape.rank() == 1 ? 1 : 2;
}

// in = (pred{B,N}, target{B,N} [, weights]) -> scalar, one workgroup.
template <Elem op>
void elementwise_loss(Recorder& r, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg& out) {
  const float a = op == kHuber ? attrs.delta : op == kBinaryAccuracy ? attrs.threshold : 0.0f;
  struct {
    uint64_t p, t, w, out;
    uint32_t n, cols, wmode;
    float a;
  } push{address(in[0]),
         address(in[1]),
         weight_mode(in, 3) ? address(in[2]) : 0,
         address(out),
         count32(in[0].numel(), "loss"),
         uint32_t(std::max<int64_t>(1, in[0].shape[1])),
         op == kBinaryAccuracy ? 0u : weight_mode(in, 3),
         a};
  const uint32_t w = group_size(r);
  r.dispatch("loss_elem", {w, uint32_t(op), 1u}, push, 1);
}

// in = (pred, target [, weights], g) -> dpred.
template <Elem op>
void elementwise_loss_backward(Recorder& r, const OpAttrs& attrs, std::span<const KernelArg> in,
                               const KernelArg& out) {
  struct {
    uint64_t p, t, w, g, dx;
    uint32_t n, cols, wmode;
    float delta;
  } push{address(in[0]),
         address(in[1]),
         weight_mode(in, 4) ? address(in[2]) : 0,
         address(in.back()),
         address(out),
         count32(in[0].numel(), "loss gradient"),
         uint32_t(std::max<int64_t>(1, in[0].shape[1])),
         weight_mode(in, 4),
         op == kHuber ? attrs.delta : 0.0f};
  if (push.n == 0) return;
  constexpr uint32_t kGroup = 256;
  r.dispatch("loss_elem_grad", {kGroup, uint32_t(op)}, push, r.groups(push.n, kGroup));
}

// loss_metric.comp's OP codes.
enum Metric : uint32_t { kAccuracy = 0, kTopK = 1 };

// in = (scores{B,C}, labels int32{B} | float32{B,C}) -> count, one workgroup.
template <Metric op>
void metric(Recorder& r, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg& out) {
  const KernelArg &z = in[0], &t = in[1];
  const int64_t c = z.shape[1];
  count32(z.numel(), "accuracy");
  struct {
    uint64_t z, t, out;
    uint32_t rows, cols, sparse, k;
  } push{address(z),
         address(t),
         address(out),
         uint32_t(z.shape[0]),
         uint32_t(c),
         t.shape.rank() == 1 ? 1u : 0u,
         uint32_t(std::clamp<int64_t>(attrs.k, 0, std::numeric_limits<int32_t>::max()))};
  const uint32_t w = group_size(r);
  r.dispatch("loss_metric", {w, uint32_t(op), single_group_team(z.shape[0], c, w)}, push, 1);
}

}  // namespace

void add_loss_kernels(KernelTable& t) {
  t[size_t(OpKind::Softmax)] = rows_op<kSoftmax>;
  t[size_t(OpKind::LogSoftmax)] = rows_op<kLogSoftmax>;
  t[size_t(OpKind::SoftmaxBackward)] = rows_op<kSoftmaxBackward>;
  t[size_t(OpKind::LogSoftmaxBackward)] = rows_op<kLogSoftmaxBackward>;
  t[size_t(OpKind::SoftmaxCrossEntropy)] = cross_entropy<false>;
  t[size_t(OpKind::SoftmaxCrossEntropyBackward)] = cross_entropy<true>;
  t[size_t(OpKind::MseLoss)] = elementwise_loss<kMse>;
  t[size_t(OpKind::MaeLoss)] = elementwise_loss<kMae>;
  t[size_t(OpKind::HuberLoss)] = elementwise_loss<kHuber>;
  t[size_t(OpKind::BinaryCrossEntropy)] = elementwise_loss<kBce>;
  t[size_t(OpKind::MseLossBackward)] = elementwise_loss_backward<kMse>;
  t[size_t(OpKind::MaeLossBackward)] = elementwise_loss_backward<kMae>;
  t[size_t(OpKind::HuberLossBackward)] = elementwise_loss_backward<kHuber>;
  t[size_t(OpKind::BinaryCrossEntropyBackward)] = elementwise_loss_backward<kBce>;
  t[size_t(OpKind::Accuracy)] = metric<kAccuracy>;
  t[size_t(OpKind::BinaryAccuracy)] = elementwise_loss<kBinaryAccuracy>;
  t[size_t(OpKind::TopKAccuracy)] = metric<kTopK>;
}

}  // namespace tensorgrad::vulkan
