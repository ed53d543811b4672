// Updates of persistent state as graph ops or copies (issue 13, a device
// seam; DESIGN.md "State lives on the device, in tensors"): the PolyakUpdate
// and Assign ops, Trainer::update_target built on them, the learning rate and
// step counter written and read by copies, Executable::copy_output and the
// random counter.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "test_support.h"
#include "tensorgrad/tensorgrad.h"

using namespace tensorgrad;
using test_support::throws;

namespace {

using test_support::ThreadsGuard;

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// tau * s + (1 - tau) * t in float, either rounding the compiler may pick for
// the library: each product rounded, or one of them fused into the add (FMA).
::testing::AssertionResult is_polyak(float got, float tau, float s, float t) {
  volatile float a = tau * s, b = (1.0f - tau) * t;  // volatile: no contraction here
  const float plain = a + b, fused_s = std::fma(tau, s, b), fused_t = std::fma(1.0f - tau, t, a);
  if (got == plain || got == fused_s || got == fused_t) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << got << " is not " << tau << " * " << s << " + (1 - " << tau << ") * " << t
                                       << " = " << plain;
}

std::vector<std::vector<float>> weight_values(const nn::Model& m) {
  std::vector<std::vector<float>> out;
  for (const nn::Weight& w : m.weights()) out.push_back(w.value.to_vector());
  return out;
}

// Dense -> BatchNormalization -> Dense: averaged weights and copied statistics.
nn::Sequential build_bn_model() {
  manual_seed(5);
  nn::clear_session();
  nn::Sequential m({4});
  m.add(nn::Dense(8));
  m.add(nn::BatchNormalization(0.9f));
  m.add(nn::ActivationLayer("relu"));
  m.add(nn::Dense(3));
  m.compile(OptimizerSpec::adam(1e-2f), "mse");
  return m;
}

}  // namespace

TEST(StateUpdateOps, InTheOpTableInPlaceAndWithoutGradient) {
  const OpInfo& polyak = op_info(OpKind::PolyakUpdate);
  EXPECT_STREQ(polyak.name, "polyak_update");
  EXPECT_TRUE(polyak.in_place);
  EXPECT_EQ(polyak.min_inputs, 3);
  EXPECT_EQ(polyak.max_inputs, 3);
  const OpInfo& assign = op_info(OpKind::Assign);
  EXPECT_STREQ(assign.name, "assign");
  EXPECT_TRUE(assign.in_place);
  EXPECT_EQ(assign.min_inputs, 2);
  EXPECT_EQ(assign.max_inputs, 2);

  // A backward walk that reaches either op stops with the op named.
  for (OpKind op : {OpKind::PolyakUpdate, OpKind::Assign}) {
    Tensor target = Tensor::zeros({3}), source = Tensor::full({3}, 1.0f), tau = Tensor::full({}, 0.5f);
    Graph g;
    Value t = g.state(target, "target");
    Value s = g.parameter(source, "source", true);
    Value u = op == OpKind::PolyakUpdate ? g.apply(op, {t, s, g.state(tau, "tau")}) : g.apply(op, {t, s});
    Value loss = g.sum(u);
    const Value wrt[] = {s};
    EXPECT_TRUE(throws<Error>([&] { g.gradients(loss, wrt); }, {op_info(op).name, "no gradient rule"}));
  }
}

TEST(StateUpdateOps, PolyakUpdateComputesTheFormulaInPlace) {
  const std::vector<float> t0 = random_values(37, 1), s0 = random_values(37, 2);
  Tensor target = Tensor::from_vector(t0, {37}), source = Tensor::from_vector(s0, {37});
  Tensor tau = Tensor::full({}, 0.3f);  // a {} tau; {1} below
  Graph g;
  Value u = g.apply(OpKind::PolyakUpdate, {g.state(target, "target"), g.state(source, "source"), g.state(tau, "tau")});
  Executable exe(std::move(g), {u});
  exe.run();
  std::vector<float> want = t0;
  const std::vector<float> got = target.to_vector(), out = exe.output(u).to_vector();
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_TRUE(is_polyak(got[i], 0.3f, s0[i], t0[i])) << "element " << i;
    EXPECT_EQ(out[i], got[i]) << "the output aliases the target";
  }
  EXPECT_EQ(source.to_vector(), s0) << "the source is read only";
  // Known values, exact in any rounding: 0.5 * 4 + 0.5 * 2 = 3.
  Tensor t2 = Tensor::full({2}, 2.0f), s2 = Tensor::full({2}, 4.0f), half = Tensor::full({1}, 0.5f);
  Graph h;
  h.apply(OpKind::PolyakUpdate, {h.state(t2, "t"), h.state(s2, "s"), h.state(half, "tau")});
  Executable run2(std::move(h), {});
  run2.run();
  EXPECT_EQ(t2.to_vector(), (std::vector<float>{3.0f, 3.0f}));
  // tau is a tensor: a new value takes effect at the next run, without a rebuild.
  half.copy_from(Tensor::full({1}, 0.25f));
  run2.run();  // 0.25 * 4 + 0.75 * 3 = 3.25
  EXPECT_EQ(t2.to_vector(), (std::vector<float>{3.25f, 3.25f}));
}

