#include "tensorgrad/opt/optimizer_context.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "opt/context_parts.h"
#include "opt/data_checks.h"
#include "opt/schedule_encoding.h"
#include "tensorgrad/core/error.h"
#include "tensorgrad/core/memory.h"
#include "tensorgrad/graph/graph.h"

namespace tensorgrad {

using detail::check_finite;
using detail::check_rows;
using detail::cross_entropy_logits;
using detail::custom_loss_rows;

namespace {
// Makes the model's flat gradient buffer for the trainable weights `params`
// of a training graph (the first one), or checks that they are the weights
// it was made for (every later one).
void lay_out_gradients(OptimizerState& s, const Graph& g, const std::vector<Value>& params, Device device) {
  if (s.gradient_layout.empty()) {
    int64_t n = 0;
    std::vector<OptimizerState::GradientRange> layout;
    layout.reserve(params.size());
    for (Value p : params) {
      const Node& node = g.node(p);
      layout.push_back({node.bound.raw(), node.name, node.shape, n});
      n += node.shape.numel();
    }
    s.gradients_with_rows = Tensor::zeros(Shape{n + 1}, DType::Float32, device);  // on the model's device
    s.gradients = s.gradients_with_rows.rows(0, n);
    s.gradient_layout = std::move(layout);
    return;
  }
  const std::vector<OptimizerState::GradientRange>& layout = s.gradient_layout;
  auto fail = [&](const std::string& what) {
    throw StateError("a training graph's trainable weights differ from those the model's flat gradient buffer was "
                     "laid out for by its first training graph (" + std::to_string(layout.size()) +
                     " weights): " + what + ". Every training graph of a model must train the same weights; "
                     "compile() again after changing which weights train");
  };
  if (params.size() != layout.size())
    fail("this graph has " + std::to_string(params.size()) + " trainable weights");
  for (size_t i = 0; i < params.size(); ++i) {
    const Node& node = g.node(params[i]);
    if (node.name != layout[i].name || node.shape != layout[i].shape)
      fail("weight " + std::to_string(i) + " is '" + node.name + "' " + node.shape.str() + " here, '" +
           layout[i].name + "' " + layout[i].shape.str() + " in the buffer");
    if (node.bound.raw() != layout[i].parameter)
      fail("weight " + std::to_string(i) + ", '" + node.name + "', is another tensor than the buffer's (a weight "
           "of another model?)");
  }
}
}  // namespace

OptimizerContext::OptimizerContext(const ModelFunction& model, const OptimizerContextOptions& options,
                                   std::shared_ptr<OptimizerState> state)
    : model_(model), options_(options), state_(std::move(state)) {
  if (options_.batch_size < 1)
    throw ValueError("batch_size must be at least 1; got " + std::to_string(options_.batch_size));
  if (options_.micro_batch == 0) options_.micro_batch = options_.batch_size;
  if (options_.micro_batch < options_.batch_size)
    throw ValueError("micro_batch " + std::to_string(options_.micro_batch) + " is less than batch_size " +
                     std::to_string(options_.batch_size) + "; a short micro-batch has at most micro_batch rows");
  if (options_.nbatch_logical == 0) options_.nbatch_logical = options_.micro_batch;
  if (options_.nbatch_logical < options_.micro_batch || options_.nbatch_logical % options_.micro_batch != 0)
    throw ValueError("nbatch_logical must be a positive multiple of batch_size " + std::to_string(options_.micro_batch) +
                     "; got " + std::to_string(options_.nbatch_logical));
  options_.optimizer.validate();
  check_gradient_bucket_bytes(options_.gradient_bucket_bytes, "gradient_bucket_bytes");
  buffer_.bucket_bytes_ = options_.gradient_bucket_bytes;
  if (!model_.forward) throw ValueError("OptimizerContext: the ModelFunction has no forward function");
  if (model_.inputs.empty()) throw ValueError("OptimizerContext: the ModelFunction has no inputs");
  const size_t n_out = model_.output_names.size();
  if (n_out == 0) throw ValueError("OptimizerContext: the ModelFunction has no outputs");
  auto count_error = [&](const char* what, size_t got) {
    throw ValueError(std::string("the model has ") + std::to_string(n_out) + " output" + (n_out == 1 ? "" : "s") +
                     "; give one " + what + " for each (or one for all); got " + std::to_string(got));
  };
  if (options_.losses.size() != 1 && options_.losses.size() != n_out) count_error("loss", options_.losses.size());
  if (!options_.loss_weights.empty() && options_.loss_weights.size() != n_out)
    count_error("loss weight", options_.loss_weights.size());
  if (options_.metrics.size() > 1 && options_.metrics.size() != n_out)
    count_error("metric list", options_.metrics.size());
  if (options_.weights == LossWeights::PerOutput && n_out != 1)
    throw ValueError("per-output loss weights (loss_mask) need a model with one output; this one has " +
                     std::to_string(n_out));
  period_ = options_.nbatch_logical / options_.micro_batch;
  // Each row weighs 1 / nbatch_logical of an update, whatever its micro-batch.
  accumulation_scale_ =
      Tensor::full(Shape{}, period_ > 1 ? float(options_.batch_size) / float(options_.nbatch_logical) : 1.0f);
  row_sum_seed_ = Tensor::full(Shape{}, float(options_.batch_size));
  if (!state_) state_ = std::make_shared<OptimizerState>(options_.optimizer, device());

  if (options_.capacity == 0) options_.capacity = options_.batch_size;
  if (options_.capacity < options_.batch_size)
    throw ValueError("capacity " + std::to_string(options_.capacity) + " is less than batch_size " +
                     std::to_string(options_.batch_size));
  const int64_t b = options_.batch_size;
  heads_.resize(n_out);
  for (size_t i = 0; i < n_out; ++i) {
    Head& h = heads_[i];
    h.loss = options_.losses.size() == 1 ? options_.losses[0] : options_.losses[i];
    h.weight = options_.loss_weights.empty() ? 1.0f : options_.loss_weights[i];
    if (!std::isfinite(h.weight) || h.weight < 0.0f)
      throw ValueError("loss weight of output '" + model_.output_names[i] + "' must be finite and >= 0; got " +
                       std::to_string(h.weight));
    if (!options_.metrics.empty())
      for (const std::string& m : options_.metrics.size() == 1 ? options_.metrics[0] : options_.metrics[i])
        h.metrics.emplace_back(m, metric_from_name(m, h.loss.kind));
    if (options_.weights == LossWeights::PerOutput && h.loss.kind != LossKind::MeanSquaredError &&
        h.loss.kind != LossKind::Huber && h.loss.kind != LossKind::MeanAbsoluteError)
      throw ValueError("per-output loss weights (loss_mask) need loss \"mse\", \"huber\" or \"mae\"; got \"" +
                       h.loss.name + "\"");
    h.y_name = n_out == 1 ? "y" : "y '" + model_.output_names[i] + "'";
    h.w_name = n_out == 1 ? "sample_weight" : "sample_weight '" + model_.output_names[i] + "'";
  }
  // The output shapes from a forward graph; the training and evaluation
  // graphs are built and planned on first use (evaluation alone never builds
  // the backward pass). Its arena and the staging buffers are a lower bound
  // of what the first step needs: a batch that cannot fit is refused before
  // anything of its size is allocated.
  {
    // The inputs alone, before any graph is built (shapes of that many rows
    // might not even be representable).
    uint64_t input_bytes = 0, row_bytes = 0;
    for (const InputSpec& in : model_.inputs) row_bytes += 4u * uint64_t(in.shape.numel());
    if (__builtin_mul_overflow(uint64_t(options_.capacity), row_bytes, &input_bytes)) input_bytes = UINT64_MAX;
    check_fits_in_memory(input_bytes, "batch_size " + std::to_string(b) + " (its inputs alone)", "lower batch_size");
  }
  {
    Graph g;
    std::vector<Value> xs;
    uint64_t staging = uint64_t(b) * 4u;
    for (const InputSpec& in : model_.inputs) {
      xs.push_back(g.input(in.name, in.shape.with_batch(b), in.dtype));
      staging += uint64_t(b) * 4u * uint64_t(in.shape.numel());
    }
    std::vector<Value> masks;
    const std::vector<Value> outs = model_.forward_with_masks ? model_.forward_with_masks(g, xs, true, masks)
                                                              : model_.forward(g, xs, true);  // training: dropout
    if (outs.size() != n_out)
      throw ValueError("OptimizerContext: the forward function returned " + std::to_string(outs.size()) +
                       " outputs for " + std::to_string(n_out) + " output names");
    for (size_t i = 0; i < n_out; ++i) {
      Head& h = heads_[i];
      h.shape = g.shape(outs[i]);
      if (h.shape.rank() < 2 || h.shape[0] != b)
        throw ShapeError("output '" + model_.output_names[i] + "' must be {batch, ...} to take a loss; got " +
                         h.shape.str());
      h.outputs = h.shape.row_size();
      const bool ce = h.loss.kind == LossKind::CategoricalCrossentropy ||
                      h.loss.kind == LossKind::SparseCategoricalCrossentropy;
      if (h.loss.kind == LossKind::BinaryCrossentropy) cross_entropy_logits(g, outs[i], model_.output_names[i], h.loss);
      // Keras' cross-entropy on sequences: each position's classes, the loss averaged over every position.
      h.classes = ce ? h.shape[h.shape.rank() - 1] : h.outputs;
      h.tokens = h.outputs / h.classes;
      if (h.tokens > 1 && options_.weights != LossWeights::None)
        throw ValueError(h.loss.name + " on the sequence output '" + model_.output_names[i] + "' " + h.shape.str() +
                         " takes no loss weights here (per-step weights are not supported); build the context "
                         "without them, or end the output in {batch, classes}");
      if (ce) cross_entropy_logits(g, outs[i], model_.output_names[i], h.loss);
      h.masked = i < model_.masked_outputs.size() && model_.masked_outputs[i];
      if (h.masked) {
        // Keras weighs the loss by the output's mask; here cross-entropy over the steps of {batch, steps, classes}.
        const std::string where = "output '" + model_.output_names[i] + "' " + h.shape.str();
        if (!ce || h.shape.rank() != 3)
          throw ValueError(where + " carries a mask (padding from an Embedding with mask_zero); its loss skips "
                           "the padding for sparse_categorical_crossentropy or categorical_crossentropy on "
                           "{batch, steps, classes} only, and " + h.loss.name +
                           " is not supported on it: end the model in per-step class scores, or use mask_zero = false");
        if (!h.metrics.empty())
          throw ValueError(where + " carries a mask (padding from an Embedding with mask_zero), and metrics that "
                           "skip the padding are not supported yet; compile it without metrics");
      }
      if (h.loss.kind == LossKind::Custom)
        custom_loss_rows(g, h.loss, g.input("y", h.shape), outs[i], model_.output_names[i], b);
      staging += uint64_t(b) * 8u * uint64_t(h.outputs);
    }
    check_fits_in_memory(plan_memory(g, outs).arena_bytes + staging, "batch_size " + std::to_string(b),
                         "lower batch_size");
  }
  for (Head& h : heads_) {
    if (h.loss.kind == LossKind::SparseCategoricalCrossentropy)
      h.labels_i32 = Tensor::zeros(Shape{b * h.tokens}, DType::Int32);
    if (options_.weights != LossWeights::None)
      h.ones = Tensor::full(options_.weights == LossWeights::PerOutput ? Shape{b, h.outputs} : Shape{b}, 1.0f);
  }
  size_t n_metrics = 0;
  for (const Head& h : heads_) n_metrics += h.metrics.size();
  metric_sums_.assign(n_metrics, 0.0);
  x_staging_.resize(model_.inputs.size());
  for (const InputSpec& in : model_.inputs)
    x_names_.push_back(model_.inputs.size() == 1 ? std::string("x") : "x '" + in.name + "'");
  output_losses_.assign(n_out, 0.0f);
}

OptimizerContext::~OptimizerContext() = default;

size_t OptimizerContext::n_outputs() const { return heads_.size(); }

const std::vector<std::pair<std::string, MetricKind>>& OptimizerContext::metrics(size_t output) const {
  if (output >= heads_.size())
    throw IndexError("output " + std::to_string(output) + " of a model with " + std::to_string(heads_.size()) +
                     " outputs");
  return heads_[output].metrics;
}

namespace {
// acc += grad. A gradient that is a plain matrix product (a Dense layer's
// X^T dY) is added by the GEMM itself (AccumulateGrad's product form, beta
// 1), which saves writing the product and reading it back: OpenBLAS's
// {784, 500} over k = 250 in 64-row blocks took 2.8-3.5 ms so against
// 3.4-4.6 ms as product then add (one thread, AVX2 EPYC), and the
// data-parallel MLP epoch 1.228 against 1.255 s (medians of 6 paired runs).
// The MatMul node is then left unused and unscheduled unless something else
// reads it.
Value accumulate_gradient(Graph& g, Value acc, Value grad) {
  const Node& n = g.node(grad);
  if (n.role == NodeRole::Op && n.op == OpKind::MatMul && n.n_inputs == 2 && n.shape.rank() == 2 &&
      !(n.attrs.flags & kReluOutput)) {
    const Value a = n.inputs[0], b = n.inputs[1];
    const OpAttrs at = n.attrs;  // a copy: apply may move the nodes
    return g.apply(OpKind::AccumulateGrad, {acc, a, b}, at);
  }
  return g.apply(OpKind::AccumulateGrad, {acc, grad});
}
}  // namespace

// The optimizer's part of the training graph, after the loss: gradients of
// plan->total (into persistent accumulators when the period is longer than
// one step or when clipping needs them complete), then clipping, then the
// tick and one update op per parameter (DESIGN.md: the hook stage's order is
// reduction across ranks, clipping, user hooks, update).
void OptimizerContext::build_update(Graph& g, OptimizerPlan* plan, std::vector<Value>& results) {
  const OptimizerSpec& spec = options_.optimizer;
  const std::vector<Value> params = g.trainable_parameters();
  if (params.empty()) throw ValueError("the model has no trainable weights: nothing to optimise");
  lay_out_gradients(*state_, g, params, device());
  // The seed is set per step (accumulation_scale_), so that contexts of short
  // micro-batches share the plan with the full ones. Data-parallel training
  // accumulates row-sums straight into the flat buffer it reduces.
  const bool data_parallel = distributed();
  if (period_ > 1 || data_parallel) plan->accumulation_scale = g.input("optimizer/accumulation_scale", Shape{});
  std::vector<Value> grads = plan->accumulation_scale.valid()
                                 ? g.gradients(plan->total, params, plan->accumulation_scale)
                                 : g.gradients(plan->total, params);
  const bool clipping = spec.clipnorm > 0.0f || spec.global_clipnorm > 0.0f || spec.clipvalue > 0.0f;
  plan->persistent_grads = period_ > 1 || clipping || data_parallel;
  if (plan->persistent_grads) state_->gradients_accumulate = true;
  const bool momentum = spec.momentum > 0.0f;  // SGD and RMSprop: a momentum buffer
  std::vector<Value> sources(params.size()), accumulators(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    if (!grads[i].valid()) continue;
    // Copies, not a reference: adding nodes below may move the graph's nodes.
    const Shape shape = g.node(params[i]).shape;
    const std::string name = g.node(params[i]).name;
    OptimizerState::Slots& slot = state_->slots[g.node(params[i]).bound.raw()];
    // The optimizer's state, made once and shared by every context of the
    // model, on the model's device.
    const Device dev = device();
    auto zeros = [&](const Shape& s) { return Tensor::zeros(s, DType::Float32, dev); };
    switch (spec.kind) {
      case OptimizerSpec::Kind::AdamW:
        if (!slot.m.defined()) slot.m = zeros(shape);
        if (!slot.v.defined()) slot.v = zeros(shape);
        break;
      case OptimizerSpec::Kind::SGD:
        if (momentum && !slot.momentum.defined()) slot.momentum = zeros(shape);
        break;
      case OptimizerSpec::Kind::RMSprop:
        if (!slot.v.defined()) slot.v = zeros(shape);
        if (spec.centered && !slot.m.defined()) slot.m = zeros(shape);
        if (momentum && !slot.momentum.defined()) slot.momentum = zeros(shape);
        break;
      case OptimizerSpec::Kind::Adagrad:
        if (!slot.v.defined()) slot.v = Tensor::full(shape, spec.initial_accumulator_value).to(dev);
        break;
    }
    if (plan->persistent_grads) {
      // The accumulator is the weight's range of the flat gradient buffer.
      const int64_t offset = state_->gradient_layout[i].offset;
      Tensor view = state_->gradients.rows(offset, offset + shape.numel()).reshape(shape);
      if (!slot.acc.defined()) view.fill(0.0f);  // the hook stage of a graph without accumulation may have used it
      else if (slot.acc.raw() != view.raw()) view.copy_from(slot.acc);  // restored by a checkpoint before the buffer
      slot.acc = view;
      accumulators[i] = g.state(slot.acc, name + "/grad");
      sources[i] = accumulate_gradient(g, accumulators[i], grads[i]);
    } else {
      sources[i] = grads[i];
      results.push_back(grads[i]);  // readable by the hook stage
    }
  }
  plan->split = g.size();
  // Clipping, in place on the complete gradients (Keras' rules; global as
  // PyTorch's clip_grad_norm_).
  if (clipping) {
    OpAttrs at;
    if (spec.clipvalue > 0.0f) {
      at.clip = spec.clipvalue;
      for (size_t i = 0; i < params.size(); ++i)
        if (sources[i].valid()) sources[i] = g.apply(OpKind::ClipValue, {accumulators[i]}, at);
    } else if (spec.clipnorm > 0.0f) {
      at.clip = spec.clipnorm;
      at.flags = kNonFiniteNormToNaN;
      for (size_t i = 0; i < params.size(); ++i)
        if (sources[i].valid())
          sources[i] = g.apply(OpKind::ClipNorm, {accumulators[i], g.apply(OpKind::SquaredNorm, {accumulators[i]})}, at);
    } else {
      Value total;  // SquaredNorm's pair, each gradient's squares added in double
      for (size_t i = 0; i < params.size(); ++i)
        if (sources[i].valid())
          total = total.valid() ? g.apply(OpKind::SquaredNorm, {accumulators[i], total})
                                : g.apply(OpKind::SquaredNorm, {accumulators[i]});
      at.clip = spec.global_clipnorm;
      at.flags = kClipNormEps | kNonFiniteNormToNaN;
      for (size_t i = 0; i < params.size(); ++i)
        if (sources[i].valid()) sources[i] = g.apply(OpKind::ClipNorm, {accumulators[i], total}, at);
    }
  }
  plan->clip_end = g.size();
  std::vector<Value> tick_in{g.state(state_->hyper, "optimizer/hyper"), g.state(state_->step, "optimizer/iterations")};
  OpAttrs tick_at;
  if (state_->learning_rate_schedule) {
    tick_at.flags = schedule_kind(*state_->learning_rate_schedule);
    tick_in.push_back(g.state(state_->schedule_steps, "optimizer/schedule_steps"));
    tick_in.push_back(g.state(state_->schedule_values, "optimizer/schedule_values"));
  }
  Value tick = g.apply(OpKind::OptimizerTick, tick_in, tick_at);
  OpAttrs at;
  at.zero_grad = plan->persistent_grads;
  if (!spec.decoupled_weight_decay) at.flags |= kL2WeightDecay;
  if (momentum) at.flags |= kUseMomentum;
  if (spec.nesterov) at.flags |= kNesterov;
  if (spec.centered) at.flags |= kCentered;
  if (spec.epsilon_inside_sqrt) at.flags |= kEpsInsideSqrt;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!sources[i].valid()) continue;
    const OptimizerState::Slots& slot = state_->slots[g.node(params[i]).bound.raw()];
    const Value grad = sources[i];
    switch (spec.kind) {
      case OptimizerSpec::Kind::AdamW:
        g.apply(OpKind::AdamWUpdate, {params[i], grad, g.state(slot.m, "m"), g.state(slot.v, "v"), tick}, at);
        break;
      case OptimizerSpec::Kind::SGD:
        if (momentum) g.apply(OpKind::SgdUpdate, {params[i], grad, g.state(slot.momentum, "momentum"), tick}, at);
        else g.apply(OpKind::SgdUpdate, {params[i], grad, tick}, at);
        break;
      case OptimizerSpec::Kind::RMSprop: {
        std::vector<Value> in{params[i], grad, g.state(slot.v, "mean_square")};
        if (spec.centered) in.push_back(g.state(slot.m, "mean_grad"));
        if (momentum) in.push_back(g.state(slot.momentum, "momentum"));
        in.push_back(tick);
        g.apply(OpKind::RmspropUpdate, in, at);
        break;
      }
      case OptimizerSpec::Kind::Adagrad:
        g.apply(OpKind::AdagradUpdate, {params[i], grad, g.state(slot.v, "sum_squares"), tick}, at);
        break;
    }
  }
  for (size_t i = 0; i < params.size(); ++i)
    if (sources[i].valid()) {
      plan->named.emplace_back(g.node(params[i]).name, plan->persistent_grads ? accumulators[i] : sources[i]);
      plan->named_offset.push_back(state_->gradient_layout[i].offset);
    }
}

