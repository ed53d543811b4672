#version 450
#include "common.glsl"
// The optimizer updates of kernels/optimizer.cpp, in place on param and the
// states, in float32 as the CPU (the same formulas and order of operations;
// see the CPU file for them). OP: kernels/optimizer.cpp's Update codes;
// FLAGS: OptimizerFlag. The states: AdamW a = m, b = v; SGD a = momentum
// buffer; RMSprop a = mean square, b = mean gradient, c = momentum buffer;
// Adagrad a = sum of squares (absent ones unused).
layout(constant_id = 1) const uint OP = 0;
layout(constant_id = 2) const uint FLAGS = 0;
layout(constant_id = 3) const bool ZERO_GRAD = false;
layout(push_constant) uniform Push { F32 param; F32 grad; F32 a; F32 b; F32 c; F32 hyper; Status status; uint n; } p;

const uint kL2WeightDecay = 1u, kUseMomentum = 2u, kNesterov = 4u, kCentered = 8u, kEpsInsideSqrt = 16u;
const bool L2 = (FLAGS & kL2WeightDecay) != 0u, MOMENTUM = (FLAGS & kUseMomentum) != 0u,
           NESTEROV = (FLAGS & kNesterov) != 0u, CENTERED = (FLAGS & kCentered) != 0u,
           INSIDE = (FLAGS & kEpsInsideSqrt) != 0u;

void main() {
  if (skip_update(p.status)) return;
  // HyperSlot (ops/op.h), read as the CPU's read_step.
  const float lr = p.hyper.v[0], b1 = p.hyper.v[1], b2 = p.hyper.v[2], eps = p.hyper.v[3], wd = p.hyper.v[4];
  const float c1 = p.hyper.v[5], c2 = p.hyper.v[6], mu = p.hyper.v[7], damp = 1.0 - p.hyper.v[9], rho = p.hyper.v[10];
  const float decay = L2 ? 1.0 : 1.0 - lr * wd;
  FOR_EACH(i, p.n) {
    const float param = p.param.v[i];
    // The CPU adds 0 * param without L2 too, so an infinite or NaN param
    // makes the gradient NaN; here the compiler would fold that product away.
    const float nan = uintBitsToFloat(0x7fc00000u);
    const float g = L2 ? p.grad.v[i] + wd * param : (isinf(param) || isnan(param) ? nan : p.grad.v[i]);
    float u;
    if (OP == 0) {  // AdamW
      const float m = b1 * p.a.v[i] + (1.0 - b1) * g;
      const float v = b2 * p.b.v[i] + (1.0 - b2) * g * g;
      p.a.v[i] = m;
      p.b.v[i] = v;
      u = (lr * (m * c1)) / (sqrt(v * c2) + eps);
    } else if (OP == 1) {  // SGD
      if (MOMENTUM) {
        const float buf = mu * p.a.v[i] + damp * g;
        p.a.v[i] = buf;
        u = lr * (NESTEROV ? g + mu * buf : buf);
      } else {
        u = lr * g;
      }
    } else if (OP == 2) {  // RMSprop
      const float v = rho * p.a.v[i] + (1.0 - rho) * g * g;
      p.a.v[i] = v;
      float var = v;
      if (CENTERED) {
        const float mean = rho * p.b.v[i] + (1.0 - rho) * g;
        p.b.v[i] = mean;
        var = v - mean * mean;
      }
      float step = INSIDE ? g / sqrt(var + eps) : g / (sqrt(var) + eps);
      if (MOMENTUM) {
        step = mu * p.c.v[i] + step;
        p.c.v[i] = step;
      }
      u = lr * step;
    } else {  // Adagrad
      const float s = p.a.v[i] + g * g;
      p.a.v[i] = s;
      u = lr * g / (INSIDE ? sqrt(s + eps) : sqrt(s) + eps);
    }
    p.param.v[i] = param * decay - u;
    if (ZERO_GRAD) p.grad.v[i] = 0.0;
  }
}
