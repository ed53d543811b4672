// Vulkan kernels: the window family (kernels.h), max and average pooling
// over channels-last images and their gradients. Two shaders: pool.comp (one
// invocation per output) and pool_backward.comp (one per element of dx,
// looping over the windows that hold it, so overlapping windows add up in a
// fixed order without atomics); both take the CPU's taps in its order and
// give its bits (shaders/pool.glsl has the geometry).
#include "backend/vulkan/kernels/kernels.h"

namespace tensorgrad::vulkan {

namespace {

constexpr uint32_t kGroup = 256;

enum Pool : uint32_t { kMax, kAverage };

// pool.glsl's push block.
struct PoolPush {
  uint64_t a, b, c;
  uint32_t n;
  int32_t batch, h, w, ch, ho, wo;
  int32_t kh, kw, sh, sw, dh, dw, pad_top, pad_left;
};

// The geometry of window `win` over the image x{B,H,W,C}, the output count
// n, and the tensors a, b, c (pool.glsl's roles).
PoolPush pool_push(const Window2D& win, const Shape& x, uint64_t n, const char* op, uint64_t a, uint64_t b,
                   uint64_t c) {
  for (int64_t v : {win.kh, win.kw, win.sh, win.sw, win.dh, win.dw, win.pad_top, win.pad_left})
    count32(v, op);
  return {a, b, c, count32(int64_t(n), op), int32_t(x[0]), int32_t(x[1]), int32_t(x[2]), int32_t(x[3]),
          int32_t(win.out_h(x[1])), int32_t(win.out_w(x[2])), int32_t(win.kh), int32_t(win.kw), int32_t(win.sh),
          int32_t(win.sw), int32_t(win.dh), int32_t(win.dw), int32_t(win.pad_top), int32_t(win.pad_left)};
}

template <Pool op>
void pool(Recorder& r, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg& out) {
  count32(in[0].numel(), "pooling");
  const PoolPush push =
      pool_push(attrs.window, in[0].shape, uint64_t(out.numel()), "pooling", address(in[0]), address(out), 0);
  if (push.n == 0) return;
  r.dispatch("pool", {kGroup, uint32_t(op)}, push, r.groups(push.n, kGroup));
}

// in: x, g.
void max_pool_backward(Recorder& r, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg& out) {
  count32(in[1].numel(), "max_pool2d_backward");
  const PoolPush push = pool_push(attrs.window, out.shape, uint64_t(out.numel()), "max_pool2d_backward",
                                  address(in[0]), address(in[1]), address(out));
  if (push.n == 0) return;
  const uint32_t mask = (attrs.flags & kMaskNonPositive) ? 1 : 0;
  r.dispatch("pool_backward", {kGroup, uint32_t(kMax), mask}, push, r.groups(push.n, kGroup));
}

// in: g [, the ReLU output that masks dx].
void avg_pool_backward(Recorder& r, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg& out) {
  count32(in[0].numel(), "avg_pool2d_backward");
  const bool mask = (attrs.flags & kMaskNonPositive) != 0;
  const PoolPush push = pool_push(attrs.window, out.shape, uint64_t(out.numel()), "avg_pool2d_backward",
                                  address(in[0]), mask ? address(in[1]) : 0, address(out));
  if (push.n == 0) return;
  r.dispatch("pool_backward", {kGroup, uint32_t(kAverage), mask ? 1u : 0u}, push, r.groups(push.n, kGroup));
}

}  // namespace

void add_window_kernels(KernelTable& t) {
  t[size_t(OpKind::MaxPool2D)] = pool<kMax>;
  t[size_t(OpKind::AvgPool2D)] = pool<kAverage>;
  t[size_t(OpKind::MaxPool2DBackward)] = max_pool_backward;
  t[size_t(OpKind::AvgPool2DBackward)] = avg_pool_backward;
}

}  // namespace tensorgrad::vulkan
