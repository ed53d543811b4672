// The loss family's Vulkan kernels against the CPU's: softmax and
// log-softmax with their gradients, the losses with theirs, the metrics.
// Tolerances (|vulkan - cpu| <= atol + rtol |cpu|), with e = 1e-8 C for rows
// of C classes: the CPU sums a row's C exponentials (and the backward's g y)
// one after the other in float32, off by up to about C 2^-24 relative, where
// the device sums in a tree; the device's exp and log add a few ulp (Vulkan
// promises log an absolute 2^-21 near 1):
// - softmax, log-softmax and their gradients: 1e-5 + e relative, 1e-6 + e;
// - the mean losses: 1e-5 relative, 1e-6 + e (float32 tree sums where the
//   CPU sums in double);
// - loss gradients: 1e-5 relative, (1e-6 + e) |g| max(w) / n, the scale
//   of their values, since s (p - t) cancels where p is near t;
// - metrics (counts): exact.
// Out-of-range class ids: the CPU's SoftmaxCrossEntropy reads z[id] unchecked
// (the trainer checks ids on the host before), its backward ignores the id
// (no target subtracted) and its metrics count the row as a miss; Vulkan
// never reads out of bounds and makes the row's loss and gradient NaN (the
// metrics: a miss, as on the CPU).
#include <gtest/gtest.h>

#include <cstring>
#include <limits>

#include "vulkan_support.h"

using namespace tensorgrad;
using test_support::OpCase;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

const int64_t kRows[] = {1, 7, 64, 500};
const int64_t kClasses[] = {1, 2, 10, 33, 1000};

Tensor class_ids(int64_t b, int64_t c, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(0, int32_t(c - 1));
  std::vector<int32_t> v(static_cast<size_t>(b));
  for (int32_t& x : v) x = dist(gen);
  return Tensor::from_vector(std::span<const int32_t>(v), Shape{b});
}

Tensor one_hot(const Tensor& ids, int64_t c) {
  const int64_t b = ids.shape()[0];
  std::vector<float> v(size_t(b * c), 0.0f);
  for (int64_t i = 0; i < b; ++i) v[size_t(i * c + ids.data<int32_t>()[i])] = 1.0f;
  return Tensor::from_vector(v, Shape{b, c});
}

// Rows of probabilities with about a third of the entries zero.
Tensor soft_labels(int64_t b, int64_t c, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(size_t(b * c));
  for (int64_t i = 0; i < b; ++i) {
    float s = 0.0f;
    for (int64_t j = 0; j < c; ++j) s += v[size_t(i * c + j)] = dist(gen) < 0.33f ? 0.0f : dist(gen);
    for (int64_t j = 0; j < c; ++j) v[size_t(i * c + j)] /= s > 0.0f ? s : 1.0f;
  }
  return Tensor::from_vector(v, Shape{b, c});
}

Tensor uniform(const Shape& shape, uint32_t seed, float lo, float hi) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(size_t(shape.numel()));
  for (float& x : v) x = dist(gen);
  return Tensor::from_vector(v, shape);
}

double row_rtol(int64_t c) { return 1e-5 + 1e-8 * double(c); }
double row_atol(int64_t c) { return 1e-6 + 1e-8 * double(c); }
// A gradient's atol: row_atol at the scale g max(w) / n of its values.
double grad_atol(int64_t c, float g, float max_w, int64_t n) { return row_atol(c) * std::abs(g) * max_w / double(n); }

Tensor scalar(float v) { return Tensor::from_vector(std::vector<float>{v}, Shape{}); }

float& at(Tensor& t, int64_t k) { return t.data<float>()[k]; }

OpCase make(OpKind op, std::vector<Tensor> inputs, OpAttrs attrs = {}) {
  OpCase c;
  c.op = op;
  c.attrs = attrs;
  c.inputs = std::move(inputs);
  return c;
}

// Two Vulkan runs give the same bits (NaN payloads included).
void expect_deterministic(const OpCase& c, const std::shared_ptr<const Backend>& vk) {
  const auto a = test_support::run_op(c, vk).output, b = test_support::run_op(c, vk).output;
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(double))) << op_info(c.op).name;
}

// The cross-entropy inputs of one (B, C) case: logits, each label form, weights.
struct CeCase {
  Tensor z, ids, hot, soft, w;
};
CeCase ce_case(int64_t b, int64_t c, uint32_t seed) {
  CeCase r;
  r.z = test_support::random_tensor({b, c}, seed, 3.0f);
  r.ids = class_ids(b, c, seed + 1);
  r.hot = one_hot(r.ids, c);
  r.soft = soft_labels(b, c, seed + 2);
  r.w = uniform({b}, seed + 3, 0.0f, 2.0f);
  return r;
}

}  // namespace

