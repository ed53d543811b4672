// The CPU backend: host memory (CpuStorage), the kernels of src/kernels for
// every op, and the compute thread pool (a oneTBB arena) as its KernelContext.
#include "backend/cpu/cpu_backend.h"

#include <fstream>

#include "core/thread_pool.h"
#include "kernels/bfloat16.h"
#include "kernels/cpu_features.h"
#include "kernels/kernels.h"
#include "tensorgrad/backend/backend.h"
#include "tensorgrad/core/logging.h"
#include "tensorgrad/core/memory.h"

namespace tensorgrad {

namespace {

class CpuLauncher final : public KernelLauncher {
 public:
  CpuLauncher(bool single_thread, bool bf16) : single_thread_(single_thread) { ctx_.bf16 = bf16; }
  void begin_run() override {
    pool_ = single_thread_ ? nullptr : compute_pool();
    ctx_.pool = pool_.get();
  }
  void end_run() override {
    ctx_.pool = nullptr;
    pool_.reset();
  }
  void launch(OpKind op, const OpAttrs& attrs, std::span<const KernelArg> in, const KernelArg& out) override {
    kernels::run_kernel(op, attrs, in, out, ctx_);
  }

 private:
  bool single_thread_;
  std::shared_ptr<ComputePool> pool_;  // held for one run
  kernels::KernelContext ctx_;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(DTypePolicy policy) : policy_(policy) {}
  Device device() const override { return Device::CPU; }
  std::string name() const override {
    return policy_ == DTypePolicy::kFloat32 ? "cpu" : std::string("cpu (") + dtype_policy_name(policy_) + ")";
  }
  bool has_kernel(OpKind op) const override { return size_t(op) < size_t(OpKind::Count); }
  std::shared_ptr<Storage> allocate(size_t bytes) const override { return CpuStorage::allocate(bytes); }
  std::unique_ptr<KernelLauncher> make_launcher(double flops) const override {
    kernels::cpu_path();  // a wrong TENSORGRAD_CPU throws here, on the caller's thread, before any kernel
    const bool bf16 = policy_ == DTypePolicy::kMixedBFloat16 && kernels::cpu_has_bf16();
    return std::make_unique<CpuLauncher>(flops < kernels::kParallelFlops, bf16);
  }
  FusionOptions fusions() const override { return FusionOptions{}; }  // every fused kernel
  DTypePolicy dtype_policy() const override { return policy_; }

 private:
  DTypePolicy policy_;
};

// The processor's name ("model name" in /proc/cpuinfo), or "CPU" where the
// system does not say.
std::string cpu_model_name() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    const size_t start = colon == std::string::npos ? std::string::npos : line.find_first_not_of(" \t", colon + 1);
    if (start != std::string::npos) return line.substr(start);
  }
  return "CPU";
}

}  // namespace

BackendRegistration cpu_registration() {
  return {"cpu",
          [] { return std::vector<DeviceInfo>{{Device::CPU, cpu_model_name(), DeviceType::kCpu, physical_memory_bytes()}}; },
          [](int) { return cpu_backend(); }};
}

bool bfloat16_supported() { return kernels::cpu_has_bf16(); }
const char* cpu_kernel_path() { return kernels::cpu_path_name(kernels::cpu_path()); }
bool bfloat16_convolutions_supported() { return kernels::bf16_convolutions(); }

const std::shared_ptr<const Backend>& cpu_backend() {
  static const std::shared_ptr<const Backend>* b =
      new std::shared_ptr<const Backend>(std::make_shared<CpuBackend>(DTypePolicy::kFloat32));
  return *b;
}

const std::shared_ptr<const Backend>& cpu_backend(DTypePolicy policy) {
  switch (policy) {
    case DTypePolicy::kFloat32: return cpu_backend();
    case DTypePolicy::kMixedBFloat16: {
      static const std::shared_ptr<const Backend>* b = [] {
        if (kernels::cpu_has_amx_bf16())
          log_message(LogLevel::Info,
                      "mixed_bfloat16: matmuls take bfloat16 inputs on AMX tiles and accumulate in float32; "
                      "convolutions stay float32 (faster than AVX512-BF16 on this CPU); weights and optimizer state "
                      "stay float32");
        else if (kernels::cpu_has_bf16())
          log_message(LogLevel::Info,
                      "mixed_bfloat16: matmuls and convolutions take bfloat16 inputs (AVX512-BF16), accumulate in "
                      "float32; weights and optimizer state stay float32");
        else
          log_message(LogLevel::Warning,
                      "mixed_bfloat16: this CPU has no AVX512-BF16; matmuls and convolutions compute in float32");
        return new std::shared_ptr<const Backend>(std::make_shared<CpuBackend>(DTypePolicy::kMixedBFloat16));
      }();
      return *b;
    }
  }
  return cpu_backend();
}

}  // namespace tensorgrad
