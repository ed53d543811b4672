// Data-parallel training's start and failure (nn/data_parallel.h); the
// gradient reduction itself is the optimizer context's (opt/optimizer.cpp).
#include "tensorgrad/nn/data_parallel.h"

#include <cstdio>
#include <sstream>
#include <vector>

#include "tensorgrad/core/error.h"

namespace tensorgrad::nn {

namespace {
struct Entry {
  std::string name;
  Tensor* tensor;
};

std::string describe(const Entry& e) {
  return e.name + " " + dtype_name(e.tensor->dtype()) + " " + e.tensor->shape().str();
}

// The lines of `text`, split at '\n'.
std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// Broadcasts rank 0's string to every rank.
std::string broadcast_string(dist::Communicator& comm, std::string text) {
  int64_t size = int64_t(text.size());
  comm.broadcast_bytes(std::as_writable_bytes(std::span<int64_t>(&size, 1)), 0);
  text.resize(size_t(size));
  comm.broadcast_bytes(std::as_writable_bytes(std::span<char>(text.data(), text.size())), 0);
  return text;
}
}  // namespace

void broadcast_training_state(Model& model, dist::Communicator& comm) {
  if (model.released()) throw StateError("broadcast_training_state: the model has been freed");
  if (!model.compiled())
    throw StateError("broadcast_training_state: the model is not compiled; call compile() on every rank first");
  std::vector<Weight> weights = model.weights();
  std::vector<Entry> entries;
  for (Weight& w : weights) entries.push_back({"weight '" + w.name + "'", &w.value});
  Tensor micro_step = Tensor::zeros(Shape{1}, DType::Int64);
  if (OptimizerState* s = model.opt_state_.get()) {
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
  std::string signature;
  for (const Entry& e : entries) {
    if (e.tensor->device() != Device::CPU)
      throw StateError("broadcast_training_state: the " + e.name + " is on " + device_name(e.tensor->device()) +
                       "; data-parallel training broadcasts CPU tensors (device collectives are not built yet)");
    signature += describe(e) + "\n";
  }
  // Every rank compares its list with rank 0's; the verdicts are summed so
  // that all ranks throw together or none does.
  const std::vector<std::string> mine = lines(signature), root = lines(broadcast_string(comm, signature));
  std::string difference;
  for (size_t i = 0; i < std::max(mine.size(), root.size()) && difference.empty(); ++i) {
    if (i >= mine.size()) difference = "rank 0 has " + root[i] + " after this rank's last entry";
    else if (i >= root.size()) difference = "this rank has " + mine[i] + " after rank 0's last entry";
    else if (mine[i] != root[i])
      difference = "entry " + std::to_string(i) + " is " + mine[i] + " here and " + root[i] + " on rank 0";
  }
  double differing = difference.empty() ? 0.0 : 1.0;
  comm.reduce_broadcast(std::span<double>(&differing, 1));
  if (differing > 0.0)
    throw ValueError("data-parallel training: the ranks' models differ, so their gradients cannot be reduced (" +
                     std::to_string(int(differing)) + " of " + std::to_string(comm.size()) +
                     " ranks differ from rank 0)" +
                     (difference.empty() ? std::string(". See the other ranks' messages")
                                         : "; on rank " + std::to_string(comm.rank()) + " " + difference) +
                     ". Build and compile the same model on every rank (and restore a checkpoint on every rank, or "
                     "on none)");
  for (const Entry& e : entries) comm.broadcast(*e.tensor, 0);
  if (OptimizerState* s = model.opt_state_.get()) s->micro_step = micro_step.data<int64_t>()[0];
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
