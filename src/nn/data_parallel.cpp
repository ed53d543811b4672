// Data-parallel training's nn side (nn/data_parallel.h): the model's state
// broadcast, the sharded source, and the ranks as the loop's group, on the
// dist layer's rows, votes and agreement (dist/sharding.h). The gradient
// reduction is the optimizer context's.
#include "tensorgrad/nn/data_parallel.h"

#include <cstdio>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <type_traits>
#include <variant>
#include <vector>

#include "nn/data_adapter.h"
#include "tensorgrad/core/error.h"

namespace tensorgrad::nn {

namespace {
struct Entry {
  std::string name;
  Tensor* tensor;
};

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
  for (const Entry& e : entries)
    settings.push_back({e.name, std::string(dtype_name(e.tensor->dtype())) + " " + e.tensor->shape().str()});
  check_ranks_agree(comm, settings, "models",
                    "Build and compile the same model on every rank (and restore a checkpoint on every rank, or on "
                    "none)");
  for (const Entry& e : entries) {
    if (e.tensor->device() == Device::CPU) {
      comm.broadcast(*e.tensor, 0);
      continue;
    }
    Tensor host = e.tensor->to(Device::CPU);  // MPI sends host memory; once, at the start of training
    comm.broadcast(host, 0);
    e.tensor->copy_from(host);
  }
  if (OptimizerState* s = model.state_.opt_state.get()) s->micro_step = micro_step.data<int64_t>()[0];
  std::ostringstream stream;
  stream << model.random_stream();
  std::istringstream(dist::broadcast_string(comm, stream.str())) >> model.random_stream();
}

ShardedSource::ShardedSource(BatchSource& global, dist::Shard shard) : global_(global), shard_(shard) {
  shard_.check();
}

ShardedSource::ShardedSource(std::unique_ptr<BatchSource> global, dist::Shard shard)
    : ShardedSource(*global, shard) {
  owned_ = std::move(global);
}

const Batch* ShardedSource::next() {
  const Batch* batch = global_.next();
  if (!batch || shard_.ranks == 1) return batch;
  const int64_t rows = batch->x.empty() ? 0 : batch->x[0].shape()[0];
  const int64_t size = shard_.size(rows);
  if (size == 0) return &empty_;
  part_ = detail::rows_of(*batch, shard_.begin(rows), shard_.begin(rows) + size);
  return &part_;
}

namespace {
// The ranks of a communicator as the training loop's group.
class RankGroup final : public LoopGroup {
 public:
  explicit RankGroup(std::shared_ptr<dist::Communicator> comm) : comm_(std::move(comm)) {}

  History run(Model& model, const BatchSource& train, const BatchSource* validation, const LoopOptions& opt,
              const std::function<History()>& loop) override {
    // The loop's shape must be the same on every rank (else one rank would
    // leave a loop the others go on with, and wait forever), and so must the
    // models: refused here, by every rank together (a ValueError, not an
    // abort). After on_train_begin the state is broadcast again (start()),
    // as a restore may have changed it.
    check_ranks_agree(*comm_,
                      {{"epochs", std::to_string(opt.epochs)},
                       {"initial_epoch", std::to_string(opt.initial_epoch)},
                       {"steps_per_epoch", std::to_string(opt.steps_per_epoch)},
                       {"validation_steps", std::to_string(opt.validation_steps)},
                       {"validation data", validation ? "given" : "none"},
                       {"batches per epoch", std::to_string(train.batches_per_epoch())}},
                      "fits",
                      "Every rank must call fit with the same options and the same data (its share is taken from "
                      "the whole)");
    broadcast_training_state(model, *comm_);
    try {
      // The model reduces its gradients over the ranks for this loop only.
      struct Distributed {
        Model& model;
        std::shared_ptr<dist::Communicator> before;
        ~Distributed() {
          if (!model.released() && model.compiled()) model.set_communicator(before);
        }
      } distributed{model, model.communicator()};
      model.set_communicator(comm_);
      return loop();
    } catch (const std::exception& e) {
      abort_job(*comm_, "fit", e);
    } catch (...) {
      abort_job(*comm_, "fit", std::runtime_error("an exception not derived from std::exception"));
    }
  }

  void start(Model& model, int& first_epoch) override {
    broadcast_training_state(model, *comm_);
    int64_t first = first_epoch;
    comm_->broadcast_bytes(std::as_writable_bytes(std::span<int64_t>(&first, 1)), 0);
    first_epoch = int(first);
  }

  void agree(bool& more, bool& stop) override {
    bool votes[2] = {more, stop};
    dist::any_rank(*comm_, votes);
    more = votes[0];
    stop = votes[1];
  }

  void add_up(std::span<double> sums) override { comm_->reduce_broadcast(sums); }
  void finish() override { comm_->barrier(); }
  int member() const override { return comm_->rank(); }
  int members() const override { return comm_->size(); }

 private:
  std::shared_ptr<dist::Communicator> comm_;
};
}  // namespace

std::shared_ptr<LoopGroup> data_parallel_group(std::shared_ptr<dist::Communicator> comm) {
  if (!comm) return nullptr;
  return std::make_shared<RankGroup>(std::move(comm));
}

std::unique_ptr<BatchSource> FitShare::source(std::unique_ptr<BatchSource> global) const {
  if (shard.ranks == 1) return global;
  return std::make_unique<ShardedSource>(std::move(global), shard);
}

FitShare fit_share(const std::shared_ptr<dist::Communicator>& comm, const FitShape& fit) {
  FitShare share{fit.batch_size, fit.nbatch_logical, data_parallel_group(comm), dist::Shard::of(comm.get())};
  const int ranks = share.shard.ranks;
  if (fit.batch_size < ranks)
    throw ValueError("fit: batch_size " + std::to_string(fit.batch_size) + " (the global batch, at most the training "
                     "rows) is less than the " + std::to_string(ranks) + " ranks: every rank needs a row of every "
                     "batch. Raise batch_size or run fewer ranks");
  if (!comm) return share;
  if (fit.nbatch_logical > 0 && fit.nbatch_logical % fit.batch_size != 0)
    throw ValueError("nbatch_logical must be a positive multiple of batch_size " + std::to_string(fit.batch_size) +
                     "; got " + std::to_string(fit.nbatch_logical) + " (data-parallel: both are the global batch's)");
  // What shapes the global batches must agree, else the ranks' shares would
  // overlap or leave rows out (the group's run() checks the loop's shape).
  check_ranks_agree(*comm,
                    {{"training rows", std::to_string(fit.rows)},
                     {"batch_size", std::to_string(fit.batch_size)},
                     {"nbatch_logical", std::to_string(fit.nbatch_logical)},
                     {"shuffle", fit.shuffle ? "true" : "false"},
                     {"validation rows", std::to_string(fit.validation_rows)},
                     {"validation_batch_size", std::to_string(fit.validation_batch_size)},
                     {"sample weights", fit.weighted ? "given" : "none"}},
                    "fits", "Every rank must call fit with the same data and options (its share is taken from the whole)");
  if (ranks > 1) {
    share.batch_size = share.shard.size(fit.batch_size);
    share.nbatch_logical = fit.nbatch_logical > 0 ? fit.nbatch_logical / fit.batch_size * share.batch_size : 0;
  }
  return share;
}

}  // namespace tensorgrad::nn
