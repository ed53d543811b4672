#pragma once
// The eager autograd API, in PyTorch's words: tensors that run each op when
// it is called and record it for `backward()`. Every op goes through the op
// table (src/ops/op_table.cpp) and the kernels the graph engine runs, on the
// device of its inputs (TensorOptions::device, Tensor::to), and `backward()`
// runs the same reverse-mode walk (ops/gradients.h, backward_walk) as
// Graph::gradients, so eager and graph results are bit-identical at one
// thread. On a GPU, ops are queued as PyTorch queues them on a CUDA stream:
// reading values back (item, to_vector, cpu), backward()'s end and
// tensorgrad::synchronize(device) wait for them, and an error a kernel
// reports (an id outside a table) is thrown there.
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "tensorgrad/core/tensor.h"

namespace tensorgrad::ag {

namespace detail {
struct TensorImpl;
struct Access;
}

/// What a factory makes (torch::TensorOptions, reduced to what tensorgrad has).
struct TensorOptions {
  DType dtype = DType::Float32;  ///< the element type (torch's dtype=)
  bool requires_grad = false;    ///< only float32 tensors may require gradients
  /// Where the tensor lives (PyTorch's `device=`): the CPU, or a device the
  /// backend registry lists (Device("vulkan")). A factory makes the values
  /// on the host and copies them there once; it throws StateError when the
  /// device is not available.
  Device device = Device::CPU;
};

/// A tensor of the eager API, with reference semantics as torch::Tensor:
/// copying an ag::Tensor shares the same tensor (data, gradient, history);
/// `detach()` shares the data without the history; `clone()` copies.
///
/// Shapes are listed outermost first, row-major, as in PyTorch; images keep
/// the engine's channels-last layout {N, H, W, C}.
///
/// A tensor made by an op while gradient mode is on (no NoGradGuard alive)
/// and from an input that requires gradients records the op (its `grad_fn`)
/// and requires gradients itself. `backward()` then walks the recorded ops
/// and accumulates d(root)/d(leaf) into every leaf's `grad()` (a leaf: a
/// tensor that requires gradients and was not made by a recorded op), adding
/// to what is there until the caller resets it, as PyTorch does.
class Tensor {
 public:
  /// An undefined tensor (`defined()` false): what `grad()` returns before
  /// any backward. Every method but `defined()` throws StateError on it.
  Tensor() = default;
  /// Wraps an engine tensor without a copy: the ag tensor reads and writes
  /// that memory. Throws ValueError when `requires_grad` is asked of a
  /// non-float32 tensor, StateError when `data` is undefined.
  explicit Tensor(const tensorgrad::Tensor& data, bool requires_grad = false);

  /// A tensor over the caller's buffer, without a copy (torch::from_blob):
  /// `data` holds shape.numel() elements of options.dtype and must outlive
  /// every use of the tensor and of the views made from it.
  static Tensor from_blob(void* data, const Shape& shape, TensorOptions options = {});

  /// Whether it holds a tensor (false for a default-constructed one).
  bool defined() const { return impl_ != nullptr; }
  /// The shape, outermost first (torch.Tensor.shape).
  const Shape& shape() const;
  /// Size of dimension `d`; negative counts from the end. Throws IndexError outside [-dim, dim).
  int64_t size(int d) const;
  /// The rank: the number of dimensions (0 for a scalar).
  int dim() const { return shape().rank(); }
  /// The number of elements (1 for a scalar).
  int64_t numel() const { return shape().numel(); }
  /// The element type.
  DType dtype() const;
  /// The values, sharing memory (a write through it is not seen by the version counter).
  const tensorgrad::Tensor& data() const;
  /// Where its memory is (torch.Tensor.device).
  Device device() const;
  /// This tensor on `device` (torch.Tensor.to): itself when it is there
  /// already, else a copy. A copy of a tensor that requires grad is a new
  /// leaf that requires grad (gradients reach the copy, not the source: the
  /// form module.to() moves parameters in); a tensor made by recorded ops
  /// cannot be moved while gradient mode is on (StateError: detach() it, or
  /// move the leaves and run the ops on the device). Throws StateError when
  /// the device is not available.
  Tensor to(Device device) const;
  /// to(Device::CPU).
  Tensor cpu() const { return to(Device::CPU); }
  /// The single value of a one-element tensor, as float. Throws ValueError
  /// when numel() != 1 (PyTorch's item()).
  float item() const;
  /// A copy of the values as floats (integers converted); from a device,
  /// copied back to the host, as item() is.
  std::vector<float> to_vector() const;

