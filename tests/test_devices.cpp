// Devices as PyTorch writes them ("cpu", "cuda:0", "vulkan:1") and the
// backend registry (issue 35, item 5): devices() lists the CPU and every
// registered backend's devices, GPUs first; a backend registered under a
// new kind gives storage and compiled models on its devices.
#include <gtest/gtest.h>

#include <sstream>
#include <vector>

#include "test_support.h"
#include "tensorgrad/tensorgrad.h"

using namespace tensorgrad;
using test_support::throws;

TEST(Device, ParsesAndPrintsPyTorchsForms) {
  EXPECT_EQ(Device("cpu"), Device::CPU);
  EXPECT_EQ(Device("cpu:0"), Device::CPU);
  EXPECT_EQ(Device(), Device::CPU);
  EXPECT_EQ(Device::CPU.str(), "cpu");
  EXPECT_EQ(Device::CPU.kind(), "cpu");
  EXPECT_EQ(Device::CPU.index(), 0);
  EXPECT_EQ(Device("cuda"), Device::CUDA);  // a kind alone is its device 0
  EXPECT_EQ(Device::CUDA.str(), "cuda:0");
  const Device v("vulkan:1");
  EXPECT_EQ(v.kind(), "vulkan");
  EXPECT_EQ(v.index(), 1);
  EXPECT_EQ(v, Device("vulkan", 1));
  EXPECT_NE(v, Device("vulkan"));
  EXPECT_NE(Device("cuda:1"), Device("vulkan:1"));
  for (const char* s : {"cpu", "cuda:0", "vulkan:1", "vulkan:12", "my_npu2:3", "abcdefghijklmno:2147483647"})
    EXPECT_EQ(Device(s).str(), s);
  for (const Device d : {Device::CPU, Device::CUDA, Device("cpu", 1), Device("vulkan", 7)})
    EXPECT_EQ(Device(d.str()), d) << d;
  std::ostringstream os;
  os << Device("vulkan:2");
  EXPECT_EQ(os.str(), "vulkan:2");
  EXPECT_EQ(device_name(Device::CUDA), "cuda:0");
}

TEST(Device, RefusesMalformedStringsSayingWhatWasExpected) {
  for (const char* s : {"", "CPU", "Cuda:0", "cuda:", "cuda:-1", "cuda:+1", "cuda:01", ":0", "cuda:0:1", "cuda:x",
                        " cpu", "cpu ", "0cuda", "cu-da", "abcdefghijklmnop", "cuda:2147483648", "cuda:99999999999"})
    EXPECT_TRUE(throws<ValueError>([&] { Device d(s); },
                                   {"expected a device such as \"cpu\", \"cuda:0\" or \"vulkan:1\"",
                                    std::string("got \"") + s + "\"", "devices() lists"}))
        << s;
  EXPECT_TRUE(throws<ValueError>([] { Device d("Vulkan", 0); }, {"expected a kind", "got \"Vulkan\""}));
  EXPECT_TRUE(throws<ValueError>([] { Device d("vulkan", -1); }, {"expected an index >= 0", "got -1"}));
}

TEST(Registry, DevicesListsTheCpu) {
  const std::vector<DeviceInfo> all = devices();
  ASSERT_FALSE(all.empty());
  const DeviceInfo& cpu = all.back();  // the CPU comes last
  EXPECT_EQ(cpu.device, Device::CPU);
  EXPECT_EQ(cpu.type, DeviceType::kCpu);
  EXPECT_FALSE(cpu.name.empty());
  EXPECT_EQ(cpu.memory_bytes, physical_memory_bytes());
  EXPECT_EQ(std::string(device_type_name(DeviceType::kCpu)), "CPU");
  EXPECT_EQ(backend(Device("cpu:0")), cpu_backend());
  EXPECT_TRUE(throws<StateError>([] { backend(Device("cpu:1")); },
                                 {"no device cpu:1", "the 'cpu' backend found 1 device(s): cpu (", "Device::CPU"}));
  EXPECT_TRUE(throws<StateError>([] { Tensor::empty(Shape{2}, DType::Float32, Device("cpu:1")); }, {"no device cpu:1"}));
}