// ---- softmax and log-softmax ----

TEST(VulkanLoss, SoftmaxAndLogSoftmax) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 1;
  std::vector<Shape> shapes{{1}, {5}, {3, 4, 7}, {2, 3, 1000}, {3, 5000}};
  for (int64_t b : kRows)
    for (int64_t c : kClasses) shapes.push_back({b, c});
  for (const Shape& s : shapes) {
    const Tensor x = test_support::random_tensor(s, seed++, 4.0f);
    for (OpKind op : {OpKind::Softmax, OpKind::LogSoftmax}) {
      SCOPED_TRACE(std::string(op_info(op).name) + " " + s.str());
      test_support::expect_same_as_cpu(make(op, {x}), vk, row_rtol(s[-1]), row_atol(s[-1]));
    }
  }
}

TEST(VulkanLoss, SoftmaxBackward) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 100;
  std::vector<Shape> shapes{{1}, {5}, {3, 4, 7}, {3, 5000}};
  for (int64_t b : kRows)
    for (int64_t c : kClasses) shapes.push_back({b, c});
  for (const Shape& s : shapes) {
    const Tensor x = test_support::random_tensor(s, seed++, 2.0f), g = test_support::random_tensor(s, seed++);
    for (auto [fwd, bwd] : {std::pair{OpKind::Softmax, OpKind::SoftmaxBackward},
                            std::pair{OpKind::LogSoftmax, OpKind::LogSoftmaxBackward}}) {
      SCOPED_TRACE(std::string(op_info(bwd).name) + " " + s.str());
      // y as the forward gives it, so that the gradient formulas see real outputs.
      const auto out = test_support::run_op(make(fwd, {x}), cpu_backend()).output;
      std::vector<float> yv(out.begin(), out.end());
      test_support::expect_same_as_cpu(make(bwd, {Tensor::from_vector(yv, s), g}), vk, row_rtol(s[-1]),
                                       row_atol(s[-1]));
    }
  }
}

// NaN anywhere in a row, +inf, or a row all -inf: the whole row NaN on the
// CPU; -inf among finite logits: probability 0 (log: -inf); 1e30: finite.
TEST(VulkanLoss, SoftmaxNonFinite) {
  TG_VULKAN_OR_SKIP(vk);
  for (int64_t c : {1, 2, 10, 33, 1000}) {
    Tensor x = test_support::random_tensor({7, c}, 7, 2.0f);
    at(x, 0) = kNaN;                                          // row 0: NaN first
    at(x, 1 * c + c - 1) = kNaN;                              // row 1: NaN last
    at(x, 2 * c + c / 2) = kInf;                              // row 2: +inf
    for (int64_t j = 0; j < c; ++j) at(x, 3 * c + j) = -kInf;  // row 3: all -inf
    at(x, 4 * c) = -kInf;                                     // row 4: one -inf
    at(x, 5 * c + c - 1) = 1e30f;                             // row 5: huge
    at(x, 6 * c) = -1e30f;                                    // row 6: huge negative
    for (OpKind op : {OpKind::Softmax, OpKind::LogSoftmax}) {
      SCOPED_TRACE(std::string(op_info(op).name) + " C=" + std::to_string(c));
      test_support::expect_same_as_cpu(make(op, {x}), vk, row_rtol(c), row_atol(c));
      expect_deterministic(make(op, {x}), vk);
    }
    Tensor g = test_support::random_tensor({7, c}, 8);
    at(g, 5 * c) = kNaN;
    for (OpKind op : {OpKind::SoftmaxBackward, OpKind::LogSoftmaxBackward})
      test_support::expect_same_as_cpu(make(op, {x, g}), vk, row_rtol(c), row_atol(c));
  }
}

// ---- softmax cross-entropy ----

TEST(VulkanLoss, SoftmaxCrossEntropy) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 200;
  for (int64_t b : kRows)
    for (int64_t c : kClasses) {
      const CeCase k = ce_case(b, c, seed += 10);
      for (const Tensor& labels : {k.ids, k.hot, k.soft}) {
        SCOPED_TRACE("B=" + std::to_string(b) + " C=" + std::to_string(c) + " labels " + labels.shape().str());
        test_support::expect_same_as_cpu(make(OpKind::SoftmaxCrossEntropy, {k.z, labels}), vk, 1e-5, row_atol(c));
        test_support::expect_same_as_cpu(make(OpKind::SoftmaxCrossEntropy, {k.z, labels, k.w}), vk, 1e-5,
                                         2 * row_atol(c));
      }
    }
}

