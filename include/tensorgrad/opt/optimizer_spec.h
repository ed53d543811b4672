#pragma once
// What optimizer trains a model and what it remembers: the settings
// (OptimizerSpec, built from Keras-style options structs) and the persistent
// state every optimizer context of one model shares (moments, step count,
// the flat gradient buffer, the communicator of data-parallel training).
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tensorgrad/core/tensor.h"
#include "tensorgrad/dist/communicator.h"
#include "tensorgrad/opt/schedules.h"

namespace tensorgrad {

/// Keyword arguments of OptimizerSpec::sgd, in the order of Keras 3's
/// `keras.optimizers.SGD` (fields PyTorch has and Keras lacks after Keras'
/// own), with Keras' defaults: write them as designated initializers,
/// `OptimizerSpec::sgd({.learning_rate = 0.1f, .momentum = 0.9f, .nesterov = true})`.
/// Each field means what the OptimizerSpec field of the same name means (a
/// learning_rate_schedule, as Keras' learning_rate given a schedule, replaces
/// learning_rate: `{.learning_rate_schedule = ExponentialDecay{0.1f, 100, 0.5f}, .momentum = 0.9f}`).
struct SGDOptions {
  float learning_rate = 0.01f;  ///< the constant rate, > 0 (unused with a schedule)
  std::optional<LearningRateSchedule> learning_rate_schedule{};  ///< replaces learning_rate when set
  float momentum = 0.0f;        ///< in [0, 1]; 0: no momentum buffer
  bool nesterov = false;        ///< Nesterov momentum (needs momentum > 0, dampening 0)
  float dampening = 0.0f;       ///< PyTorch's; Keras has none
  float weight_decay = 0.0f;    ///< in [0, 1]; 0: none
  bool decoupled_weight_decay = true;  ///< Keras' decay of the weights; false: PyTorch's L2 on the gradient
  /// Gradient clipping, at most one set; 0 = off (see OptimizerSpec::clipnorm).
  ///@{
  float clipnorm = 0.0f, clipvalue = 0.0f, global_clipnorm = 0.0f;
  ///@}
};

/// Keyword arguments of OptimizerSpec::rmsprop, in the order of Keras 3's
/// `keras.optimizers.RMSprop`, with Keras' defaults (learning rate 1e-3, rho
/// 0.9, no momentum, epsilon 1e-7 inside the square root, not centered).
/// PyTorch's RMSprop is `{.learning_rate = 0.01f, .rho = 0.99f, .epsilon =
/// 1e-8f, .epsilon_inside_sqrt = false}` (rho is its alpha), with
/// `.decoupled_weight_decay = false` for its weight_decay.
struct RMSpropOptions {
  float learning_rate = 1e-3f;  ///< the constant rate, > 0 (unused with a schedule)
  std::optional<LearningRateSchedule> learning_rate_schedule{};  ///< replaces learning_rate when set
  float rho = 0.9f;             ///< the decay of the mean square, in [0, 1) (PyTorch's alpha)
  float momentum = 0.0f;        ///< in [0, 1]; 0: no momentum buffer
  float epsilon = 1e-7f;        ///< > 0, added to the denominator
  bool centered = false;        ///< divide by the variance estimate instead of the mean square
  bool epsilon_inside_sqrt = true;  ///< sqrt(v + epsilon) (Keras); false: sqrt(v) + epsilon (PyTorch)
  float weight_decay = 0.0f;    ///< in [0, 1]; 0: none
  bool decoupled_weight_decay = true;  ///< Keras' decay of the weights; false: PyTorch's L2 on the gradient
  /// Gradient clipping, at most one set; 0 = off (see OptimizerSpec::clipnorm).
  ///@{
  float clipnorm = 0.0f, clipvalue = 0.0f, global_clipnorm = 0.0f;
  ///@}
};

/// Keyword arguments of OptimizerSpec::adagrad, in the order of Keras 3's
/// `keras.optimizers.Adagrad`, with Keras' defaults (learning rate 1e-3,
/// initial accumulator 0.1, epsilon 1e-7 inside the square root). PyTorch's
/// Adagrad is `{.learning_rate = 0.01f, .initial_accumulator_value = 0.0f,
/// .epsilon = 1e-10f, .epsilon_inside_sqrt = false}`, with
/// `.decoupled_weight_decay = false` for its weight_decay.
struct AdagradOptions {
  float learning_rate = 1e-3f;  ///< the constant rate, > 0 (unused with a schedule)
  std::optional<LearningRateSchedule> learning_rate_schedule{};  ///< replaces learning_rate when set
  float initial_accumulator_value = 0.1f;  ///< the starting sum of squared gradients, >= 0
  float epsilon = 1e-7f;        ///< > 0, added to the denominator
  bool epsilon_inside_sqrt = true;  ///< sqrt(v + epsilon) (Keras); false: sqrt(v) + epsilon (PyTorch)
  float weight_decay = 0.0f;    ///< in [0, 1]; 0: none
  bool decoupled_weight_decay = true;  ///< Keras' decay of the weights; false: PyTorch's L2 on the gradient
  /// Gradient clipping, at most one set; 0 = off (see OptimizerSpec::clipnorm).
  ///@{
  float clipnorm = 0.0f, clipvalue = 0.0f, global_clipnorm = 0.0f;
  ///@}
};

/// Optimizer settings: which optimizer, its hyper-parameters, weight decay
/// and gradient clipping. Built by the factories below (Keras' defaults; the
/// eager API will take PyTorch's), whose fields may then be changed
/// directly; compile() and OptimizerContext check them with validate().
///
/// The update formulas are PyTorch's (torch.optim), written per element in
/// src/kernels/optimizer.cpp. Where Keras computes the same optimizer
/// differently, a field chooses:
///  - epsilon_inside_sqrt (RMSprop, Adagrad): Keras divides by sqrt(v + eps),
///    PyTorch by sqrt(v) + eps.
///  - decoupled_weight_decay: Keras 3 (every optimizer) and PyTorch's AdamW
///    decay the weights, p <- p (1 - lr wd), before the update; PyTorch's
///    SGD, Adam, RMSprop and Adagrad add wd p to the gradient (L2) instead.
///  - Momentum (SGD, RMSprop): PyTorch's buffer holds gradients (SGD:
///    b <- momentum b + (1 - dampening) g, the step lr b); Keras' holds
///    learning-rate-scaled steps (m <- momentum m - lr g, the step m). At a
///    constant learning rate the two are the same; under a schedule (or
///    set_learning_rate, ReduceLROnPlateau) a new learning rate scales the
///    whole PyTorch step at once, while Keras' velocity keeps the steps taken
///    at the old rate and forgets them at the rate of `momentum`. tensorgrad
///    follows PyTorch.
///
/// Gradient clipping (clipnorm, global_clipnorm, clipvalue; 0 = off) runs in
/// the hook stage, after the gradients of the accumulation period are
/// complete (and, in data-parallel training, reduced across ranks) and before the user's
/// gradient hooks and the update, as graph ops on the device.
struct OptimizerSpec {
  /// The optimizers: Adam is AdamW with no weight decay.
  enum class Kind { AdamW, SGD, RMSprop, Adagrad };
  Kind kind = Kind::AdamW;  ///< which optimizer; its fields below say which apply
  /// The constant learning rate, when there is no schedule.
  float learning_rate = 1e-3f;
  /// Keras' learning_rate given a LearningRateSchedule (opt/schedules.h):
  /// the rate of each update is the schedule at the updates applied before
  /// it, computed in the update graph; learning_rate is then unused, and
  /// set_learning_rate throws TypeError (as Keras). Every optimizer, and
  /// decoupled weight decay, uses the scheduled rate. Its steps are
  /// optimizer updates: with gradient accumulation, one per period.
  std::optional<LearningRateSchedule> learning_rate_schedule{};
  /// Adam's moment decays and every optimizer's epsilon (SGD: unused).
  ///@{
  float beta_1 = 0.9f, beta_2 = 0.999f, epsilon = 1e-8f;
  ///@}
  /// In [0, 1]; 0 = none. Decoupled or L2 per decoupled_weight_decay.
  float weight_decay = 0.0f;
  /// True: p <- p (1 - lr wd) before the update (Keras 3, PyTorch's AdamW).
  /// False: g <- g + wd p before the update (L2; PyTorch's SGD, Adam,
  /// RMSprop and Adagrad).
  bool decoupled_weight_decay = true;
  /// SGD and RMSprop: the momentum factor in [0, 1]; 0 = none (no buffer).
  float momentum = 0.0f;
  /// SGD: Nesterov momentum (needs momentum > 0 and dampening 0, as PyTorch).
  bool nesterov = false;
  /// SGD: PyTorch's dampening in [0, 1]: the buffer takes (1 - dampening) of
  /// each gradient after the first.
  float dampening = 0.0f;
  /// RMSprop: the decay of the mean square in [0, 1) (PyTorch's alpha).
  float rho = 0.9f;
  /// RMSprop: divide by an estimate of the variance (the mean square less
  /// the squared mean gradient) instead of the mean square.
  bool centered = false;
  /// RMSprop and Adagrad: sqrt(v + epsilon) (Keras) instead of sqrt(v) +
  /// epsilon (PyTorch).
  bool epsilon_inside_sqrt = false;
  /// Adagrad: the starting value (>= 0) of every sum of squared gradients.
  float initial_accumulator_value = 0.1f;
  /// Gradient clipping, at most one of the three (as Keras, which would
  /// apply only the first set; here a second is a ValueError); 0 = off.
  /// clipnorm: each gradient tensor scaled by c / max(||g||, c) (Keras'
  /// per-tensor clip_by_norm). global_clipnorm: every gradient scaled by
  /// min(1, c / (||all gradients|| + 1e-6)) (PyTorch's clip_grad_norm_ with
  /// max_norm c; Keras' global_clipnorm without the 1e-6). clipvalue: each
  /// element clamped to [-c, c] (PyTorch's clip_grad_value_). Norms are
  /// summed in double, so gradients as large as float32 holds clip right;
  /// a norm that is inf or NaN (an inf or NaN gradient) sets the gradients
  /// it scales to NaN, as TensorFlow's clip_by_global_norm documents, so the
  /// divergence reaches the weights and the loss (TerminateOnNaN), and is
  /// logged once per process.
  ///@{
  float clipnorm = 0.0f, global_clipnorm = 0.0f, clipvalue = 0.0f;
  ///@}

