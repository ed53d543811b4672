// Data-parallel training's start and failure (nn/data_parallel.h); the
// gradient reduction itself is the optimizer context's (opt/optimizer.cpp).
#include "tensorgrad/nn/data_parallel.h"

#include <cstdio>
#include <sstream>
#include <type_traits>
#include <variant>
#include <vector>

#include "tensorgrad/core/error.h"

namespace tensorgrad::nn {

namespace {
struct Entry {
  std::string name;
  Tensor* tensor;
};

// Broadcasts rank 0's string to every rank.
std::string broadcast_string(dist::Communicator& comm, std::string text) {
  int64_t size = int64_t(text.size());
  comm.broadcast_bytes(std::as_writable_bytes(std::span<int64_t>(&size, 1)), 0);
  text.resize(size_t(size));
  comm.broadcast_bytes(std::as_writable_bytes(std::span<char>(text.data(), text.size())), 0);
  return text;
}

std::string config_text(const LayerConfig& config) {
  std::ostringstream out;
  for (const auto& [key, value] : config.values()) {
    out << " " << key << "=";
    std::visit(
        [&](const auto& v) {
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, std::vector<int64_t>>) {
            for (size_t i = 0; i < v.size(); ++i) out << (i ? "," : "") << v[i];
          } else {
            out << v;
          }
        },
        value);
  }
  return out.str();
}

// What must be the same on every rank besides the tensors: the layers and
// their configuration, and the compile settings (the optimizer's slots are
// made at the first step, so a different optimizer would show only later).
std::vector<std::pair<std::string, std::string>> model_settings(const Model& model) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& layer : model.layers())
    out.push_back({"layer '" + layer->name() + "'", std::string(layer->type()) +
                                                        (layer->trainable ? "" : " frozen") +
                                                        config_text(layer->config())});
  const OptimizerSpec& o = model.optimizer();
  std::ostringstream spec;
  spec << optimizer_name(o.kind) << " lr=" << o.learning_rate << " schedule=" << o.learning_rate_schedule.has_value()
       << " betas=" << o.beta_1 << "," << o.beta_2 << " epsilon=" << o.epsilon << " weight_decay=" << o.weight_decay
       << " decoupled=" << o.decoupled_weight_decay << " momentum=" << o.momentum << " nesterov=" << o.nesterov
       << " dampening=" << o.dampening << " rho=" << o.rho << " centered=" << o.centered
       << " epsilon_inside_sqrt=" << o.epsilon_inside_sqrt << " initial_accumulator=" << o.initial_accumulator_value
       << " clipnorm=" << o.clipnorm << " global_clipnorm=" << o.global_clipnorm << " clipvalue=" << o.clipvalue;
  out.push_back({"optimizer", spec.str()});
  std::string losses, metrics;
  for (size_t i = 0; i < model.losses().size(); ++i)
    losses += (i ? ", " : "") + model.losses()[i].name + " x" + std::to_string(model.loss_weights()[i]);
  for (const auto& names : model.output_metrics()) {
    metrics += metrics.empty() ? "[" : " [";
    for (size_t i = 0; i < names.size(); ++i) metrics += (i ? "," : "") + names[i];
    metrics += "]";
  }
  out.push_back({"losses", losses});
  out.push_back({"metrics", metrics});
  out.push_back({"gradient bucket bytes", std::to_string(model.gradient_bucket_bytes())});
  return out;
}
}  // namespace

