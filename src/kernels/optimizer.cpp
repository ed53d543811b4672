// Optimizer updates as kernels over persistent tensors (DESIGN.md: state lives
// on the device), one op per optimizer with its modes in attrs.flags and its
// numbers in the hyper tensor (HyperSlot). The formulas are PyTorch's
// (torch.optim.AdamW/Adam, SGD, RMSprop, Adagrad), which is also what ggml's
// AdamW computes; Keras' placement of epsilon inside the square root
// (RMSprop, Adagrad) is the kEpsInsideSqrt mode. Weight decay is decoupled,
// p <- p (1 - lr wd) before the update (Loshchilov & Hutter 2019; Keras 3's
// weight_decay for every optimizer, PyTorch's AdamW), or L2 with
// kL2WeightDecay, g <- g + wd p before anything else (PyTorch's weight_decay
// of SGD, Adam, RMSprop, Adagrad). Per element, with g' the gradient after L2:
//
//   AdamW    m = b1 m + (1 - b1) g';  v = b2 v + (1 - b2) g'^2
//            p = p decay - lr (m c1) / (sqrt(v c2) + eps)        c1, c2: bias corrections
//   SGD      p = p decay - lr g'                                 without momentum
//            b = mu b + (1 - d) g';  u = nesterov ? g' + mu b : b;  p = p decay - lr u
//            (d is 0 on the first step: PyTorch starts the buffer as the gradient)
//   RMSprop  v = rho v + (1 - rho) g'^2;  centered: a = rho a + (1 - rho) g', var = v - a^2; else var = v
//            u = g' / (sqrt(var) + eps)  (kEpsInsideSqrt: g' / sqrt(var + eps))
//            momentum: b = mu b + u, u = b;  p = p decay - lr u
//   Adagrad  s = s + g'^2;  p = p decay - lr g' / (sqrt(s) + eps)  (kEpsInsideSqrt: sqrt(s + eps))
//   Polyak   t = tau s + (1 - tau) t  (PolyakUpdate: a target network's weight; tau = 1 copies exactly)
//
// The learning rate is hyper[kLr]: set from the host, or written by
// OptimizerTick from a schedule (Keras 3's keras.optimizers.schedules) at the
// step count before the update's increment, so every update above, its
// decoupled weight decay included, reads the scheduled rate.
//
// Each is a plain loop over restrict pointers, the modes as template
// parameters, so that it vectorises; parallel_for splits the elements.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "kernels/kernels.h"
#include "ops/norm_pair.h"
#include "tensorgrad/core/logging.h"

#if defined(__SSE__)
#include <immintrin.h>
#endif

namespace tensorgrad::kernels {

namespace {
// The numbers of one update, read from the hyper tensor once per op.
struct Step {
  float lr, b1, b2, eps, c1, c2;
  float decay;      // 1 - lr wd (decoupled), or 1
  float l2;         // wd (L2), or 0
  float mu;         // momentum
  float damp;       // 1 - this step's dampening
  float rho;
};

Step read_step(const float* h, uint32_t flags) {
  const bool l2 = flags & kL2WeightDecay;
  return Step{h[kLr], h[kBeta1], h[kBeta2], h[kEps], h[kBiasCorrection1], h[kBiasCorrection2],
              l2 ? 1.0f : 1.0f - h[kLr] * h[kWeightDecay], l2 ? h[kWeightDecay] : 0.0f,
              h[kMomentum], 1.0f - h[kStepDampening], h[kRho]};
}

// Flush-to-zero and denormals-are-zero on the calling thread while alive.
// The moments of a parameter whose gradient stays 0 (a dead ReLU unit) decay
// geometrically into the denormal range, where every multiply takes a
// microcode assist: the eager 4-64-64-2 Adam step spent 10 of its 39 us there
// (bench/tensorgrad_bench eager_adam_step, 28.6 us with the flush). A moment
// below 1.2e-38 moves no float32 parameter, so flushing it changes nothing a
// user sees but the time.
class FlushDenormals {
 public:
#if defined(__SSE__)
  FlushDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | 0x8040u); }  // FTZ | DAZ
  ~FlushDenormals() { _mm_setcsr(saved_); }

