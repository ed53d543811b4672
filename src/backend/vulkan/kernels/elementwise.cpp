// Vulkan kernels: element-wise and activation ops with their gradients,
// Fill and Scale (kernels.h).
#include "backend/vulkan/kernels/kernels.h"

namespace tensorgrad::vulkan {

namespace {

constexpr uint32_t kGroup = 256;

void fill(Recorder& r, const OpAttrs& attrs, std::span<const KernelArg>, const KernelArg& out) {
  struct {
    uint64_t y;
    uint32_t n;
    float value;
  } push{address(out), count32(out.numel(), "fill"), attrs.value};
  r.dispatch("fill", {kGroup}, push, r.groups(push.n, kGroup));
}

// unary.comp's OP codes.
enum Unary : uint32_t { kScale = 0, kRelu = 1 };

template <Unary op>
void unary(Recorder& r, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg& out) {
  struct {
    uint64_t x, y;
    uint32_t n;
    float a;
  } push{address(in[0]), address(out), count32(out.numel(), "unary op"), op == kScale ? attrs.factor : 0.0f};
  r.dispatch("unary", {kGroup, uint32_t(op)}, push, r.groups(push.n, kGroup));
}

}  // namespace

void add_elementwise_kernels(KernelTable& t) {
  t[size_t(OpKind::Fill)] = fill;
  t[size_t(OpKind::Scale)] = unary<kScale>;
  t[size_t(OpKind::Relu)] = unary<kRelu>;
}

}  // namespace tensorgrad::vulkan