std::vector<Value> OptimizerContext::build_graph(Graph& g, int64_t b, GraphKind kind, OptimizerPlan* plan) {
  g.set_rng_counter(state_->rng_counter);  // one dropout stream per model: every context continues it
  for (const InputSpec& in : model_.inputs) plan->x.push_back(g.input(in.name, in.shape.with_batch(b), in.dtype));
  std::vector<Value> masks;  // a masked output's {B, T}: its loss skips the padding
  const bool training = kind != GraphKind::kEvaluation;
  const std::vector<Value> outs = model_.forward_with_masks ? model_.forward_with_masks(g, plan->x, training, masks)
                                                            : model_.forward(g, plan->x, training);
  std::vector<Value> results;
  plan->out.resize(heads_.size());
  for (size_t i = 0; i < heads_.size(); ++i) {
    const Head& h = heads_[i];
    OptimizerPlan::Output& o = plan->out[i];
    const std::string& name = model_.output_names[i];
    if (g.shape(outs[i]) != h.shape.with_rows(b))
      throw ShapeError("output '" + name + "' changed shape between graphs: " + h.shape.with_rows(b).str() + " then " +
                       g.shape(outs[i]).str());
    const Shape flat{b * h.tokens, h.classes};  // a sequence's positions as rows for cross-entropy
    Value out = h.shape.rank() == 2 ? outs[i] : g.reshape(outs[i], flat);
    if (options_.weights != LossWeights::None)
      o.w = g.input(name + "/sample_weight", options_.weights == LossWeights::PerSample ? Shape{b} : flat);
    const detail::LossHead head = detail::build_loss_head(g, h.loss, name, outs[i], out, h.shape.with_rows(b), o.w,
                                                         h.masked ? masks.at(i) : Value{});
    o.y = head.y;
    o.loss = head.loss;
    results.push_back(o.loss);
    // Metrics on the output as predict returns it (probabilities), summed over rows.
    const Value y_flat = h.loss.kind == LossKind::Custom ? g.reshape(o.y, flat) : o.y;
    for (const auto& [metric_name, kind] : h.metrics) {
      Value v = detail::build_metric(g, kind, out, y_flat, h.classes);
      if (h.tokens > 1 && !detail::metric_is_mean(kind)) v = g.scale(v, 1.0f / float(h.tokens));  // per sample
      o.metrics.push_back(v);
      results.push_back(v);
    }
  }
  plan->total = plan->out[0].loss;
  if (heads_.size() > 1 || heads_[0].weight != 1.0f) {
    plan->total = Value{};
    for (size_t i = 0; i < heads_.size(); ++i) {
      const Value part = heads_[i].weight == 1.0f ? plan->out[i].loss : g.scale(plan->out[i].loss, heads_[i].weight);
      plan->total = plan->total.valid() ? g.add(plan->total, part) : part;
    }
    results.push_back(plan->total);
  }
  if (kind == GraphKind::kTraining) build_update(g, plan, results);
  return results;
}

