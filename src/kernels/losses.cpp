// Element-wise losses over predictions {B, N}, and the metrics beside Accuracy.
//
// B rows (batch), N columns, n = B * N elements indexed k = i * N + j
// (row-major). Weights are optional: {B}, one per row (w_k = w[k / N]), or
// {B, N}, one per element (w_k = w[k]); absent, w_k = 1.
//
// Forward:  loss = sum_k w_k * e_k / n, summed in double in index order, so
//           the result is the same for any thread count.
// Backward: inputs (pred, target [, weights], g) with g the scalar upstream
//           gradient; dpred_k = w_k * de_k/dpred_k * g / n.
#include <algorithm>
#include <cmath>

#include "kernels/kernels.h"

namespace tensorgrad::kernels {

namespace {
// The optional weights of a loss, as w_k.
struct Weights {
  const float* w = nullptr;
  bool per_row = false;
  int64_t cols = 1;
  float at(int64_t k) const { return !w ? 1.0f : per_row ? w[k / cols] : w[k]; }
};

// Weights are in[2] when the op got `count_with_weights` inputs (3 forward, 4 backward).
Weights weights_of(std::span<const TensorRef> in, size_t count_with_weights) {
  Weights r;
  r.cols = in[0].shape[1];
  if (in.size() == count_with_weights) {
    r.w = in[2].f();
    r.per_row = in[2].shape.rank() == 1;
  }
  return r;
}

// sigmoid(z) = 1 / (1 + e^-z) = e^z / (1 + e^z), formed from e^-|z| <= 1 so
// that nothing overflows for any z.
inline float stable_sigmoid(float z) {
  const float e = std::exp(-std::fabs(z));
  return z >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
}
}  // namespace

// ---- MAE: e_k = |p_k - t_k| ----

// in: pred{B,N}, target{B,N} [, weights] -> scalar
void mae_loss(std::span<const TensorRef> in, const TensorRef& out) {
  const float *p = in[0].f(), *t = in[1].f();
  const Weights w = weights_of(in, 3);
  const int64_t n = in[0].numel();
  double total = 0;
  for (int64_t k = 0; k < n; ++k) total += double(w.at(k)) * std::fabs(double(p[k]) - double(t[k]));
  out.f()[0] = n ? float(total / double(n)) : 0.0f;
}

// dp_k = w_k * sign(p_k - t_k) * g / n, with sign 0 where p_k == t_k
void mae_loss_backward(std::span<const TensorRef> in, const TensorRef& dx) {
  const float *p = in[0].f(), *t = in[1].f();
  const Weights w = weights_of(in, 4);
  const int64_t n = in[0].numel();
  const float s = in.back().f()[0] / float(n);
  float* d = dx.f();
  for (int64_t k = 0; k < n; ++k) {
    const float sign = p[k] > t[k] ? 1.0f : p[k] < t[k] ? -1.0f : 0.0f;
    d[k] = s * w.at(k) * sign;
  }
}

// ---- Huber, delta = attrs.delta > 0, r_k = p_k - t_k:
//      e_k = r^2 / 2 where |r| <= delta, else delta * (|r| - delta / 2) ----

void huber_loss(const OpAttrs& at, std::span<const TensorRef> in, const TensorRef& out) {
  const float *p = in[0].f(), *t = in[1].f();
  const Weights w = weights_of(in, 3);
  const int64_t n = in[0].numel();
  const double delta = at.delta;
  double total = 0;
  for (int64_t k = 0; k < n; ++k) {
    const double r = double(p[k]) - double(t[k]), a = std::fabs(r);
    const double e = a <= delta ? 0.5 * r * r : delta * (a - 0.5 * delta);
    total += double(w.at(k)) * e;
  }
  out.f()[0] = n ? float(total / double(n)) : 0.0f;
}

// dp_k = w_k * clip(r_k, -delta, delta) * g / n
void huber_loss_backward(const OpAttrs& at, std::span<const TensorRef> in, const TensorRef& dx) {
  const float *p = in[0].f(), *t = in[1].f();
  const Weights w = weights_of(in, 4);
  const int64_t n = in[0].numel();
  const float delta = at.delta, s = in.back().f()[0] / float(n);
  float* d = dx.f();
  for (int64_t k = 0; k < n; ++k) d[k] = s * w.at(k) * std::clamp(p[k] - t[k], -delta, delta);
}

// ---- Binary cross-entropy from logits z, targets y in [0, 1]:
//      e_k = -(y log sigmoid(z) + (1 - y) log(1 - sigmoid(z)))
//          = log(1 + e^z) - z y = max(z, 0) - z y + log1p(e^-|z|)
//      The last form never overflows; in double, max(z, 0) - z y of a
//      logit of 1e4 or 1e30 is exact to rounding (0 for z > 0, y = 1). ----

void binary_cross_entropy(std::span<const TensorRef> in, const TensorRef& out) {
  const float *z = in[0].f(), *y = in[1].f();
  const Weights w = weights_of(in, 3);
  const int64_t n = in[0].numel();
  double total = 0;
  for (int64_t k = 0; k < n; ++k) {
    const double zk = z[k], yk = y[k];
    const double e = std::max(zk, 0.0) - zk * yk + std::log1p(std::exp(-std::fabs(zk)));
    total += double(w.at(k)) * e;
  }
  out.f()[0] = n ? float(total / double(n)) : 0.0f;
}

// dz_k = w_k * (sigmoid(z_k) - y_k) * g / n
void binary_cross_entropy_backward(std::span<const TensorRef> in, const TensorRef& dx) {
  const float *z = in[0].f(), *y = in[1].f();
  const Weights w = weights_of(in, 4);
  const int64_t n = in[0].numel();
  const float s = in.back().f()[0] / float(n);
  float* d = dx.f();
  for (int64_t k = 0; k < n; ++k) d[k] = s * w.at(k) * (stable_sigmoid(z[k]) - y[k]);
}

// ---- Metrics: counts, as float32 (exact up to 2^24) ----

// in: pred{B,N}, target{B,N}; threshold = attrs.threshold
// -> count of k with (p_k > threshold) == (t_k > 0.5)
void binary_accuracy(const OpAttrs& at, const TensorRef& pred, const TensorRef& target, const TensorRef& out) {
  const float *p = pred.f(), *t = target.f();
  const float threshold = at.threshold;
  const int64_t n = pred.numel();
  int64_t correct = 0;
  for (int64_t k = 0; k < n; ++k) correct += (p[k] > threshold) == (t[k] > 0.5f);
  out.f()[0] = float(correct);
}

// in: scores{B,C}, labels int32{B} or one-hot float32{B,C} (label = first
// argmax of the row); k = attrs.k.
// -> count of rows whose label class has fewer than k classes with a strictly
// greater score (tf.math.in_top_k: classes tied at the k-th place are all in
// the top k). A label outside [0, C) or a non-finite label score is a miss, as in TF.
void top_k_accuracy(const OpAttrs& at, const TensorRef& scores, const TensorRef& labels, const TensorRef& out) {
  const int64_t b = scores.shape[0], c = scores.shape[1], k = at.k;
  const bool sparse = labels.shape.rank() == 1;
  int64_t hits = 0;
  for (int64_t i = 0; i < b; ++i) {
    const float* s = scores.f() + i * c;
    int64_t label = 0;
    if (sparse) {
      label = labels.i()[i];
    } else {
      const float* y = labels.f() + i * c;
      for (int64_t j = 1; j < c; ++j)
        if (y[j] > y[label]) label = j;
    }
    if (label < 0 || label >= c || !std::isfinite(s[label])) continue;
    int64_t greater = 0;
    for (int64_t j = 0; j < c; ++j) greater += s[j] > s[label];
    hits += greater < k;
  }
  out.f()[0] = float(hits);
}

}  // namespace tensorgrad::kernels
