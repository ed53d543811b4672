// The eager API on a Vulkan device: tensors placed and copied back, every
// functional op and its gradient against the same op on the CPU (the
// kernels are the model tests' kernels, so the tolerances are theirs: 2e-4
// relative plus 1e-5 absolute), and the errors of mixing devices.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "vulkan_support.h"

using namespace tensorgrad;
using test_support::close;

namespace {

constexpr double kRtol = 2e-4, kAtol = 1e-5;

const Device kVulkan("vulkan");

ag::TensorOptions on(Device device, bool requires_grad = false) {
  ag::TensorOptions o;
  o.device = device;
  o.requires_grad = requires_grad;
  return o;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  EXPECT_TRUE(close(std::vector<double>(got.begin(), got.end()), std::vector<double>(want.begin(), want.end()), kRtol,
                    kAtol))
      << what;
}

// One case: float inputs (shapes; each requires grad unless listed in
// `constant`), int32 ids made by `ids`, and a function of them whose
// result is reduced to a scalar loss by a weighted sum.
struct EagerCase {
  std::string name;
  std::vector<Shape> shapes;
  std::function<ag::Tensor(const std::vector<ag::Tensor>&, Device)> f;
};

struct CaseRun {
  std::vector<float> output;
  std::vector<std::vector<float>> grads;
};

CaseRun run_case(const EagerCase& c, Device device) {
  ag::Generator g(17);
  std::vector<ag::Tensor> xs;
  for (const Shape& s : c.shapes) {
    ag::Tensor host = ag::randn(s, {}, &g);
    xs.push_back(host.to(device).requires_grad_());
  }
  const ag::Tensor y = c.f(xs, device);
  EXPECT_EQ(y.device(), device) << c.name;
  // A weighted sum, so that every output element's gradient differs.
  const ag::Tensor w = ag::rand(y.shape(), {}, &g).to(device);
  ag::sum(ag::mul(y, w)).backward();
  CaseRun r;
  r.output = y.to_vector();
  for (const ag::Tensor& x : xs) r.grads.push_back(x.grad().defined() ? x.grad().to_vector() : std::vector<float>());
  return r;
}

ag::Tensor ids_on(std::vector<int32_t> v, const Shape& shape, Device device) {
  return ag::tensor(std::span<const int32_t>(v), shape).to(device);
}

std::vector<EagerCase> cases() {
  using T = const std::vector<ag::Tensor>&;
  return {
      {"add", {{3, 5}, {5}}, [](T x, Device) { return ag::add(x[0], x[1]); }},
      {"sub_mul_div", {{4, 3}, {4, 3}}, [](T x, Device) {
         return ag::div(ag::mul(ag::sub(x[0], x[1]), x[0]), ag::add(ag::exp(x[1]), ag::exp(x[0])));
       }},
      {"maximum_minimum", {{7}, {7}}, [](T x, Device) { return ag::add(ag::maximum(x[0], x[1]), ag::minimum(x[0], x[1])); }},
      {"matmul", {{5, 7}, {7, 3}}, [](T x, Device) { return ag::matmul(x[0], x[1]); }},
      {"linear", {{6, 4}, {3, 4}, {3}}, [](T x, Device) { return ag::linear(x[0], x[1], x[2]); }},
      {"transpose", {{2, 3, 4}}, [](T x, Device) { return ag::transpose(x[0], 0, 2); }},
      {"activations", {{5, 6}}, [](T x, Device) {
         return ag::add(ag::add(ag::relu(x[0]), ag::sigmoid(x[0])),
                        ag::add(ag::tanh(x[0]), ag::add(ag::gelu(x[0]), ag::silu(x[0]))));
       }},
      {"more_activations", {{5, 6}}, [](T x, Device) {
         return ag::add(ag::add(ag::elu(x[0]), ag::leaky_relu(x[0], 0.1f)),
                        ag::add(ag::softplus(x[0]), ag::add(ag::gelu(x[0], "tanh"), ag::erf(x[0]))));
       }},
      {"log_sqrt_pow", {{9}}, [](T x, Device) {
         const ag::Tensor p = ag::add(ag::mul(x[0], x[0]), ag::full({}, 0.5f));
         return ag::add(ag::add(ag::log(p), ag::sqrt(p)), ag::add(ag::rsqrt(p), ag::pow(p, 1.5f)));
       }},
      {"clamp", {{11}}, [](T x, Device) { return ag::clamp(x[0], -0.5f, 0.7f); }},
      {"softmax", {{4, 9}}, [](T x, Device) { return ag::add(ag::softmax(x[0]), ag::log_softmax(x[0])); }},
      {"reductions", {{3, 4, 5}}, [](T x, Device) {
         return ag::add(ag::add(ag::sum(x[0], 1), ag::mean(x[0], 1)), ag::amax(x[0], 1));
       }},
      {"full_reductions", {{6, 7}}, [](T x, Device) { return ag::add(ag::sum(x[0]), ag::mean(x[0])); }},
      {"shapes", {{2, 3, 4}}, [](T x, Device) {
         const ag::Tensor n = ag::narrow(ag::flatten(x[0]), 1, 2, 7);
         return ag::cat({n, ag::reshape(ag::broadcast_to(ag::reshape(ag::sum(x[0]), {1, 1}), {2, 1}), {2, 1})}, 1);
       }},
      {"index_select", {{5, 3}}, [](T x, Device d) { return ag::index_select(x[0], ids_on({4, 0, 4, 2}, {4}, d)); }},
      {"embedding", {{6, 4}}, [](T x, Device d) { return ag::embedding(ids_on({1, 5, 5, 0, 3, 1}, {2, 3}, d), x[0]); }},
      {"conv2d", {{2, 6, 5, 3}, {3, 3, 3, 4}, {4}}, [](T x, Device) { return ag::conv2d(x[0], x[1], x[2], 1, 1); }},
      {"conv2d_strided", {{2, 7, 7, 2}, {3, 3, 2, 3}}, [](T x, Device) {
         return ag::conv2d(x[0], x[1], ag::Tensor(), 2, 0, 1);
       }},
      {"pooling", {{2, 6, 6, 3}}, [](T x, Device) {
         return ag::add(ag::max_pool2d(x[0], 2), ag::avg_pool2d(x[0], 2));
       }},
      {"batch_norm", {{8, 3}, {3}, {3}}, [](T x, Device) { return ag::batch_norm(x[0], x[1], x[2]); }},
      {"losses", {{4, 3}, {4, 3}}, [](T x, Device) {
         return ag::add(ag::add(ag::mse_loss(x[0], x[1]), ag::l1_loss(x[0], x[1])),
                        ag::add(ag::huber_loss(x[0], x[1], 0.5f),
                                ag::binary_cross_entropy_with_logits(x[0], ag::sigmoid(x[1]))));
       }},
      {"cross_entropy", {{4, 5}}, [](T x, Device d) {
         return ag::cross_entropy(x[0], ids_on({0, 4, 2, 2}, {4}, d));
       }},
  };
}

}  // namespace

