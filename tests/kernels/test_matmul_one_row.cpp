// The one-row product (kernels/matmul.cpp): a {1, k} x {k, n} MatMul, the
// one-row predict of an agent acting, runs its own kernel (k split into
// interleaved partial sums) instead of libxsmm's. Checked against sums in
// double for the widths around its vector sizes (8 and 16 lanes, 2 vectors
// a pass, the columns left over), inner sizes around its 4 partial sums,
// with bias, folded ReLU, a transposed B, and the accumulated form
// (AccumulateGrad: acc += a B).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "tensorgrad/backend/executable.h"
#include "test_support.h"

using namespace tensorgrad;
using test_support::uniform;

namespace {

struct OneRowCase {
  int64_t k, n;
  bool bias, relu, trans_b;
};

std::string case_name(const OneRowCase& c) {
  return "k " + std::to_string(c.k) + ", n " + std::to_string(c.n) + (c.bias ? ", bias" : "") +
         (c.relu ? ", relu" : "") + (c.trans_b ? ", B transposed" : "");
}

// The float32 accumulation's error bound for k products of magnitude up to
// `scale`, with room for the order of the sums.
double tolerance(int64_t k, double scale) { return 4e-7 * double(k) * scale + 1e-6; }

std::vector<OneRowCase> cases() {
  std::vector<OneRowCase> out;
  for (int64_t k : {1, 3, 4, 5, 64, 131})
    for (int64_t n : {1, 2, 7, 8, 16, 17, 32, 33, 64, 100})
      for (int variant = 0; variant < 4; ++variant)
        out.push_back({k, n, variant == 1 || variant == 3, variant >= 2, variant == 3 && n % 2 == 1});
  out.push_back({784, 500, true, true, false});  // the MLP's first layer, one row
  return out;
}

}  // namespace

TEST(MatMulOneRow, EqualsTheDoubleSumWithBiasReluAndTransposedB) {
  std::mt19937 rng(5);
  for (const OneRowCase& c : cases()) {
    SCOPED_TRACE(case_name(c));
    const Tensor a = uniform({1, c.k}, rng, -1.0f, 1.0f);
    const Tensor b = uniform(c.trans_b ? Shape{c.n, c.k} : Shape{c.k, c.n}, rng, -1.0f, 1.0f);
    const Tensor bias = uniform({c.n}, rng, -1.0f, 1.0f);
    Graph g;
    std::vector<Value> in = {g.input("a", a.shape()), g.input("b", b.shape())};
    if (c.bias) in.push_back(g.input("bias", bias.shape()));
    OpAttrs at;
    at.trans_b = c.trans_b;
    Value y = g.apply(OpKind::MatMul, in, at);
    if (c.relu) y = g.apply(OpKind::Relu, {y});
    Executable exe(std::move(g), {y}, BatchRule{}, cpu_backend());
    exe.bind(in[0], a);
    exe.bind(in[1], b);
    if (c.bias) exe.bind(in[2], bias);
    exe.run();
    const std::vector<float> got = exe.output(y).to_vector(), va = a.to_vector(), vb = b.to_vector(),
                             vbias = bias.to_vector();
    ASSERT_EQ(got.size(), size_t(c.n));
    for (int64_t j = 0; j < c.n; ++j) {
      double s = c.bias ? vbias[size_t(j)] : 0.0;
      for (int64_t p = 0; p < c.k; ++p)
        s += double(va[size_t(p)]) * vb[size_t(c.trans_b ? j * c.k + p : p * c.n + j)];
      if (c.relu) s = std::max(s, 0.0);
      ASSERT_NEAR(got[size_t(j)], s, tolerance(c.k, 1.0)) << "column " << j;
    }
  }
}

// acc{1, n} += a{1, k} B{k, n}: the kernel starts from what acc holds.
TEST(MatMulOneRow, AccumulatedProductAddsToWhatTheAccumulatorHolds) {
  std::mt19937 rng(11);
  for (int64_t n : {5, 16, 48, 70}) {
    SCOPED_TRACE("n " + std::to_string(n));
    const int64_t k = 37;
    const Tensor acc = uniform({1, n}, rng, -1.0f, 1.0f), a = uniform({1, k}, rng, -1.0f, 1.0f),
                 b = uniform({k, n}, rng, -1.0f, 1.0f);
    const std::vector<float> before = acc.to_vector(), va = a.to_vector(), vb = b.to_vector();
    Graph g;
    const Value va_in = g.input("a", a.shape()), vb_in = g.input("b", b.shape());
    const Value y = g.apply(OpKind::AccumulateGrad, {g.state(acc, "acc"), va_in, vb_in}, OpAttrs{});
    Executable exe(std::move(g), {y}, BatchRule{}, cpu_backend());
    exe.bind(va_in, a);
    exe.bind(vb_in, b);
    exe.run();
    const std::vector<float> got = acc.to_vector();
    for (int64_t j = 0; j < n; ++j) {
      double s = before[size_t(j)];
      for (int64_t p = 0; p < k; ++p) s += double(va[size_t(p)]) * vb[size_t(p * n + j)];
      ASSERT_NEAR(got[size_t(j)], s, tolerance(k, 1.0)) << "column " << j;
    }
  }
}
