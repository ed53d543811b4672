// Vulkan kernels: the stateful family (kernels.h): gradient clipping, moving
// averages, the random stream's counter, dropout and copies between states.
// Values the CPU reads when it runs (the counter, tau, the norm pair) are
// read by the shaders too, never when recording: a recorded graph replays.
#include <string>

#include "backend/vulkan/kernels/kernels.h"

namespace tensorgrad::vulkan {

namespace {

constexpr uint32_t kGroup = 256;

// stateful_elementwise.comp's OP codes.
enum Elementwise : uint32_t { kClipValue = 0, kMovingAverage = 1, kPolyak = 2 };

struct ElementwisePush {
  uint64_t a, b, c, status;
  uint32_t n;
  float s;
};

void clip_value(Recorder& r, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg&) {
  const ElementwisePush push{address(in[0]), address(in[0]), address(in[0]), r.status(), count32(in[0].numel(), "clip_value"),
                             attrs.clip};
  r.dispatch("stateful_elementwise", {kGroup, kClipValue}, push, r.groups(push.n, kGroup));
}

void moving_average(Recorder& r, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg&) {
  const ElementwisePush push{address(in[0]), address(in[1]), address(in[0]), r.status(),
                             count32(in[0].numel(), "moving_average"),
                             attrs.momentum};
  r.dispatch("stateful_elementwise", {kGroup, kMovingAverage}, push, r.groups(push.n, kGroup));
}

void polyak_update(Recorder& r, const OpAttrs&, std::span<const KernelArg> in, const KernelArg&) {
  const ElementwisePush push{address(in[0]), address(in[1]), address(in[2]), r.status(),
                             count32(in[0].numel(), "polyak_update"),
                             0.0f};
  r.dispatch("stateful_elementwise", {kGroup, kPolyak}, push, r.groups(push.n, kGroup));
}

void assign(Recorder& r, const OpAttrs&, std::span<const KernelArg> in, const KernelArg&) {
  if (in[0].data == in[1].data) return;  // as the CPU's: a copy onto itself is no copy
  const size_t width = dtype_size(in[0].dtype);
  if (width % sizeof(uint32_t) != 0)  // every dtype is 4 or 8 bytes today; the shader copies 4-byte words
    throw ValueError(std::string("Vulkan assign: no kernel for ") + dtype_name(in[0].dtype) + " tensors");
  struct {
    uint64_t dst, src, status;
    uint32_t n;  // 4-byte words
  } push{address(in[0]), address(in[1]), r.status(), count32(in[0].numel() * int64_t(width / sizeof(uint32_t)), "assign")};
  if (push.n == 0) return;
  r.dispatch("stateful_copy", {kGroup}, push, r.groups(push.n, kGroup));
}

void advance_counter(Recorder& r, const OpAttrs&, std::span<const KernelArg> in, const KernelArg&) {
  const struct {
    uint64_t counter, status;
  } push{address(in[0]), r.status()};
  r.dispatch("stateful_counter", {1}, push, 1);
}

// in: x, counter int64 {1}.
void dropout(Recorder& r, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg& out) {
  const struct {
    uint64_t x, y, counter, seed;
    uint32_t n;
    float rate, scale;
  } push{address(in[0]), address(out), address(in[1]), attrs.seed, count32(in[0].numel(), "dropout"), attrs.rate,
         1.0f / (1.0f - attrs.rate)};  // the scale rounded to float as the CPU's keep_scale
  r.dispatch("dropout", {kGroup}, push, r.groups(push.n, kGroup));
}

// stateful.glsl's norm shaders: OP codes and flags.
enum Norm : uint32_t { kSquaredNorm = 0, kClipNorm = 1 };
enum NormFlag : uint32_t { kHasRunning = 1, kEps = 2, kNonFiniteToNaN = 4 };

struct NormPush {
  uint64_t a, b, c;
  uint32_t n, flags;
  float clip;
};

// The double form where the device has float64, else the float-pair one
// (TENSORGRAD_VULKAN_NO_FP64=1 picks it on any device, for its tests).
const char* norm_shader(const Recorder& r) { return r.caps().float64 ? "stateful_norm_f64" : "stateful_norm_f32"; }

// One workgroup: a fixed-order sum without scratch memory. The largest
// power of two the device allows up to 256 (128 is guaranteed), as the
// shader's tree halves it.
uint32_t norm_group(const Recorder& r) { return r.caps().max_group_invocations >= 256 ? 256 : 128; }

// in: x [, running pair {2}]; out {2}.
void squared_norm(Recorder& r, const OpAttrs&, std::span<const KernelArg> in, const KernelArg& out) {
  const bool running = in.size() == 2;
  const NormPush push{address(in[0]), address(running ? in[1] : in[0]), address(out),
                      count32(in[0].numel(), "squared_norm"), running ? kHasRunning : 0u, 0.0f};
  r.dispatch(norm_shader(r), {norm_group(r), kSquaredNorm}, push, 1);
}

// in: grad (in place), squared norm pair {2}. The CPU logs once per process
// when kNonFiniteNormToNaN turns the gradient to NaN; a shader cannot log,
// so on this backend the NaN gradient (and the loss it makes) is the sign.
void clip_norm(Recorder& r, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg&) {
  const uint32_t flags =
      ((attrs.flags & kClipNormEps) ? kEps : 0u) | ((attrs.flags & kNonFiniteNormToNaN) ? kNonFiniteToNaN : 0u);
  const NormPush push{address(in[0]), address(in[1]), address(in[0]), count32(in[0].numel(), "clip_norm"), flags,
                      attrs.clip};
  r.dispatch(norm_shader(r), {kGroup, kClipNorm}, push, r.groups(push.n, kGroup));
}

}  // namespace

void add_stateful_kernels(KernelTable& t) {
  t[size_t(OpKind::ClipValue)] = clip_value;
  t[size_t(OpKind::SquaredNorm)] = squared_norm;
  t[size_t(OpKind::ClipNorm)] = clip_norm;
  t[size_t(OpKind::MovingAverage)] = moving_average;
  t[size_t(OpKind::AdvanceCounter)] = advance_counter;
  t[size_t(OpKind::PolyakUpdate)] = polyak_update;
  t[size_t(OpKind::Assign)] = assign;
  t[size_t(OpKind::Dropout)] = dropout;
}

}  // namespace tensorgrad::vulkan
