#pragma once
// Data-parallel training (issue 14; PyTorch's DistributedDataParallel and
// Horovod on MPI): the same program on every rank, each rank training on its
// share of every global batch, the gradients reduced in the hook stage
// (OptimizerState::communicator). Model::fit turns it on with
// FitOptions::communicator, the Trainer with TrainerOptions::communicator;
// this header has what both use, for loops of one's own.
#include <exception>
#include <string>

#include "tensorgrad/dist/communicator.h"
#include "tensorgrad/nn/model.h"

namespace tensorgrad::nn {

/// Makes every rank's training state rank 0's: the weights (trainable and
/// not, batch-norm statistics included), the optimizer state (moments, step
/// counter, learning rate and schedule, dropout counter, the gradient
/// accumulators and the position in the accumulation period) and the
/// model's random stream (fit's shuffles), each broadcast from rank 0. First
/// every rank compares the names, dtypes and shapes of what it holds with
/// rank 0's; when any rank differs, every rank throws ValueError (rank 0's
/// message counts the ranks that differ, each differing rank's names its
/// first difference), so no rank is left waiting. Collective: every rank
/// calls it at the same point. Throws StateError for a model not compiled
/// or freed, or whose state is not on the CPU.
void broadcast_training_state(Model& model, dist::Communicator& comm);

/// The documented exception to "never aborts" (issue 14): in data-parallel
/// training a rank whose fit or step throws would leave the others waiting
/// in a collective forever, so it prints "tensorgrad rank R of N: <where>:
/// <what>" to stderr and ends the whole job with MPI_Abort(1).
[[noreturn]] void abort_job(const dist::Communicator& comm, const std::string& where, const std::exception& error);

}  // namespace tensorgrad::nn
