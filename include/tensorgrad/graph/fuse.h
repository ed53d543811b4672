#pragma once
// Fusion as a graph pass: after autodiff, before planning, patterns of ops
// are rewritten into the fused ops a backend has kernels for. Unfused
// graphs are always correct; a fused one computes the same values (the
// fused kernels are written to give the same bits) with fewer passes over
// memory. As TensorFlow's grappler remapper or XLA's fusion passes, the
// pass runs on the whole graph, so gradient rules stay pure math.
#include <cstdint>
#include <vector>

#include "tensorgrad/graph/graph.h"

namespace tensorgrad {

/// Which rewrites the fusion pass may make. Given per model at compile
/// (CompileTarget::fusion) and intersected with what the model's backend has
/// kernels for (Backend::fusions); the default is every rewrite.
struct FusionOptions {
  /// Relu(y) of a MatMul, Conv2D, BatchNorm or Add output becomes that op with
  /// kReluOutput (one pass over the activation fewer); on the gradient side,
  /// ReluBackward folds into the op that made its incoming gradient (a max or
  /// average pool's backward, a convolution's input gradient:
  /// kMaskNonPositive) or, after a BatchNorm with ReLU, into the batch norm's
  /// two backward ops (they mask by the recomputed x a + b > 0).
  bool relu = true;
  /// Add(a, b) where a is a BatchNorm's output (a residual block's shortcut)
  /// or a Conv2DBackwardInput's (two gradients of one input) and nothing
  /// else has read a yet: that op with b as its last input.
  bool add = true;
  /// BatchNormStats of a float Conv2D's output: the Conv2D writes the
  /// statistics beside its output (kBatchStatsOutput) and AttachedBatchStats
  /// reads them.
  bool batch_stats = true;

  /// No rewrite: the graph runs as written.
  static FusionOptions none() { return {false, false, false}; }
  /// The rewrites both allow.
  FusionOptions operator&(const FusionOptions& o) const {
    return {relu && o.relu, add && o.add, batch_stats && o.batch_stats};
  }
  /// The same rewrites allowed.
  bool operator==(const FusionOptions&) const = default;
};

/// Rewrites `graph` in place: each fused node replaces the node whose value
/// it computes (the Relu, the Add, the BatchNormStats, the ReluBackward, the
/// batch norm's backward ops), so every Value handle keeps its meaning and
/// the node count does not change; a producer that was folded into a
/// consumer stays in the graph and runs only if something else reads it.
/// Nodes are visited in order, so a rewrite sees the rewrites before it.
/// Returns, per node, the node whose attributes a rewritten node took (the
/// folded producer), or -1: an Executable's batch rule follows them. Does
/// not throw for a graph its builder accepted.
std::vector<int32_t> fuse(Graph& graph, const FusionOptions& options = {});

}  // namespace tensorgrad
