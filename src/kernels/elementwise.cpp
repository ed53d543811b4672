#include <algorithm>
#include <cmath>

#include "kernels/kernels.h"
#include "kernels/vector_math.h"
#include "tensorgrad/core/random.h"

namespace tensorgrad::kernels {

namespace {
constexpr size_t kTile = 16384;  // elements per task: below this threads cost more than they save

// The loops take restrict pointers and the element function by value, so
// the compiler sees no aliasing and vectorises them.
template <class F>
void loop1(const float* __restrict x, float* __restrict y, size_t n, F f) {
  for (size_t i = 0; i < n; ++i) y[i] = f(x[i]);
}
template <class F>
void loop2(const float* __restrict a, const float* __restrict b, float* __restrict y, size_t n, F f) {
  for (size_t i = 0; i < n; ++i) y[i] = f(a[i], b[i]);
}
template <class F>
void map1(const KernelContext& ctx, const float* x, float* y, int64_t n, F f) {
  parallel_for(ctx.pool, size_t(n), kTile, [=](size_t b, size_t e) { loop1(x + b, y + b, e - b, f); });
}
// f(x, y, count) over tiles: the vectorised functions of vector_math.h.
template <class F>
void map_tiles(const KernelContext& ctx, const float* x, float* y, int64_t n, F f) {
  parallel_for(ctx.pool, size_t(n), kTile, [=](size_t b, size_t e) { f(x + b, y + b, int64_t(e - b)); });
}
template <class F>
void map2(const KernelContext& ctx, const float* a, const float* b, float* y, int64_t n, F f) {
  parallel_for(ctx.pool, size_t(n), kTile, [=](size_t s, size_t e) { loop2(a + s, b + s, y + s, e - s, f); });
}

// Strides of `s` broadcast to an output of rank r (0 where s is broadcast).
void broadcast_strides(const Shape& s, const Shape& out, int64_t* strides) {
  int r = out.rank();
  int64_t stride = 1;
  for (int i = r - 1; i >= 0; --i) {
    int si = i - (r - s.rank());
    int64_t d = si >= 0 ? s[si] : 1;
    strides[i] = d == 1 ? 0 : stride;
    stride *= d;
  }
}

template <class Op>
void binary_strided(const TensorRef& a, const TensorRef& b, const TensorRef& out, const KernelContext& ctx, Op op) {
  const float *pa = a.f(), *pb = b.f();
  float* po = out.f();
  const int64_t n = out.numel();
  if (a.shape == out.shape && b.shape == out.shape) return map2(ctx, pa, pb, po, n, op);
  if (b.numel() == 1) {
    const float s = pb[0];
    return map1(ctx, pa, po, n, [=](float v) { return op(v, s); });
  }
  if (a.numel() == 1) {
    const float s = pa[0];
    return map1(ctx, pb, po, n, [=](float v) { return op(s, v); });
  }
  const int r = out.shape.rank();
  int64_t sa[Shape::kMaxRank], sb[Shape::kMaxRank];
  broadcast_strides(a.shape, out.shape, sa);
  broadcast_strides(b.shape, out.shape, sb);
  const int64_t inner = out.shape[r - 1], outer = n / inner;
  const int64_t ia = sa[r - 1], ib = sb[r - 1];
  const size_t tile = std::max<size_t>(1, kTile / size_t(std::max<int64_t>(inner, 1)));
  parallel_for(ctx.pool, size_t(outer), tile, [&](size_t ob, size_t oe) {
    for (size_t o = ob; o < oe; ++o) {
      int64_t offa = 0, offb = 0, rem = int64_t(o);
      for (int d = r - 2; d >= 0; --d) {
        int64_t idx = rem % out.shape[d];
        rem /= out.shape[d];
        offa += idx * sa[d];
        offb += idx * sb[d];
      }
      const float *ra = pa + offa, *rb = pb + offb;
      float* ro = po + int64_t(o) * inner;
      if (ia == 1 && ib == 1) {
        loop2(ra, rb, ro, size_t(inner), op);
      } else if (ia == 1) {
        const float s = rb[0];
        loop1(ra, ro, size_t(inner), [=](float v) { return op(v, s); });
      } else if (ib == 1) {
        const float s = ra[0];
        loop1(rb, ro, size_t(inner), [=](float v) { return op(s, v); });
      } else {
        std::fill(ro, ro + inner, op(ra[0], rb[0]));
      }
    }
  });
}
}  // namespace

void add_relu(const TensorRef& a, const TensorRef& b, const TensorRef& out, const KernelContext& ctx) {
  binary_strided(a, b, out, ctx, [](float x, float y) {
    return relu_value(x + y);
  });
}

void binary(OpKind op, const TensorRef& a, const TensorRef& b, const TensorRef& out, const KernelContext& ctx) {
  switch (op) {
    case OpKind::Add: return binary_strided(a, b, out, ctx, [](float x, float y) { return x + y; });
    case OpKind::Sub: return binary_strided(a, b, out, ctx, [](float x, float y) { return x - y; });
    case OpKind::Mul: return binary_strided(a, b, out, ctx, [](float x, float y) { return x * y; });
    // x where x >= y (x <= y), else y. NaN propagates: x != x keeps a NaN x, and a NaN y fails the comparison.
    case OpKind::Maximum:
      return binary_strided(a, b, out, ctx, [](float x, float y) { return x >= y || x != x ? x : y; });
    case OpKind::Minimum:
      return binary_strided(a, b, out, ctx, [](float x, float y) { return x <= y || x != x ? x : y; });
    case OpKind::GreaterEqual:
      return binary_strided(a, b, out, ctx, [](float x, float y) { return x >= y ? 1.0f : 0.0f; });
    case OpKind::Div: return binary_strided(a, b, out, ctx, [](float x, float y) { return x / y; });
    case OpKind::Leaf: case OpKind::Fill: case OpKind::MatMul: case OpKind::Scale: case OpKind::Relu:
    case OpKind::Sigmoid: case OpKind::Tanh: case OpKind::Softmax: case OpKind::LogSoftmax:
    case OpKind::SoftmaxCrossEntropy: case OpKind::MseLoss: case OpKind::Dropout: case OpKind::Sum: case OpKind::Mean:
    case OpKind::SumTo: case OpKind::BroadcastTo: case OpKind::Reshape: case OpKind::Rsqrt: case OpKind::Gelu:
    case OpKind::Silu: case OpKind::Elu: case OpKind::LeakyRelu: case OpKind::Softplus: case OpKind::MeanLastAxis:
    case OpKind::Slice: case OpKind::Concat: case OpKind::Gather: case OpKind::ToIndex: case OpKind::Im2Col:
    case OpKind::Col2Im: case OpKind::MaxPool2D: case OpKind::AvgPool2D: case OpKind::ReluBackward:
    case OpKind::SigmoidBackward: case OpKind::TanhBackward: case OpKind::SoftmaxBackward:
    case OpKind::LogSoftmaxBackward: case OpKind::SoftmaxCrossEntropyBackward: case OpKind::MseLossBackward:
    case OpKind::RsqrtBackward: case OpKind::GeluBackward: case OpKind::SiluBackward: case OpKind::EluBackward:
    case OpKind::LeakyReluBackward: case OpKind::SoftplusBackward: case OpKind::SliceBackward:
    case OpKind::GatherBackward: case OpKind::MaxPool2DBackward: case OpKind::AvgPool2DBackward: case OpKind::Accuracy:
    case OpKind::Conv2D: case OpKind::Conv2DBackwardInput: case OpKind::Conv2DBackwardFilter:
    case OpKind::BatchNormStats:
    case OpKind::AttachedBatchStats:
    case OpKind::BatchNorm: case OpKind::BatchNormParamGrad: case OpKind::BatchNormBackward:
    case OpKind::AccumulateGrad: case OpKind::OptimizerTick: case OpKind::AdamWUpdate: case OpKind::SgdUpdate:
    case OpKind::RmspropUpdate: case OpKind::AdagradUpdate: case OpKind::ClipValue: case OpKind::SquaredNorm:
    case OpKind::ClipNorm:
    case OpKind::MaeLoss: case OpKind::HuberLoss: case OpKind::BinaryCrossEntropy: case OpKind::MaeLossBackward:
    case OpKind::HuberLossBackward: case OpKind::BinaryCrossEntropyBackward: case OpKind::BinaryAccuracy:
    case OpKind::TopKAccuracy:
    case OpKind::Exp: case OpKind::Log: case OpKind::Sqrt: case OpKind::Pow: case OpKind::Clamp: case OpKind::SumAxis:
    case OpKind::MeanAxis: case OpKind::MaxAxis: case OpKind::Transpose: case OpKind::ClampBackward:
    case OpKind::MaxAxisBackward:
    case OpKind::MovingAverage: case OpKind::AdvanceCounter: case OpKind::PolyakUpdate: case OpKind::Assign: case OpKind::LstmSequence: case OpKind::GruSequence:
    case OpKind::LstmSequenceBackward: case OpKind::GruSequenceBackward: case OpKind::Count:
      break;
  }
  unhandled_op(op, "kernels::binary");
}

void broadcast_to(const TensorRef& x, const TensorRef& out) {
  const float* px = x.f();
  float* po = out.f();
  const int64_t n = out.numel();
  if (x.numel() == 1) {
    for (int64_t i = 0; i < n; ++i) po[i] = px[0];
    return;
  }
  const int r = out.shape.rank();
  int64_t sx[Shape::kMaxRank];
  broadcast_strides(x.shape, out.shape, sx);
  const int64_t inner = out.shape[r - 1], outer = n / inner, ix = sx[r - 1];
  for (int64_t o = 0; o < outer; ++o) {
    int64_t off = 0, rem = o;
    for (int d = r - 2; d >= 0; --d) {
      off += (rem % out.shape[d]) * sx[d];
      rem /= out.shape[d];
    }
    float* ro = po + o * inner;
    for (int64_t j = 0; j < inner; ++j) ro[j] = px[off + j * ix];
  }
}

// Column sums of x {rows, cols} (a bias gradient): a fixed number of row
// chunks summed in parallel, then the chunks in order, so the result is the
// same whatever the thread count.
void column_sums(const float* px, int64_t rows, int64_t cols, float* po, const KernelContext& ctx) {
  constexpr int64_t kChunks = 16, kMaxCols = 256;
  float partial[kChunks][kMaxCols];
  const int64_t per = (rows + kChunks - 1) / kChunks;
  parallel_for(ctx.pool, size_t(kChunks), 1, [&](size_t cb, size_t ce) {
    for (size_t c = cb; c < ce; ++c) {
      float* acc = partial[c];
      for (int64_t j = 0; j < cols; ++j) acc[j] = 0.0f;
      const int64_t r0 = int64_t(c) * per, r1 = std::min(rows, r0 + per);
      for (int64_t r = r0; r < r1; ++r) {
        const float* row = px + r * cols;
        for (int64_t j = 0; j < cols; ++j) acc[j] += row[j];
      }
    }
  });
  for (int64_t j = 0; j < cols; ++j) po[j] = 0.0f;
  for (int64_t c = 0; c < kChunks; ++c)
    for (int64_t j = 0; j < cols; ++j) po[j] += partial[c][j];
}

void sum_to(const TensorRef& x, const TensorRef& out, const KernelContext& ctx) {
  // A fixed order of additions, so the result does not depend on threads.
  float* po = out.f();
  const float* px = x.f();
  const int64_t n_out = out.numel(), n = x.numel();
  if (out.shape.rank() == 1 && x.shape.rank() >= 2 && x.shape[-1] == n_out && n_out <= 256 && n >= (int64_t(1) << 16))
    return column_sums(px, n / n_out, n_out, po, ctx);
  if (n_out == 1) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += px[i];
    po[0] = float(s);
    return;
  }
  for (int64_t i = 0; i < n_out; ++i) po[i] = 0.0f;
  const int r = x.shape.rank();
  int64_t so[Shape::kMaxRank];
  broadcast_strides(out.shape, x.shape, so);
  const int64_t inner = x.shape[r - 1], outer = n / inner, io = so[r - 1];
  for (int64_t o = 0; o < outer; ++o) {
    int64_t off = 0, rem = o;
    for (int d = r - 2; d >= 0; --d) {
      off += (rem % x.shape[d]) * so[d];
      rem /= x.shape[d];
    }
    const float* rx = px + o * inner;
    float* ro = po + off;
    if (io == 1)
      for (int64_t j = 0; j < inner; ++j) ro[j] += rx[j];
    else {
      float s = 0.0f;
      for (int64_t j = 0; j < inner; ++j) s += rx[j];
      ro[0] += s;
    }
  }
}