std::shared_ptr<OptimizerPlan> OptimizerContext::build(GraphKind kind) {
  // Planned for the capacity and run at any batch up to it, when the graph
  // scales with its batch (learnt from a second construction at capacity - 1);
  // otherwise planned for exactly this context's batch.
  const int64_t b = options_.batch_size, cap = options_.capacity;
  auto plan = std::make_shared<OptimizerPlan>();
  auto g = std::make_unique<Graph>();
  std::vector<Value> results = build_graph(*g, cap, kind, plan.get());
  BatchRule rule;
  if (cap >= 3) {
    Graph probe;
    OptimizerPlan unused;
    build_graph(probe, cap - 1, kind, &unused);
    try {
      rule = make_batch_rule(*g, cap, probe, cap - 1);
    } catch (const ValueError&) {
      rule = BatchRule{};
    }
  }
  if (rule.max_rows == 0 && cap != b) {  // no rule (or no probe below 3 rows): exactly this batch
    plan = std::make_shared<OptimizerPlan>();
    g = std::make_unique<Graph>();
    results = build_graph(*g, b, kind, plan.get());
  }
  plan->exe = std::make_unique<Executable>(std::move(*g), results, std::move(rule), options_.backend, options_.fusion);
  if (kind != GraphKind::kTraining) {
    const Graph& built = plan->exe->graph();
    for (const Node& n : built.nodes()) {
      if (n.role != NodeRole::Op || !op_info(n.op).in_place) continue;
      const Tensor& target = built.node(n.inputs[0]).bound;
      if (!target.defined()) continue;
      const bool seen = std::any_of(plan->kept_state.begin(), plan->kept_state.end(),
                                    [&](const auto& kept) { return kept.first.raw() == target.raw(); });
      if (!seen) plan->kept_state.emplace_back(target, target.clone());
    }
  }
  return plan;
}

