// The element-wise Vulkan kernels against the CPU's (tolerance: float32
// rounding of one or two operations, 1e-6 relative).
#include <gtest/gtest.h>

#include "vulkan_support.h"

using namespace tensorgrad;
using test_support::OpCase;

TEST(VulkanElementwise, Fill) {
  TG_VULKAN_OR_SKIP(vk);
  for (const Shape& s : test_support::elementwise_shapes(true)) {
    OpCase c;
    c.op = OpKind::Fill;
    c.attrs.shape = s;
    c.attrs.value = -2.5f;
    test_support::expect_same_as_cpu(c, vk, 0, 0);
  }
}

TEST(VulkanElementwise, ScaleAndRelu) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 1;
  for (const Shape& s : test_support::elementwise_shapes()) {
    Tensor x = test_support::random_tensor(s, seed++);
    x.data<float>()[0] = NAN;
    for (OpKind op : {OpKind::Scale, OpKind::Relu}) {
      OpCase c;
      c.op = op;
      c.attrs.factor = 0.3f;
      c.inputs = {x};
      test_support::expect_same_as_cpu(c, vk, 1e-6, 0);
    }
  }
}
