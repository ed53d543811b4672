// The CPU backend: host memory (CpuStorage), the kernels of src/kernels for
// every op, and the compute thread pool (a oneTBB arena) as its KernelContext.
#include "backend/thread_pool.h"
#include "kernels/kernels.h"
#include "tensorgrad/backend/backend.h"

namespace tensorgrad {

namespace {

class CpuLauncher final : public KernelLauncher {
 public:
  explicit CpuLauncher(bool single_thread) : single_thread_(single_thread) {}
  void begin_run() override {
    pool_ = single_thread_ ? nullptr : compute_pool();
    ctx_.pool = pool_.get();
  }
  void end_run() override {
    ctx_.pool = nullptr;
    pool_.reset();
  }
  void launch(OpKind op, const OpAttrs& attrs, std::span<const kernels::TensorRef> in,
              const kernels::TensorRef& out) override {
    kernels::run_kernel(op, attrs, in, out, ctx_);
  }

 private:
  bool single_thread_;
  std::shared_ptr<ComputePool> pool_;  // held for one run
  kernels::KernelContext ctx_;
};

class CpuBackend final : public Backend {
 public:
  Device device() const override { return Device::CPU; }
  std::string name() const override { return "cpu"; }
  bool has_kernel(OpKind op) const override { return size_t(op) < size_t(OpKind::Count); }
  std::shared_ptr<Storage> allocate(size_t bytes) const override { return CpuStorage::allocate(bytes); }
  std::unique_ptr<KernelLauncher> make_launcher(double flops) const override {
    return std::make_unique<CpuLauncher>(flops < kernels::kParallelFlops);
  }
};

}  // namespace

const std::shared_ptr<const Backend>& cpu_backend() {
  static const std::shared_ptr<const Backend>* b = new std::shared_ptr<const Backend>(std::make_shared<CpuBackend>());
  return *b;
}

}  // namespace tensorgrad
