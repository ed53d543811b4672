// Vulkan kernels: the optimizer family (kernels.h): OptimizerTick and the
// AdamW, SGD, RMSprop and Adagrad updates, as the CPU's (kernels/optimizer.cpp).
#include "backend/vulkan/kernels/kernels.h"

namespace tensorgrad::vulkan {

namespace {

constexpr uint32_t kGroup = 256;

// in: hyper, step [, schedule steps, schedule values]. A tiny op: one
// invocation. The schedule and the bias corrections are in double as on the
// CPU: in doubles where the device has them, else in float pairs (shaders/
// optimizer.glsl says why two modules).
void optimizer_tick(Recorder& r, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg&) {
  const bool scheduled = in.size() == 4;
  struct {
    uint64_t hyper, step, steps, values, status;
    uint32_t n_steps;
  } push{address(in[0]), address(in[1]), scheduled ? address(in[2]) : 0, scheduled ? address(in[3]) : 0, r.status(),
         scheduled ? count32(in[2].numel(), "optimizer_tick") : 0};
  r.dispatch(r.caps().float64 ? "optimizer_tick_f64" : "optimizer_tick_f32x2", {1, attrs.flags}, push, 1);
}

// optimizer_update.comp's OP codes.
enum Update : uint32_t { kAdamW = 0, kSgd = 1, kRmsprop = 2, kAdagrad = 3 };

template <Update op>
void update(Recorder& r, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg&) {
  // The shader's states a, b, c (absent ones 0), from the op's inputs.
  uint64_t a = 0, b = 0, c = 0;
  size_t next = 2;
  switch (op) {
    case kAdamW: a = address(in[next++]), b = address(in[next++]); break;
    case kSgd:
      if (attrs.flags & kUseMomentum) a = address(in[next++]);
      break;
    case kRmsprop:
      a = address(in[next++]);
      if (attrs.flags & kCentered) b = address(in[next++]);
      if (attrs.flags & kUseMomentum) c = address(in[next++]);
      break;
    case kAdagrad: a = address(in[next++]); break;
  }
  struct {
    uint64_t param, grad, a, b, c, hyper, status;
    uint32_t n;
  } push{address(in[0]), address(in[1]), a, b, c, address(in[next]), r.status(), count32(in[0].numel(), "optimizer update")};
  r.dispatch("optimizer_update", {kGroup, uint32_t(op), attrs.flags, uint32_t(attrs.zero_grad)}, push,
             r.groups(push.n, kGroup));
}

}  // namespace

void add_optimizer_kernels(KernelTable& t) {
  t[size_t(OpKind::OptimizerTick)] = optimizer_tick;
  t[size_t(OpKind::AdamWUpdate)] = update<kAdamW>;
  t[size_t(OpKind::SgdUpdate)] = update<kSgd>;
  t[size_t(OpKind::RmspropUpdate)] = update<kRmsprop>;
  t[size_t(OpKind::AdagradUpdate)] = update<kAdagrad>;
}

}  // namespace tensorgrad::vulkan