void OptimizerContext::check_kernels(const Backend& backend) {
  if (!retired_.empty()) throw StateError("check_kernels: " + retired_);
  // The training forward's ops are a subset of the training step's.
  for (GraphKind kind : {GraphKind::kEvaluation, GraphKind::kTraining}) {
    Graph g;
    OptimizerPlan unused;
    build_graph(g, std::min<int64_t>(options_.batch_size, 2), kind, &unused);
    backend.check_kernels(g);
  }
}

OptimizerPlan& OptimizerContext::acquire(GraphKind kind) {
  std::shared_ptr<OptimizerPlan>* slot = nullptr;
  switch (kind) {
    case GraphKind::kEvaluation: slot = &eval_; break;
    case GraphKind::kTrainingForward: slot = &train_forward_; break;
    case GraphKind::kTraining: slot = &train_; break;
  }
  if (!slot)
    throw ValueError("OptimizerContext: graph kind " + std::to_string(int(kind)) +
                     " is none of evaluation (0), training forward (1) or training (2)");
  std::shared_ptr<OptimizerPlan>& mine = *slot;
  const bool train = kind == GraphKind::kTraining;
  if (!mine) {
    const int64_t b = options_.batch_size;
    auto runs_b = [b](const OptimizerPlan& p) { return p.exe->max_rows() >= b || p.exe->rows() == b; };
    std::shared_ptr<OptimizerPlan>* shared =
        options_.plans ? &options_.plans->plans_[{options_.capacity, int(kind)}] : nullptr;
    if (shared && *shared && runs_b(**shared)) mine = *shared;
    if (!mine) {
      mine = build(kind);
      if (shared && mine->exe->max_rows() > 0) *shared = mine;
    }
    if (train) {
      // What the hooks see: views of the flat buffer; without accumulation
      // the gradients themselves are outputs in the arena, copied in and out
      // around the hooks.
      buffer_.flat_ = state_->gradients;
      buffer_.tensors_.clear();
      arena_grads_.clear();
      for (size_t k = 0; k < mine->named.size(); ++k) {
        const auto& [name, v] = mine->named[k];
        const Shape& shape = mine->exe->graph().node(v).shape;
        const int64_t offset = mine->named_offset[k];
        buffer_.tensors_.push_back({name, state_->gradients.rows(offset, offset + shape.numel()).reshape(shape)});
        arena_grads_.push_back(mine->persistent_grads ? Tensor{} : mine->exe->output(v));
      }
    }
  }
  if (mine->exe->rows() != options_.batch_size) mine->exe->set_rows(options_.batch_size);
  return *mine;
}