void reduce_all(OpKind op, const TensorRef& x, const TensorRef& out) {
  double s = 0;
  const float* p = x.f();
  for (int64_t i = 0; i < x.numel(); ++i) s += p[i];
  if (op == OpKind::Mean && x.numel() > 0) s /= double(x.numel());
  out.f()[0] = float(s);
}

void dropout(const OpAttrs& at, const TensorRef& x, uint64_t counter, const TensorRef& y, const KernelContext& ctx) {
  const float *px = x.f();
  float* py = y.f();
  const float rate = at.scale, keep_scale = 1.0f / (1.0f - rate);
  const uint64_t key = hash_random(at.seed, counter);
  parallel_for(ctx.pool, size_t(x.numel()), kTile, [=](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) py[i] = hash_uniform(key, i) >= rate ? px[i] * keep_scale : 0.0f;
  });
}

void unary(OpKind op, const OpAttrs& at, const TensorRef& x, const TensorRef& y, const KernelContext& ctx) {
  const float* px = x.f();
  float* py = y.f();
  const int64_t n = x.numel();
  switch (op) {
    case OpKind::Scale: {
      const float s = at.scale;
      return map1(ctx, px, py, n, [=](float v) { return v * s; });
    }
    case OpKind::Relu: return map1(ctx, px, py, n, relu_value);
    // exp, log, tanh, erfc through SLEEF where built (kernels/vector_math.h)
    case OpKind::Sigmoid: return map_tiles(ctx, px, py, n, sigmoid_n);
    case OpKind::Tanh: return map_tiles(ctx, px, py, n, tanh_n);
    case OpKind::Rsqrt: return map1(ctx, px, py, n, [](float v) { return 1.0f / std::sqrt(v); });
    case OpKind::Gelu: return map_tiles(ctx, px, py, n, gelu_n);  // exact form, Keras' approximate=False
    case OpKind::Silu: return map_tiles(ctx, px, py, n, silu_n);
    case OpKind::Elu: {
      const float alpha = at.scale;
      return map1(ctx, px, py, n, [=](float v) { return v > 0.0f ? v : alpha * std::expm1(v); });
    }
    case OpKind::LeakyRelu: {
      const float slope = at.scale;
      return map1(ctx, px, py, n, [=](float v) { return v > 0.0f ? v : slope * v; });
    }
    case OpKind::Softplus:  // log(1 + e^x) without overflow
      return map1(ctx, px, py, n, [](float v) { return std::log1p(std::exp(-std::fabs(v))) + std::max(v, 0.0f); });
    case OpKind::Exp: return map_tiles(ctx, px, py, n, exp_n);
    case OpKind::Log: return map_tiles(ctx, px, py, n, log_n);
    case OpKind::Sqrt: return map1(ctx, px, py, n, [](float v) { return std::sqrt(v); });
    case OpKind::Pow: {
      const float p = at.scale;
      return map1(ctx, px, py, n, [=](float v) { return std::pow(v, p); });
    }
    case OpKind::Clamp: {
      const float lo = at.clamp_min, hi = at.clamp_max;
      return map1(ctx, px, py, n, [=](float v) { return clamp_value(v, lo, hi); });
    }
    case OpKind::Dropout:  // its own kernel, dropout(): it reads a counter input
    case OpKind::Leaf: case OpKind::Fill: case OpKind::MatMul: case OpKind::Add: case OpKind::Sub: case OpKind::Mul:
    case OpKind::Softmax: case OpKind::LogSoftmax: case OpKind::SoftmaxCrossEntropy: case OpKind::MseLoss:
    case OpKind::Sum: case OpKind::Mean: case OpKind::SumTo: case OpKind::BroadcastTo: case OpKind::Reshape:
    case OpKind::MeanLastAxis: case OpKind::Slice: case OpKind::Concat: case OpKind::Gather: case OpKind::ToIndex:
    case OpKind::Im2Col: case OpKind::Col2Im: case OpKind::MaxPool2D: case OpKind::AvgPool2D:
    case OpKind::ReluBackward: case OpKind::SigmoidBackward: case OpKind::TanhBackward: case OpKind::SoftmaxBackward:
    case OpKind::LogSoftmaxBackward: case OpKind::SoftmaxCrossEntropyBackward: case OpKind::MseLossBackward:
    case OpKind::RsqrtBackward: case OpKind::GeluBackward: case OpKind::SiluBackward: case OpKind::EluBackward:
    case OpKind::LeakyReluBackward: case OpKind::SoftplusBackward: case OpKind::SliceBackward:
    case OpKind::GatherBackward: case OpKind::MaxPool2DBackward: case OpKind::AvgPool2DBackward: case OpKind::Accuracy:
    case OpKind::Conv2D: case OpKind::Conv2DBackwardInput: case OpKind::Conv2DBackwardFilter:
    case OpKind::BatchNormStats:
    case OpKind::AttachedBatchStats:
    case OpKind::BatchNorm: case OpKind::BatchNormParamGrad: case OpKind::BatchNormBackward:
    case OpKind::AccumulateGrad: case OpKind::OptimizerTick: case OpKind::AdamWUpdate: case OpKind::SgdUpdate:
    case OpKind::RmspropUpdate: case OpKind::AdagradUpdate: case OpKind::ClipValue: case OpKind::SquaredNorm:
    case OpKind::ClipNorm:
    case OpKind::Maximum: case OpKind::Minimum: case OpKind::GreaterEqual: case OpKind::MaeLoss: case OpKind::HuberLoss:
    case OpKind::BinaryCrossEntropy: case OpKind::MaeLossBackward: case OpKind::HuberLossBackward:
    case OpKind::BinaryCrossEntropyBackward: case OpKind::BinaryAccuracy: case OpKind::TopKAccuracy:
    case OpKind::Div: case OpKind::SumAxis: case OpKind::MeanAxis: case OpKind::MaxAxis: case OpKind::Transpose:
    case OpKind::ClampBackward: case OpKind::MaxAxisBackward:
    case OpKind::MovingAverage: case OpKind::AdvanceCounter: case OpKind::PolyakUpdate: case OpKind::Assign: case OpKind::LstmSequence: case OpKind::GruSequence:
    case OpKind::LstmSequenceBackward: case OpKind::GruSequenceBackward: case OpKind::Count:
      break;
  }
  unhandled_op(op, "kernels::unary");
}

