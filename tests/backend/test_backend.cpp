// The device seam (issue 13): tensors own memory through Storage, a backend
// owns allocation, kernel lookup and executables, a model is compiled for a
// device, and CUDA (no backend) is refused with "no CUDA device".
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <vector>

#include "test_support.h"
#include "tensorgrad/tensorgrad.h"

using namespace tensorgrad;
using test_support::throws;

namespace {

using FakeDeviceStorage = test_support::FakeDeviceStorage;

Tensor fake_device_tensor(const Shape& shape) {
  return Tensor::adopt(std::make_shared<FakeDeviceStorage>(Device::CUDA, size_t(shape.numel()) * 4), shape);
}

// The CPU's kernels behind a backend that counts its launches and may lack
// one op: how a device without a kernel for an op is refused.
class CountingBackend final : public Backend {
 public:
  explicit CountingBackend(OpKind missing = OpKind::Count) : missing_(missing) {}
  Device device() const override { return Device::CPU; }
  std::string name() const override { return "counting"; }
  bool has_kernel(OpKind op) const override { return op != missing_; }
  std::shared_ptr<Storage> allocate(size_t bytes) const override { return cpu_backend()->allocate(bytes); }
  std::unique_ptr<KernelLauncher> make_launcher(double flops) const override {
    struct Counting final : KernelLauncher {
      std::unique_ptr<KernelLauncher> cpu;
      std::atomic<int64_t>* count;
      void begin_run() override { cpu->begin_run(); }
      void end_run() override { cpu->end_run(); }
      void launch(OpKind op, const OpAttrs& at, std::span<const KernelArg> in,
                  const KernelArg& out) override {
        ++*count;
        cpu->launch(op, at, in, out);
      }
    };
    auto l = std::make_unique<Counting>();
    l->cpu = cpu_backend()->make_launcher(flops);
    l->count = &launches;
    return l;
  }
  mutable std::atomic<int64_t> launches{0};

 private:
  OpKind missing_;
};

nn::Sequential small_model() {
  manual_seed(3);
  nn::clear_session();
  nn::Sequential m({4});
  m.add(nn::Dense(8, "relu"));
  m.add(nn::Dense(3, "softmax"));
  return m;
}

std::vector<float> weights_of(const nn::Model& m) {
  std::vector<float> all;
  for (const nn::Weight& w : m.weights()) {
    const std::vector<float> v = w.value.to_vector();
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

}  // namespace

TEST(Storage, TensorsViewTheirStorageFromAnOffset) {
  Tensor t = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, Shape{3, 2});
  ASSERT_NE(t.storage(), nullptr);
  EXPECT_EQ(t.storage()->device(), Device::CPU);
  EXPECT_EQ(t.storage()->nbytes(), 24u);
  const Tensor r = t.rows(1, 3);
  EXPECT_EQ(r.storage(), t.storage());
  EXPECT_EQ(r.storage_offset(), 8u);
  EXPECT_EQ(r.item(0), 3.0f);
  EXPECT_EQ(t.to(Device::CPU).raw(), t.raw());  // already there: shared, as torch's .to
  float host[2] = {0, 0};
  r.copy_to_host(host, 8, 4);
  EXPECT_EQ(host[0], 4.0f);
  EXPECT_EQ(host[1], 5.0f);
  const float in[1] = {-7.0f};
  Tensor(r).copy_from_host(in, 4, 4);
  EXPECT_EQ(t.item(3), -7.0f);
  EXPECT_TRUE(throws<IndexError>([&] { Tensor(r).copy_from_host(in, 4, 16); }, {"outside", "16 bytes"}));
  EXPECT_TRUE(throws<IndexError>([&] { r.copy_to_host(host, 20); }, {"outside"}));
}

TEST(Storage, ViewsOfCallerMemoryAreNotCopied) {
  float mine[4] = {1, 2, 3, 4};
  Tensor v = Tensor::view(mine, Shape{4});
  EXPECT_EQ(v.storage()->data(), static_cast<void*>(mine));
  v.fill(2.5f);
  EXPECT_EQ(mine[3], 2.5f);
}

TEST(Storage, CopiesCrossDevicesThroughTheDevicesStorage) {
  FakeDeviceStorage::uploads = FakeDeviceStorage::downloads = FakeDeviceStorage::within = 0;
  const Tensor host = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, Shape{2, 2});
  Tensor dev = fake_device_tensor(Shape{2, 2});
  EXPECT_EQ(dev.device(), Device::CUDA);
  dev.copy_from(host);
  EXPECT_EQ(FakeDeviceStorage::uploads, 1);
  Tensor dev2 = fake_device_tensor(Shape{2, 2});
  dev2.copy_from(dev);
  EXPECT_EQ(FakeDeviceStorage::within, 1);
  Tensor back = Tensor::zeros(Shape{2, 2});
  back.copy_from(dev2.rows(0, 2));
  EXPECT_EQ(FakeDeviceStorage::downloads, 1);
  EXPECT_EQ(back.to_vector(), host.to_vector());
  EXPECT_EQ(dev2.item(3), 4.0f);  // a device read is a download
  EXPECT_EQ(dev2.to_vector(), host.to_vector());
  dev2.fill(9.0f);
  EXPECT_EQ(dev2.item(0), 9.0f);
  // Host element access refuses a device tensor instead of reading device memory.
  EXPECT_TRUE(throws<StateError>([&] { dev.data<float>(); }, {"data<float>()", "needs a CPU tensor", "cuda", "to(Device::CPU)"}));
  EXPECT_TRUE(throws<StateError>([&] { (void)dev.clone(); }, {"no CUDA device"}));  // no CUDA allocator here
}

