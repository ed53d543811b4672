// The hook stage's flat gradient buffer and its buckets (DESIGN.md: "Hooks
// see one flat gradient buffer cut into buckets"): the buffer holds every
// trainable gradient contiguously, bucket k is the byte range [k B, (k+1) B)
// of it whatever the tensor boundaries, so a data-parallel step all-reduces
// ceil(bytes / B) times; what a hook writes through a bucket is what the
// update uses, with or without accumulation and clipping.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tensorgrad/tensorgrad.h"
#include "test_support.h"

using namespace tensorgrad;
using nn::Dense;
using nn::Sequential;
using test_support::throws;
using test_support::uniform;

namespace {

// Weights {3, 5} + {5} + {5, 2} + {2}: 32 float32 gradients, 128 bytes.
constexpr int64_t kElements = 32;
constexpr size_t kBytes = kElements * 4;

Sequential small_model(const OptimizerSpec& spec, uint64_t seed = 5) {
  manual_seed(seed);
  Sequential m({3});
  m.add(Dense(5, "tanh"));
  m.add(Dense(2));
  m.compile(spec, "mse");
  return m;
}

struct Batch {
  Tensor x, y;
};
Batch batch(int seed, int64_t rows = 4) {
  std::mt19937 rng{uint32_t(seed)};
  return {uniform({rows, 3}, rng, -1, 1), uniform({rows, 2}, rng, -1, 1)};
}

std::vector<float> all_weights(const std::vector<nn::Weight>& ws) {
  std::vector<float> out;
  for (const nn::Weight& w : ws) {
    const std::vector<float> v = w.value.to_vector();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

void expect_close(const std::vector<float>& a, const std::vector<float>& b, float tol = 1e-6f) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], tol) << "element " << i;
}

const char* flat_char(const Tensor& t) { return static_cast<const char*>(t.raw()); }

// The gradient settings the equivalence tests run under: plain (gradients in
// the arena, copied through the buffer around the hooks), accumulation and
// clipping (gradients accumulated in the buffer itself).
struct Mode {
  const char* name;
  int64_t nbatch_logical;
  float global_clipnorm;
};
const Mode kModes[] = {{"plain", 0, 0.0f}, {"accumulation", 8, 0.0f}, {"clipping", 0, 0.05f},
                       {"accumulation and clipping", 8, 0.05f}};

OptimizerSpec sgd(float lr, const Mode& mode) {
  return OptimizerSpec::sgd({.learning_rate = lr, .global_clipnorm = mode.global_clipnorm});
}

}  // namespace

// ceil(bytes / bucket) buckets covering the buffer once, in order, for a
// bucket smaller than one element pair, smaller than a tensor, one that does
// not divide the buffer, one equal to it, one larger, and the default.
TEST(GradientBuckets, BucketsCutTheFlatBufferIntoContiguousByteRanges) {
  for (size_t bucket : {size_t(4), size_t(12), size_t(40), size_t(60), size_t(100), kBytes, size_t(1000),
                        kDefaultGradientBucketBytes}) {
    SCOPED_TRACE("bucket bytes " + std::to_string(bucket));
    Sequential m = small_model(OptimizerSpec::sgd(0.1f));
    m.set_gradient_bucket_bytes(bucket);
    EXPECT_EQ(m.gradient_bucket_bytes(), bucket);
    int calls = 0;
    m.add_gradient_bucket_hook([&](GradientBuffer& buf) {
      ++calls;
      ASSERT_TRUE(buf.flat().defined());
      EXPECT_EQ(buf.flat().shape(), Shape{kElements});
      EXPECT_EQ(buf.flat().dtype(), DType::Float32);
      EXPECT_EQ(buf.flat().device(), Device::CPU);
      EXPECT_EQ(buf.bytes(), kBytes);
      EXPECT_EQ(buf.bucket_bytes(), bucket);
      const size_t n = (kBytes + bucket - 1) / bucket;
      EXPECT_EQ(buf.n_buckets(), n);
      int64_t next = 0;
      for (size_t k = 0; k < buf.n_buckets(); ++k) {
        const auto [begin, end] = buf.bucket_range(k);
        EXPECT_EQ(begin, next);
        EXPECT_EQ(end, std::min<int64_t>(begin + int64_t(bucket / 4), kElements));
        const Tensor b = buf.bucket(k);
        EXPECT_EQ(b.shape(), Shape{end - begin});
        EXPECT_EQ(flat_char(b), flat_char(buf.flat()) + begin * 4);  // a view, not a copy
        next = end;
      }
      EXPECT_EQ(next, kElements);
      EXPECT_TRUE(throws<IndexError>([&] { buf.bucket(n); }, {"bucket " + std::to_string(n), "n_buckets"}));
      // The per-weight views lie one after another in the model's order.
      ASSERT_EQ(buf.tensors().size(), 4u);
      const std::vector<nn::Weight> weights = m.weights();
      const Shape shapes[] = {Shape{3, 5}, Shape{5}, Shape{5, 2}, Shape{2}};
      int64_t offset = 0;
      for (size_t i = 0; i < 4; ++i) {
        EXPECT_EQ(buf.tensors()[i].name, weights[i].name);
        EXPECT_EQ(buf.tensors()[i].grad.shape(), shapes[i]);
        EXPECT_EQ(flat_char(buf.tensors()[i].grad), flat_char(buf.flat()) + offset * 4);
        offset += shapes[i].numel();
      }
    });
    m.optimizer_context(4).step(batch(1).x, batch(1).y);
    EXPECT_EQ(calls, 1);
  }
}

