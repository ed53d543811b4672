#pragma once
// Runs a planned graph on a backend's device: the CPU by default. Each
// executable owns its arena: separate executables never share scratch memory,
// so a prediction can never disturb a training step's buffers.
#include <array>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "tensorgrad/backend/backend.h"
#include "tensorgrad/graph/fuse.h"
#include "tensorgrad/graph/graph.h"

namespace tensorgrad {

/// How a graph's sizes follow its batch, learnt by comparing the same graph
/// built at two batch sizes (make_batch_rule): per node, each dimension of
/// its shape and of attrs.shape is fixed or `factor * rows`, and the op's
/// float parameter (OpInfo::param) is fixed or, where the op list declares it
/// BatchScaling::InverseRows, `constant / rows` (a mean over the batch).
/// Every other attribute must be equal at both sizes. With it, an Executable
/// planned for `max_rows` runs any batch up to it in the same arena.
struct BatchRule {
  /// Per dimension: 0 when fixed; else the size per row.
  using Factors = std::array<int64_t, Shape::kMaxRank>;
  int64_t max_rows = 0;                                   ///< 0: no rule (exact batch only)
  /// Per node: how its shape and its attrs.shape follow the rows.
  ///@{
  std::vector<Factors> shape, attr_shape;
  ///@}
  std::vector<double> param_times_rows;                   ///< per node: 0 when the op's parameter is fixed
  std::vector<float OpAttrs::*> param_field;              ///< per node: the field param_times_rows sets
};

/// Compares `at_max` (built for `max_rows`) with `probe` (the same
/// construction for `probe_rows`, 2 <= probe_rows < max_rows). Throws
/// ValueError naming the first node whose op, inputs or attributes differ in
/// any other way than sizes proportional to the batch (such a graph needs a
/// plan per batch size).
BatchRule make_batch_rule(const Graph& at_max, int64_t max_rows, const Graph& probe, int64_t probe_rows);
/// A planned graph with its arena, run by one backend: it fuses and plans
/// the graph, lays it out as a GraphProgram and has the backend compile
/// that once (Backend::compile); runs, binds and set_rows go through the
/// result. Everything above the backend (optimizer contexts, predict plans,
/// the Trainer, target updates) runs graphs through this class only.
class Executable {
 public:
  /// Fuses and plans `graph` so that `outputs` can be read after a run, and
  /// allocates the arena on the CPU. Work below about a million flops runs on the
  /// calling thread only (threads would cost more than they save).
  Executable(Graph graph, std::vector<Value> outputs);
  /// The same, runnable at any batch up to rule.max_rows (set_rows; an empty
  /// rule: the planned batch only), on `backend` (null: the CPU). The graph
  /// is first fused (fuse) with the rewrites `fusion` allows and the backend
  /// has kernels for (Backend::fusions); the batch rule, made from unfused
  /// graphs, follows the rewrites. Throws StateError when the backend lacks
  /// a kernel for an op of the graph (Backend::check_kernels) or a weight or
  /// state tensor of the graph lives on another device than the backend's.
  Executable(Graph graph, std::vector<Value> outputs, BatchRule rule,
             std::shared_ptr<const Backend> backend = nullptr, const FusionOptions& fusion = {});
  ~Executable();
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;

  /// The graph as planned (after fusion).
  const Graph& graph() const { return graph_; }
  /// The backend that runs it.
  const Backend& backend() const { return *backend_; }

  /// Binds an input leaf to `tensor` for the following runs. A tensor on
  /// the backend's device is used in place, without a copy (it must stay
  /// alive while runs use it); one on another device (a host batch for a
  /// device backend) is copied now into a buffer the executable keeps for
  /// that input, allocated at its first such bind for the planned batch (so
  /// later binds allocate nothing), as a GPU step uploads its batch. Throws
  /// ShapeError or TypeError when it does not match the input's shape or
  /// dtype exactly, StateError for an undefined tensor or a node that is
  /// not an input, and as copy_bytes for a pair of devices with no copy.
  void bind(Value input, const Tensor& tensor);

