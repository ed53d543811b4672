// Optimizer updates as kernels over persistent tensors (DESIGN.md: state lives
// on the device). Formulas as PyTorch's AdamW and SGD with decoupled weight
// decay (Loshchilov & Hutter 2019), which is also what ggml's AdamW computes.
#include <cmath>

#include "kernels/kernels.h"

namespace tensorgrad::kernels {

void optimizer(OpKind op, const OpAttrs& at, std::span<const TensorRef> in, const KernelContext& ctx) {
  switch (op) {
    case OpKind::AccumulateGrad: {
      float* acc = in[0].f();
      const float* g = in[1].f();
      parallel_for(ctx.pool, size_t(in[0].numel()), 16384, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) acc[i] += g[i];
      });
      return;
    }
    case OpKind::OptimizerTick: {
      float* h = in[0].f();
      h[kStep] += 1.0f;
      h[kBeta1Pow] = float(std::pow(double(h[kBeta1]), double(h[kStep])));
      h[kBeta2Pow] = float(std::pow(double(h[kBeta2]), double(h[kStep])));
      return;
    }
    case OpKind::AdamWUpdate: {
      float *p = in[0].f(), *g = in[1].f(), *m = in[2].f(), *v = in[3].f();
      const float* h = in[4].f();
      const float lr = h[kLr], b1 = h[kBeta1], b2 = h[kBeta2], eps = h[kEps];
      const float decay = 1.0f - lr * h[kWeightDecay];
      const float c1 = 1.0f / (1.0f - h[kBeta1Pow]), c2 = 1.0f / (1.0f - h[kBeta2Pow]);
      const bool zero = at.zero_grad;
      parallel_for(ctx.pool, size_t(in[0].numel()), 16384, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) {
          const float gi = g[i];
          m[i] = b1 * m[i] + (1.0f - b1) * gi;
          v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
          p[i] = p[i] * decay - lr * (m[i] * c1) / (std::sqrt(v[i] * c2) + eps);
          if (zero) g[i] = 0.0f;
        }
      });
      return;
    }
    case OpKind::SgdUpdate: {
      float *p = in[0].f(), *g = in[1].f();
      const float* h = in[2].f();
      const float lr = h[kLr], decay = 1.0f - lr * h[kWeightDecay];
      const bool zero = at.zero_grad;
      parallel_for(ctx.pool, size_t(in[0].numel()), 16384, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) {
          p[i] = p[i] * decay - lr * g[i];
          if (zero) g[i] = 0.0f;
        }
      });
      return;
    }
    default: return;
  }
}

}  // namespace tensorgrad::kernels
