// The CUDA entry points of a build without the CUDA backend
// (TENSORGRAD_CUDA=OFF, or AUTO without a toolkit): selecting CUDA says so.
#include "backend/cuda/cuda_backend.h"
#include "tensorgrad/core/error.h"

#ifndef TENSORGRAD_WITH_CUDA
namespace tensorgrad::cuda {

std::shared_ptr<const Backend> backend() {
  throw StateError(
      "no CUDA device: this tensorgrad was built without its CUDA backend (TENSORGRAD_CUDA=OFF, or AUTO found no "
      "toolkit in /usr/local/cuda); rebuild with -DTENSORGRAD_CUDA=ON on a machine with the CUDA toolkit, or use "
      "Device::CPU");
}

bool built() { return false; }

}  // namespace tensorgrad::cuda
#endif
