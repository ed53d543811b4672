// Fused LSTM and GRU kernels over a whole sequence (ops LstmSequence,
// GruSequence and their backward ops; the formulas are at the ops in
// ops/op.h). B batch rows, T steps, H units. The input projection x W + b of
// every step is one GEMM outside (the layer's); here each step is one small
// GEMM h_{t-1} U for a block of rows and one pass over the gates. Rows never
// interact, so each thread takes a block of rows through every step with no
// barrier between steps.
//
// Layouts, row-major, per (row b, step t):
//   LSTM y {B,T,6H}: [h | c | i | f | g | o], gates after their activations;
//        dz {B,T,4H}: the gates' pre-activation gradients [di | df | dg | do].
//   GRU  y {B,T,5H}: [h | z | r | n | hn], hn = h_{t-1} U_n + rb_n;
//        d  {B,T,4H}: [dz | dr | dn] pre-activation, then d hn.
// Initial states h0, c0 {B,H} (null: zeros, the layers' case): the backward
// output then has one more step, T, holding [dh0 | dc0 | 0 | 0] (LSTM) or
// [dh0 | 0 | 0 | 0] (GRU).
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/vector_math.h"

namespace tensorgrad::kernels {

namespace {
// Runs f(r0, r1) over blocks of the B rows, one block per thread. Scratch
// memory a block needs is a slice (rows r0..r1) of a buffer the calling
// thread holds (call_scratch), not the worker's own: which worker runs which
// block changes from run to run, and a worker's first block would allocate.
template <class F>
void over_row_blocks(ComputePool* pool, int64_t batch, F&& f) {
  const int64_t threads = pool_threads(pool);
  const int64_t per = std::max<int64_t>(1, (batch + threads - 1) / threads);
  const size_t blocks = size_t((batch + per - 1) / per);
  parallel_for(pool, blocks, 1, [&](size_t b0, size_t b1) {
    for (size_t bi = b0; bi < b1; ++bi) f(int64_t(bi) * per, std::min(batch, int64_t(bi + 1) * per));
  });
}

// A buffer of at least n floats: grows once, then is reused.
float* scratch(std::vector<float>& buffer, int64_t n) {
  if (buffer.size() < size_t(n)) buffer.resize(size_t(n));
  return buffer.data();
}

// The calling thread's scratch for one kernel call (per-row slices for the blocks).
float* call_scratch(int64_t n) {
  thread_local std::vector<float> buffer;
  return scratch(buffer, n);
}
}  // namespace

void lstm_sequence(const TensorRef& xw, const TensorRef& u, const float* h0, const float* c0, const TensorRef& y,
                   const KernelContext& ctx) {
  const int64_t B = y.shape[0], T = y.shape[1], H = u.shape[0], G = 4 * H, K = 6 * H;
  const float* px = xw.f();
  const float* pu = u.f();
  float* py = y.f();
  over_row_blocks(ctx.pool, B, [&](int64_t r0, int64_t r1) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t b = r0; b < r1; ++b)
        std::memcpy(py + (b * T + t) * K + 2 * H, px + (b * T + t) * G, size_t(G) * sizeof(float));
      if (t > 0)  // z_t += h_{t-1} U for the block's rows
        gemm(r1 - r0, G, H, py + (r0 * T + t - 1) * K, T * K, false, pu, G, py + (r0 * T + t) * K + 2 * H, T * K,
             1.0f);
      else if (h0)
        gemm(r1 - r0, G, H, h0 + r0 * H, H, false, pu, G, py + r0 * T * K + 2 * H, T * K, 1.0f);
      for (int64_t b = r0; b < r1; ++b) {
        float* row = py + (b * T + t) * K;
        float *h = row, *c = row + H, *i = row + 2 * H, *f = row + 3 * H, *g = row + 4 * H, *o = row + 5 * H;
        sigmoid_n(i, i, 2 * H);  // i and f
        tanh_n(g, g, H);
        sigmoid_n(o, o, H);
        if (const float* c_prev = t > 0 ? row - K + H : c0 ? c0 + b * H : nullptr) {
          for (int64_t j = 0; j < H; ++j) c[j] = f[j] * c_prev[j] + i[j] * g[j];
        } else {
          for (int64_t j = 0; j < H; ++j) c[j] = i[j] * g[j];
        }
        tanh_n(c, h, H);
        for (int64_t j = 0; j < H; ++j) h[j] *= o[j];
      }
    }
  });
}

