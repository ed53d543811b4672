#include "tensorgrad/backend/executable.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "core/host_copy.h"
#include "kernels/kernels.h"
#include "ops/op_table.h"
#include "tensorgrad/core/error.h"
#include "tensorgrad/core/memory.h"

namespace tensorgrad {

namespace {

// The work the threading decision sums and the profile reports: one count
// for both (the op list's flop rules, ops/op_table.h).
double node_flops(const Graph& g, const Node& n) {
  std::array<Shape, Node::kMaxInputs> in;
  for (int k = 0; k < n.n_inputs; ++k) in[size_t(k)] = g.node(n.inputs[size_t(k)]).shape;
  return op_flops(n.op, n.attrs, {in.data(), size_t(n.n_inputs)}, n.shape);
}

// Refuses an arena larger than the machine before allocating it, naming the
// batch (the rows of the first input) that made it so large.
void check_arena(const Graph& g, size_t bytes) {
  std::string what = "this graph's arena";
  for (const Node& n : g.nodes())
    if (n.role == NodeRole::Input && n.shape.rank() > 0) {
      what += " for a batch of " + std::to_string(n.shape[0]) + " rows";
      break;
    }
  check_fits_in_memory(bytes, what, "use a smaller batch size");
}
}  // namespace

BatchRule make_batch_rule(const Graph& big, int64_t max_rows, const Graph& small, int64_t probe_rows) {
  if (probe_rows < 2 || probe_rows >= max_rows)
    throw ValueError("make_batch_rule: the probe batch must be in [2, max_rows); got " + std::to_string(probe_rows) +
                     " for " + std::to_string(max_rows));
  const auto& a = big.nodes();
  const auto& b = small.nodes();
  auto fail = [&](size_t i, const std::string& why) {
    throw ValueError("the graph does not scale with its batch at node " + std::to_string(i) + " (" +
                     op_info(a[i].op).name + (a[i].name.empty() ? "" : " '" + a[i].name + "'") + "): " + why);
  };
  if (a.size() != b.size())
    throw ValueError("the graph does not scale with its batch: " + std::to_string(a.size()) + " nodes at " +
                     std::to_string(max_rows) + " rows, " + std::to_string(b.size()) + " at " + std::to_string(probe_rows));
  auto factors = [&](size_t i, const Shape& x, const Shape& y, BatchRule::Factors& f) {
    f.fill(0);
    if (x.rank() != y.rank()) fail(i, "rank " + x.str() + " against " + y.str());
    for (int d = 0; d < x.rank(); ++d) {
      if (x[d] == y[d]) continue;
      if (x[d] % max_rows != 0 || x[d] / max_rows * probe_rows != y[d])
        fail(i, "size " + x.str() + " against " + y.str() + " is not proportional to the batch");
      f[size_t(d)] = x[d] / max_rows;
    }
  };
  BatchRule rule;
  rule.max_rows = max_rows;
  rule.shape.resize(a.size());
  rule.attr_shape.resize(a.size());
  rule.param_times_rows.assign(a.size(), 0.0);
  rule.param_field.assign(a.size(), nullptr);
  for (size_t i = 0; i < a.size(); ++i) {
    const Node &x = a[i], &y = b[i];
    if (x.op != y.op || x.role != y.role || x.n_inputs != y.n_inputs || x.dtype != y.dtype) fail(i, "another op");
    for (int k = 0; k < x.n_inputs; ++k)
      if (x.inputs[size_t(k)] != y.inputs[size_t(k)]) fail(i, "other inputs");
    if (x.role == NodeRole::Parameter || x.role == NodeRole::State) {
      if (x.bound.raw() != y.bound.raw()) fail(i, "another persistent tensor");
    }
    factors(i, x.shape, y.shape, rule.shape[i]);
    factors(i, x.attrs.shape, y.attrs.shape, rule.attr_shape[i]);
    // Past the sizes and the parameter the op list lets scale, every field
    // must be equal: OpAttrs::operator== compares them all, a field added
    // later included.
    OpAttrs p = x.attrs, q = y.attrs;
    p.shape = q.shape = Shape{};
    const OpInfo& info = op_info(x.op);
    if (info.param_batch == BatchScaling::InverseRows && p.*info.param != q.*info.param) {
      const float pv = p.*info.param, qv = q.*info.param;
      const double at_max = double(pv) * double(max_rows), at_probe = double(qv) * double(probe_rows);
      if (std::fabs(at_max - at_probe) > 1e-6 * std::max(std::fabs(at_max), std::fabs(at_probe)))
        fail(i, "a constant " + std::to_string(pv) + " that is not proportional to 1 / batch");
      rule.param_times_rows[i] = at_max;
      rule.param_field[i] = info.param;
      p.*info.param = q.*info.param = 0.0f;
    }
    if (p.window != q.window) fail(i, "another window");
    if (!(p == q)) fail(i, "other attributes");
  }
  return rule;
}

Executable::Executable(Graph graph, std::vector<Value> outputs)
    : Executable(std::move(graph), std::move(outputs), BatchRule{}, nullptr, FusionOptions{}) {}

Executable::Executable(Graph graph, std::vector<Value> outputs, BatchRule rule, std::shared_ptr<const Backend> backend,
                       const FusionOptions& fusion)
    : graph_(std::move(graph)), outputs_(std::move(outputs)), backend_(backend ? std::move(backend) : cpu_backend()) {
  if (rule.max_rows > 0 && rule.shape.size() != graph_.size())
    throw ValueError("Executable: the batch rule was made for another graph");
  const std::vector<int32_t> attrs_from = fuse(graph_, fusion & backend_->fusions());
  if (rule.max_rows > 0)  // a fused node's attributes are its folded producer's, and scale as those did
    for (size_t i = 0; i < attrs_from.size(); ++i)
      if (attrs_from[i] >= 0) {
        rule.attr_shape[i] = rule.attr_shape[size_t(attrs_from[i])];
        rule.param_times_rows[i] = rule.param_times_rows[size_t(attrs_from[i])];
        rule.param_field[i] = rule.param_field[size_t(attrs_from[i])];
      }
  rule_ = std::move(rule);
  if (rule_.max_rows > 0) rows_ = rule_.max_rows;
  build();
}

void Executable::build() {
  backend_->check_kernels(graph_);
  const auto& nodes = graph_.nodes();
  for (const Node& n : nodes)
    if (n.bound.defined() && n.bound.device() != backend_->device())
      throw StateError("'" + n.name + "' lives on " + device_name(n.bound.device()) + ", but the graph runs on the " +
                       backend_->name() + " backend (" + device_name(backend_->device()) +
                       "); copy the model's state there first (Tensor::to)");
  plan_ = plan_memory(graph_, outputs_);
  check_arena(graph_, plan_.arena_bytes);
  try {
    program_.arena = backend_->allocate(plan_.arena_bytes);
  } catch (const MemoryError&) {
    throw MemoryError("out of memory: the graph needs an arena of " + std::to_string(plan_.arena_bytes) + " bytes");
  }
  data_.assign(nodes.size(), nullptr);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (plan_.offset[i] >= 0) data_[i] = static_cast<char*>(program_.arena->data()) + plan_.offset[i];
    else if (nodes[i].bound.defined()) data_[i] = nodes[i].bound.raw();
  }
  bind_views();
  for (int32_t i : plan_.schedule) {
    const Node& n = nodes[size_t(i)];
    if (op_info(n.op).in_place) data_[size_t(i)] = data_[size_t(n.inputs[0].id)];
    GraphProgram::Step step{i, n.op, n.attrs, uint32_t(arg_node_.size()), uint32_t(n.n_inputs), node_flops(graph_, n)};
    program_.flops += step.flops;
    program_.steps.push_back(step);
    arg_node_.push_back(i);
    for (Value in : n.input_values()) arg_node_.push_back(in.id);
  }
  program_.args.resize(arg_node_.size());
  for (size_t k = 0; k < arg_node_.size(); ++k) {
    const Node& n = nodes[size_t(arg_node_[k])];
    program_.args[k] = {data_[size_t(arg_node_[k])], n.shape, n.dtype};
  }
  bound_.resize(nodes.size());
  staging_.resize(nodes.size());
  for (const Node& n : nodes) {
    shapes_.push_back(n.shape);
    if (rows_ == 0 && n.role == NodeRole::Input && n.shape.rank() > 0) rows_ = n.shape[0];
  }
  program_.graph = &graph_;
  program_.rows = rows_;
  all_bound_ = std::all_of(program_.args.begin(), program_.args.end(), [](const KernelArg& a) { return a.data; });
  compiled_ = backend_->compile(program_);
}

