// Running eager ops and backward: one kernel call per op through the op
// table, and backward as the ops layer's walk (backward_walk) over a tape
// made from the recorded ops, so nothing numerical is written here.
#include "ag/autograd.h"

#include "ag/allocator.h"
#include "ag/pool.h"

#include <algorithm>
#include <atomic>
#include <string>
#include <unordered_map>

#include "tensorgrad/backend/backend.h"
#include "kernels/kernels.h"
#include "ops/op_table.h"
#include "tensorgrad/core/error.h"
#include "tensorgrad/ops/gradients.h"

namespace tensorgrad::ag {

namespace {
thread_local bool g_grad_enabled = true;
std::atomic<uint64_t> g_sequence{0};
}  // namespace

bool grad_enabled() { return g_grad_enabled; }
NoGradGuard::NoGradGuard() : previous_(g_grad_enabled) { g_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { g_grad_enabled = previous_; }

namespace detail {

Tensor make_leaf(const tensorgrad::Tensor& data, bool requires_grad, std::shared_ptr<uint64_t> version) {
  auto impl = std::allocate_shared<TensorImpl>(PoolAllocator<TensorImpl>());
  impl->data = data;
  impl->shared_version = std::move(version);
  impl->requires_grad = requires_grad;
  return Access::make(std::move(impl));
}

namespace {
// The launchers of one device for this thread, made at its first op: for
// the CPU one for work below kernels::kParallelFlops (the calling thread
// only) and one for larger work (the compute pool); a device backend's
// launcher does not depend on the work, so both are the same kind there.
struct DeviceLaunchers {
  Device device;
  std::shared_ptr<const Backend> backend;
  std::unique_ptr<KernelLauncher> small, large;
};
DeviceLaunchers& launchers_of(Device device) {
  thread_local std::vector<DeviceLaunchers> made;
  for (DeviceLaunchers& l : made)
    if (l.device == device) return l;
  DeviceLaunchers l{device, backend(device), nullptr, nullptr};  // throws StateError for a device that is not there
  l.small = l.backend->make_eager_launcher(0.0);
  l.large = l.backend->make_eager_launcher(kernels::kParallelFlops);
  made.push_back(std::move(l));
  return made.back();
}

thread_local Device g_fill_device = Device::CPU;

// The device every input is on. PyTorch lets a zero-dimension CPU tensor
// (a scalar) join an op on another device, and so does this; any other
// mix is an error, as PyTorch's "Expected all tensors to be on the same
// device".
Device common_device(OpKind op, std::span<const tensorgrad::Tensor> inputs, const tensorgrad::Tensor& out) {
  int first = -1;
  Device device = out.defined() ? out.device() : g_fill_device;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Device d = inputs[i].device();
    if (d == Device::CPU && inputs[i].shape().rank() == 0) continue;
    if (first < 0 && !out.defined()) {
      first = int(i);
      device = d;
    } else if (d != device) {
      const std::string other = first < 0 ? "the output" : "input " + std::to_string(first);
      throw ValueError(std::string(op_info(op).name) + ": expected all tensors to be on the same device, but " +
                       other + " is on " + device.str() + " and input " + std::to_string(i) + " on " + d.str() +
                       "; move one with to(device)");
    }
  }
  if (!inputs.empty() && first < 0 && !out.defined()) {
    // Only CPU scalars: the op runs on the CPU.
    return Device::CPU;
  }
  return device;
}
}  // namespace

DeviceScope::DeviceScope(Device device) : previous_(g_fill_device) { g_fill_device = device; }
DeviceScope::~DeviceScope() { g_fill_device = previous_; }

tensorgrad::Tensor copy_to(const tensorgrad::Tensor& t, Device device) {
  if (t.device() == device) return t;
  tensorgrad::Tensor out = cached_empty(t.shape(), t.dtype(), device);
  if (t.device() == Device::CPU)  // queued with the device's eager ops: a recycled block may still be read by them
    launchers_of(device).backend->copy_from_host_in_order(*out.storage(), out.storage_offset(), t.raw(), t.nbytes());
  else
    out.copy_from(t);
  return out;
}

namespace {
// The op's shape rule on `inputs`, then its kernel writing `out`, or, when
// `out` is undefined, a result it allocates (a view for view ops), on the
// device of its inputs.
tensorgrad::Tensor run(OpKind op, const OpAttrs& attrs, std::span<const tensorgrad::Tensor> inputs,
                       tensorgrad::Tensor out) {
  Shape shapes[kMaxOpInputs];
  DType dtypes[kMaxOpInputs];
  kernels::TensorRef refs[kMaxOpInputs];
  tensorgrad::Tensor moved[kMaxOpInputs];  // CPU scalars copied to the op's device
  if (inputs.size() > size_t(kMaxOpInputs))
    throw ValueError(std::string(op_info(op).name) + ": at most " + std::to_string(kMaxOpInputs) + " inputs; got " +
                     std::to_string(inputs.size()));
  const Device device = common_device(op, inputs, out);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const tensorgrad::Tensor* in = &inputs[i];
    if (in->device() != device) {
      moved[i] = copy_to(*in, device);
      in = &moved[i];
    }
    shapes[i] = in->shape();
    dtypes[i] = in->dtype();
    refs[i] = {in->raw(), shapes[i], dtypes[i]};
  }
  // Both need memory a graph's plan lays out beside the convolution's output.
  if (op == OpKind::AttachedBatchStats || (op == OpKind::Conv2D && (attrs.flags & kBatchStatsOutput)))
    throw ValueError(std::string(op_info(op).name) +
                     ": a convolution's attached batch statistics exist only in a lazy graph (Graph folds "
                     "BatchNormStats into the Conv2D); in the eager API apply BatchNormStats to its output");
  const OpSignature sig = infer_signature(op, {shapes, inputs.size()}, {dtypes, inputs.size()}, attrs);
  const OpInfo& info = op_info(op);
  if (out.defined()) {
    if (out.shape() != sig.shape || out.dtype() != sig.dtype)
      throw ShapeError(std::string(info.name) + ": the result is " + dtype_name(sig.dtype) + " " + sig.shape.str() +
                       " and cannot be written into a " + dtype_name(out.dtype()) + " tensor of shape " +
                       out.shape().str());
  } else if (info.view) {
    return inputs[0].reshape(sig.shape);
  }
  DeviceLaunchers& launchers = launchers_of(device);
  if (device != Device::CPU && !launchers.backend->has_kernel(op))
    throw StateError(std::string(info.name) + ": the " + launchers.backend->name() + " backend has no kernel for it on " +
                     device.str() + "; run it on the CPU (to(Device::CPU)) and move the result back");
  if (info.in_place && !out.defined() && inputs[0].device() != device)  // a CPU scalar cannot be written on a device
    throw ValueError(std::string(info.name) + ": updates its first input in place, which is on " +
                     inputs[0].device().str() + " while the op runs on " + device.str() +
                     "; move that input with to(device) first");
  if (!out.defined()) out = info.in_place ? inputs[0] : cached_empty(sig.shape, sig.dtype, device);
  KernelLauncher& launcher =
      op_flops(op, attrs, {shapes, inputs.size()}, sig.shape) >= kernels::kParallelFlops ? *launchers.large
                                                                                          : *launchers.small;
  launcher.begin_run();
  launcher.launch(op, attrs, {refs, inputs.size()}, {out.raw(), out.shape(), out.dtype()});
  launcher.end_run();
  return out;
}
}  // namespace

GradNode::~GradNode() {
  std::vector<std::shared_ptr<TensorImpl>> pending;
  for (SavedInput& in : inputs()) pending.push_back(std::move(in.impl));
  while (!pending.empty()) {
    std::shared_ptr<TensorImpl> t = std::move(pending.back());
    pending.pop_back();
    // The last owner of a tensor and of its grad_fn: take that node's inputs
    // here, so that destroying it below recurses no further.
    if (t && t.use_count() == 1 && t->grad_fn && t->grad_fn.use_count() == 1) {
      for (SavedInput& in : t->grad_fn->inputs()) pending.push_back(std::move(in.impl));
      t->grad_fn->release_inputs();
    }
  }
}

tensorgrad::Tensor run_op(OpKind op, const OpAttrs& attrs, std::span<const tensorgrad::Tensor> inputs) {
  return run(op, attrs, inputs, tensorgrad::Tensor());
}

void run_into(OpKind op, const OpAttrs& attrs, std::span<const tensorgrad::Tensor> inputs,
              const tensorgrad::Tensor& out) {
  run(op, attrs, inputs, out);
}

Tensor apply(OpKind op, std::span<const Tensor> inputs, const OpAttrs& attrs) {
  tensorgrad::Tensor values[kMaxOpInputs];
  if (inputs.size() > size_t(kMaxOpInputs))
    throw ValueError(std::string(op_info(op).name) + ": at most " + std::to_string(kMaxOpInputs) + " inputs; got " +
                     std::to_string(inputs.size()));
  bool record = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined())
      throw StateError(std::string(op_info(op).name) + ": input " + std::to_string(i) +
                       " is an undefined tensor (a default-constructed ag::Tensor, or grad() before any backward)");
    values[i] = inputs[i].data();
    record = record || inputs[i].requires_grad();
  }
  if (op_info(op).in_place && inputs[0].requires_grad() && g_grad_enabled)
    throw StateError(std::string(op_info(op).name) + ": updates its first input in place, and that input requires "
                     "grad; run it under an ag::NoGradGuard");
  tensorgrad::Tensor out = run_op(op, attrs, {values, inputs.size()});
  if (op_info(op).in_place) {
    // A state update (a layer's moving averages run through an EagerBuilder):
    // not differentiable, and a change of its first input's memory.
    const auto& target = Access::impl(inputs[0]);
    ++target->version();
    return make_leaf(out, false, target->share_version());
  }
  record = record && g_grad_enabled && out.dtype() == DType::Float32;
  // A view shares its input's memory, so it shares the input's version counter.
  std::shared_ptr<uint64_t> version = op_info(op).view ? Access::impl(inputs[0])->share_version() : nullptr;
  Tensor result = make_leaf(out, false, std::move(version));
  if (!record) return result;
  auto node = std::allocate_shared<GradNode>(PoolAllocator<GradNode>());
  node->op = op;
  node->attrs = attrs;
  for (const Tensor& in : inputs) {
    const auto& in_impl = Access::impl(in);
    node->saved[node->n_inputs++] = {in_impl, in_impl->version()};
  }
  const auto& impl = Access::impl(result);
  node->output_saved_version = impl->version();
  node->sequence = g_sequence.fetch_add(1, std::memory_order_relaxed);
  impl->requires_grad = true;
  impl->grad_fn = std::move(node);
  return result;
}