// Both kinds of hook run in one stage, in the order added, the model's before
// the context's; the per-tensor hook's views are the buffer's, and they hold
// the step's gradients whether they live in the arena (copied in) or in the
// accumulator (clipping on, with a bound that never clips).
TEST(GradientBuckets, BothKindsOfHookRunInOrderOnTheSameGradients) {
  std::vector<std::vector<float>> seen;  // the flat buffer, per model
  for (bool persistent : {false, true}) {
    SCOPED_TRACE(persistent ? "accumulator" : "arena");
    Sequential m = small_model(persistent ? OptimizerSpec::sgd({.learning_rate = 0.1f, .clipvalue = 1e9f})
                                          : OptimizerSpec::sgd(0.1f));
    std::string order;
    const char* flat = nullptr;  // the buffer's address, known after the first step
    m.add_gradient_hook([&](std::span<NamedGradient> gs) {
      order += "a";
      ASSERT_EQ(gs.size(), 4u);
      if (flat) EXPECT_EQ(flat_char(gs[0].grad), flat);
    });
    m.add_gradient_bucket_hook([&](GradientBuffer& buf) {
      order += "b";
      if (flat) EXPECT_EQ(flat_char(buf.flat()), flat);
      EXPECT_EQ(flat_char(buf.tensors()[2].grad), flat_char(buf.flat()) + 20 * 4);
    });
    m.add_gradient_hook([&](std::span<NamedGradient>) { order += "c"; });
    auto& ctx = m.optimizer_context(4);
    ctx.add_gradient_bucket_hook([&](GradientBuffer& buf) {
      order += "d";
      seen.push_back(buf.flat().to_vector());
    });
    ctx.add_gradient_hook([&](std::span<NamedGradient>) { order += "e"; });
    // Added to the model after the context's: still before them.
    m.add_gradient_bucket_hook([&](GradientBuffer&) { order += "f"; });
    ctx.add_gradient_bucket_hook([&](GradientBuffer&) { order += "g"; });
    const Batch b = batch(2);
    ctx.step(b.x, b.y);  // builds the graph and the buffer
    EXPECT_EQ(order, "abcfdeg");
    flat = flat_char(ctx.state()->gradients);
    order.clear();
    ctx.step(b.x, b.y);
    EXPECT_EQ(order, "abcfdeg");
  }
  ASSERT_EQ(seen.size(), 4u);  // two steps per model
  // The first step's gradients agree between the arena and the accumulator.
  expect_close(seen[0], seen[2], 1e-7f);
  bool nonzero = false;
  for (float v : seen[0]) nonzero = nonzero || v != 0.0f;
  EXPECT_TRUE(nonzero);
}