void Executable::bind_views() {
  const auto& nodes = graph_.nodes();
  for (size_t k = 0; k < plan_.views.size(); ++k) {
    const size_t v = size_t(plan_.views[k]);
    char* input = static_cast<char*>(data_[size_t(nodes[v].inputs[0].id)]);
    data_[v] = input ? input + plan_.view_offsets[k] : nullptr;
  }
}

void Executable::set_rows(int64_t rows) {
  if (rows == rows_) return;
  if (rule_.max_rows == 0 || rows < 1 || rows > rule_.max_rows)
    throw ShapeError("this plan runs " +
                     (rule_.max_rows == 0 ? "only the batch of " + std::to_string(rows_) + " rows it was planned for"
                                          : "batches of 1 to " + std::to_string(rule_.max_rows) + " rows") +
                     "; got " + std::to_string(rows));
  const auto& nodes = graph_.nodes();
  auto scaled = [rows](Shape s, const BatchRule::Factors& f) {
    for (int d = 0; d < s.rank(); ++d)
      if (f[size_t(d)] != 0) s.set(d, f[size_t(d)] * rows);
    return s;
  };
  for (size_t i = 0; i < nodes.size(); ++i) shapes_[i] = scaled(nodes[i].shape, rule_.shape[i]);
  for (GraphProgram::Step& step : program_.steps) {
    const size_t i = size_t(step.node);
    step.attrs.shape = scaled(nodes[i].attrs.shape, rule_.attr_shape[i]);
    if (rule_.param_times_rows[i] != 0.0) step.attrs.*rule_.param_field[i] = float(rule_.param_times_rows[i] / double(rows));
  }
  for (size_t k = 0; k < arg_node_.size(); ++k) program_.args[k].shape = shapes_[size_t(arg_node_[k])];
  rows_ = program_.rows = rows;
  pending_.rows = true;
}

