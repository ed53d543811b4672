#pragma once
// The hook stage between backward and the optimizer update: the reduction
// over data-parallel ranks, then gradient clipping, then the user's hooks,
// which see every trainable gradient by name or the model's flat gradient
// buffer cut into buckets (PyTorch DDP's communication hooks).
#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "tensorgrad/core/tensor.h"
#include "tensorgrad/dist/gradient_buckets.h"

namespace tensorgrad {

class OptimizerContext;

/// A trainable gradient as the hook stage sees it.
struct NamedGradient {
  std::string name;  ///< the weight's name, "<layer>/<weight>"
  Tensor grad;  ///< view of the gradient (averaged over the logical batch) in the model's flat buffer, writable
};
/// Called between backward and update with every trainable gradient (gradient
/// clipping, all-reduce, inspection). May modify the gradients in place. A
/// hook that throws cancels that update: the period's gradients are dropped
/// and the exception propagates. The views are valid after the first step();
/// they are GradientBuffer::tensors(), views of the model's flat gradient
/// buffer (see GradientBuffer for the bucketed form).
using GradientHook = std::function<void(std::span<NamedGradient>)>;

/// The hook stage's default bucket size: 25 MiB, PyTorch DDP's bucket_cap_mb
/// (the one the eager API's dist::all_reduce_gradients takes too).
using dist::kDefaultGradientBucketBytes;

/// Throws ValueError unless `bytes` is a positive multiple of 4 (buckets hold
/// whole float32 elements), naming `where` (the option) and the value.
void check_gradient_bucket_bytes(size_t bytes, const char* where);

/// The model's trainable gradients as the hook stage sees them: one flat float32
/// buffer holding every gradient contiguously (OptimizerState::gradients),
/// the per-weight views into it, and its cut into buckets of bucket_bytes()
/// (PyTorch DDP's buckets and bucket_cap_mb): bucket k is the elements
/// [k * bucket_bytes() / 4, min((k + 1) * bucket_bytes() / 4, n)) of flat(),
/// contiguous byte ranges that ignore tensor boundaries, so an all-reduce per
/// bucket makes ceil(bytes() / bucket_bytes()) collective calls. Every
/// tensor, bucket and flat() alias the same memory: writing through one
/// changes the others and the update. The gradients are averaged over the
/// logical batch (over every rank in data-parallel training) and already clipped. Valid during a hook call; an optimizer
/// context passes the same object to every hook.
class GradientBuffer {
 public:
  /// {n} float32, n the total element count of the trainable weights, on the
  /// model's device; undefined before the context's first step.
  const Tensor& flat() const { return flat_; }
  /// The weights that get a gradient from the loss, in the model's order,
  /// each a writable view of its range of flat() with the weight's shape.
  ///@{
  std::span<NamedGradient> tensors() { return tensors_; }
  std::span<const NamedGradient> tensors() const { return tensors_; }
  ///@}
  /// Bytes of flat() (4 per element); 0 before the first step.
  size_t bytes() const { return flat_.defined() ? flat_.nbytes() : 0; }
  /// The bucket size in bytes, a positive multiple of 4
  /// (OptimizerContextOptions::gradient_bucket_bytes).
  size_t bucket_bytes() const { return bucket_bytes_; }
  /// ceil(bytes() / bucket_bytes()); 0 for an empty buffer.
  size_t n_buckets() const { return dist::bucket_count(flat_.defined() ? size_t(flat_.numel()) : 0, bucket_bytes_); }
  /// Bucket k's element range [begin, end) in flat(); IndexError unless
  /// k < n_buckets().
  std::pair<int64_t, int64_t> bucket_range(size_t k) const;
  /// Bucket k: a writable {end - begin} view of flat() (see bucket_range).
  /// Throws IndexError unless k < n_buckets(). Allocates nothing.
  Tensor bucket(size_t k) const;

 private:
  friend class OptimizerContext;
  Tensor flat_;
  std::vector<NamedGradient> tensors_;
  size_t bucket_bytes_ = kDefaultGradientBucketBytes;
};

/// Called between backward and update with the model's gradient buffer, in
/// the same stage and under the same rules as a GradientHook (it may change
/// the gradients in place; a throw cancels the update): the place for an
/// all-reduce per bucket.
using GradientBucketHook = std::function<void(GradientBuffer&)>;

/// A hook of the hook stage, of either kind: hooks of both kinds run in the
/// one order they were added in.
using AnyGradientHook = std::variant<GradientHook, GradientBucketHook>;

}  // namespace tensorgrad
