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

// The shared loops over a call's operands; each kernel below gives its formula.
// y = op(a, b), NumPy broadcasting (binary_strided).
template <class Op>
void binary(const KernelCall& k, Op op) {
  binary_strided(k.in[0], k.in[1], k.out, k.ctx, op);
}
// y = f(x) element by element.
template <class F>
void unary(const KernelCall& k, F f) {
  map1(k.ctx, k.in[0].f(), k.out.f(), k.in[0].numel(), f);
}
// y = f(x, count) tile by tile: the vectorised functions of vector_math.h
// (exp, log, tanh, erfc through SLEEF where built).
template <class F>
void unary_tiles(const KernelCall& k, F f) {
  map_tiles(k.ctx, k.in[0].f(), k.out.f(), k.in[0].numel(), f);
}
// dx = f(v, g) element by element, v being in[0]: the forward's output y for
// the activations that invert cheaply from it, its input x for the others.
template <class F>
void gradient(const KernelCall& k, F f) {
  map2(k.ctx, k.in[0].f(), k.in[1].f(), k.out.f(), k.in[0].numel(), f);
}
}  // namespace

// Add with kReluOutput is max(a + b, 0), with the Relu kernel's max.
void add_forward(const KernelCall& k) {
  if (k.at.flags & kReluOutput) return binary(k, [](float x, float y) { return relu_value(x + y); });
  binary(k, [](float x, float y) { return x + y; });
}
void sub_forward(const KernelCall& k) { binary(k, [](float x, float y) { return x - y; }); }
void mul_forward(const KernelCall& k) { binary(k, [](float x, float y) { return x * y; }); }
void div_forward(const KernelCall& k) { binary(k, [](float x, float y) { return x / y; }); }
// x where x >= y (x <= y), else y. NaN propagates: x != x keeps a NaN x, and a NaN y fails the comparison.
void maximum_forward(const KernelCall& k) { binary(k, [](float x, float y) { return x >= y || x != x ? x : y; }); }
void minimum_forward(const KernelCall& k) { binary(k, [](float x, float y) { return x <= y || x != x ? x : y; }); }
void greater_equal_forward(const KernelCall& k) { binary(k, [](float x, float y) { return x >= y ? 1.0f : 0.0f; }); }
// Whatever x holds where the mask is set (inf, NaN) is replaced, as torch.masked_fill.
void masked_fill_forward(const KernelCall& k) {
  const float v = k.at.value;
  binary(k, [=](float x, float m) { return m != 0.0f ? v : x; });
}

void scale_forward(const KernelCall& k) {
  const float s = k.at.factor;
  unary(k, [=](float v) { return v * s; });
}

void relu_forward(const KernelCall& k) { unary(k, relu_value); }
void relu_backward(const KernelCall& k) { gradient(k, relu_pass); }

void sigmoid_forward(const KernelCall& k) { unary_tiles(k, sigmoid_n); }
void sigmoid_backward(const KernelCall& k) {
  gradient(k, [](float yv, float gv) { return gv * yv * (1.0f - yv); });
}

void tanh_forward(const KernelCall& k) { unary_tiles(k, tanh_n); }
void tanh_backward(const KernelCall& k) { gradient(k, [](float yv, float gv) { return gv * (1.0f - yv * yv); }); }

void rsqrt_forward(const KernelCall& k) { unary(k, [](float v) { return 1.0f / std::sqrt(v); }); }
void rsqrt_backward(const KernelCall& k) {
  gradient(k, [](float yv, float gv) { return -0.5f * gv * yv * yv * yv; });
}

// The derivatives of the activations below are written from the input x
// (they do not invert cheaply from y).
void gelu_forward(const KernelCall& k) { unary_tiles(k, gelu_n); }  // exact form, Keras' approximate=False
void gelu_backward(const KernelCall& k) {
  const float *x = k.in[0].f(), *g = k.in[1].f();
  float* dx = k.out.f();
  parallel_for(k.ctx.pool, size_t(k.in[0].numel()), kTile,
               [=](size_t b, size_t e) { gelu_backward_n(x + b, g + b, dx + b, int64_t(e - b)); });
}

