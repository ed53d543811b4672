#include <string>
#include <vector>

#include "opt/context_parts.h"
#include "tensorgrad/core/error.h"
#include "tensorgrad/graph/graph.h"
#include "tensorgrad/opt/losses.h"

namespace tensorgrad {

LossKind loss_from_name(const std::string& name) {
  if (name == "mse" || name == "mean_squared_error") return LossKind::MeanSquaredError;
  if (name == "mae" || name == "mean_absolute_error") return LossKind::MeanAbsoluteError;
  if (name == "huber" || name == "huber_loss") return LossKind::Huber;
  if (name == "binary_crossentropy") return LossKind::BinaryCrossentropy;
  if (name == "categorical_crossentropy") return LossKind::CategoricalCrossentropy;
  if (name == "sparse_categorical_crossentropy") return LossKind::SparseCategoricalCrossentropy;
  throw ValueError("unknown loss '" + name +
                   "'; expected \"mse\", \"mae\", \"huber\", \"binary_crossentropy\", \"categorical_crossentropy\" or "
                   "\"sparse_categorical_crossentropy\" (or a custom Loss)");
}

const char* loss_name(LossKind loss) {
  switch (loss) {
    case LossKind::MeanSquaredError: return "mse";
    case LossKind::MeanAbsoluteError: return "mae";
    case LossKind::Huber: return "huber";
    case LossKind::BinaryCrossentropy: return "binary_crossentropy";
    case LossKind::CategoricalCrossentropy: return "categorical_crossentropy";
    case LossKind::SparseCategoricalCrossentropy: return "sparse_categorical_crossentropy";
    case LossKind::Custom: return "custom";
  }
  return "?";
}

Loss::Loss(const char* loss_name) : Loss(std::string(loss_name ? loss_name : "")) {}
Loss::Loss(const std::string& loss_name) : kind(loss_from_name(loss_name)), name(loss_name) {}
Loss::Loss(std::string loss_name, LossFunction fn) : kind(LossKind::Custom), name(std::move(loss_name)), function(std::move(fn)) {
  if (!function) throw ValueError("custom loss '" + name + "' has an empty function");
  if (name.empty()) throw ValueError("a custom loss needs a name (for messages and History keys)");
}

namespace {
bool is_activation(OpKind op) {
  return op == OpKind::Relu || op == OpKind::Sigmoid || op == OpKind::Tanh || op == OpKind::Gelu || op == OpKind::GeluTanh ||
         op == OpKind::Silu || op == OpKind::Elu || op == OpKind::LeakyRelu || op == OpKind::Softplus ||
         op == OpKind::LogSoftmax;
}

// True when a softmax (sigmoid) feeds `v` through ops that mix probabilities
// without a weight matrix in between (an average of softmaxes, a batch norm
// after one): such an output is neither logits nor a softmax to fold.
bool probabilities_upstream(const Graph& g, Value v, OpKind activation) {
  std::vector<Value> todo{v};
  std::vector<bool> seen(g.size(), false);
  while (!todo.empty()) {
    const Value u = todo.back();
    todo.pop_back();
    if (seen[size_t(u.id)]) continue;
    seen[size_t(u.id)] = true;
    const Node& n = g.node(u);
    if (n.role != NodeRole::Op || n.op == OpKind::MatMul) continue;  // a weight matrix makes new logits
    if (n.op == activation) return true;
    for (Value in : n.input_values()) todo.push_back(in);
  }
  return false;
}
}  // namespace

namespace detail {

// The logits of a cross-entropy output (DESIGN.md: softmax folding looks at
// the op that produced the output). Walking back through views (Reshape:
// Flatten, Reshape) to a Softmax over the same {batch, classes} gives its
// input; an output made by a linear op is taken as logits (Keras'
// from_logits); any other activation, or a dropout between the softmax and
// the output, cannot be folded and is refused.
Value cross_entropy_logits(const Graph& g, Value out, const std::string& output, const Loss& loss) {
  Value v = out;
  bool crossed_dropout = false;
  while (true) {
    const Node& n = g.node(v);
    if (n.role != NodeRole::Op) break;
    if (n.op == OpKind::Reshape) v = n.inputs[0];
    else if (n.op == OpKind::Dropout) {
      crossed_dropout = true;
      v = n.inputs[0];
    } else break;
  }
  const Node& n = g.node(v);
  const OpKind folded = loss.kind == LossKind::BinaryCrossentropy ? OpKind::Sigmoid : OpKind::Softmax;
  const char* folded_name = loss.kind == LossKind::BinaryCrossentropy ? "sigmoid" : "softmax";
  if (n.role == NodeRole::Op && n.op == folded) {
    if (crossed_dropout)
      throw ValueError(loss.name + " on output '" + output + "': a Dropout comes after its " + folded_name +
                       ", but the " + folded_name + " is folded into the loss (logits and " + folded_name +
                       " fused), which leaves no probabilities to drop. Put the Dropout before the layer with the " +
                       folded_name);
    if (n.shape != g.shape(out) && folded == OpKind::Softmax)
      throw ValueError(loss.name + " on output '" + output + "': its softmax is over the last axis of " +
                       n.shape.str() + ", but the output is " + g.shape(out).str() +
                       "; cross-entropy needs the softmax over the classes of {batch, classes}");
    return n.inputs[0];  // a sigmoid is element-wise: its logits may be reshaped like the output
  }
  if (n.role == NodeRole::Op && !crossed_dropout && probabilities_upstream(g, v, folded))
    throw ValueError(loss.name + " on output '" + output + "': the output mixes " + folded_name +
                     " probabilities (through " + op_info(n.op).name +
                     ") instead of ending in the " + folded_name +
                     ", and cross-entropy on probabilities is not supported: end the output in the " + folded_name +
                     " (it is folded into the loss) or give logits");
  // A ReLU folded into the op before it (kReluOutput) ends the output as a Relu op would.
  const bool folded_relu = n.role == NodeRole::Op && takes_relu_output(n.op) && (n.attrs.flags & kReluOutput);
  if (n.role == NodeRole::Op && (is_activation(n.op) || n.op == OpKind::Softmax || n.op == OpKind::Sigmoid ||
                                 crossed_dropout || folded_relu)) {
    const char* act = crossed_dropout ? "dropout" : folded_relu ? "relu" : op_info(n.op).name;
    throw ValueError(loss.name + " on output '" + output + "' needs a final " + folded_name +
                     " (folded into the loss) or a linear output (taken as logits); it ends in " + act +
                     ". Use activation \"" + folded_name + "\", or \"mse\" for other outputs");
  }
  return out;
}

// A custom loss's per-row losses {batch}, checked.
Value custom_loss_rows(Graph& g, const Loss& loss, Value y, Value out, const std::string& output, int64_t b) {
  const Value rows = loss.function(g, y, out);
  if (!rows.valid() || g.shape(rows) != Shape{b} || g.dtype(rows) != DType::Float32)
    throw ShapeError("custom loss '" + loss.name + "' on output '" + output +
                     "' must return float32 per-row losses of shape {batch} ({" + std::to_string(b) +
                     "} for the graph being built); got " + (rows.valid() ? g.shape(rows).str() : std::string("no value")));
  return rows;
}

LossHead build_loss_head(Graph& g, const Loss& loss, const std::string& output, Value y_pred, Value y_pred_flat,
                         const Shape& shape, Value w, Value mask) {
  const int64_t b = shape[0];
  const Shape flat{b, shape.row_size()};
  LossHead head;
  switch (loss.kind) {
    case LossKind::SparseCategoricalCrossentropy:
    case LossKind::CategoricalCrossentropy: {
      // {batch, steps..., classes}: every position is a row of the loss (Keras averages over them all).
      const bool sparse = loss.kind == LossKind::SparseCategoricalCrossentropy;
      const int64_t classes = shape[shape.rank() - 1], rows = shape.numel() / classes;
      head.y = sparse ? g.input(output + "/y", Shape{rows}, DType::Int32) : g.input(output + "/y", Shape{rows, classes});
      Value logits = cross_entropy_logits(g, y_pred, output, loss);
      if (g.shape(logits).rank() != 2) logits = g.reshape(logits, Shape{rows, classes});
      if (mask.valid()) {
        // Keras 3's masked loss: padded positions weigh 0 and the mean is over the others,
        // sum(mask ce) / (sum(mask) + 1e-7).
        const Value m = g.reshape(mask, Shape{rows});
        const Value mean_over_rows = g.softmax_cross_entropy(logits, head.y, m);
        head.loss = g.div(g.scale(mean_over_rows, float(rows)), g.add(g.sum(m), g.fill({}, 1e-7f)));
        break;
      }
      head.loss = g.softmax_cross_entropy(logits, head.y, w);
      break;
    }
    case LossKind::BinaryCrossentropy: {
      head.y = g.input(output + "/y", flat);
      const Value logits = cross_entropy_logits(g, y_pred, output, loss);
      head.loss = g.binary_cross_entropy(g.shape(logits) == flat ? logits : g.reshape(logits, flat), head.y, w);
      break;
    }
    case LossKind::MeanSquaredError:
      head.y = g.input(output + "/y", flat);
      head.loss = g.mse_loss(y_pred_flat, head.y, w);
      break;
    case LossKind::MeanAbsoluteError:
      head.y = g.input(output + "/y", flat);
      head.loss = g.mae_loss(y_pred_flat, head.y, w);
      break;
    case LossKind::Huber:
      head.y = g.input(output + "/y", flat);
      head.loss = g.huber_loss(y_pred_flat, head.y, 1.0f, w);
      break;
    case LossKind::Custom: {
      head.y = g.input(output + "/y", shape);
      const Value rows = custom_loss_rows(g, loss, head.y, y_pred, output, b);
      // Keras' sum over batch size: weighted per-row losses, summed, over the row count.
      head.loss = g.scale(g.sum(w.valid() ? g.mul(rows, w) : rows), 1.0f / float(b));
      break;
    }
  }
  return head;
}

}  // namespace detail
}  // namespace tensorgrad
