#include "tensorgrad/backend/executable.h"

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "core/host_copy.h"
#include "kernels/kernels.h"
#include "ops/op_table.h"
#include "tensorgrad/core/error.h"
#include "tensorgrad/core/memory.h"

namespace tensorgrad {

namespace {

// TG_PROFILE=1 in the environment: time every kernel and print the totals per
// op at exit (a developer's tool; off by default, one branch per node), with
// the products' floating-point operations and the bytes each kernel reads
// and writes, for the roofline (bench/roofline.py). TG_PROFILE=shapes also
// splits each op by its input and output shapes (which layer costs what).
struct OpProfile {
  bool enabled = std::getenv("TG_PROFILE") != nullptr;
  bool by_shape = enabled && std::strcmp(std::getenv("TG_PROFILE"), "shapes") == 0;
  double seconds[size_t(OpKind::Count)] = {};
  int64_t calls[size_t(OpKind::Count)] = {};
  double flops[size_t(OpKind::Count)] = {};
  double bytes[size_t(OpKind::Count)] = {};
  struct Split {
    double seconds = 0;
    int64_t calls = 0;
  };
  std::map<std::string, Split> shapes;
  int64_t runs = 0;
  ~OpProfile() {
    if (!enabled) return;
    double total = 0;
    for (double t : seconds) total += t;
    std::fprintf(stderr, "TG_PROFILE: %.3f s in kernels, %lld runs\n", total, (long long)runs);
    for (size_t i = 0; i < size_t(OpKind::Count); ++i)
      if (calls[i])
        std::fprintf(stderr, "  %-32s %8.3f s %5.1f%% %10lld calls %12.3f GFLOP %12.3f GB\n", op_info(OpKind(i)).name,
                     seconds[i], 100.0 * seconds[i] / total, (long long)calls[i], flops[i] * 1e-9, bytes[i] * 1e-9);
    for (const auto& [key, split] : shapes)
      std::fprintf(stderr, "  %-80s %8.3f s %10lld calls\n", key.c_str(), split.seconds, (long long)split.calls);
  }
};
OpProfile g_profile;

// n's input shapes, in `in`.
std::span<const Shape> input_shapes(const Graph& g, const Node& n, std::array<Shape, Node::kMaxInputs>& in) {
  for (int k = 0; k < n.n_inputs; ++k) in[size_t(k)] = g.node(n.inputs[size_t(k)]).shape;
  return {in.data(), size_t(n.n_inputs)};
}

// The work the threading decision sums and the profile reports: one count
// for both (the op list's flop rules, ops/op_table.h).
double node_flops(const Graph& g, const Node& n) {
  std::array<Shape, Node::kMaxInputs> in;
  return op_flops(n.op, n.attrs, input_shapes(g, n, in), n.shape);
}

double profile_bytes(const Graph& g, const Node& n) {
  double b = double(n.shape.numel() * dtype_size(n.dtype));
  for (int k = 0; k < n.n_inputs; ++k) {
    const Node& in = g.node(n.inputs[size_t(k)]);
    b += double(in.shape.numel() * dtype_size(in.dtype));
  }
  return b;
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
  build();
  rule_ = std::move(rule);
  if (rule_.max_rows > 0) rows_ = rule_.max_rows;
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
    arena_ = backend_->allocate(plan_.arena_bytes);
  } catch (const MemoryError&) {
    throw MemoryError("out of memory: the graph needs an arena of " + std::to_string(plan_.arena_bytes) + " bytes");
  }
  data_.assign(nodes.size(), nullptr);
  double flops = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (plan_.offset[i] >= 0) data_[i] = static_cast<char*>(arena_->data()) + plan_.offset[i];
    else if (nodes[i].bound.defined()) data_[i] = nodes[i].bound.raw();
  }
  bind_views();
  for (int32_t i : plan_.schedule) {
    const Node& n = nodes[size_t(i)];
    if (op_info(n.op).in_place) data_[size_t(i)] = data_[size_t(n.inputs[0].id)];
    flops += node_flops(graph_, n);
    steps_.push_back({i, uint32_t(ref_node_.size())});
    ref_node_.push_back(i);
    for (Value in : n.input_values()) ref_node_.push_back(in.id);
  }
  refs_ = std::make_unique<KernelArg[]>(ref_node_.size());
  bound_.resize(nodes.size());
  staging_.resize(nodes.size());
  for (size_t k = 0; k < ref_node_.size(); ++k) {
    const Node& n = nodes[size_t(ref_node_[k])];
    refs_[k] = {data_[size_t(ref_node_[k])], n.shape, n.dtype};
  }
  launcher_ = backend_->make_launcher(flops);
  for (const Node& n : nodes) {
    shapes_.push_back(n.shape);
    attrs_.push_back(n.attrs);
    if (rows_ == 0 && n.role == NodeRole::Input && n.shape.rank() > 0) rows_ = n.shape[0];
  }
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
  for (size_t i = 0; i < nodes.size(); ++i) {
    shapes_[i] = scaled(nodes[i].shape, rule_.shape[i]);
    attrs_[i].shape = scaled(nodes[i].attrs.shape, rule_.attr_shape[i]);
    if (rule_.param_times_rows[i] != 0.0) attrs_[i].*rule_.param_field[i] = float(rule_.param_times_rows[i] / double(rows));
  }
  for (size_t k = 0; k < ref_node_.size(); ++k) refs_[k].shape = shapes_[size_t(ref_node_[k])];
  rows_ = rows;
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
  data_[size_t(input.id)] = bound.raw();
}