TEST(Registry, AnUnknownKindIsRefusedNamingTheRegisteredOnes) {
  for (const auto& call : std::vector<std::function<void()>>{
           [] { backend(Device("nosuchkind:2")); },
           [] { Tensor::empty(Shape{2}, DType::Float32, Device("nosuchkind:2")); },
           [] { (void)Tensor::zeros(Shape{2}).to(Device("nosuchkind:2")); }})
    EXPECT_TRUE(throws<StateError>(call, {"no backend is registered for device nosuchkind:2", "cpu, cuda",
                                          "tensorgrad::devices() lists", "Device::CPU"}));
  nn::clear_session();
  nn::Sequential m({4});
  m.add(nn::Dense(3));
  EXPECT_TRUE(throws<StateError>([&] { m.compile(OptimizerSpec::sgd(), "mse", {}, Device("nosuchkind")); },
                                 {"nosuchkind:0"}));
  EXPECT_FALSE(m.compiled());
}

TEST(Registry, RefusesARegistrationWithoutItsFunctionsOrWithABadKind) {
  const auto none = [] { return std::vector<DeviceInfo>{}; };
  EXPECT_TRUE(throws<ValueError>([&] { register_backend({"emptyfn", none, nullptr}); }, {"'emptyfn'", "empty"}));
  EXPECT_TRUE(throws<ValueError>([&] { register_backend({"Bad Kind", none, [](int) { return cpu_backend(); }}); },
                                 {"expected a kind", "got \"Bad Kind\""}));
  EXPECT_TRUE(throws<ValueError>([&] { register_backend({"cuda", none, [](int) { return cpu_backend(); }}); },
                                 {"'cuda' is already registered", "cpu, cuda"}));
}

namespace {

// The CPU's kernels on memory that says it lives on `device`: a stand-in for
// a GPU backend.
class TestDeviceBackend final : public Backend {
 public:
  explicit TestDeviceBackend(Device device) : device_(device) {}
  Device device() const override { return device_; }
  std::string name() const override { return "test device"; }
  bool has_kernel(OpKind op) const override { return cpu_backend()->has_kernel(op); }
  std::shared_ptr<Storage> allocate(size_t bytes) const override {
    return std::make_shared<test_support::FakeDeviceStorage>(device_, bytes);
  }
  std::unique_ptr<KernelLauncher> make_launcher(double flops) const override {
    return cpu_backend()->make_launcher(flops);
  }

 private:
  Device device_;
};

// Registers, once per process, kind "testgpu" (a discrete and an integrated
// GPU) and kind "testsoft" (a CPU implementation of a GPU API).
void register_test_kinds() {
  static const bool registered = [] {
    static const auto gpus = std::vector<std::shared_ptr<const Backend>>{
        std::make_shared<TestDeviceBackend>(Device("testgpu:0")), std::make_shared<TestDeviceBackend>(Device("testgpu:1"))};
    register_backend({"testsoft",
                      [] { return std::vector<DeviceInfo>{{Device("testsoft:0"), "soft", DeviceType::kCpuImplementation, 0}}; },
                      [](int) { return std::make_shared<TestDeviceBackend>(Device("testsoft:0")); }});
    register_backend({"testgpu",
                      [] {
                        return std::vector<DeviceInfo>{{Device("testgpu:0"), "big", DeviceType::kDiscreteGpu, 1 << 30},
                                                       {Device("testgpu:1"), "small", DeviceType::kIntegratedGpu, 0}};
                      },
                      [](int index) { return gpus.at(size_t(index)); }});
    return true;
  }();
  (void)registered;
}

}  // namespace

