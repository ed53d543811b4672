// The mixed_bfloat16 policy (DTypePolicy::kMixedBFloat16): MatMul and the
// convolutions round their inputs to bfloat16 and accumulate in float32 on
// CPUs with AVX512-BF16, and compute in float32 elsewhere. Checked against
// sums in double of the bfloat16-rounded inputs (so a kernel that kept
// float32 inputs, or dropped the rounding of one operand, fails) and, on a
// machine without AVX512-BF16, against the float32 kernels bit for bit.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tensorgrad/backend/executable.h"
#include "test_support.h"

using namespace tensorgrad;
using test_support::uniform;

namespace {

// Round to nearest even, as vcvtneps2bf16 (finite inputs only here).
float bf16_round(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Runs one op on `inputs` under `policy` at `threads` threads.
std::vector<float> run_op(OpKind op, const std::vector<Tensor>& inputs, const OpAttrs& at, DTypePolicy policy,
                          int threads) {
  const int saved = num_threads();
  set_num_threads(threads);
  Graph g;
  std::vector<Value> in;
  for (size_t i = 0; i < inputs.size(); ++i) in.push_back(g.input("in" + std::to_string(i), inputs[i].shape()));
  const Value y = g.apply(op, in, at);
  Executable exe(std::move(g), {y}, BatchRule{}, cpu_backend(policy));
  for (size_t i = 0; i < inputs.size(); ++i) exe.bind(in[i], inputs[i]);
  exe.run();
  std::vector<float> out = exe.output(y).to_vector();
  set_num_threads(saved);
  return out;
}

// The float32 accumulation's error bound for a sum of k products of
// magnitude up to `scale`, with room for the order of the sums.
double tolerance(int64_t k, double scale) { return 4e-7 * double(k) * scale + 1e-6; }

struct MatMulCase {
  const char* name;
  int64_t m, k, n;
  bool trans_a, trans_b, bias;
  int64_t batch;  // 0: two-dimensional
  bool bf16;      // computed in bfloat16: m, n and k at least 16 (else float32, where packing costs more)
};

const std::vector<MatMulCase> kMatMulCases = {
    {"square", 64, 64, 64, false, false, false, 0, true},
    {"dense_784_500", 300, 784, 120, false, false, true, 0, true},
    {"odd_k", 37, 51, 29, false, false, false, 0, true},
    {"weight_gradient_trans_a", 90, 301, 40, true, false, false, 0, true},
    {"input_gradient_trans_b", 200, 70, 95, false, true, false, 0, true},
    {"both_transposed_odd", 33, 17, 19, true, true, false, 0, true},
    {"narrow_output_float32", 500, 64, 10, false, false, true, 0, false},
    {"short_inner_float32", 64, 10, 784, false, true, false, 0, false},
    {"batched", 20, 30, 18, false, true, false, 3, true},
};

std::vector<double> matmul_reference(const MatMulCase& c, const std::vector<float>& a, const std::vector<float>& b,
                                     const std::vector<float>& bias, bool round, double* scale) {
  const int64_t entries = c.batch ? c.batch : 1;
  std::vector<double> out(size_t(entries * c.m * c.n));
  *scale = 0.0;
  auto r = [&](float v) { return double(round ? bf16_round(v) : v); };
  for (int64_t e = 0; e < entries; ++e)
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) {
        double s = c.bias ? bias[size_t(j)] : 0.0;
        for (int64_t p = 0; p < c.k; ++p) {
          const float av = c.trans_a ? a[size_t(e * c.k * c.m + p * c.m + i)] : a[size_t(e * c.m * c.k + i * c.k + p)];
          const float bv = c.trans_b ? b[size_t(e * c.n * c.k + j * c.k + p)] : b[size_t(e * c.k * c.n + p * c.n + j)];
          s += r(av) * r(bv);
          *scale = std::max(*scale, std::abs(double(av) * bv));
        }
        out[size_t((e * c.m + i) * c.n + j)] = s;
      }
  return out;
}

}  // namespace

TEST(BFloat16, PolicyNamesAndBackend) {
  EXPECT_STREQ(dtype_policy_name(DTypePolicy::kFloat32), "float32");
  EXPECT_STREQ(dtype_policy_name(DTypePolicy::kMixedBFloat16), "mixed_bfloat16");
  EXPECT_EQ(cpu_backend(DTypePolicy::kFloat32), cpu_backend());
  EXPECT_EQ(cpu_backend(DTypePolicy::kMixedBFloat16)->dtype_policy(), DTypePolicy::kMixedBFloat16);
  EXPECT_EQ(cpu_backend(DTypePolicy::kMixedBFloat16)->name(), "cpu (mixed_bfloat16)");
  EXPECT_TRUE(test_support::throws<ValueError>(
      [] { backend(Device::CUDA, DTypePolicy::kMixedBFloat16); }, {"mixed_bfloat16", "CPU only", "Device::CPU"}));
}

