#pragma once
#include <cstddef>
#include <span>
#include <vector>

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

/// The most inputs any op takes (AttentionBackward's: q, k, v, the output,
/// its gradient, a mask and the random stream's counter); the op table
/// checks every entry against it at compile time, so the walk can hold one
/// application's inputs on the stack.
inline constexpr int kMaxOpInputs = 7;

/// One recorded op application: the op, its attributes and its inputs. A leaf
/// (an input, parameter or state) is op Leaf with no inputs.
struct Application {
  OpKind op = OpKind::Leaf;       ///< the op; Leaf for a leaf
  OpAttrs attrs;                  ///< its attributes
  std::span<const Value> inputs;  ///< its inputs, in order (empty for a leaf)
};

/// What the walk reads: the values of one Builder in the order they were made,
/// entry i being the application whose output is Value{i}. The graph's node
/// list is one (no copy per call); the eager API builds another from its recorded ops (src/ag/autograd.cpp).
class Tape {
 public:
  virtual ~Tape() = default;
  /// The number of values recorded.
  virtual size_t size() const = 0;
  /// The application whose output is Value{i}, for i < size(). Only valid until the builder records its next op: the walk appends
  /// gradient ops to the same builder, which may move the tape's storage.
  virtual Application application(size_t i) const = 0;
};

/// Reverse-mode autodiff over `tape`, appending the backward ops to `b` (the
/// builder the tape records): returns d(seed * loss)/d(wrt[i]) for each i,
/// invalid where wrt[i] does not reach the loss. `seed` is d(loss)/d(loss),
/// broadcast to the loss's shape when the loss is not rank 0 (it must have
/// one element; the caller checks). Only values on a path from some wrt to
/// the loss get a gradient; a value used several times sums its gradients
/// with b.add in reverse tape order. Throws IndexError (from b.shape) for a
/// wrt that is not a value of `b`.
std::vector<Value> backward_walk(Builder& b, const Tape& tape, Value loss, std::span<const Value> wrt, Value seed);

}  // namespace tensorgrad