TEST(Registry, ARegisteredBackendsDevicesAreListedGpusFirst) {
  register_test_kinds();
  std::vector<std::string> listed;
  for (const DeviceInfo& d : devices()) listed.push_back(d.device.str() + " " + device_type_name(d.type));
  const std::vector<std::string> expected = {"testgpu:0 discrete GPU", "testgpu:1 integrated GPU",
                                             "testsoft:0 CPU implementation", "cpu CPU"};
  EXPECT_EQ(listed, expected);
  EXPECT_EQ(devices()[0].name, "big");
  EXPECT_EQ(devices()[0].memory_bytes, uint64_t(1) << 30);
  EXPECT_EQ(backend(Device("testgpu:1"))->device(), Device("testgpu:1"));
  EXPECT_TRUE(throws<StateError>([] { backend(Device("testgpu:2")); },
                                 {"no device testgpu:2", "found 2 device(s): testgpu:0 (big), testgpu:1 (small)"}));
  EXPECT_TRUE(throws<ValueError>(
      [] { register_backend({"testgpu", [] { return std::vector<DeviceInfo>{}; }, [](int) { return cpu_backend(); }}); },
      {"'testgpu' is already registered", "cpu, cuda, testsoft, testgpu"}));
}

TEST(Registry, StorageOnADeviceComesFromItsBackend) {
  register_test_kinds();
  Tensor t = Tensor::zeros(Shape{2, 3}, DType::Float32, Device("testgpu:1"));
  EXPECT_EQ(t.device(), Device("testgpu:1"));
  EXPECT_NE(dynamic_cast<const test_support::FakeDeviceStorage*>(t.storage().get()), nullptr);
  const Tensor host = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, Shape{2, 3});
  const Tensor there = host.to(Device("testgpu:0"));
  EXPECT_EQ(there.device(), Device("testgpu:0"));
  EXPECT_EQ(there.to_vector(), host.to_vector());
  EXPECT_TRUE(throws<StateError>([&] { t.copy_from(there); }, {"no copy from testgpu:0 to testgpu:1"}));
}

TEST(Registry, ARegisteredDevicesBackendRunsGraphsOnItsMemory) {
  register_test_kinds();
  Graph g;
  const Tensor w = Tensor::from_vector(std::vector<float>{-1, 2, -3, 4}, Shape{4}).to(Device("testgpu:0"));
  const Value y = g.apply(OpKind::Relu, {g.state(w, "w")});
  Executable exe(std::move(g), {y}, BatchRule{}, backend(Device("testgpu:0")));
  EXPECT_EQ(exe.backend().device(), Device("testgpu:0"));
  exe.run();
  Tensor out = Tensor::zeros(Shape{4});
  exe.copy_output(y, out);
  EXPECT_EQ(out.to_vector(), (std::vector<float>{0, 2, 0, 4}));
  // State on another device of the same kind is refused.
  Graph h;
  const Value z = h.apply(OpKind::Relu, {h.state(w, "w")});
  EXPECT_TRUE(throws<StateError>([&] { Executable e(std::move(h), {z}, BatchRule{}, backend(Device("testgpu:1"))); },
                                 {"'w' lives on testgpu:0", "(testgpu:1)"}));
}

TEST(Registry, AModelCompilesForARegisteredDevice) {
  register_test_kinds();
  nn::clear_session();
  nn::Sequential m({4});
  m.add(nn::Dense(3, "softmax"));
  m.compile(OptimizerSpec::adam(), "categorical_crossentropy", {}, Device("testgpu:1"));
  EXPECT_TRUE(m.compiled());
  EXPECT_EQ(m.device(), Device("testgpu:1"));
  EXPECT_EQ(m.backend(), backend(Device("testgpu:1")));
  // A model's weights are made on the CPU and compile does not move them
  // yet: training on another device is refused, naming the first weight.
  const Tensor x = Tensor::zeros(Shape{2, 4}), y = Tensor::zeros(Shape{2, 3});
  nn::FitOptions fo;
  fo.verbose = 0;
  EXPECT_TRUE(throws<StateError>([&] { m.fit(x, y, fo); }, {"'dense/kernel' lives on cpu", "(testgpu:1)"}));
}
