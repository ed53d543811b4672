// The CUDA backend target (TENSORGRAD_CUDA=ON, or AUTO with the toolkit). A
// stub in this version: it links the CUDA runtime and asks for a device, so
// the build and the selection path are exercised; no CUDA kernels, storage
// or executables exist yet (a later issue adds them behind the same seam).
#include "backend/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <string>

#include "tensorgrad/core/error.h"

namespace tensorgrad::cuda {

std::shared_ptr<const Backend> backend() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0)
    throw StateError(std::string("no CUDA device: the CUDA runtime reports ") +
                     (status != cudaSuccess ? cudaGetErrorString(status) : "zero devices") +
                     "; run on a machine with an NVIDIA GPU and its driver, or use Device::CPU");
  throw StateError("no CUDA device usable: " + std::to_string(count) +
                   " CUDA device(s) found, but this version's CUDA backend is a stub without kernels; use Device::CPU");
}

bool built() { return true; }

}  // namespace tensorgrad::cuda