// Derivatives written from the input x (these activations do not invert cheaply from y).
void activation_backward(OpKind op, const OpAttrs& at, const TensorRef& x, const TensorRef& g, const TensorRef& dx,
                         const KernelContext& ctx) {
  const float *px = x.f(), *pg = g.f();
  float* pd = dx.f();
  const int64_t n = x.numel();
  const float a = at.scale;
  switch (op) {
    case OpKind::GeluBackward:
      return map2(ctx, px, pg, pd, n, [](float v, float gv) {
        const float cdf = 0.5f * (1.0f + std::erf(v * float(M_SQRT1_2)));
        const float pdf = std::exp(-0.5f * v * v) * 0.3989422804014327f;  // 1/sqrt(2 pi)
        return gv * (cdf + v * pdf);
      });
    case OpKind::SiluBackward:
      return map2(ctx, px, pg, pd, n, [](float v, float gv) {
        const float s = 1.0f / (1.0f + std::exp(-v));
        return gv * s * (1.0f + v * (1.0f - s));
      });
    case OpKind::EluBackward:
      return map2(ctx, px, pg, pd, n, [=](float v, float gv) { return v > 0.0f ? gv : gv * a * std::exp(v); });
    case OpKind::LeakyReluBackward:
      return map2(ctx, px, pg, pd, n, [=](float v, float gv) { return v > 0.0f ? gv : gv * a; });
    case OpKind::SoftplusBackward:
      return map2(ctx, px, pg, pd, n, [](float v, float gv) { return gv / (1.0f + std::exp(-v)); });
    case OpKind::ClampBackward: {  // PyTorch's mask: g passes at the bounds too; a NaN x passes nothing
      const float lo = at.clamp_min, hi = at.clamp_max;
      return map2(ctx, px, pg, pd, n, [=](float v, float gv) { return v >= lo && v <= hi ? gv : 0.0f; });
    }
    case OpKind::Leaf: case OpKind::Fill: case OpKind::MatMul: case OpKind::Add: case OpKind::Sub: case OpKind::Mul:
    case OpKind::Scale: case OpKind::Relu: case OpKind::Sigmoid: case OpKind::Tanh: case OpKind::Softmax:
    case OpKind::LogSoftmax: case OpKind::SoftmaxCrossEntropy: case OpKind::MseLoss: case OpKind::Dropout:
    case OpKind::Sum: case OpKind::Mean: case OpKind::SumTo: case OpKind::BroadcastTo: case OpKind::Reshape:
    case OpKind::Rsqrt: case OpKind::Gelu: case OpKind::Silu: case OpKind::Elu: case OpKind::LeakyRelu:
    case OpKind::Softplus: case OpKind::MeanLastAxis: case OpKind::Slice: case OpKind::Concat: case OpKind::Gather:
    case OpKind::ToIndex: case OpKind::Im2Col: case OpKind::Col2Im: case OpKind::MaxPool2D: case OpKind::AvgPool2D:
    case OpKind::ReluBackward: case OpKind::SigmoidBackward: case OpKind::TanhBackward: case OpKind::SoftmaxBackward:
    case OpKind::LogSoftmaxBackward: case OpKind::SoftmaxCrossEntropyBackward: case OpKind::MseLossBackward:
    case OpKind::RsqrtBackward: case OpKind::SliceBackward: case OpKind::GatherBackward:
    case OpKind::MaxPool2DBackward: case OpKind::AvgPool2DBackward: case OpKind::Accuracy:
    case OpKind::Conv2D: case OpKind::Conv2DBackwardInput: case OpKind::Conv2DBackwardFilter:
    case OpKind::BatchNormStats:
    case OpKind::AttachedBatchStats:
    case OpKind::BatchNorm: case OpKind::BatchNormParamGrad: case OpKind::BatchNormBackward:
    case OpKind::AccumulateGrad:
    case OpKind::OptimizerTick: case OpKind::AdamWUpdate: case OpKind::SgdUpdate:
    case OpKind::RmspropUpdate: case OpKind::AdagradUpdate: case OpKind::ClipValue: case OpKind::SquaredNorm:
    case OpKind::ClipNorm: case OpKind::MovingAverage: case OpKind::AdvanceCounter: case OpKind::PolyakUpdate: case OpKind::Assign:
    case OpKind::Maximum: case OpKind::Minimum: case OpKind::GreaterEqual: case OpKind::MaeLoss: case OpKind::HuberLoss:
    case OpKind::BinaryCrossEntropy: case OpKind::MaeLossBackward: case OpKind::HuberLossBackward:
    case OpKind::BinaryCrossEntropyBackward: case OpKind::BinaryAccuracy: case OpKind::TopKAccuracy:
    case OpKind::Div: case OpKind::Exp: case OpKind::Log: case OpKind::Sqrt: case OpKind::Pow: case OpKind::Clamp:
    case OpKind::SumAxis: case OpKind::MeanAxis: case OpKind::MaxAxis: case OpKind::Transpose:
    case OpKind::MaxAxisBackward:
    case OpKind::LstmSequence: case OpKind::GruSequence:
    case OpKind::LstmSequenceBackward: case OpKind::GruSequenceBackward: case OpKind::Count:
      break;
  }
  unhandled_op(op, "kernels::activation_backward");
}

