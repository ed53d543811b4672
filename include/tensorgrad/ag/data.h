#pragma once
// Mini-batches over tensors for the eager API, in PyTorch's words: a
// DataLoader over a TensorDataset (torch.utils.data.DataLoader(
// TensorDataset(x, y), batch_size, shuffle, drop_last)). Row i of the
// inputs goes with row i of the targets; an epoch is one pass over begin()
// .. end(), and each begin() starts a new epoch.
#include <cstdint>
#include <cstddef>
#include <iterator>
#include <memory>
#include <vector>

#include "tensorgrad/ag/tensor.h"

namespace tensorgrad::ag {

/// One mini-batch: rows of the inputs and the same rows of the targets
/// (undefined when the loader has no targets). Neither requires grad.
struct Batch {
  /// x: the inputs' rows {rows, ...}; y: the targets' rows {rows, ...}, or
  /// undefined.
  ///@{
  Tensor x, y;
  ///@}
};

/// The DataLoader's settings, by torch.utils.data.DataLoader's names.
struct DataLoaderOptions {
  /// Rows per batch (>= 1); the last batch may be smaller unless drop_last.
  int64_t batch_size = 1;
  /// A new random order of the rows at each epoch (each begin()).
  bool shuffle = false;
  /// Drops the last, incomplete batch (PyTorch's drop_last).
  bool drop_last = false;
  /// Seeds the loader's own Generator (the shuffling order): the same seed
  /// gives the same sequence of epochs; ag::default_generator() is never
  /// touched (PyTorch's DataLoader(generator=torch.Generator().manual_seed(seed))).
  uint64_t seed = 0;
  /// Where batches are handed out (PyTorch users write batch.to(device)
  /// in the loop; here the loader does it): each batch is assembled on the
  /// host and copied to the device once. The data set itself stays on the
  /// CPU.
  Device device = Device::CPU;
};

/// Mini-batches of consecutive rows of x {N, ...} and y {N, ...}
/// (torch.utils.data.DataLoader over a TensorDataset). Any dtype (float32
/// inputs, int32 class ids, int64 ...). Without shuffle, a batch is a view of
/// rows [b * batch_size, ...) of the tensors given (no copy; writing to it
/// writes to the data set); with shuffle, a batch is a copy of the rows the
/// epoch's permutation picks.
///
/// The permutation of an epoch is a Fisher-Yates shuffle drawn from the
/// loader's Generator (seeded with options.seed), the same on every
/// platform. An iterator keeps its epoch's permutation, so a begin() taken
/// while another epoch is being walked does not disturb it.
class DataLoader {
 public:
  /// Inputs and targets. Throws ValueError for an undefined x or y, or for
  /// batch_size < 1; ShapeError for a tensor of rank 0 (no rows) or when x
  /// and y have different numbers of rows (naming both shapes).
  DataLoader(Tensor x, Tensor y, DataLoaderOptions options = {});
  /// Inputs only: each Batch's y is undefined. Throws as above.
  explicit DataLoader(Tensor x, DataLoaderOptions options = {});

  /// One epoch's batches, produced as they are dereferenced.
  class Iterator {
   public:
    /// An input iterator whose batches are values, made on dereference.
    ///@{
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = Batch;
    ///@}
    /// An iterator of no loader (compares by batch index only).
    Iterator() = default;
    /// The current batch (computed on each call).
    Batch operator*() const;
    /// Moves to the next batch.
    ///@{
    Iterator& operator++() {
      ++batch_;
      return *this;
    }
    Iterator operator++(int) {
      Iterator old = *this;
      ++batch_;
      return old;
    }
    ///@}
    /// Iterators compare by batch index (of the same loader).
    ///@{
    bool operator==(const Iterator& other) const { return batch_ == other.batch_; }
    bool operator!=(const Iterator& other) const { return batch_ != other.batch_; }
    ///@}

   private:
    friend class DataLoader;
    const DataLoader* loader_ = nullptr;
    std::shared_ptr<const std::vector<int64_t>> order_;  // null: rows in order
    size_t batch_ = 0;
  };

  /// Starts an epoch: with shuffle, draws a new permutation of the rows from
  /// the loader's generator.
  Iterator begin();
  /// Past the epoch's last batch (index size()).
  Iterator end() const;

  /// Batches per epoch: ceil(N / batch_size), or floor with drop_last (PyTorch's len(loader)).
  size_t size() const;
  /// Rows in the data set (N).
  int64_t num_samples() const { return n_; }
  /// The options the loader was made with.
  const DataLoaderOptions& options() const { return options_; }
  /// The shuffling stream; reseed it (manual_seed) to replay epochs from the start.
  Generator& generator() { return generator_; }

 private:
  Batch batch_at(size_t b, const std::vector<int64_t>* order) const;

  tensorgrad::Tensor x_, y_;
  DataLoaderOptions options_;
  int64_t n_ = 0;
  Generator generator_;
};

}  // namespace tensorgrad::ag
