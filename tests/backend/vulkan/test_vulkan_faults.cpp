// A device's failures, injected (inject_vulkan_fault) through the paths real
// ones take: out of device memory is a MemoryError naming the bytes and
// loses nothing already trained; a lost device is an Error saying to reload
// the last checkpoint, after which nothing reads the device's memory (a
// compile for the CPU fails cleanly), and the checkpoint trains on.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "test_files.h"
#include "vulkan_support.h"

using namespace tensorgrad;
using test_support::all_weights;

namespace {

// Undoes any injected fault when a test ends, passed or not.
struct FaultGuard {
  ~FaultGuard() { inject_vulkan_fault(VulkanFault::kNone); }
};

nn::Sequential small_model(Device device) {
  nn::clear_session();
  manual_seed(21);
  nn::Sequential m({6});
  m.add(nn::Dense(16, "relu"));
  m.add(nn::Dense(3, "softmax"));
  m.compile(OptimizerSpec::adam(1e-2f), "sparse_categorical_crossentropy", {"accuracy"}, device);
  return m;
}

Tensor ids(int64_t rows) {
  std::vector<int32_t> v(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) v[size_t(r)] = int32_t(r % 3);
  return Tensor::from_vector(v, Shape{rows});
}

template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "no exception of the expected type";
  return "";
}

}  // namespace

TEST(VulkanFaults, OutOfDeviceMemoryLosesNothing) {
  TG_VULKAN_OR_SKIP(vk);
  FaultGuard guard;
  const Tensor x = test_support::random_tensor(Shape{24, 6}, 1), y = ids(24);
  nn::FitOptions fo;
  fo.verbose = 0;
  fo.batch_size = 8;
  nn::Sequential m = small_model(vk->device());
  (void)m.fit(x, y, fo);
  const std::vector<double> trained = all_weights(m);
  // A new batch size plans new graphs: their memory is refused.
  fo.batch_size = 12;
  inject_vulkan_fault(VulkanFault::kOutOfDeviceMemory);
  const std::string what = message_of<MemoryError>([&] { (void)m.fit(x, y, fo); });
  EXPECT_NE(what.find("bytes"), std::string::npos) << what;
  EXPECT_EQ(all_weights(m), trained);
  (void)m.fit(x, y, fo);  // the device has memory again: training goes on
  EXPECT_NE(all_weights(m), trained);

  // Moving a CPU model there: refused before anything changes.
  nn::Sequential cpu = small_model(Device::CPU);
  (void)cpu.fit(x, y, fo);
  const std::vector<double> on_cpu = all_weights(cpu);
  inject_vulkan_fault(VulkanFault::kOutOfDeviceMemory);
  EXPECT_NE(message_of<MemoryError>([&] { cpu.to(vk->device()); }).find("bytes"), std::string::npos);
  EXPECT_EQ(cpu.backend()->device(), Device::CPU);
  for (const nn::Weight& w : cpu.weights()) EXPECT_EQ(w.value.device(), Device::CPU) << w.name;
  EXPECT_EQ(all_weights(cpu), on_cpu);
  (void)cpu.fit(x, y, fo);
}

TEST(VulkanFaults, ALostDeviceSaysToReloadTheCheckpoint) {
  TG_VULKAN_OR_SKIP(vk);
  FaultGuard guard;
  test_support::TempDir dir;
  const std::string path = dir / "last.gguf";
  const Tensor x = test_support::random_tensor(Shape{24, 6}, 2), y = ids(24);
  nn::FitOptions fo;
  fo.verbose = 0;
  fo.batch_size = 8;
  nn::Sequential m = small_model(vk->device());
  (void)m.fit(x, y, fo);
  io::save_model(m, path);
  inject_vulkan_fault(VulkanFault::kDeviceLost);
  const std::string what = message_of<Error>([&] { (void)m.fit(x, y, fo); });
  EXPECT_NE(what.find("lost"), std::string::npos) << what;
  EXPECT_NE(what.find("reload the last checkpoint"), std::string::npos) << what;
  // Nothing reads the lost device's memory: each of these says so.
  for (const auto& call : std::vector<std::function<void()>>{
           [&] { m.compile(OptimizerSpec::adam(1e-2f), "sparse_categorical_crossentropy", {"accuracy"}, Device::CPU); },
           [&] { (void)m.predict(x, 8); },
           [&] { (void)m.get_weights(); },
           [&] { io::save_model(m, dir / "after.gguf"); }})
    EXPECT_NE(message_of<Error>(call).find("was lost"), std::string::npos);
  // The checkpoint is what remains: it trains on the CPU.
  nn::Model back = io::load_model(path);
  (void)back.fit(x, y, fo);
  EXPECT_EQ(back.backend()->device(), Device::CPU);
}