int64_t OptimizerContext::planned_rows() const {
  if (!train_) return 0;
  return train_->exe->max_rows() > 0 ? train_->exe->max_rows() : train_->exe->rows();
}

size_t OptimizerPlans::arena_bytes() const {
  size_t total = 0;
  for (const auto& [key, plan] : plans_)
    if (plan) total += plan->exe->arena_bytes();
  return total;
}

size_t OptimizerPlans::count() const { return plans_.size(); }

void OptimizerContext::check_targets(size_t output, const Tensor& y, const Tensor& w, int64_t rows) const {
  const Head& h = heads_.at(output);
  check_rows(y, rows, h.y_name.c_str());
  const int64_t n = y.shape()[0];
  const int64_t outputs = h.outputs;
  const char* loss = h.loss.name.c_str();  // a std::string here would allocate on every step
  switch (h.loss.kind) {
    case LossKind::SparseCategoricalCrossentropy: {
      const int64_t classes = h.classes;
      if (h.tokens > 1) {
        // A sequence output {n, steps..., classes} takes ids {n, steps...}.
        const Shape want = h.shape.with_rows(n);
        const std::vector<int64_t> d(want.begin(), want.end() - 1);
        if (y.shape() != Shape(d))
          throw ShapeError("sparse_categorical_crossentropy on the sequence output " + want.str() +
                           " takes one class id per position: " + Shape(d).str() + "; got " + y.shape().str());
      } else if (y.shape().rank() > 2 || (y.shape().rank() == 2 && y.shape()[1] != 1)) {
        throw ShapeError("sparse_categorical_crossentropy takes one class id per row ({" + std::to_string(n) +
                         "} or {" + std::to_string(n) + ", 1}); got " + y.shape().str() +
                         ", which looks like one-hot rows: use categorical_crossentropy for those");
      }
      const char* at = h.tokens > 1 ? " element " : " row ";  // ids {n, steps...} or one per row
      for (int64_t i = 0; i < y.numel(); ++i) {
        int64_t id;
        if (y.dtype() == DType::Int32) {
          id = y.data<int32_t>()[i];
        } else {
          const float v = y.data<float>()[i];
          if (!std::isfinite(v) || v != std::floor(v))
            throw ValueError("class ids must be whole numbers; " + h.y_name + at + std::to_string(i) +
                             " holds " + std::to_string(v));
          if (v < 0.0f || v >= float(classes)) {  // before converting: int64_t(1e30f) is undefined
            char buf[32];
            std::snprintf(buf, sizeof buf, std::fabs(v) < 1e15f ? "%.0f" : "%g", double(v));
            throw IndexError(std::string("class id ") + buf + " at " + h.y_name + at + std::to_string(i) +
                             " is outside [0, " + std::to_string(classes) + "): the model has " +
                             std::to_string(classes) + " classes");
          }
          id = int64_t(v);
        }
        if (id < 0 || id >= classes)
          throw IndexError("class id " + std::to_string(id) + " at " + h.y_name + at + std::to_string(i) +
                           " is outside [0, " + std::to_string(classes) + "): the model has " +
                           std::to_string(classes) + " classes");
      }
      break;
    }
    case LossKind::CategoricalCrossentropy:
    case LossKind::MeanSquaredError:
    case LossKind::MeanAbsoluteError:
    case LossKind::Huber:
    case LossKind::BinaryCrossentropy:
    case LossKind::Custom: {
      const bool ce = h.loss.kind == LossKind::CategoricalCrossentropy;
      if (y.dtype() != DType::Float32)
        throw TypeError(std::string(loss) + " takes float32 " + (ce ? "one-hot rows" : "targets") + "; got " +
                        dtype_name(y.dtype()) + (ce ? " class ids: use sparse_categorical_crossentropy for those" : ""));
      if (y.shape().row_size() != outputs || (ce && outputs > 1 && y.shape().rank() != h.shape.rank()))
        throw ShapeError(std::string(loss) + " takes " + (ce ? "one-hot rows" : "targets") + " of shape " +
                         h.shape.with_rows(n).str() + " (the model has " + std::to_string(outputs) +
                         (outputs == 1 ? " output" : " outputs") + " per row); got " + y.shape().str() +
                         (ce && y.shape().row_size() == 1 ? ": class ids need sparse_categorical_crossentropy" : ""));
      check_finite(y, h.y_name.c_str());
      if (h.loss.kind == LossKind::BinaryCrossentropy) {
        const float* t = y.data<float>();
        for (int64_t i = 0; i < y.numel(); ++i)
          if (t[i] < 0.0f || t[i] > 1.0f)
            throw ValueError("binary_crossentropy takes targets in [0, 1] (labels or probabilities); " + h.y_name +
                             " element " + std::to_string(i) + " holds " + std::to_string(t[i]));
      }
      break;
    }
  }
  if (options_.weights == LossWeights::None) {
    if (w.defined())
      throw ValueError("sample_weight given, but this context was built without loss weights; build it with "
                       "LossWeights::PerSample (or PerOutput for a per-output mask)");
    return;
  }
  if (!w.defined()) return;
  check_rows(w, n, h.w_name.c_str());
  if (w.dtype() != DType::Float32)
    throw TypeError(h.w_name + " must be float32; got " + dtype_name(w.dtype()));
  const bool per_sample = options_.weights == LossWeights::PerSample;
  if (per_sample ? w.numel() != n : (w.shape().rank() != 2 || w.shape()[1] != outputs))
    throw ShapeError(h.w_name + " must be " +
                     (per_sample ? "{" + std::to_string(n) + "} or {" + std::to_string(n) + ", 1} (one per sample)"
                                 : "{" + std::to_string(n) + ", " + std::to_string(outputs) + "} (one per output)") +
                     "; got " + w.shape().str());
  check_finite(w, h.w_name.c_str());
  const float* pw = w.data<float>();
  for (int64_t i = 0; i < w.numel(); ++i)
    if (pw[i] < 0.0f)
      throw ValueError(h.w_name + " must be >= 0 (a negative weight makes training raise that row's loss); element " +
                       std::to_string(i) + " holds " + std::to_string(pw[i]));
}