  // ---- autograd ----
  /// Whether gradients are computed for it (torch.Tensor.requires_grad): set
  /// on a leaf, inherited by what recorded ops make from it.
  bool requires_grad() const;
  /// Marks a leaf as requiring gradients (or not). Throws ValueError for a
  /// non-float32 tensor, StateError for a non-leaf (its flag follows its inputs).
  Tensor& requires_grad_(bool requires_grad = true);
  /// True for a tensor not made by a recorded op (every tensor that does not require grad is a leaf).
  bool is_leaf() const;
  /// The name of the op that made this tensor ("matmul", "relu", ...), empty for a leaf.
  std::string grad_fn_name() const;
  /// The accumulated gradient of a leaf: undefined until a backward reaches
  /// it. Shares memory with the stored gradient, so `grad().zero_()` clears it.
  Tensor grad() const;
  /// Replaces the stored gradient (undefined: none, as PyTorch's
  /// `zero_grad(set_to_none=True)`). Throws ShapeError when a defined
  /// gradient's shape differs from the tensor's, ValueError when it is on
  /// another device.
  void set_grad(const Tensor& grad);
  /// Computes d(this)/d(leaf) for every leaf that this tensor depends on and
  /// that requires grad, and adds it to the leaf's grad(). `gradient` is
  /// d(loss)/d(this), of this tensor's shape; it may be omitted only for a
  /// one-element tensor (then 1). Without `retain_graph` the recorded ops are
  /// freed, and a second backward through them throws StateError.
  /// Throws StateError when this tensor does not require grad, or when a
  /// tensor an op saved was changed in place since (PyTorch's version
  /// counter: never a wrong gradient); ValueError for a missing gradient of
  /// a tensor with several elements; ShapeError / TypeError for a gradient of
  /// the wrong shape or dtype.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  /// The same values (shared memory, shared version counter), no history,
  /// not requiring grad (torch.Tensor.detach).
  Tensor detach() const;
  /// An independent copy; its history links to this tensor (gradients flow
  /// back through the copy), as torch.clone.
  Tensor clone() const;
  /// How many in-place changes this tensor's memory has seen (torch's `_version`).
  uint64_t version() const;

  // ---- in-place ops (PyTorch's trailing underscore). Each bumps the version
  // counter. On a tensor that requires grad they are allowed only under a
  // NoGradGuard (the optimizer step): with gradient mode on they throw
  // StateError, where PyTorch would rewrite the history of a non-leaf (not
  // built here). ----

  /// this += alpha * other; `other` broadcasts to this shape (else ShapeError naming "add_" and both shapes).
  Tensor& add_(const Tensor& other, float alpha = 1.0f);
  /// this += value.
  Tensor& add_(float value);
  /// this *= other (broadcast to this shape).
  Tensor& mul_(const Tensor& other);
  /// this *= value.
  Tensor& mul_(float value);
  /// Every element set to 0 / to `value` (float32 tensors).
  ///@{
  Tensor& zero_();
  Tensor& fill_(float value);
  ///@}
  /// Copies `src` (broadcast to this shape, same dtype) into this memory.
  Tensor& copy_(const Tensor& src);
  /// Clamps every element to [min, max] (either may be infinite; ValueError when min > max).
  Tensor& clamp_(float min, float max);

 private:
  explicit Tensor(std::shared_ptr<detail::TensorImpl> impl) : impl_(std::move(impl)) {}
  const detail::TensorImpl& impl() const;
  std::shared_ptr<detail::TensorImpl> impl_;
  friend struct detail::Access;
};

/// Writes the tensor as PyTorch prints one: "tensor([[1.0000, 2.0000],
/// [3.0000, 4.0000]], device='vulkan:0', requires_grad=True)": values with
/// four decimals (integers as integers), more than 1000 elements summarised
/// with "..." (three items at each edge of every dimension), then the
/// device, dtype and grad_fn or requires_grad where they are not the
/// defaults. A tensor on a device is copied back (a sync point).
std::ostream& operator<<(std::ostream& os, const Tensor& t);

/// Turns gradient recording off on this thread while alive (torch::NoGradGuard):
/// ops made under it do not record and their results do not require grad.
/// Guards nest; each restores the mode it found.
class NoGradGuard {
 public:
  /// Turns recording off, remembering the mode it found.
  NoGradGuard();
  /// Restores the mode the constructor found.
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};
/// Whether ops record on this thread now (torch::GradMode::is_enabled).
bool grad_enabled();

/// A random stream for the eager API (torch::Generator): a 64-bit Mersenne
/// twister for rand/randn, and the dropout stream: a key fixed at seeding
/// and a counter that advances once per dropout call. Dropout's mask is
/// hash(key, counter) (core/random.h), the function the graph's Dropout op
/// uses with the model's stream, so the same key and counter draw the same
/// mask eagerly and in a graph.
class Generator {
 public:
  /// A stream started as manual_seed(seed) starts it.
  explicit Generator(uint64_t seed = 0) { manual_seed(seed); }
  /// Restarts the stream: the engine from `seed`, the dropout key `seed`, counter 0.
  void manual_seed(uint64_t seed);
  /// The value last given to manual_seed (torch.Generator.initial_seed).
  uint64_t initial_seed() const { return seed_; }
  /// The Mersenne twister rand, randn and the loaders' shuffles draw from.
  std::mt19937_64& engine() { return engine_; }
  /// The key of the dropout stream: the value given to manual_seed.
  uint64_t dropout_key() const { return seed_; }
  /// The next dropout call's counter.
  uint64_t dropout_counter() const { return counter_; }
  /// Sets the next dropout call's counter (to replay a stream).
  void set_dropout_counter(uint64_t counter) { counter_ = counter; }
  /// Returns the counter and advances it.
  uint64_t next_dropout_counter() { return counter_++; }

