// The Vulkan runtime: device listing, memory and copies, and the errors a
// machine without Vulkan gives.
#include <gtest/gtest.h>

#include <cstdlib>

#include "vulkan_support.h"

using namespace tensorgrad;

// The registry lists every usable Vulkan device, as vulkan:0, vulkan:1, ...
TEST(VulkanRuntime, DevicesAreListed) {
  TG_VULKAN_OR_SKIP(vk);
  int found = 0;
  for (const DeviceInfo& d : devices())
    if (d.device.kind() == "vulkan") {
      EXPECT_EQ(d.device, Device("vulkan", found));
      EXPECT_FALSE(d.name.empty());
      ++found;
    }
  EXPECT_GE(found, 1);
  EXPECT_EQ(vk->device(), Device("vulkan:0"));
  EXPECT_EQ(vk->name(), "vulkan");
}

// Host to device and back, within the device, at offsets and odd sizes.
TEST(VulkanRuntime, CopiesRoundTrip) {
  TG_VULKAN_OR_SKIP(vk);
  std::vector<float> v(1001);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i) * 0.5f - 3.0f;
  const Tensor host = Tensor::from_vector(v, Shape{1001});
  const Tensor dev = host.to(vk->device());
  EXPECT_EQ(dev.device(), vk->device());
  EXPECT_EQ(dev.to(Device::CPU).to_vector(), v);
  const Tensor again = dev.clone();
  EXPECT_EQ(again.device(), vk->device());
  EXPECT_EQ(again.to(Device::CPU).to_vector(), v);
}

// A device that cannot exist is refused with the devices that do.
TEST(VulkanRuntime, AMissingIndexNamesTheDevices) {
  TG_VULKAN_OR_SKIP(vk);
  try {
    (void)backend(Device("vulkan:99"));
    FAIL() << "vulkan:99 was accepted";
  } catch (const StateError& e) {
    EXPECT_NE(std::string(e.what()).find("no device vulkan:99"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("vulkan:0"), std::string::npos) << e.what();
  }
}

// Without a loader (TENSORGRAD_VULKAN_LOADER names a missing library) or
// without a driver (VK_ICD_FILENAMES names a missing one), asking for the
// device throws StateError starting "no Vulkan device:" with the reason.
// These run as their own CTest entries with that environment (tests/CMakeLists.txt).
TEST(VulkanRuntimeAbsent, TheReasonIsGiven) {
  const char* expect = std::getenv("TG_EXPECT_NO_VULKAN");
  if (!expect) GTEST_SKIP() << "runs only as the CTest entries that hide the loader or the driver";
  try {
    (void)backend(Device("vulkan"));
    FAIL() << "a Vulkan device was found";
  } catch (const StateError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("no Vulkan device: ", 0), 0u) << what;
    EXPECT_NE(what.find(expect), std::string::npos) << what;
  }
  for (const DeviceInfo& d : devices()) EXPECT_NE(d.device.kind(), "vulkan");
}

// Every op of the op list has a Vulkan kernel (leaves and views need
// none), so every built-in layer runs on a Vulkan device.
TEST(VulkanRuntime, EveryOpHasAKernel) {
  TG_VULKAN_OR_SKIP(vk);
  std::vector<std::string> missing;
  for (size_t i = 0; i < size_t(OpKind::Count); ++i)
    if (!vk->has_kernel(OpKind(i))) missing.push_back(op_info(OpKind(i)).name);
  EXPECT_EQ(missing, std::vector<std::string>{});
}
