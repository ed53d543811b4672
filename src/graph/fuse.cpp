#include "tensorgrad/graph/fuse.h"

#include <array>

#include "tensorgrad/core/error.h"

namespace tensorgrad {

namespace {

// A rewrite: node `at` becomes `op` on `inputs` with `attrs`, taking the
// attributes of node `attrs_from`.
struct Rewrite {
  OpKind op;
  std::array<Value, Node::kMaxInputs> inputs{};
  int n_inputs = 0;
  OpAttrs attrs;
  int32_t attrs_from = -1;
};

Rewrite copy_of(const Node& p, Value from) {
  Rewrite r{p.op, p.inputs, p.n_inputs, p.attrs, from.id};
  return r;
}

class Fuser {
 public:
  Fuser(Graph& g, const FusionOptions& o) : g_(g), o_(o), seen_uses_(g.size(), 0), attrs_from_(g.size(), -1) {}

  std::vector<int32_t> run() {
    for (size_t i = 0; i < g_.size(); ++i) {
      const Value v{int32_t(i)};
      const Node& n = g_.node(v);
      if (n.role == NodeRole::Op) {
        if (std::optional<Rewrite> r = rewrite(n)) {
          g_.replace(v, r->op, {r->inputs.data(), size_t(r->n_inputs)}, r->attrs);
          attrs_from_[i] = r->attrs_from;
        }
      }
      for (Value in : g_.node(v).input_values()) ++seen_uses_[size_t(in.id)];
    }
    return std::move(attrs_from_);
  }

 private:
  const Node* op_node(Value v) const {
    const Node& n = g_.node(v);
    return n.role == NodeRole::Op ? &n : nullptr;
  }

  std::optional<Rewrite> rewrite(const Node& n) {
    // The ops a pattern ends in; every other op stays as it is.
    if (n.op == OpKind::Relu) return o_.relu ? relu_into_producer(n) : std::nullopt;
    if (n.op == OpKind::Add) return o_.add ? add_into_producer(n) : std::nullopt;
    if (n.op == OpKind::BatchNormStats) return o_.batch_stats ? stats_into_convolution(n) : std::nullopt;
    if (n.op == OpKind::ReluBackward) return o_.relu ? relu_gradient_into_producer(n) : std::nullopt;
    if (n.op == OpKind::BatchNormParamGrad || n.op == OpKind::BatchNormBackward)
      return o_.relu ? relu_gradient_into_batch_norm(n) : std::nullopt;
    return std::nullopt;
  }

  // Relu(p) -> p with kReluOutput; the statistics of p's output stay p's.
  std::optional<Rewrite> relu_into_producer(const Node& n) const {
    const Node* p = op_node(n.inputs[0]);
    if (!p || !takes_relu_output(p->op) || (p->attrs.flags & kReluOutput)) return std::nullopt;
    Rewrite r = copy_of(*p, n.inputs[0]);
    r.attrs.flags |= kReluOutput;
    r.attrs.flags &= ~kBatchStatsOutput;
    return r;
  }

  // Add(a, b) -> a's producer with b as its last input (or b's with a): a
  // batch norm's fifth input (the residual), a convolution input gradient's
  // third (another gradient of the same input). Only an output nothing has
  // read before the Add: otherwise the producer would run twice.
  std::optional<Rewrite> add_into_producer(const Node& n) const {
    if (n.attrs.flags != 0) return std::nullopt;
    const Node &a = g_.node(n.inputs[0]), &b = g_.node(n.inputs[1]);
    if (a.shape != b.shape || a.dtype != DType::Float32 || b.dtype != DType::Float32) return std::nullopt;
    for (int side = 0; side < 2; ++side) {
      const Value into = n.inputs[size_t(side)], other = n.inputs[size_t(1 - side)];
      const Node* p = op_node(into);
      if (!p || p->attrs.flags != 0 || seen_uses_[size_t(into.id)] != 0) continue;
      const bool folds = (p->op == OpKind::BatchNorm && p->n_inputs == 4) ||
                         (p->op == OpKind::Conv2DBackwardInput && p->n_inputs == 2);
      if (!folds) continue;
      Rewrite r = copy_of(*p, into);
      r.inputs[size_t(r.n_inputs++)] = other;
      return r;
    }
    return std::nullopt;
  }