namespace {

// The values backward works on: the recorded tensors first (tape order), then
// every gradient the walk makes, each op run as soon as the walk asks for it.
class ValueBuilder final : public Builder {
 public:
  explicit ValueBuilder(std::vector<tensorgrad::Tensor>& storage) : values(storage) {}
  std::vector<tensorgrad::Tensor>& values;

  Value apply(OpKind op, std::span<const Value> inputs, const OpAttrs& attrs) override {
    tensorgrad::Tensor in[kMaxOpInputs];
    for (size_t i = 0; i < inputs.size() && i < size_t(kMaxOpInputs); ++i) in[i] = value(inputs[i]);
    values.push_back(run_op(op, attrs, {in, std::min(inputs.size(), size_t(kMaxOpInputs))}));
    return Value{int32_t(values.size() - 1)};
  }
  using Builder::apply;
  Value parameter(const tensorgrad::Tensor&, const char*, bool) override {
    throw Error("internal error: a gradient rule asked backward for a parameter");
  }
  Value rng_counter() override {
    throw Error("internal error: a gradient rule asked backward for a random stream (dropout passes its counter)");
  }
  Shape shape(Value v) const override { return value(v).shape(); }
  DType dtype(Value v) const override { return value(v).dtype(); }
  const tensorgrad::Tensor& value(Value v) const {
    if (v.id < 0 || size_t(v.id) >= values.size())
      throw IndexError("backward: value " + std::to_string(v.id) + " is not one of its " +
                       std::to_string(values.size()) + " values");
    return values[size_t(v.id)];
  }
};

// The recorded ops as the walk's tape: entry i made values[i].
struct TapeEntry {
  OpKind op = OpKind::Leaf;
  OpAttrs attrs;
  size_t first = 0, count = 0;  // the entry's inputs in the tape's input list
};

// What one backward works in, kept per thread between calls so that a steady
// training loop reuses the lists' memory (emptied, not freed, after each walk).
struct BackwardScratch {
  std::vector<TensorImpl*> found, stack, leaves;
  std::vector<TensorImpl*> first_grads;  // leaves whose .grad this backward makes
  std::vector<TapeEntry> entries;
  std::vector<Value> inputs, wrt;
  std::vector<tensorgrad::Tensor> values;
  void clear() {
    found.clear(), stack.clear(), leaves.clear(), first_grads.clear(), entries.clear(), inputs.clear(), wrt.clear();
    values.clear();  // releases the walk's tensors: their blocks go back to the cache
  }
};

// The recorded ops as the walk's tape: entry i made values[i].
class RecordedTape final : public Tape {
 public:
  RecordedTape(const std::vector<TapeEntry>& entries, const std::vector<Value>& inputs)
      : entries_(entries), inputs_(inputs) {}
  size_t size() const override { return entries_.size(); }
  Application application(size_t i) const override {
    const TapeEntry& e = entries_[i];
    return {e.op, e.attrs, std::span<const Value>(inputs_.data() + e.first, e.count)};
  }