void check_ranks_agree(dist::Communicator& comm, const std::vector<std::pair<std::string, std::string>>& settings,
                       const std::string& what, const std::string& advice) {
  std::string text;
  for (const auto& [name, value] : settings) text += name + ": " + value + "\n";
  auto split = [](const std::string& lines) {
    std::vector<std::string> out;
    std::istringstream in(lines);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  };
  const std::vector<std::string> mine = split(text), root = split(broadcast_string(comm, text));
  std::string difference;
  for (size_t i = 0; i < std::max(mine.size(), root.size()) && difference.empty(); ++i) {
    if (i >= mine.size()) difference = "rank 0 has " + root[i] + " after this rank's last entry";
    else if (i >= root.size()) difference = "this rank has " + mine[i] + " after rank 0's last entry";
    else if (mine[i] != root[i]) difference = "'" + mine[i] + "' here, '" + root[i] + "' on rank 0";
  }
  double differing = difference.empty() ? 0.0 : 1.0;
  comm.reduce_broadcast(std::span<double>(&differing, 1));
  if (differing > 0.0)
    throw ValueError("data-parallel training: the ranks' " + what + " differ (" + std::to_string(int(differing)) +
                     " of " + std::to_string(comm.size()) + " ranks differ from rank 0)" +
                     (difference.empty() ? std::string(". See the other ranks' messages")
                                         : "; on rank " + std::to_string(comm.rank()) + ": " + difference) +
                     ". " + advice);
}

void broadcast_training_state(Model& model, dist::Communicator& comm) {
  if (model.released()) throw StateError("broadcast_training_state: the model has been freed");
  if (!model.compiled())
    throw StateError("broadcast_training_state: the model is not compiled; call compile() on every rank first");
  std::vector<Weight> weights = model.weights();
  std::vector<Entry> entries;
  for (Weight& w : weights) entries.push_back({"weight '" + w.name + "'", &w.value});
  Tensor micro_step = Tensor::zeros(Shape{1}, DType::Int64);
  if (OptimizerState* s = model.state_.opt_state.get()) {
    entries.push_back({"optimizer hyper-parameters", &s->hyper});
    entries.push_back({"optimizer iterations", &s->step});
    entries.push_back({"dropout counter", &s->rng_counter});
    if (s->schedule_steps.defined()) entries.push_back({"learning-rate schedule steps", &s->schedule_steps});
    if (s->schedule_values.defined()) entries.push_back({"learning-rate schedule values", &s->schedule_values});
    if (s->gradients_with_rows.defined()) entries.push_back({"gradient accumulators", &s->gradients_with_rows});
    for (Weight& w : weights) {
      auto it = s->slots.find(w.value.raw());
      if (it == s->slots.end()) continue;
      OptimizerState::Slots& slot = it->second;
      const std::pair<const char*, Tensor*> named[] = {{"m", &slot.m}, {"v", &slot.v}, {"momentum", &slot.momentum}};
      for (const auto& [what, t] : named)
        if (t->defined()) entries.push_back({"optimizer slot " + std::string(what) + " of '" + w.name + "'", t});
    }
    micro_step.data<int64_t>()[0] = s->micro_step;
    entries.push_back({"position in the accumulation period", &micro_step});
  }
  std::vector<std::pair<std::string, std::string>> settings = model_settings(model);
  for (const Entry& e : entries) {
    if (e.tensor->device() != Device::CPU)
      throw StateError("broadcast_training_state: the " + e.name + " is on " + device_name(e.tensor->device()) +
                       "; data-parallel training broadcasts CPU tensors (device collectives are not built yet)");
    settings.push_back({e.name, std::string(dtype_name(e.tensor->dtype())) + " " + e.tensor->shape().str()});
  }
  check_ranks_agree(comm, settings, "models",
                    "Build and compile the same model on every rank (and restore a checkpoint on every rank, or on "
                    "none)");
  for (const Entry& e : entries) comm.broadcast(*e.tensor, 0);
  if (OptimizerState* s = model.state_.opt_state.get()) s->micro_step = micro_step.data<int64_t>()[0];
  std::ostringstream stream;
  stream << model.random_stream();
  std::istringstream(broadcast_string(comm, stream.str())) >> model.random_stream();
}

void abort_job(const dist::Communicator& comm, const std::string& where, const std::exception& error) {
  std::fprintf(stderr, "tensorgrad rank %d of %d: %s: %s\ntensorgrad rank %d: ending the job (MPI_Abort 1) so that "
                       "no rank waits for this one in a collective\n",
               comm.rank(), comm.size(), where.c_str(), error.what(), comm.rank());
  std::fflush(stderr);
  comm.abort(1);
}

}  // namespace tensorgrad::nn
