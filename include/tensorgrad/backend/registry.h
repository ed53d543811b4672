#pragma once
// The backend registry, after ggml's (ggml-backend-reg): each backend
// registers its device kind ("cpu"; "cuda"; later "vulkan") with a function
// that finds its devices and a factory for a device's Backend, whose
// allocate() is that device's storage allocator. Devices are named as
// PyTorch names them (core/device.h). Nothing picks a device implicitly: the
// CPU is the default everywhere, and every other device is used only when
// named (Model::compile's target, Tensor::to, Tensor::empty).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tensorgrad/backend/backend.h"
#include "tensorgrad/core/device.h"

namespace tensorgrad {

/// What a device is, as Vulkan's VkPhysicalDeviceType and ggml's device
/// types say: the host CPU, a discrete GPU, an integrated GPU, or a CPU
/// implementation of a GPU API (Mesa's lavapipe, SwiftShader), which runs
/// a GPU backend's code on the CPU, for testing it without a GPU.
enum class DeviceType { kDiscreteGpu, kIntegratedGpu, kCpuImplementation, kCpu };

/// "discrete GPU", "integrated GPU", "CPU implementation" or "CPU".
const char* device_type_name(DeviceType type);

/// One device a backend found (devices() lists them).
struct DeviceInfo {
  /// The device, as Model::compile and Tensor::to take it ("cpu", "cuda:0").
  Device device;
  /// What the device says it is: the CPU's model name, a GPU's product name.
  std::string name;
  DeviceType type = DeviceType::kCpu;  ///< what kind of device it is
  /// The device's memory in bytes (the host's physical memory for the CPU
  /// and for CPU implementations); 0 when it does not say.
  uint64_t memory_bytes = 0;
};

/// What a backend registers for its device kind.
struct BackendRegistration {
  /// The device kind, as Device takes it ("cuda", "vulkan").
  std::string kind;
  /// The devices of this kind on this machine, index 0 first, their indices
  /// 0, 1, ... in order. Called once, at the first lookup of the kind (the
  /// registry keeps the list for the process). May return none.
  std::function<std::vector<DeviceInfo>()> devices;
  /// The backend of device `index` (its device() is kind:index), for an
  /// index devices() listed; also called when devices() listed none, so
  /// that it can throw StateError saying why (CUDA: "no CUDA device ...").
  /// Throws StateError when the device cannot be used. Called at every
  /// lookup: a backend that keeps state per device returns the same object
  /// each time.
  std::function<std::shared_ptr<const Backend>(int index)> backend;
};

/// Adds a backend's kind to the registry (ggml_backend_register). The
/// built-in backends ("cpu", "vulkan", and "cuda", which lists no device and
/// says that tensorgrad has no CUDA backend) are registered before main.
/// Throws ValueError when the kind is malformed (as Device's), already
/// registered ("cpu" always is), or a function is empty. Thread-safe.
void register_backend(BackendRegistration registration);

/// Every device of every registered backend (ggml_backend_dev_count and
/// _get; PyTorch has no one list): GPUs first (discrete, then integrated),
/// then CPU implementations of GPU APIs, then the CPU, which is always
/// listed; within a type in registration order and by index. A backend
/// whose device search throws is logged as a warning and left out (its
/// kind is asked again at the next call). Thread-safe.
std::vector<DeviceInfo> devices();

}  // namespace tensorgrad