void OptimizerContext::stage(OptimizerPlan& plan, std::span<const Tensor> x, std::span<const Tensor> y,
                             std::span<const Tensor> w) {
  const int64_t b = options_.batch_size;
  const size_t n_in = model_.inputs.size(), n_out = heads_.size();
  detail::check_data(detail::DataNames::of("step", model_), x, y, w, b, {.weight_per_output = true});
  for (size_t i = 0; i < n_in; ++i) {
    const InputSpec& in = model_.inputs[i];
    plan.exe->bind(plan.x[i], in.check(x[i], b, x_names_[i], &x_staging_[i]));
  }
  for (size_t i = 0; i < n_out; ++i) {
    const Head& h = heads_[i];
    const OptimizerPlan::Output& o = plan.out[i];
    const Tensor none;
    const Tensor& wi = w.empty() ? none : w.size() == 1 ? w[0] : w[i];
    check_targets(i, y[i], wi, b);
    if (h.loss.kind == LossKind::SparseCategoricalCrossentropy) {
      int32_t* ids = h.labels_i32.data<int32_t>();
      const int64_t n = b * h.tokens;
      if (y[i].dtype() == DType::Int32) std::memcpy(ids, y[i].raw(), size_t(n) * sizeof(int32_t));
      else
        for (int64_t r = 0; r < n; ++r) ids[r] = int32_t(y[i].data<float>()[r]);
      plan.exe->bind(o.y, h.labels_i32);
    } else {
      const Shape want = h.loss.kind == LossKind::Custom ? h.shape : Shape{b * h.tokens, h.classes};
      plan.exe->bind(o.y, y[i].shape() == want ? y[i] : y[i].reshape(want));
    }
    if (options_.weights == LossWeights::None) continue;
    const Shape& want = h.ones.shape();
    plan.exe->bind(o.w, !wi.defined() ? h.ones : wi.shape() == want ? wi : wi.reshape(want));
  }
}

