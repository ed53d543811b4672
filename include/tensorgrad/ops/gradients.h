#pragma once
#include <span>

#include "tensorgrad/ops/builder.h"

namespace tensorgrad {

/// The gradient rule of one op application, written with the Builder's own
/// ops (one table for the whole op set, as tinygrad's gradient.py).
/// `inputs` are the op's inputs, `output` its result, `grad` d(loss)/d(output).
/// Writes d(loss)/d(inputs[i]) into `input_grads[i]`, leaving it invalid where
/// an input takes no gradient (labels, weights). `needs[i]` says which inputs
/// want one, so no unused gradient is built. Throws Error for an op that has
/// no gradient (backward, metric and optimizer ops).
void gradient_rule(Builder& b, OpKind op, const OpAttrs& attrs, std::span<const Value> inputs, Value output,
                   Value grad, std::span<const bool> needs, std::span<Value> input_grads);

}  // namespace tensorgrad