// Every MatMul form (transposes, odd inner sizes padded to pairs, bias,
// batched entries, one and two threads) equals the double sum of the
// bfloat16-rounded operands up to float32 accumulation, and differs from the
// unrounded product by more than that (so the rounding really happens);
// products under 16 along a side stay float32 (the float32 backend's bits).
TEST(BFloat16, MatMulRoundsInputsAndAccumulatesInFloat32) {
  if (!bfloat16_supported()) GTEST_SKIP() << "this CPU has no AVX512-BF16; the policy computes in float32 here";
  for (const MatMulCase& c : kMatMulCases) {
    SCOPED_TRACE(c.name);
    std::mt19937 rng(91);
    const int64_t entries = c.batch ? c.batch : 1;
    Shape sa = c.trans_a ? Shape{c.k, c.m} : Shape{c.m, c.k}, sb = c.trans_b ? Shape{c.n, c.k} : Shape{c.k, c.n};
    if (c.batch) sa = Shape{c.batch, sa[0], sa[1]}, sb = Shape{c.batch, sb[0], sb[1]};
    const Tensor a = uniform(sa, rng, -1.0f, 1.0f), b = uniform(sb, rng, -1.0f, 1.0f);
    const Tensor bias = uniform({c.n}, rng, -1.0f, 1.0f);
    OpAttrs at;
    at.trans_a = c.trans_a;
    at.trans_b = c.trans_b;
    std::vector<Tensor> inputs = {a, b};
    if (c.bias) inputs.push_back(bias);
    double scale = 0.0;
    const std::vector<double> rounded =
        matmul_reference(c, a.to_vector(), b.to_vector(), bias.to_vector(), true, &scale);
    const std::vector<double> exact = matmul_reference(c, a.to_vector(), b.to_vector(), bias.to_vector(), false, &scale);
    const double tol = tolerance(c.k, scale);
    for (int threads : {1, 2}) {
      SCOPED_TRACE("threads " + std::to_string(threads));
      const std::vector<float> got = run_op(OpKind::MatMul, inputs, at, DTypePolicy::kMixedBFloat16, threads);
      ASSERT_EQ(got.size(), size_t(entries * c.m * c.n));
      if (!c.bf16) {
        EXPECT_EQ(got, run_op(OpKind::MatMul, inputs, at, DTypePolicy::kFloat32, threads));
        continue;
      }
      double off_exact = 0.0;
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], rounded[i], tol) << "element " << i;
        off_exact = std::max(off_exact, std::abs(got[i] - exact[i]));
      }
      EXPECT_GT(off_exact, 10 * tol) << "the product equals the float32 one: the inputs were not rounded";
    }
  }
}

// The weight gradient accumulated in place (AccumulateGrad's product form,
// acc += A^T B, which gradient accumulation over micro-batches uses) takes
// the same bfloat16 path and adds to what the accumulator held.
TEST(BFloat16, AccumulatedProductAddsTheRoundedProduct) {
  if (!bfloat16_supported()) GTEST_SKIP() << "this CPU has no AVX512-BF16; the policy computes in float32 here";
  std::mt19937 rng(7);
  const int64_t m = 48, k = 130, n = 33;
  const Tensor acc = uniform({m, n}, rng, -1.0f, 1.0f), a = uniform({k, m}, rng, -1.0f, 1.0f),
               b = uniform({k, n}, rng, -1.0f, 1.0f);
  OpAttrs at;
  at.trans_a = true;
  const std::vector<float> va = a.to_vector(), vb = b.to_vector(), vacc = acc.to_vector();
  Graph g;
  const Value va_in = g.input("a", a.shape()), vb_in = g.input("b", b.shape());
  const Value y = g.apply(OpKind::AccumulateGrad, {g.state(acc, "acc"), va_in, vb_in}, at);
  Executable exe(std::move(g), {y}, BatchRule{}, cpu_backend(DTypePolicy::kMixedBFloat16));
  exe.bind(va_in, a);
  exe.bind(vb_in, b);
  exe.run();
  const std::vector<float> got = acc.to_vector();
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0.0;
      for (int64_t p = 0; p < k; ++p) s += double(bf16_round(va[size_t(p * m + i)])) * bf16_round(vb[size_t(p * n + j)]);
      ASSERT_NEAR(got[size_t(i * n + j)], vacc[size_t(i * n + j)] + s, tolerance(k, 1.0)) << i << "," << j;
    }
}