// The eager API meets the same failures. A refused allocation is retried
// once after the block cache is emptied (as PyTorch's caching allocator
// does); one the device cannot hold is a MemoryError naming the bytes, and
// a module that cannot move stays where it was. A lost device is an Error
// at the next sync point, after which every use of its tensors says so;
// CPU tensors and what was saved before are intact.
TEST(VulkanFaults, EagerTensorsOutOfMemoryAndOnALostDevice) {
  TG_VULKAN_OR_SKIP(vk);
  FaultGuard guard;
  const Device device = vk->device();
  ag::TensorOptions on_device;
  on_device.device = device;
  ag::empty_cache();
  (void)ag::zeros({12, 34}, on_device);  // leaves a block in the cache
  ASSERT_EQ(ag::memory_stats(device).cached_blocks, 1u);
  inject_vulkan_fault(VulkanFault::kOutOfDeviceMemory);
  EXPECT_EQ(ag::sum(ag::zeros({12345, 7}, on_device)).item(), 0.0f);
  EXPECT_EQ(ag::memory_stats(device).cached_blocks, 2u);  // the new blocks, given back; the old one freed

  const int64_t huge = int64_t(1) << 22;  // {huge, huge} floats: 64 TiB
  const std::string oom = message_of<MemoryError>([&] { (void)ag::zeros({huge, huge}, on_device); });
  EXPECT_NE(oom.find("70368744177664 bytes"), std::string::npos) << oom;

  ag::manual_seed(3);
  ag::nn::Linear layer(5, 7);
  const std::vector<float> weight = layer.weight.to_vector();
  ag::empty_cache();
  inject_vulkan_fault(VulkanFault::kOutOfDeviceMemory);  // twice: the retry fails too
  inject_vulkan_fault(VulkanFault::kOutOfDeviceMemory);
  EXPECT_NE(message_of<MemoryError>([&] { layer.to(device); }).find("bytes"), std::string::npos);
  for (const ag::Tensor& p : layer.parameters()) EXPECT_EQ(p.device(), Device::CPU);
  EXPECT_EQ(layer.weight.to_vector(), weight);
  test_support::TempDir dir;
  const std::string path = dir / "layer.gguf";
  layer.to(device);
  ag::save(layer, path);
  const ag::Tensor x = ag::ones({3, 5}, on_device);
  const ag::Tensor cpu_x = ag::ones({3, 5});
  inject_vulkan_fault(VulkanFault::kDeviceLost);
  const std::string what = message_of<Error>([&] { (void)ag::sum(layer(x)).item(); });
  EXPECT_NE(what.find("lost"), std::string::npos) << what;
  const std::vector<std::pair<const char*, std::function<void()>>> uses = {
      {"an op", [&] { (void)layer(x); }},
      {"a read back", [&] { (void)x.to_vector(); }},
      {"a move", [&] { (void)x.cpu(); }},
      {"a save", [&] { ag::save(layer, dir / "after.gguf"); }}};
  for (const auto& [use, call] : uses) EXPECT_NE(message_of<Error>(call).find("was lost"), std::string::npos) << use;
  // What was saved before loads onto the CPU and runs.
  const std::shared_ptr<ag::nn::Module> back = ag::load(path);
  EXPECT_EQ(back->parameters()[0].to_vector(), weight);
  EXPECT_EQ((*back)(cpu_x).shape(), Shape({3, 7}));
}
