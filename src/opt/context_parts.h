#pragma once
// What the optimizer context's sources share, internal to the library: a
// planned graph and an output's loss head (optimizer_context.cpp builds
// them, hook_stage.cpp runs the update's second half), the graph pieces the
// loss heads and metrics add (losses.cpp, metrics.cpp), and the checks of a
// batch's tensors (model_function.cpp).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tensorgrad/backend/executable.h"
#include "tensorgrad/graph/graph.h"
#include "tensorgrad/opt/optimizer_context.h"

namespace tensorgrad {

// One output's loss head: what it computes and its staging buffers.
struct OptimizerContext::Head {
  Loss loss;
  float weight = 1.0f;
  std::vector<std::pair<std::string, MetricKind>> metrics;
  Shape shape;          // the output, batch included
  int64_t outputs = 0;  // values per row
  // Cross-entropy: the classes (the last axis) and the positions per row (a
  // sequence {batch, steps..., classes} has steps..., each a row of the loss;
  // 1 for {batch, classes}). Other losses: outputs and 1.
  int64_t classes = 0, tokens = 1;
  bool masked = false;  // the output carries a Keras mask {batch, steps}: the loss skips padded positions
  std::string y_name, w_name;  // "y", or "y 'name'" with several outputs: made once, so a step never allocates
  Tensor labels_i32, ones;
};

// A built graph: its executable and where each input, label and result lives.
struct OptimizerPlan {
  std::unique_ptr<Executable> exe;
  std::vector<std::pair<std::string, Value>> named;  // trainable gradients, for the hook stage
  std::vector<int64_t> named_offset;  // per `named`, its first element in OptimizerState::gradients
  std::vector<Value> x;
  struct Output {
    Value y, w, loss;
    std::vector<Value> metrics;  // batch sums, in the head's metric order
  };
  std::vector<Output> out;
  Value total;
  // The training graph runs in three parts: forward and backward [0, split),
  // clipping [split, clip_end) once the period's gradients are complete,
  // then (after the user's hooks) the tick and the updates [clip_end, end).
  size_t split = SIZE_MAX, clip_end = SIZE_MAX;
  bool persistent_grads = false;  // gradients live in accumulators (cleared by the update)
  // The gradient seed, set per step: rows / nbatch_logical with
  // accumulation, 1 without; in data-parallel training, rows (the gradients
  // become row-sums, ready for the reduction). Valid with accumulation or
  // when built for data-parallel training.
  Value accumulation_scale;
  // Evaluation graphs: each persistent tensor the graph writes in place (the
  // training forward's moving averages and dropout counter) with a copy of
  // it, so that a run can put it back (an evaluation changes nothing).
  std::vector<std::pair<Tensor, Tensor>> kept_state;
};

namespace detail {

// One output's loss head built into `g`: the label input "<output>/y" and
// the loss of the batch (Keras' sum over batch size), from the model's output
// y_pred {rows, ...} (`shape`), y_pred_flat its {rows, values per row} view,
// and the sample weights `w` (invalid: none). Cross-entropy takes the logits
// (cross_entropy_logits).
struct LossHead {
  Value y, loss;
};
LossHead build_loss_head(Graph& g, const Loss& loss, const std::string& output, Value y_pred, Value y_pred_flat,
                         const Shape& shape, Value w, Value mask = {});  // mask: a masked sequence output's {B, T}
// The logits of a cross-entropy output; throws ValueError for an output that
// can be neither folded nor taken as logits.
Value cross_entropy_logits(const Graph& g, Value out, const std::string& output, const Loss& loss);
// A custom loss's per-row losses {b}; ShapeError for any other result.
Value custom_loss_rows(Graph& g, const Loss& loss, Value y, Value out, const std::string& output, int64_t b);

// One metric of an output, summed over the batch's rows (a mean for mae, mse
// and rmse: metric_is_mean), on y_pred_flat {rows, outputs} and the labels
// y_flat as the loss head took them.
Value build_metric(Graph& g, MetricKind kind, Value y_pred_flat, Value y_flat, int64_t outputs);
// Whether build_metric gives the batch's mean (to be multiplied by the rows)
// rather than its sum.
bool metric_is_mean(MetricKind kind);

}  // namespace detail
}  // namespace tensorgrad
