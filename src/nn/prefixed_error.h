#pragma once
// Errors of one batch named after it: the loop layers and predict over a
// generator rethrow what a batch raised with "generator batch 3 of epoch 1: "
// before the message, as the same error type.
#include <string>

#include "tensorgrad/core/error.h"

namespace tensorgrad::nn {

/// Rethrows the tensorgrad::Error in flight with `prefix` before its message,
/// as the same type; anything else (the user's own exceptions) unchanged.
[[noreturn]] inline void rethrow_prefixed(const std::string& prefix) {
  try {
    throw;
  } catch (const ShapeError& e) {
    throw ShapeError(prefix + e.what());
  } catch (const TypeError& e) {
    throw TypeError(prefix + e.what());
  } catch (const IndexError& e) {
    throw IndexError(prefix + e.what());
  } catch (const ValueError& e) {
    throw ValueError(prefix + e.what());
  }
}

}  // namespace tensorgrad::nn