  /// A node's result (valid until the next run) as a tensor sharing its
  /// memory on the backend's device: read it with copies (to_vector, to).
  /// Throws StateError for a node without memory in this plan.
  Tensor output(Value v) const;
  /// Copies a node's result (as the last run left it) into `dst`, a backend
  /// copy: what predict uses to hand results out. `dst` must hold exactly as
  /// many elements of the node's dtype (its shape may differ: the copy is
  /// row-major, e.g. {rows, 6} for a {rows, 2, 3} output). Allocates
  /// nothing (unlike output(), whose view holds a small allocation). Throws
  /// StateError for a node without memory in this plan or an undefined dst,
  /// ShapeError for another element count, TypeError for another dtype.
  void copy_output(Value v, const Tensor& dst) const;
  /// The first element of a float32 output, copied to the host (a device
  /// backend's read-back of the loss). Throws as data_ptr.
  float scalar(Value v) const;
  /// The device address of a node's result (no Tensor made, so nothing
  /// allocated): for the backend's kernels and for comparing addresses,
  /// never for host reads on a device other than the CPU. Throws
  /// StateError for a node without memory in this plan.
  const void* data_ptr(Value v) const;

  /// Runs every scheduled node with index in [first_node, last_node), by
  /// the backend's compiled form of this plan (Backend::compile, made once
  /// when the graph was planned; told here first of any set_rows or bind
  /// that changed it since the last run). Allocates nothing on the CPU.
  /// Throws StateError when a node in the range reads an input that is not
  /// bound, and what the backend's kernels throw.
  void run(size_t first_node = 0, size_t last_node = SIZE_MAX);

  /// Runs the next runs on the first `rows` rows of every batch-sized value
  /// (inputs are then bound with `rows` rows). Allocates nothing. Throws
  /// ShapeError for rows outside [1, max_rows] or, without a rule, other
  /// than the planned batch.
  void set_rows(int64_t rows);
  /// The rows the next run covers.
  int64_t rows() const { return rows_; }
  /// The most rows set_rows takes (0 without a batch rule).
  int64_t max_rows() const { return rule_.max_rows; }

  /// The graph's dropout counter (Graph::rng_counter_tensor), which the
  /// graph's own AdvanceCounter op moves by one in every run from node 0
  /// before any dropout reads it; 0 for a graph without dropout. Reading and
  /// setting it are copies to and from that persistent tensor (a graph
  /// without dropout ignores a set).
  ///@{
  uint64_t rng_counter() const;
  void set_rng_counter(uint64_t c);
  ///@}
  /// The arena's size in bytes (MemoryPlan::arena_bytes).
  size_t arena_bytes() const { return plan_.arena_bytes; }

 private:
  void build();  // checks, plans, allocates, lays out the program and compiles it
  void bind_views();  // points every view node at its input's memory (MemoryPlan::view_offsets)
  void update_program();  // brings the program's addresses up to date and tells compiled_ what changed
  // The storage that holds node v's result and the byte offset there.
  std::pair<std::shared_ptr<Storage>, size_t> locate(Value v, const char* call) const;

  Graph graph_;
  std::vector<Value> outputs_;
  std::shared_ptr<const Backend> backend_;
  MemoryPlan plan_;
  std::vector<void*> data_;  // per node: where its result lives (null for unbound inputs)
  std::vector<Tensor> bound_;    // per input node: what bind gave it on the device (whose storage holds it)
  std::vector<Tensor> staging_;  // per input node: the device buffer a bind from another device copies into
  // Built once; set_rows and bind rewrite it in place and tell compiled_
  // (declared after it: it reads the program until it is destroyed).
  GraphProgram program_;
  std::vector<int32_t> arg_node_;  // program_.args[k] shows node arg_node_[k]
  std::unique_ptr<CompiledGraph> compiled_;
  ProgramChange pending_;   // what compiled_ has not been told yet
  bool all_bound_ = false;  // every argument has an address (as of the last update)
  BatchRule rule_;
  int64_t rows_ = 0;           // the batch the program describes now (the first input's rows)
  std::vector<Shape> shapes_;  // per node: its shape at rows_
};

}  // namespace tensorgrad
