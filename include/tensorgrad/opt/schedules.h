#pragma once
// Per-update learning-rate schedules, as Keras 3's keras.optimizers.schedules:
// plain value structs with Keras' field names and defaults, put in
// OptimizerSpec::learning_rate_schedule (or an options struct's). The rate is
// computed inside the update graph, by the op that advances the step counter,
// from the 64-bit count of updates applied so far (Keras' `iterations`, read
// before the update increments it: the first update uses step 0), so a step
// writes nothing from the host and allocates nothing. Every optimizer reads
// it, decoupled weight decay included (p <- p (1 - lr wd) with the scheduled
// lr, as Keras 3 and PyTorch).
//
// A step is one optimizer update: not a micro-batch (with gradient
// accumulation, the updates, one per accumulation period), and not an epoch.
#include <cstdint>
#include <optional>
#include <variant>
#include <vector>

namespace tensorgrad {

/// As Keras' keras.optimizers.schedules.PiecewiseConstantDecay: values[0]
/// while step <= boundaries[0], values[i] while boundaries[i-1] < step <=
/// boundaries[i], and values.back() once step > boundaries.back(). Boundaries
/// are update counts, strictly increasing; values are learning rates
/// (finite, >= 0), one more than the boundaries.
struct PiecewiseConstantDecay {
  std::vector<int64_t> boundaries;  ///< update counts, strictly increasing
  std::vector<float> values;        ///< learning rates, one more than the boundaries
};

/// As Keras' keras.optimizers.schedules.ExponentialDecay:
/// initial_learning_rate * decay_rate^(step / decay_steps), the exponent
/// floored with staircase (the rate drops every decay_steps updates).
/// decay_steps >= 1 updates; decay_rate positive and finite (above 1 grows).
struct ExponentialDecay {
  float initial_learning_rate = 0.0f;  ///< the rate at step 0, > 0
  int64_t decay_steps = 0;             ///< updates per factor of decay_rate, >= 1
  float decay_rate = 0.0f;             ///< the factor every decay_steps updates
  bool staircase = false;              ///< floor the exponent: drop in steps
};

/// As Keras' keras.optimizers.schedules.CosineDecay, with its optional linear
/// warm-up. Without warmup_target: initial_learning_rate * ((1 - alpha) *
/// 0.5 (1 + cos(pi min(step, decay_steps) / decay_steps)) + alpha), so the rate
/// ends at alpha * initial_learning_rate after decay_steps updates and stays
/// there; warmup_steps is unused. With warmup_target: for step < warmup_steps
/// the rate goes linearly from initial_learning_rate (step 0) towards
/// warmup_target, then decays as above from warmup_target over decay_steps
/// more updates (step - warmup_steps in the formula).
/// decay_steps >= 1, warmup_steps >= 0 (updates); alpha in [0, 1] (the floor
/// as a fraction of the rate decayed from).
struct CosineDecay {
  float initial_learning_rate = 0.0f;  ///< the rate at step 0
  int64_t decay_steps = 0;             ///< updates the decay takes, >= 1
  float alpha = 0.0f;                  ///< the final rate as a fraction of the decayed-from rate, in [0, 1]
  std::optional<float> warmup_target;  ///< the rate the warm-up reaches, > 0; none: no warm-up
  int64_t warmup_steps = 0;            ///< updates the warm-up takes, >= 0
};

/// As Keras' keras.optimizers.schedules.CosineDecayRestarts (SGDR,
/// Loshchilov & Hutter): a cosine decay from initial_learning_rate towards
/// alpha * initial_learning_rate over first_decay_steps updates, then a
/// restart; period k (from 0) lasts first_decay_steps * t_mul^k updates and
/// starts from m_mul^k times the initial amplitude: lr = initial_learning_rate
/// * ((1 - alpha) * m_mul^k * 0.5 (1 + cos(pi * fraction of period k done)) +
/// alpha). first_decay_steps >= 1; t_mul >= 1 (Keras takes any, but periods
/// that shrink run out after first_decay_steps / (1 - t_mul) updates, where
/// Keras' rate turns NaN); m_mul > 0; alpha in [0, 1].
struct CosineDecayRestarts {
  float initial_learning_rate = 0.0f;  ///< the rate at step 0, > 0
  int64_t first_decay_steps = 0;       ///< updates of the first period, >= 1
  float t_mul = 2.0f;                  ///< each period's length over the previous one's, >= 1
  float m_mul = 1.0f;                  ///< each period's starting amplitude over the previous one's, > 0
  float alpha = 0.0f;                  ///< the floor as a fraction of initial_learning_rate, in [0, 1]
};

/// One of Keras' schedules (Keras' LearningRateSchedule classes).
using LearningRateSchedule = std::variant<PiecewiseConstantDecay, ExponentialDecay, CosineDecay, CosineDecayRestarts>;

/// Keras' class name: "PiecewiseConstantDecay", "ExponentialDecay",
/// "CosineDecay" or "CosineDecayRestarts".
const char* schedule_name(const LearningRateSchedule& schedule);

/// Throws ValueError naming the schedule, the field, the value and the
/// accepted range: decay_steps or first_decay_steps < 1; warmup_steps < 0;
/// a learning rate negative or not finite (initial_learning_rate must be > 0
/// except as the start of a CosineDecay warm-up; warmup_target > 0); a
/// decay_rate not positive and finite; alpha outside [0, 1]; t_mul < 1 or not
/// finite; m_mul not positive and finite; boundaries not strictly increasing,
/// or values.size() != boundaries.size() + 1.
void validate_schedule(const LearningRateSchedule& schedule);

/// The learning rate `schedule` gives at `step` (optimizer updates applied so
/// far, >= 0), in double: the number the update graph computes (and rounds to
/// float32) for the update after `step` updates. For reporting; throws as
/// validate_schedule, and ValueError for a negative step.
double learning_rate_at(const LearningRateSchedule& schedule, int64_t step);

}  // namespace tensorgrad
