#pragma once
// The eager API's internals: what an ag::Tensor holds, what a recorded op
// keeps for backward, and the one function every eager op runs through.
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "tensorgrad/ag/tensor.h"
#include "tensorgrad/ops/gradients.h"
#include "tensorgrad/ops/op.h"

namespace tensorgrad::ag::detail {

struct GradNode;

struct TensorImpl {
  tensorgrad::Tensor data;
  bool requires_grad = false;
  // PyTorch's version counter: in-place ops bump it, backward compares it.
  // Every tensor over the same memory (views, detach) shares one counter;
  // it lives here until a second tensor needs it, then in `shared_version`
  // (so a tensor nobody views costs no allocation for it).
  uint64_t own_version = 0;
  std::shared_ptr<uint64_t> shared_version;
  uint64_t& version() { return shared_version ? *shared_version : own_version; }
  /// The counter as a shared object, for a second tensor over this memory.
  std::shared_ptr<uint64_t> share_version() {
    if (!shared_version) shared_version = std::make_shared<uint64_t>(own_version);
    return shared_version;
  }
  std::shared_ptr<GradNode> grad_fn;  // null for a leaf
  // backward's scratch: -1 outside a walk; during one, -2 once reached, then
  // the tensor's place on the tape (a walk is one thread's, as the tensors are).
  int32_t walk_index = -1;
  tensorgrad::Tensor grad;            // leaves: the accumulated gradient
};

/// An input an op recorded, with its version when recorded.
struct SavedInput {
  std::shared_ptr<TensorImpl> impl;
  uint64_t version = 0;
};

/// One recorded op application (the tensor's grad_fn). Its output is the
/// tensor that owns it, whose version backward compares with the saved one.
struct GradNode {
  OpKind op = OpKind::Leaf;
  OpAttrs attrs;
  std::array<SavedInput, kMaxOpInputs> saved;  // inline: no allocation per op
  size_t n_inputs = 0;
  std::span<SavedInput> inputs() { return {saved.data(), n_inputs}; }
  std::span<const SavedInput> inputs() const { return {saved.data(), n_inputs}; }
  /// Releases the saved inputs (a freed history).
  void release_inputs() {
    for (SavedInput& in : inputs()) in.impl.reset();
    n_inputs = 0;
  }
  uint64_t output_saved_version = 0;
  // Creation order: backward lays the tape out in it, so gradients of a value
  // used several times add up in the order a graph of the same ops adds them.
  uint64_t sequence = 0;
  bool freed = false;  // by a backward without retain_graph

  GradNode() = default;
  GradNode(const GradNode&) = delete;
  GradNode& operator=(const GradNode&) = delete;
  /// Releases the history behind it iteratively: a chain of a million
  /// recorded ops must not free itself by a million nested destructor calls.
  ~GradNode();
};

struct Access {
  static const std::shared_ptr<TensorImpl>& impl(const Tensor& t) { return t.impl_; }
  static Tensor make(std::shared_ptr<TensorImpl> impl) { return Tensor(std::move(impl)); }
};

/// The device ops without inputs (a gradient rule's Fill) make their
/// result on, on this thread while alive (the CPU outside every scope):
/// backward sets the root's, an EagerBuilder its module's.
class DeviceScope {
 public:
  explicit DeviceScope(Device device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  Device previous_;
};

/// `t` itself when it is on `device`, else a copy there in cached memory.
tensorgrad::Tensor copy_to(const tensorgrad::Tensor& t, Device device);

/// A leaf over `data` (no copy) with a version counter of its own, or
/// `version` when it shares memory with another tensor.
Tensor make_leaf(const tensorgrad::Tensor& data, bool requires_grad, std::shared_ptr<uint64_t> version = nullptr);

/// Runs `op` on `inputs` at once through the op table's shape rule and the
/// kernel of the inputs' device, allocating the result there (a view for
/// view ops). Throws what the shape rule throws; ValueError for inputs on
/// two devices (a zero-dimension CPU tensor may join any device's op);
/// StateError when the device's backend has no kernel for `op`.
tensorgrad::Tensor run_op(OpKind op, const OpAttrs& attrs, std::span<const tensorgrad::Tensor> inputs);

/// run_op writing into `out` (an in-place update: `out` may be inputs[0]).
/// Throws ShapeError when the result's shape or dtype is not out's.
void run_into(OpKind op, const OpAttrs& attrs, std::span<const tensorgrad::Tensor> inputs,
              const tensorgrad::Tensor& out);

/// Tensor::backward's body (see ag/tensor.h).
void backward(const Tensor& root, const Tensor& gradient, bool retain_graph);

/// run_op on ag tensors, recording the application when gradient mode is on
/// and an input requires grad. Throws StateError for an undefined input.
Tensor apply(OpKind op, std::span<const Tensor> inputs, const OpAttrs& attrs = {});
inline Tensor apply(OpKind op, std::initializer_list<Tensor> inputs, const OpAttrs& attrs = {}) {
  return apply(op, std::span<const Tensor>(inputs.begin(), inputs.size()), attrs);
}

}  // namespace tensorgrad::ag::detail