 private:
  const std::vector<TapeEntry>& entries_;
  const std::vector<Value>& inputs_;
};

std::string shape_of(const TensorImpl& t) { return t.data.shape().str(); }

[[noreturn]] void changed_in_place(const GradNode& node, const TensorImpl* input, const std::string& shape,
                                   uint64_t now, uint64_t saved) {
  throw StateError(std::string("backward: a tensor of shape ") + shape + " that op '" + op_info(node.op).name +
                   "' saved " + (input ? "as an input" : "as its output") + " was changed in place since (version " +
                   std::to_string(now) + ", saved at version " + std::to_string(saved) +
                   "). Change it after backward, or clone() it before the in-place op");
}

}  // namespace

void backward(const Tensor& root, const Tensor& gradient, bool retain_graph) {
  const auto& root_impl = Access::impl(root);
  if (!root_impl->requires_grad)
    throw StateError("backward: this tensor (shape " + shape_of(*root_impl) +
                     ") does not require grad and has no grad_fn: no op that made it recorded a history. Give a leaf "
                     "requires_grad = true before the ops, and call backward outside a NoGradGuard");
  // Every tensor the root depends on through recorded ops: an iterative
  // depth-first search (a long history must not overflow the stack).
  thread_local BackwardScratch scratch;
  BackwardScratch& w = scratch;
  // However the walk ends: every reached tensor's walk_index back to -1, the
  // lists emptied (their tensors released).
  struct Cleanup {
    BackwardScratch& w;
    bool indices_set = true;  // false once reset below (the list may then point at freed tensors)
    ~Cleanup() {
      if (indices_set)
        for (TensorImpl* t : w.found) t->walk_index = -1;
      w.clear();
    }
  } cleanup{w};
  w.clear();
  w.stack.push_back(root_impl.get());
  root_impl->walk_index = -2;
  w.found.push_back(root_impl.get());
  while (!w.stack.empty()) {
    TensorImpl* t = w.stack.back();
    w.stack.pop_back();
    if (!t->grad_fn) continue;
    const GradNode& node = *t->grad_fn;
    if (node.freed)
      throw StateError(std::string("backward: the history through op '") + op_info(node.op).name +
                       "' was freed by an earlier backward. Pass retain_graph = true to the first backward to call "
                       "backward twice through the same ops");
    if (t->version() != node.output_saved_version)
      changed_in_place(node, nullptr, shape_of(*t), t->version(), node.output_saved_version);
    for (const SavedInput& in : node.inputs()) {
      if (in.impl->version() != in.version)
        changed_in_place(node, in.impl.get(), shape_of(*in.impl), in.impl->version(), in.version);
      if (in.impl->walk_index == -1) {
        in.impl->walk_index = -2;
        w.found.push_back(in.impl.get());
        w.stack.push_back(in.impl.get());
      }
    }
  }
  // Tape order: leaves and constants first, then the recorded ops in the order
  // they ran (a topological order, since an op runs after its inputs).
  std::stable_sort(w.found.begin(), w.found.end(), [](const TensorImpl* a, const TensorImpl* b) {
    const bool la = !a->grad_fn, lb = !b->grad_fn;
    if (la != lb) return la;
    return !la && a->grad_fn->sequence < b->grad_fn->sequence;
  });
  for (size_t i = 0; i < w.found.size(); ++i) w.found[i]->walk_index = int32_t(i);
  for (TensorImpl* t : w.found) {
    TapeEntry e;
    if (t->grad_fn) {
      e.op = t->grad_fn->op;
      e.attrs = t->grad_fn->attrs;
      e.first = w.inputs.size();
      e.count = t->grad_fn->n_inputs;
      for (const SavedInput& in : t->grad_fn->inputs()) w.inputs.push_back(Value{in.impl->walk_index});
    } else if (t->requires_grad) {
      w.wrt.push_back(Value{int32_t(w.entries.size())});
      w.leaves.push_back(t);
    }
    w.entries.push_back(e);
    w.values.push_back(t->data);
  }
  tensorgrad::Tensor seed;
  if (gradient.defined()) {
    if (gradient.shape() != root.shape())
      throw ShapeError("backward: the gradient must have the tensor's shape " + root.shape().str() + "; got " +
                       gradient.shape().str());
    if (gradient.dtype() != DType::Float32)
      throw TypeError(std::string("backward: the gradient must be float32; got ") + dtype_name(gradient.dtype()));
    if (gradient.device() != root.device())
      throw ValueError("backward: the gradient is on " + gradient.device().str() + " and the tensor on " +
                       root.device().str() + "; expected both on the same device: move the gradient with to()");
    seed = gradient.data();
  } else {
    if (root.numel() != 1)
      throw ValueError("backward: a gradient can be left out only for a tensor of one element; this one has shape " +
                       root.shape().str() + ". Pass d(loss)/d(this tensor) of that shape, or reduce it first (sum, mean)");
    seed = cached_empty(Shape{}, DType::Float32);
    seed.fill(1.0f);
    seed = copy_to(seed, root.data().device());
  }
  w.values.push_back(seed);
  const Value seed_value{int32_t(w.values.size() - 1)};
  ValueBuilder values(w.values);
  RecordedTape tape(w.entries, w.inputs);
  std::vector<Value> grads;
  {
    NoGradGuard no_grad;
    DeviceScope on_root_device(root.data().device());  // the gradient rules' filled constants
    grads = backward_walk(values, tape, Value{root_impl->walk_index}, w.wrt, seed_value);
  }
  for (size_t i = 0; i < w.leaves.size(); ++i) {
    if (!grads[i].valid()) continue;
    TensorImpl& leaf = *w.leaves[i];
    const tensorgrad::Tensor& g = values.value(grads[i]);
    if (!leaf.grad.defined()) {
      w.first_grads.push_back(&leaf);
      // A gradient may be a view of another value, or the seed itself: copied.
      if (g.device() == Device::CPU) {
        leaf.grad = cached_empty(g.shape(), g.dtype());
        leaf.grad.copy_from(g);
      } else {  // queued as an op (g * 1 is exact): a storage copy would wait for the queue
        OpAttrs one;
        one.factor = 1.0f;
        leaf.grad = run_op(OpKind::Scale, one, {&g, 1});
      }
    } else {
      const tensorgrad::Tensor in[2] = {leaf.grad, g};
      run_op(OpKind::AccumulateGrad, {}, in);
    }
  }
  // The indices go back and the walk's tensors are released before the
  // history is freed (freeing may destroy tensors the list points at).
  for (TensorImpl* t : w.found) t->walk_index = -1;
  cleanup.indices_set = false;
  w.values.clear();
  // backward's end is a sync point: the step's gradients are submitted as
  // one queue, and what its kernels reported is thrown here. Then no
  // gradient is left behind, as on the CPU, whose kernels throw before the
  // leaves get one: the accumulations were skipped by the kernels
  // (skip_update), and the first gradients are taken back.
  if (root.data().device() != Device::CPU) {
    try {
      synchronize(root.data().device());
    } catch (...) {
      for (TensorImpl* leaf : w.first_grads) leaf->grad = tensorgrad::Tensor();
      throw;
    }
  }
  if (retain_graph) return;
  for (TensorImpl* t : w.found)
    if (t->grad_fn) {
      t->grad_fn->freed = true;
      t->grad_fn->release_inputs();
    }
}

}  // namespace detail

}  // namespace tensorgrad::ag