Executable::~Executable() = default;

uint64_t Executable::rng_counter() const {
  const Tensor& c = graph_.rng_counter_tensor();
  return c.defined() ? uint64_t(detail::read_element<int64_t>(c, 0)) : 0;
}

void Executable::set_rng_counter(uint64_t c) {
  const Tensor& t = graph_.rng_counter_tensor();
  if (t.defined()) detail::write_element(t, 0, int64_t(c));
}

void Executable::bind(Value input, const Tensor& tensor) {
  const Node& n = graph_.node(input);
  if (n.role != NodeRole::Input) throw StateError("bind: node '" + n.name + "' is not an input");
  if (!tensor.defined()) throw StateError("bind: input '" + n.name + "' given an undefined tensor");
  const Shape& want = shapes_[size_t(input.id)];
  if (tensor.shape() != want)
    throw ShapeError("input '" + n.name + "' expects shape " + want.str() + "; got " + tensor.shape().str());
  if (tensor.dtype() != n.dtype)
    throw TypeError("input '" + n.name + "' expects " + dtype_name(n.dtype) + "; got " + dtype_name(tensor.dtype()));
  Tensor& bound = bound_[size_t(input.id)];
  if (tensor.device() == backend_->device()) {
    bound = tensor;
  } else {
    // Kernels read only their own device's memory: the batch is uploaded
    // into a buffer of the planned (largest) batch, made once per input.
    Tensor& staging = staging_[size_t(input.id)];
    if (!staging.defined()) staging = Tensor::empty(n.shape, n.dtype, backend_->device());
    if (tensor.nbytes())
      copy_bytes(*staging.storage(), staging.storage_offset(), *tensor.storage(), tensor.storage_offset(),
                 tensor.nbytes());
    bound = staging;
  }
  if (data_[size_t(input.id)] == bound.raw()) return;
  data_[size_t(input.id)] = bound.raw();
  pending_.addresses = true;
}