void gelu_tanh_forward(const KernelCall& k) { unary_tiles(k, gelu_tanh_n); }  // Keras' approximate=True
// With t = 2u and s = sigmoid(t): dy/dx = s + x s (1 - s) dt/dx, s (1 - s) = e / (1 + e)^2 for
// e = exp(-|t|), which never overflows (exp(-t) would, and give inf / inf).
void gelu_tanh_backward(const KernelCall& k) {
  gradient(k, [](float v, float gv) {
    const float v2 = v * v, t = -v * (kGeluTanhA + kGeluTanhB * v2);
    const float e = std::exp(-std::fabs(t)), r = 1.0f / (1.0f + e), s = t >= 0.0f ? r : e * r;
    // Past |t| = 104, e is 0 and the slope is s itself; the product below would be 0 * inf once
    // x^2 overflows (|x| > 1.8e19), and at x = +-inf.
    if (e == 0.0f) return gv * s;
    return gv * (s - v * e * r * r * (kGeluTanhA + 3.0f * kGeluTanhB * v2));
  });
}

void silu_forward(const KernelCall& k) { unary_tiles(k, silu_n); }
void silu_backward(const KernelCall& k) {
  gradient(k, [](float v, float gv) {
    const float s = 1.0f / (1.0f + std::exp(-v));
    return gv * s * (1.0f + v * (1.0f - s));
  });
}

void elu_forward(const KernelCall& k) {
  const float alpha = k.at.alpha;
  unary(k, [=](float v) { return v > 0.0f ? v : alpha * std::expm1(v); });
}
void elu_backward(const KernelCall& k) {
  const float a = k.at.alpha;
  gradient(k, [=](float v, float gv) { return v > 0.0f ? gv : gv * a * std::exp(v); });
}

void leaky_relu_forward(const KernelCall& k) {
  const float slope = k.at.negative_slope;
  unary(k, [=](float v) { return v > 0.0f ? v : slope * v; });
}
void leaky_relu_backward(const KernelCall& k) {
  const float a = k.at.negative_slope;
  gradient(k, [=](float v, float gv) { return v > 0.0f ? gv : gv * a; });
}

void softplus_forward(const KernelCall& k) {  // log(1 + e^x) without overflow
  unary(k, [](float v) { return std::log1p(std::exp(-std::fabs(v))) + std::max(v, 0.0f); });
}
void softplus_backward(const KernelCall& k) {
  gradient(k, [](float v, float gv) { return gv / (1.0f + std::exp(-v)); });
}

// Exp, Log, Sqrt and Pow have no backward op: their gradients are built from other ops.
void exp_forward(const KernelCall& k) { unary_tiles(k, exp_n); }
void log_forward(const KernelCall& k) { unary_tiles(k, log_n); }
void sqrt_forward(const KernelCall& k) { unary(k, [](float v) { return std::sqrt(v); }); }
void pow_forward(const KernelCall& k) {
  const float p = k.at.exponent;
  unary(k, [=](float v) { return std::pow(v, p); });
}

void erf_forward(const KernelCall& k) { unary_tiles(k, erf_n); }
// e^(-x^2) underflows to 0 past |x| = 10, where erf is flat at +-1 in float anyway.
void erf_backward(const KernelCall& k) {
  gradient(k, [](float v, float gv) { return gv * 1.1283791670955126f * std::exp(-v * v); });  // 2/sqrt(pi)
}

void clamp_forward(const KernelCall& k) {
  const float lo = k.at.clamp_min, hi = k.at.clamp_max;
  unary(k, [=](float v) { return clamp_value(v, lo, hi); });
}
void clamp_backward(const KernelCall& k) {  // PyTorch's mask: g passes at the bounds too; a NaN x passes nothing
  const float lo = k.at.clamp_min, hi = k.at.clamp_max;
  gradient(k, [=](float v, float gv) { return v >= lo && v <= hi ? gv : 0.0f; });
}