 private:
  uint64_t seed_ = 0, counter_ = 0;
  std::mt19937_64 engine_;
};
/// The generator the factories and dropout use when given none (seed 0 at
/// start). One thread at a time, as the engine's global generator.
Generator& default_generator();
/// Seeds everything random, as torch::manual_seed: default_generator() and
/// the engine's global generator (tensorgrad::manual_seed).
void manual_seed(uint64_t seed);

/// The eager API's caching allocator (as PyTorch's): the storage of every
/// tensor an eager op makes comes from blocks kept by byte size (rounded up
/// to 64), and goes back to them when the tensor's last copy is gone, so a
/// steady-state training step reuses its blocks and calls malloc only while
/// warming up. `misses` counts blocks that had to be allocated, `hits`
/// blocks reused; `live_blocks` are in use, `cached_blocks` /
/// `cached_bytes` wait for reuse.
struct MemoryStats {
  /// Blocks reused, and blocks that had to be allocated.
  ///@{
  uint64_t hits = 0, misses = 0;
  ///@}
  /// Blocks in use; blocks and bytes waiting for reuse.
  ///@{
  uint64_t live_blocks = 0, cached_blocks = 0, cached_bytes = 0;
  ///@}
};
/// The CPU cache's counts now.
MemoryStats memory_stats();
/// The same for the blocks of `device` (each device has a cache of its
/// own, as torch.cuda.memory_stats(device)); memory_stats() for the CPU.
MemoryStats memory_stats(Device device);
/// Sets hits and misses to 0 (the block counts stay).
void reset_memory_stats();
/// Frees every cached block of every device (torch.cuda.empty_cache): the
/// cache holds what the largest step needed, and never shrinks by itself.
void empty_cache();

// ---- factories (torch::zeros, ...). `shape` outermost first. ----

/// Every element 0 / 1, of options.dtype (torch::zeros, torch::ones).
///@{
Tensor zeros(const Shape& shape, TensorOptions options = {});
Tensor ones(const Shape& shape, TensorOptions options = {});
///@}
/// Every element `value` (float32 only: TypeError otherwise).
Tensor full(const Shape& shape, float value, TensorOptions options = {});
/// Uniform in [0, 1) / standard normal, float32, from `generator` (default_generator() when null).
///@{
Tensor rand(const Shape& shape, TensorOptions options = {}, Generator* generator = nullptr);
Tensor randn(const Shape& shape, TensorOptions options = {}, Generator* generator = nullptr);
///@}
/// start, start + step, ... below `end` (above it for a negative step), as
/// torch.arange; float32 or int32 per options.dtype. Throws ValueError for
/// step 0 or a step pointing away from `end`.
Tensor arange(double start, double end, double step = 1.0, TensorOptions options = {});
/// 0, 1, ... below `end` (torch.arange(end)).
Tensor arange(double end, TensorOptions options = {});
/// A float32 tensor holding a copy of `values` (shape.numel() of them, else ShapeError).
///@{
Tensor tensor(std::span<const float> values, const Shape& shape, TensorOptions options = {});
Tensor tensor(std::initializer_list<float> values, const Shape& shape, TensorOptions options = {});
///@}
/// An int32 tensor holding a copy of `values` (class ids, row indices).
Tensor tensor(std::span<const int32_t> values, const Shape& shape);

}  // namespace tensorgrad::ag
