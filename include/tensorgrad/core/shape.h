#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

namespace tensorgrad {

/// Dimensions of a tensor, outermost first (row-major, batch first, as NumPy,
/// PyTorch and Keras). A rank-0 shape `{}` is a scalar with one element.
/// Stored inline (at most kMaxRank dimensions) so that copying a shape never
/// allocates: shapes are recomputed on hot paths.
class Shape {
 public:
  static constexpr int kMaxRank = 6;  ///< the most dimensions a shape holds

  /// The scalar shape {}.
  Shape() = default;
  /// Throws ShapeError for a negative dimension or more than kMaxRank of them.
  Shape(std::initializer_list<int64_t> dims);
  /// Same checks as the initializer-list form.
  explicit Shape(std::span<const int64_t> dims);

  /// The number of dimensions (0 for a scalar).
  int rank() const { return rank_; }
  /// Dimension i; negative i counts from the end (-1 is the last).
  /// Throws IndexError when i is outside [-rank, rank).
  int64_t operator[](int i) const {
    const int j = i < 0 ? i + rank_ : i;
    if (j < 0 || j >= rank_) throw_out_of_range(i);
    return dims_[size_t(j)];
  }
  /// Sets dimension i (same indexing as operator[]). Throws as operator[].
  void set(int i, int64_t value);
  /// Product of the dimensions (1 for a scalar).
  int64_t numel() const;
  /// Product of every dimension but the first (features per row).
  int64_t row_size() const;
  /// The same shape with dimension 0 replaced by `rows`. Throws ShapeError on a scalar.
  Shape with_rows(int64_t rows) const;
  /// {rows, this shape...}: a per-row shape with a leading batch dimension.
  /// Throws ShapeError when that exceeds kMaxRank dimensions.
  Shape with_batch(int64_t rows) const;
  /// "{2, 3}".
  std::string str() const;

  /// Iteration over the dimensions, outermost first.
  ///@{
  const int64_t* begin() const { return dims_.data(); }
  const int64_t* end() const { return dims_.data() + rank_; }
  ///@}
  /// Equal ranks and dimensions.
  ///@{
  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }
  ///@}

 private:
  [[noreturn]] void throw_out_of_range(int i) const;
  std::array<int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

}  // namespace tensorgrad