 private:
  unsigned saved_;
#endif
};

// Runs f(begin, end) over the elements of an update (denormals flushed), then
// clears the gradient there when asked.
template <class F>
void for_elements(const KernelContext& ctx, size_t n, float* g, bool zero, F&& f) {
  parallel_for(ctx.pool, n, 16384, [&](size_t b, size_t e) {
    {
      FlushDenormals flush;
      f(b, e);
    }
    if (zero) std::fill(g + b, g + e, 0.0f);
  });
}

void add_range(float* __restrict acc, const float* __restrict g, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] += g[i];
}
}  // namespace

// in: acc, g (acc += g), or acc, A, B (acc += op(A) op(B), MatMul's attrs).
void accumulate_grad(const KernelCall& k) {
  if (k.in.size() == 3) return matmul(k.at, k.in[1], k.in[2], k.in[0], k.ctx, 1.0f);  // the product form: one GEMM
  float* acc = k.in[0].f();
  const float* g = k.in[1].f();
  parallel_for(k.ctx.pool, size_t(k.in[0].numel()), 16384,
               [=](size_t b, size_t e) { add_range(acc + b, g + b, e - b); });
}

namespace {
// 0.5 (1 + cos(pi x)): from 1 at x = 0 down to 0 at x = 1.
double half_cosine(double x) { return 0.5 * (1.0 + std::cos(3.14159265358979323846 * x)); }

// SGDR's restarts (Loshchilov & Hutter 2017), as Keras' CosineDecayRestarts:
// period k lasts first t_mul^k steps and starts after first (1 - t_mul^k) /
// (1 - t_mul); returns the period t falls in and the fraction of it done.
std::pair<double, double> restart_period(int64_t t, int64_t first, double t_mul) {
  if (t_mul == 1.0) return {double(t / first), double(t % first) / double(first)};
  const double done = double(t) / double(first);  // in units of the first period
  auto start = [&](double k) { return (1.0 - std::pow(t_mul, k)) / (1.0 - t_mul); };
  double k = std::floor(std::log(1.0 - done * (1.0 - t_mul)) / std::log(t_mul));
  // The logarithm can land a rounding away from a whole number at the very
  // step of a restart; settle k so that start(k) <= done < start(k + 1).
  while (k > 0.0 && start(k) > done) k -= 1.0;
  while (start(k + 1.0) <= done) k += 1.0;
  return {k, (done - start(k)) / std::pow(t_mul, k)};
}
}  // namespace

double scheduled_learning_rate(uint32_t kind, std::span<const int64_t> steps, std::span<const float> values, int64_t t) {
  switch (LrScheduleKind(kind)) {
    case kPiecewiseConstantDecay: {
      size_t i = 0;
      while (t > steps[i]) ++i;  // ends at the INT64_MAX marker at the latest
      return values[i];
    }
    case kExponentialDecay: {
      const int64_t decay_steps = steps[0];
      const double p = steps[1] ? double(t / decay_steps) : double(t) / double(decay_steps);
      return double(values[0]) * std::pow(double(values[1]), p);
    }
    case kCosineDecay: {
      const int64_t decay_steps = steps[0], warmup_steps = steps[1];
      const double initial = values[0], alpha = values[1];
      double from = initial;
      int64_t into_decay = t;
      if (steps[2]) {  // warmup_target given: a linear ramp to it first, then the decay from it
        const double target = values[2];
        if (t < warmup_steps) return initial + (target - initial) * (double(t) / double(warmup_steps));
        from = target;
        into_decay = t - warmup_steps;
      }
      const double done = double(std::min(into_decay, decay_steps)) / double(decay_steps);
      return from * ((1.0 - alpha) * half_cosine(done) + alpha);
    }
    case kCosineDecayRestarts: {
      const double initial = values[0], t_mul = values[1], m_mul = values[2], alpha = values[3];
      const auto [k, done] = restart_period(t, steps[0], t_mul);
      return initial * ((1.0 - alpha) * std::pow(m_mul, k) * half_cosine(done) + alpha);
    }
    case kConstantLr: break;
  }
  return 0.0;  // not reached: the shape rule admits only the kinds above
}

