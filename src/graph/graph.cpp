#include "tensorgrad/graph/graph.h"

#include <atomic>

#include "tensorgrad/core/error.h"
#include "tensorgrad/ops/gradients.h"

namespace tensorgrad {

namespace {
std::atomic<bool> fold_relu{true};
std::atomic<bool> fold_add{true};
std::atomic<bool> fold_batch_stats{true};
}  // namespace

void set_batch_stats_folding(bool enabled) { fold_batch_stats.store(enabled); }
bool batch_stats_folding() { return fold_batch_stats.load(); }

void set_relu_folding(bool enabled) { fold_relu.store(enabled); }
bool relu_folding() { return fold_relu.load(); }
void set_add_folding(bool enabled) { fold_add.store(enabled); }
bool add_folding() { return fold_add.load(); }

std::optional<Value> Graph::fold_add_into_producer(Value a, Value b) {
  if (node(a).shape != node(b).shape || node(a).dtype != DType::Float32 || node(b).dtype != DType::Float32)
    return std::nullopt;
  for (int side = 0; side < 2; ++side) {
    const Value into = side == 0 ? a : b, other = side == 0 ? b : a;
    const Node& p = node(into);
    // A producer whose output another op already reads would run twice
    // (folded and not): only an output nothing reads yet is folded.
    if (p.role != NodeRole::Op || p.attrs.flags != 0 || uses_[size_t(into.id)] != 0) continue;
    // A batch norm's output plus a residual: BatchNorm's fifth input.
    // Conv2DBackwardInput's output plus another gradient: its third input.
    const bool folds = (p.op == OpKind::BatchNorm && p.n_inputs == 4) ||
                       (p.op == OpKind::Conv2DBackwardInput && p.n_inputs == 2);
    if (!folds) continue;
    std::array<Value, Node::kMaxInputs> inputs = p.inputs;  // p moves when nodes_ grows
    const int n = p.n_inputs;
    const OpKind op = p.op;
    const OpAttrs attrs = p.attrs;
    inputs[size_t(n)] = other;
    return apply(op, std::span<const Value>(inputs.data(), size_t(n + 1)), attrs);
  }
  return std::nullopt;
}

const Node& Graph::node(Value v) const {
  if (v.id < 0 || size_t(v.id) >= nodes_.size())
    throw IndexError("value " + std::to_string(v.id) + " is not a node of this graph (" +
                     std::to_string(nodes_.size()) + " nodes)");
  return nodes_[size_t(v.id)];
}

Value Graph::add_leaf(NodeRole role, const std::string& name, const Shape& shape, DType dtype, const Tensor& bound,
                      bool trainable) {
  Node n;
  n.role = role;
  n.name = name;
  n.shape = shape;
  n.dtype = dtype;
  n.bound = bound;
  n.trainable = trainable;
  nodes_.push_back(std::move(n));
  uses_.push_back(0);
  return Value{int32_t(nodes_.size() - 1)};
}

Value Graph::input(const std::string& name, const Shape& shape, DType dtype) {
  return add_leaf(NodeRole::Input, name, shape, dtype, Tensor{}, false);
}

Value Graph::parameter(const Tensor& tensor, const char* name, bool trainable) {
  if (!tensor.defined()) throw StateError(std::string("parameter '") + name + "' is an undefined tensor");
  auto it = bound_index_.find(tensor.raw());
  if (it != bound_index_.end()) return Value{it->second};
  Value v = add_leaf(NodeRole::Parameter, name, tensor.shape(), tensor.dtype(), tensor, trainable);
  bound_index_[tensor.raw()] = v.id;
  return v;
}

Value Graph::state(const Tensor& tensor, const std::string& name) {
  if (!tensor.defined()) throw StateError("state '" + name + "' is an undefined tensor");
  Value v = add_leaf(NodeRole::State, name, tensor.shape(), tensor.dtype(), tensor, false);
  bound_index_[tensor.raw()] = v.id;
  return v;
}

std::optional<Builder::Producer> Graph::producer(Value v) const {
  const Node& n = node(v);
  if (n.role != NodeRole::Op) return std::nullopt;
  return Producer{n.op, n.attrs, n.n_inputs > 0 ? n.inputs[0] : Value{}, n.n_inputs > 1 ? n.inputs[1] : Value{},
                  n.n_inputs > 2 ? n.inputs[2] : Value{}, n.n_inputs};
}

Value Graph::apply(OpKind op, std::span<const Value> inputs, const OpAttrs& attrs) {
  if (inputs.size() > size_t(Node::kMaxInputs)) throw Error("too many inputs for one op");
  if (op == OpKind::Relu && inputs.size() == 1 && relu_folding()) {
    const Node& p = node(inputs[0]);
    if (p.role == NodeRole::Op && takes_relu_output(p.op) && !(p.attrs.flags & kReluOutput)) {
      OpAttrs folded = p.attrs;
      folded.flags |= kReluOutput;
      folded.flags &= ~kBatchStatsOutput;  // the statistics of p's output stay p's
      const std::array<Value, Node::kMaxInputs> p_inputs = p.inputs;  // p moves when nodes_ grows
      return apply(p.op, std::span<const Value>(p_inputs.data(), size_t(p.n_inputs)), folded);
    }
  }
  if (op == OpKind::Add && inputs.size() == 2 && attrs.flags == 0 && add_folding())
    if (auto folded = fold_add_into_producer(inputs[0], inputs[1])) return *folded;
  if (op == OpKind::BatchNormStats && inputs.size() == 1 && batch_stats_folding()) {
    // Marking the Conv2D changes none of its output's bits, so ops that
    // already read it are unaffected.
    const Node& p = node(inputs[0]);
    if (p.role == NodeRole::Op && p.op == OpKind::Conv2D && p.dtype == DType::Float32 && p.shape.rank() == 4) {
      nodes_[size_t(inputs[0].id)].attrs.flags |= kBatchStatsOutput;
      return apply(OpKind::AttachedBatchStats, inputs, attrs);
    }
  }
  if (op == OpKind::AttachedBatchStats && inputs.size() == 1) {
    const Node& p = node(inputs[0]);
    if (p.role != NodeRole::Op || p.op != OpKind::Conv2D || !(p.attrs.flags & kBatchStatsOutput))
      throw ValueError(std::string("attached_batch_stats: the input must be the output of a Conv2D with the "
                                   "kBatchStatsOutput flag; got ") +
                       (p.role == NodeRole::Op ? op_info(p.op).name : "a leaf") +
                       ". Apply BatchNormStats, which the graph folds into a Conv2D that makes its input");
  }
  Shape shapes[Node::kMaxInputs];
  DType dtypes[Node::kMaxInputs];
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Node& in = node(inputs[i]);
    shapes[i] = in.shape;
    dtypes[i] = in.dtype;
  }
  OpSignature sig = infer_signature(op, {shapes, inputs.size()}, {dtypes, inputs.size()}, attrs);
  if (op_info(op).in_place && node(inputs[0]).role == NodeRole::Op)
    throw Error(std::string(op_info(op).name) + " updates its first input in place; it must be a persistent tensor");
  Node n;
  n.op = op;
  n.attrs = attrs;
  for (size_t i = 0; i < inputs.size(); ++i) n.inputs[i] = inputs[i];
  n.n_inputs = int(inputs.size());
  n.shape = sig.shape;
  n.dtype = sig.dtype;
  for (size_t i = 0; i < inputs.size(); ++i) ++uses_[size_t(inputs[i].id)];
  nodes_.push_back(std::move(n));
  uses_.push_back(0);
  return Value{int32_t(nodes_.size() - 1)};
}