TEST(Storage, AdoptChecksTheStorageSize) {
  EXPECT_TRUE(throws<StateError>([] { Tensor::adopt(nullptr, Shape{2}); }, {"null storage"}));
  EXPECT_TRUE(throws<StateError>([] { Tensor::adopt(CpuStorage::allocate(4), Shape{2}); },
                                 {"4 bytes", "cannot hold", "8 bytes"}));
  // The CPU's kind is registered once, with its fixed storage (CpuStorage).
  EXPECT_TRUE(throws<ValueError>([] { register_backend({"cpu", [] { return std::vector<DeviceInfo>{}; },
                                                         [](int) { return cpu_backend(); }}); },
                                 {"'cpu'", "already registered"}));
}

TEST(Backend, CudaIsRefusedWithNoCudaDevice) {
  // tensorgrad has no CUDA backend: "cuda:0" parses (as PyTorch's), and
  // using it says so and where to go (the Vulkan backend runs on NVIDIA).
  EXPECT_TRUE(throws<StateError>([] { backend(Device::CUDA); },
                                 {"no CUDA device", "no CUDA backend", "Device(\"vulkan:0\")", "Device::CPU"}));
  EXPECT_TRUE(throws<StateError>([] { backend(Device("cuda:3")); }, {"no CUDA device", "no CUDA backend"}));
  EXPECT_TRUE(throws<StateError>([] { Tensor::empty(Shape{2}, DType::Float32, Device::CUDA); }, {"no CUDA device"}));
  nn::Sequential m = small_model();
  EXPECT_TRUE(throws<StateError>([&] { m.compile(OptimizerSpec::adam(), "categorical_crossentropy", {}, Device::CUDA); },
                                 {"no CUDA device"}));
  EXPECT_FALSE(m.compiled());  // a failed compile leaves the model as it was
  m.compile(OptimizerSpec::adam(), "categorical_crossentropy", {"accuracy"});
  EXPECT_EQ(m.device(), Device::CPU);
  EXPECT_TRUE(throws<StateError>([&] { m.compile(OptimizerSpec::sgd(), std::vector<Loss>{Loss("mse")}, {}, {}, Device::CUDA); },
                                 {"no CUDA device"}));
  EXPECT_EQ(m.optimizer().kind, OptimizerSpec::Kind::AdamW);  // unchanged
}

TEST(Backend, CpuBackendHasEveryKernel) {
  const auto& cpu = *cpu_backend();
  EXPECT_EQ(cpu.device(), Device::CPU);
  EXPECT_EQ(cpu.name(), "cpu");
  for (size_t k = 0; k < size_t(OpKind::Count); ++k) EXPECT_TRUE(cpu.has_kernel(OpKind(k))) << op_info(OpKind(k)).name;
  EXPECT_EQ(backend(Device::CPU), cpu_backend());
}

