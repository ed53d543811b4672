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

// ---- strided index spaces: elementwise_binary.comp and elementwise_copy.comp ----

constexpr int kAxes = Shape::kMaxRank;
static_assert(kAxes == 6, "the strided shaders' push blocks hold 6 axes");
using Strides = std::array<int64_t, kAxes>;

// An index space walked by the strided shaders: element i's coordinates in
// dims[0, rank) (row-major) give each operand k's offset sum c_d strides[k][d].
template <int K>
struct Walk {
  int rank = 0;
  std::array<int64_t, kAxes> dims{};
  std::array<Strides, K> strides{};
};

// The walk over `shape` with the operands' strides along its axes, with
// axes of size 1 dropped and each axis merged into the next where every
// operand's strides allow (outer stride = inner stride x inner size): the
// shaders divide once per axis left, and a contiguous walk has one axis.
template <int K>
Walk<K> walk(const Shape& shape, const std::array<Strides, K>& strides) {
  Walk<K> w;
  for (int d = 0; d < shape.rank(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = w.rank > 0;
    for (int k = 0; k < K && merge; ++k) merge = strides[k][size_t(d)] * shape[d] == w.strides[k][size_t(w.rank - 1)];
    if (merge) {
      w.dims[size_t(w.rank - 1)] *= shape[d];
      for (int k = 0; k < K; ++k) w.strides[k][size_t(w.rank - 1)] = strides[k][size_t(d)];
    } else {
      w.dims[size_t(w.rank)] = shape[d];
      for (int k = 0; k < K; ++k) w.strides[k][size_t(w.rank)] = strides[k][size_t(d)];
      ++w.rank;
    }
  }
  if (w.rank == 0) {  // one element
    w.rank = 1;
    w.dims[0] = 1;
  }
  return w;
}

void to_push(const std::array<int64_t, kAxes>& v, uint32_t* out) {
  for (int i = 0; i < kAxes; ++i) out[i] = uint32_t(v[size_t(i)]);
}

// Row-major strides of `s` (elements).
Strides strides_of(const Shape& s) {
  Strides st{};
  int64_t stride = 1;
  for (int d = s.rank() - 1; d >= 0; --d) {
    st[size_t(d)] = stride;
    stride *= s[d];
  }
  return st;
}

// Strides of `s` broadcast to `out` (NumPy's rule: shapes aligned at their
// last axis), 0 along the axes where s is broadcast.
Strides broadcast_strides(const Shape& s, const Shape& out) {
  Strides st{};
  int64_t stride = 1;
  for (int d = out.rank() - 1; d >= 0; --d) {
    const int sd = d - (out.rank() - s.rank());
    const int64_t n = sd >= 0 ? s[sd] : 1;
    st[size_t(d)] = n == 1 ? 0 : stride;
    stride *= n;
  }
  return st;
}

// elementwise_binary.comp's OP codes.
enum Binary : uint32_t { kAdd, kAddRelu, kSub, kMul, kDiv, kMaximum, kMinimum, kGreaterEqual, kMaskedFill };

template <Binary op>
void binary(Recorder& r, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg& out) {
  const Binary code = op == kAdd && (attrs.flags & kReluOutput) ? kAddRelu : op;
  count32(in[0].numel(), "binary op");
  count32(in[1].numel(), "binary op");
  const Walk<2> w =
      walk<2>(out.shape, {broadcast_strides(in[0].shape, out.shape), broadcast_strides(in[1].shape, out.shape)});
  struct {
    uint64_t a, b, y;
    uint32_t n;
    uint32_t dims[6], sa[6], sb[6];
    float value;
  } push{address(in[0]), address(in[1]), address(out), count32(out.numel(), "binary op"), {}, {}, {}, attrs.value};
  to_push(w.dims, push.dims);
  to_push(w.strides[0], push.sa);
  to_push(w.strides[1], push.sb);
  r.dispatch("elementwise_binary", {kGroup, uint32_t(code), uint32_t(w.rank)}, push, r.groups(push.n, kGroup));
}

// ---- copies: elementwise_copy.comp ----

enum CopyMode : uint32_t { kCopy4, kCopy8, kToIndex };

// One strided copy over the index space `shape`, with source strides ss and
// destination strides sd along its axes (see elementwise_copy.comp).
void copy(Recorder& r, CopyMode mode, const KernelArg& src, const KernelArg& dst, const Shape& shape,
          const Strides& ss, const Strides& sd, int64_t src_base, int64_t dst_base) {
  count32(src.numel(), "copy");
  count32(dst.numel(), "copy");
  const Walk<2> w = walk<2>(shape, {ss, sd});
  struct {
    uint64_t src, dst;
    uint32_t n, src_base, dst_base;
    uint32_t dims[6], ss[6], sd[6];
  } push{address(src), address(dst), count32(shape.numel(), "copy"), uint32_t(src_base), uint32_t(dst_base),
         {}, {}, {}};
  if (push.n == 0) return;
  to_push(w.dims, push.dims);
  to_push(w.strides[0], push.ss);
  to_push(w.strides[1], push.sd);
  r.dispatch("elementwise_copy", {kGroup, uint32_t(mode), uint32_t(w.rank)}, push, r.groups(push.n, kGroup));
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
  t[size_t(OpKind::MaskedFill)] = binary<kMaskedFill>;

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
