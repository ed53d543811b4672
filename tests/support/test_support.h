#pragma once
// Helpers shared by the test files: random inputs, checking that a call
// throws the right tensorgrad error with the right words, and guards that
// restore a process-wide setting (thread count, Winograd) a test changes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <typeinfo>
#include <vector>

#include "tensorgrad/tensorgrad.h"

namespace test_support {

/// |got - want| in units of the float32 spacing at want: the error of a
/// float kernel against a double reference, in float ulps.
inline double ulps(float got, double want) {
  const float w = float(want);
  const double spacing = double(std::nextafter(std::fabs(w), std::numeric_limits<float>::infinity())) - std::fabs(w);
  return std::fabs(double(got) - want) / spacing;
}

/// Uniform values in [lo, hi] from `rng`.
inline tensorgrad::Tensor uniform(const tensorgrad::Shape& s, std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(size_t(s.numel()));
  for (float& x : v) x = d(rng);
  return tensorgrad::Tensor::from_vector(v, s);
}

/// A fixture's float array (a generated header's) as a tensor of shape `s`.
template <size_t N>
tensorgrad::Tensor from_array(const float (&a)[N], const tensorgrad::Shape& s) {
  return tensorgrad::Tensor::from_vector(std::span<const float>(a, N), s);
}

/// |x| uniform in [lo, hi] with a random sign (inputs kept away from a kink).
inline tensorgrad::Tensor away_from_zero(const tensorgrad::Shape& s, std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::bernoulli_distribution sign(0.5);
  std::vector<float> v(size_t(s.numel()));
  for (float& x : v) x = sign(rng) ? d(rng) : -d(rng);
  return tensorgrad::Tensor::from_vector(v, s);
}

/// Per channel of values{rows, C} (channels last): the mean and the biased
/// variance by two passes in double, {mean_0, ..., mean_C-1, var_0, ...}:
/// the reference for the batch-statistics kernels.
inline std::vector<double> two_pass_stats(const std::vector<float>& values, int64_t C) {
  const int64_t rows = int64_t(values.size()) / C;
  std::vector<double> out(size_t(2 * C), 0.0);
  for (int64_t c = 0; c < C; ++c) {
    double mean = 0.0, var = 0.0;
    for (int64_t r = 0; r < rows; ++r) mean += values[size_t(r * C + c)];
    mean /= double(rows);
    for (int64_t r = 0; r < rows; ++r) var += (values[size_t(r * C + c)] - mean) * (values[size_t(r * C + c)] - mean);
    out[size_t(c)] = mean;
    out[size_t(C + c)] = var / double(rows);
  }
  return out;
}

/// Runs f; succeeds when it throws exactly the tensorgrad::Error subclass E
/// and the message contains every one of `words`.
template <class E>
::testing::AssertionResult throws(const std::function<void()>& f, std::initializer_list<std::string> words) {
  try {
    f();
  } catch (const tensorgrad::Error& e) {
    const std::string msg = e.what();
    if (!dynamic_cast<const E*>(&e))
      return ::testing::AssertionFailure() << "threw " << typeid(e).name() << ", expected " << typeid(E).name()
                                           << "; message: " << msg;
    for (const std::string& w : words)
      if (msg.find(w) == std::string::npos)
        return ::testing::AssertionFailure() << "message lacks \"" << w << "\": " << msg;
    return ::testing::AssertionSuccess() << msg;
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-tensorgrad exception " << typeid(e).name() << ": "
                                         << e.what();
  } catch (...) {
    return ::testing::AssertionFailure() << "threw something that is not a std::exception";
  }
  return ::testing::AssertionFailure() << "did not throw";
}

/// Restores the thread count when a test ends, whatever happens in it.
struct ThreadsGuard {
  int saved = tensorgrad::num_threads();
  ~ThreadsGuard() { tensorgrad::set_num_threads(saved); }
};

// Restores the process-wide choice of Winograd convolutions
// (tensorgrad::set_winograd_convolutions) a test turns off to check the
// direct kernels.
struct WinogradGuard {
  bool saved = tensorgrad::winograd_convolutions();
  ~WinogradGuard() { tensorgrad::set_winograd_convolutions(saved); }
};

// Calls f(tap, in, out) for every tap of every output pixel of a
// convolution of x {B, H, W, C} over window w whose input pixel lies inside
// the image: tap = ky kw + kx, in = (b H + iy) W + ix and out = (b Ho + oy)
// Wo + ox, pixel indices into x and the output (the direct sums the kernel
// tests check against).
template <class F>
void for_each_tap(const tensorgrad::Shape& x, const tensorgrad::Window2D& w, F&& f) {
  const int64_t B = x[0], H = x[1], W = x[2], Ho = w.out_h(H), Wo = w.out_w(W);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t oy = 0; oy < Ho; ++oy)
      for (int64_t ox = 0; ox < Wo; ++ox)
        for (int64_t ky = 0; ky < w.kh; ++ky)
          for (int64_t kx = 0; kx < w.kw; ++kx) {
            const int64_t iy = oy * w.sh + ky * w.dh - w.pad_top, ix = ox * w.sw + kx * w.dw - w.pad_left;
            if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
            f(ky * w.kw + kx, (b * H + iy) * W + ix, (b * Ho + oy) * Wo + ox);
          }
}

