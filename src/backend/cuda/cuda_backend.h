#pragma once
// The CUDA backend's entry points. Built from cuda_backend.cpp when CMake's
// TENSORGRAD_CUDA finds the toolkit, else from unavailable.cpp. Both are a
// stub in this version: no CUDA kernels exist yet.
#include <memory>

#include "tensorgrad/backend/backend.h"

namespace tensorgrad::cuda {

/// The CUDA backend; throws StateError starting "no CUDA device" with why.
std::shared_ptr<const Backend> backend();
/// Whether the toolkit was found and the CUDA target built.
bool built();

}  // namespace tensorgrad::cuda