// Writing through the buckets is writing the gradients the update uses:
// zeroed buckets leave SGD's weights where they were; buckets scaled by 2
// give SGD at twice the learning rate. Buckets of 40 bytes straddle the
// tensors. Plain, with accumulation, with clipping (the hooks see clipped
// gradients), and both.
TEST(GradientBuckets, WhatBucketHooksWriteIsWhatTheUpdateUses) {
  for (const Mode& mode : kModes) {
    SCOPED_TRACE(mode.name);
    {
      Sequential m = small_model(sgd(0.1f, mode));
      m.set_gradient_bucket_bytes(40);
      int calls = 0;
      m.add_gradient_bucket_hook([&](GradientBuffer& buf) {
        ++calls;
        for (size_t k = 0; k < buf.n_buckets(); ++k) buf.bucket(k).fill(0.0f);
      });
      const std::vector<float> before = all_weights(m.weights());
      auto& ctx = m.optimizer_context(4, mode.nbatch_logical);
      for (int s = 0; s < 4; ++s) ctx.step(batch(s).x, batch(s).y);
      EXPECT_EQ(calls, mode.nbatch_logical ? 2 : 4);
      EXPECT_EQ(all_weights(m.weights()), before);
    }
    {
      Sequential a = small_model(sgd(0.05f, mode), 9);
      Sequential b = small_model(sgd(0.1f, mode), 9);
      ASSERT_EQ(all_weights(a.weights()), all_weights(b.weights()));
      a.set_gradient_bucket_bytes(40);
      a.add_gradient_bucket_hook([&](GradientBuffer& buf) {
        EXPECT_EQ(buf.n_buckets(), 4u);
        for (size_t k = 0; k < buf.n_buckets(); ++k) {
          Tensor t = buf.bucket(k);
          for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] *= 2.0f;
        }
      });
      auto& ca = a.optimizer_context(4, mode.nbatch_logical);
      auto& cb = b.optimizer_context(4, mode.nbatch_logical);
      for (int s = 0; s < 6; ++s) {
        ca.step(batch(s).x, batch(s).y);
        cb.step(batch(s).x, batch(s).y);
      }
      expect_close(all_weights(a.weights()), all_weights(b.weights()));
      EXPECT_NE(all_weights(a.weights()), all_weights(small_model(sgd(0.1f, mode), 9).weights()));  // they moved
    }
  }
}

// A hook added after the first step (the graph was planned without hooks)
// still sees the step's gradients and still decides the update.
TEST(GradientBuckets, AHookAddedAfterTheFirstStepDecidesTheUpdate) {
  Sequential m = small_model(OptimizerSpec::sgd(0.1f));
  Sequential ref = small_model(OptimizerSpec::sgd(0.1f));
  auto& ctx = m.optimizer_context(4);
  auto& rctx = ref.optimizer_context(4);
  ctx.step(batch(1).x, batch(1).y);
  rctx.step(batch(1).x, batch(1).y);
  ASSERT_EQ(all_weights(m.weights()), all_weights(ref.weights()));
  std::vector<float> grads;
  ctx.add_gradient_bucket_hook([&](GradientBuffer& buf) { grads = buf.flat().to_vector(); });
  ctx.step(batch(2).x, batch(2).y);
  rctx.step(batch(2).x, batch(2).y);
  EXPECT_EQ(all_weights(m.weights()), all_weights(ref.weights()));  // an identity hook changes nothing
  // The copy in the buffer is the gradient: weights moved by -lr * g.
  ASSERT_EQ(grads.size(), size_t(kElements));
  std::vector<float> before = all_weights(m.weights());
  m.add_gradient_bucket_hook([&](GradientBuffer& buf) {
    grads = buf.flat().to_vector();
    for (size_t k = 0; k < buf.n_buckets(); ++k) buf.bucket(k).fill(0.0f);
  });
  ctx.step(batch(3).x, batch(3).y);
  EXPECT_EQ(all_weights(m.weights()), before);  // the model's hook zeroed what the update read
}

// A model whose contexts differ in accumulation share one buffer: a step of
// a context without accumulation (whose hooks use the buffer as scratch)
// leaves the accumulator clean for the one with, so both train as they
// would without hooks.
TEST(GradientBuckets, ContextsWithAndWithoutAccumulationShareTheBuffer) {
  Sequential m = small_model(OptimizerSpec::sgd(0.1f));
  Sequential ref = small_model(OptimizerSpec::sgd(0.1f));
  m.add_gradient_bucket_hook([](GradientBuffer&) {});
  for (Sequential* model : {&m, &ref}) {
    auto& accumulating = model->optimizer_context(4, 8);
    auto& plain = model->optimizer_context(4);
    accumulating.step(batch(1).x, batch(1).y);
    accumulating.step(batch(2).x, batch(2).y);
    plain.step(batch(3).x, batch(3).y);
    accumulating.step(batch(4).x, batch(4).y);
    accumulating.step(batch(5).x, batch(5).y);
  }
  EXPECT_EQ(all_weights(m.weights()), all_weights(ref.weights()));
  // With accumulation the optimizer's accumulators are the buffer's ranges.
  const std::shared_ptr<OptimizerState>& state = m.optimizer_context(4, 8).state();
  const char* flat = flat_char(state->gradients);
  int64_t offset = 0;
  for (const OptimizerState::GradientRange& r : state->gradient_layout) {
    EXPECT_EQ(r.offset, offset);
    EXPECT_EQ(flat_char(state->slots.at(r.parameter).acc), flat + offset * 4);
    offset += r.shape.numel();
  }
  EXPECT_EQ(offset, kElements);
}

