// The eager API on a Vulkan device: tensors placed and copied back, every
// functional op and its gradient against the same op on the CPU (the
// kernels are the model tests' kernels, so the tolerances are theirs: 2e-4
// relative plus 1e-5 absolute), and the errors of mixing devices.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <thread>
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
  int backward_passes = 1;  // more: the gradients accumulate into .grad
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
  ag::Tensor y;
  for (int pass = 0; pass < c.backward_passes; ++pass) {
    y = c.f(xs, device);
    EXPECT_EQ(y.device(), device) << c.name;
    // A weighted sum, so that every output element's gradient differs.
    const ag::Tensor w = ag::rand(y.shape(), {}, &g).to(device);
    ag::sum(ag::mul(y, w)).backward();
  }
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
      {"masked_fill_where", {{4, 3}, {3}}, [](T x, Device) {
         const ag::Tensor mask = ag::ge(x[0], x[1]);
         return ag::add(ag::masked_fill(x[0], mask, 2.5f), ag::where(mask, x[1], x[0]));
       }},
      {"attention", {{2, 2, 5, 4}, {2, 2, 6, 4}, {2, 2, 6, 3}},
       [](T x, Device) { return ag::scaled_dot_product_attention(x[0], x[1], x[2], {}, 0.0f, true); }},
      {"grouped_query_attention", {{2, 4, 5, 4}, {2, 2, 6, 4}, {2, 2, 6, 3}},
       [](T x, Device) {
         return ag::scaled_dot_product_attention(x[0], x[1], x[2], {}, 0.0f, true, std::nullopt, nullptr, true);
       }},
      {"rms_norm", {{4, 6}, {6}}, [](T x, Device) { return ag::rms_norm(x[0], x[1], 1e-5f); }},
      {"rope", {{2, 3, 2, 6}}, [](T x, Device d) {
         return ag::rotary_embedding(x[0], ids_on({5, 0, 9}, {3}, d), {4, 100.0f, 2.0f, RopePairing::Adjacent});
       }},
      {"matmul", {{5, 7}, {7, 3}}, [](T x, Device) { return ag::matmul(x[0], x[1]); }},
      {"linear", {{6, 4}, {3, 4}, {3}}, [](T x, Device) { return ag::linear(x[0], x[1], x[2]); }},
      {"accumulated_gradients", {{6, 4}, {3, 4}}, [](T x, Device) { return ag::linear(x[0], x[1]); }, 2},
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
      {"dropout", {{6, 8}}, [](T x, Device) {
         ag::Generator g(9);  // the counter-based stream: the same mask on every device
         return ag::dropout(x[0], 0.3f, true, &g);
       }},
      // The recurrent and attention modules, made with one seed and moved
      // to the device, so that both runs have the same weights.
      {"lstm", {{2, 4, 3}}, [](T x, Device d) {
         ag::manual_seed(31);
         ag::nn::LSTM lstm(3, 5);
         lstm.to(d);
         return lstm.forward(x[0]);
       }},
      {"gru", {{2, 4, 3}}, [](T x, Device d) {
         ag::manual_seed(32);
         ag::nn::GRU gru(3, 5);
         gru.to(d);
         return gru.forward(x[0]);
       }},
      {"multihead_attention", {{2, 5, 8}}, [](T x, Device d) {
         ag::manual_seed(33);
         ag::nn::MultiheadAttention mha(8, 2);
         mha.to(d);
         const ag::nn::MultiheadAttentionOutput o = mha.forward(x[0], x[0], x[0]);
         return ag::add(o.attn_output, ag::sum(o.attn_weights));
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
  std::ostringstream printed;
  printed << ag::full({2}, 1.0f, on(kVulkan));  // copied back to print
  EXPECT_EQ(printed.str(), "tensor([1.0000, 1.0000], device='vulkan:0')");
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

TEST(VulkanEager, AnIdOutsideTheTableIsAnIndexErrorAtTheNextSyncPoint) {
  TG_VULKAN_OR_SKIP(vk);
  ag::Tensor table = ag::randn({4, 2}, on(kVulkan, true));
  const std::vector<float> before = table.to_vector();
  ag::optim::SGD opt({table}, 0.5);
  {
    // Checked by the kernel, not read back: the op is queued and the error
    // comes at backward()'s end, naming the id and its position.
    const ag::Tensor loss = ag::sum(ag::embedding(ids_on({1, 4}, {2}, kVulkan), table));
    try {
      loss.backward();
      FAIL() << "expected IndexError";
    } catch (const IndexError& e) {
      EXPECT_NE(std::string(e.what()).find("id 4 at position 1"), std::string::npos) << e.what();
    }
  }
  // An update queued behind a bad id changes nothing; the error comes at the read back.
  table.set_grad(ag::ones({4, 2}, on(kVulkan)));
  (void)ag::embedding(ids_on({7}, {1}, kVulkan), table);
  opt.step();
  EXPECT_THROW(table.to_vector(), IndexError);
  EXPECT_EQ(table.to_vector(), before);
  // Once reported, the device runs as before.
  EXPECT_EQ(ag::embedding(ids_on({2}, {1}, kVulkan), table).to_vector(),
            (std::vector<float>{before[4], before[5]}));
}

// One text on every device: the CPU's check before the op and the Vulkan
// kernel's report at the sync point say the same.
TEST(VulkanEager, AnEmbeddingIdOutsideTheTableGivesTheCpusTextOnTheDevice) {
  TG_VULKAN_OR_SKIP(vk);
  std::vector<std::string> messages;
  for (const Device device : {Device::CPU, kVulkan}) {
    SCOPED_TRACE(device.str());
    const ag::Tensor table = ag::randn({20, 3}, on(device));
    try {
      (void)ag::embedding(ids_on({0, 4, 19, 25, 1}, {5}, device), table).to_vector();
      FAIL() << "expected IndexError";
    } catch (const IndexError& e) {
      messages.push_back(e.what());
    }
    try {
      (void)ag::index_select(table, ids_on({0, 4, 19, 25, 1}, {5}, device)).to_vector();
      FAIL() << "expected IndexError";
    } catch (const IndexError& e) {
      messages.push_back(e.what());
    }
  }
  ASSERT_EQ(messages.size(), 4u);
  EXPECT_NE(messages[0].find("id 25 at position 3 is outside the table of 20 rows [0, 20)"), std::string::npos)
      << messages[0];
  EXPECT_EQ(messages[1], messages[0]);
  EXPECT_EQ(messages[2], messages[0]);
  EXPECT_EQ(messages[3], messages[0]);
}

TEST(VulkanEager, AClassIdOutsideTheLogitsIsAnIndexErrorAsOnTheCpu) {
  TG_VULKAN_OR_SKIP(vk);
  for (const Device device : {Device::CPU, kVulkan}) {
    SCOPED_TRACE(device.str());
    ag::Tensor logits = ag::randn({3, 4}, on(device, true));
    const std::vector<float> before = logits.to_vector();
    ag::optim::SGD opt({logits}, 0.5);
    try {
      // On the device the kernel checks the ids: nothing is read back
      // before the op, and the error comes at backward()'s end.
      ag::cross_entropy(logits, ids_on({0, 3, -2}, {3}, device)).backward();
      FAIL() << "expected IndexError";
    } catch (const IndexError& e) {
      EXPECT_NE(std::string(e.what()).find("cross_entropy: class id -2 at position 2 is outside [0, 4)"),
                std::string::npos)
          << e.what();
    }
    opt.step();  // no gradient was set: nothing moves
    EXPECT_EQ(logits.to_vector(), before);
    EXPECT_FLOAT_EQ(ag::cross_entropy(logits, ids_on({0, 3, 1}, {3}, device)).item(),
                    ag::cross_entropy(logits.cpu(), ids_on({0, 3, 1}, {3}, Device::CPU)).item());
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
  // The queue's one submit, and where the host cannot map device memory
  // (discrete GPUs, TENSORGRAD_VULKAN_STAGING=1) one more for the copy back.
  const uint64_t read = device_counters(kVulkan).submits - before.submits;
  EXPECT_GE(read, 1u);
  EXPECT_LE(read, 2u);
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

namespace {

// A module of every kind the eager MLPs use: batch norm (running statistics
// and its counter updated on the device), dropout (the counter-based
// stream, the same masks on both devices), and linear layers. No bias
// before the batch norm: its gradient is zero up to rounding, which Adam and
// RMSprop turn into full-size steps of either sign on either device.
std::shared_ptr<ag::nn::Sequential> small_net() {
  ag::manual_seed(21);
  return std::make_shared<ag::nn::Sequential>(std::initializer_list<std::shared_ptr<ag::nn::Module>>{
      std::make_shared<ag::nn::Linear>(6, 16, false), std::make_shared<ag::nn::BatchNorm1d>(16),
      std::make_shared<ag::nn::ReLU>(), std::make_shared<ag::nn::Dropout>(0.25f),
      std::make_shared<ag::nn::Linear>(16, 3)});
}

struct Trained {
  std::vector<float> losses;
  std::vector<std::pair<std::string, std::vector<float>>> state, optimizer_state;
};

// Five steps of `make_optimizer` with gradient clipping on `device`.
template <class MakeOptimizer>
Trained train_five_steps(Device device, MakeOptimizer make_optimizer) {
  auto net = small_net();
  net->to(device);
  auto opt = make_optimizer(net->parameters());
  ag::Generator g(4);
  const ag::Tensor x = ag::randn({12, 6}, {}, &g).to(device);
  const ag::Tensor y = ag::randn({12, 3}, {}, &g).to(device);
  Trained t;
  for (int step = 0; step < 5; ++step) {
    opt->zero_grad();
    const ag::Tensor loss = ag::mse_loss((*net)(x), y);
    loss.backward();
    ag::optim::clip_grad_norm_(net->parameters(), 0.5);
    opt->step();
    t.losses.push_back(loss.item());
  }
  for (const auto& [name, v] : net->state_dict()) {
    EXPECT_EQ(v.device(), device) << name;
    t.state.emplace_back(name, v.to_vector());
  }
  for (const auto& [name, v] : opt->state_dict()) {
    if (name.rfind("state.", 0) == 0) EXPECT_EQ(v.device(), device) << name;
    t.optimizer_state.emplace_back(name, v.to_vector());
  }
  return t;
}

void expect_same_training(const Trained& gpu, const Trained& cpu) {
  expect_close(gpu.losses, cpu.losses, "losses");
  ASSERT_EQ(gpu.state.size(), cpu.state.size());
  for (size_t i = 0; i < cpu.state.size(); ++i) {
    EXPECT_EQ(gpu.state[i].first, cpu.state[i].first);
    expect_close(gpu.state[i].second, cpu.state[i].second, cpu.state[i].first);
  }
  ASSERT_EQ(gpu.optimizer_state.size(), cpu.optimizer_state.size());
  for (size_t i = 0; i < cpu.optimizer_state.size(); ++i) {
    EXPECT_EQ(gpu.optimizer_state[i].first, cpu.optimizer_state[i].first);
    expect_close(gpu.optimizer_state[i].second, cpu.optimizer_state[i].second, cpu.optimizer_state[i].first);
  }
}

}  // namespace

TEST(VulkanEager, AModuleTrainsAsOnTheCpuWithEveryOptimizer) {
  TG_VULKAN_OR_SKIP(vk);
  {
    SCOPED_TRACE("adamw");
    auto adamw = [](std::vector<ag::Tensor> p) { return std::make_unique<ag::optim::AdamW>(p, 1e-2); };
    expect_same_training(train_five_steps(kVulkan, adamw), train_five_steps(Device::CPU, adamw));
  }
  {
    SCOPED_TRACE("sgd");
    auto sgd = [](std::vector<ag::Tensor> p) {
      return std::make_unique<ag::optim::SGD>(p, 5e-2, 0.9, 0.0, 1e-4, true);
    };
    expect_same_training(train_five_steps(kVulkan, sgd), train_five_steps(Device::CPU, sgd));
  }
  {
    SCOPED_TRACE("rmsprop");
    auto rms = [](std::vector<ag::Tensor> p) { return std::make_unique<ag::optim::RMSprop>(p, 1e-2); };
    expect_same_training(train_five_steps(kVulkan, rms), train_five_steps(Device::CPU, rms));
  }
}

TEST(VulkanEager, StateDictsMoveBetweenDevicesExactly) {
  TG_VULKAN_OR_SKIP(vk);
  auto on_gpu = small_net();
  on_gpu->to(kVulkan);
  {
    ag::NoGradGuard no_grad;
    for (ag::Tensor& p : on_gpu->parameters()) p.add_(0.125f);  // differs from a fresh net
  }
  auto on_cpu = small_net();
  on_cpu->load_state_dict(on_gpu->state_dict());
  for (const auto& [name, v] : on_cpu->state_dict()) {
    EXPECT_EQ(v.device(), Device::CPU) << name;
    EXPECT_EQ(v.to_vector(), on_gpu->state_dict().find(name)->to_vector()) << name;
  }
  // Saved from the device, loaded onto it (the `device=` of the R package).
  const std::string path = ::testing::TempDir() + "/vulkan_eager_module.gguf";
  ag::save(*on_gpu, path);
  const std::shared_ptr<ag::nn::Module> back = ag::load(path, kVulkan);
  for (const auto& [name, v] : back->state_dict()) {
    EXPECT_EQ(v.device(), kVulkan) << name;
    EXPECT_EQ(v.to_vector(), on_cpu->state_dict().find(name)->to_vector()) << name;
  }
  for (const auto& [name, v] : ag::load_state_dict(path, kVulkan)) EXPECT_EQ(v.device(), kVulkan) << name;
  std::remove(path.c_str());
}

// How an eager training step reaches the device: the forward and backward
// ops are queued and submitted once at backward()'s end; the optimizer's
// updates are queued and go with the next step's submit (or the loss read
// back). Reported as test properties; the bound fails if ops are submitted
// one by one again.
TEST(VulkanEager, ATrainingStepIsAFewSubmits) {
  TG_VULKAN_OR_SKIP(vk);
  auto net = small_net();
  net->to(kVulkan);
  ag::optim::AdamW opt(net->parameters(), 1e-3);
  ag::Generator g(8);
  ag::DataLoader loader(ag::randn({64, 6}, {}, &g), ag::randn({64, 3}, {}, &g),
                        {.batch_size = 16, .device = kVulkan});
  auto epoch = [&] {
    for (ag::Batch b : loader) {
      EXPECT_EQ(b.x.device(), kVulkan);
      opt.zero_grad();
      const ag::Tensor loss = ag::mse_loss((*net)(b.x), b.y);
      loss.backward();
      opt.step();
    }
  };
  epoch();  // warm-up: pipelines, cached blocks
  synchronize(kVulkan);
  const DeviceCounters before = device_counters(kVulkan);
  epoch();
  synchronize(kVulkan);
  const DeviceCounters after = device_counters(kVulkan);
  const double steps = double(loader.size());
  const double submits = double(after.submits - before.submits) / steps;
  const double dispatches = double(after.dispatches - before.dispatches) / steps;
  const double barriers = double(after.barriers - before.barriers) / steps;
  RecordProperty("submits_per_step", std::to_string(submits));
  RecordProperty("dispatches_per_step", std::to_string(dispatches));
  RecordProperty("barriers_per_step", std::to_string(barriers));
  std::printf("eager step on %s: %.2f submits, %.1f dispatches, %.1f barriers per step\n", kVulkan.str().c_str(),
              submits, dispatches, barriers);
  EXPECT_LE(submits, 2.0);
  EXPECT_GE(dispatches, 20.0);  // the step's ops all ran on the device
}

TEST(VulkanEager, BadPlacementsAreTypedErrorsThatSayWhatToDo) {
  TG_VULKAN_OR_SKIP(vk);
  const Device missing("vulkan", 64);
  EXPECT_THROW(ag::zeros({2}, on(missing)), StateError);
  auto net = small_net();
  const std::vector<float> before = net->parameters()[0].to_vector();
  EXPECT_THROW(net->to(missing), StateError);
  EXPECT_EQ(net->parameters()[0].device(), Device::CPU);  // nothing moved
  EXPECT_EQ(net->parameters()[0].to_vector(), before);
  const ag::Tensor on_gpu = ag::ones({4, 2}, on(kVulkan));
  try {
    ag::DataLoader loader(on_gpu, {.batch_size = 2});
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("DataLoaderOptions::device"), std::string::npos) << e.what();
  }
  ag::Tensor w = ag::ones({2}, on(kVulkan, true));
  EXPECT_THROW(w.set_grad(ag::ones({2})), ValueError);
  EXPECT_THROW(ag::mul(w, w).backward(ag::ones({2})), ValueError);  // the gradient must be on the tensor's device
  EXPECT_THROW(ag::load(::testing::TempDir() + "/none.gguf", missing), StateError);  // before the file is read
  // A state update whose state is a CPU scalar and whose value is on the
  // device: the scalar may join the op, but cannot be written there.
  ag::EagerBuilder b;
  const Value state = b.input(ag::zeros({}));
  const Value value = b.input(ag::ones({}, on(kVulkan)));
  try {
    b.apply(OpKind::MovingAverage, {state, value}, OpAttrs{});
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("in place"), std::string::npos) << e.what();
  }
  EXPECT_EQ(b.tensor(state).item(), 0.0f);
}

// Moving a module after its optimizer made state on the CPU: the next step
// is refused (the state is on another device), and nothing is updated. As
// in PyTorch, move the module first, then make the optimizer.
TEST(VulkanEager, AStepWithOptimizerStateLeftOnAnotherDeviceIsRefused) {
  TG_VULKAN_OR_SKIP(vk);
  auto net = small_net();
  ag::optim::AdamW opt(net->parameters(), 1e-2);
  const ag::Tensor x = ag::randn({4, 6}), y = ag::randn({4, 3});
  ag::mse_loss((*net)(x), y).backward();
  opt.step();  // Adam's moments now exist, on the CPU
  net->to(kVulkan);
  opt.zero_grad();
  ag::mse_loss((*net)(x.to(kVulkan)), y.to(kVulkan)).backward();
  std::vector<std::vector<float>> before;
  for (const ag::Tensor& p : net->parameters()) before.push_back(p.to_vector());
  try {
    opt.step();
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("same device"), std::string::npos) << e.what();
  }
  const std::vector<ag::Tensor> after = net->parameters();
  for (size_t i = 0; i < after.size(); ++i) EXPECT_EQ(after[i].to_vector(), before[i]) << "parameter " << i;
}

// The op list decides what the eager tests must reach: every op that
// computes is run on the device by the cases above (functions and their
// gradients), by an optimizer step of each kind with both clippings, or is
// named here with the reason the eager API never records it. A new op in
// the list fails this test until a case reaches it or it is named.
TEST(VulkanEager, TheCasesReachEveryOpOfTheOpList) {
  TG_VULKAN_OR_SKIP(vk);
  const std::map<OpKind, std::string> not_eager = {
      {OpKind::MeanLastAxis, "the model API's lowering of a mean over the last axis; ag::mean runs mean_axis"},
      {OpKind::ToIndex, "the model API's float class labels; ag::cross_entropy takes int32 ids"},
      {OpKind::Accuracy, "a metric of Model::compile; the eager API has no metric ops"},
      {OpKind::BinaryAccuracy, "a metric of Model::compile; the eager API has no metric ops"},
      {OpKind::TopKAccuracy, "a metric of Model::compile; the eager API has no metric ops"},
      {OpKind::AdagradUpdate, "the model API's Adagrad; ag::optim has SGD, Adam, AdamW and RMSprop"},
      {OpKind::MovingAverage, "the model API's BatchNormalization state; ag::nn::BatchNorm1d/2d update "
                              "their running statistics with mul and add"},
      {OpKind::PolyakUpdate, "the Trainer's target networks (soft updates)"},
      {OpKind::Assign, "the model API's state writes (the Trainer's hard target update, recurrent state)"},
  };
  synchronize(kVulkan);
  const DeviceCounters before = device_counters(kVulkan);
  for (const EagerCase& c : cases()) run_case(c, kVulkan);
  auto adamw = [](std::vector<ag::Tensor> p) { return std::make_unique<ag::optim::AdamW>(p, 1e-2); };
  auto sgd = [](std::vector<ag::Tensor> p) { return std::make_unique<ag::optim::SGD>(p, 5e-2, 0.9); };
  auto rms = [](std::vector<ag::Tensor> p) { return std::make_unique<ag::optim::RMSprop>(p, 1e-2); };
  train_five_steps(kVulkan, adamw);
  train_five_steps(kVulkan, sgd);
  train_five_steps(kVulkan, rms);
  {
    auto net = small_net();
    net->to(kVulkan);
    ag::mse_loss((*net)(ag::ones({4, 6}, on(kVulkan))), ag::zeros({4, 3}, on(kVulkan))).backward();
    ag::optim::clip_grad_value_(net->parameters(), 0.01);
  }
  synchronize(kVulkan);
  const DeviceCounters after = device_counters(kVulkan);
  for (size_t i = 0; i < size_t(OpKind::Count); ++i) {
    const OpKind op = OpKind(i);
    const OpInfo& info = op_info(op);
    const bool reached = after.ops[i] > before.ops[i];
    if (op == OpKind::Leaf || info.view) continue;
    if (not_eager.count(op)) {
      EXPECT_FALSE(reached) << info.name << " is named as never recorded by the eager API, yet it ran: "
                            << not_eager.at(op);
    } else {
      EXPECT_TRUE(reached) << info.name << ": no eager case runs it on the device; add one, or name the op with why";
    }
  }
}

// Threads share a device's queue and its memory cache (as PyTorch's threads
// share a CUDA stream and allocator): two threads training a module each
// get what each gets alone. The modules are made before the threads start
// and have no dropout: both draw from the one global generator.
TEST(VulkanEager, TwoThreadsTrainOnOneDeviceAsEachAlone) {
  TG_VULKAN_OR_SKIP(vk);
  struct Job {
    std::shared_ptr<ag::nn::Sequential> net;
    ag::Tensor x, y;
    std::vector<float> losses, weights;
  };
  auto make = [](uint64_t seed) {
    ag::manual_seed(seed);
    Job j;
    j.net = std::make_shared<ag::nn::Sequential>(std::initializer_list<std::shared_ptr<ag::nn::Module>>{
        std::make_shared<ag::nn::Linear>(6, 32, false), std::make_shared<ag::nn::BatchNorm1d>(32),
        std::make_shared<ag::nn::ReLU>(), std::make_shared<ag::nn::Linear>(32, 3)});
    j.net->to(kVulkan);
    ag::Generator g(seed);
    j.x = ag::randn({16, 6}, {}, &g).to(kVulkan);
    j.y = ag::randn({16, 3}, {}, &g).to(kVulkan);
    return j;
  };
  auto train = [](Job& j) {
    ag::optim::AdamW opt(j.net->parameters(), 1e-2);
    for (int step = 0; step < 20; ++step) {
      opt.zero_grad();
      const ag::Tensor loss = ag::mse_loss((*j.net)(j.x), j.y);
      loss.backward();
      opt.step();
      j.losses.push_back(loss.item());
    }
    for (const ag::Tensor& p : j.net->parameters())
      for (float v : p.to_vector()) j.weights.push_back(v);
  };
  Job alone_a = make(1), alone_b = make(2);
  train(alone_a);
  train(alone_b);
  Job a = make(1), b = make(2);
  std::thread ta([&] { train(a); });
  std::thread tb([&] { train(b); });
  ta.join();
  tb.join();
  EXPECT_EQ(a.losses, alone_a.losses);
  EXPECT_EQ(b.losses, alone_b.losses);
  EXPECT_EQ(a.weights, alone_a.weights);
  EXPECT_EQ(b.weights, alone_b.weights);
}