void reduce_axis(OpKind op, int axis, const TensorRef& x, const TensorRef& y, const KernelContext& ctx) {
  const Around a = around(x.shape, axis);
  const int64_t n = a.axis, inner = a.inner;
  const float* px = x.f();
  float* py = y.f();
  const bool max = op == OpKind::MaxAxis, mean = op == OpKind::MeanAxis || op == OpKind::MeanLastAxis;
  // MeanLastAxis has always given 0 for an empty axis; MeanAxis gives 0 / 0 = NaN, as torch.mean.
  const float count = float(n), empty_mean = op == OpKind::MeanLastAxis ? 0.0f : NAN;
  const size_t tile = std::max<size_t>(1, size_t(256 * 64) / size_t(std::max<int64_t>(n * inner, 1)));
  parallel_for(ctx.pool, size_t(a.outer), tile, [=](size_t ob, size_t oe) {
    for (size_t o = ob; o < oe; ++o) {
      const float* xs = px + int64_t(o) * n * inner;
      float* ys = py + int64_t(o) * inner;
      if (max) {
        for (int64_t i = 0; i < inner; ++i) ys[i] = xs[first_max(xs + i, n, inner) * inner + i];
        continue;
      }
      if (inner == 1) {
        float s = 0.0f;
        for (int64_t j = 0; j < n; ++j) s += xs[j];
        ys[0] = s;
      } else {
        for (int64_t i = 0; i < inner; ++i) ys[i] = 0.0f;
        for (int64_t j = 0; j < n; ++j)
          for (int64_t i = 0; i < inner; ++i) ys[i] += xs[j * inner + i];
      }
      if (mean)
        for (int64_t i = 0; i < inner; ++i) ys[i] = n ? ys[i] / count : empty_mean;
    }
  });
}