// The CPU scales by g / B and by w_i, not by the weights' sum; its one-hot
// rows need not sum to 1 (probabilities times sum(t)).
TEST(VulkanLoss, SoftmaxCrossEntropyBackward) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 300;
  for (int64_t b : kRows)
    for (int64_t c : kClasses) {
      const CeCase k = ce_case(b, c, seed += 10);
      Tensor unnormalised = uniform({b, c}, seed + 5, 0.0f, 1.0f);
      const Tensor g = scalar(-1.7f);
      for (const Tensor& labels : {k.ids, k.hot, k.soft, unnormalised}) {
        SCOPED_TRACE("B=" + std::to_string(b) + " C=" + std::to_string(c) + " labels " + labels.shape().str());
        test_support::expect_same_as_cpu(make(OpKind::SoftmaxCrossEntropyBackward, {k.z, labels, g}), vk, 1e-5,
                                         grad_atol(c, 1.7f, 1.0f, b));
        test_support::expect_same_as_cpu(make(OpKind::SoftmaxCrossEntropyBackward, {k.z, labels, k.w, g}), vk,
                                         1e-5, grad_atol(c, 1.7f, 2.0f, b));
      }
    }
}

// NaN gives NaN, as on the CPU; -inf at a class whose target is 0 adds
// nothing (the CPU skips t_j == 0); a dense row with all-zero targets adds
// nothing even with NaN logits; 1e30 logits stay finite.
TEST(VulkanLoss, SoftmaxCrossEntropyNonFinite) {
  TG_VULKAN_OR_SKIP(vk);
  for (int64_t c : {2, 10, 33, 1000}) {
    SCOPED_TRACE("C=" + std::to_string(c));
    const CeCase k = ce_case(7, c, 400 + uint32_t(c));
    const int32_t* id = k.ids.data<int32_t>();
    auto both = [&](const Tensor& z, const Tensor& labels, bool want_nan) {
      for (bool weighted : {false, true}) {
        std::vector<Tensor> in{z, labels};
        if (weighted) in.push_back(k.w);
        const OpCase fwd = make(OpKind::SoftmaxCrossEntropy, in);
        test_support::expect_same_as_cpu(fwd, vk, 1e-5, 2 * row_atol(c));
        EXPECT_EQ(want_nan, std::isnan(test_support::run_op(fwd, vk).output[0]));
        expect_deterministic(fwd, vk);
        in.push_back(scalar(1.0f));
        const OpCase bwd = make(OpKind::SoftmaxCrossEntropyBackward, in);
        test_support::expect_same_as_cpu(bwd, vk, 1e-5, grad_atol(c, 1.0f, 2.0f, 7));
        expect_deterministic(bwd, vk);
      }
    };
    for (const Tensor& labels : {k.ids, k.hot}) {
      Tensor z = k.z.clone();
      at(z, 3 * c + (id[3] + 1) % c) = -kInf;  // -inf off the label: finite
      both(z, labels, false);
      Tensor huge = k.z.clone();
      at(huge, 2 * c + id[2]) = 1e30f;
      at(huge, 4 * c + (id[4] + 1) % c) = 1e30f;  // confidently wrong: a loss of 1e30
      at(huge, 5 * c + id[5]) = -1e30f;
      both(huge, labels, false);
      Tensor nan = k.z.clone();
      at(nan, 6 * c + c - 1) = kNaN;
      both(nan, labels, true);
      Tensor inf = k.z.clone();
      at(inf, 1 * c) = kInf;
      both(inf, labels, true);
    }
    // Row 6's targets all zero: its NaN logits add nothing on the CPU.
    Tensor hot = k.hot.clone(), z = k.z.clone();
    for (int64_t j = 0; j < c; ++j) at(hot, 6 * c + j) = 0.0f;
    at(z, 6 * c) = kNaN;
    both(z, hot, false);
  }
}