// fit's contexts (full and partial batches), a Trainer made from the model
// and a Trainer's own bucket size and hooks.
TEST(GradientBuckets, ModelFitAndTrainerRunBucketHooks) {
  Sequential m = small_model(OptimizerSpec::sgd(0.1f));
  m.set_gradient_bucket_bytes(64);
  std::vector<size_t> buckets;
  m.add_gradient_bucket_hook([&](GradientBuffer& buf) {
    buckets.push_back(buf.n_buckets());
    Tensor flat = buf.flat();
    flat.fill(0.0f);
  });
  const std::vector<float> before = all_weights(m.weights());
  std::mt19937 rng(4);
  const Tensor x = uniform({10, 3}, rng, -1, 1), y = uniform({10, 2}, rng, -1, 1);
  nn::FitOptions o;
  o.verbose = 0;
  o.batch_size = 4;
  o.shuffle = false;
  m.fit(x, y, o);  // batches of 4, 4 and 2
  EXPECT_EQ(buckets, (std::vector<size_t>{2, 2, 2}));
  EXPECT_EQ(all_weights(m.weights()), before);
  o.nbatch_logical = 8;
  m.fit(x, y, o);  // one update of 2 batches; the last partial batch is left out
  EXPECT_EQ(buckets.size(), 4u);
  EXPECT_EQ(all_weights(m.weights()), before);

  // A Trainer keeps the model's bucket size and hooks, or takes its own size.
  {
    nn::Trainer tr(m, {.batch_size = 4});
    EXPECT_EQ(tr.gradient_bucket_bytes(), 64u);
    tr.step(batch(1).x, batch(1).y);
    EXPECT_EQ(buckets.size(), 5u);
    EXPECT_EQ(all_weights(tr.weights()), before);
  }
  for (int64_t logical : {int64_t(0), int64_t(8)}) {
    SCOPED_TRACE(logical ? "accumulation" : "plain");
    Sequential plain = small_model(OptimizerSpec::sgd(0.05f), 11);
    Sequential twice = small_model(OptimizerSpec::sgd(0.1f), 11);
    nn::Trainer a(plain, {.batch_size = 4, .nbatch_logical = logical, .gradient_bucket_bytes = 12});
    nn::Trainer b(twice, {.batch_size = 4, .nbatch_logical = logical});
    EXPECT_EQ(a.gradient_bucket_bytes(), 12u);
    EXPECT_EQ(b.gradient_bucket_bytes(), kDefaultGradientBucketBytes);
    int calls = 0;
    a.add_gradient_bucket_hook([&](GradientBuffer& buf) {
      ++calls;
      EXPECT_EQ(buf.n_buckets(), 11u);  // ceil(128 / 12)
      for (size_t k = 0; k < buf.n_buckets(); ++k) {
        Tensor t = buf.bucket(k);
        for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] *= 2.0f;
      }
    });
    int tensor_calls = 0;
    b.add_gradient_hook([&](std::span<NamedGradient> gs) { tensor_calls += int(gs.size()); });
    for (int s = 0; s < 4; ++s) {
      a.step(batch(s).x, batch(s).y);
      b.step(batch(s).x, batch(s).y);
    }
    EXPECT_EQ(calls, logical ? 2 : 4);
    EXPECT_EQ(tensor_calls, 4 * calls);
    expect_close(all_weights(a.weights()), all_weights(b.weights()));
    // The hooks went to the trainers' own models, not to the models given.
    EXPECT_EQ(plain.optimizer_context(4).gradient_bucket_bytes(), kDefaultGradientBucketBytes);
  }
}

// A bucket size set on the model reaches contexts made before; clone keeps it.
TEST(GradientBuckets, ModelBucketSizeReachesEveryContext) {
  Sequential m = small_model(OptimizerSpec::sgd(0.1f));
  auto& ctx = m.optimizer_context(4);
  EXPECT_EQ(ctx.gradient_bucket_bytes(), kDefaultGradientBucketBytes);
  m.set_gradient_bucket_bytes(8);
  EXPECT_EQ(ctx.gradient_bucket_bytes(), 8u);
  EXPECT_EQ(m.optimizer_context(2).gradient_bucket_bytes(), 8u);
  size_t n = 0;
  ctx.add_gradient_bucket_hook([&](GradientBuffer& buf) { n = buf.n_buckets(); });
  ctx.step(batch(1).x, batch(1).y);
  EXPECT_EQ(n, 16u);
  ctx.set_gradient_bucket_bytes(128);
  ctx.step(batch(1).x, batch(1).y);
  EXPECT_EQ(n, 1u);
  EXPECT_EQ(m.clone().gradient_bucket_bytes(), 8u);
  m.compile(OptimizerSpec::sgd(0.1f), "mse");
  EXPECT_EQ(m.gradient_bucket_bytes(), 8u);
}

