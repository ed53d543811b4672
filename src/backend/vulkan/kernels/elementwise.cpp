// Vulkan kernels: element-wise and activation ops with their gradients,
// Fill and Scale (kernels.h). Three shaders cover them, the op a
// specialization constant: unary.comp (y = f(x)), elementwise_backward.comp
// (dx = f(x or y, g)) and elementwise_binary.comp (NumPy broadcasting); their
// math functions are in shaders/elementwise.glsl.
#include <utility>

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
enum Unary : uint32_t {
  kScale, kRelu, kSigmoid, kTanh, kGelu, kGeluTanh, kSilu, kElu, kLeakyRelu, kSoftplus,
  kExp, kLog, kSqrt, kRsqrt, kErf, kPow, kClamp
};

// The op's attributes as the shader's a and b.
template <Unary op>
std::pair<float, float> unary_params(const OpAttrs& attrs) {
  if (op == kScale) return {attrs.factor, 0.0f};
  if (op == kElu) return {attrs.alpha, 0.0f};
  if (op == kLeakyRelu) return {attrs.negative_slope, 0.0f};
  if (op == kPow) return {attrs.exponent, 0.0f};
  if (op == kClamp) return {attrs.clamp_min, attrs.clamp_max};
  return {0.0f, 0.0f};
}

template <Unary op>
void unary(Recorder& r, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg& out) {
  const auto [a, b] = unary_params<op>(attrs);
  struct {
    uint64_t x, y;
    uint32_t n;
    float a, b;
  } push{address(in[0]), address(out), count32(out.numel(), "unary op"), a, b};
  r.dispatch("unary", {kGroup, uint32_t(op)}, push, r.groups(push.n, kGroup));
}

// elementwise_backward.comp's OP codes.
enum Backward : uint32_t {
  kReluB, kSigmoidB, kTanhB, kRsqrtB, kGeluB, kGeluTanhB, kSiluB, kEluB, kLeakyReluB, kSoftplusB, kErfB, kClampB
};

template <Backward op>
void backward(Recorder& r, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg& out) {
  float a = 0.0f, b = 0.0f;
  if (op == kEluB) a = attrs.alpha;
  if (op == kLeakyReluB) a = attrs.negative_slope;
  if (op == kClampB) a = attrs.clamp_min, b = attrs.clamp_max;
  struct {
    uint64_t v, g, dx;
    uint32_t n;
    float a, b;
  } push{address(in[0]), address(in[1]), address(out), count32(out.numel(), "backward op"), a, b};
  r.dispatch("elementwise_backward", {kGroup, uint32_t(op)}, push, r.groups(push.n, kGroup));
}

// elementwise_binary.comp's OP codes.
enum Binary : uint32_t { kAdd, kAddRelu, kSub, kMul, kDiv, kMaximum, kMinimum, kGreaterEqual };

// Strides of `s` broadcast to `out` (NumPy's rule: shapes aligned at their
// last axis), at the 6 - rank(out) leading padded axes too, 0 where s is broadcast.
void broadcast_strides(const Shape& s, const Shape& out, uint32_t* strides) {
  constexpr int kR = Shape::kMaxRank;
  const int r = out.rank();
  uint32_t stride = 1;
  for (int i = kR - 1; i >= 0; --i) {
    const int oi = i - (kR - r), si = oi - (r - s.rank());
    const int64_t d = oi >= 0 && si >= 0 ? s[si] : 1;
    strides[i] = d == 1 ? 0 : stride;
    stride *= uint32_t(d);
  }
}

template <Binary op>
void binary(Recorder& r, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg& out) {
  static_assert(Shape::kMaxRank == 6, "elementwise_binary.comp's push block holds 6 axes");
  const Binary code = op == kAdd && (attrs.flags & kReluOutput) ? kAddRelu : op;
  struct {
    uint64_t a, b, y;
    uint32_t n;
    uint32_t dims[6], sa[6], sb[6];
  } push{address(in[0]), address(in[1]), address(out), count32(out.numel(), "binary op"), {}, {}, {}};
  count32(in[0].numel(), "binary op");
  count32(in[1].numel(), "binary op");
  const Shape& s = out.shape;
  for (int i = 0; i < 6; ++i) push.dims[i] = i < 6 - s.rank() ? 1 : uint32_t(s[i - (6 - s.rank())]);
  broadcast_strides(in[0].shape, s, push.sa);
  broadcast_strides(in[1].shape, s, push.sb);
  const bool flat = in[0].shape == s && in[1].shape == s;
  r.dispatch("elementwise_binary", {kGroup, uint32_t(code), uint32_t(flat)}, push, r.groups(push.n, kGroup));
}

}  // namespace

void add_elementwise_kernels(KernelTable& t) {
  t[size_t(OpKind::Fill)] = fill;

  t[size_t(OpKind::Add)] = binary<kAdd>;
  t[size_t(OpKind::Sub)] = binary<kSub>;
  t[size_t(OpKind::Mul)] = binary<kMul>;
  t[size_t(OpKind::Div)] = binary<kDiv>;
  t[size_t(OpKind::Maximum)] = binary<kMaximum>;
  t[size_t(OpKind::Minimum)] = binary<kMinimum>;
  t[size_t(OpKind::GreaterEqual)] = binary<kGreaterEqual>;

  t[size_t(OpKind::Scale)] = unary<kScale>;
  t[size_t(OpKind::Relu)] = unary<kRelu>;
  t[size_t(OpKind::Sigmoid)] = unary<kSigmoid>;
  t[size_t(OpKind::Tanh)] = unary<kTanh>;
  t[size_t(OpKind::Gelu)] = unary<kGelu>;
  t[size_t(OpKind::GeluTanh)] = unary<kGeluTanh>;
  t[size_t(OpKind::Silu)] = unary<kSilu>;
  t[size_t(OpKind::Elu)] = unary<kElu>;
  t[size_t(OpKind::LeakyRelu)] = unary<kLeakyRelu>;
  t[size_t(OpKind::Softplus)] = unary<kSoftplus>;
  t[size_t(OpKind::Exp)] = unary<kExp>;
  t[size_t(OpKind::Log)] = unary<kLog>;
  t[size_t(OpKind::Sqrt)] = unary<kSqrt>;
  t[size_t(OpKind::Rsqrt)] = unary<kRsqrt>;
  t[size_t(OpKind::Erf)] = unary<kErf>;
  t[size_t(OpKind::Pow)] = unary<kPow>;
  t[size_t(OpKind::Clamp)] = unary<kClamp>;

  t[size_t(OpKind::ReluBackward)] = backward<kReluB>;
  t[size_t(OpKind::SigmoidBackward)] = backward<kSigmoidB>;
  t[size_t(OpKind::TanhBackward)] = backward<kTanhB>;
  t[size_t(OpKind::RsqrtBackward)] = backward<kRsqrtB>;
  t[size_t(OpKind::GeluBackward)] = backward<kGeluB>;
  t[size_t(OpKind::GeluTanhBackward)] = backward<kGeluTanhB>;
  t[size_t(OpKind::SiluBackward)] = backward<kSiluB>;
  t[size_t(OpKind::EluBackward)] = backward<kEluB>;
  t[size_t(OpKind::LeakyReluBackward)] = backward<kLeakyReluB>;
  t[size_t(OpKind::SoftplusBackward)] = backward<kSoftplusB>;
  t[size_t(OpKind::ErfBackward)] = backward<kErfB>;
  t[size_t(OpKind::ClampBackward)] = backward<kClampB>;
}

}  // namespace tensorgrad::vulkan