// Another library in the process (oneDNN, say) may configure this thread's
// AMX tiles its own way, or release them, between two of the policy's
// products: each product loads its own configuration, so the results stay
// the same (a configuration kept per thread raised SIGILL after a release).
namespace {
struct alignas(64) OtherTileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {32, 32, 32, 32, 32, 32, 32, 32};
  uint8_t rows[16] = {8, 8, 8, 8, 8, 8, 8, 8};
};
// Static: GCC 12's _tile_loadconfig declares only 8 bytes of its operand read.
constexpr OtherTileConfig kOtherTileConfig{};
__attribute__((target("amx-tile"))) void configure_other_tiles() { _tile_loadconfig(&kOtherTileConfig); }
__attribute__((target("amx-tile"))) void release_tiles() { _tile_release(); }
}  // namespace

TEST(BFloat16, MatMulOnAmxAfterAnotherLibraryConfiguresTheTiles) {
  if (!bfloat16_supported() || bfloat16_convolutions_supported()) GTEST_SKIP() << "this CPU has no AMX tiles";
  std::mt19937 rng(23);
  const std::vector<Tensor> inputs = {uniform({64, 96}, rng, -1.0f, 1.0f), uniform({96, 48}, rng, -1.0f, 1.0f)};
  const std::vector<float> want = run_op(OpKind::MatMul, inputs, OpAttrs{}, DTypePolicy::kMixedBFloat16, 1);
  configure_other_tiles();
  EXPECT_EQ(run_op(OpKind::MatMul, inputs, OpAttrs{}, DTypePolicy::kMixedBFloat16, 1), want);
  release_tiles();
  EXPECT_EQ(run_op(OpKind::MatMul, inputs, OpAttrs{}, DTypePolicy::kMixedBFloat16, 1), want);
}

// Without AVX512-BF16 the policy is float32: the same bits as the float32 backend.
TEST(BFloat16, WithoutAvx512Bf16ThePolicyComputesInFloat32) {
  if (bfloat16_supported()) GTEST_SKIP() << "this CPU has AVX512-BF16 (the rounding tests cover it)";
  for (const MatMulCase& c : kMatMulCases) {
    SCOPED_TRACE(c.name);
    std::mt19937 rng(5);
    Shape sa = c.trans_a ? Shape{c.k, c.m} : Shape{c.m, c.k}, sb = c.trans_b ? Shape{c.n, c.k} : Shape{c.k, c.n};
    if (c.batch) sa = Shape{c.batch, sa[0], sa[1]}, sb = Shape{c.batch, sb[0], sb[1]};
    OpAttrs at;
    at.trans_a = c.trans_a;
    at.trans_b = c.trans_b;
    const std::vector<Tensor> inputs = {uniform(sa, rng, -1.0f, 1.0f), uniform(sb, rng, -1.0f, 1.0f)};
    EXPECT_EQ(run_op(OpKind::MatMul, inputs, at, DTypePolicy::kMixedBFloat16, 2),
              run_op(OpKind::MatMul, inputs, at, DTypePolicy::kFloat32, 2));
  }
}

