// The optimizer Vulkan kernels against the CPU's, over several steps of one
// planned graph (OptimizerTick, then an update reading its hyper tensor), as
// an optimizer context runs them; every state is compared after every run.
// Tolerances: the tick's float32 outputs (the scheduled rate, the bias
// corrections, the step's dampening) within 1 ulp of the CPU's, which
// rounds a double to float32, and the int64 step count exactly; the
// updates 1e-6 relative (float32 math as the CPU's, which may fuse a
// multiply and an add, and whose sqrt and division a GPU may round in the
// last bit). CTest runs this file twice: as is (the tick in doubles where
// the device has shaderFloat64) and with TENSORGRAD_VULKAN_NO_FP64=1 (in
// float pairs).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "vulkan_support.h"

using namespace tensorgrad;

namespace {

// What one graph holds: the tick's inputs and, unless `update` is Count, an
// update's param, gradient and state inputs (in the op's order), all states.
struct Trial {
  uint32_t schedule = kConstantLr;
  std::vector<int64_t> schedule_steps;
  std::vector<float> schedule_values;
  int64_t start_step = 0;
  std::vector<float> hyper;
  OpKind update = OpKind::Count;
  OpAttrs attrs;
  std::vector<Tensor> tensors;  // param, grad, then the update's states
};

// Hyper-parameters (HyperSlot) with every slot set.
std::vector<float> default_hyper() {
  std::vector<float> h(kHyperSize, 0.0f);
  h[kLr] = 0.01f;
  h[kBeta1] = 0.9f;
  h[kBeta2] = 0.999f;
  h[kEps] = 1e-7f;
  h[kWeightDecay] = 0.0f;
  h[kMomentum] = 0.9f;
  h[kDampening] = 0.0f;
  h[kRho] = 0.9f;
  return h;
}

// A graph of the trial on one backend, its states there.
class Runner {
 public:
  Runner(const Trial& trial, const std::shared_ptr<const Backend>& backend) {
    Graph g;
    auto state = [&](const Tensor& host, const std::string& name) {
      states_.push_back(host.clone().to(backend->device()));
      return g.state(states_.back(), name);
    };
    Tensor step = Tensor::zeros({1}, DType::Int64);
    step.data<int64_t>()[0] = trial.start_step;
    std::vector<Value> tick_in{state(Tensor::from_vector(trial.hyper, {kHyperSize}), "hyper"), state(step, "step")};
    OpAttrs tick_at;
    tick_at.flags = trial.schedule;
    if (trial.schedule != kConstantLr) {
      Tensor steps = Tensor::zeros({int64_t(trial.schedule_steps.size())}, DType::Int64);
      for (size_t i = 0; i < trial.schedule_steps.size(); ++i) steps.data<int64_t>()[i] = trial.schedule_steps[i];
      tick_in.push_back(state(steps, "schedule_steps"));
      const Shape values_shape{int64_t(trial.schedule_values.size())};
      tick_in.push_back(state(Tensor::from_vector(trial.schedule_values, values_shape), "schedule_values"));
    }
    Value out = g.apply(OpKind::OptimizerTick, tick_in, tick_at);
    if (trial.update != OpKind::Count) {
      std::vector<Value> in;
      for (size_t k = 0; k < trial.tensors.size(); ++k) in.push_back(state(trial.tensors[k], "t" + std::to_string(k)));
      in.push_back(out);
      out = g.apply(trial.update, in, trial.attrs);
    }
    exe_ = std::make_unique<Executable>(std::move(g), std::vector<Value>{out}, BatchRule{}, backend,
                                        FusionOptions::none());
  }
  void run() { exe_->run(); }
  // Every state: hyper, step, [schedule steps, values], then the trial's tensors.
  std::vector<std::vector<double>> states() const {
    std::vector<std::vector<double>> s;
    for (const Tensor& t : states_) s.push_back(test_support::values(t));
    return s;
  }