std::pair<std::shared_ptr<Storage>, size_t> Executable::locate(Value v, const char* call) const {
  graph_.node(v);
  const void* p = data_[size_t(v.id)];
  if (!p) throw StateError(std::string(call) + ": node " + std::to_string(v.id) + " has no memory in this plan");
  const char* at = static_cast<const char*>(p);
  const Storage& arena = *program_.arena;
  const char* base = static_cast<const char*>(arena.data());
  if (at >= base && at < base + arena.nbytes()) return {program_.arena, size_t(at - base)};
  // A bound input or a persistent tensor, or a view of one or an in-place
  // update of one: the tensor that owns the memory is found by walking the
  // nodes that share their first input's memory back to it.
  const Node* owner = &graph_.node(v);
  Value id = v;
  while (!owner->bound.defined() && owner->role != NodeRole::Input && owner->n_inputs > 0 &&
         (op_info(owner->op).view || op_info(owner->op).in_place)) {
    id = owner->inputs[0];
    owner = &graph_.node(id);
  }
  const Tensor& t = owner->bound.defined() ? owner->bound : bound_[size_t(id.id)];
  if (!t.defined()) throw StateError(std::string(call) + ": node " + std::to_string(v.id) + " has no memory of its own");
  return {t.storage(), t.storage_offset() + size_t(at - static_cast<const char*>(t.raw()))};
}

Tensor Executable::output(Value v) const {
  const auto [storage, offset] = locate(v, "output");
  return Tensor::adopt(storage, shapes_[size_t(v.id)], graph_.node(v).dtype, offset);
}

const void* Executable::data_ptr(Value v) const {
  graph_.node(v);
  const void* p = data_[size_t(v.id)];
  if (!p) throw StateError("node " + std::to_string(v.id) + " has no memory in this plan");
  return p;
}

void Executable::copy_output(Value v, const Tensor& dst) const {
  const Node& n = graph_.node(v);
  const void* p = data_[size_t(v.id)];
  if (!p) throw StateError("copy_output: node " + std::to_string(v.id) + " has no memory in this plan");
  if (!dst.defined()) throw StateError("copy_output: the destination is an undefined tensor");
  const Shape& shape = shapes_[size_t(v.id)];
  if (dst.numel() != shape.numel())
    throw ShapeError("copy_output: node " + std::to_string(v.id) + " holds " + shape.str() + " (" +
                     std::to_string(shape.numel()) + " elements); the destination " + dst.shape().str() + " holds " +
                     std::to_string(dst.numel()) + ". Pass a tensor of as many elements");
  if (dst.dtype() != n.dtype)
    throw TypeError(std::string("copy_output: node ") + std::to_string(v.id) + " is " + dtype_name(n.dtype) +
                    "; the destination is " + dtype_name(dst.dtype()));
  if (!dst.nbytes() || (dst.raw() == p && dst.device() == backend_->device())) return;
  const auto [storage, offset] = locate(v, "copy_output");
  copy_bytes(*dst.storage(), dst.storage_offset(), *storage, offset, dst.nbytes());
}

float Executable::scalar(Value v) const {
  const auto [storage, offset] = locate(v, "scalar");
  float x;
  storage->copy_to_host(offset, &x, sizeof x);
  return x;
}

void Executable::update_program() {
  if (pending_.addresses) {
    bind_views();
    for (size_t k = 0; k < arg_node_.size(); ++k) program_.args[k].data = data_[size_t(arg_node_[k])];
    all_bound_ = std::all_of(program_.args.begin(), program_.args.end(), [](const KernelArg& a) { return a.data; });
  }
  const ProgramChange change = pending_;
  pending_ = {};
  compiled_->update(change);
}

void Executable::run(size_t first_node, size_t last_node) {
  if (pending_.rows || pending_.addresses) update_program();
  const auto by_node = [](const GraphProgram::Step& step, size_t node) { return size_t(step.node) < node; };
  const auto& steps = program_.steps;
  const size_t first = size_t(std::lower_bound(steps.begin(), steps.end(), first_node, by_node) - steps.begin());
  const size_t last = size_t(std::lower_bound(steps.begin() + ptrdiff_t(first), steps.end(), last_node, by_node) -
                             steps.begin());
  if (!all_bound_)  // a step that reads an unbound input is refused; the others may run
    for (size_t s = first; s < last; ++s)
      for (uint32_t k = 0; k <= steps[s].n_inputs; ++k)
        if (!program_.args[steps[s].first_arg + k].data)
          throw StateError("run: input '" + graph_.nodes()[size_t(arg_node_[steps[s].first_arg + k])].name +
                           "' is not bound");
  compiled_->run(first, last);
}

}  // namespace tensorgrad