  /// AdamW (PyTorch and ggml defaults: lr 1e-3, betas 0.9/0.999, eps 1e-8)
  /// with decoupled weight decay.
  static OptimizerSpec adamw(float learning_rate = 1e-3f, float weight_decay = 0.0f);
  /// Adam is AdamW with no weight decay (for PyTorch's Adam with L2, set
  /// weight_decay and decoupled_weight_decay = false).
  static OptimizerSpec adam(float learning_rate = 1e-3f);
  /// AdamW and Adam whose learning rate follows `schedule` (Keras'
  /// `keras.optimizers.AdamW(learning_rate=schedule)`); throws as validate().
  ///@{
  static OptimizerSpec adamw(const LearningRateSchedule& schedule, float weight_decay = 0.0f);
  static OptimizerSpec adam(const LearningRateSchedule& schedule);
  ///@}
  /// Plain SGD: p <- p * (1 - lr * weight_decay) - lr * g. (Kept for its
  /// callers; its second argument is the weight decay, not Keras' momentum:
  /// use the SGDOptions form for momentum.)
  static OptimizerSpec sgd(float learning_rate = 1e-2f, float weight_decay = 0.0f);
  /// SGD with Keras' keyword arguments and defaults (PyTorch's SGD, with
  /// its dampening, at a constant learning rate; see the struct comment).
  static OptimizerSpec sgd(const SGDOptions& options);
  /// RMSprop with Keras' keyword arguments and defaults.
  static OptimizerSpec rmsprop(const RMSpropOptions& options = {});
  /// Adagrad with Keras' keyword arguments and defaults.
  static OptimizerSpec adagrad(const AdagradOptions& options = {});
  /// Throws ValueError, naming the field, the value and the accepted range,
  /// for: a non-positive or non-finite learning rate; betas outside [0, 1);
  /// epsilon <= 0; weight decay outside [0, 1]; momentum or dampening
  /// outside [0, 1]; rho outside [0, 1); a negative initial accumulator;
  /// nesterov without momentum or with dampening (as PyTorch); a negative
  /// or non-finite clip value, or more than one clip option; and a field
  /// set away from its default on an optimizer it does not apply to
  /// (momentum on Adam, centered on SGD, ...); and an invalid
  /// learning_rate_schedule (see validate_schedule).
  void validate() const;
};

/// "AdamW", "SGD", "RMSprop" or "Adagrad".
const char* optimizer_name(OptimizerSpec::Kind kind);

/// Persistent optimizer state shared by every context of one model: the
/// hyper-parameters and step count, each parameter's moments and gradient
/// accumulator, and the position inside the accumulation period. Kept apart
/// from the context so that contexts for other batch sizes continue the same
/// optimizer (as a Keras optimizer lives across fit calls).
struct OptimizerState {
  Tensor hyper;  ///< {kHyperSize} float32, see HyperSlot
  /// {1} int64: optimizer updates applied so far (Keras' `iterations`, the t
  /// of Adam's bias corrections). A persistent tensor the update graph
  /// advances; writable, to resume a run.
  Tensor step;
  /// A parameter's optimizer state, each {parameter shape} float32, made
  /// when a graph first uses it (undefined when its optimizer has none):
  struct Slots {
    Tensor m;         ///< AdamW: first moment; RMSprop centered: mean gradient
    Tensor v;         ///< AdamW: second moment; RMSprop: mean square; Adagrad: sum of squares
    Tensor momentum;  ///< SGD and RMSprop with momentum: the momentum buffer
    Tensor acc;       ///< gradient accumulator: accumulation period > 1, or clipping
  };
  std::unordered_map<const void*, Slots> slots;  ///< by parameter memory
  /// The model's flat gradient buffer, which the hook stage's buckets cut
  /// (see GradientBuffer): {n} float32 on the model's device,
  /// every trainable weight's gradient one after another in the order of the
  /// training graph's trainable_parameters(), n the sum of their element
  /// counts. Made, zeroed, by the model's first training graph; every later
  /// training graph must have the same trainable weights (StateError
  /// otherwise). With accumulation or clipping it is the gradient
  /// accumulator (each Slots::acc a view of it); without, the hook stage
  /// copies a step's gradients into it before the hooks and back after.
  Tensor gradients;
  /// {n + 1} float32: `gradients` (a view of its first n elements) followed
  /// by one element the data-parallel reduction sends with the last bucket
  /// (the rows the rank's gradients stand for), so the row count costs no
  /// message of its own.
  Tensor gradients_with_rows;
  /// Data-parallel training: while set, every update first
  /// reduces the flat gradient buffer over the communicator's ranks, before
  /// clipping and the hooks (the hook stage's order), bucket by bucket
  /// (one reduce_broadcast per bucket): the gradient becomes the sum of the
  /// ranks' row-sums over the ranks' total rows, identical on every rank.
  /// Set by Model::fit with FitOptions::communicator (for the fit only) and
  /// by a Trainer with TrainerOptions::communicator; null: one process.
  std::shared_ptr<dist::Communicator> communicator;
  /// Where one trainable weight's gradient lies in `gradients`.
  struct GradientRange {
    const void* parameter = nullptr;  ///< the weight's memory (the key of `slots`)
    std::string name;                 ///< "<layer>/<weight>"
    Shape shape;                      ///< the weight's shape
    int64_t offset = 0;               ///< first element in `gradients`
  };
  /// The layout of `gradients`, in order; empty until it is made.
  std::vector<GradientRange> gradient_layout;
  /// True once some training graph accumulates into `gradients` (then it
  /// must be zero between updates, and the hook stage of a graph without
  /// accumulation clears it after use).
  bool gradients_accumulate = false;
  int64_t micro_step = 0;                        ///< physical steps since the last update
  /// {1} int64: the model's dropout counter, a persistent tensor every
  /// training graph of the model binds (Graph::set_rng_counter) and advances
  /// once per run, so that no two steps (of any batch size) share a mask.
  /// 0 at a model's first compile, carried across a recompile: masks depend
  /// on the layers' seeds and the steps alone.
  Tensor rng_counter;
  /// The spec's learning-rate schedule, if any, and what the update graph
  /// reads of it (LrScheduleKind in ops/op.h): `schedule_steps` {n} int64 and
  /// `schedule_values` {m} float32, persistent; both undefined without one.
  std::optional<LearningRateSchedule> learning_rate_schedule;
  /// The schedule's numbers as the update graph reads them (see above).
  ///@{
  Tensor schedule_steps, schedule_values;
  ///@}
  /// Fresh state for `spec` (step 0, no moments yet) on `device`, where the
  /// update graph that reads it runs (the model's backend's device); throws
  /// as spec.validate(), and StateError as allocate_storage for a device
  /// without a backend.
  explicit OptimizerState(const OptimizerSpec& spec, Device device = Device::CPU);
  /// The value of `step`, read to the host by a copy (exact at any count).
  int64_t iterations() const;
  /// The learning rate of the next update (Keras' optimizer.learning_rate):
  /// the schedule at iterations() (in double, as learning_rate_at), or the
  /// constant rate; read from the persistent tensors by copies. Allocates
  /// nothing (after a first call on the thread), except for a piecewise
  /// schedule of more than 15 boundaries, whose numbers are read into vectors.
  double learning_rate() const;
  /// Sets the constant learning rate from the next update on, a copy of the
  /// host value into hyper[kLr]. Throws ValueError unless lr is positive and
  /// finite, and TypeError when the optimizer has a learning-rate schedule
  /// (as Keras: a schedule's rate is not settable).
  void set_learning_rate(float lr);
};

}  // namespace tensorgrad