 private:
  std::vector<Tensor> states_;
  std::unique_ptr<Executable> exe_;
};

// Whether float32 values a and b are at most one ulp apart (NaN matching NaN).
::testing::AssertionResult within_one_ulp(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes differ";
  auto ordered = [](float x) {
    const int32_t i = std::bit_cast<int32_t>(x);
    return i < 0 ? int64_t(INT32_MIN) - i : int64_t(i);  // monotonic in x, -0 and +0 adjacent
  };
  for (size_t i = 0; i < a.size(); ++i) {
    const float x = float(a[i]), y = float(b[i]);
    if (std::isnan(x) || std::isnan(y)) {
      if (std::isnan(x) != std::isnan(y))
        return ::testing::AssertionFailure() << "element " << i << ": " << x << " against " << y;
      continue;
    }
    if (x != y && std::abs(ordered(x) - ordered(y)) > 1)
      return ::testing::AssertionFailure() << "element " << i << ": " << std::hexfloat << x << " against " << y;
  }
  return ::testing::AssertionSuccess();
}

// Whether an updated tensor agrees within rtol relative, or rtol of the
// tensor's largest finite magnitude (before or after the step): the updates
// subtract (param - lr u, the momentum of a gradient against its buffer, g
// + wd p), so an element may end far below its terms, whose last bits are
// what differs. NaN where the CPU has NaN, the same infinities.
::testing::AssertionResult close_update(const std::vector<double>& got, const std::vector<double>& want,
                                        const std::vector<double>& before, double rtol) {
  double scale = 0;
  for (const auto* v : {&want, &before})
    for (double x : *v)
      if (std::isfinite(x)) scale = std::max(scale, std::abs(x));
  return test_support::close(got, want, rtol, rtol * scale);
}

// Runs the trial `runs` times on the CPU and on Vulkan in step, comparing
// every state after every run.
void expect_same_steps(const Trial& trial, const std::shared_ptr<const Backend>& vk, int runs, double rtol,
                       const std::string& what) {
  Runner cpu(trial, cpu_backend()), gpu(trial, vk);
  const size_t first_tensor = trial.schedule == kConstantLr ? 2 : 4;
  auto want = cpu.states();
  for (int run = 0; run < runs; ++run) {
    cpu.run();
    gpu.run();
    const auto before = std::move(want);
    want = cpu.states();
    const auto got = gpu.states();
    const std::string where = what + ", run " + std::to_string(run + 1) + " from step " +
                              std::to_string(trial.start_step);
    EXPECT_TRUE(within_one_ulp(got[0], want[0])) << where << ": hyper";
    EXPECT_EQ(int64_t(got[1][0]), int64_t(want[1][0])) << where << ": step";
    for (size_t k = first_tensor; k < want.size(); ++k)
      EXPECT_TRUE(close_update(got[k], want[k], before[k], rtol)) << where << ": tensor " << k - first_tensor;
    if (::testing::Test::HasFailure()) return;
  }
}

constexpr int64_t kNoMore = std::numeric_limits<int64_t>::max();

struct Schedule {
  const char* name;
  uint32_t kind;
  std::vector<int64_t> steps;
  std::vector<float> values;
};

std::vector<Schedule> schedules() {
  return {
      {"constant", kConstantLr, {}, {}},
      {"piecewise", kPiecewiseConstantDecay, {3, 5, kNoMore}, {0.1f, 0.01f, 0.001f}},
      {"exponential", kExponentialDecay, {3, 0}, {0.1f, 0.96f}},
      {"exponential staircase", kExponentialDecay, {3, 1}, {0.1f, 0.96f}},
      {"exponential halving", kExponentialDecay, {2, 0}, {0.3f, 0.5f}},
      {"cosine", kCosineDecay, {10, 0, 0}, {0.1f, 0.05f, 0.0f}},
      {"cosine with warmup", kCosineDecay, {10, 4, 1}, {0.01f, 0.0f, 0.1f}},
      {"cosine without decay", kCosineDecay, {1000000, 0, 0}, {1.0f, 0.0f, 0.0f}},
      {"long cosine", kCosineDecay, {200000000, 0, 0}, {1.0f, 0.0f, 0.0f}},
      {"long exponential", kExponentialDecay, {100000000, 0}, {0.1f, 0.3f}},
      {"restarts t_mul 2", kCosineDecayRestarts, {3}, {0.1f, 2.0f, 0.9f, 0.01f}},
      {"restarts t_mul 1.5", kCosineDecayRestarts, {4}, {0.1f, 1.5f, 1.0f, 0.0f}},
      {"restarts t_mul 1", kCosineDecayRestarts, {5}, {0.1f, 1.0f, 0.5f, 0.1f}},
      {"restarts t_mul 1.1", kCosineDecayRestarts, {7}, {0.2f, 1.1f, 0.7f, 0.0f}},
  };
}

}  // namespace

