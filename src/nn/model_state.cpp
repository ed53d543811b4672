// Model::training_state and set_training_state (nn/training_state.h): the
// optimizer state, the random stream and the dropout counter as one value,
// what checkpoints save and restore; and the graph's calls in order, what
// the architecture is saved from.
#include <map>
#include <type_traits>

#include "core/host_copy.h"
#include "nn/functional.h"
#include "tensorgrad/core/error.h"
#include "tensorgrad/nn/model.h"

namespace tensorgrad::nn {

namespace {

constexpr const char* kSlotNames[] = {"m", "v", "momentum", "acc"};

// Slot k of either form, in kSlotNames' order.
template <class S>
auto& slot(S& s, int k) {
  std::remove_reference_t<decltype((s.m))>* const slots[] = {&s.m, &s.v, &s.momentum, &s.acc};
  return *slots[k];
}

Tensor copy_of(const Tensor& t) { return t.defined() ? t.clone() : Tensor(); }

std::string taken_elsewhere(const std::string& what, const Tensor& given, const Shape& shape, DType dtype) {
  return "Model::set_training_state: " + what + " is " + given.shape().str() + " " + dtype_name(given.dtype()) +
         ", the model's is " + shape.str() + " " + dtype_name(dtype) + "; the state was taken from another optimizer or model "
         "(give a state from this model's training_state, or from a model built and compiled as this one)";
}

}  // namespace

TrainingState Model::training_state() const {
  check_live("training_state()");
  TrainingState s;
  s.random_stream = state_.rng;
  const OptimizerState* opt = state_.opt_state.get();
  if (!opt) return s;
  s.compiled = true;
  s.hyper = opt->hyper.clone();
  s.iterations = opt->step.clone();
  s.dropout_counter = tensorgrad::detail::read_element<int64_t>(opt->rng_counter, 0);
  s.micro_step = opt->micro_step;
  for (const Weight& w : weights()) {
    auto it = opt->slots.find(w.value.raw());
    if (it == opt->slots.end()) continue;
    WeightSlots copy{w.name, {}, {}, {}, {}};
    for (int k = 0; k < 4; ++k) slot(copy, k) = copy_of(slot(it->second, k));
    s.slots.push_back(std::move(copy));
  }
  return s;
}

void Model::set_training_state(const TrainingState& s) {
  check_live("set_training_state()");
  OptimizerState* opt = state_.opt_state.get();
  if (!s.compiled) {
    state_.rng = s.random_stream;
    return;
  }
  if (!opt)
    throw StateError("Model::set_training_state: the model is not compiled, so it has no optimizer state to set; "
                     "compile it as the model the state was taken from (the same optimizer), then set the state");
  // Every check before anything changes.
  auto check = [](const std::string& what, const Tensor& given, const Tensor& mine) {
    if (!given.defined() || given.shape() != mine.shape() || given.dtype() != mine.dtype())
      throw ValueError(given.defined() ? taken_elsewhere(what, given, mine.shape(), mine.dtype())
                                       : "Model::set_training_state: the state's " + what +
                                             " is undefined; give a state from training_state()");
  };
  check("optimizer hyper-parameters", s.hyper, opt->hyper);
  check("optimizer iterations", s.iterations, opt->step);
  if (s.micro_step < 0)
    throw ValueError("Model::set_training_state: micro_step (batches into the open accumulation period) is " +
                     std::to_string(s.micro_step) + "; it must be >= 0");
  const std::vector<Weight> weights = this->weights();
  std::map<std::string, const WeightSlots*> given;
  for (const WeightSlots& ws : s.slots) given[ws.weight] = &ws;
  for (const Weight& w : weights) {
    auto it = given.find(w.name);
    if (it == given.end()) continue;
    for (int k = 0; k < 4; ++k) {
      const Tensor& t = slot(*it->second, k);
      if (t.defined() && (t.shape() != w.value.shape() || t.dtype() != DType::Float32))
        throw ValueError(taken_elsewhere(std::string("the optimizer slot ") + kSlotNames[k] + " of '" + w.name + "'",
                                         t, w.value.shape(), DType::Float32));
    }
  }

  opt->hyper.copy_from(s.hyper);
  opt->step.copy_from(s.iterations);
  const OptimizerSpec& spec = state_.optimizer;
  for (const Weight& w : weights) {
    if (!w.trainable) continue;
    auto it = given.find(w.name);
    OptimizerState::Slots* slots = nullptr;
    if (auto mine = opt->slots.find(w.value.raw()); mine != opt->slots.end()) slots = &mine->second;
    for (int k = 0; k < 4; ++k) {
      const Tensor none;
      const Tensor& t = it == given.end() ? none : slot(*it->second, k);
      if (t.defined()) {
        if (!slots) slots = &opt->slots[w.value.raw()];
        Tensor& mine = slot(*slots, k);
        if (!mine.defined()) mine = Tensor::empty(w.value.shape(), DType::Float32, w.value.device());
        mine.copy_from(t);
      } else if (slots && slot(*slots, k).defined()) {
        // A state taken before this slot had a value: its starting value.
        const bool adagrad_sum = k == 1 && spec.kind == OptimizerSpec::Kind::Adagrad;
        Tensor& mine = slot(*slots, k);
        mine.copy_from(Tensor::full(mine.shape(), adagrad_sum ? spec.initial_accumulator_value : 0.0f));
      }
    }
  }
  opt->micro_step = s.micro_step;
  tensorgrad::detail::write_element(opt->rng_counter, 0, s.dropout_counter);
  state_.rng = s.random_stream;
}

const std::vector<const LayerCall*>& Model::layer_calls() const {
  check_live("layer_calls()");
  return graph_->order;
}

}  // namespace tensorgrad::nn
