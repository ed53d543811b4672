// Vulkan kernels: the window family (kernels.h), max and average pooling
// over channels-last images and their gradients. Two shaders: pool.comp (one
// invocation per output) and pool_backward.comp (one per element of dx,
// looping over the windows that hold it, so overlapping windows add up in a
// fixed order without atomics; or, for windows that tile the image, one per
// window); both take the CPU's taps in its order and give its bits
// (shaders/pool.glsl has the geometry and the grid).
#include <algorithm>

#include "backend/vulkan/kernels/kernels.h"

namespace tensorgrad::vulkan {

namespace {

constexpr uint32_t kGroup = 256;

enum Pool : uint32_t { kMax, kAverage };

// pool.glsl's push block.
struct PoolPush {
  uint64_t a, b, c;
  int32_t batch, h, w, ch, ho, wo;
  int32_t kh, kw, sh, sw, dh, dw, pad_top, pad_left;
  uint32_t div_c[2], div_sh[2], div_sw[2], div_rows[2], div_len[2];
};

// pool.glsl's udiv constants (m, l) for the divisor d in [1, 2^31): l =
// ceil(log2 d), m = ceil(2^(31 + l) / d) < 2^32.
void magic(int64_t d, uint32_t* out) {
  uint32_t l = 0;
  while ((int64_t(1) << l) < d) ++l;
  out[0] = uint32_t(((uint64_t(1) << (31 + l)) + uint64_t(d) - 1) / uint64_t(d));
  out[1] = l;
}

// The geometry of window `win` over the image x{B,H,W,C}, the tensors a, b,
// c (pool.glsl's roles), and the grid: `grid` {B, rows, columns, C}.
PoolPush pool_push(const Window2D& win, const Shape& x, const char* op, uint64_t a, uint64_t b, uint64_t c,
                   const Shape& grid) {
  for (int64_t v : {win.kh, win.kw, win.sh, win.sw, win.dh, win.dw, win.pad_top, win.pad_left})
    count32(v, op);
  PoolPush p{a, b, c, int32_t(x[0]), int32_t(x[1]), int32_t(x[2]), int32_t(x[3]),
             int32_t(win.out_h(x[1])), int32_t(win.out_w(x[2])), int32_t(win.kh), int32_t(win.kw), int32_t(win.sh),
             int32_t(win.sw), int32_t(win.dh), int32_t(win.dw), int32_t(win.pad_top), int32_t(win.pad_left),
             {}, {}, {}, {}, {}};
  magic(std::max<int64_t>(x[3], 1), p.div_c);
  magic(win.sh, p.div_sh);
  magic(win.sw, p.div_sw);
  magic(std::max<int64_t>(grid[1], 1), p.div_rows);
  magic(std::max<int64_t>(grid[2] * grid[3], 1), p.div_len);
  return p;
}

// One dispatch of `shader` over the elements of `grid` (pool.glsl's grid).
void dispatch_grid(Recorder& r, const char* shader, std::initializer_list<uint32_t> constants, const PoolPush& push,
                   const Shape& grid) {
  const int64_t n = grid.numel();
  if (n > 0) r.dispatch(shader, constants, push, r.groups(uint64_t(n), kGroup));
}

uint32_t dilated(const Window2D& w) { return w.dh != 1 || w.dw != 1 ? 1 : 0; }

// Windows that tile x{B,H,W,C} exactly (the CPU's tiles_exactly but any C).
bool tiles_exactly(const Window2D& w, const Shape& x) {
  return w.sh == w.kh && w.sw == w.kw && w.dh == 1 && w.dw == 1 && w.pad_top == 0 && w.pad_left == 0 &&
         w.pad_bottom == 0 && w.pad_right == 0 && x[1] == w.out_h(x[1]) * w.kh && x[2] == w.out_w(x[2]) * w.kw;
}

template <Pool op>
void pool(Recorder& r, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg& out) {
  count32(in[0].numel(), "pooling");
  count32(out.numel(), "pooling");
  const PoolPush push =
      pool_push(attrs.window, in[0].shape, "pooling", address(in[0]), address(out), 0, out.shape);
  dispatch_grid(r, "pool", {kGroup, uint32_t(op), 0, dilated(attrs.window)}, push, out.shape);
}

// in: x, g. Windows that tile x exactly take one invocation per window (the
// grid over g), the others one per element of dx.
void max_pool_backward(Recorder& r, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg& out) {
  count32(in[1].numel(), "max_pool2d_backward");
  count32(out.numel(), "max_pool2d_backward");
  const Window2D& w = attrs.window;
  const bool tiled = tiles_exactly(w, out.shape);
  const Shape& grid = tiled ? in[1].shape : out.shape;
  const PoolPush push =
      pool_push(w, out.shape, "max_pool2d_backward", address(in[0]), address(in[1]), address(out), grid);
  const uint32_t mask = (attrs.flags & kMaskNonPositive) ? 1 : 0;
  dispatch_grid(r, "pool_backward", {kGroup, uint32_t(kMax), mask, tiled ? 0 : dilated(w), tiled ? 1u : 0u}, push,
                grid);
}

// in: g [, the ReLU output that masks dx]; the grid as max_pool_backward's.
void avg_pool_backward(Recorder& r, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg& out) {
  count32(in[0].numel(), "avg_pool2d_backward");
  count32(out.numel(), "avg_pool2d_backward");
  const bool mask = (attrs.flags & kMaskNonPositive) != 0;
  const Window2D& w = attrs.window;
  const bool tiled = tiles_exactly(w, out.shape);
  const Shape& grid = tiled ? in[0].shape : out.shape;
  const PoolPush push = pool_push(w, out.shape, "avg_pool2d_backward", address(in[0]), mask ? address(in[1]) : 0,
                                  address(out), grid);
  dispatch_grid(r, "pool_backward",
                {kGroup, uint32_t(kAverage), mask ? 1u : 0u, tiled ? 0 : dilated(w), tiled ? 1u : 0u}, push, grid);
}

}  // namespace

void add_window_kernels(KernelTable& t) {
  t[size_t(OpKind::MaxPool2D)] = pool<kMax>;
  t[size_t(OpKind::AvgPool2D)] = pool<kAverage>;
  t[size_t(OpKind::MaxPool2DBackward)] = max_pool_backward;
  t[size_t(OpKind::AvgPool2DBackward)] = avg_pool_backward;
}

}  // namespace tensorgrad::vulkan