TEST(Backend, AModelNeedingAMissingKernelIsRefusedAtCompile) {
  nn::Sequential m = small_model();
  auto lacks_softmax_grad = std::make_shared<CountingBackend>(OpKind::SoftmaxCrossEntropy);
  EXPECT_TRUE(throws<StateError>(
      [&] { m.compile(OptimizerSpec::adam(), "categorical_crossentropy", {}, lacks_softmax_grad); },
      {"counting backend has no kernel for op", op_info(OpKind::SoftmaxCrossEntropy).name, "Device::CPU"}));
  EXPECT_FALSE(m.compiled());
  EXPECT_EQ(lacks_softmax_grad->launches.load(), 0);  // refused before anything ran
  // A forward op is found too.
  // (The Dense layers' MatMul: their ReLU is folded into it, so the graph has no Relu op.)
  auto lacks_matmul = std::make_shared<CountingBackend>(OpKind::MatMul);
  EXPECT_TRUE(throws<StateError>([&] { m.compile(OptimizerSpec::adam(), "categorical_crossentropy", {}, lacks_matmul); },
                                 {"no kernel for op", op_info(OpKind::MatMul).name}));
  EXPECT_TRUE(throws<ValueError>([&] { m.compile(OptimizerSpec::adam(), "categorical_crossentropy", {}, nullptr); },
                                 {"null backend"}));
}

TEST(Backend, EveryGraphOfACompiledModelRunsThroughItsBackend) {
  std::mt19937 rng(5);
  const Tensor x = test_support::uniform(Shape{40, 4}, rng, -1, 1);
  std::vector<float> onehot(120, 0.0f);
  for (int i = 0; i < 40; ++i) onehot[size_t(i * 3 + i % 3)] = 1.0f;
  const Tensor y = Tensor::from_vector(onehot, Shape{40, 3});
  nn::FitOptions fo;
  fo.epochs = 2;
  fo.batch_size = 8;
  fo.verbose = 0;

  nn::Sequential on_cpu = small_model();
  on_cpu.compile(OptimizerSpec::adam(), "categorical_crossentropy");
  on_cpu.fit(x, y, fo);
  const Tensor p_cpu = on_cpu.predict(x);

  auto counting = std::make_shared<CountingBackend>();
  nn::Sequential on_counting = small_model();
  on_counting.compile(OptimizerSpec::adam(), "categorical_crossentropy", {}, counting);
  EXPECT_EQ(on_counting.backend().get(), counting.get());
  on_counting.fit(x, y, fo);
  const int64_t after_fit = counting->launches.load();
  EXPECT_GT(after_fit, 0);
  const Tensor p = on_counting.predict(x);
  EXPECT_GT(counting->launches.load(), after_fit);  // predict's plan too
  // The same kernels behind another lookup: bit-identical training.
  EXPECT_EQ(weights_of(on_counting), weights_of(on_cpu));
  EXPECT_EQ(p.to_vector(), p_cpu.to_vector());
  // A clone keeps its backend.
  EXPECT_EQ(on_counting.clone().backend().get(), counting.get());
}

TEST(Backend, AnExecutableRefusesStateOnAnotherDevice) {
  Graph g;
  const Tensor w = fake_device_tensor(Shape{2});
  const Value p = g.state(w, "w");
  const Value y = g.apply(OpKind::Relu, {p});
  EXPECT_TRUE(throws<StateError>([&] { Executable exe(std::move(g), {y}); },
                                 {"'w' lives on cuda", "cpu backend", "Tensor::to"}));
}

// An eager op runs on its inputs' device, through that device's backend:
// without one, the error says why there is none.
TEST(Backend, EagerOpsOnADeviceWithoutABackendSayWhy) {
  const ag::Tensor a(fake_device_tensor(Shape{2}));
  EXPECT_TRUE(throws<StateError>([&] { (void)ag::relu(a); }, {"no CUDA device"}));
}

