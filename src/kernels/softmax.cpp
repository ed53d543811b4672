// Softmax family and the losses built on it. Shapes: B rows (batch), C
// columns (classes). Row-wise maxima are subtracted before exp, so logits of
// 1e4 stay finite; probabilities are exp(z - m) / s rather than
// exp(z - lse), since lse = m + log(s) rounded to float32 would lose 2e-4 at
// |m| = 1e4.
#include <cmath>

#include "kernels/kernels.h"

namespace tensorgrad::kernels {

namespace {
// One row's maximum m and s = sum(exp(z - m)).
struct RowStats {
  float m, s;
  float log_s() const { return std::log(s); }
};
inline RowStats row_stats(const float* z, int64_t c) {
  float m = z[0];
  for (int64_t j = 1; j < c; ++j) m = std::max(m, z[j]);
  float s = 0.0f;
  for (int64_t j = 0; j < c; ++j) s += std::exp(z[j] - m);
  return {m, s};
}

inline float row_weight(const TensorRef* w, int64_t i) { return w ? w->f()[i] : 1.0f; }

// Runs f(offset, c) for each row of in[0] (its last axis, of c elements, at
// `offset`), in tasks of 64 rows.
template <class F>
void for_each_row(const KernelCall& k, F f) {
  const int64_t c = k.in[0].shape[-1], rows = k.in[0].numel() / c;
  parallel_for(k.ctx.pool, size_t(rows), 64, [&](size_t rb, size_t re) {
    for (size_t r = rb; r < re; ++r) f(int64_t(r) * c, c);
  });
}
// f(z, y, c) for each row z of x = in[0] and its row y of the output.
template <class F>
void forward_rows(const KernelCall& k, F f) {
  const float* x = k.in[0].f();
  float* y = k.out.f();
  for_each_row(k, [=](int64_t at, int64_t c) { f(x + at, y + at, c); });
}
// f(y, g, dx, c) for each row of y = in[0], g = in[1] and the output dx.
template <class F>
void backward_rows(const KernelCall& k, F f) {
  const float *y = k.in[0].f(), *g = k.in[1].f();
  float* dx = k.out.f();
  for_each_row(k, [=](int64_t at, int64_t c) { f(y + at, g + at, dx + at, c); });
}
}  // namespace

void softmax_forward(const KernelCall& k) {
  forward_rows(k, [](const float* z, float* out, int64_t c) {
    const RowStats st = row_stats(z, c);
    const float inv = 1.0f / st.s;
    for (int64_t j = 0; j < c; ++j) out[j] = std::exp(z[j] - st.m) * inv;
  });
}
// dx = y * (g - sum(g * y))
void softmax_backward(const KernelCall& k) {
  backward_rows(k, [](const float* py, const float* pg, float* pd, int64_t c) {
    float s = 0.0f;
    for (int64_t j = 0; j < c; ++j) s += pg[j] * py[j];
    for (int64_t j = 0; j < c; ++j) pd[j] = py[j] * (pg[j] - s);
  });
}

void log_softmax_forward(const KernelCall& k) {
  forward_rows(k, [](const float* z, float* out, int64_t c) {
    const RowStats st = row_stats(z, c);
    const float log_s = st.log_s();
    for (int64_t j = 0; j < c; ++j) out[j] = (z[j] - st.m) - log_s;
  });
}
// dx = g - exp(y) * sum(g)
void log_softmax_backward(const KernelCall& k) {
  backward_rows(k, [](const float* py, const float* pg, float* pd, int64_t c) {
    float s = 0.0f;
    for (int64_t j = 0; j < c; ++j) s += pg[j];
    for (int64_t j = 0; j < c; ++j) pd[j] = pg[j] - std::exp(py[j]) * s;
  });
}

IndexError class_id_error(int64_t id, int64_t position, int64_t classes) {
  return IndexError("cross_entropy: class id " + std::to_string(id) + " at position " + std::to_string(position) +
                    " is outside [0, " + std::to_string(classes) + "); the logits have " + std::to_string(classes) +
                    " classes");
}

// in: logits{B,C}, labels ({B,C} float or {B} int32) [, weights{B}]
// out: scalar sum_i w_i * CE_i / B (Keras' "sum over batch size" reduction).
void softmax_cross_entropy(std::span<const TensorRef> in, const TensorRef& out) {
  const TensorRef &z = in[0], &t = in[1];
  const TensorRef* w = in.size() > 2 ? &in[2] : nullptr;
  const int64_t b = z.shape[0], c = z.shape[1];
  const bool sparse = t.shape.rank() == 1;
  double total = 0;
  for (int64_t i = 0; i < b; ++i) {
    const float* zi = z.f() + i * c;
    const RowStats r = row_stats(zi, c);
    const double log_s = r.log_s();
    double li = 0;  // sum_j t_j * -log softmax_j, with -log softmax_j = log_s - (z_j - m)
    if (sparse) {
      const int32_t id = t.i()[i];
      if (id < 0 || id >= c) throw class_id_error(id, i, c);
      li = log_s - (zi[id] - r.m);
    } else {
      const float* ti = t.f() + i * c;
      for (int64_t j = 0; j < c; ++j)
        if (ti[j] != 0.0f) li += double(ti[j]) * (log_s - (zi[j] - r.m));
    }
    total += row_weight(w, i) * li;
  }
  out.f()[0] = b ? float(total / double(b)) : 0.0f;
}

// in: logits, labels [, weights], g (scalar)
// -> dlogits = (softmax * sum(t) - t) * w_i * g / B  (sum(t) = 1 for one-hot rows;
// rows that do not sum to 1, or masked all-zero rows, still get the exact gradient)
void softmax_cross_entropy_backward(std::span<const TensorRef> in, const TensorRef& dx) {
  const TensorRef &z = in[0], &t = in[1], &g = in.back();
  const TensorRef* w = in.size() > 3 ? &in[2] : nullptr;
  const int64_t b = z.shape[0], c = z.shape[1];
  const bool sparse = t.shape.rank() == 1;
  const float gs = g.f()[0] / float(b);
  for (int64_t i = 0; i < b; ++i) {
    const float* zi = z.f() + i * c;
    float* di = dx.f() + i * c;
    const RowStats r = row_stats(zi, c);
    const float s = gs * row_weight(w, i);
    float tsum = 1.0f;
    if (!sparse) {
      tsum = 0.0f;
      for (int64_t j = 0; j < c; ++j) tsum += t.f()[i * c + j];
    }
    if (sparse && (t.i()[i] < 0 || t.i()[i] >= c)) throw class_id_error(t.i()[i], i, c);
    const float p_scale = tsum / r.s;
    for (int64_t j = 0; j < c; ++j) {
      const float target = sparse ? (t.i()[i] == j ? 1.0f : 0.0f) : t.f()[i * c + j];
      di[j] = s * (std::exp(zi[j] - r.m) * p_scale - target);
    }
  }
}

// in: pred{B,N}, target{B,N} [, weights {B} or {B,N}] -> sum(w (p - t)^2) / (B N)
void mse_loss(std::span<const TensorRef> in, const TensorRef& out) {
  const TensorRef &p = in[0], &t = in[1];
  const TensorRef* w = in.size() > 2 ? &in[2] : nullptr;
  const int64_t n = p.numel(), cols = p.shape[1];
  const bool per_row = w && w->shape.rank() == 1;
  double total = 0;
  for (int64_t k = 0; k < n; ++k) {
    const double d = double(p.f()[k]) - t.f()[k];
    const double wk = !w ? 1.0 : per_row ? w->f()[k / cols] : w->f()[k];
    total += wk * d * d;
  }
  out.f()[0] = n ? float(total / double(n)) : 0.0f;
}

void mse_loss_backward(std::span<const TensorRef> in, const TensorRef& dx) {
  const TensorRef &p = in[0], &t = in[1], &g = in.back();
  const TensorRef* w = in.size() > 3 ? &in[2] : nullptr;
  const int64_t n = p.numel(), cols = p.shape[1];
  const bool per_row = w && w->shape.rank() == 1;
  const float s = 2.0f * g.f()[0] / float(n);
  for (int64_t k = 0; k < n; ++k) {
    const float wk = !w ? 1.0f : per_row ? w->f()[k / cols] : w->f()[k];
    dx.f()[k] = s * wk * (p.f()[k] - t.f()[k]);
  }
}

void accuracy(const TensorRef& pred, const TensorRef& labels, const TensorRef& out) {
  const int64_t b = pred.shape[0], c = pred.shape[1];
  const bool sparse = labels.shape.rank() == 1;
  auto argmax = [c](const float* r) {
    int64_t best = 0;
    for (int64_t j = 1; j < c; ++j)
      if (r[j] > r[best]) best = j;
    return best;
  };
  int64_t correct = 0;
  for (int64_t i = 0; i < b; ++i) {
    const int64_t truth = sparse ? labels.i()[i] : argmax(labels.f() + i * c);
    correct += argmax(pred.f() + i * c) == truth;
  }
  out.f()[0] = float(correct);
}

}  // namespace tensorgrad::kernels