void Graph::set_rng_counter(const Tensor& counter) {
  if (advanced_counter_.valid())
    throw StateError("set_rng_counter: this graph's dropout already draws from its counter; bind it before the first "
                     "dropout");
  if (!counter.defined()) throw StateError("set_rng_counter: the counter is an undefined tensor");
  if (counter.dtype() != DType::Int64)
    throw TypeError(std::string("set_rng_counter: the counter must be int64; got ") + dtype_name(counter.dtype()));
  if (counter.shape() != Shape{1})
    throw ShapeError("set_rng_counter: the counter must be {1}; got " + counter.shape().str());
  rng_counter_ = counter;
}

Value Graph::rng_counter() {
  if (advanced_counter_.valid()) return advanced_counter_;
  if (!rng_counter_.defined()) rng_counter_ = Tensor::zeros(Shape{1}, DType::Int64);
  advanced_counter_ = apply(OpKind::AdvanceCounter, {state(rng_counter_, "rng_counter")});
  return advanced_counter_;
}

std::vector<Value> Graph::trainable_parameters() const {
  std::vector<Value> out;
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].role == NodeRole::Parameter && nodes_[i].trainable) out.push_back(Value{int32_t(i)});
  return out;
}

std::vector<Value> Graph::gradients(Value loss, std::span<const Value> wrt, float seed) {
  const Shape loss_shape = node(loss).shape;
  if (loss_shape.numel() != 1) throw ShapeError("gradients: the loss must be a scalar; got shape " + loss_shape.str());
  return gradients(loss, wrt, fill(Shape{}, seed));
}

namespace {

// The node list as the ops layer's tape: node i is the application whose
// output is Value{i}. Holds the vector, not its data, since the walk appends
// gradient nodes to it.
class NodeTape final : public Tape {
 public:
  explicit NodeTape(const std::vector<Node>& nodes) : nodes_(nodes) {}
  size_t size() const override { return nodes_.size(); }
  Application application(size_t i) const override {
    const Node& n = nodes_[i];
    return {n.op, n.attrs, n.input_values()};
  }

 private:
  const std::vector<Node>& nodes_;
};

static_assert(Node::kMaxInputs <= kMaxOpInputs, "the walk holds one node's inputs in kMaxOpInputs slots");

}  // namespace

std::vector<Value> Graph::gradients(Value loss, std::span<const Value> wrt, Value seed) {
  const Shape loss_shape = node(loss).shape;
  if (loss_shape.numel() != 1) throw ShapeError("gradients: the loss must be a scalar; got shape " + loss_shape.str());
  if (node(seed).shape.rank() != 0)
    throw ShapeError("gradients: the seed must be a scalar {}; got shape " + node(seed).shape.str());
  return backward_walk(*this, NodeTape(nodes_), loss, wrt, seed);
}

}  // namespace tensorgrad
