// The Vulkan attention kernels against the CPU's: Attention forward (the
// output and its log-sum-exp column) and AttentionBackward ([dq | dk | dv]),
// with masks, both causal alignments, dropout and several CPU tiles. The two
// sum in different orders (the CPU by tiles through its GEMM, the shaders key
// by key), so they agree within 1e-4 relative plus 1e-5 absolute; hidden
// rows (0 and -inf) and dropout's kept weights agree exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "vulkan_support.h"

using namespace tensorgrad;

namespace {

struct Case {
  int64_t n, lq, lk, d, dv;
  bool causal = false;
  Shape mask;
  float rate = 0.0f;
};

Tensor counter_of(int64_t c) {
  Tensor t = Tensor::empty(Shape{1}, DType::Int64);
  t.data<int64_t>()[0] = c;
  return t;
}

}  // namespace

TEST(VulkanAttention, ForwardAndBackwardAsOnTheCpu) {
  TG_VULKAN_OR_SKIP(vk);
  const std::vector<Case> cases = {
      {3, 5, 7, 4, 3},
      {2, 70, 66, 8, 5},
      {2, 6, 6, 4, 4, true},
      {2, 3, 9, 4, 2, true},
      {3, 4, 6, 5, 3, false, Shape{3, 1, 6}},
      {3, 4, 6, 5, 3, true, Shape{3, 4, 6}},
      {2, 9, 11, 4, 4, false, Shape{}, 0.3f},
  };
  uint32_t seed = 900;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::to_string(c.lq) + "x" + std::to_string(c.lk) + " causal " + std::to_string(c.causal) + " mask " +
                 c.mask.str() + " rate " + std::to_string(c.rate));
    test_support::OpCase f;
    f.op = OpKind::Attention;
    f.attrs.factor = 0.6f;
    f.attrs.rate = c.rate;
    f.attrs.seed = 77;
    f.attrs.flags = (c.causal ? kCausal : 0u) | (c.mask.rank() ? kAttentionMask : 0u);
    f.inputs = {test_support::random_tensor({c.n, c.lq, c.d}, seed++),
                test_support::random_tensor({c.n, c.lk, c.d}, seed++),
                test_support::random_tensor({c.n, c.lk, c.dv}, seed++)};
    if (c.mask.rank()) {
      Tensor m = test_support::random_tensor(c.mask, seed++, 0.5f);
      for (int64_t i = 0; i < m.numel(); i += 5) m.data<float>()[i] = -std::numeric_limits<float>::infinity();
      f.inputs.push_back(m);
    }
    const Tensor counter = counter_of(4);
    if (c.rate > 0) f.inputs.push_back(counter);
    test_support::expect_same_as_cpu(f, vk, 1e-4, 1e-5);

    // The backward op on the CPU forward's output and a random gradient.
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