TEST(Backend, ATrainerAndItsTargetUpdatesRunOnTheModelsBackend) {
  auto counting = std::make_shared<CountingBackend>();
  nn::Sequential m = small_model();
  m.compile(OptimizerSpec::adam(), "categorical_crossentropy", {}, counting);
  nn::TrainerOptions to;
  to.batch_size = 4;
  nn::Trainer trainer(m, to);
  nn::Model target = trainer.snapshot();
  EXPECT_EQ(target.backend().get(), counting.get());
  std::mt19937 rng(2);
  const Tensor x = test_support::uniform(Shape{4, 4}, rng, -1, 1);
  const Tensor y = Tensor::from_vector(std::vector<float>{1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 0, 0}, Shape{4, 3});
  trainer.step(x, y);
  const int64_t after_step = counting->launches.load();
  EXPECT_GT(after_step, 0);
  const std::vector<float> before = weights_of(target);
  trainer.update_target(target, 0.5f);
  EXPECT_GT(counting->launches.load(), after_step);  // the Polyak ops too
  const std::vector<float> mine = weights_of(trainer.model()), theirs = weights_of(target);
  ASSERT_EQ(mine.size(), theirs.size());
  ASSERT_EQ(before.size(), theirs.size());
  for (size_t i = 0; i < mine.size(); ++i) EXPECT_FLOAT_EQ(theirs[i], 0.5f * mine[i] + 0.5f * before[i]) << i;
}

namespace {
// The CPU backend, recording the work each executable's launcher is made for.
class FlopRecorder final : public Backend {
 public:
  Device device() const override { return cpu_backend()->device(); }
  std::string name() const override { return "cpu (flop recorder)"; }
  bool has_kernel(OpKind op) const override { return cpu_backend()->has_kernel(op); }
  std::shared_ptr<Storage> allocate(size_t bytes) const override { return cpu_backend()->allocate(bytes); }
  std::unique_ptr<KernelLauncher> make_launcher(double flops) const override {
    recorded.push_back(flops);
    return cpu_backend()->make_launcher(flops);
  }
  mutable std::vector<double> recorded;
};
}  // namespace

// The work that decides whether a graph runs threaded counts a
// convolution's multiply-adds (2 outputs kh kw C, and the same for its two
// gradients), not its outputs: a 3x3 64->64 convolution of a 32x32 image
// has 65,536 outputs but 75 million flops, which must run threaded.
TEST(Backend, TheThreadingDecisionCountsAConvolutionsProducts) {
  const Shape x{1, 32, 32, 64}, k{3, 3, 64, 64}, y{1, 32, 32, 64};
  Window2D w;
  w.kh = w.kw = 3;
  w.pad_top = w.pad_left = w.pad_bottom = w.pad_right = 1;
  const double products = 2.0 * double(y.numel()) * 3 * 3 * 64;
  struct Case {
    const char* name;
    OpKind op;
    Shape a, b, out;
  };
  for (const Case& c : {Case{"forward", OpKind::Conv2D, x, k, y}, Case{"input gradient", OpKind::Conv2DBackwardInput, y, k, x},
                        Case{"filter gradient", OpKind::Conv2DBackwardFilter, x, y, k}}) {
    SCOPED_TRACE(c.name);
    auto backend = std::make_shared<FlopRecorder>();
    Graph g;
    OpAttrs at;
    at.window = w;
    at.shape = c.out;
    const Value out = g.apply(c.op, {g.input("a", c.a), g.input("b", c.b)}, at);
    Executable exe(std::move(g), {out}, BatchRule{}, backend);
    ASSERT_EQ(backend->recorded.size(), 1u);
    EXPECT_EQ(backend->recorded[0], products);
  }
}

// A graph's work sums every op's count: a matmul's 2 M N K and one per
// output element of an element-wise op (the count TG_PROFILE reports too).
TEST(Backend, TheThreadingDecisionSumsProductsAndOutputs) {
  auto backend = std::make_shared<FlopRecorder>();
  Graph g;
  const Value a = g.input("a", Shape{4, 8}), b = g.input("b", Shape{8, 16}), c = g.input("c", Shape{4, 16});
  const Value out = g.apply(OpKind::Mul, {g.apply(OpKind::MatMul, {a, b}, OpAttrs{}), c}, OpAttrs{});
  Executable exe(std::move(g), {out}, BatchRule{}, backend);
  ASSERT_EQ(backend->recorded.size(), 1u);
  EXPECT_EQ(backend->recorded[0], 2.0 * 4 * 16 * 8 + 4 * 16);
}