TEST(VulkanEager, FactoriesPlaceTensorsAndCopiesComeBackExactly) {
  TG_VULKAN_OR_SKIP(vk);
  const ag::Tensor z = ag::zeros({2, 3}, on(kVulkan));
  EXPECT_EQ(z.device(), kVulkan);
  EXPECT_EQ(z.to_vector(), std::vector<float>(6, 0.0f));
  ag::Generator a(5), b(5);
  const ag::Tensor on_cpu = ag::randn({4, 5}, {}, &a);
  const ag::Tensor on_gpu = ag::randn({4, 5}, on(kVulkan, true), &b);
  EXPECT_TRUE(on_gpu.requires_grad());
  EXPECT_EQ(on_gpu.to_vector(), on_cpu.to_vector());
  const ag::Tensor back = on_gpu.cpu();
  EXPECT_EQ(back.device(), Device::CPU);
  EXPECT_EQ(back.to_vector(), on_cpu.to_vector());
  EXPECT_EQ(ag::full({}, 2.5f, on(kVulkan)).item(), 2.5f);
  // to() of a tensor already there is the tensor itself (shared memory).
  EXPECT_EQ(on_gpu.to(kVulkan).data().raw(), on_gpu.data().raw());
}

TEST(VulkanEager, EveryFunctionAndItsGradientAsOnTheCpu) {
  TG_VULKAN_OR_SKIP(vk);
  for (const EagerCase& c : cases()) {
    SCOPED_TRACE(c.name);
    const CaseRun cpu = run_case(c, Device::CPU);
    const CaseRun gpu = run_case(c, kVulkan);
    expect_close(gpu.output, cpu.output, c.name + " output");
    ASSERT_EQ(gpu.grads.size(), cpu.grads.size());
    for (size_t i = 0; i < cpu.grads.size(); ++i) {
      ASSERT_FALSE(cpu.grads[i].empty()) << c.name << ": input " << i << " got no gradient on the CPU";
      expect_close(gpu.grads[i], cpu.grads[i], c.name + " grad " + std::to_string(i));
    }
  }
}

