#pragma once
// The op set: every operation tensorgrad can run, with its attributes and its
// shape rule. Gradient rules live in one table (ops/gradients.cpp), kernels in
// src/kernels. Both the lazy graph and the eager API reach ops only through
// the Builder interface (ops/builder.h).
#include <cstdint>
#include <span>

#include "tensorgrad/core/dtype.h"
#include "tensorgrad/core/shape.h"

namespace tensorgrad {

enum class OpKind : uint8_t {
  Leaf,  // input, parameter or state: no kernel, memory bound from outside
  Fill,  // constant of attrs.shape filled with attrs.scale
  // forward ops
  MatMul,               // (A{M,K}, B{K,N}) -> {M,N}; attrs.trans_a/trans_b transpose the operands
  Add, Sub, Mul,        // NumPy broadcasting
  Scale,                // x * attrs.scale
  Relu, Sigmoid, Tanh,
  Softmax, LogSoftmax,  // along the last axis
  SoftmaxCrossEntropy,  // (logits{B,C}, labels{B,C} f32 | {B} i32 [, weights{B}]) -> scalar mean
  MseLoss,              // (pred{B,N}, target{B,N} [, weights{B} | {B,N}]) -> scalar
  Dropout,              // inverted dropout, rate attrs.scale, stream attrs.seed
  Sum, Mean,            // over every element -> scalar
  SumTo,                // reduce a broadcast result back to attrs.shape
  BroadcastTo,          // expand to attrs.shape
  // backward ops (inputs listed at each gradient rule)
  ReluBackward, SigmoidBackward, TanhBackward, SoftmaxBackward, LogSoftmaxBackward,
  SoftmaxCrossEntropyBackward, MseLossBackward,
  // metrics
  Accuracy,  // (logits{B,C}, labels) -> scalar count of rows whose argmax is the label
  // optimizer ops: update their first input in place
  AccumulateGrad,  // (acc, g): acc += g
  OptimizerTick,   // (hyper): step t += 1 and the bias-correction powers
  AdamWUpdate,     // (param, grad, m, v, hyper)
  SgdUpdate,       // (param, grad, hyper)
  Count
};

/// Layout of the optimizer hyper-parameter tensor (one float32 vector per
/// optimizer context, a persistent device tensor).
enum HyperSlot : int { kLr, kBeta1, kBeta2, kEps, kWeightDecay, kStep, kBeta1Pow, kBeta2Pow, kHyperSize };

/// Attributes of one op application. Unused fields stay at their defaults.
struct OpAttrs {
  bool trans_a = false, trans_b = false;  // MatMul
  float scale = 0.0f;                     // Scale factor, Dropout rate, Fill value
  uint64_t seed = 0;                      // Dropout stream
  bool zero_grad = false;                 // optimizer update: clear the gradient accumulator after use
  Shape shape;                            // SumTo / BroadcastTo / Fill target
};

/// Static facts of an op.
struct OpInfo {
  const char* name;
  int min_inputs, max_inputs;
  bool in_place;  // writes its first input; the output aliases it
};
const OpInfo& op_info(OpKind op);

/// Result of a shape rule.
struct OpSignature {
  Shape shape;
  DType dtype = DType::Float32;
};

/// The shape rule of `op`: the output shape and dtype from the inputs'.
/// Throws ShapeError (incompatible shapes) or TypeError (wrong dtype), naming
/// the op, what it expected and what came.
OpSignature infer_signature(OpKind op, std::span<const Shape> shapes, std::span<const DType> dtypes,
                            const OpAttrs& attrs);

/// NumPy broadcasting of two shapes; throws ShapeError naming both when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op_name);

}  // namespace tensorgrad
