#pragma once
// What data-parallel training decides across ranks besides the gradients:
// which rows of a global batch each rank takes, whether any rank still has
// data (or asked to stop), and whether the ranks were started alike. The
// layers above (nn's fit and Trainer) call these; none of it knows of
// models or batches.
#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tensorgrad/dist/communicator.h"

namespace tensorgrad::dist {

/// Which part of every global batch a rank takes: rank `rank` of `ranks`
/// takes rows [g r / R, g (r + 1) / R) (floor) of a batch of g rows, so
/// every row goes to one rank and the shares differ by at most one row
/// (PyTorch's DistributedSampler without padding). {0, 1}: the whole batch.
struct Shard {
  /// This rank and the number of ranks.
  ///@{
  int rank = 0, ranks = 1;
  ///@}
  /// This rank's place in `comm` ({0, 1} for null: one process).
  static Shard of(const Communicator* comm) { return comm ? Shard{comm->rank(), comm->size()} : Shard{}; }
  /// The first row of this rank's share of a batch of `rows` rows.
  int64_t begin(int64_t rows) const { return rows * rank / ranks; }
  /// The rows of this rank's share of a batch of `rows` rows.
  int64_t size(int64_t rows) const { return rows * (rank + 1) / ranks - begin(rows); }
  /// Throws ValueError unless 0 <= rank < ranks, naming both.
  void check() const;
};

/// Votes across ranks: each flag comes back true on every rank when it was
/// true on any (an epoch goes on while any rank has a batch; a stop asked on
/// one rank stops all). One collective for all the flags. Collective.
void any_rank(Communicator& comm, std::span<bool> flags);

/// Rank 0's `text` on every rank. Collective.
std::string broadcast_string(Communicator& comm, std::string text);

/// Compares `settings` (name, value; in order) with rank 0's and, when any
/// rank's differ, throws ValueError on every rank: "the ranks' <what>
/// differ (k of N ranks differ from rank 0)", each differing rank naming its
/// first difference, then `advice`. What would make one rank leave a loop
/// or a collective that the others go on with is checked this way before
/// training, so that no rank hangs. Collective.
void check_ranks_agree(Communicator& comm, const std::vector<std::pair<std::string, std::string>>& settings,
                       const std::string& what, const std::string& advice);

/// The documented exception to "never aborts" (data-parallel training): a
/// rank whose fit or step throws would leave the others waiting in a
/// collective forever, so it prints "tensorgrad rank R of N: <where>:
/// <what>" to stderr and ends the whole job with MPI_Abort(1).
[[noreturn]] void abort_job(const Communicator& comm, const std::string& where, const std::exception& error);

}  // namespace tensorgrad::dist