void max_axis_backward(int axis, const TensorRef& x, const TensorRef& g, const TensorRef& dx,
                       const KernelContext& ctx) {
  const Around a = around(x.shape, axis);
  const int64_t n = a.axis, inner = a.inner;
  const float *px = x.f(), *pg = g.f();
  float* pd = dx.f();
  const size_t tile = std::max<size_t>(1, size_t(256 * 64) / size_t(std::max<int64_t>(n * inner, 1)));
  parallel_for(ctx.pool, size_t(a.outer), tile, [=](size_t ob, size_t oe) {
    for (size_t o = ob; o < oe; ++o) {
      const float* xs = px + int64_t(o) * n * inner;
      float* ds = pd + int64_t(o) * n * inner;
      std::fill(ds, ds + n * inner, 0.0f);
      for (int64_t i = 0; i < inner; ++i) ds[first_max(xs + i, n, inner) * inner + i] = pg[int64_t(o) * inner + i];
    }
  });
}

void unary_backward(OpKind op, const TensorRef& y, const TensorRef& g, const TensorRef& dx, const KernelContext& ctx) {
  const float *py = y.f(), *pg = g.f();
  float* pd = dx.f();
  const int64_t n = y.numel();
  switch (op) {
    case OpKind::ReluBackward: return map2(ctx, py, pg, pd, n, relu_pass);
    case OpKind::SigmoidBackward:
      return map2(ctx, py, pg, pd, n, [](float yv, float gv) { return gv * yv * (1.0f - yv); });
    case OpKind::TanhBackward: return map2(ctx, py, pg, pd, n, [](float yv, float gv) { return gv * (1.0f - yv *
    yv); });
    case OpKind::RsqrtBackward:
      return map2(ctx, py, pg, pd, n, [](float yv, float gv) { return -0.5f * gv * yv * yv * yv; });
    case OpKind::Leaf: case OpKind::Fill: case OpKind::MatMul: case OpKind::Add: case OpKind::Sub: case OpKind::Mul:
    case OpKind::Scale: case OpKind::Relu: case OpKind::Sigmoid: case OpKind::Tanh: case OpKind::Softmax:
    case OpKind::LogSoftmax: case OpKind::SoftmaxCrossEntropy: case OpKind::MseLoss: case OpKind::Dropout:
    case OpKind::Sum: case OpKind::Mean: case OpKind::SumTo: case OpKind::BroadcastTo: case OpKind::Reshape:
    case OpKind::Rsqrt: case OpKind::Gelu: case OpKind::Silu: case OpKind::Elu: case OpKind::LeakyRelu:
    case OpKind::Softplus: case OpKind::MeanLastAxis: case OpKind::Slice: case OpKind::Concat: case OpKind::Gather:
    case OpKind::ToIndex: case OpKind::Im2Col: case OpKind::Col2Im: case OpKind::MaxPool2D: case OpKind::AvgPool2D:
    case OpKind::SoftmaxBackward: case OpKind::LogSoftmaxBackward: case OpKind::SoftmaxCrossEntropyBackward:
    case OpKind::MseLossBackward: case OpKind::GeluBackward: case OpKind::SiluBackward: case OpKind::EluBackward:
    case OpKind::LeakyReluBackward: case OpKind::SoftplusBackward: case OpKind::SliceBackward:
    case OpKind::GatherBackward: case OpKind::MaxPool2DBackward: case OpKind::AvgPool2DBackward: case OpKind::Accuracy:
    case OpKind::Conv2D: case OpKind::Conv2DBackwardInput: case OpKind::Conv2DBackwardFilter:
    case OpKind::BatchNormStats:
    case OpKind::AttachedBatchStats:
    case OpKind::BatchNorm: case OpKind::BatchNormParamGrad: case OpKind::BatchNormBackward:
    case OpKind::AccumulateGrad: case OpKind::OptimizerTick: case OpKind::AdamWUpdate: case OpKind::SgdUpdate:
    case OpKind::RmspropUpdate: case OpKind::AdagradUpdate: case OpKind::ClipValue: case OpKind::SquaredNorm:
    case OpKind::ClipNorm:
    case OpKind::Maximum: case OpKind::Minimum: case OpKind::GreaterEqual: case OpKind::MaeLoss: case OpKind::HuberLoss:
    case OpKind::BinaryCrossEntropy: case OpKind::MaeLossBackward: case OpKind::HuberLossBackward:
    case OpKind::BinaryCrossEntropyBackward: case OpKind::BinaryAccuracy: case OpKind::TopKAccuracy:
    case OpKind::Div: case OpKind::Exp: case OpKind::Log: case OpKind::Sqrt: case OpKind::Pow: case OpKind::Clamp:
    case OpKind::SumAxis: case OpKind::MeanAxis: case OpKind::MaxAxis: case OpKind::Transpose:
    case OpKind::ClampBackward: case OpKind::MaxAxisBackward:
    case OpKind::MovingAverage: case OpKind::AdvanceCounter: case OpKind::PolyakUpdate: case OpKind::Assign: case OpKind::LstmSequence: case OpKind::GruSequence:
    case OpKind::LstmSequenceBackward: case OpKind::GruSequenceBackward: case OpKind::Count:
      break;
  }
  unhandled_op(op, "kernels::unary_backward");
}

}  // namespace tensorgrad::kernels