TEST(StateUpdateOps, PolyakUpdateAtTauOneAndAssignCopyExactly) {
  // tau = 1 copies: an infinite or NaN old value does not leak through 0 * t.
  Tensor target = Tensor::from_vector(std::vector<float>{INFINITY, NAN, 1.0f}, {3});
  Tensor source = Tensor::from_vector(std::vector<float>{1.5f, -0.0f, NAN}, {3});
  Tensor one = Tensor::full({1}, 1.0f);
  Graph g;
  g.apply(OpKind::PolyakUpdate, {g.state(target, "t"), g.state(source, "s"), g.state(one, "tau")});
  Executable(std::move(g), {}).run();
  const std::vector<float> got = target.to_vector();
  EXPECT_EQ(got[0], 1.5f);
  EXPECT_TRUE(std::signbit(got[1]) && got[1] == 0.0f);
  EXPECT_TRUE(std::isnan(got[2]));

  // Assign copies any dtype, bit for bit.
  Tensor counter = Tensor::zeros({2}, DType::Int64), value = Tensor::zeros({2}, DType::Int64);
  value.data<int64_t>()[0] = (int64_t(1) << 60) + 1;
  value.data<int64_t>()[1] = -7;
  Graph h;
  h.apply(OpKind::Assign, {h.state(counter, "counter"), h.state(value, "value")});
  Executable(std::move(h), {}).run();
  EXPECT_EQ(counter.data<int64_t>()[0], (int64_t(1) << 60) + 1);
  EXPECT_EQ(counter.data<int64_t>()[1], -7);
}

TEST(StateUpdateOps, ShapeRulesRefuseMismatches) {
  Tensor a = Tensor::zeros({3}), b = Tensor::zeros({4}), tau = Tensor::full({1}, 0.5f), taus = Tensor::zeros({2});
  Tensor ints = Tensor::zeros({3}, DType::Int32);
  Graph g;
  Value va = g.state(a, "a"), vb = g.state(b, "b"), vt = g.state(tau, "tau"), vts = g.state(taus, "taus"),
        vi = g.state(ints, "ints");
  EXPECT_TRUE(throws<ShapeError>([&] { g.apply(OpKind::PolyakUpdate, {va, vb, vt}); }, {"polyak_update", "differ"}));
  EXPECT_TRUE(throws<ShapeError>([&] { g.apply(OpKind::PolyakUpdate, {va, va, vts}); }, {"tau", "{2}"}));
  EXPECT_TRUE(throws<TypeError>([&] { g.apply(OpKind::PolyakUpdate, {vi, vi, vt}); }, {"polyak_update"}));
  EXPECT_TRUE(throws<ShapeError>([&] { g.apply(OpKind::Assign, {va, vb}); }, {"assign", "differ"}));
  EXPECT_TRUE(throws<TypeError>([&] { g.apply(OpKind::Assign, {va, vi}); }, {"assign", "float32", "int32"}));
  // In place: the target must be persistent, not an intermediate.
  Value x = g.scale(va, 2.0f);
  EXPECT_TRUE(throws<Error>([&] { g.apply(OpKind::Assign, {x, va}); }, {"in place", "persistent"}));
}