// in: hyper, step [, schedule steps, schedule values]: the step count and
// what the updates read from it.
void optimizer_tick(const KernelCall& k) {
  float* h = k.in[0].f();
  int64_t* step = static_cast<int64_t*>(k.in[1].data);
  if (k.at.flags != kConstantLr)  // Keras' schedule(iterations), before the increment
    h[kLr] = float(scheduled_learning_rate(k.at.flags,
                                           {static_cast<const int64_t*>(k.in[2].data), size_t(k.in[2].numel())},
                                           {k.in[3].f(), size_t(k.in[3].numel())}, *step));
  const int64_t t = ++*step;
  h[kBiasCorrection1] = float(1.0 / (1.0 - std::pow(double(h[kBeta1]), double(t))));
  h[kBiasCorrection2] = float(1.0 / (1.0 - std::pow(double(h[kBeta2]), double(t))));
  h[kStepDampening] = t == 1 ? 0.0f : h[kDampening];
}

namespace {
void adamw_range(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v, size_t n,
                 Step s) {
  for (size_t i = 0; i < n; ++i) {
    const float gi = g[i] + s.l2 * p[i];
    const float mi = s.b1 * m[i] + (1.0f - s.b1) * gi;
    const float vi = s.b2 * v[i] + (1.0f - s.b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * s.decay - s.lr * (mi * s.c1) / (std::sqrt(vi * s.c2) + s.eps);
  }
}
}  // namespace

// in: param, grad, m, v, hyper.
void adamw_update(const KernelCall& k) {
  float *p = k.in[0].f(), *g = k.in[1].f(), *m = k.in[2].f(), *v = k.in[3].f();
  const Step st = read_step(k.in[4].f(), k.at.flags);
  for_elements(k.ctx, size_t(k.in[0].numel()), g, k.at.zero_grad,
               [&](size_t b, size_t e) { adamw_range(p + b, g + b, m + b, v + b, e - b, st); });
}

namespace {
void sgd_range(float* __restrict p, const float* __restrict g, size_t n, Step s) {
  for (size_t i = 0; i < n; ++i) p[i] = p[i] * s.decay - s.lr * (g[i] + s.l2 * p[i]);
}

template <bool kNesterovMode>
void sgd_momentum_range(float* __restrict p, const float* __restrict g, float* __restrict buf, size_t n, Step s) {
  for (size_t i = 0; i < n; ++i) {
    const float gi = g[i] + s.l2 * p[i];
    const float b = s.mu * buf[i] + s.damp * gi;
    buf[i] = b;
    const float u = kNesterovMode ? gi + s.mu * b : b;
    p[i] = p[i] * s.decay - s.lr * u;
  }
}
}  // namespace

// in: param, grad, [momentum buffer], hyper.
void sgd_update(const KernelCall& k) {
  float *p = k.in[0].f(), *g = k.in[1].f();
  const Step st = read_step(k.in.back().f(), k.at.flags);
  if (!(k.at.flags & kUseMomentum)) {
    for_elements(k.ctx, size_t(k.in[0].numel()), g, k.at.zero_grad,
                 [&](size_t b, size_t e) { sgd_range(p + b, g + b, e - b, st); });
    return;
  }
  float* buf = k.in[2].f();
  const bool nesterov = k.at.flags & kNesterov;
  for_elements(k.ctx, size_t(k.in[0].numel()), g, k.at.zero_grad, [&](size_t b, size_t e) {
    if (nesterov) sgd_momentum_range<true>(p + b, g + b, buf + b, e - b, st);
    else sgd_momentum_range<false>(p + b, g + b, buf + b, e - b, st);
  });
}

namespace {
template <bool kCenteredMode, bool kMomentumMode, bool kInside>
void rmsprop_range(float* __restrict p, const float* __restrict g, float* __restrict v, float* __restrict a,
                   float* __restrict buf, size_t n, Step s) {
  for (size_t i = 0; i < n; ++i) {
    const float gi = g[i] + s.l2 * p[i];
    const float vi = s.rho * v[i] + (1.0f - s.rho) * gi * gi;
    v[i] = vi;
    float var = vi;
    if constexpr (kCenteredMode) {
      const float ai = s.rho * a[i] + (1.0f - s.rho) * gi;
      a[i] = ai;
      var = vi - ai * ai;
    }
    float u = kInside ? gi / std::sqrt(var + s.eps) : gi / (std::sqrt(var) + s.eps);
    if constexpr (kMomentumMode) {
      u = s.mu * buf[i] + u;
      buf[i] = u;
    }
    p[i] = p[i] * s.decay - s.lr * u;
  }
}

using RmspropRange = void (*)(float*, const float*, float*, float*, float*, size_t, Step);
RmspropRange rmsprop_kernel(uint32_t flags) {
  const bool c = flags & kCentered, m = flags & kUseMomentum, in = flags & kEpsInsideSqrt;
  static constexpr RmspropRange table[8] = {
      rmsprop_range<false, false, false>, rmsprop_range<false, false, true>, rmsprop_range<false, true, false>,
      rmsprop_range<false, true, true>,   rmsprop_range<true, false, false>, rmsprop_range<true, false, true>,
      rmsprop_range<true, true, false>,   rmsprop_range<true, true, true>};
  return table[(c ? 4 : 0) + (m ? 2 : 0) + (in ? 1 : 0)];
}
}  // namespace

// in: param, grad, mean square, [mean gradient], [momentum buffer], hyper.
void rmsprop_update(const KernelCall& k) {
  float *p = k.in[0].f(), *g = k.in[1].f(), *v = k.in[2].f();
  size_t next = 3;
  float* a = (k.at.flags & kCentered) ? k.in[next++].f() : nullptr;
  float* buf = (k.at.flags & kUseMomentum) ? k.in[next++].f() : nullptr;
  const Step st = read_step(k.in[next].f(), k.at.flags);
  const RmspropRange run = rmsprop_kernel(k.at.flags);
  for_elements(k.ctx, size_t(k.in[0].numel()), g, k.at.zero_grad, [&](size_t b, size_t e) {
    run(p + b, g + b, v + b, a ? a + b : nullptr, buf ? buf + b : nullptr, e - b, st);
  });
}

namespace {
template <bool kInside>
void adagrad_range(float* __restrict p, const float* __restrict g, float* __restrict sum, size_t n, Step s) {
  for (size_t i = 0; i < n; ++i) {
    const float gi = g[i] + s.l2 * p[i];
    const float si = sum[i] + gi * gi;
    sum[i] = si;
    const float denom = kInside ? std::sqrt(si + s.eps) : std::sqrt(si) + s.eps;
    p[i] = p[i] * s.decay - s.lr * gi / denom;
  }
}
}  // namespace

// in: param, grad, sum of squares, hyper.
void adagrad_update(const KernelCall& k) {
  float *p = k.in[0].f(), *g = k.in[1].f(), *sum = k.in[2].f();
  const Step st = read_step(k.in[3].f(), k.at.flags);
  const bool inside = k.at.flags & kEpsInsideSqrt;
  for_elements(k.ctx, size_t(k.in[0].numel()), g, k.at.zero_grad, [&](size_t b, size_t e) {
    if (inside) adagrad_range<true>(p + b, g + b, sum + b, e - b, st);
    else adagrad_range<false>(p + b, g + b, sum + b, e - b, st);
  });
}

// in: state, value: state = m state + (1 - m) value, m = at.momentum.
void moving_average(const KernelCall& k) {
  float* state = k.in[0].f();
  const float* value = k.in[1].f();
  const float m = k.at.momentum;
  for (int64_t i = 0; i < k.in[0].numel(); ++i) state[i] = m * state[i] + (1.0f - m) * value[i];
}

namespace {
// Polyak averaging of a target network's weight (Trainer::update_target).
void polyak_range(float* __restrict t, const float* __restrict s, size_t n, float tau) {
  const float keep = 1.0f - tau;
  for (size_t i = 0; i < n; ++i) t[i] = tau * s[i] + keep * t[i];
}
}  // namespace

// in: target, source, tau {1}.
void polyak_update(const KernelCall& k) {
  // target = tau source + (1 - tau) target, in float as the host loop it
  // replaces; tau = 1 is a copy, so NaN or infinite old values go too.
  float* t = k.in[0].f();
  const float* s = k.in[1].f();
  const float tau = k.in[2].f()[0];
  const size_t n = size_t(k.in[0].numel());
  if (tau == 1.0f) {
    if (n && t != s) std::memmove(t, s, n * sizeof(float));
    return;
  }
  parallel_for(k.ctx.pool, n, 16384, [=](size_t b, size_t e) { polyak_range(t + b, s + b, e - b, tau); });
}

// in: destination, source: a copy of any dtype (by element size).
void assign(const KernelCall& k) {
  const size_t bytes = size_t(k.in[0].numel()) * dtype_size(k.in[0].dtype);
  if (bytes && k.in[0].data != k.in[1].data) std::memmove(k.in[0].data, k.in[1].data, bytes);
}

void squared_norm(const TensorRef& x, const float* running, const TensorRef& out) {
  // Four partial sums in double: exact enough for any gradient, and a chain
  // the CPU can overlap.
  const float* p = x.f();
  const size_t n = size_t(x.numel());
  double s[4] = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (size_t k = 0; k < 4; ++k) s[k] += double(p[i + k]) * double(p[i + k]);
  for (; i < n; ++i) s[0] += double(p[i]) * double(p[i]);
  // Finite float32 squares (at most 1.2e77) cannot overflow a double sum.
  double total = (s[0] + s[1]) + (s[2] + s[3]);
  if (running) total += squares_of_norm_pair(running);
  norm_pair_from_squares(total, out.f());
}

void clip_value(const OpAttrs& at, const TensorRef& g, const KernelContext& ctx) {
  float* p = g.f();
  const float c = at.clip;
  // Comparisons written so that NaN stays NaN (as torch.clamp and Keras' ops.clip).
  parallel_for(ctx.pool, size_t(g.numel()), 16384, [=](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) p[i] = clamp_value(p[i], -c, c);
  });
}