// A model compiled with the policy trains: weights and optimizer state stay
// float32, the loss falls as the float32 model's does (within bfloat16's
// rounding), and its weights differ from the float32 run's only where the
// CPU computes in bfloat16 (bit-equal where it cannot).
TEST(BFloat16, MixedPolicyModelTrainsWithFloat32Weights) {
  std::mt19937 rng(3);
  const Tensor x = uniform({256, 24}, rng, -1.0f, 1.0f);  // 24 inputs: the first Dense's GEMMs run in bfloat16
  std::vector<int32_t> ids(256);
  const std::vector<float> vx = x.to_vector();
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = (vx[i * 24] + vx[i * 24 + 1] > 0.0f ? 1 : 0) + (vx[i * 24 + 2] > 0.5f ? 1 : 0);
  const Tensor y = Tensor::from_vector(ids, Shape{256});
  auto train = [&](DTypePolicy policy, std::vector<double>* losses) {
    manual_seed(11);
    nn::Sequential m(Shape{24});
    m.add(nn::Dense(64, "relu"));
    m.add(nn::Dense(3, "softmax"));
    m.compile(OptimizerSpec::adam(1e-2f), "sparse_categorical_crossentropy", {"accuracy"}, policy);
    EXPECT_EQ(m.dtype_policy(), policy);
    nn::FitOptions f;
    f.epochs = 8;
    f.batch_size = 64;
    f.verbose = 0;
    *losses = m.fit(x, y, f)["loss"];
    std::vector<float> w;
    for (const nn::Weight& wt : m.weights()) {
      EXPECT_EQ(wt.value.dtype(), DType::Float32) << wt.name;
      const std::vector<float> v = wt.value.to_vector();
      w.insert(w.end(), v.begin(), v.end());
    }
    return w;
  };
  std::vector<double> loss32, loss16;
  const std::vector<float> w32 = train(DTypePolicy::kFloat32, &loss32), w16 = train(DTypePolicy::kMixedBFloat16, &loss16);
  ASSERT_EQ(loss16.size(), 8u);
  EXPECT_LT(loss16.back(), 0.6 * loss16.front());
  EXPECT_NEAR(loss16.back(), loss32.back(), 0.05 * loss32.back());
  if (bfloat16_supported())
    EXPECT_NE(w16, w32) << "the mixed policy trained in float32 on a CPU with AVX512-BF16";
  else
    EXPECT_EQ(w16, w32);
}

namespace {

struct ConvCase {
  const char* name;
  Shape x;  // {B, H, W, C}
  Window2D w;
  int64_t filters;
  bool bf16_filter_gradient;  // its GEMMs ({C or kh*kw*C, F} over Wo) at least 16 along every side
};

// Direct sums in double of the forward convolution (with a bias), its input
// gradient and its filter gradient, on the inputs rounded to bfloat16 or not.
struct ConvReference {
  std::vector<double> y, dx, dk;
};
ConvReference conv_reference(const ConvCase& c, const std::vector<float>& x, const std::vector<float>& k,
                             const std::vector<float>& bias, const std::vector<float>& g, bool round) {
  const int64_t B = c.x[0], H = c.x[1], W = c.x[2], C = c.x[3], F = c.filters;
  const int64_t Ho = c.w.out_h(H), Wo = c.w.out_w(W);
  auto r = [&](float v) { return double(round ? bf16_round(v) : v); };
  ConvReference out{std::vector<double>(size_t(B * Ho * Wo * F)), std::vector<double>(x.size()),
                    std::vector<double>(k.size())};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t oy = 0; oy < Ho; ++oy)
      for (int64_t ox = 0; ox < Wo; ++ox) {
        double* yrow = out.y.data() + ((b * Ho + oy) * Wo + ox) * F;
        for (int64_t f = 0; f < F; ++f) yrow[f] = bias[size_t(f)];
        for (int64_t ky = 0; ky < c.w.kh; ++ky)
          for (int64_t kx = 0; kx < c.w.kw; ++kx) {
            const int64_t iy = oy * c.w.sh + ky * c.w.dh - c.w.pad_top, ix = ox * c.w.sw + kx * c.w.dw - c.w.pad_left;
            if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
            for (int64_t ch = 0; ch < C; ++ch) {
              const size_t xi = size_t(((b * H + iy) * W + ix) * C + ch);
              for (int64_t f = 0; f < F; ++f) {
                const size_t ki = size_t(((ky * c.w.kw + kx) * C + ch) * F + f);
                const double gv = r(g[size_t(((b * Ho + oy) * Wo + ox) * F + f)]);
                yrow[f] += r(x[xi]) * r(k[ki]);
                out.dx[xi] += gv * r(k[ki]);
                out.dk[ki] += r(x[xi]) * gv;
              }
            }
          }
      }
  return out;
}

const std::vector<ConvCase> kConvCases = {
    {"one_channel_same", {2, 7, 9, 1}, test_support::window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1), 8, false},
    {"odd_channels_filters_and_width", {2, 6, 7, 3}, test_support::window(3, 3, 1, 1), 5, false},
    {"sixteen_channels_same", {3, 8, 8, 16}, test_support::window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1), 16, false},
    {"sixteen_channels_odd_width", {2, 5, 17, 16}, test_support::window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1), 16, true},
    {"two_channels_taps_as_rows", {2, 4, 19, 2}, test_support::window(3, 3, 1, 1, 1, 1, 1, 1, 1, 1), 16, true},
    {"dilation_and_pads", {2, 9, 10, 10}, test_support::window(2, 3, 1, 1, 2, 2, 1, 0, 0, 2), 7, false},
    {"row_of_75_pixels", {1, 3, 75, 2}, test_support::window(1, 3, 1, 1, 1, 1, 0, 1, 0, 1), 4, false},
    {"strided", {2, 9, 9, 6}, test_support::window(3, 3, 2, 2, 1, 1, 1, 1, 1, 1), 8, false},
};

}  // namespace