// Back through time, per row: dh = g_h + dz_{t+1} U^T, dc = dc_{t+1} f_{t+1} +
// g_c + dh o (1 - tanh(c)^2); then the gates' gradients (each plus its own g)
// through their activations' derivatives.
void lstm_sequence_backward(const TensorRef& y, const TensorRef& u, const TensorRef& g, const float* c0,
                            const TensorRef& dz, const KernelContext& ctx) {
  const int64_t B = y.shape[0], T = y.shape[1], H = u.shape[0], G = 4 * H, K = 6 * H;
  const int64_t TD = dz.shape[1];  // T, or T + 1 with the initial states' gradients
  const float* py = y.f();
  const float* pg = g.f();
  float* pd = dz.f();
  const float* ut = transposed(u.f(), H, G);  // read by every block
  float* work = call_scratch(B * 3 * H);  // per row: dz_{t+1} U^T, dc carried, tanh(c)
  over_row_blocks(ctx.pool, B, [&](int64_t r0, int64_t r1) {
    const int64_t rows = r1 - r0;
    float* dh_rec = work + r0 * 3 * H;
    float* dc = dh_rec + rows * H;
    float* tc = dc + rows * H;
    std::fill(dc, dc + rows * H, 0.0f);
    for (int64_t t = T - 1; t >= 0; --t) {
      const bool later = t < T - 1;  // a step after this one sent a gradient back
      for (int64_t b = r0; b < r1; ++b) {
        const float* row = py + (b * T + t) * K;
        const float* gr = pg + (b * T + t) * K;
        float* d = pd + (b * TD + t) * G;
        const float *c = row + H, *i = row + 2 * H, *f = row + 3 * H, *gg = row + 4 * H, *o = row + 5 * H;
        const float* c_prev = t > 0 ? row - K + H : c0 ? c0 + b * H : nullptr;
        float* dcb = dc + (b - r0) * H;
        const float* dhb = dh_rec + (b - r0) * H;
        tanh_n(c, tc, H);
        for (int64_t j = 0; j < H; ++j) {
          const float dh = gr[j] + (later ? dhb[j] : 0.0f);
          const float dcj = dcb[j] + gr[H + j] + dh * o[j] * (1.0f - tc[j] * tc[j]);
          const float di = dcj * gg[j] + gr[2 * H + j];
          const float df = (c_prev ? dcj * c_prev[j] : 0.0f) + gr[3 * H + j];
          const float dg = dcj * i[j] + gr[4 * H + j];
          const float dout = dh * tc[j] + gr[5 * H + j];
          d[j] = di * i[j] * (1.0f - i[j]);
          d[H + j] = df * f[j] * (1.0f - f[j]);
          d[2 * H + j] = dg * (1.0f - gg[j] * gg[j]);
          d[3 * H + j] = dout * o[j] * (1.0f - o[j]);
          dcb[j] = dcj * f[j];
        }
      }
      if (t > 0 || c0) gemm(rows, H, G, pd + (r0 * TD + t) * G, TD * G, false, ut, H, dh_rec, H, 0.0f);
    }
    if (!c0) return;
    for (int64_t b = r0; b < r1; ++b) {  // step T: [dh0 | dc0 | 0 | 0]
      float* d = pd + (b * TD + T) * G;
      std::memcpy(d, dh_rec + (b - r0) * H, size_t(H) * sizeof(float));
      std::memcpy(d + H, dc + (b - r0) * H, size_t(H) * sizeof(float));
      std::fill(d + 2 * H, d + G, 0.0f);
    }
  });
}

