// Devices as PyTorch writes them ("cpu", "cuda:0", "vulkan:1") and the
// backend registry (issue 35, item 5): devices() lists the CPU and every
// registered backend's devices, GPUs first; a backend registered under a
// new kind gives storage and compiled models on its devices.
#include <gtest/gtest.h>

#include <sstream>
#include <vector>

#include "sealed_device.h"
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
    EXPECT_TRUE(throws<StateError>(call, {"no backend is registered for device nosuchkind:2", "cpu, cuda, vulkan",
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
                                 {"'cuda' is already registered", "cpu, cuda, vulkan"}));
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
// GPU) and kind "testsoft" (a CPU implementation of a GPU API, whose memory
// the host cannot read: test_support::SealedBackend).
void register_test_kinds() {
  static const bool registered = [] {
    static const auto sealed = std::make_shared<const test_support::SealedBackend>(Device("testsoft:0"));
    static const auto gpus = std::vector<std::shared_ptr<const Backend>>{
        std::make_shared<TestDeviceBackend>(Device("testgpu:0")), std::make_shared<TestDeviceBackend>(Device("testgpu:1"))};
    register_backend({"testsoft",
                      [] { return std::vector<DeviceInfo>{{Device("testsoft:0"), "soft", DeviceType::kCpuImplementation, 0}}; },
                      [](int) { return sealed; }});
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
  std::vector<DeviceInfo> ours;  // the machine's own Vulkan devices left out
  for (const DeviceInfo& d : devices())
    if (d.device.kind() != "vulkan") {
      listed.push_back(d.device.str() + " " + device_type_name(d.type));
      ours.push_back(d);
    }
  const std::vector<std::string> expected = {"testgpu:0 discrete GPU", "testgpu:1 integrated GPU",
                                             "testsoft:0 CPU implementation", "cpu CPU"};
  EXPECT_EQ(listed, expected);
  EXPECT_EQ(ours[0].name, "big");
  EXPECT_EQ(ours[0].memory_bytes, uint64_t(1) << 30);
  EXPECT_EQ(backend(Device("testgpu:1"))->device(), Device("testgpu:1"));
  EXPECT_TRUE(throws<StateError>([] { backend(Device("testgpu:2")); },
                                 {"no device testgpu:2", "found 2 device(s): testgpu:0 (big), testgpu:1 (small)"}));
  EXPECT_TRUE(throws<ValueError>(
      [] { register_backend({"testgpu", [] { return std::vector<DeviceInfo>{}; }, [](int) { return cpu_backend(); }}); },
      {"'testgpu' is already registered", "cpu, cuda, vulkan, testsoft, testgpu"}));
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
  // Compile moves the weights to the device, so the model trains there.
  for (const nn::Weight& w : m.weights()) EXPECT_EQ(w.value.device(), Device("testgpu:1")) << w.name;
  const Tensor x = Tensor::zeros(Shape{2, 4}), y = Tensor::zeros(Shape{2, 3});
  nn::FitOptions fo;
  fo.verbose = 0;
  const nn::History h = m.fit(x, y, fo);
  EXPECT_EQ(h["loss"].size(), 1u);
}

namespace {

using test_support::SealedStorage;

const Device kSealed("testsoft:0");

// A small CNN with batch normalisation and dropout, the same weights on
// every device (the global seed is set before it is built).
nn::Sequential seam_model(Device device) {
  nn::clear_session();
  manual_seed(7);
  nn::Sequential m({6, 6, 1});
  m.add(nn::Conv2D(4, 3, "valid", "relu"));
  m.add(nn::BatchNormalization());
  m.add(nn::Flatten());
  m.add(nn::Dropout(0.25f));
  m.add(nn::Dense(3, "softmax"));
  m.compile(OptimizerSpec::adam(0.01f), "categorical_crossentropy", {"accuracy"}, device);
  return m;
}

Tensor seam_inputs(int64_t rows) {
  std::vector<float> v(size_t(rows * 36));
  for (size_t i = 0; i < v.size(); ++i) v[i] = float((i * 37) % 23) / 11.0f - 1.0f;
  return Tensor::from_vector(v, Shape{rows, 6, 6, 1});
}

Tensor seam_labels(int64_t rows) {
  std::vector<float> v(size_t(rows * 3), 0.0f);
  for (int64_t r = 0; r < rows; ++r) v[size_t(r * 3 + (r * 5) % 3)] = 1.0f;
  return Tensor::from_vector(v, Shape{rows, 3});
}

std::vector<std::vector<float>> weight_values(const nn::Model& m) {
  std::vector<std::vector<float>> out;
  for (const nn::Weight& w : m.weights()) out.push_back(w.value.to_vector());
  return out;
}

}  // namespace

// The device seam for models: a backend whose memory the host cannot read
// trains and predicts with the CPU's numbers, bit for bit, through fit,
// evaluate, predict, the Trainer and saving; a step copies the batch in and
// the loss (and metric) scalars out, nothing else.
TEST(DeviceSeam, AModelTrainsOnMemoryTheHostCannotReadWithTheCpusNumbers) {
  register_test_kinds();
  const Tensor x = seam_inputs(12), y = seam_labels(12);
  nn::FitOptions fo;
  fo.verbose = 0;
  fo.epochs = 2;
  fo.batch_size = 4;
  nn::Sequential cpu = seam_model(Device::CPU), dev = seam_model(kSealed);
  for (const nn::Weight& w : dev.weights()) EXPECT_EQ(w.value.device(), kSealed) << w.name;
  EXPECT_EQ(weight_values(cpu), weight_values(dev));
  const nn::History hc = cpu.fit(x, y, fo), hd = dev.fit(x, y, fo);
  EXPECT_EQ(hc["loss"], hd["loss"]);
  EXPECT_EQ(hc["accuracy"], hd["accuracy"]);
  EXPECT_EQ(weight_values(cpu), weight_values(dev));
  EXPECT_EQ(cpu.evaluate(x, y, 5), dev.evaluate(x, y, 5));
  EXPECT_EQ(cpu.predict(x, 5).to_vector(), dev.predict(x, 5).to_vector());
  EXPECT_EQ(dev.predict(x, 5).device(), Device::CPU);

  // The Trainer: steps, a snapshot, target updates.
  nn::TrainerOptions to;
  to.batch_size = 4;
  manual_seed(11);  // each trainer draws its dropout stream from the global generator
  nn::Trainer tc(cpu, to);
  manual_seed(11);
  nn::Trainer td(dev, to);
  const Tensor xb = x.rows(0, 4), yb = y.rows(0, 4);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(tc.step(xb, yb), td.step(xb, yb));
  nn::Model sc = tc.snapshot(), sd = td.snapshot();
  EXPECT_EQ(weight_values(sd), weight_values(sc));
  for (int i = 0; i < 2; ++i) EXPECT_EQ(tc.step(x.rows(4, 8), y.rows(4, 8)), td.step(x.rows(4, 8), y.rows(4, 8)));
  tc.update_target(sc, 0.5f);
  td.update_target(sd, 0.5f);
  EXPECT_EQ(weight_values(sd), weight_values(sc));
  EXPECT_EQ(sc.predict(x, 4).to_vector(), sd.predict(x, 4).to_vector());

  // A step copies the batch in and its scalars out; a target update copies nothing.
  SealedStorage::reset_counts();
  EXPECT_EQ(tc.step(xb, yb), td.step(xb, yb));
  EXPECT_EQ(SealedStorage::uploads, 2);
  EXPECT_EQ(SealedStorage::upload_bytes, xb.nbytes() + yb.nbytes());
  // Three scalars come out: the total loss, the output's loss and its accuracy sum.
  EXPECT_EQ(SealedStorage::downloads, 3);
  EXPECT_EQ(SealedStorage::download_bytes, 3 * sizeof(float));
  SealedStorage::reset_counts();
  tc.update_target(sc, 0.5f);
  td.update_target(sd, 0.5f);
  EXPECT_EQ(SealedStorage::uploads + SealedStorage::downloads + SealedStorage::within, 0);
  EXPECT_EQ(weight_values(sd), weight_values(sc));

  // Saving reads the device's state by copies; a saved device model loads
  // on the CPU, and its weights load back onto the device.
  const std::string path = ::testing::TempDir() + "/device_seam.tgm";
  io::save_model(dev, path);
  nn::Model loaded = io::load_model(path);
  EXPECT_EQ(weight_values(loaded), weight_values(cpu));
  EXPECT_EQ(loaded.predict(x, 5).to_vector(), cpu.predict(x, 5).to_vector());
  nn::Sequential again = seam_model(kSealed);
  io::load_weights(again, path);
  EXPECT_EQ(weight_values(again), weight_values(cpu));
  EXPECT_EQ(again.predict(x, 5).to_vector(), cpu.predict(x, 5).to_vector());
  std::remove(path.c_str());
}

// The seal holds: a host tensor handed to a kernel of the device is refused
// by its launcher, and host element access to device memory throws.
TEST(DeviceSeam, TheSealedDeviceRefusesHostMemory) {
  register_test_kinds();
  const Tensor t = Tensor::zeros(Shape{3}, DType::Float32, kSealed);
  EXPECT_TRUE(throws<StateError>([&] { (void)t.data<float>(); }, {"needs a CPU tensor", "testsoft:0"}));
  Graph g;
  const Tensor host = Tensor::zeros(Shape{4});
  const Value in = g.input("x", Shape{4});
  const Value y = g.apply(OpKind::Relu, {in});
  Executable exe(std::move(g), {y}, BatchRule{}, backend(kSealed));
  EXPECT_THROW(SealedStorage::translate(host.raw()), std::logic_error);
  SealedStorage::reset_counts();
  exe.bind(in, host);  // another device's tensor: uploaded, never read in place
  EXPECT_EQ(SealedStorage::uploads, 1);
  exe.run();
  EXPECT_EQ(exe.output(y).device(), kSealed);
  EXPECT_EQ(exe.output(y).to_vector(), std::vector<float>(4, 0.0f));
  EXPECT_EQ(exe.scalar(y), 0.0f);
}

namespace {

// The sealed device, compiling a planned graph as a GPU API records a
// command buffer: compile copies every kernel call, with its arguments
// translated to the sealed device's private bytes, and run replays that
// copy without looking at the program again. update re-records; a recorder that missed
// a change would replay stale shapes or addresses and lose the CPU's bits.
class RecordingBackend final : public test_support::SealedBackend {
 public:
  explicit RecordingBackend(Device device) : SealedBackend(device) {}
  std::string name() const override { return "recording test device"; }

  std::unique_ptr<CompiledGraph> compile(const GraphProgram& program) const override {
    ++compiles;
    return std::make_unique<Recording>(*this, program);
  }

  mutable int compiles = 0, row_updates = 0, address_updates = 0, replays = 0;

 private:
  class Recording final : public CompiledGraph {
   public:
    Recording(const RecordingBackend& backend, const GraphProgram& program)
        : backend_(backend), program_(program), cpu_(cpu_backend()->make_launcher(program.flops)) {
      record();
    }
    void run(size_t first_step, size_t last_step) override {
      ++backend_.replays;
      cpu_->begin_run();
      for (size_t s = first_step; s < last_step; ++s) {
        const GraphProgram::Step& step = steps_[s];
        cpu_->launch(step.op, step.attrs, {args_.data() + step.first_arg + 1, step.n_inputs}, args_[step.first_arg]);
      }
      cpu_->end_run();
    }
    void update(const ProgramChange& change) override {
      backend_.row_updates += change.rows;
      backend_.address_updates += change.addresses;
      record();
    }

   private:
    void record() {
      steps_ = program_.steps;
      args_ = program_.args;
      for (KernelArg& a : args_)
        if (a.data) a.data = SealedStorage::translate(a.data);
    }
    const RecordingBackend& backend_;
    const GraphProgram& program_;
    std::unique_ptr<KernelLauncher> cpu_;
    std::vector<GraphProgram::Step> steps_;
    std::vector<KernelArg> args_;
  };
};

const Device kRecording("testrec:0");

const RecordingBackend& recording_backend() {
  static const auto b = [] {
    auto rec = std::make_shared<const RecordingBackend>(kRecording);
    register_backend({"testrec",
                      [] { return std::vector<DeviceInfo>{{kRecording, "rec", DeviceType::kCpuImplementation, 0}}; },
                      [rec](int) { return rec; }});
    return rec;
  }();
  return *b;
}

}  // namespace

// A backend that records a planned graph once and replays it trains,
// evaluates and predicts with the CPU's bits through fit, predict and the
// Trainer: each planned graph is compiled once, not per step, and its
// recording is told when the rows change (set_rows) or an input's address
// changes, and only then.
TEST(CompiledGraph, ARecordingBackendReplaysPlannedGraphsWithTheCpusBits) {
  const RecordingBackend& rec = recording_backend();
  const Tensor x = seam_inputs(10), y = seam_labels(10);  // batches of 4, 4 and 2 rows
  nn::FitOptions fo;
  fo.verbose = 0;
  fo.epochs = 2;
  fo.batch_size = 4;
  nn::Sequential cpu = seam_model(Device::CPU), dev = seam_model(kRecording);
  EXPECT_EQ(cpu.fit(x, y, fo)["loss"], dev.fit(x, y, fo)["loss"]);
  EXPECT_EQ(weight_values(cpu), weight_values(dev));
  // Prediction plans are made for powers of two and run smaller batches
  // through set_rows: 5 rows on the plan for 8, then 6 on it.
  for (int64_t batch : {5, 6}) EXPECT_EQ(cpu.predict(x, batch).to_vector(), dev.predict(x, batch).to_vector());
  EXPECT_GT(rec.compiles, 0);
  EXPECT_GT(rec.row_updates, 0);

  // Planned graphs are reused: more epochs and predictions compile nothing
  // and replay every step. The batch is uploaded into the same buffer each
  // step, so no address changes; each switch between 5 and 6 rows on the
  // plan for 8 is one row update.
  const int compiles = rec.compiles, replays = rec.replays;
  rec.row_updates = rec.address_updates = 0;
  EXPECT_EQ(cpu.fit(x, y, fo)["loss"], dev.fit(x, y, fo)["loss"]);
  EXPECT_EQ(weight_values(cpu), weight_values(dev));
  for (int64_t batch : {5, 6}) EXPECT_EQ(cpu.predict(x, batch).to_vector(), dev.predict(x, batch).to_vector());
  EXPECT_EQ(rec.compiles, compiles);
  EXPECT_GE(rec.replays - replays, 2 * 3 + 2 + 2);
  EXPECT_EQ(rec.address_updates, 0);
  EXPECT_EQ(rec.row_updates, 2);

  // The Trainer plans its step once; its steps replay it.
  nn::TrainerOptions to;
  to.batch_size = 4;
  manual_seed(11);
  nn::Trainer tc(cpu, to);
  manual_seed(11);
  nn::Trainer td(dev, to);
  EXPECT_EQ(tc.step(x.rows(0, 4), y.rows(0, 4)), td.step(x.rows(0, 4), y.rows(0, 4)));
  const int planned = rec.compiles;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(tc.step(x.rows(4, 8), y.rows(4, 8)), td.step(x.rows(4, 8), y.rows(4, 8)));
  EXPECT_EQ(tc.step(x.rows(0, 4), y.rows(0, 4)), td.step(x.rows(0, 4), y.rows(0, 4)));
  EXPECT_EQ(rec.compiles, planned);
  EXPECT_EQ(weight_values(cpu), weight_values(dev));
}

// Model::to moves a compiled model's weights and whole training state (Adam's
// moments and iterations, the batch-norm statistics, the random streams) to
// another device and back: training goes on there as on the model that
// stayed, bit for bit (the sealed device runs the CPU's kernels).
TEST(DeviceSeam, ToMovesTheTrainingStateSoTrainingGoesOn) {
  register_test_kinds();
  const Tensor x = seam_inputs(12), y = seam_labels(12);
  nn::FitOptions fo;
  fo.verbose = 0;
  fo.batch_size = 4;
  nn::Sequential stay = seam_model(Device::CPU), moved = seam_model(Device::CPU);
  EXPECT_EQ(stay.fit(x, y, fo)["loss"], moved.fit(x, y, fo)["loss"]);
  moved.to(kSealed);
  for (const nn::Weight& w : moved.weights()) EXPECT_EQ(w.value.device(), kSealed) << w.name;
  EXPECT_EQ(stay.fit(x, y, fo)["loss"], moved.fit(x, y, fo)["loss"]);
  moved.to(Device::CPU);
  EXPECT_EQ(stay.fit(x, y, fo)["loss"], moved.fit(x, y, fo)["loss"]);
  EXPECT_EQ(weight_values(moved), weight_values(stay));
  EXPECT_TRUE(throws<StateError>([&] { moved.to(Device("nosuchkind:0")); }, {"nosuchkind"}));
  EXPECT_EQ(moved.backend()->device(), Device::CPU);
}