// Conv2D, its input gradient and its filter gradient under the policy equal
// the double sums of the bfloat16-rounded operands up to float32
// accumulation, and differ from the unrounded sums by more than that: odd
// channel, filter and width counts (padded to pairs), few channels, long
// rows, dilation, one and two threads. The strided backward ops, and filter
// gradients whose GEMMs are under 16 along a side, stay float32 (the same
// bits as the float32 backend), as every convolution does on a CPU with AMX.
TEST(BFloat16, ConvolutionsRoundInputsAndAccumulateInFloat32) {
  if (!bfloat16_supported()) GTEST_SKIP() << "this CPU has no AVX512-BF16; the policy computes in float32 here";
  for (const ConvCase& c : kConvCases) {
    SCOPED_TRACE(std::string(c.name) + " " + c.x.str() + " " + test_support::window_str(c.w));
    const int64_t B = c.x[0], C = c.x[3], F = c.filters, Ho = c.w.out_h(c.x[1]), Wo = c.w.out_w(c.x[2]);
    std::mt19937 rng(17);
    const Shape ks{c.w.kh, c.w.kw, C, F};
    const Tensor x = uniform(c.x, rng, -1.0f, 1.0f), k = uniform(ks, rng, -1.0f, 1.0f),
                 bias = uniform({F}, rng, -1.0f, 1.0f), g = uniform({B, Ho, Wo, F}, rng, -1.0f, 1.0f);
    const ConvReference rounded = conv_reference(c, x.to_vector(), k.to_vector(), bias.to_vector(), g.to_vector(), true);
    const ConvReference exact = conv_reference(c, x.to_vector(), k.to_vector(), bias.to_vector(), g.to_vector(), false);
    OpAttrs fwd, bwd_in, bwd_k;
    fwd.window = bwd_in.window = bwd_k.window = c.w;
    bwd_in.shape = c.x;
    bwd_k.shape = ks;
    const bool strided = c.w.sw != 1 || c.w.sh != 1;
    struct Check {
      const char* what;
      OpKind op;
      std::vector<Tensor> in;
      const OpAttrs* at;
      const std::vector<double>* want;
      const std::vector<double>* unrounded;
      int64_t terms;
      bool float32;  // computed in float32 under the policy
    };
    // With AMX the convolutions stay float32 (bfloat16_convolutions_supported).
    const bool in_float32 = !bfloat16_convolutions_supported();
    const std::vector<Check> checks = {
        {"forward", OpKind::Conv2D, {x, k, bias}, &fwd, &rounded.y, &exact.y, c.w.kh * c.w.kw * C + 1, in_float32},
        {"input gradient", OpKind::Conv2DBackwardInput, {g, k}, &bwd_in, &rounded.dx, &exact.dx, c.w.kh * c.w.kw * F,
         in_float32 || strided},
        {"filter gradient", OpKind::Conv2DBackwardFilter, {x, g}, &bwd_k, &rounded.dk, &exact.dk, B * Ho * Wo,
         in_float32 || !c.bf16_filter_gradient},
    };
    for (const Check& ch : checks) {
      SCOPED_TRACE(ch.what);
      for (int threads : {1, 2}) {
        SCOPED_TRACE("threads " + std::to_string(threads));
        const std::vector<float> got = run_op(ch.op, ch.in, *ch.at, DTypePolicy::kMixedBFloat16, threads);
        ASSERT_EQ(got.size(), ch.want->size());
        if (ch.float32) {
          EXPECT_EQ(got, run_op(ch.op, ch.in, *ch.at, DTypePolicy::kFloat32, threads));
          continue;
        }
        const double tol = tolerance(ch.terms, 1.0);
        double off_exact = 0.0;
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_NEAR(got[i], (*ch.want)[i], tol) << "element " << i;
          off_exact = std::max(off_exact, std::abs(got[i] - (*ch.unrounded)[i]));
        }
        EXPECT_GT(off_exact, 10 * tol) << "equals the float32 result: the inputs were not rounded";
      }
    }
  }
}
