#pragma once
// Error types of tensorgrad.
// Every user mistake throws one of these; nothing aborts. Messages say what was
// expected, what came, and what to do.
#include <stdexcept>
#include <string>

namespace tensorgrad {

/// Base of every tensorgrad exception; derives from std::runtime_error so a
/// caller may catch either.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
/// A tensor or batch of the wrong shape or row count.
class ShapeError : public Error { using Error::Error; };
/// A value outside its allowed range (a rate, a label, NaN in data, ...).
class ValueError : public Error { using Error::Error; };
/// A tensor of the wrong dtype (float32 given where int32 is needed, ...).
class TypeError : public Error { using Error::Error; };
/// An index (class id, token id) outside its range.
class IndexError : public Error { using Error::Error; };
/// Calls in the wrong order (fit before compile), or use after free().
class StateError : public Error { using Error::Error; };
/// A file that cannot be opened, read or written.
class IOError : public Error { using Error::Error; };
/// A file whose contents do not follow its format (bad magic, truncated).
class FormatError : public Error { using Error::Error; };
/// An allocation the machine could not satisfy (Python's MemoryError,
/// PyTorch's OutOfMemoryError).
class MemoryError : public Error { using Error::Error; };

}  // namespace tensorgrad
