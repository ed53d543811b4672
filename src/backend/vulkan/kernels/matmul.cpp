// Vulkan kernels: the matmul family (kernels.h): MatMul and AccumulateGrad.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "backend/vulkan/kernels/kernels.h"

namespace tensorgrad::vulkan {

namespace {

// matmul.comp's flags.
constexpr uint32_t kBias = 1, kRelu = 2, kAccumulate = 4;

// A tiling of matmul.comp (its constants 1 to 5). Every tiling sums each
// element in the same order, so the choice changes the speed only.
struct Tiling {
  uint32_t tm, tn, tk, rm, rn;
  uint32_t invocations() const { return (tm / rm) * (tn / rn); }
  uint32_t shared_bytes() const { return tk * (tm + tn + 8) * 4; }  // matmul.comp's sa and sb
};

// 64 x 64 tiles of 8 x 8 blocks per invocation (64 accumulators, within a
// GPU's registers). A narrow C (a classifier's few outputs) or a few rows
// (one sample) take a thinner tile rather than computing padding. CPU
// implementations (lavapipe) run each shared or global access as a loop
// over the SIMD lanes while fmas cost next to nothing, so a large C takes
// 128 x 128 tiles of 16 x 16 blocks there (8 vector reads per 256 fmas: 68
// against 114 ms CPU time for {500, 784} x {784, 500}) while those still
// give each of the driver's threads (one per core) a workgroup; the other
// shapes keep the GPU's tilings, whose pipelines compile faster.
Tiling choose_tiling(Recorder& r, uint32_t m, uint32_t n, uint32_t batch) {
  // TENSORGRAD_VULKAN_MATMUL_TILING=gpu|cpu picks the tilings of the other
  // kind of device (cpu: as for one core), so that one device's tests cover
  // both whatever the machine.
  const char* force = std::getenv("TENSORGRAD_VULKAN_MATMUL_TILING");
  const bool forced = force && *force;
  const bool cpu = forced ? std::strcmp(force, "cpu") == 0 : r.context().info().type == DeviceType::kCpuImplementation;
  const uint64_t cores = forced ? 1 : std::max(1u, std::thread::hardware_concurrency());
  const uint64_t big_tiles = uint64_t((m + 127) / 128) * ((n + 127) / 128) * batch;
  Tiling t{64, 64, 16, 8, 8};
  if (n <= 32 && m > n) t = {64, 16, 16, 8, 4};
  else if (m <= 32 && n > m) t = {16, 64, 16, 4, 8};
  else if (m <= 32 && n <= 32) t = {32, 32, 16, 4, 4};
  else if (cpu && big_tiles >= cores) t = {128, 128, 8, 16, 16};  // 8 deep: as fast as 16 or 32, in 8.3 KiB
  // Every tiling here is within Vulkan's guaranteed minimums (128
  // invocations, 16 KiB of shared memory), so none needs a fallback.
  return t;
}

// C{M,N} = init + op(A) op(B) (flags: kBias, kRelu, kAccumulate), over
// `batch` matrices; a{rows, cols} and b as stored (before trans_a / trans_b).
void record_matmul(Recorder& r, const OpAttrs& attrs, const KernelArg& a, const KernelArg& b, const KernelArg* bias,
                   const KernelArg& c, uint32_t flags, const char* op) {
  const int rank = c.shape.rank();
  count32(a.numel(), op);  // the shader indexes every operand with 32-bit integers
  count32(b.numel(), op);
  struct {
    uint64_t a, b, c, bias, status;
    uint32_t m, n, k, batch, flags;
  } push{address(a),
         address(b),
         address(c),
         bias ? address(*bias) : 0,
         r.status(),
         uint32_t(c.shape[rank - 2]),
         uint32_t(c.shape[rank - 1]),
         uint32_t(attrs.trans_a ? a.shape[rank - 2] : a.shape[rank - 1]),
         rank == 3 ? uint32_t(c.shape[0]) : 1u,
         flags};
  if (count32(c.numel(), op) == 0) return;
  // acc + (an empty sum) leaves acc as it is, -0 included.
  if (push.k == 0 && (flags & kAccumulate)) return;
  const Tiling t = choose_tiling(r, push.m, push.n, push.batch);
  const uint32_t* lim = r.caps().max_group_count;
  const uint32_t gx = std::min((push.n + t.tn - 1) / t.tn, lim[0]), gy = std::min((push.m + t.tm - 1) / t.tm, lim[1]),
                 gz = std::min(push.batch, lim[2]);
  const uint32_t trans_a = attrs.trans_a ? 1 : 0, trans_b = attrs.trans_b ? 1 : 0;
  r.dispatch("matmul", {t.invocations(), t.tm, t.tn, t.tk, t.rm, t.rn, trans_a, trans_b}, push, gx, gy, gz);
}

void matmul(Recorder& r, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg& out) {
  const uint32_t flags = (in.size() == 3 ? kBias : 0) | (attrs.flags & kReluOutput ? kRelu : 0);
  record_matmul(r, attrs, in[0], in[1], in.size() == 3 ? &in[2] : nullptr, out, flags, "matmul");
}

// (acc, g): acc += g; (acc, A, B): acc += op(A) op(B) in the product's own
// pass (out is acc's memory).
void accumulate_grad(Recorder& r, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg& out) {
  if (in.size() == 3) return record_matmul(r, attrs, in[1], in[2], nullptr, out, kAccumulate, "accumulate_grad");
  constexpr uint32_t kGroup = 256;
  struct {
    uint64_t acc, g, status;
    uint32_t n;
  } push{address(out), address(in[1]), r.status(), count32(out.numel(), "accumulate_grad")};
  if (push.n == 0) return;
  r.dispatch("matmul_add", {kGroup}, push, r.groups(push.n, kGroup));
}

}  // namespace

void add_matmul_kernels(KernelTable& t) {
  t[size_t(OpKind::MatMul)] = matmul;
  t[size_t(OpKind::AccumulateGrad)] = accumulate_grad;
}

}  // namespace tensorgrad::vulkan