/// A Window2D from its sizes, strides, dilations and pads (top, left, bottom, right).
inline tensorgrad::Window2D window(int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t dh = 1, int64_t dw = 1,
                                   int64_t top = 0, int64_t left = 0, int64_t bottom = 0, int64_t right = 0) {
  tensorgrad::Window2D w;
  w.kh = kh, w.kw = kw, w.sh = sh, w.sw = sw, w.dh = dh, w.dw = dw;
  w.pad_top = top, w.pad_left = left, w.pad_bottom = bottom, w.pad_right = right;
  return w;
}

/// "3x3 s1,1 d1,1 pads(t1,l1,b1,r1)", for test names and messages.
inline std::string window_str(const tensorgrad::Window2D& w) {
  std::ostringstream s;
  s << w.kh << "x" << w.kw << " s" << w.sh << "," << w.sw << " d" << w.dh << "," << w.dw << " pads(t" << w.pad_top
    << ",l" << w.pad_left << ",b" << w.pad_bottom << ",r" << w.pad_right << ")";
  return s.str();
}

/// The message of the exception of exactly type E that f throws; otherwise a
/// text saying what happened instead (which then fails the word checks).
template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception: ") + e.what();
  }
  return "no exception";
}

/// Host memory that says it lives on another device: what a device
/// backend's storage looks like to the rest of the engine (only copies
/// reach it; a test backend's kernels may read it as host memory).
/// Counts the copies of every instance.
class FakeDeviceStorage final : public tensorgrad::Storage {
 public:
  FakeDeviceStorage(tensorgrad::Device device, size_t bytes)
      : Storage(device, new char[bytes ? bytes : 1], bytes) {}
  ~FakeDeviceStorage() override { delete[] static_cast<char*>(data()); }
  void copy_from_host(size_t offset, const void* src, size_t bytes) override {
    ++uploads;
    std::memmove(static_cast<char*>(data()) + offset, src, bytes);
  }
  void copy_to_host(size_t offset, void* dst, size_t bytes) const override {
    ++downloads;
    std::memmove(dst, static_cast<const char*>(data()) + offset, bytes);
  }
  void copy_within_device(size_t offset, const Storage& src, size_t src_offset, size_t bytes) override {
    ++within;
    std::memmove(static_cast<char*>(data()) + offset, static_cast<const char*>(src.data()) + src_offset, bytes);
  }
  static inline int uploads = 0, within = 0, downloads = 0;
};

// 12 rows of y = x1 - 2 x2 + 0.5, x uniform in [-1, 1] drawn from `seed`: a
// target Dense(1) can fit exactly, for tests of the training loop's plumbing.
struct LinearData {
  tensorgrad::Tensor x, y;
  explicit LinearData(uint32_t seed) {
    std::mt19937 rng(seed);
    x = uniform({12, 2}, rng, -1, 1);
    std::vector<float> yv;
    for (int64_t i = 0; i < 12; ++i) yv.push_back(x.data<float>()[2 * i] - 2 * x.data<float>()[2 * i + 1] + 0.5f);
    y = tensorgrad::Tensor::from_vector(yv, {12, 1});
  }
};

// Dense(1) on two features, compiled with SGD at `lr` and MSE, its weights
// drawn after manual_seed(seed).
inline tensorgrad::nn::Sequential linear_model(uint64_t seed, float lr) {
  tensorgrad::manual_seed(seed);
  tensorgrad::nn::Sequential m({2});
  m.add(tensorgrad::nn::Dense(1));
  m.compile(tensorgrad::OptimizerSpec::sgd(lr), "mse");
  return m;
}

}  // namespace test_support