// Each schedule over its boundaries (piecewise at 3 and 5, staircases at
// multiples of 3, the warmup's end at 4, the decay's end at 10 or 14,
// restarts at 3, 9, 21, 45 and at 4, 10, 19), then far out, where the bias
// corrections round to 1. Not tried: the last steps of a period longer
// than about 50000, where the CPU's 0.5 (1 + cos(pi x)) cancels to fewer
// bits than float32 holds and the kernels' cos(pi x / 2)^2 is the closer.
TEST(VulkanOptimizer, TickSchedules) {
  TG_VULKAN_OR_SKIP(vk);
  for (const Schedule& s : schedules())
    for (int64_t start : {int64_t(0), int64_t(123456789)}) {
      Trial t;
      t.schedule = s.kind;
      t.schedule_steps = s.steps;
      t.schedule_values = s.values;
      t.start_step = start;
      t.hyper = default_hyper();
      t.hyper[kDampening] = 0.25f;
      expect_same_steps(t, vk, start == 0 ? 50 : 5, 0, s.name);
    }
}

// Bias corrections of other betas: exact powers (0.5), betas near 1 (the
// cancellation of 1 - beta^t), 0 (corrections of 1) and a restart far out.
TEST(VulkanOptimizer, TickBetas) {
  TG_VULKAN_OR_SKIP(vk);
  for (auto [b1, b2] : {std::pair{0.5f, 0.25f}, std::pair{0.99999f, 0.9999999f}, std::pair{0.0f, 0.3f}}) {
    Trial t;
    t.hyper = default_hyper();
    t.hyper[kBeta1] = b1;
    t.hyper[kBeta2] = b2;
    for (int64_t start : {int64_t(0), int64_t(999), int64_t(1) << 40}) {
      t.start_step = start;
      expect_same_steps(t, vk, 4, 0, "betas " + std::to_string(b1) + ", " + std::to_string(b2));
    }
  }
  Trial t;
  t.schedule = kCosineDecayRestarts;
  t.schedule_steps = {4};
  t.schedule_values = {0.1f, 2.0f, 0.9f, 0.0f};
  t.hyper = default_hyper();
  t.start_step = 4 * ((int64_t(1) << 12) - 1) - 1;  // the 12th restart
  expect_same_steps(t, vk, 4, 0, "a late restart");
}

namespace {

// An update's param, gradient and `states` state tensors of `n` elements;
// the gradient has NaN at element 0 and infinity at 3 when `nonfinite`.
// With `centered`, the second state is RMSprop's mean gradient, at most
// half the root of the mean square, as a run from zeros keeps it (so the
// variance v - mean^2 does not cancel).
std::vector<Tensor> update_tensors(int64_t n, int states, uint32_t seed, bool nonfinite, bool centered) {
  std::vector<Tensor> t{test_support::random_tensor({n}, seed), test_support::random_tensor({n}, seed + 1, 0.1f)};
  if (nonfinite) {
    t[1].data<float>()[0] = NAN;
    if (n > 3) t[1].data<float>()[3] = INFINITY;
  }
  for (int k = 0; k < states; ++k) {
    // Moments as after earlier steps: squares positive.
    Tensor s = test_support::random_tensor({n}, seed + 2 + k, 0.01f);
    for (int64_t i = 0; i < n; ++i) s.data<float>()[i] = std::abs(s.data<float>()[i]);
    t.push_back(s);
  }
  if (centered) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> u(-0.5f, 0.5f);
    for (int64_t i = 0; i < n; ++i) t[3].data<float>()[i] = u(gen) * std::sqrt(t[2].data<float>()[i]);
  }
  return t;
}

struct UpdateCase {
  std::string name;
  OpKind op;
  uint32_t flags;
  int states;
  float weight_decay;
  bool zero_grad = false;
};