TEST(GradientBuckets, BadBucketSizesAndHooksThrow) {
  Sequential m = small_model(OptimizerSpec::sgd(0.1f));
  for (size_t bad : {size_t(0), size_t(1), size_t(6), size_t(1022)})
    EXPECT_TRUE(throws<ValueError>([&] { m.set_gradient_bucket_bytes(bad); },
                                   {"positive multiple of 4", "got " + std::to_string(bad)}));
  EXPECT_EQ(m.gradient_bucket_bytes(), kDefaultGradientBucketBytes);
  auto& ctx = m.optimizer_context(4);
  EXPECT_TRUE(throws<ValueError>([&] { ctx.set_gradient_bucket_bytes(2); }, {"gradient_bucket_bytes", "got 2"}));
  EXPECT_TRUE(throws<ValueError>([&] { nn::Trainer t(m, {.batch_size = 4, .gradient_bucket_bytes = 10}); },
                                 {"Trainer", "gradient_bucket_bytes", "multiple of 4", "got 10"}));
  OptimizerContextOptions o;
  o.batch_size = 4;
  o.gradient_bucket_bytes = 3;
  EXPECT_TRUE(throws<ValueError>([&] { OptimizerContext c(m.model_function(), o); }, {"gradient_bucket_bytes", "got 3"}));
  EXPECT_TRUE(throws<ValueError>([&] { m.add_gradient_bucket_hook(nullptr); }, {"empty hook"}));
  EXPECT_TRUE(throws<ValueError>([&] { ctx.add_gradient_bucket_hook(nullptr); }, {"empty hook"}));
  GradientBuffer empty;
  EXPECT_EQ(empty.n_buckets(), 0u);
  EXPECT_EQ(empty.bytes(), 0u);
  EXPECT_TRUE(throws<IndexError>([&] { empty.bucket(0); }, {"bucket 0", "0 bucket(s)"}));
}

// A bucket hook that throws cancels the update and drops the period's
// gradients, as a per-tensor hook's throw does.
TEST(GradientBuckets, AThrowingBucketHookCancelsTheUpdate) {
  Sequential m = small_model(OptimizerSpec::sgd(0.1f));
  Sequential ref = small_model(OptimizerSpec::sgd(0.1f));
  bool fail = true;
  m.add_gradient_bucket_hook([&](GradientBuffer&) {
    if (fail) throw ValueError("hook refused");
  });
  auto& ctx = m.optimizer_context(4, 8);
  auto& rctx = ref.optimizer_context(4, 8);
  const std::vector<float> before = all_weights(m.weights());
  ctx.step(batch(1).x, batch(1).y);
  EXPECT_TRUE(throws<ValueError>([&] { ctx.step(batch(2).x, batch(2).y); }, {"hook refused"}));
  EXPECT_EQ(all_weights(m.weights()), before);
  fail = false;
  for (int s = 3; s < 5; ++s) {
    ctx.step(batch(s).x, batch(s).y);
    rctx.step(batch(s).x, batch(s).y);
  }
  EXPECT_EQ(all_weights(m.weights()), all_weights(ref.weights()));  // the dropped period left nothing behind
}

// Every training graph of a model must train the weights the buffer was laid
// out for: a context of another model's function on this model's state is
// refused when it builds.
TEST(GradientBuckets, ATrainingGraphWithOtherWeightsIsRefused) {
  Sequential m = small_model(OptimizerSpec::sgd(0.1f));
  auto& ctx = m.optimizer_context(4);
  ctx.step(batch(1).x, batch(1).y);
  Sequential other = small_model(OptimizerSpec::sgd(0.1f));
  OptimizerContextOptions o;
  o.batch_size = 4;
  o.optimizer = OptimizerSpec::sgd(0.1f);
  OptimizerContext stray(other.model_function(), o, ctx.state());
  EXPECT_TRUE(throws<StateError>([&] { stray.step(batch(1).x, batch(1).y); },
                                 {"flat gradient buffer", "weight 0", "/kernel", "compile() again"}));
}