TEST(VulkanEager, InPlaceOpsAndCpuScalarsRunOnTheDevice) {
  TG_VULKAN_OR_SKIP(vk);
  ag::Tensor x = ag::tensor({1.0f, -2.0f, 3.0f}, {3}, on(kVulkan));
  x.add_(1.5f).mul_(2.0f);
  x.clamp_(-1.0f, 6.0f);
  EXPECT_EQ(x.to_vector(), (std::vector<float>{5.0f, -1.0f, 6.0f}));
  // A zero-dimension CPU tensor joins a device op, as in PyTorch.
  const ag::Tensor y = ag::add(x, ag::full({}, 1.0f));
  EXPECT_EQ(y.device(), kVulkan);
  EXPECT_EQ(y.to_vector(), (std::vector<float>{6.0f, 0.0f, 7.0f}));
  x.copy_(ag::tensor({7.0f, 8.0f, 9.0f}, {3}));  // a copy from the host is a move, not a mix
  EXPECT_EQ(x.to_vector(), (std::vector<float>{7.0f, 8.0f, 9.0f}));
  x.zero_();
  EXPECT_EQ(x.to_vector(), std::vector<float>(3, 0.0f));
}

TEST(VulkanEager, InputsOnTwoDevicesAreAValueErrorNamingBoth) {
  TG_VULKAN_OR_SKIP(vk);
  const ag::Tensor a = ag::ones({2, 2}, on(kVulkan));
  const ag::Tensor b = ag::ones({2, 2});
  try {
    ag::add(a, b);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("expected all tensors to be on the same device"), std::string::npos) << m;
    EXPECT_NE(m.find("vulkan:0"), std::string::npos) << m;
    EXPECT_NE(m.find("cpu"), std::string::npos) << m;
  }
  ag::Tensor c = ag::ones({2, 2}, on(kVulkan));
  EXPECT_THROW(c.mul_(b), ValueError);
  EXPECT_EQ(c.to_vector(), std::vector<float>(4, 1.0f));  // nothing was written
}

TEST(VulkanEager, MovingALeafMakesANewLeafAndMovingHistoryIsRefused) {
  TG_VULKAN_OR_SKIP(vk);
  const ag::Tensor w = ag::ones({3}, on(Device::CPU, true));
  const ag::Tensor moved = w.to(kVulkan);
  EXPECT_TRUE(moved.requires_grad());
  EXPECT_TRUE(moved.is_leaf());
  ag::sum(ag::mul(moved, moved)).backward();
  EXPECT_EQ(moved.grad().device(), kVulkan);
  EXPECT_EQ(moved.grad().to_vector(), std::vector<float>(3, 2.0f));
  EXPECT_FALSE(w.grad().defined());
  const ag::Tensor h = ag::mul(w, w);
  try {
    h.to(kVulkan);
    FAIL() << "expected StateError";
  } catch (const StateError& e) {
    EXPECT_NE(std::string(e.what()).find("detach()"), std::string::npos) << e.what();
  }
  EXPECT_EQ(h.detach().to(kVulkan).to_vector(), std::vector<float>(3, 1.0f));
}

TEST(VulkanEager, AnIdOutsideTheTableIsAnIndexErrorAsOnTheCpu) {
  TG_VULKAN_OR_SKIP(vk);
  const ag::Tensor table = ag::randn({4, 2}, on(kVulkan));
  const ag::Tensor ids = ids_on({1, 4}, {2}, kVulkan);
  try {
    ag::embedding(ids, table);
    FAIL() << "expected IndexError";
  } catch (const IndexError& e) {
    EXPECT_NE(std::string(e.what()).find("4 at position 1"), std::string::npos) << e.what();
  }
}

