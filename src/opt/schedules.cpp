#include "tensorgrad/opt/schedules.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <type_traits>

#include "kernels/kernels.h"
#include "opt/schedule_encoding.h"
#include "tensorgrad/core/error.h"
#include "tensorgrad/ops/op.h"

namespace tensorgrad {

static_assert(std::is_same_v<std::variant_alternative_t<kPiecewiseConstantDecay - 1, LearningRateSchedule>,
                             PiecewiseConstantDecay> &&
              std::is_same_v<std::variant_alternative_t<kExponentialDecay - 1, LearningRateSchedule>, ExponentialDecay> &&
              std::is_same_v<std::variant_alternative_t<kCosineDecay - 1, LearningRateSchedule>, CosineDecay> &&
              std::is_same_v<std::variant_alternative_t<kCosineDecayRestarts - 1, LearningRateSchedule>,
                             CosineDecayRestarts>,
              "schedule_kind maps the variant's order onto LrScheduleKind");

namespace {
template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
// Spelled out for compilers without C++20's aggregate deduction (clang
// before 17, which scripts/fuzz.sh builds the library with).
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

std::string str(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// The checks every schedule's fields share; `name` is the schedule's class.
struct Checker {
  std::string name;
  [[noreturn]] void fail(const char* field, const std::string& want, const std::string& got,
                         const char* advice) const {
    throw ValueError(name + ": " + field + " must be " + want + "; got " + got + ". " + advice);
  }
  void steps_at_least(const char* field, int64_t v, int64_t lo) const {
    if (v < lo)
      fail(field, lo == 0 ? "an update count >= 0" : "an update count >= 1", std::to_string(v),
           "Steps count optimizer updates (not epochs or micro-batches)");
  }
  void positive(const char* field, float v, const char* advice) const {
    if (!(v > 0.0f) || !std::isfinite(v)) fail(field, "a positive finite number", str(v), advice);
  }
  void non_negative(const char* field, float v, const char* advice) const {
    if (!(v >= 0.0f) || !std::isfinite(v)) fail(field, "a finite number >= 0", str(v), advice);
  }
  void fraction(const char* field, float v) const {
    if (!(v >= 0.0f && v <= 1.0f)) fail(field, "in [0, 1]", str(v), "It is the floor as a fraction of the rate; 0 decays to 0");
  }
};
}  // namespace

const char* schedule_name(const LearningRateSchedule& schedule) {
  return std::visit(Overloaded{[](const PiecewiseConstantDecay&) { return "PiecewiseConstantDecay"; },
                               [](const ExponentialDecay&) { return "ExponentialDecay"; },
                               [](const CosineDecay&) { return "CosineDecay"; },
                               [](const CosineDecayRestarts&) { return "CosineDecayRestarts"; }},
                    schedule);
}

void validate_schedule(const LearningRateSchedule& schedule) {
  const Checker c{schedule_name(schedule)};
  std::visit(
      Overloaded{
          [&](const PiecewiseConstantDecay& s) {
            if (s.values.size() != s.boundaries.size() + 1)
              c.fail("values", "one more than the boundaries (" + std::to_string(s.boundaries.size() + 1) + ")",
                     std::to_string(s.values.size()) + " values for " + std::to_string(s.boundaries.size()) +
                         " boundaries",
                     "values[i] is the rate up to boundaries[i], values.back() the rate after the last boundary");
            for (size_t i = 1; i < s.boundaries.size(); ++i)
              if (s.boundaries[i] <= s.boundaries[i - 1])
                c.fail("boundaries", "strictly increasing",
                       "boundaries[" + std::to_string(i - 1) + "] = " + std::to_string(s.boundaries[i - 1]) +
                           " then boundaries[" + std::to_string(i) + "] = " + std::to_string(s.boundaries[i]),
                       "List the update counts where the rate changes in order, each once");
            for (float v : s.values) c.non_negative("each of values", v, "Each value is a learning rate");
          },
          [&](const ExponentialDecay& s) {
            c.positive("initial_learning_rate", s.initial_learning_rate, "It is the rate of the first update");
            c.steps_at_least("decay_steps", s.decay_steps, 1);
            c.positive("decay_rate", s.decay_rate, "The rate is multiplied by decay_rate every decay_steps updates");
          },
          [&](const CosineDecay& s) {
            if (s.warmup_target) {
              c.non_negative("initial_learning_rate", s.initial_learning_rate,
                             "With a warm-up it is the rate the warm-up starts from (0 is usual)");
              c.positive("warmup_target", *s.warmup_target, "It is the rate the warm-up ends at and the decay starts from");
            } else {
              c.positive("initial_learning_rate", s.initial_learning_rate, "It is the rate the decay starts from");
            }
            c.steps_at_least("decay_steps", s.decay_steps, 1);
            c.fraction("alpha", s.alpha);
            c.steps_at_least("warmup_steps", s.warmup_steps, 0);
          },
          [&](const CosineDecayRestarts& s) {
            c.positive("initial_learning_rate", s.initial_learning_rate, "It is the rate the first period starts from");
            c.steps_at_least("first_decay_steps", s.first_decay_steps, 1);
            if (!(s.t_mul >= 1.0f) || !std::isfinite(s.t_mul))
              c.fail("t_mul", "a finite number >= 1", str(s.t_mul),
                     "Each period lasts t_mul times the one before; shorter periods would run out (Keras' rate "
                     "turns NaN there). 1 repeats the first period, 2 is Keras' default");
            c.positive("m_mul", s.m_mul, "Each period starts from m_mul times the one before's amplitude; 1 keeps it");
            c.fraction("alpha", s.alpha);
          }},
      schedule);
}

EncodedSchedule encode_schedule(const LearningRateSchedule& schedule) {
  return std::visit(
      Overloaded{
          [](const PiecewiseConstantDecay& s) {
            EncodedSchedule e{kPiecewiseConstantDecay, s.boundaries, s.values};
            e.steps.push_back(std::numeric_limits<int64_t>::max());  // the end marker: values.back() from there on
            return e;
          },
          [](const ExponentialDecay& s) {
            return EncodedSchedule{kExponentialDecay, {s.decay_steps, s.staircase ? 1 : 0},
                                   {s.initial_learning_rate, s.decay_rate}};
          },
          [](const CosineDecay& s) {
            return EncodedSchedule{kCosineDecay, {s.decay_steps, s.warmup_steps, s.warmup_target ? 1 : 0},
                                   {s.initial_learning_rate, s.alpha, s.warmup_target.value_or(0.0f)}};
          },
          [](const CosineDecayRestarts& s) {
            return EncodedSchedule{kCosineDecayRestarts, {s.first_decay_steps},
                                   {s.initial_learning_rate, s.t_mul, s.m_mul, s.alpha}};
          }},
      schedule);
}

double learning_rate_at(const LearningRateSchedule& schedule, int64_t step) {
  validate_schedule(schedule);
  if (step < 0)
    throw ValueError(std::string(schedule_name(schedule)) + ": the step must be an update count >= 0; got " +
                     std::to_string(step));
  const EncodedSchedule e = encode_schedule(schedule);
  return kernels::scheduled_learning_rate(e.kind, e.steps, e.values, step);
}

}  // namespace tensorgrad