// AccumulateGrad's product form, acc += op(A) op(B) in one GEMM (what the
// optimizer writes for a Dense layer's weight gradient into its
// accumulator), against a double-precision reference, for every transpose
// and for shapes that reach both GEMM libraries (libxsmm for small
// products, OpenBLAS for a long-k A^T), at 1 and 2 threads.
TEST(StateUpdateOps, AccumulateGradProductFormAddsTheProductToTheAccumulator) {
  ThreadsGuard threads;
  struct Case {
    int64_t m, n, k;
    bool ta, tb;
  };
  // B^T of 8 or more rows and columns is turned around in 8x8 tiles, with
  // the remainders element by element: {19, 13} and {16, 24} take both.
  const Case cases[] = {{5, 7, 3, false, false}, {6, 4, 9, true, false},   {8, 5, 6, false, true},
                        {3, 4, 5, true, true},   {200, 96, 300, true, false}, {21, 19, 13, false, true},
                        {17, 16, 24, true, true}};
  for (int t : {1, 2}) {
    set_num_threads(t);
    for (const Case& c : cases) {
      const Shape sa = c.ta ? Shape{c.k, c.m} : Shape{c.m, c.k}, sb = c.tb ? Shape{c.n, c.k} : Shape{c.k, c.n};
      const std::vector<float> a0 = random_values(size_t(sa.numel()), 11), b0 = random_values(size_t(sb.numel()), 12),
                               acc0 = random_values(size_t(c.m * c.n), 13);
      Tensor acc = Tensor::from_vector(acc0, {c.m, c.n}), a = Tensor::from_vector(a0, sa),
             b = Tensor::from_vector(b0, sb);
      Graph g;
      OpAttrs at;
      at.trans_a = c.ta;
      at.trans_b = c.tb;
      g.apply(OpKind::AccumulateGrad, {g.state(acc, "acc"), g.state(a, "a"), g.state(b, "b")}, at);
      Executable(std::move(g), {}).run();
      const std::vector<float> got = acc.to_vector();
      for (int64_t i = 0; i < c.m; ++i)
        for (int64_t j = 0; j < c.n; ++j) {
          double want = acc0[size_t(i * c.n + j)];
          for (int64_t p = 0; p < c.k; ++p)
            want += double(a0[size_t(c.ta ? p * c.m + i : i * c.k + p)]) *
                    double(b0[size_t(c.tb ? j * c.k + p : p * c.n + j)]);
          ASSERT_NEAR(got[size_t(i * c.n + j)], want, 1e-4 * (1.0 + std::abs(want)))
              << c.m << "x" << c.n << "x" << c.k << (c.ta ? " A^T" : "") << (c.tb ? " B^T" : "") << " at " << t
              << " threads, element (" << i << ", " << j << ")";
        }
    }
  }
  // The shape rule: rank-2 operands whose product is the accumulator's shape.
  Tensor acc = Tensor::zeros({2, 3});
  Graph g;
  Value va = g.state(acc, "acc");
  EXPECT_TRUE(throws<ShapeError>([&] { g.apply(OpKind::AccumulateGrad, {va, g.input("a", {2, 4}), g.input("b", {4, 5})}); },
                                 {"accumulate_grad", "{2, 3}", "{2, 5}"}));
  EXPECT_TRUE(throws<ShapeError>([&] { g.apply(OpKind::AccumulateGrad, {va, g.input("c", {2, 2, 4}), g.input("d", {2, 4, 3})}); },
                                 {"accumulate_grad", "rank 2"}));
  EXPECT_TRUE(throws<ShapeError>([&] { g.apply(OpKind::AccumulateGrad, {va, g.input("e", {2, 4}), g.input("f", {5, 3})}); },
                                 {"inner dimensions"}));
}

TEST(StateUpdates, UpdateTargetCopiesBitForBitAtTauOneAndAveragesAtTauPointThree) {
  ThreadsGuard threads;
  set_num_threads(1);
  nn::Sequential m = build_bn_model();
  nn::Trainer tr(m, {.batch_size = 16});
  nn::Model target = tr.snapshot();
  const Tensor x = Tensor::from_vector(random_values(64, 3), {16, 4});
  const Tensor y = Tensor::from_vector(random_values(48, 4), {16, 3});
  for (int i = 0; i < 3; ++i) tr.step(x, y);
  const std::vector<nn::Weight> ws = tr.weights();
  const auto old = weight_values(target);
  std::vector<std::vector<float>> live;
  for (const nn::Weight& w : ws) live.push_back(w.value.to_vector());
  ASSERT_NE(old, live);

  tr.update_target(target, 0.3f);
  const auto mid = weight_values(target);
  for (size_t k = 0; k < mid.size(); ++k)
    for (size_t i = 0; i < mid[k].size(); ++i) {
      if (!ws[k].averaged) ASSERT_EQ(mid[k][i], live[k][i]) << ws[k].name << " is copied whole";
      else ASSERT_TRUE(is_polyak(mid[k][i], 0.3f, live[k][i], old[k][i])) << ws[k].name << " element " << i;
    }
  // Another tau on the same target (the same graph, tau rewritten).
  tr.update_target(target, 0.7f);
  const auto again = weight_values(target);
  for (size_t k = 0; k < again.size(); ++k)
    if (ws[k].averaged)
      for (size_t i = 0; i < again[k].size(); ++i)
        ASSERT_TRUE(is_polyak(again[k][i], 0.7f, live[k][i], mid[k][i])) << ws[k].name << " element " << i;

  tr.update_target(target, 1.0f);
  const auto copied = weight_values(target);
  for (size_t k = 0; k < copied.size(); ++k)
    for (size_t i = 0; i < copied[k].size(); ++i)  // bit for bit
      ASSERT_EQ(std::memcmp(&copied[k][i], &live[k][i], sizeof(float)), 0) << ws[k].name << " element " << i;
  EXPECT_EQ(target.predict(x, 16).to_vector(), tr.predict(x).to_vector());
}