StepResult OptimizerContext::run(OptimizerPlan& plan, std::span<const Tensor> x, std::span<const Tensor> y,
                                 std::span<const Tensor> w, bool train) {
  stage(plan, x, y, w);
  StepResult r;
  r.rows = options_.batch_size;
  if (train) {
    if (plan.accumulation_scale.valid())
      plan.exe->bind(plan.accumulation_scale, distributed() ? row_sum_seed_ : accumulation_scale_);
    const bool no_host_work = period_ == 1 && !distributed() &&
                              (!options_.model_hooks || options_.model_hooks->empty()) && hooks_.empty();
    if (no_host_work) {
      // Nothing runs on the host between the gradients and the update (no
      // ranks to reduce over, no hooks, no accumulation): the whole step is
      // one run, which a device backend submits once.
      plan.exe->run();
      ++n_steps_;
      state_->micro_step = 0;
      r.updated = true;
    } else {
      plan.exe->run(0, plan.split);
      ++n_steps_;
      if (++state_->micro_step >= period_) {
        apply_update(plan, float(period_ == 1 ? options_.batch_size : options_.nbatch_logical));
        r.updated = true;
      }
    }
  } else {
    for (auto& [state, copy] : plan.kept_state) copy.copy_from(state);
    struct PutBack {  // even when a kernel throws
      std::vector<std::pair<Tensor, Tensor>>& kept;
      ~PutBack() {
        for (auto& [state, copy] : kept) state.copy_from(copy);
      }
    } put_back{plan.kept_state};
    plan.exe->run();
  }
  size_t k = 0;
  for (size_t i = 0; i < heads_.size(); ++i) {
    output_losses_[i] = plan.exe->scalar(plan.out[i].loss);
    for (size_t m = 0; m < plan.out[i].metrics.size(); ++m) {
      const bool mean = detail::metric_is_mean(heads_[i].metrics[m].second);
      metric_sums_[k++] = double(plan.exe->scalar(plan.out[i].metrics[m])) * (mean ? double(r.rows) : 1.0);
    }
  }
  r.loss = plan.exe->scalar(plan.total);
  for (size_t m = 0; m < heads_[0].metrics.size() && r.correct < 0; ++m)
    if (heads_[0].metrics[m].second == MetricKind::CategoricalAccuracy ||
        heads_[0].metrics[m].second == MetricKind::SparseCategoricalAccuracy)
      r.correct = int64_t(metric_sums_[m]);
  r.output_losses = output_losses_;
  r.metric_sums = metric_sums_;
  return r;
}