  // BatchNormStats(conv) -> AttachedBatchStats(conv), the Conv2D marked to
  // write the statistics (which changes none of its output's bits, so ops
  // that already read it are unaffected).
  std::optional<Rewrite> stats_into_convolution(const Node& n) const {
    const Node* p = op_node(n.inputs[0]);
    if (!p || p->op != OpKind::Conv2D || p->dtype != DType::Float32 || p->shape.rank() != 4) return std::nullopt;
    g_.add_flags(n.inputs[0], kBatchStatsOutput);
    Rewrite r{OpKind::AttachedBatchStats, n.inputs, n.n_inputs, n.attrs, -1};
    return r;
  }

  // Whether y is a BatchNorm with ReLU and no residual: its backward ops
  // mask the gradient themselves (relu_gradient_into_batch_norm).
  bool relu_batch_norm(Value y) const {
    const Node* p = op_node(y);
    return p && p->op == OpKind::BatchNorm && p->n_inputs == 4 && (p->attrs.flags & kReluOutput);
  }

  // ReluBackward(y, g) -> the op that made g, masking where y <= 0
  // (kMaskNonPositive): a max pool's backward of y, an average pool's
  // backward or a convolution's input gradient (the last two take y as an
  // extra last input). One pass over y fewer.
  std::optional<Rewrite> relu_gradient_into_producer(const Node& n) const {
    const Value y = n.inputs[0], g = n.inputs[1];
    const Node* p = op_node(g);
    if (!p || (p->attrs.flags & kMaskNonPositive) || relu_batch_norm(y)) return std::nullopt;
    Rewrite r = copy_of(*p, g);
    r.attrs.flags |= kMaskNonPositive;
    if (p->op == OpKind::MaxPool2DBackward && p->inputs[0] == y) return r;
    if (p->op == OpKind::AvgPool2DBackward) {
      r.inputs = {p->inputs[0], y};
      r.n_inputs = 2;
      return r;
    }
    if (p->op == OpKind::Conv2DBackwardInput && g_.node(y).dtype == DType::Float32) {
      r.inputs[size_t(r.n_inputs++)] = y;
      return r;
    }
    return std::nullopt;
  }

  // BatchNormParamGrad(x, stats, ReluBackward(y, g)) with y = BatchNorm(x,
  // stats, gamma, beta) with ReLU -> BatchNormParamGrad(x, stats, g, gamma,
  // beta) with kReluOutput; BatchNormBackward(x, stats, gamma, dy, sums) ->
  // BatchNormBackward(x, stats, gamma, g, sums, beta) with kReluOutput: g
  // counts only where the recomputed x a + b > 0, exactly where y > 0, so the
  // masked gradient is never written.
  std::optional<Rewrite> relu_gradient_into_batch_norm(const Node& n) const {
    const bool param = n.op == OpKind::BatchNormParamGrad;
    const size_t dy_at = param ? 2 : 3;
    if (n.attrs.flags != 0 || n.n_inputs != (param ? 3 : 5)) return std::nullopt;
    const Node* relu = op_node(n.inputs[dy_at]);
    if (!relu || relu->op != OpKind::ReluBackward || !relu_batch_norm(relu->inputs[0])) return std::nullopt;
    const Node& bn = g_.node(relu->inputs[0]);
    if (bn.inputs[0] != n.inputs[0] || bn.inputs[1] != n.inputs[1]) return std::nullopt;
    Rewrite r{n.op, n.inputs, n.n_inputs, n.attrs, -1};
    r.inputs[dy_at] = relu->inputs[1];
    r.attrs.flags = kReluOutput;
    if (param) {
      r.inputs[3] = bn.inputs[2];
      r.inputs[4] = bn.inputs[3];
      r.n_inputs = 5;
    } else {
      r.inputs[5] = bn.inputs[3];
      r.n_inputs = 6;
    }
    return r;
  }

  Graph& g_;
  FusionOptions o_;
  std::vector<int32_t> seen_uses_;  // per node: how many nodes before the current one read it
  std::vector<int32_t> attrs_from_;
};

}  // namespace

std::vector<int32_t> fuse(Graph& graph, const FusionOptions& options) { return Fuser(graph, options).run(); }

}  // namespace tensorgrad
