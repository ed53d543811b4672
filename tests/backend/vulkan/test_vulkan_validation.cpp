// Under TENSORGRAD_VULKAN_VALIDATION=1 the library enables Khronos'
// validation layer with synchronization validation and logs each message it
// sends as a warning starting "Vulkan validation:". This environment counts
// them and fails the run on any (the CTest entry VulkanValidation.Subset
// runs a fixed subset of the Vulkan tests so). It also fails when the layer
// was asked for but no device came up with it, so that the entry cannot
// pass by skipping every test.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "vulkan_support.h"

namespace {

std::atomic<int> g_messages{0};

bool validation_requested() {
  const char* v = std::getenv("TENSORGRAD_VULKAN_VALIDATION");
  return v && *v && std::strcmp(v, "0") != 0;
}

class ValidationWatch : public ::testing::Environment {
 public:
  void SetUp() override {
    if (!validation_requested()) return;
    tensorgrad::set_log_handler([](tensorgrad::LogLevel, const std::string& message) {
      if (message.rfind("Vulkan validation:", 0) == 0) ++g_messages;
      std::fprintf(stderr, "tensorgrad: %s\n", message.c_str());
    });
    std::string reason;
    if (!test_support::vulkan_backend_or_reason(reason))
      ADD_FAILURE() << "TENSORGRAD_VULKAN_VALIDATION is set but no Vulkan device came up: " << reason;
  }
  void TearDown() override {
    if (!validation_requested()) return;
    EXPECT_EQ(g_messages.load(), 0) << "the validation layer sent messages (above)";
    tensorgrad::set_log_handler({});
  }
};

[[maybe_unused]] ::testing::Environment* const kWatch = ::testing::AddGlobalTestEnvironment(new ValidationWatch);

}  // namespace
