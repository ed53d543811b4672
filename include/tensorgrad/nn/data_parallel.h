#pragma once
// Data-parallel training (PyTorch's DistributedDataParallel and Horovod on
// MPI): the same program on every rank, each rank training on its share of
// every global batch, the gradients reduced in the hook stage
// (OptimizerState::communicator). Model::fit turns it on with
// FitOptions::communicator, the Trainer with TrainerOptions::communicator;
// this header has what both use, for loops of one's own.
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tensorgrad/dist/communicator.h"
#include "tensorgrad/dist/sharding.h"
#include "tensorgrad/nn/model.h"
#include "tensorgrad/nn/training_loop.h"

namespace tensorgrad::nn {

// Rank-splitting, votes and agreement are tensorgrad::dist's
// (dist/sharding.h); their nn names stay for code written against them.
using dist::abort_job;
using dist::check_ranks_agree;

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

/// The batches of this rank from a source of global batches: rank r of R
/// takes rows [g r / R, g (r + 1) / R) of each batch of g rows
/// (dist::Shard), views of the inner source's batch, or a batch with no
/// tensors when its share of a short batch is empty (train_on_batch then
/// joins the others' update). Every rank must read a source of the same
/// batches in the same order (a shuffled TensorSource draws from the
/// model's stream, which broadcast_training_state makes the same).
class ShardedSource final : public BatchSource {
 public:
  /// `global` is read in place: it must outlive this source. Throws
  /// ValueError for a shard outside 0 <= rank < ranks.
  ShardedSource(BatchSource& global, dist::Shard shard);
  /// The same, owning `global`.
  ShardedSource(std::unique_ptr<BatchSource> global, dist::Shard shard);
  void start_epoch(int epoch, int64_t limit) override { global_.start_epoch(epoch, limit); }
  const Batch* next() override;
  /// The global source's batches per epoch: every rank reads each.
  int64_t batches_per_epoch() const override { return global_.batches_per_epoch(); }
  /// This rank's share of the global source's largest batch.
  int64_t batch_size() const override { return shard_.size(global_.batch_size()); }
  const std::string& label() const override { return global_.label(); }
  std::string noun() const override { return global_.noun(); }
  void stop() override { global_.stop(); }

 private:
  std::unique_ptr<BatchSource> owned_;  // set by the owning constructor
  BatchSource& global_;
  dist::Shard shard_;
  Batch part_;   // views of this rank's rows of the current global batch
  Batch empty_;  // an empty share: no tensors
};

/// The ranks of `comm` as the training loop's LoopGroup (LoopOptions::group),
/// or null for a null communicator (one process). Its run() first compares
/// the loop's options on every rank (ValueError on every rank when they
/// differ) and broadcasts rank 0's training state, then has the model
/// reduce its gradients over the ranks (Model::set_communicator) for the
/// loop only, and ends the job (abort_job) when the loop throws on any
/// rank. start() broadcasts rank 0's training state and first epoch,
/// agree() is one small collective (dist::any_rank), add_up() one
/// reduce_broadcast, finish() a barrier.
std::shared_ptr<LoopGroup> data_parallel_group(std::shared_ptr<dist::Communicator> comm);

/// What one process of a fit takes of each global batch: every row without
/// a communicator; with one, its rank's share (ShardedSource).
struct FitShare {
  /// This process's rows of a full batch, and of the logical batch
  /// (gradient accumulation; 0: none).
  ///@{
  int64_t batch_size = 0, nbatch_logical = 0;
  ///@}
  /// The loop's group (data_parallel_group), null for one process.
  std::shared_ptr<LoopGroup> group;
  /// This process's rows of each batch of `global`: `global` itself for one
  /// process, else a ShardedSource owning it.
  std::unique_ptr<BatchSource> source(std::unique_ptr<BatchSource> global) const;
  dist::Shard shard;  ///< this process's rank and the number of ranks
};

/// What the ranks of a fit must agree on (the global batches' shape).
struct FitShape {
  /// The training rows, the global batch and logical batch, and the
  /// validation rows.
  ///@{
  int64_t rows = 0, batch_size = 0, nbatch_logical = 0, validation_rows = 0;
  ///@}
  /// Whether the rows are shuffled, and whether sample weights are given.
  ///@{
  bool shuffle = false, weighted = false;
  ///@}
  /// The global validation batch (FitOptions::validation_batch_size, or
  /// batch_size).
  int64_t validation_batch_size = 0;
};

/// Model::fit's share of each batch for `shape` (its batch_size at most its
/// rows): everything without `comm`. With it, throws ValueError (on every
/// rank alike) when a rank would have no row of a batch or nbatch_logical is
/// no multiple of batch_size, and when the ranks' shapes differ
/// (check_ranks_agree; collective).
FitShare fit_share(const std::shared_ptr<dist::Communicator>& comm, const FitShape& shape);

}  // namespace tensorgrad::nn
