// A device's failures, injected (inject_vulkan_fault) through the paths real
// ones take: out of device memory is a MemoryError naming the bytes and
// loses nothing already trained; a lost device is an Error saying to reload
// the last checkpoint, after which nothing reads the device's memory (a
// compile for the CPU fails cleanly), and the checkpoint trains on.
#include <gtest/gtest.h>

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