void expect_updates(const std::vector<UpdateCase>& cases, const std::shared_ptr<const Backend>& vk) {
  uint32_t seed = 10;
  for (const UpdateCase& c : cases)
    for (int64_t n : {int64_t(1), int64_t(7), int64_t(1000), int64_t(65536 * 2 + 5)})
      for (bool nonfinite : {false, true}) {
        Trial t;
        t.hyper = default_hyper();
        t.hyper[kWeightDecay] = c.weight_decay;
        t.hyper[kDampening] = 0.1f;
        t.update = c.op;
        t.attrs.flags = c.flags;
        t.attrs.zero_grad = c.zero_grad;
        t.hyper[kEps] = 1e-4f;  // large enough that its place (kEpsInsideSqrt) shows
        const bool centered = c.op == OpKind::RmspropUpdate && (c.flags & kCentered);
        t.tensors = update_tensors(n, c.states, seed += 7, nonfinite, centered);
        // The learning rate from a schedule once in a while: the update reads what the tick wrote.
        if (n == 1000) {
          t.schedule = kCosineDecay;
          t.schedule_steps = {3, 0, 0};
          t.schedule_values = {0.05f, 0.1f, 0.0f};
        }
        const std::string what = c.name + ", " + std::to_string(n) + (nonfinite ? " elements, NaN" : " elements");
        expect_same_steps(t, vk, 4, 1e-6, what);
      }
}

}  // namespace

TEST(VulkanOptimizer, AdamW) {
  TG_VULKAN_OR_SKIP(vk);
  expect_updates({{"adamw", OpKind::AdamWUpdate, 0, 2, 0.0f},
                  {"adamw decoupled decay", OpKind::AdamWUpdate, 0, 2, 0.01f},
                  {"adam l2", OpKind::AdamWUpdate, kL2WeightDecay, 2, 0.01f},
                  {"adamw zero_grad", OpKind::AdamWUpdate, 0, 2, 0.01f, true}},
                 vk);
}

TEST(VulkanOptimizer, Sgd) {
  TG_VULKAN_OR_SKIP(vk);
  expect_updates({{"sgd", OpKind::SgdUpdate, 0, 0, 0.0f},
                  {"sgd decoupled decay", OpKind::SgdUpdate, 0, 0, 0.01f},
                  {"sgd l2", OpKind::SgdUpdate, kL2WeightDecay, 0, 0.01f},
                  {"sgd momentum", OpKind::SgdUpdate, kUseMomentum, 1, 0.0f},
                  {"sgd nesterov l2", OpKind::SgdUpdate, kUseMomentum | kNesterov | kL2WeightDecay, 1, 0.01f},
                  {"sgd nesterov decay zero_grad", OpKind::SgdUpdate, kUseMomentum | kNesterov, 1, 0.01f, true}},
                 vk);
}

TEST(VulkanOptimizer, Rmsprop) {
  TG_VULKAN_OR_SKIP(vk);
  expect_updates({{"rmsprop", OpKind::RmspropUpdate, 0, 1, 0.0f},
                  {"rmsprop eps inside, decay", OpKind::RmspropUpdate, kEpsInsideSqrt, 1, 0.01f},
                  {"rmsprop centered l2", OpKind::RmspropUpdate, kCentered | kL2WeightDecay, 2, 0.01f},
                  {"rmsprop momentum", OpKind::RmspropUpdate, kUseMomentum, 2, 0.0f},
                  {"rmsprop centered momentum inside zero_grad", OpKind::RmspropUpdate,
                   kCentered | kUseMomentum | kEpsInsideSqrt, 3, 0.01f, true}},
                 vk);
}

TEST(VulkanOptimizer, Adagrad) {
  TG_VULKAN_OR_SKIP(vk);
  expect_updates({{"adagrad", OpKind::AdagradUpdate, 0, 1, 0.0f},
                  {"adagrad eps inside, decay", OpKind::AdagradUpdate, kEpsInsideSqrt, 1, 0.01f},
                  {"adagrad l2 zero_grad", OpKind::AdagradUpdate, kL2WeightDecay, 1, 0.01f, true}},
                 vk);
}