void gru_sequence(const TensorRef& xw, const TensorRef& u, const TensorRef& rb, const float* h0, const TensorRef& y,
                  const KernelContext& ctx) {
  const int64_t B = y.shape[0], T = y.shape[1], H = u.shape[0], G = 3 * H, K = 5 * H;
  const float* px = xw.f();
  const float* pu = u.f();
  const float* pb = rb.f();
  float* py = y.f();
  float* work = call_scratch(B * G);
  over_row_blocks(ctx.pool, B, [&](int64_t r0, int64_t r1) {
    float* hu = work + r0 * G;  // h_{t-1} U for the block's rows
    for (int64_t t = 0; t < T; ++t) {
      if (t > 0) gemm(r1 - r0, G, H, py + (r0 * T + t - 1) * K, T * K, false, pu, G, hu, G, 0.0f);
      else if (h0) gemm(r1 - r0, G, H, h0 + r0 * H, H, false, pu, G, hu, G, 0.0f);
      for (int64_t b = r0; b < r1; ++b) {
        float* row = py + (b * T + t) * K;
        const float* x = px + (b * T + t) * G;
        const float* hub = t > 0 || h0 ? hu + (b - r0) * G : nullptr;
        float *h = row, *z = row + H, *r = row + 2 * H, *n = row + 3 * H, *hn = row + 4 * H;
        for (int64_t j = 0; j < 2 * H; ++j) z[j] = x[j] + (hub ? hub[j] : 0.0f) + pb[j];  // z and r
        sigmoid_n(z, z, 2 * H);
        for (int64_t j = 0; j < H; ++j) {
          hn[j] = (hub ? hub[2 * H + j] : 0.0f) + pb[2 * H + j];
          n[j] = x[2 * H + j] + r[j] * hn[j];
        }
        tanh_n(n, n, H);
        const float* h_prev = t > 0 ? row - K : h0 ? h0 + b * H : nullptr;
        for (int64_t j = 0; j < H; ++j) h[j] = n[j] + z[j] * ((h_prev ? h_prev[j] : 0.0f) - n[j]);
      }
    }
  });
}

// Back through time, per row: dh = g_h + dh_{t+1} z_{t+1} + d(hU)_{t+1} U^T;
// h = n + z (h_prev - n) gives dz = dh (h_prev - n), dn = dh (1 - z); n =
// tanh(xn + r hn) gives dr = dn' hn, d hn = dn' r (dn' = dn (1 - n^2)).
void gru_sequence_backward(const TensorRef& y, const TensorRef& u, const TensorRef& g, const float* h0,
                           const TensorRef& out, const KernelContext& ctx) {
  const int64_t B = y.shape[0], T = y.shape[1], H = u.shape[0], G = 3 * H, K = 5 * H, D = 4 * H;
  const int64_t TD = out.shape[1];  // T, or T + 1 with the initial state's gradient
  const float* py = y.f();
  const float* pg = g.f();
  float* pd = out.f();
  const float* ut = transposed(u.f(), H, G);  // read by every block
  float* work = call_scratch(B * H);
  over_row_blocks(ctx.pool, B, [&](int64_t r0, int64_t r1) {
    const int64_t rows = r1 - r0;
    float* dh_next = work + r0 * H;  // what step t sends back to h_{t-1}
    for (int64_t t = T - 1; t >= 0; --t) {
      const bool later = t < T - 1;
      for (int64_t b = r0; b < r1; ++b) {
        const float* row = py + (b * T + t) * K;
        const float* gr = pg + (b * T + t) * K;
        float* d = pd + (b * TD + t) * D;
        const float *z = row + H, *r = row + 2 * H, *n = row + 3 * H, *hn = row + 4 * H;
        const float* h_prev = t > 0 ? row - K : h0 ? h0 + b * H : nullptr;
        float* dhb = dh_next + (b - r0) * H;
        for (int64_t j = 0; j < H; ++j) {
          const float dh = gr[j] + (later ? dhb[j] : 0.0f);
          const float dzv = dh * ((h_prev ? h_prev[j] : 0.0f) - n[j]) + gr[H + j];
          const float dn = (dh * (1.0f - z[j]) + gr[3 * H + j]) * (1.0f - n[j] * n[j]);
          const float drv = dn * hn[j] + gr[2 * H + j];
          d[j] = dzv * z[j] * (1.0f - z[j]);
          d[H + j] = drv * r[j] * (1.0f - r[j]);
          d[2 * H + j] = dn;
          d[3 * H + j] = dn * r[j] + gr[4 * H + j];
          dhb[j] = dh * z[j];
        }
      }
      if (t > 0 || h0) {  // dh_next += [dz | dr] U_zr^T + d hn U_n^T
        const float* d0 = pd + (r0 * TD + t) * D;
        gemm(rows, H, 2 * H, d0, TD * D, false, ut, H, dh_next, H, 1.0f);
        gemm(rows, H, H, d0 + 3 * H, TD * D, false, ut + 2 * H * H, H, dh_next, H, 1.0f);
      }
    }
    if (!h0) return;
    for (int64_t b = r0; b < r1; ++b) {  // step T: [dh0 | 0 | 0 | 0]
      float* d = pd + (b * TD + T) * D;
      std::memcpy(d, dh_next + (b - r0) * H, size_t(H) * sizeof(float));
      std::fill(d + H, d + D, 0.0f);
    }
  });
}

}  // namespace tensorgrad::kernels