// An id outside [0, C): NaN on Vulkan (the CPU reads out of bounds in the
// forward, so it is not run there; its backward gives softmax without the
// target for that row, its other rows must match).
TEST(VulkanLoss, SoftmaxCrossEntropyOutOfRangeIds) {
  TG_VULKAN_OR_SKIP(vk);
  for (int64_t c : {1, 10, 1000}) {
    for (int32_t bad : {-1, int32_t(c), int32_t(c) + 1000000, std::numeric_limits<int32_t>::min()}) {
      SCOPED_TRACE("C=" + std::to_string(c) + " id " + std::to_string(bad));
      const CeCase k = ce_case(64, c, 500 + uint32_t(c));
      Tensor ids = k.ids.clone();
      ids.data<int32_t>()[17] = bad;
      // Both backends throw the same IndexError, the Vulkan one after the
      // submit from what its kernel reported (it reads nothing outside).
      const std::string want = "cross_entropy: class id " + std::to_string(bad) + " at position 17 is outside [0, " +
                               std::to_string(c) + ")";
      const OpCase fwd = make(OpKind::SoftmaxCrossEntropy, {k.z, ids});
      const OpCase bwd = make(OpKind::SoftmaxCrossEntropyBackward, {k.z, ids, k.w, scalar(1.0f)});
      for (const OpCase* op : {&fwd, &bwd})
        for (const std::shared_ptr<const Backend>& b : {vk, cpu_backend()}) {
          try {
            (void)test_support::run_op(*op, b);
            ADD_FAILURE() << b->name() << ": expected IndexError";
          } catch (const IndexError& e) {
            EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << b->name() << ": " << e.what();
          }
        }
    }
  }
}

// ---- element-wise losses ----

TEST(VulkanLoss, ElementwiseLosses) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 600;
  const OpKind forward[] = {OpKind::MseLoss, OpKind::MaeLoss, OpKind::HuberLoss, OpKind::BinaryCrossEntropy};
  const OpKind backward[] = {OpKind::MseLossBackward, OpKind::MaeLossBackward, OpKind::HuberLossBackward,
                             OpKind::BinaryCrossEntropyBackward};
  for (int64_t b : kRows)
    for (int64_t n : kClasses) {
      Tensor p = test_support::random_tensor({b, n}, seed++, 2.0f);
      const Tensor w_row = uniform({b}, seed++, 0.0f, 2.0f), w_el = uniform({b, n}, seed++, 0.0f, 2.0f);
      for (size_t o = 0; o < 4; ++o) {
        // Targets in [0, 1] for BCE; for the rest, some equal to p (MAE's sign 0).
        Tensor t = o == 3 ? uniform({b, n}, seed++, 0.0f, 1.0f) : test_support::random_tensor({b, n}, seed++);
        if (o != 3) at(t, 0) = at(p, 0);
        for (float delta : {1.0f, 0.3f}) {
          if (o != 2 && delta != 1.0f) continue;
          OpAttrs a;
          a.delta = delta;
          for (int wk = 0; wk < 3; ++wk) {
            SCOPED_TRACE(std::string(op_info(forward[o]).name) + " B=" + std::to_string(b) + " N=" +
                         std::to_string(n) + " weights " + std::to_string(wk));
            std::vector<Tensor> in{p, t};
            if (wk) in.push_back(wk == 1 ? w_row : w_el);
            test_support::expect_same_as_cpu(make(forward[o], in, a), vk, 1e-5, 1e-6);
            in.push_back(scalar(0.75f));
            test_support::expect_same_as_cpu(make(backward[o], in, a), vk, 1e-5,
                                             grad_atol(1, 0.75f, 2.0f, b * n));
          }
        }
      }
    }
}