std::pair<std::shared_ptr<Storage>, size_t> Executable::locate(Value v, const char* call) const {
  graph_.node(v);
  const void* p = data_[size_t(v.id)];
  if (!p) throw StateError(std::string(call) + ": node " + std::to_string(v.id) + " has no memory in this plan");
  const char* at = static_cast<const char*>(p);
  const char* base = static_cast<const char*>(arena_->data());
  if (at >= base && at < base + arena_->nbytes()) return {arena_, size_t(at - base)};
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

void Executable::run(size_t first_node, size_t last_node) {
  const auto& nodes = graph_.nodes();
  struct RunScope {
    KernelLauncher& launcher;
    explicit RunScope(KernelLauncher& l) : launcher(l) { launcher.begin_run(); }
    ~RunScope() { launcher.end_run(); }
  } scope(*launcher_);
  bind_views();  // inputs may be rebound
  for (const Step& step : steps_) {
    if (size_t(step.node) < first_node) continue;
    if (size_t(step.node) >= last_node) break;
    const Node& n = nodes[size_t(step.node)];
    KernelArg* refs = &refs_[step.first_ref];
    for (int k = 0; k <= n.n_inputs; ++k) {
      const size_t id = size_t(ref_node_[step.first_ref + uint32_t(k)]);
      if (!data_[id]) throw StateError("run: input '" + nodes[id].name + "' is not bound");
      refs[k].data = data_[id];
    }
    if (!g_profile.enabled) {
      launcher_->launch(n.op, attrs_[size_t(step.node)], {refs + 1, size_t(n.n_inputs)}, refs[0]);
      continue;
    }
    const auto t0 = std::chrono::steady_clock::now();
    launcher_->launch(n.op, attrs_[size_t(step.node)], {refs + 1, size_t(n.n_inputs)}, refs[0]);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    g_profile.seconds[size_t(n.op)] += seconds;
    if (g_profile.by_shape) {
      std::string key = op_info(n.op).name;
      for (int k = 0; k < n.n_inputs; ++k) key.append(" ").append(nodes[size_t(n.inputs[size_t(k)].id)].shape.str());
      key.append(" -> ").append(n.shape.str());
      OpProfile::Split& split = g_profile.shapes[key];
      split.seconds += seconds;
      ++split.calls;
    }
    ++g_profile.calls[size_t(n.op)];
    g_profile.flops[size_t(n.op)] += node_flops(graph_, n);
    g_profile.bytes[size_t(n.op)] += profile_bytes(graph_, n);
  }
  if (g_profile.enabled && first_node == 0) ++g_profile.runs;
}

}  // namespace tensorgrad
