// Rotary position embedding (Rope), forward and inverse (kRopeInverse, its
// gradient). The cosines and sines of every (step, pair) are computed once
// per call in double (the angle p / scaling_factor * theta^(-2i / dims) and
// its cosine and sine) and rounded to float32; the rotation is then two
// multiply-adds per feature over contiguous runs (the halves pairing reads
// two runs of dims / 2, the adjacent one interleaved pairs). Every output
// element is written by one thread: the same bits for any thread count.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "tensorgrad/core/error.h"

namespace tensorgrad::kernels {

// in: x {B, T, H, D}, positions int32 {T}.
void rope_forward(const KernelCall& c) {
  const TensorRef& xr = c.in[0];
  const int64_t batch = xr.shape[0], steps = xr.shape[1], heads = xr.shape[2], d = xr.shape[3];
  const RopeOptions& o = c.at.rope;
  const int64_t dims = o.dims ? o.dims : d, half = dims / 2;
  const int32_t* pos = c.in[1].i();
  // Checked before anything is written, as gather's ids.
  for (int64_t t = 0; t < steps; ++t)
    if (pos[t] < 0)
      throw ValueError("rotary_embedding: position " + std::to_string(pos[t]) + " at step " + std::to_string(t) +
                       " is negative; positions count steps from 0");
  const double sign = (c.at.flags & kRopeInverse) ? -1.0 : 1.0;
  // cs[t][i] = cos, cs[t][half + i] = sin of step t's angle for pair i.
  std::vector<float> cs(static_cast<size_t>(steps * 2 * half));
  std::vector<double> freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    freq[size_t(i)] = std::pow(double(o.theta), -2.0 * double(i) / double(dims)) / double(o.scaling_factor);
  for (int64_t t = 0; t < steps; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const double angle = double(pos[t]) * freq[size_t(i)];
      cs[size_t(t * 2 * half + i)] = float(std::cos(angle));
      cs[size_t(t * 2 * half + half + i)] = float(sign * std::sin(angle));
    }
  const float* x = xr.f();
  float* y = c.out.f();
  const bool adjacent = o.pairing == RopePairing::Adjacent;
  const int64_t rows = batch * steps * heads;
  parallel_for(c.ctx.pool, size_t(rows), size_t(std::max<int64_t>(1, 8192 / d)), [&](size_t rb, size_t re) {
    for (size_t row = rb; row < re; ++row) {
      const int64_t t = int64_t(row) / heads % steps;
      const float *co = cs.data() + t * 2 * half, *si = co + half;
      const float* a = x + int64_t(row) * d;
      float* b = y + int64_t(row) * d;
      if (adjacent) {
        for (int64_t i = 0; i < half; ++i) {
          const float x0 = a[2 * i], x1 = a[2 * i + 1];
          b[2 * i] = x0 * co[i] - x1 * si[i];
          b[2 * i + 1] = x0 * si[i] + x1 * co[i];
        }
      } else {
        const float *lo = a, *hi = a + half;
        for (int64_t i = 0; i < half; ++i) b[i] = lo[i] * co[i] - hi[i] * si[i];
        for (int64_t i = 0; i < half; ++i) b[half + i] = lo[i] * si[i] + hi[i] * co[i];
      }
      if (dims < d) std::memcpy(b + dims, a + dims, size_t(d - dims) * sizeof(float));
    }
  });
}

}  // namespace tensorgrad::kernels
