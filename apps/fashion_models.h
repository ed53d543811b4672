#pragma once
// Models shared by the main job (apps/train_fashion_mnist.cpp) and the
// benchmarks (bench/tensorgrad_bench.cpp), so both train the same network.
#include <tensorgrad/tensorgrad.h>

namespace fashion {

namespace tg = tensorgrad;

// conv 3x3 (no bias, as a batch norm follows) - BN (Keras' defaults).
inline tg::nn::SymbolicTensor conv_bn(const tg::nn::SymbolicTensor& x, int64_t filters, int64_t stride, int64_t size = 3) {
  const tg::nn::SymbolicTensor c =
      tg::nn::Conv2D(filters, {size, size}, {stride, stride}, "same", {1, 1}, "linear", false)(x);
  return tg::nn::BatchNormalization()(c);
}

// [conv-BN-relu-conv-BN] + shortcut, relu; the shortcut is a 1x1 conv-BN
// when the shape changes (He et al. 2016, option B).
inline tg::nn::SymbolicTensor residual_block(const tg::nn::SymbolicTensor& x, int64_t filters, int64_t stride) {
  const tg::nn::SymbolicTensor h =
      conv_bn(tg::nn::ActivationLayer("relu")(conv_bn(x, filters, stride)), filters, 1);
  const bool project = stride != 1 || x.shape()[2] != filters;
  const tg::nn::SymbolicTensor shortcut = project ? conv_bn(x, filters, stride, 1) : x;
  return tg::nn::ActivationLayer("relu")(tg::nn::Add()({h, shortcut}));
}

/// The small residual CNN of ../shared/bench/peer_pytorch.py's resnet
/// workload, channels last, input {28, 28, 1}: conv 3x3 16 (no bias) - BN -
/// relu; two blocks of 16; a block of 32 with stride 2 and a 1x1 projection;
/// a block of 32; global average pooling; dense 10 softmax. Batch norm as
/// Keras' defaults (momentum 0.99, epsilon 1e-3). Not compiled.
inline tg::nn::Model resnet() {
  const tg::nn::SymbolicTensor image = tg::nn::Input({28, 28, 1}, tg::DType::Float32, "image");
  tg::nn::SymbolicTensor h = tg::nn::ActivationLayer("relu")(conv_bn(image, 16, 1));
  h = residual_block(h, 16, 1);
  h = residual_block(h, 16, 1);
  h = residual_block(h, 32, 2);
  h = residual_block(h, 32, 1);
  h = tg::nn::GlobalAveragePooling2D()(h);
  return tg::nn::Model(image, tg::nn::Dense(10, "softmax")(h), "resnet");
}

}  // namespace fashion
