// Vulkan kernels: element-wise and activation ops with their gradients,
// Fill and Scale (kernels.h), and the copies Transpose, Slice, Concat and
// ToIndex. Four shaders cover them, the op a specialization constant:
// unary.comp (y = f(x)), elementwise_backward.comp (dx = f(x or y, g)),
// elementwise_binary.comp (NumPy broadcasting) and elementwise_copy.comp
// (strided copies); the math functions are in shaders/elementwise.glsl.
#include <array>
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

// ---- copies: elementwise_copy.comp ----

enum CopyMode : uint32_t { kCopy4, kCopy8, kToIndex };

// Row-major strides of `s` (elements).
std::array<int64_t, Shape::kMaxRank> strides_of(const Shape& s) {
  std::array<int64_t, Shape::kMaxRank> st{};
  int64_t stride = 1;
  for (int d = s.rank() - 1; d >= 0; --d) {
    st[size_t(d)] = stride;
    stride *= s[d];
  }
  return st;
}

// One strided copy over an index space of shape `dims` (see elementwise_copy.comp):
// per axis d of dims, the source and destination strides ss[d] and sd[d].
void copy(Recorder& r, CopyMode mode, const KernelArg& src, const KernelArg& dst, const Shape& dims,
          const std::array<int64_t, Shape::kMaxRank>& ss, const std::array<int64_t, Shape::kMaxRank>& sd,
          int64_t src_base, int64_t dst_base) {
  count32(src.numel(), "copy");
  count32(dst.numel(), "copy");
  struct {
    uint64_t src, dst;
    uint32_t n, src_base, dst_base;
    uint32_t dims[6], ss[6], sd[6];
  } push{address(src), address(dst), count32(dims.numel(), "copy"), uint32_t(src_base), uint32_t(dst_base),
         {}, {}, {}};
  if (push.n == 0) return;
  const int pad = 6 - dims.rank();
  for (int i = 0; i < 6; ++i) {
    const bool real = i >= pad;
    push.dims[i] = real ? uint32_t(dims[i - pad]) : 1;
    push.ss[i] = real ? uint32_t(ss[size_t(i - pad)]) : 0;
    push.sd[i] = real ? uint32_t(sd[size_t(i - pad)]) : 0;
  }
  r.dispatch("elementwise_copy", {kGroup, uint32_t(mode)}, push, r.groups(push.n, kGroup));
}

CopyMode copy_mode(const KernelArg& a) { return dtype_size(a.dtype) == 8 ? kCopy8 : kCopy4; }

// y = x with axes attrs.axis and attrs.axis2 swapped: y's index space, x's strides swapped likewise.
void transpose(Recorder& r, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg& out) {
  auto ss = strides_of(in[0].shape);
  std::swap(ss[size_t(attrs.axis)], ss[size_t(attrs.axis2)]);
  copy(r, copy_mode(out), in[0], out, out.shape, ss, strides_of(out.shape), 0, 0);
}

// y = attrs.length entries of x from attrs.start along attrs.axis: y's index space.
void slice(Recorder& r, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg& out) {
  const auto ss = strides_of(in[0].shape);
  copy(r, copy_mode(out), in[0], out, out.shape, ss, strides_of(out.shape), attrs.start * ss[size_t(attrs.axis)], 0);
}

// dx = zeros of attrs.shape with g at the slice: a fill, then g's index space.
void slice_backward(Recorder& r, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg& out) {
  OpAttrs zero;
  zero.value = 0.0f;
  fill(r, zero, {}, out);
  const auto sd = strides_of(out.shape);
  copy(r, kCopy4, in[0], out, in[0].shape, strides_of(in[0].shape), sd, 0, attrs.start * sd[size_t(attrs.axis)]);
}

// y = the inputs joined along attrs.axis: one copy per input, over its index space.
void concat(Recorder& r, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg& out) {
  const auto sd = strides_of(out.shape);
  int64_t offset = 0;
  for (const KernelArg& x : in) {
    copy(r, copy_mode(out), x, out, x.shape, strides_of(x.shape), sd, 0, offset * sd[size_t(attrs.axis)]);
    offset += x.shape[attrs.axis];
  }
}

// float32 whole numbers -> int32 (the caller checked they fit).
void to_index(Recorder& r, const OpAttrs&, std::span<const KernelArg> in, const KernelArg& out) {
  const Shape flat{in[0].numel()};
  copy(r, kToIndex, in[0], out, flat, strides_of(flat), strides_of(flat), 0, 0);
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

  t[size_t(OpKind::Transpose)] = transpose;
  t[size_t(OpKind::Slice)] = slice;
  t[size_t(OpKind::SliceBackward)] = slice_backward;
  t[size_t(OpKind::Concat)] = concat;
  t[size_t(OpKind::ToIndex)] = to_index;
}

}  // namespace tensorgrad::vulkan