void OptimizerContext::retire(const std::string& why) {
  retired_ = why.empty() ? "retired" : why;
  train_.reset();
  eval_.reset();
  train_forward_.reset();
  // Nothing of the model stays reachable: its layers (and weights) and the
  // optimizer moments go with the last live owner.
  model_ = ModelFunction{};
  state_.reset();
  options_.model_hooks.reset();
  options_.plans.reset();
  // The views of the flat buffer and the arena go too; during the hook stage
  // (a hook retired this context) apply_update drops them once the hooks
  // that may still hold them are done.
  if (!in_hook_stage_) release_gradient_views();
}

bool OptimizerContext::distributed() const {
  return state_ && state_->communicator && state_->communicator->size() > 1;
}

bool OptimizerContext::apply_pending_update() {
  if (!retired_.empty())
    throw StateError("this optimizer context is stale: " + retired_ + "; get a new one from optimizer_context()");
  if (period_ == 1 || state_->micro_step == 0) return false;
  acquire(GraphKind::kTraining);
  const std::shared_ptr<OptimizerPlan> keep = train_;
  apply_update(*keep, float(options_.nbatch_logical));
  return true;
}

StepResult OptimizerContext::join_step() {
  if (!retired_.empty())
    throw StateError("this optimizer context is stale: " + retired_ + "; get a new one from optimizer_context()");
  if (!state_->communicator)
    throw StateError("join_step() is for data-parallel training: this model has no communicator (set "
                     "FitOptions::communicator or TrainerOptions::communicator)");
  acquire(GraphKind::kTraining);
  const std::shared_ptr<OptimizerPlan> keep = train_;
  ++n_steps_;
  StepResult r;
  std::fill(output_losses_.begin(), output_losses_.end(), 0.0f);
  std::fill(metric_sums_.begin(), metric_sums_.end(), 0.0);
  r.output_losses = output_losses_;
  r.metric_sums = metric_sums_;
  if (++state_->micro_step >= period_) {
    // Without accumulation the arena holds the last step's gradients, not
    // this rank's (none): the flat buffer gets zeros instead.
    if (!keep->persistent_grads)
      for (Tensor& g : arena_grads_) g.fill(0.0f);
    apply_update(*keep, period_ == 1 ? 0.0f : float(options_.nbatch_logical));
    r.updated = true;
  }
  return r;
}

StepResult OptimizerContext::step(std::span<const Tensor> x, std::span<const Tensor> y,
                                  std::span<const Tensor> sample_weight) {
  if (!retired_.empty())
    throw StateError("this optimizer context is stale: " + retired_ + "; get a new one from optimizer_context()");
  acquire(GraphKind::kTraining);
  const std::shared_ptr<OptimizerPlan> keep = train_;  // alive even if a hook retires this context
  return run(*keep, x, y, sample_weight, true);
}

StepResult OptimizerContext::step(const Tensor& x, const Tensor& y, const Tensor& sample_weight) {
  return step(std::span<const Tensor>(&x, 1), std::span<const Tensor>(&y, 1),
              sample_weight.defined() ? std::span<const Tensor>(&sample_weight, 1) : std::span<const Tensor>());
}

StepResult OptimizerContext::evaluate(std::span<const Tensor> x, std::span<const Tensor> y,
                                      std::span<const Tensor> sample_weight, const EvalOptions& options) {
  if (!retired_.empty())
    throw StateError("this optimizer context is stale: " + retired_ + "; get a new one from optimizer_context()");
  return run(acquire(options.training ? GraphKind::kTrainingForward : GraphKind::kEvaluation), x, y, sample_weight,
             false);
}

StepResult OptimizerContext::evaluate(const Tensor& x, const Tensor& y, const Tensor& sample_weight,
                                      const EvalOptions& options) {
  return evaluate(std::span<const Tensor>(&x, 1), std::span<const Tensor>(&y, 1),
                  sample_weight.defined() ? std::span<const Tensor>(&sample_weight, 1) : std::span<const Tensor>(),
                  options);
}

void OptimizerContext::set_learning_rate(float lr) {
  if (!retired_.empty())
    throw StateError("this optimizer context is stale: " + retired_ + "; get a new one from optimizer_context()");
  state_->set_learning_rate(lr);
}

float OptimizerContext::learning_rate() const {
  if (!retired_.empty())
    throw StateError("this optimizer context is stale: " + retired_ + "; get a new one from optimizer_context()");
  return float(state_->learning_rate());
}

}  // namespace tensorgrad
