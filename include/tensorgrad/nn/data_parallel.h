#pragma once
// Data-parallel training (issue 14; PyTorch's DistributedDataParallel and
// Horovod on MPI): the same program on every rank, each rank training on its
// share of every global batch, the gradients reduced in the hook stage
// (OptimizerState::communicator). Model::fit turns it on with
// FitOptions::communicator, the Trainer with TrainerOptions::communicator;
// this header has what both use, for loops of one's own.
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "tensorgrad/dist/communicator.h"
#include "tensorgrad/nn/model.h"

namespace tensorgrad::nn {

/// Compares `settings` (name, value; in order) with rank 0's and, when any
/// rank's differ, throws ValueError on every rank: "the ranks' <what>
/// differ (k of N ranks differ from rank 0)", each differing rank naming its
/// first difference, then `advice`. What would make one rank leave a loop
/// or a collective that the others go on with is checked this way before
/// training, so that no rank hangs. Collective.
void check_ranks_agree(dist::Communicator& comm, const std::vector<std::pair<std::string, std::string>>& settings,
                       const std::string& what, const std::string& advice);

/// Makes every rank's training state rank 0's: the weights (trainable and
/// not, batch-norm statistics included), the optimizer state (moments, step
/// counter, learning rate and schedule, dropout counter, the gradient
/// accumulators and the position in the accumulation period) and the
/// model's random stream (fit's shuffles), each broadcast from rank 0. First
/// every rank compares with rank 0's (check_ranks_agree) its layers and
/// their configuration, its compile settings (optimizer and its
/// hyper-parameters, losses and their weights, metrics), its gradient
/// bucket size, and the names, dtypes and shapes of the tensors above; when
/// any rank differs, every rank throws ValueError, so no rank is left
/// waiting. (A custom loss is compared by name only.) Collective: every rank
/// calls it at the same point. Throws StateError for a model not compiled
/// or freed, or whose state is not on the CPU.
void broadcast_training_state(Model& model, dist::Communicator& comm);

/// The documented exception to "never aborts" (issue 14): in data-parallel
/// training a rank whose fit or step throws would leave the others waiting
/// in a collective forever, so it prints "tensorgrad rank R of N: <where>:
/// <what>" to stderr and ends the whole job with MPI_Abort(1).
[[noreturn]] void abort_job(const dist::Communicator& comm, const std::string& where, const std::exception& error);

}  // namespace tensorgrad::nn