TEST(VulkanEager, OpsAreQueuedAndSubmittedTogetherAtASyncPoint) {
  TG_VULKAN_OR_SKIP(vk);
  ag::Tensor x = ag::ones({64}, on(kVulkan));
  synchronize(kVulkan);
  const DeviceCounters before = device_counters(kVulkan);
  for (int i = 0; i < 20; ++i) x = ag::add(x, x);
  const DeviceCounters queued = device_counters(kVulkan);
  EXPECT_EQ(queued.submits, before.submits);
  EXPECT_EQ(queued.dispatches - before.dispatches, 20u);
  EXPECT_EQ(x.to_vector(), std::vector<float>(64, 1048576.0f));  // 2^20: the read waits for the queue
  EXPECT_EQ(device_counters(kVulkan).submits, before.submits + 1);
}

TEST(VulkanEager, AHostCopyOrAFreeNeverOvertakesQueuedOps) {
  TG_VULKAN_OR_SKIP(vk);
  ag::Tensor x = ag::tensor({1.0f, 2.0f, 3.0f}, {3}, on(kVulkan));
  const ag::Tensor doubled = ag::mul(x, ag::full({}, 2.0f));
  x.copy_(ag::tensor({10.0f, 20.0f, 30.0f}, {3}));  // a host write after a queued read of x
  ag::Tensor tripled;
  {
    const ag::Tensor t = ag::tensor({4.0f, 5.0f}, {2}, on(kVulkan));
    tripled = ag::mul(t, ag::full({}, 3.0f));
  }  // t's block goes back to the cache while the op reading it is queued
  ag::empty_cache();  // and is freed
  EXPECT_EQ(doubled.to_vector(), (std::vector<float>{2.0f, 4.0f, 6.0f}));
  EXPECT_EQ(x.to_vector(), (std::vector<float>{10.0f, 20.0f, 30.0f}));
  EXPECT_EQ(tripled.to_vector(), (std::vector<float>{12.0f, 15.0f}));
}

TEST(VulkanEager, DeviceMemoryComesFromACacheOfItsOwn) {
  TG_VULKAN_OR_SKIP(vk);
  const ag::Tensor x = ag::randn({32, 16}, on(kVulkan));
  const ag::Tensor w = ag::randn({16, 8}, on(kVulkan));
  auto step = [&] { return ag::sum(ag::relu(ag::matmul(x, w))).item(); };
  const float first = step();
  ag::reset_memory_stats();
  const ag::MemoryStats cpu_before = ag::memory_stats();
  EXPECT_EQ(step(), first);
  const ag::MemoryStats s = ag::memory_stats(kVulkan);
  EXPECT_EQ(s.misses, 0u);
  EXPECT_GE(s.hits, 3u);  // matmul, relu, sum
  EXPECT_EQ(ag::memory_stats().hits, cpu_before.hits);  // nothing of it on the host's cache
  ag::empty_cache();
  EXPECT_EQ(ag::memory_stats(kVulkan).cached_blocks, 0u);
}

TEST(VulkanEager, GradcheckPassesOnCompositeFunctionsOnTheDevice) {
  TG_VULKAN_OR_SKIP(vk);
  using Inputs = std::span<const ag::Tensor>;
  ag::Generator g(3);
  const ag::Tensor x = ag::randn({4, 5}, on(kVulkan, true), &g);
  const ag::Tensor w = ag::randn({5, 3}, on(kVulkan, true), &g);
  const ag::Tensor b = ag::randn({3}, on(kVulkan, true), &g);
  const std::vector<float> x_before = x.to_vector();
  const std::vector<std::function<ag::Tensor(Inputs)>> fns = {
      [](Inputs in) { return ag::tanh(ag::linear(in[0], ag::t(in[1]), in[2])); },
      [](Inputs in) { return ag::log_softmax(ag::mul(ag::matmul(in[0], in[1]), ag::sigmoid(in[2]))); },
      [](Inputs in) { return ag::mean(ag::softplus(ag::add(ag::matmul(in[0], in[1]), in[2])), 1); },
  };
  for (size_t i = 0; i < fns.size(); ++i) {
    const ag::GradcheckResult r = ag::gradcheck(fns[i], {x, w, b});
    EXPECT_TRUE(r.ok) << "function " << i << ": " << r.message;
    EXPECT_GE(r.index, 0) << "function " << i;
  }
  EXPECT_EQ(x.to_vector(), x_before);  // perturbed on the host and put back on the device
  EXPECT_FALSE(x.grad().defined());
}