// NaN and inf in predictions, targets and weights; BCE logits of 1e30 stay finite.
TEST(VulkanLoss, ElementwiseLossesNonFinite) {
  TG_VULKAN_OR_SKIP(vk);
  const OpKind ops[] = {OpKind::MseLoss,         OpKind::MaeLoss,         OpKind::HuberLoss,
                        OpKind::BinaryCrossEntropy, OpKind::MseLossBackward, OpKind::MaeLossBackward,
                        OpKind::HuberLossBackward, OpKind::BinaryCrossEntropyBackward};
  OpAttrs a;
  a.delta = 0.5f;
  Tensor t = uniform({7, 33}, 700, 0.0f, 1.0f);
  const Tensor w = uniform({7}, 701, 0.0f, 2.0f);
  for (int variant = 0; variant < 4; ++variant) {
    Tensor p = test_support::random_tensor({7, 33}, 702, 3.0f);
    Tensor tt = t.clone();
    if (variant == 0) {  // huge logits: finite BCE
      at(p, 3) = 1e30f;
      at(p, 40) = -1e30f;
      at(p, 77) = 1e30f;
      at(tt, 77) = 1.0f;
      at(p, 100) = 1e30f;
      at(tt, 100) = 0.9999999f;  // e = 1e30 (1 - y): cancels in float32
      at(p, 78) = 88.0f;
      at(p, 79) = -104.0f;
    } else if (variant == 1) {
      at(p, 5) = kNaN;
    } else if (variant == 2) {
      at(p, 9) = kInf;
      at(p, 10) = -kInf;
      at(tt, 9) = 1.0f;  // BCE: inf - inf
    } else {
      at(tt, 11) = kNaN;
    }
    for (OpKind op : ops) {
      SCOPED_TRACE(std::string(op_info(op).name) + " variant " + std::to_string(variant));
      const bool bwd = op >= OpKind::MseLossBackward;
      const double atol = bwd ? grad_atol(1, 2.0f, 2.0f, 7 * 33) : 1e-6;
      std::vector<Tensor> in{p, tt};
      if (bwd) in.push_back(scalar(2.0f));
      test_support::expect_same_as_cpu(make(op, in, a), vk, 1e-5, atol);
      expect_deterministic(make(op, in, a), vk);
      in.insert(in.begin() + 2, w);
      test_support::expect_same_as_cpu(make(op, in, a), vk, 1e-5, atol);
    }
    if (variant == 0) {
      // Alone, where a sum does not hide them: 1e30 (1 - y) needs max(z, 0) - z y exact to rounding; the
      // CPU's inf - inf y is NaN for y >= 0, -inf y inf for y > 0.
      const std::pair<float, float> alone[] = {{1e30f, 0.9999999f}, {1e30f, 1.0f}, {-1e30f, 1e-7f}, {kInf, 0.3f},
                                               {kInf, 0.0f},        {-kInf, 0.0f}, {-kInf, 0.5f}};
      for (auto [z, y] : alone) {
        SCOPED_TRACE("z " + std::to_string(z) + " y " + std::to_string(y));
        test_support::expect_same_as_cpu(
            make(OpKind::BinaryCrossEntropy, {Tensor::full({1, 1}, z), Tensor::full({1, 1}, y)}), vk, 1e-5, 0);
      }
      const auto bce = test_support::run_op(make(OpKind::BinaryCrossEntropy, {p, tt}), vk).output;
      EXPECT_TRUE(std::isfinite(bce[0]));
    }
  }
}

// ---- metrics ----

// Ties (argmax: the first), NaN (first column NaN: argmax 0; elsewhere
// skipped), one-hot labels, out-of-range ids (a miss on both).
TEST(VulkanLoss, AccuracyAndTopK) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 800;
  for (int64_t b : kRows)
    for (int64_t c : kClasses) {
      // Scores on a coarse grid, so that rows hold ties.
      Tensor z = test_support::random_tensor({b, c}, seed++, 2.0f);
      for (int64_t k = 0; k < b * c; ++k) at(z, k) = std::round(at(z, k));
      if (b > 1) at(z, c) = kNaN;
      if (b > 2) at(z, 2 * c + c - 1) = kNaN;
      if (b > 3) at(z, 3 * c) = kInf;
      if (b > 4) at(z, 4 * c + c / 2) = -kInf;
      Tensor ids = class_ids(b, c, seed++);
      Tensor hot = one_hot(ids, c);
      if (b > 5) {
        ids.data<int32_t>()[5] = int32_t(c);
        ids.data<int32_t>()[b - 1] = -3;
      }
      if (b > 6)
        for (int64_t j = 0; j < c; ++j) at(hot, 6 * c + j) = 0.0f;  // label: the first argmax, 0
      const Tensor soft = soft_labels(b, c, seed++);
      for (const Tensor& labels : {ids, hot, soft}) {
        SCOPED_TRACE("B=" + std::to_string(b) + " C=" + std::to_string(c) + " labels " + labels.shape().str());
        test_support::expect_same_as_cpu(make(OpKind::Accuracy, {z, labels}), vk, 0, 0);
        expect_deterministic(make(OpKind::Accuracy, {z, labels}), vk);
        for (int64_t k : {int64_t(1), int64_t(2), int64_t(5), c + 3, int64_t(1) << 40}) {
          OpAttrs a;
          a.k = k;
          test_support::expect_same_as_cpu(make(OpKind::TopKAccuracy, {z, labels}, a), vk, 0, 0);
        }
      }
    }
}

TEST(VulkanLoss, BinaryAccuracy) {
  TG_VULKAN_OR_SKIP(vk);
  uint32_t seed = 900;
  for (int64_t b : kRows)
    for (int64_t n : kClasses) {
      Tensor p = uniform({b, n}, seed++, 0.0f, 1.0f), t = uniform({b, n}, seed++, 0.0f, 1.0f);
      at(p, 0) = kNaN;
      if (b * n > 2) {
        at(t, 1) = kNaN;
        at(p, 2) = 0.5f;
      }
      for (float threshold : {0.5f, 0.0f, 0.9f}) {
        OpAttrs a;
        a.threshold = threshold;
        test_support::expect_same_as_cpu(make(OpKind::BinaryAccuracy, {p, t}, a), vk, 0, 0);
      }
    }
}

