#pragma once
// Lazy graphs of op nodes (static graphs, as ggml's ggml_cgraph): built once,
// planned once, run every step. Nodes are appended in creation order, which
// is a topological order since an op's inputs exist before it.
#include <array>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "tensorgrad/core/tensor.h"
#include "tensorgrad/ops/builder.h"

namespace tensorgrad {


/// What a node is. Inputs are bound per run; parameters and state are
/// persistent tensors bound once (their memory outlives the graph's runs).
enum class NodeRole : uint8_t { Op, Input, Parameter, State };

/// One node of a Graph: an op applied to earlier nodes, or a leaf (input,
/// parameter, state) with its memory bound from outside.
struct Node {
  static constexpr int kMaxInputs = 7;  ///< the most inputs an op takes (AttentionBackward's: q, k, v, y, g, mask, counter)
  OpKind op = OpKind::Leaf;                ///< the op; Leaf for inputs, parameters and state
  OpAttrs attrs;                           ///< the op's attributes
  std::array<Value, kMaxInputs> inputs{};  ///< the first n_inputs are the op's inputs, in order
  int n_inputs = 0;                        ///< how many of `inputs` are used
  Shape shape;                             ///< the output's shape, batch included
  DType dtype = DType::Float32;            ///< the output's dtype
  NodeRole role = NodeRole::Op;            ///< what the node is
  bool trainable = false;  ///< parameters only
  Tensor bound;            ///< parameters and state: their persistent memory
  std::string name;        ///< leaves: for messages and gradient names

  /// The op's inputs: the first n_inputs entries of `inputs`.
  std::span<const Value> input_values() const { return {inputs.data(), size_t(n_inputs)}; }
};

/// A lazy graph; implements Builder by recording nodes.
class Graph final : public Builder {
 public:
  /// A per-run input of exactly `shape` (batch included) and `dtype`.
  Value input(const std::string& name, const Shape& shape, DType dtype = DType::Float32);
  /// A persistent tensor the graph reads and, through in-place ops, writes
  /// (optimizer moments, accumulators). Never differentiated.
  Value state(const Tensor& tensor, const std::string& name);

  /// Appends the op as written (fusion is a later pass: graph/fuse.h).
  /// Throws as the op's shape rule (ShapeError, TypeError), and ValueError
  /// for an AttachedBatchStats whose input is not a Conv2D with
  /// kBatchStatsOutput.
  Value apply(OpKind op, std::span<const Value> inputs, const OpAttrs& attrs) override;
  using Builder::apply;
  /// Rewrites node v in place as `op` on `inputs` (nodes before v) with
  /// `attrs`, for graph passes (fuse): v's consumers then read the new op's
  /// output. Throws Error when v is a leaf, an input is not before v, or the
  /// new op's output shape or dtype differs from v's.
  void replace(Value v, OpKind op, std::span<const Value> inputs, const OpAttrs& attrs);
  /// Sets `flags` in node v's attributes (a pass marking a producer, as
  /// Conv2D's kBatchStatsOutput, which changes none of its output's bits).
  void add_flags(Value v, uint32_t flags);
  /// Binds the persistent int64 {1} counter this graph's dropout draws from
  /// (the model's random stream, OptimizerState::rng_counter); without one the
  /// first rng_counter() makes a counter of the graph's own, starting at 0.
  /// Throws ShapeError / TypeError for another shape or dtype, StateError once
  /// rng_counter() has been called.
  void set_rng_counter(const Tensor& counter);
  /// The counter, advanced: a State leaf for the bound tensor and an
  /// AdvanceCounter op on it, made at the first call (so the advance runs
  /// before any dropout, once per run from node 0).
  Value rng_counter() override;
  /// The bound counter tensor (undefined before set_rng_counter or rng_counter).
  const Tensor& rng_counter_tensor() const { return rng_counter_; }
  Value parameter(const Tensor& tensor, const char* name, bool trainable) override;
  Shape shape(Value v) const override { return node(v).shape; }
  DType dtype(Value v) const override { return node(v).dtype; }
  /// Throws IndexError for a handle that is not in this graph.
  const Node& node(Value v) const;
  /// Every node, in creation (topological) order; a Value's index is its place here.
  const std::vector<Node>& nodes() const { return nodes_; }
  /// The number of nodes.
  size_t size() const { return nodes_.size(); }
  /// Parameters with trainable = true, in creation order.
  std::vector<Value> trainable_parameters() const;

  /// Reverse-mode autodiff: appends the backward nodes and returns
  /// d(seed * loss)/d(wrt[i]) for each i (invalid where wrt[i] does not reach
  /// the loss). `loss` must be a scalar (else ShapeError). A node used by
  /// several ops accumulates their gradients. Only nodes on a path from some
  /// wrt to the loss get a gradient: data inputs cost nothing.
  std::vector<Value> gradients(Value loss, std::span<const Value> wrt, float seed = 1.0f);
  /// The same with `seed` a scalar {} float32 value of the graph (an
  /// input set per run: gradient accumulation's rows / logical batch).
  /// Throws ShapeError when `seed` is not a scalar.
  std::vector<Value> gradients(Value loss, std::span<const Value> wrt, Value seed);

 private:
  Value add_leaf(NodeRole role, const std::string& name, const Shape& shape, DType dtype, const Tensor& bound,
                 bool trainable);
  std::vector<Node> nodes_;
  std::unordered_map<const void*, int32_t> bound_index_;  // tensor memory -> leaf (shared layers)
  Tensor rng_counter_;
  Value advanced_counter_;
};

/// Where every node's memory goes when a graph runs.
struct MemoryPlan {
  std::vector<int64_t> offset;    ///< per node: byte offset in the arena; -1 when not in the arena
  std::vector<int32_t> schedule;  ///< nodes to run, in order (dead nodes pruned)
  std::vector<int32_t> views;     ///< view nodes (Reshape): no kernel, their input's memory
  std::vector<int64_t> view_offsets;  ///< per view: where it starts, in bytes from its input's memory (0; or
                                      ///< AttachedBatchStats: the statistics a Conv2D writes just before its output)
  size_t arena_bytes = 0;  ///< the arena's size in bytes
};

/// Plans one arena for every intermediate of `graph` from liveness: a node's
/// slot is reused once its last consumer has run. `outputs` stay live to the
/// end. Ops that update state in place are always scheduled. Slots are 64-byte
/// aligned; an op's output never shares memory with its own inputs.
MemoryPlan plan_memory(const Graph& graph, std::span<const Value> outputs);

}  // namespace tensorgrad
