#version 450
#include "common.glsl"
// The gradients of loss_elem.comp's losses with respect to p, given the
// scalar upstream gradient g[0]: dx_k = (s w_k) de_k/dp_k with s = g / n
// (2 g / n for mse), in the CPU's order of operations (kernels/losses.cpp).
// Constant 1: 0 mse, 1 mae, 2 huber (delta), 3 binary cross-entropy.
layout(constant_id = 1) const uint OP = 0;
layout(push_constant) uniform Push {
  F32 pred;
  F32 t;
  F32 w;
  F32 g;
  F32 dx;
  uint n;
  uint cols;
  uint wmode;
  float delta;
} p;

void main() {
  const float s = (OP == 0 ? 2.0 * p.g.v[0] : p.g.v[0]) / float(p.n);
  FOR_EACH(k, p.n) {
    const float wk = p.wmode == 0 ? 1.0 : p.wmode == 1 ? p.w.v[k / p.cols] : p.w.v[k];
    const float pk = p.pred.v[k], tk = p.t.v[k];
    float de;
    if (OP == 0) {
      de = pk - tk;
    } else if (OP == 1) {
      de = pk > tk ? 1.0 : pk < tk ? -1.0 : 0.0;  // 0 where either is NaN, as the CPU
    } else if (OP == 2) {
      const float r = pk - tk;  // std::clamp's tests: NaN passes through
      de = r < -p.delta ? -p.delta : p.delta < r ? p.delta : r;
    } else {
      // sigmoid from e^-|z| <= 1, which never overflows
      const float e = exp(-abs(pk));
      de = isnan(pk) ? pk : (pk >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e));
      de -= tk;
    }
    p.dx.v[k] = s * wk * de;
  }
}