// in: x, the stream's counter (int64 {1}).
void dropout_forward(const KernelCall& k) {
  const float *px = k.in[0].f();
  float* py = k.out.f();
  const float rate = k.at.rate, keep_scale = 1.0f / (1.0f - rate);
  const uint64_t key = hash_random(k.at.seed, uint64_t(*static_cast<const int64_t*>(k.in[1].data)));
  const uint64_t threshold = keep_threshold(rate);
  parallel_for(k.ctx.pool, size_t(k.in[0].numel()), kTile, [=](size_t b, size_t e) {
    // Locals, so that the stores to y cannot alias them and the loop vectorizes.
    const float* x = px;
    float* y = py;
    const uint64_t kk = key, t = threshold;
    const float s = keep_scale;
    for (size_t i = b; i < e; ++i) y[i] = hash_keeps(kk, i, t) ? x[i] * s : 0.0f;
  });
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

namespace {
// The sum of all of x in index order, in double.
double sum_all(const TensorRef& x) {
  double s = 0;
  const float* p = x.f();
  for (int64_t i = 0; i < x.numel(); ++i) s += p[i];
  return s;
}

// Runs f(o) for every o in [0, a.outer) of a tensor viewed around an axis,
// in tasks of about 16K elements: the chunking of every kernel along an axis.
template <class F>
void for_each_outer(const KernelContext& ctx, const Around& a, F f) {
  const size_t tile = std::max<size_t>(1, size_t(256 * 64) / size_t(std::max<int64_t>(a.axis * a.inner, 1)));
  parallel_for(ctx.pool, size_t(a.outer), tile, [=](size_t ob, size_t oe) {
    for (size_t o = ob; o < oe; ++o) f(int64_t(o));
  });
}

// y = x summed along `axis`, each output element in index order; with mean,
// then divided by the axis's length (empty_mean for an empty axis).
void sum_along(const KernelCall& k, int axis, bool mean, float empty_mean) {
  const Around a = around(k.in[0].shape, axis);
  const int64_t n = a.axis, inner = a.inner;
  const float* px = k.in[0].f();
  float* py = k.out.f();
  const float count = float(n);
  for_each_outer(k.ctx, a, [=](int64_t o) {
    const float* xs = px + o * n * inner;
    float* ys = py + o * inner;
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
  });
}
}  // namespace

void sum_forward(const KernelCall& k) { k.out.f()[0] = float(sum_all(k.in[0])); }
void mean_forward(const KernelCall& k) {
  double s = sum_all(k.in[0]);
  if (k.in[0].numel() > 0) s /= double(k.in[0].numel());
  k.out.f()[0] = float(s);
}

void sum_axis_forward(const KernelCall& k) { sum_along(k, k.at.axis, false, 0.0f); }
// An empty axis gives 0 / 0 = NaN, as torch.mean.
void mean_axis_forward(const KernelCall& k) { sum_along(k, k.at.axis, true, NAN); }
// The mean over the last axis; an empty one has always given 0.
void mean_last_axis_forward(const KernelCall& k) { sum_along(k, k.in[0].shape.rank() - 1, true, 0.0f); }

// y = x at the first maximum (first_max) of each slice along at.axis.
void max_axis_forward(const KernelCall& k) {
  const Around a = around(k.in[0].shape, k.at.axis);
  const int64_t n = a.axis, inner = a.inner;
  const float* px = k.in[0].f();
  float* py = k.out.f();
  for_each_outer(k.ctx, a, [=](int64_t o) {
    const float* xs = px + o * n * inner;
    float* ys = py + o * inner;
    for (int64_t i = 0; i < inner; ++i) ys[i] = xs[first_max(xs + i, n, inner) * inner + i];
  });
}
// in: x, g. dx = g at the first maximum of each slice of x along at.axis, 0 elsewhere.
void max_axis_backward(const KernelCall& k) {
  const Around a = around(k.in[0].shape, k.at.axis);
  const int64_t n = a.axis, inner = a.inner;
  const float *px = k.in[0].f(), *pg = k.in[1].f();
  float* pd = k.out.f();
  for_each_outer(k.ctx, a, [=](int64_t o) {
    const float* xs = px + o * n * inner;
    float* ds = pd + o * n * inner;
    std::fill(ds, ds + n * inner, 0.0f);
    for (int64_t i = 0; i < inner; ++i) ds[first_max(xs + i, n, inner) * inner + i] = pg[o * inner + i];
  });
}

}  // namespace tensorgrad::kernels
