#pragma once
// Helpers of the Vulkan tests (tests/backend/vulkan/): the device or a
// skip saying why there is none, and one op run on a backend through a
// one-node planned graph, so that a Vulkan kernel is compared with the
// CPU's on the same inputs (ggml's test-backend-ops does the same).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tensorgrad/tensorgrad.h"

namespace test_support {

/// The Vulkan backend of vulkan:0, or null after GTEST_SKIP's message is set
/// (use TG_VULKAN_OR_SKIP).
inline std::shared_ptr<const tensorgrad::Backend> vulkan_backend_or_reason(std::string& reason) {
  try {
    return tensorgrad::backend(tensorgrad::Device("vulkan"));
  } catch (const tensorgrad::StateError& e) {
    reason = e.what();
    return nullptr;
  }
}

#define TG_VULKAN_OR_SKIP(var)                                                  \
  std::string var##_reason;                                                     \
  const auto var = test_support::vulkan_backend_or_reason(var##_reason);        \
  if (!var) GTEST_SKIP() << "no Vulkan device: " << var##_reason

/// Every element of a tensor as double, whatever its dtype and device.
inline std::vector<double> values(const tensorgrad::Tensor& t) {
  using namespace tensorgrad;
  const Tensor h = t.device() == Device::CPU ? t : t.to(Device::CPU);
  std::vector<double> out(size_t(h.numel()));
  for (size_t i = 0; i < out.size(); ++i) switch (h.dtype()) {
      case DType::Float32: out[i] = h.data<float>()[i]; break;
      case DType::Int32: out[i] = h.data<int32_t>()[i]; break;
      case DType::Int64: out[i] = double(h.data<int64_t>()[i]); break;
    }
  return out;
}

/// Every weight of a model (get_weights order) as doubles, one after another.
inline std::vector<double> all_weights(const tensorgrad::nn::Model& m) {
  std::vector<double> out;
  for (const tensorgrad::Tensor& w : m.get_weights()) {
    const std::vector<double> v = values(w);
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

/// One op's inputs. `state` inputs are persistent tensors (the first input of
/// an in-place op, optimizer moments): each backend gets its own copy, and
/// their values after the run are compared too.
struct OpCase {
  tensorgrad::OpKind op = tensorgrad::OpKind::Count;
  tensorgrad::OpAttrs attrs;
  std::vector<tensorgrad::Tensor> inputs;  // host tensors
  std::vector<bool> state;                 // per input; missing entries: a per-run input
};

/// The op's output, then every state input after the run.
struct OpResult {
  std::vector<double> output;
  std::vector<std::vector<double>> states;
};

/// Runs `c` once on `backend` through an Executable (the planned-graph path).
inline OpResult run_op(const OpCase& c, const std::shared_ptr<const tensorgrad::Backend>& backend) {
  using namespace tensorgrad;
  Graph g;
  std::vector<Value> ins;
  std::vector<Tensor> states;
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    const bool is_state = k < c.state.size() && c.state[k];
    if (is_state) {
      states.push_back(c.inputs[k].clone().to(backend->device()));
      ins.push_back(g.state(states.back(), "state" + std::to_string(k)));
    } else {
      ins.push_back(g.input("in" + std::to_string(k), c.inputs[k].shape(), c.inputs[k].dtype()));
    }
  }
  const Value out = g.apply(c.op, ins, c.attrs);
  Executable exe(std::move(g), {out}, BatchRule{}, backend, FusionOptions::none());
  for (size_t k = 0; k < c.inputs.size(); ++k)
    if (!(k < c.state.size() && c.state[k])) exe.bind(ins[k], c.inputs[k]);
  exe.run();
  OpResult r;
  r.output = values(exe.output(out));
  for (const Tensor& s : states) r.states.push_back(values(s));
  return r;
}

/// Whether a and b agree within |a - b| <= atol + rtol |b|, with NaN where
/// the other has NaN and infinities equal; the first difference otherwise.
inline ::testing::AssertionResult close(const std::vector<double>& a, const std::vector<double>& b, double rtol,
                                        double atol) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << "sizes differ: " << a.size() << " and " << b.size();
  for (size_t i = 0; i < a.size(); ++i) {
    const bool na = std::isnan(a[i]), nb = std::isnan(b[i]);
    if (na || nb) {
      if (na != nb) return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " against " << b[i];
      continue;
    }
    if (std::isinf(a[i]) || std::isinf(b[i])) {
      if (a[i] != b[i]) return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " against " << b[i];
      continue;
    }
    if (std::abs(a[i] - b[i]) > atol + rtol * std::abs(b[i]))
      return ::testing::AssertionFailure() << "element " << i << " of " << a.size() << ": " << a[i] << " against "
                                           << b[i] << " (tolerance " << atol << " + " << rtol << " relative)";
  }
  return ::testing::AssertionSuccess();
}

/// Runs `c` on the CPU and on `vulkan` and expects the output and every
/// state to agree within the tolerance (close()).
inline void expect_same_as_cpu(const OpCase& c, const std::shared_ptr<const tensorgrad::Backend>& vulkan, double rtol,
                               double atol) {
  const OpResult want = run_op(c, tensorgrad::cpu_backend());
  const OpResult got = run_op(c, vulkan);
  EXPECT_TRUE(close(got.output, want.output, rtol, atol)) << tensorgrad::op_info(c.op).name << ": output";
  for (size_t k = 0; k < want.states.size(); ++k)
    EXPECT_TRUE(close(got.states[k], want.states[k], rtol, atol)) << tensorgrad::op_info(c.op).name << ": state " << k;
}

/// A float32 tensor of `shape` with normal values (mean 0, deviation `scale`)
/// from a seeded stream.
inline tensorgrad::Tensor random_tensor(const tensorgrad::Shape& shape, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(size_t(shape.numel()));
  for (float& x : v) x = dist(gen);
  return tensorgrad::Tensor::from_vector(v, shape);
}

/// Shapes every element-wise kernel is tried at: one element, odd sizes,
/// sizes off every workgroup multiple, and one beyond 65535 workgroups of
/// 256 when `large` (the grid-stride loop's case).
inline std::vector<tensorgrad::Shape> elementwise_shapes(bool large = false) {
  std::vector<tensorgrad::Shape> s{{1}, {7}, {3, 5}, {1, 257}, {33, 65}, {2, 3, 31}};
  if (large) s.push_back({65536 * 256 + 3});
  return s;
}

}  // namespace test_support
