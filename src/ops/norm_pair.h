#pragma once
// SquaredNorm's result: a sum of squares kept as a float32 pair (s, e), the
// sum being s * 4^e with s in [0.5, 2) (0, inf or NaN with e = 0). float32
// alone overflows at 3.4e38, which gradients of 1e20 already square past;
// the pair holds every sum of finite float32 squares (at most about 2^318,
// summed in double), and ClipNorm reads it back in double, as LAPACK's
// xLASSQ keeps a scale beside the sum so that the norm never overflows.
#include <cmath>

namespace tensorgrad {

/// Writes sum_squares (>= 0, or inf or NaN) as the pair out{s, e}.
inline void norm_pair_from_squares(double sum_squares, float* out) {
  if (!(sum_squares > 0.0) || std::isinf(sum_squares)) {
    out[0] = float(sum_squares);
    out[1] = 0.0f;
    return;
  }
  int e2 = 0;
  std::frexp(sum_squares, &e2);  // sum_squares = m 2^e2, m in [0.5, 1)
  const int e = e2 >= 0 ? e2 / 2 : -((1 - e2) / 2);  // floor(e2 / 2)
  out[0] = float(std::ldexp(sum_squares, -2 * e));
  out[1] = float(e);
}
/// The sum of squares a pair holds, in double.
inline double squares_of_norm_pair(const float* pair) { return std::ldexp(double(pair[0]), 2 * int(pair[1])); }
/// The 2-norm a pair holds, in double: sqrt(s) 2^e.
inline double norm_of_norm_pair(const float* pair) { return std::ldexp(std::sqrt(double(pair[0])), int(pair[1])); }

}  // namespace tensorgrad
