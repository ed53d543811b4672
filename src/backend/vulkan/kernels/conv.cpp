// Vulkan kernels: the conv family (kernels.h): Conv2D, Conv2DBackwardInput and
// Conv2DBackwardFilter, each one dispatch of shaders/conv.comp, an implicit
// GEMM that gathers the patches as it stages them (no patch matrix: kernels
// have no scratch memory); grouped ones (depthwise included) one dispatch of
// shaders/grouped_conv.comp, a direct loop per element of the result.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "backend/vulkan/kernels/kernels.h"

namespace tensorgrad::vulkan {

namespace {

// conv.comp's MODE and flag bits.
enum Mode : uint32_t { kForward, kInputGrad, kFilterGrad };
constexpr uint32_t kBias = 1, kRelu = 2, kAddend = 4, kMask = 8;

// A tiling of conv.comp (its constants 1 to 5), as matmul.cpp's: every
// tiling sums each element in the same order, so it changes the speed only.
struct Tiling {
  uint32_t tm, tn, tk, rm, rn;
  uint32_t invocations() const { return (tm / rm) * (tn / rn); }
  uint32_t shared_bytes() const { return tk * (tm + tn) * 4 + tm * 16 + 2 * tk * 16; }
};

// The tile side for n columns (or rows): the smallest of 16, 32, 64, ...
// that holds them, at most `most`.
uint32_t side(uint32_t n, uint32_t most) {
  uint32_t s = 16;
  while (s < n && s < most) s *= 2;
  return s;
}

// GPUs: tiles of 16 x 16 to 64 x 64 with 4 x 4 to 8 x 8 blocks per invocation.
// CPU implementations (lavapipe) run every shared or global access as a
// loop over the SIMD lanes while fmas are cheap, so they take 16 x 16
// blocks (matmul.cpp measured them) and tiles of up to 128 x 128 (256 x 32
// for a narrow N: the input gradient of {32, 28, 28, 32} * 3x3x64 took 270
// against 535 ms on lavapipe) while those still give each of the driver's
// threads (one per core) a workgroup. The tile's width follows N (a conv's
// 32 or 64 filters), not a square.
// TENSORGRAD_VULKAN_MATMUL_TILING=gpu|cpu picks the other kind's, as for
// MatMul, so that one device's tests cover both.
Tiling choose_tiling(Recorder& r, uint32_t m, uint32_t n) {
  const char* force = std::getenv("TENSORGRAD_VULKAN_MATMUL_TILING");
  const bool cpu = force && *force ? std::strcmp(force, "cpu") == 0
                                   : r.context().info().type == DeviceType::kCpuImplementation;
  Tiling t{64, 64, 16, 8, 8};
  if (cpu) {
    const uint64_t cores = std::max(1u, std::thread::hardware_concurrency());
    const uint32_t tn = side(n, 128);
    // A narrow tile stages more of A per fma: taller tiles for narrow N.
    const uint32_t tallest = tn <= 32 ? 256 : 128;
    uint32_t tm = tallest;
    while (tm > 16 && uint64_t((m + tm - 1) / tm) * ((n + tn - 1) / tn) < cores) tm /= 2;
    tm = std::min(tm, side(m, tallest));
    t = {tm, tn, 16, 16, tn == 16 ? 4u : 16u};  // a thin N: 4 invocations across rather than padding
  } else {
    // Smaller tiles while the grid is short of a GPU's few dozen compute units: the filter gradient
    // ({kh kw C, F}, each element one long sum over the batch's pixels; no scratch for a split sum)
    // and the small layers would otherwise leave most of them idle.
    uint32_t tm = side(m, 64), tn = side(n, 64);
    while (uint64_t((m + tm - 1) / tm) * ((n + tn - 1) / tn) < 64 && (tm > 16 || tn > 16)) {
      if (tm >= tn) tm /= 2;
      else tn /= 2;
    }
    t = {tm, tn, 16, tm >= 64 ? 8u : 4u, tn >= 64 ? 8u : 4u};
  }
  if (t.invocations() > r.caps().max_group_invocations || t.shared_bytes() > r.caps().max_shared_bytes)
    t = {16, 16, 8, 4, 4};
  return t;
}

struct Push {
  uint64_t a, b, c, extra, mask;
  uint32_t m, n, k;
  int32_t h, w, ch, f, ho, wo, kw, sh, sw, dh, dw, pt, pl;
  uint32_t flags;
};
static_assert(sizeof(Push) <= 128);

// The push constants common to the three modes: the image {B, H, W, C}
// (x, or dx's shape), the output grid {B, Ho, Wo, F} and the window.
Push geometry(const Window2D& win, const Shape& image, const Shape& grid, const char* op) {
  Push p{};
  p.h = int32_t(image[1]);
  p.w = int32_t(image[2]);
  p.ch = int32_t(image[3]);
  p.f = int32_t(grid[3]);
  p.ho = int32_t(grid[1]);
  p.wo = int32_t(grid[2]);
  p.kw = int32_t(win.kw);
  p.sh = int32_t(win.sh);
  p.sw = int32_t(win.sw);
  p.dh = int32_t(win.dh);
  p.dw = int32_t(win.dw);
  p.pt = int32_t(win.pad_top);
  p.pl = int32_t(win.pad_left);
  count32(image.numel(), op);  // the shader indexes every operand with 32-bit integers
  count32(grid.numel(), op);
  count32(win.kh * win.kw * image[3] * grid[3], op);
  // Window offsets and pads stay far below the shader's off-image marker (2^29).
  if (win.kh * win.dh + win.sh + win.pad_top > (1 << 24) || win.kw * win.dw + win.sw + win.pad_left > (1 << 24))
    throw ValueError(std::string("Vulkan ") + op + ": window, stride or padding beyond 2^24");
  return p;
}

void record(Recorder& r, Mode mode, Push& p, uint64_t m, uint64_t n, uint64_t k, const char* op) {
  p.m = count32(int64_t(m), op);
  p.n = count32(int64_t(n), op);
  p.k = count32(int64_t(k), op);
  if (p.m == 0 || p.n == 0) return;
  const Tiling t = choose_tiling(r, p.m, p.n);
  const uint32_t* lim = r.caps().max_group_count;
  const uint32_t gx = std::min((p.n + t.tn - 1) / t.tn, lim[0]), gy = std::min((p.m + t.tm - 1) / t.tm, lim[1]);
  const uint32_t unit_stride = p.sh == 1 && p.sw == 1 ? 1 : 0;
  r.dispatch("conv", {t.invocations(), t.tm, t.tn, t.tk, t.rm, t.rn, uint32_t(mode), unit_stride}, p, gx, gy);
}

// shaders/grouped_conv.comp's push block: the grouped convolutions
// (Window2D::groups > 1), one invocation per element of the result.
struct GroupedPush {
  uint64_t a, b, c, extra, mask;
  uint32_t n, flags;
  int32_t batch, h, w, ch, ho, wo, f, groups;
  int32_t kh, kw, sh, sw, dh, dw, pt, pl;
};
static_assert(sizeof(GroupedPush) <= 128);

// One dispatch of grouped_conv.comp in `mode` over `out`; image {B,H,W,C}
// and grid {B,Ho,Wo,F} as geometry's.
void record_grouped(Recorder& r, Mode mode, const Window2D& win, const Shape& image, const Shape& grid,
                    GroupedPush& p, const KernelArg& out, const char* op) {
  geometry(win, image, grid, op);  // its 32-bit and window checks
  p.n = count32(out.numel(), op);
  p.batch = int32_t(image[0]);
  p.h = int32_t(image[1]);
  p.w = int32_t(image[2]);
  p.ch = int32_t(image[3]);
  p.ho = int32_t(grid[1]);
  p.wo = int32_t(grid[2]);
  p.f = int32_t(grid[3]);
  p.groups = int32_t(win.groups);
  p.kh = int32_t(win.kh);
  p.kw = int32_t(win.kw);
  p.sh = int32_t(win.sh);
  p.sw = int32_t(win.sw);
  p.dh = int32_t(win.dh);
  p.dw = int32_t(win.dw);
  p.pt = int32_t(win.pad_top);
  p.pl = int32_t(win.pad_left);
  p.c = address(out);
  if (p.n == 0) return;
  constexpr uint32_t kGroup = 256;
  r.dispatch("grouped_conv", {kGroup, uint32_t(mode)}, p, r.groups(p.n, kGroup));
}

// (x{B,H,W,C}, kernel{kh,kw,C,F} [, bias{F}]) -> y{B,Ho,Wo,F} [ReLU].
void conv2d(Recorder& r, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg& out) {
  // Only the fusion pass sets it, and the Vulkan backend does not run that rewrite: the statistics would
  // need the side floats before the output, which no Vulkan kernel writes.
  if (attrs.flags & kBatchStatsOutput)
    throw StateError("Vulkan conv2d: the kBatchStatsOutput form (batch statistics beside the output) has no kernel");
  const Window2D& win = attrs.window;
  const Shape& x = in[0].shape;
  if (win.groups != 1) {
    GroupedPush g{};
    g.a = address(in[0]);
    g.b = address(in[1]);
    if (in.size() == 3) {
      g.extra = address(in[2]);
      g.flags |= kBias;
    }
    if (attrs.flags & kReluOutput) g.flags |= kRelu;
    return record_grouped(r, kForward, win, x, out.shape, g, out, "conv2d");
  }
  Push p = geometry(win, x, out.shape, "conv2d");
  p.a = address(in[0]);
  p.b = address(in[1]);
  p.c = address(out);
  if (in.size() == 3) {
    p.extra = address(in[2]);
    p.flags |= kBias;
  }
  if (attrs.flags & kReluOutput) p.flags |= kRelu;
  record(r, kForward, p, uint64_t(out.shape[0] * out.shape[1] * out.shape[2]), uint64_t(out.shape[3]),
         uint64_t(win.kh * win.kw * x[3]), "conv2d");
}

// (g{B,Ho,Wo,F}, kernel [, addend] [, y]) -> dx of attrs.shape [+ addend], zero where y <= 0 with
// kMaskNonPositive (y the last input; an input between the kernel and it, or a third input without the
// flag, is the addend: the CPU's reading).
void conv2d_backward_input(Recorder& r, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg& out) {
  const Window2D& win = attrs.window;
  const bool masked = (attrs.flags & kMaskNonPositive) != 0;
  const bool addend = in.size() - 2 - (masked ? 1 : 0) > 0;
  if (win.groups != 1) {
    GroupedPush g{};
    g.a = address(in[0]);
    g.b = address(in[1]);
    if (addend) {
      g.extra = address(in[2]);
      g.flags |= kAddend;
    }
    if (masked) {
      g.mask = address(in.back());
      g.flags |= kMask;
    }
    return record_grouped(r, kInputGrad, win, out.shape, in[0].shape, g, out, "conv2d_backward_input");
  }
  Push p = geometry(win, out.shape, in[0].shape, "conv2d_backward_input");
  p.a = address(in[0]);
  p.b = address(in[1]);
  p.c = address(out);
  if (addend) {
    p.extra = address(in[2]);
    p.flags |= kAddend;
  }
  if (masked) {
    p.mask = address(in.back());
    p.flags |= kMask;
  }
  record(r, kInputGrad, p, uint64_t(out.shape[0] * out.shape[1] * out.shape[2]), uint64_t(out.shape[3]),
         uint64_t(win.kh * win.kw * in[0].shape[3]), "conv2d_backward_input");
}

// (x, g{B,Ho,Wo,F}) -> dkernel{kh,kw,C,F}: each element one sum over the batch's output pixels in order.
void conv2d_backward_filter(Recorder& r, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg& out) {
  const Window2D& win = attrs.window;
  const Shape& g = in[1].shape;
  if (win.groups != 1) {
    GroupedPush gp{};
    gp.a = address(in[0]);
    gp.b = address(in[1]);
    return record_grouped(r, kFilterGrad, win, in[0].shape, g, gp, out, "conv2d_backward_filter");
  }
  Push p = geometry(win, in[0].shape, g, "conv2d_backward_filter");
  p.a = address(in[0]);
  p.b = address(in[1]);
  p.c = address(out);
  record(r, kFilterGrad, p, uint64_t(win.kh * win.kw * in[0].shape[3]), uint64_t(g[3]),
         uint64_t(g[0] * g[1] * g[2]), "conv2d_backward_filter");
}

}  // namespace

void add_conv_kernels(KernelTable& t) {
  t[size_t(OpKind::Conv2D)] = conv2d;
  t[size_t(OpKind::Conv2DBackwardInput)] = conv2d_backward_input;
  t[size_t(OpKind::Conv2DBackwardFilter)] = conv2d_backward_filter;
}

}  // namespace tensorgrad::vulkan
