// The recurrent family's Vulkan kernels (LstmSequence, GruSequence and their
// backward ops) against the CPU's. Tolerance: 1e-5 relative plus 1e-6 * T
// absolute. Each step's h_{t-1} U sums H terms in one fma chain where the
// CPU's GEMM uses vectors and blocks of its own, and the gates' exp and tanh
// (shaders/elementwise.glsl) are within a few ulp of the CPU's libm or SLEEF;
// so each step's values differ by a few ulps, and those differences go on
// through every later step (forward through h and c, backward through dh and
// dc), growing with T. The kernels' blocks of rows by units (GPUs: one by
// one; CPU implementations: up to 8 by 4) keep every sum's order, so both
// give the same bits; each case runs with both.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "vulkan_support.h"

using namespace tensorgrad;
using test_support::OpCase;

namespace {

struct Size {
  int64_t b, t, h;
};

// Every combination of B in {1, 3}, T in {1, 5, 17}, H in {1, 4, 33}: one row,
// one step, one unit, and sizes off the shaders' workgroup of 64; then more
// rows than one block of 8, the last block partial.
std::vector<Size> sizes() {
  std::vector<Size> s;
  for (int64_t b : {1, 3})
    for (int64_t t : {1, 5, 17})
      for (int64_t h : {1, 4, 33}) s.push_back({b, t, h});
  s.push_back({11, 3, 5});
  return s;
}

std::string name(const Size& s, bool states) {
  return "B=" + std::to_string(s.b) + " T=" + std::to_string(s.t) + " H=" + std::to_string(s.h) +
         (states ? " with initial states" : "");
}

double atol(const Size& s) { return 1e-6 * double(s.t); }
constexpr double kRtol = 1e-5;

// A random tensor of deviation `scale`, NaN at element `nan_at` when given.
Tensor input(const Shape& shape, uint32_t seed, float scale, int64_t nan_at = -1) {
  Tensor x = test_support::random_tensor(shape, seed, scale);
  if (nan_at >= 0) x.data<float>()[nan_at] = NAN;
  return x;
}

// The op's CPU output as a host tensor (the forward outputs the backward tests read).
Tensor cpu_output(const OpCase& c, const Shape& shape) {
  const std::vector<double> v = test_support::run_op(c, cpu_backend()).output;
  std::vector<float> f(v.begin(), v.end());
  return Tensor::from_vector(f, shape);
}

OpCase lstm_case(const Size& s, bool states, uint32_t seed, int64_t nan_at = -1) {
  OpCase c;
  c.op = OpKind::LstmSequence;
  c.inputs = {input({s.b, s.t, 4 * s.h}, seed, 0.3f, nan_at), input({s.h, 4 * s.h}, seed + 1, 0.3f)};
  if (states) {
    c.inputs.push_back(input({s.b, s.h}, seed + 2, 0.5f));
    c.inputs.push_back(input({s.b, s.h}, seed + 3, 0.5f));
  }
  return c;
}

OpCase gru_case(const Size& s, bool states, uint32_t seed, int64_t nan_at = -1) {
  OpCase c;
  c.op = OpKind::GruSequence;
  c.inputs = {input({s.b, s.t, 3 * s.h}, seed, 0.3f, nan_at), input({s.h, 3 * s.h}, seed + 1, 0.3f),
              input({3 * s.h}, seed + 2, 0.3f)};
  if (states) c.inputs.push_back(input({s.b, s.h}, seed + 3, 0.5f));
  return c;
}

// The backward op's case from the forward case f: y the CPU's forward output,
// g random over every part of it (h, c and the gates, or h, z, r, n and hn),
// the initial state c0 or h0 when f has them.
OpCase backward_case(const OpCase& f, OpKind op, int64_t kept, uint32_t seed) {
  const Shape xw = f.inputs[0].shape();
  const Shape ys{xw[0], xw[1], kept * f.inputs[1].shape()[0]};
  OpCase c;
  c.op = op;
  c.inputs = {cpu_output(f, ys), f.inputs[1], input(ys, seed, 1.0f)};
  if (f.inputs.size() == 4) c.inputs.push_back(f.inputs[3]);  // c0 (LSTM) or h0 (GRU)
  return c;
}

// Runs c with the GPU's blocks (one row and unit per invocation), then with
// the CPU implementations' (kernels/recurrent.cpp's
// TENSORGRAD_VULKAN_RECURRENT_BLOCKS), whatever the device, so that both are
// tried on lavapipe as on a GPU.
void expect_case(const OpCase& c, const std::shared_ptr<const Backend>& vk, const Size& s) {
  for (const char* kind : {"gpu", "cpu"}) {
    SCOPED_TRACE(std::string("blocks of ") + kind);
    setenv("TENSORGRAD_VULKAN_RECURRENT_BLOCKS", kind, 1);
    test_support::expect_same_as_cpu(c, vk, kRtol, atol(s));
  }
  unsetenv("TENSORGRAD_VULKAN_RECURRENT_BLOCKS");
}

}  // namespace

