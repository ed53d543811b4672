#pragma once
// The communicator of data-parallel training: MPI's collectives, as Horovod
// and torch.distributed's MPI backend use them. tensorgrad has no transport
// of its own. The communicator is in the target tensorgrad::mpi (CMake:
// find_package(tensorgrad COMPONENTS mpi); pkg-config: tensorgrad-mpi),
// which a program links in place of tensorgrad::tensorgrad; linked without it
// (or with tensorgrad built without MPI) every constructor throws StateError.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "tensorgrad/core/tensor.h"

namespace tensorgrad::dist {

/// How all_reduce combines the ranks' values (torch.distributed's ReduceOp
/// SUM and AVG).
enum class ReduceOp { Sum, Average };

/// Whether this program links tensorgrad's MPI communicator (the target
/// tensorgrad::mpi; the communicator works only then).
bool built_with_mpi();

/// The ranks of an MPI job (MPI_COMM_WORLD, duplicated so that tensorgrad's
/// messages never mix with the caller's own MPI traffic).
///
/// Construction initialises MPI (MPI_Init_thread, MPI_THREAD_SERIALIZED)
/// unless the caller already has; the destructor of the last communicator
/// finalises MPI only if a communicator initialised it, so a program that
/// manages MPI itself keeps control (RAII, safe either way). One thread at a
/// time uses a communicator (as every tensorgrad object).
///
/// The first communicator also divides the machine's cores between the
/// ranks on it: unless the program called set_num_threads before, each rank
/// computes with max(1, cores / local_size()) threads.
///
/// Every collective must be called by every rank in the same order with the
/// same sizes (MPI's rule; a mismatch is undefined behaviour in MPI, so the
/// data-parallel training checks what it can before its first collective).
class Communicator {
 public:
  /// Throws StateError when the program does not link tensorgrad::mpi (or
  /// tensorgrad was built without MPI), or MPI was already finalised (it
  /// cannot start twice in one process).
  Communicator();
  /// The same, handing the program's arguments to MPI_Init_thread.
  Communicator(int* argc, char*** argv);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  /// This process's rank in [0, size()), and the number of ranks.
  ///@{
  int rank() const { return rank_; }
  int size() const { return size_; }
  ///@}
  /// Ranks on this machine (MPI_COMM_TYPE_SHARED), and this one's index
  /// among them: threads per rank default to cores / local_size().
  ///@{
  int local_size() const { return local_size_; }
  int local_rank() const { return local_rank_; }
  ///@}

  /// Combines `data` (float32, in place) over all ranks: the element-wise
  /// sum, or the sum divided by size() for Average. Spans longer than
  /// INT_MAX elements go in several messages. The result of a plain
  /// all-reduce may differ in the last bit between ranks beyond 2 ranks
  /// (MPI does not promise the same summation order); use reduce() then
  /// broadcast() where every rank must hold identical bits.
  void all_reduce(std::span<float> data, ReduceOp op = ReduceOp::Sum);
  /// The same on a float32 CPU tensor (its memory, in place). Throws
  /// TypeError for another dtype, StateError for an undefined tensor or one
  /// on another device (device collectives are not built yet).
  void all_reduce(Tensor& tensor, ReduceOp op = ReduceOp::Sum);
  /// Sums `data` over all ranks into `root`'s `data` (the other ranks' data
  /// is left as it was). Throws IndexError for a root outside [0, size()).
  void reduce(std::span<float> data, int root = 0);
  /// Sums `data` over all ranks, in place, so that every rank holds the same
  /// bits at any number of ranks (unlike all_reduce), which data-parallel
  /// training needs: weights updated from it stay identical. Each element
  /// is summed by one rank and copied to the others: a ring all-reduce on
  /// point-to-point messages (reduce-scatter, then all-gather; each rank
  /// sends 2 (R - 1) / R of the data, as Horovod's and NCCL's) for spans of
  /// at least 64 elements a rank, else a sum onto rank 0 (MPI_Reduce) and
  /// its broadcast (MPI_Bcast). Counts one collective per call (per INT_MAX
  /// elements); with one rank it sends nothing. The double form is for logs
  /// and counts.
  ///@{
  void reduce_broadcast(std::span<float> data);
  void reduce_broadcast(std::span<double> data);
  ///@}
  /// Copies `root`'s bytes of `tensor` (any dtype, CPU) into every rank's
  /// `tensor`, which must have the same byte size everywhere. Throws as
  /// all_reduce (but any dtype), IndexError for a bad root.
  void broadcast(Tensor& tensor, int root = 0);
  /// Copies `root`'s bytes into every rank's `bytes`.
  void broadcast_bytes(std::span<std::byte> bytes, int root = 0);
  /// Waits until every rank has called it.
  void barrier();
  /// Ends the whole job: MPI_Abort with `code` (the documented exception to
  /// "never aborts": in a job, a rank that fails alone would otherwise leave
  /// the others waiting in a collective forever).
  [[noreturn]] void abort(int code) const;

  /// Collective operations this communicator has issued (every message of
  /// all_reduce, reduce, broadcast and barrier counts one; reduce_broadcast
  /// counts one per message pair): how a test
  /// counts the collectives of an update.
  int64_t collective_calls() const { return calls_; }
  /// Seconds spent inside this communicator's collectives, waiting for the
  /// slower ranks included (wall clock): what the reduction costs a step.
  double collective_seconds() const { return seconds_; }

 private:
  void start(int* argc, char*** argv);
  void check_root(int root, const char* call) const;
  template <typename T>
  void sum_onto_root_and_back(std::span<T> data);
  template <typename T>
  void ring_sum(T* data, int n);

  // The MPI communicators (MPI's header stays out of the public API). A plain
  // pointer, owned: the library without MPI never defines Impl, and a
  // unique_ptr's destructor would need it.
  struct Impl;
  Impl* impl_ = nullptr;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  int64_t calls_ = 0;
  double seconds_ = 0.0;
};

}  // namespace tensorgrad::dist