void clip_norm(const OpAttrs& at, const TensorRef& g, const TensorRef& squared_norm, const KernelContext& ctx) {
  const double c = at.clip, norm = norm_of_norm_pair(squared_norm.f());
  double coef;
  if ((at.flags & kNonFiniteNormToNaN) && !std::isfinite(norm)) {
    static std::atomic<bool> logged{false};
    if (!logged.exchange(true))
      log_message(LogLevel::Warning, std::string("gradient clipping: the gradient norm is ") +
                                         (std::isnan(norm) ? "NaN" : "inf") +
                                         "; the gradients are set to NaN (TensorFlow's rule for clip_by_global_norm), "
                                         "so that the weights and the loss show it (TerminateOnNaN stops there). "
                                         "Logged once per process");
    coef = std::numeric_limits<double>::quiet_NaN();
  } else if (at.flags & kClipNormEps) {
    coef = c / (norm + 1e-6);     // torch.nn.utils.clip_grad_norm_
    coef = coef > 1.0 ? 1.0 : coef;  // NaN stays NaN
  } else {
    coef = c / (norm <= c ? c : norm);  // Keras' clip_by_norm: c / max(norm, c), NaN stays NaN
  }
  if (coef == 1.0) return;
  float* p = g.f();
  const float f = float(coef);
  parallel_for(ctx.pool, size_t(g.numel()), 16384, [=](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) p[i] *= f;
  });
}

}  // namespace tensorgrad::kernels
