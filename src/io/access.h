#pragma once
// The io layer's view into the objects it saves and restores: their training
// state (DESIGN.md, "One training state per model": the optimizer state, the
// random streams, the step counters) is not public API, so Model, Sequential,
// Trainer and OptimizerContext befriend this struct. Private to the library.
#include <memory>
#include <random>

#include "nn/functional.h"
#include "tensorgrad/nn/sequential.h"
#include "tensorgrad/nn/trainer.h"

namespace tensorgrad::io::detail {

struct Access {
  static const nn::FunctionalGraph& graph(const nn::Model& m) { return *m.graph_; }
  static const std::shared_ptr<OptimizerState>& optimizer_state(const nn::Model& m) { return m.state_.opt_state; }
  static std::mt19937_64& random_stream(nn::Model& m) { return m.state_.rng; }
  static const std::mt19937_64& random_stream(const nn::Model& m) { return m.state_.rng; }
  static nn::Sequential sequential(nn::Model&& m) { return nn::Sequential(std::move(m)); }
  static const nn::Model& model(const nn::Trainer& t) { return t.model_; }
  static nn::Model& model(nn::Trainer& t) { return t.model_; }
  static OptimizerContext& context(const nn::Trainer& t) { return *t.ctx_; }
  static void set_n_steps(OptimizerContext& c, int64_t n) { c.n_steps_ = n; }
};

}  // namespace tensorgrad::io::detail
