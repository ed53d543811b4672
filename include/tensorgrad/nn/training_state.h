#pragma once
// A model's training state as one value: what, beside the weights and the
// configuration, a checkpoint must hold for training to go on exactly where
// it stood (PyTorch's optimizer.state_dict() with the random states a
// resumable checkpoint adds; Keras' optimizer variables and seed state).
// Model::training_state and Trainer::training_state take it,
// set_training_state puts it back; io::save_checkpoint and
// io::load_checkpoint write and read it.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tensorgrad/core/tensor.h"

namespace tensorgrad::nn {

/// One weight's optimizer slots (OptimizerState::Slots), each {weight shape}
/// float32; undefined where the optimizer keeps none (SGD without momentum
/// keeps no m, ...).
struct WeightSlots {
  /// The weight, "<layer>/<weight>" as Model::weights names it.
  std::string weight;
  /// AdamW: first moment; RMSprop centered: mean gradient.
  Tensor m;
  /// AdamW: second moment; RMSprop: mean square; Adagrad: sum of squares.
  Tensor v;
  /// SGD and RMSprop with momentum: the momentum buffer.
  Tensor momentum;
  /// The gradient accumulated so far in an open accumulation period (or
  /// kept for clipping).
  Tensor acc;
};

/// The training state of a Model or a Trainer. A value: every tensor is a
/// copy, so it stays as it was taken while training goes on, and putting it
/// back (set_training_state) makes training continue bit for bit as from
/// the moment it was taken (with the same weights, data and thread count).
struct TrainingState {
  /// The model's random stream (Model::random_stream: fit's shuffles).
  std::mt19937_64 random_stream;
  /// Whether the optimizer's part below is there: the model was compiled.
  bool compiled = false;
  /// {n} float32: the optimizer's hyper-parameters as its update reads
  /// them (the learning rate a callback set among them).
  Tensor hyper;
  /// {1} int64: optimizer updates applied so far (Keras' iterations).
  Tensor iterations;
  /// The dropout counter: where the next training step's masks start.
  int64_t dropout_counter = 0;
  /// Batches gathered in the accumulation period now open (0: none open).
  int64_t micro_step = 0;
  /// The slots of every weight that has some, in Model::weights() order.
  std::vector<WeightSlots> slots;
  /// A Trainer's: its steps so far (Trainer::n_steps) and its accumulation
  /// period in batches (nbatch_logical / batch_size). 0 in a Model's: fit
  /// counts epochs, and its periods depend on each fit's options.
  ///@{
  int64_t steps = 0;
  int64_t accumulation_period = 0;
  ///@}
};

}  // namespace tensorgrad::nn