TEST(StateUpdates, UpdateTargetFollowsANewTargetAndSurvivesAMove) {
  ThreadsGuard threads;
  set_num_threads(1);
  nn::Sequential m = build_bn_model();
  nn::Trainer tr(m, {.batch_size = 16});
  const Tensor x = Tensor::from_vector(random_values(64, 5), {16, 4});
  const Tensor y = Tensor::from_vector(random_values(48, 6), {16, 3});
  nn::Model first = tr.snapshot(), second = tr.snapshot();
  tr.step(x, y);
  tr.update_target(first, 1.0f);
  tr.update_target(second, 1.0f);  // a second target: its own graph
  EXPECT_EQ(weight_values(first), weight_values(second));
  nn::Trainer moved = std::move(tr);
  moved.step(x, y);
  moved.update_target(second, 1.0f);  // the graph moved with the trainer
  EXPECT_EQ(weight_values(second), weight_values(moved.model()));
  EXPECT_NE(weight_values(first), weight_values(second));
}

TEST(StateUpdates, LearningRateRoundTripsThroughTheHyperTensor) {
  nn::Sequential m = build_bn_model();
  m.set_learning_rate(0.125);
  EXPECT_EQ(m.learning_rate(), 0.125);
  m.set_learning_rate(3e-4);
  EXPECT_EQ(m.learning_rate(), double(3e-4f));
  nn::Trainer tr(m, {.batch_size = 16});
  tr.set_learning_rate(0.0625f);
  EXPECT_EQ(tr.learning_rate(), 0.0625f);

  OptimizerState state(OptimizerSpec::sgd({.learning_rate = 0.5f}));
  EXPECT_EQ(state.learning_rate(), 0.5);
  state.set_learning_rate(0.25f);
  EXPECT_EQ(state.hyper.to_vector()[kLr], 0.25f) << "the value lives in the hyper tensor";
  EXPECT_EQ(state.learning_rate(), 0.25);
  EXPECT_TRUE(throws<ValueError>([&] { state.set_learning_rate(-1.0f); }, {"positive"}));
}

TEST(StateUpdates, IterationsReadTheStepCounterExactly) {
  OptimizerState state(OptimizerSpec::adam());
  EXPECT_EQ(state.iterations(), 0);
  const int64_t big = (int64_t(1) << 40) + 3;  // far above float32's 2^24
  int64_t host = big;
  state.step.copy_from(Tensor::view(&host, {1}, DType::Int64));
  EXPECT_EQ(state.iterations(), big);
}

TEST(StateUpdates, ExecutableRandomCounterIsReadAndWrittenExactly) {
  Tensor counter = Tensor::zeros({1}, DType::Int64);
  Graph g;
  g.set_rng_counter(counter);
  Value c = g.rng_counter();
  Executable exe(std::move(g), {c});
  const uint64_t big = 0xFFFFFFFFFFFFFFF0ull;
  exe.set_rng_counter(big);
  EXPECT_EQ(exe.rng_counter(), big);
  EXPECT_EQ(uint64_t(counter.data<int64_t>()[0]), big);
  exe.run();  // advances by one
  EXPECT_EQ(exe.rng_counter(), big + 1);
}

TEST(StateUpdates, CopyOutputChecksItsDestination) {
  Tensor a = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  Graph g;
  Value x = g.input("x", {2, 3});
  Value y = g.scale(x, 2.0f);
  Executable exe(std::move(g), {y});
  exe.bind(x, a);
  exe.run();
  Tensor flat = Tensor::zeros({6});  // same elements, another shape: a row-major copy
  exe.copy_output(y, flat);
  EXPECT_EQ(flat.to_vector(), (std::vector<float>{2, 4, 6, 8, 10, 12}));
  EXPECT_TRUE(throws<ShapeError>([&] { exe.copy_output(y, Tensor::zeros({5})); }, {"copy_output", "6 elements", "{5}"}));
  EXPECT_TRUE(throws<TypeError>([&] { exe.copy_output(y, Tensor::zeros({6}, DType::Int32)); }, {"float32", "int32"}));
  EXPECT_TRUE(throws<StateError>([&] { exe.copy_output(y, Tensor{}); }, {"undefined"}));
}
