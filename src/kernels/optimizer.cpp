// Optimizer updates as kernels over persistent tensors (DESIGN.md: state lives
// on the device). Formulas as PyTorch's AdamW and SGD with decoupled weight
// decay (Loshchilov & Hutter 2019), which is also what ggml's AdamW computes.
#include <algorithm>
#include <cmath>

#include "kernels/kernels.h"

namespace tensorgrad::kernels {

namespace {
struct AdamStep {
  float lr, b1, b2, eps, decay, c1, c2;
};

// One AdamW update of n elements; plain loop over restrict pointers so it vectorises.
void adamw_range(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v, size_t n,
                 AdamStep s) {
  for (size_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float mi = s.b1 * m[i] + (1.0f - s.b1) * gi;
    const float vi = s.b2 * v[i] + (1.0f - s.b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * s.decay - s.lr * (mi * s.c1) / (std::sqrt(vi * s.c2) + s.eps);
  }
}

void sgd_range(float* __restrict p, const float* __restrict g, size_t n, float lr, float decay) {
  for (size_t i = 0; i < n; ++i) p[i] = p[i] * decay - lr * g[i];
}

void add_range(float* __restrict acc, const float* __restrict g, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] += g[i];
}
}  // namespace

void optimizer(OpKind op, const OpAttrs& at, std::span<const TensorRef> in, const KernelContext& ctx) {
  switch (op) {
    case OpKind::AccumulateGrad: {
      float* acc = in[0].f();
      const float* g = in[1].f();
      parallel_for(ctx.pool, size_t(in[0].numel()), 16384, [=](size_t b, size_t e) { add_range(acc + b, g + b, e - b); });
      return;
    }
    case OpKind::OptimizerTick: {
      float* h = in[0].f();
      const int64_t t = ++*static_cast<int64_t*>(in[1].data);
      h[kBiasCorrection1] = float(1.0 / (1.0 - std::pow(double(h[kBeta1]), double(t))));
      h[kBiasCorrection2] = float(1.0 / (1.0 - std::pow(double(h[kBeta2]), double(t))));
      return;
    }
    case OpKind::AdamWUpdate: {
      float *p = in[0].f(), *g = in[1].f(), *m = in[2].f(), *v = in[3].f();
      const float* h = in[4].f();
      const AdamStep st{h[kLr], h[kBeta1], h[kBeta2], h[kEps], 1.0f - h[kLr] * h[kWeightDecay],
                        h[kBiasCorrection1], h[kBiasCorrection2]};
      const bool zero = at.zero_grad;
      parallel_for(ctx.pool, size_t(in[0].numel()), 16384, [=](size_t b, size_t e) {
        adamw_range(p + b, g + b, m + b, v + b, e - b, st);
        if (zero) std::fill(g + b, g + e, 0.0f);
      });
      return;
    }
    case OpKind::SgdUpdate: {
      float *p = in[0].f(), *g = in[1].f();
      const float* h = in[2].f();
      const float lr = h[kLr], decay = 1.0f - lr * h[kWeightDecay];
      const bool zero = at.zero_grad;
      parallel_for(ctx.pool, size_t(in[0].numel()), 16384, [=](size_t b, size_t e) {
        sgd_range(p + b, g + b, e - b, lr, decay);
        if (zero) std::fill(g + b, g + e, 0.0f);
      });
      return;
    }
    case OpKind::MovingAverage: {
      float* state = in[0].f();
      const float* value = in[1].f();
      const float m = at.scale;
      for (int64_t i = 0; i < in[0].numel(); ++i) state[i] = m * state[i] + (1.0f - m) * value[i];
      return;
    }
    case OpKind::Leaf: case OpKind::Fill: case OpKind::MatMul: case OpKind::Add: case OpKind::Sub: case OpKind::Mul:
    case OpKind::Scale: case OpKind::Relu: case OpKind::Sigmoid: case OpKind::Tanh: case OpKind::Softmax:
    case OpKind::LogSoftmax: case OpKind::SoftmaxCrossEntropy: case OpKind::MseLoss: case OpKind::Dropout:
    case OpKind::Sum: case OpKind::Mean: case OpKind::SumTo: case OpKind::BroadcastTo: case OpKind::Reshape:
    case OpKind::Rsqrt: case OpKind::Gelu: case OpKind::Silu: case OpKind::Elu: case OpKind::LeakyRelu:
    case OpKind::Softplus: case OpKind::MeanLastAxis: case OpKind::Slice: case OpKind::Concat: case OpKind::Gather:
    case OpKind::ToIndex: case OpKind::Im2Col: case OpKind::Col2Im: case OpKind::MaxPool2D: case OpKind::AvgPool2D:
    case OpKind::ReluBackward: case OpKind::SigmoidBackward: case OpKind::TanhBackward: case OpKind::SoftmaxBackward:
    case OpKind::LogSoftmaxBackward: case OpKind::SoftmaxCrossEntropyBackward: case OpKind::MseLossBackward:
    case OpKind::RsqrtBackward: case OpKind::GeluBackward: case OpKind::SiluBackward: case OpKind::EluBackward:
    case OpKind::LeakyReluBackward: case OpKind::SoftplusBackward: case OpKind::SliceBackward:
    case OpKind::GatherBackward: case OpKind::MaxPool2DBackward: case OpKind::AvgPool2DBackward: case OpKind::Accuracy:
    case OpKind::Conv2D: case OpKind::Conv2DBackwardInput: case OpKind::Conv2DBackwardFilter: case OpKind::BatchNormStats:
    case OpKind::BatchNorm: case OpKind::BatchNormParamGrad: case OpKind::BatchNormBackward:
    case OpKind::Maximum: case OpKind::Minimum: case OpKind::GreaterEqual: case OpKind::MaeLoss: case OpKind::HuberLoss:
    case OpKind::BinaryCrossEntropy: case OpKind::MaeLossBackward: case OpKind::HuberLossBackward:
    case OpKind::BinaryCrossEntropyBackward: case OpKind::BinaryAccuracy: case OpKind::TopKAccuracy:
    case OpKind::Count:
      break;
  }
  unhandled_op(op, "kernels::optimizer");
}

}  // namespace tensorgrad::kernels