TEST(VulkanRecurrent, LstmSequence) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 100;
  for (const Size& s : sizes())
    for (bool states : {false, true}) {
      SCOPED_TRACE(name(s, states));
      expect_case(lstm_case(s, states, seed += 10), vk, s);
    }
}

TEST(VulkanRecurrent, LstmSequenceBackward) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 200;
  for (const Size& s : sizes())
    for (bool states : {false, true}) {
      SCOPED_TRACE(name(s, states));
      const OpCase f = lstm_case(s, states, seed += 10);
      expect_case(backward_case(f, OpKind::LstmSequenceBackward, 6, seed + 5), vk, s);
    }
}

TEST(VulkanRecurrent, GruSequence) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 300;
  for (const Size& s : sizes())
    for (bool states : {false, true}) {
      SCOPED_TRACE(name(s, states));
      expect_case(gru_case(s, states, seed += 10), vk, s);
    }
}

TEST(VulkanRecurrent, GruSequenceBackward) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 400;
  for (const Size& s : sizes())
    for (bool states : {false, true}) {
      SCOPED_TRACE(name(s, states));
      const OpCase f = gru_case(s, states, seed += 10);
      expect_case(backward_case(f, OpKind::GruSequenceBackward, 5, seed + 5), vk, s);
    }
}

// A NaN in xw at step 1 of row 1 reaches that row's later steps through
// h_{t-1} U (every unit of them) and, backward, its earlier steps through dz
// U^T; the other rows stay finite. Both sides must put NaN in the same places.
TEST(VulkanRecurrent, NanInTheInputPropagatesAsOnTheCpu) {
  TG_VULKAN_OR_SKIP(vk);
  for (bool states : {false, true}) {
    const Size s{3, 5, 4};
    SCOPED_TRACE(name(s, states));
    const int64_t lstm_nan = (1 * s.t + 1) * 4 * s.h + 2;  // row 1, step 1, gate i of unit 2
    const OpCase lstm = lstm_case(s, states, 500, lstm_nan);
    expect_case(lstm, vk, s);
    expect_case(backward_case(lstm, OpKind::LstmSequenceBackward, 6, 505), vk, s);
    const int64_t gru_nan = (1 * s.t + 1) * 3 * s.h + 2 * s.h + 1;  // row 1, step 1, gate n of unit 1
    const OpCase gru = gru_case(s, states, 600, gru_nan);
    expect_case(gru, vk, s);
    expect_case(backward_case(gru, OpKind::GruSequenceBackward, 5, 605), vk, s);
  }
}

// LstmSequence then its backward op for B = 32, T = 50, H = 64, one graph,
// timed on the Vulkan device and on the CPU (a report, not a check: run with
// --gtest_also_run_disabled_tests).
TEST(VulkanRecurrent, DISABLED_LstmTiming) {
  TG_VULKAN_OR_SKIP(vk);
  const int64_t B = 32, T = 50, H = 64;
  for (const auto& backend : {vk, cpu_backend()}) {
    Graph g;
    const Value xw = g.input("xw", Shape{B, T, 4 * H});
    const Value u = g.input("u", Shape{H, 4 * H});
    const Value grad = g.input("g", Shape{B, T, 6 * H});
    const Value y = g.apply(OpKind::LstmSequence, {xw, u}, OpAttrs{});
    const Value d = g.apply(OpKind::LstmSequenceBackward, {y, u, grad}, OpAttrs{});
    Executable exe(std::move(g), {y, d}, BatchRule{}, backend, FusionOptions::none());
    exe.bind(xw, test_support::random_tensor({B, T, 4 * H}, 1, 0.3f));
    exe.bind(u, test_support::random_tensor({H, 4 * H}, 2, 0.3f));
    exe.bind(grad, test_support::random_tensor({B, T, 6 * H}, 3, 1.0f));
    exe.run();  // the pipelines and the recording
    std::vector<double> ms, cpu_ms;
    for (int k = 0; k < 10; ++k) {
      const auto t0 = std::chrono::steady_clock::now();
      const std::clock_t c0 = std::clock();
      exe.run();
      (void)exe.output(d).to(Device::CPU);
      cpu_ms.push_back(1000.0 * double(std::clock() - c0) / CLOCKS_PER_SEC);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    std::sort(cpu_ms.begin(), cpu_ms.end());
    std::printf("LstmSequence + LstmSequenceBackward, B=%lld T=%lld H=%lld on %s: median %.2f ms (min %.2f), "
                "CPU time (all threads) median %.2f ms\n",
                (long long)B, (long long)T, (long long)H, backend->device().str().c_str(), ms[ms.size() / 2], ms[0],
                cpu_ms[cpu_ms.size() / 2]);
  }
}
