#include "tensorgrad/graph/graph.h"

#include <optional>

#include "tensorgrad/core/error.h"
#include "tensorgrad/ops/gradients.h"

namespace tensorgrad {

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

Value Graph::apply(OpKind op, std::span<const Value> inputs, const OpAttrs& attrs) {
  if (inputs.size() > size_t(Node::kMaxInputs)) throw Error("too many inputs for one op");
  if (op == OpKind::AttachedBatchStats && inputs.size() == 1) {
    const Node& p = node(inputs[0]);
    if (p.role != NodeRole::Op || p.op != OpKind::Conv2D || !(p.attrs.flags & kBatchStatsOutput))
      throw ValueError(std::string("attached_batch_stats: the input must be the output of a Conv2D with the "
                                   "kBatchStatsOutput flag; got ") +
                       (p.role == NodeRole::Op ? op_info(p.op).name : "a leaf") +
                       ". Apply BatchNormStats: the fusion pass (fuse) folds it into a Conv2D that makes its input");
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
  nodes_.push_back(std::move(n));
  return Value{int32_t(nodes_.size() - 1)};
}

void Graph::replace(Value v, OpKind op, std::span<const Value> inputs, const OpAttrs& attrs) {
  const Node& old = node(v);
  if (old.role != NodeRole::Op) throw Error("replace: node " + std::to_string(v.id) + " is a leaf");
  if (inputs.size() > size_t(Node::kMaxInputs)) throw Error("replace: too many inputs for one op");
  Shape shapes[Node::kMaxInputs];
  DType dtypes[Node::kMaxInputs];
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].id < 0 || inputs[i].id >= v.id)
      throw Error("replace: input " + std::to_string(inputs[i].id) + " of node " + std::to_string(v.id) +
                  " is not an earlier node");
    shapes[i] = node(inputs[i]).shape;
    dtypes[i] = node(inputs[i]).dtype;
  }
  const OpSignature sig = infer_signature(op, {shapes, inputs.size()}, {dtypes, inputs.size()}, attrs);
  if (sig.shape != old.shape || sig.dtype != old.dtype)
    throw Error(std::string("replace: ") + op_info(op).name + " gives " + sig.shape.str() + " " +
                dtype_name(sig.dtype) + " where node " + std::to_string(v.id) + " (" + op_info(old.op).name +
                ") gives " + old.shape.str() + " " + dtype_name(old.dtype));
  Node& n = nodes_[size_t(v.id)];
  n.op = op;
  n.attrs = attrs;
  n.inputs = {};
  for (size_t i = 0; i < inputs.size(); ++i) n.inputs[i] = inputs[i];
  n.n_inputs = int(inputs.size());
}

void Graph::add_flags(Value v, uint32_t flags) {
  node(v);  // throws for a handle outside the graph
  nodes_[size_t(v.id)].attrs.flags |= flags;
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
