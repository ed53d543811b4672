// The Vulkan kernels of the LLaMA family's fused ops against the CPU's:
// RmsNorm and RmsNormBackward (with and without the weight), Rope (both
// pairings, dims < D, scaling, the inverse rotation) and grouped-query
// Attention and AttentionBackward (fewer key-value rows, causal, masked).
// Tolerances: RmsNorm sums a row in order, the CPU in vector lanes, 1e-5
// relative plus 1e-6 absolute; Rope's angle is float32 on Vulkan and double
// on the CPU, so positions up to 40 differ by about 40 x 1e-7 in the angle
// (1e-5 absolute); attention as tests/backend/vulkan/test_vulkan_attention.cpp.
#include <gtest/gtest.h>

#include <limits>

#include "vulkan_support.h"

using namespace tensorgrad;

TEST(VulkanLlamaOps, RmsNormAsOnTheCpu) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 1200;
  for (const Shape& s : {Shape{1, 1}, Shape{3, 5}, Shape{2, 4, 37}, Shape{300, 64}})
    for (bool weighted : {false, true}) {
      SCOPED_TRACE(s.str() + (weighted ? " weighted" : ""));
      test_support::OpCase f;
      f.op = OpKind::RmsNorm;
      f.attrs.eps = 1e-5f;
      f.inputs = {test_support::random_tensor(s, seed++)};
      if (weighted) f.inputs.push_back(test_support::random_tensor({s[-1]}, seed++));
      test_support::expect_same_as_cpu(f, vk, 1e-5, 1e-6);
      test_support::OpCase b = f;
      b.op = OpKind::RmsNormBackward;
      b.inputs = {f.inputs[0], test_support::random_tensor(s, seed++)};
      if (weighted) b.inputs.push_back(f.inputs[1]);
      test_support::expect_same_as_cpu(b, vk, 1e-5, 1e-5);
    }
}

TEST(VulkanLlamaOps, RopeAsOnTheCpu) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 1300;
  const std::vector<int32_t> pos{7, 0, 3, 40, 12};
  for (RopePairing pairing : {RopePairing::Halves, RopePairing::Adjacent})
    for (int64_t dims : {0, 6})
      for (uint32_t flags : {0u, kRopeInverse}) {
        SCOPED_TRACE(std::to_string(int(pairing)) + " dims " + std::to_string(dims) + " flags " + std::to_string(flags));
        test_support::OpCase f;
        f.op = OpKind::Rope;
        f.attrs.rope.pairing = pairing;
        f.attrs.rope.dims = dims;
        f.attrs.rope.scaling_factor = 1.5f;
        f.attrs.rope.theta = 500.0f;
        f.attrs.flags = flags;
        f.inputs = {test_support::random_tensor({2, 5, 3, 10}, seed++),
                    Tensor::from_vector(std::span<const int32_t>(pos), Shape{5})};
        test_support::expect_same_as_cpu(f, vk, 1e-5, 1e-5);
      }
}

TEST(VulkanLlamaOps, GroupedQueryAttentionAsOnTheCpu) {
  TG_VULKAN_OR_SKIP(vk);
  struct Case {
    int64_t n, nkv, lq, lk, d, dv;
    bool causal = false;
    Shape mask;
  };
  const std::vector<Case> cases = {
      {6, 2, 5, 7, 4, 3},
      {4, 1, 6, 6, 4, 4, true},
      {6, 3, 3, 9, 4, 2, true, Shape{6, 3, 9}},
      {4, 2, 4, 6, 5, 3, false, Shape{1, 1, 6}},
  };
  uint32_t seed = 1400;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::to_string(c.n) + " over " + std::to_string(c.nkv) + " causal " + std::to_string(c.causal) +
                 " mask " + c.mask.str());
    test_support::OpCase f;
    f.op = OpKind::Attention;
    f.attrs.factor = 0.6f;
    f.attrs.flags = (c.causal ? kCausal : 0u) | (c.mask.rank() ? kAttentionMask : 0u);
    f.inputs = {test_support::random_tensor({c.n, c.lq, c.d}, seed++),
                test_support::random_tensor({c.nkv, c.lk, c.d}, seed++),
                test_support::random_tensor({c.nkv, c.lk, c.dv}, seed++)};
    if (c.mask.rank()) {
      Tensor m = test_support::random_tensor(c.mask, seed++, 0.5f);
      for (int64_t i = 0; i < m.numel(); i += 5) m.data<float>()[i] = -std::numeric_limits<float>::infinity();
      f.inputs.push_back(m);
    }
    test_support::expect_same_as_cpu(f, vk, 1e-4, 1e-5);
    const test_support::OpResult y = test_support::run_op(f, cpu_backend());
    Tensor yt = Tensor::empty({c.n, c.lq, c.dv + 1});
    for (int64_t i = 0; i < yt.numel(); ++i) yt.data<float>()[i] = float(y.output[size_t(i)]);
    test_support::OpCase b = f;
    b.op = OpKind::AttentionBackward;
    b.inputs = {f.inputs[0], f.inputs[1], f.inputs[2], yt, test_support::random_tensor(yt.shape(), seed++)};
    for (size_t i = 3; i < f.inputs.size(); ++i) b.inputs.push_back(f.inputs[i]);
    test_support::expect_same_as_cpu(b, vk, 1e-4, 1e-5);
  }
}
