// Zero heap allocations after warm-up (DESIGN.md: "a training step allocates
// nothing"). This binary replaces malloc and operator new with counting
// versions that forward to glibc, so every allocation in any thread (ours,
// the pool's, OpenBLAS's) is seen.
#include <gtest/gtest.h>

#include <malloc.h>

#include <atomic>
#include <cmath>
#include <random>
#include <string>
#include <cstdlib>
#include <new>
#include <tensorgrad/tensorgrad.h>

extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
void __libc_free(void*);
}

namespace {
std::atomic<long> g_allocations{0};
std::atomic<long> g_other_threads{0};   // while counting only one thread: the others' allocations
std::atomic<bool> g_one_thread{false};  // count only the thread that set tl_counted
thread_local bool tl_counted = false;
std::atomic<unsigned long long> g_bytes{0};
std::atomic<bool> g_counting{false};
std::atomic<long long> g_live_bytes{0};  // every allocation, counting or not
inline void* track(void* p) {
  if (p) g_live_bytes.fetch_add((long long)malloc_usable_size(p), std::memory_order_relaxed);
  return p;
}
inline void count(size_t bytes = 0) {
  if (!g_counting.load(std::memory_order_relaxed)) return;
  if (g_one_thread.load(std::memory_order_relaxed) && !tl_counted) {
    g_other_threads.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  g_bytes.fetch_add(bytes, std::memory_order_relaxed);
}
}  // namespace

extern "C" {
void* malloc(size_t n) {
  count(n);
  return track(__libc_malloc(n));
}
void* calloc(size_t a, size_t b) {
  count(a * b);
  return track(__libc_calloc(a, b));
}
void* realloc(void* p, size_t n) {
  count(n);
  if (p) g_live_bytes.fetch_sub((long long)malloc_usable_size(p), std::memory_order_relaxed);
  return track(__libc_realloc(p, n));
}
void* aligned_alloc(size_t align, size_t n) {
  count(n);
  return track(__libc_memalign(align, n));
}
int posix_memalign(void** out, size_t align, size_t n) {
  count(n);
  *out = track(__libc_memalign(align, n));
  return *out ? 0 : ENOMEM;
}
void free(void* p) {
  if (p) g_live_bytes.fetch_sub((long long)malloc_usable_size(p), std::memory_order_relaxed);
  __libc_free(p);
}
}

void* operator new(size_t n) {
  count(n);
  if (void* p = track(__libc_malloc(n ? n : 1))) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { free(p); }
void operator delete[](void* p) noexcept { free(p); }
void operator delete(void* p, size_t) noexcept { free(p); }
void operator delete[](void* p, size_t) noexcept { free(p); }

namespace tg = tensorgrad;

namespace {
// Allocations made by `f` run `calls` times.
template <class F>
long allocations_in(int calls, F&& f) {
  g_allocations = 0;
  g_counting = true;
  for (int i = 0; i < calls; ++i) f();
  g_counting = false;
  return g_allocations.load();
}

// Bytes allocated while f runs; f is expected to throw E, whose message is kept.
template <class E, class F>
unsigned long long bytes_before_throw(F&& f, std::string& message) {
  g_bytes = 0;
  g_counting = true;
  try {
    f();
    message = "no exception";
  } catch (const E& e) {
    message = e.what();
  } catch (const std::exception& e) {
    message = std::string("wrong exception: ") + e.what();
  }
  g_counting = false;
  return g_bytes.load();
}

tg::Tensor random_tensor(const tg::Shape& shape, float scale = 1.0f) {
  tg::Tensor t = tg::Tensor::empty(shape);
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> u(-scale, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(gen);
  return t;
}

class AllocationFree : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { tg::set_num_threads(GetParam()); }
  void TearDown() override { tg::set_num_threads(2); }
};
}  // namespace

TEST(AllocationCounter, SeesAllocations) {
  long n = allocations_in(10, [] {
    volatile int* p = new int(3);
    delete p;
    void* q = std::malloc(16);
    std::free(q);
  });
  EXPECT_EQ(n, 20);
}

TEST_P(AllocationFree, ClassifierStepAndPredict) {
  tg::manual_seed(1);
  // Large enough that the 2-thread run takes the pool path (over 1e6 flops).
  tg::nn::Sequential model({784});
  model.add(tg::nn::Dense(128, "relu"));
  model.add(tg::nn::Dropout(0.2f));
  model.add(tg::nn::Dense(10, "softmax"));
  model.compile(tg::OptimizerSpec::adamw(1e-3f), "sparse_categorical_crossentropy", {"accuracy"});
  auto& ctx = model.optimizer_context(64);
  tg::Tensor x = random_tensor({64, 784});
  tg::Tensor y = tg::Tensor::zeros({64}, tg::DType::Int32);
  for (int i = 0; i < 64; ++i) y.data<int32_t>()[i] = i % 10;
  for (int i = 0; i < 3; ++i) ctx.step(x, y);
  EXPECT_EQ(allocations_in(100, [&] { ctx.step(x, y); }), 0);

  tg::Tensor out = tg::Tensor::empty({64, 10});
  model.predict(x, out);
  EXPECT_EQ(allocations_in(100, [&] { model.predict(x, out); }), 0);
  // The outputs are probabilities: the run really happened.
  float row = 0;
  for (int c = 0; c < 10; ++c) row += out.data<float>()[c];
  EXPECT_NEAR(row, 1.0f, 1e-5f);
}

TEST_P(AllocationFree, SmallRegressionStepWithAccumulationAndWeights) {
  tg::manual_seed(2);
  tg::nn::Sequential model({4});
  model.add(tg::nn::Dense(64, "relu"));
  model.add(tg::nn::Dense(64, "relu"));
  model.add(tg::nn::Dense(2));
  model.compile(tg::OptimizerSpec::adam(1e-3f), "mse");
  auto& ctx = model.optimizer_context(32, 64, tg::LossWeights::PerSample);
  tg::Tensor x = random_tensor({32, 4}), y = random_tensor({32, 2}), w = tg::Tensor::full({32}, 0.5f);
  for (int i = 0; i < 4; ++i) ctx.step(x, y, w);
  const float before = model.weights()[0].value.data<float>()[0];
  EXPECT_EQ(allocations_in(100, [&] { ctx.step(x, y, w); }), 0);
  EXPECT_NE(model.weights()[0].value.data<float>()[0], before);  // updates happened

  tg::Tensor one = random_tensor({1, 4}), q = tg::Tensor::empty({1, 2});
  model.predict(one, q);
  EXPECT_EQ(allocations_in(100, [&] { model.predict(one, q); }), 0);
}

// The hook stage allocates nothing either: gradients copied into the flat
// buffer and back around the hooks (no accumulation), or accumulated in it
// (accumulation), seen per tensor and per bucket (bucket() makes a view).
TEST_P(AllocationFree, StepWithGradientAndBucketHooks) {
  for (int64_t logical : {int64_t(0), int64_t(64)}) {
    SCOPED_TRACE(logical ? "accumulation" : "no accumulation");
    tg::manual_seed(3);
    tg::nn::Sequential model({4});
    model.add(tg::nn::Dense(64, "relu"));
    model.add(tg::nn::Dense(2));
    model.compile(tg::OptimizerSpec::sgd(1e-2f), "mse");
    model.set_gradient_bucket_bytes(100);
    double seen = 0.0;
    model.add_gradient_hook([&](std::span<tg::NamedGradient> gs) { seen += gs[0].grad.data<float>()[0]; });
    model.add_gradient_bucket_hook([&](tg::GradientBuffer& buf) {
      for (size_t k = 0; k < buf.n_buckets(); ++k) {
        tg::Tensor b = buf.bucket(k);
        for (int64_t i = 0; i < b.numel(); ++i) b.data<float>()[i] *= 0.5f;
      }
    });
    auto& ctx = model.optimizer_context(32, logical);
    tg::Tensor x = random_tensor({32, 4}), y = random_tensor({32, 2});
    for (int i = 0; i < 4; ++i) ctx.step(x, y);
    const float before = model.weights()[0].value.data<float>()[0];
    EXPECT_EQ(allocations_in(100, [&] { ctx.step(x, y); }), 0);
    EXPECT_NE(model.weights()[0].value.data<float>()[0], before);  // updates happened
    EXPECT_NE(seen, 0.0);
  }
}

// Clipping and the optimizers' state are graph ops on persistent tensors: a
// clipped SGD-momentum step (global norm: per-tensor norms, their sum, the
// scale), and a clipped centered RMSprop with momentum and accumulation,
// allocate nothing after warm-up.
TEST_P(AllocationFree, ClippedSgdMomentumAndRmspropSteps) {
  const tg::OptimizerSpec specs[] = {
      tg::OptimizerSpec::sgd({.learning_rate = 0.01f, .momentum = 0.9f, .nesterov = true, .global_clipnorm = 0.5f}),
      tg::OptimizerSpec::rmsprop({.momentum = 0.5f, .centered = true, .clipnorm = 0.1f}),
      tg::OptimizerSpec::adagrad({.clipvalue = 0.01f}),
  };
  for (const tg::OptimizerSpec& spec : specs) {
    SCOPED_TRACE(tg::optimizer_name(spec.kind));
    tg::manual_seed(6);
    tg::nn::Sequential model({4});
    model.add(tg::nn::Dense(64, "relu"));
    model.add(tg::nn::Dense(2));
    model.compile(spec, "mse");
    const bool accumulate = spec.kind == tg::OptimizerSpec::Kind::RMSprop;
    auto& ctx = model.optimizer_context(32, accumulate ? 64 : 0);
    tg::Tensor x = random_tensor({32, 4}), y = random_tensor({32, 2});
    for (int i = 0; i < 4; ++i) ctx.step(x, y);
    const float before = model.weights()[0].value.data<float>()[0];
    EXPECT_EQ(allocations_in(100, [&] { ctx.step(x, y); }), 0);
    EXPECT_NE(model.weights()[0].value.data<float>()[0], before);  // updates happened
  }
}

// train_on_batch, the per-batch level of fit, allocates nothing either, for
// full micro-batches and a short one joining their accumulation period
// (its gradient seed is bound per step, the plans are shared).
TEST_P(AllocationFree, TrainOnBatchWithShortMicroBatchesUnderAccumulation) {
  tg::manual_seed(8);
  tg::nn::Sequential model({4});
  model.add(tg::nn::Dense(32, "relu"));
  model.add(tg::nn::Dense(2));
  model.compile(tg::OptimizerSpec::adam(1e-3f), "mse");
  const tg::Tensor x = random_tensor({32, 4}), y = random_tensor({32, 2});
  const tg::nn::Batch full{{x}, {y}, {}}, part{{x.rows(0, 20)}, {y.rows(0, 20)}, {}};
  auto steps = [&] {
    model.train_on_batch(full, 32, 64);
    model.train_on_batch(part, 32, 64);
  };
  for (int i = 0; i < 3; ++i) steps();
  const int64_t updates = model.optimizer_context(32, 64).state()->iterations();
  EXPECT_EQ(allocations_in(50, steps), 0);
  EXPECT_EQ(model.optimizer_context(32, 64).state()->iterations(), updates + 50);  // one update per pair
}

// Learning-rate schedules are computed by the op that advances the step
// counter: every optimizer kind under a schedule, each with clipping (and one
// with accumulation), allocates nothing per step, and neither does reading
// the scheduled rate.
TEST_P(AllocationFree, ScheduledStepsForEveryOptimizerWithClipping) {
  const tg::OptimizerSpec specs[] = {
      tg::OptimizerSpec::adamw(tg::CosineDecay{.initial_learning_rate = 0.0f, .decay_steps = 50, .alpha = 0.1f,
                                               .warmup_target = 1e-3f, .warmup_steps = 5},
                               0.01f),
      tg::OptimizerSpec::sgd({.learning_rate_schedule = tg::PiecewiseConstantDecay{{3, 50, 80}, {0.1f, 0.05f, 0.01f, 0.005f}},
                              .clipvalue = 0.5f}),
      tg::OptimizerSpec::sgd({.learning_rate_schedule = tg::ExponentialDecay{0.01f, 10, 0.9f, true},
                              .momentum = 0.9f,
                              .nesterov = true,
                              .global_clipnorm = 0.5f}),
      tg::OptimizerSpec::rmsprop({.learning_rate_schedule = tg::CosineDecayRestarts{1e-3f, 4, 2.0f, 0.5f, 0.1f},
                                  .momentum = 0.5f,
                                  .centered = true,
                                  .clipnorm = 0.1f}),
      tg::OptimizerSpec::adagrad({.learning_rate_schedule = tg::ExponentialDecay{0.01f, 7, 0.5f}, .clipvalue = 0.01f}),
  };
  for (tg::OptimizerSpec spec : specs) {
    SCOPED_TRACE(tg::optimizer_name(spec.kind));
    if (spec.kind == tg::OptimizerSpec::Kind::AdamW) spec.clipnorm = 1.0f;
    tg::manual_seed(6);
    tg::nn::Sequential model({4});
    model.add(tg::nn::Dense(64, "relu"));
    model.add(tg::nn::Dense(2));
    model.compile(spec, "mse");
    const bool accumulate = spec.kind == tg::OptimizerSpec::Kind::RMSprop;
    auto& ctx = model.optimizer_context(32, accumulate ? 64 : 0);
    tg::Tensor x = random_tensor({32, 4}), y = random_tensor({32, 2});
    for (int i = 0; i < 4; ++i) ctx.step(x, y);
    const float before = model.weights()[0].value.data<float>()[0];
    const int64_t iterations = ctx.state()->iterations();
    double rate = 0.0;
    EXPECT_EQ(allocations_in(100, [&] {
                ctx.step(x, y);
                rate += ctx.learning_rate() + model.learning_rate();
              }),
              0);
    EXPECT_NE(model.weights()[0].value.data<float>()[0], before);  // updates happened
    EXPECT_EQ(ctx.state()->iterations(), iterations + (accumulate ? 50 : 100));
    EXPECT_GT(rate, 0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, AllocationFree, ::testing::Values(1, 2),
                         [](const auto& info) { return std::to_string(info.param) + "threads"; });

// Trainer (nn/trainer.h): a step, a target update on the same snapshot and a
// one-row predict into caller memory allocate nothing after warm-up.
namespace {
tg::nn::Sequential trainer_model() {
  tg::manual_seed(3);
  tg::nn::Sequential model({4});
  model.add(tg::nn::Dense(64, "relu"));
  model.add(tg::nn::Dense(64, "relu"));
  model.add(tg::nn::Dense(2));
  model.compile(tg::OptimizerSpec::adam(1e-3f), "mse");
  return model;
}

tg::nn::TrainerOptions trainer_options() {
  tg::nn::TrainerOptions o;
  o.batch_size = 32;
  return o;
}
}  // namespace

TEST_P(AllocationFree, TrainerStep) {
  tg::nn::Trainer tr(trainer_model(), trainer_options());
  tg::Tensor x = random_tensor({32, 4}), y = random_tensor({32, 2});
  // The first step builds and plans the graph: the counter sees the trainer's path.
  EXPECT_GT(allocations_in(1, [&] { tr.step(x, y); }), 0);
  for (int i = 0; i < 2; ++i) tr.step(x, y);
  const float before = tr.predict(x.rows(0, 1)).data<float>()[0];
  EXPECT_EQ(allocations_in(100, [&] { tr.step(x, y); }), 0);
  EXPECT_EQ(tr.n_steps(), 103);
  EXPECT_NE(tr.predict(x.rows(0, 1)).data<float>()[0], before);  // the steps trained
}

TEST_P(AllocationFree, TrainerUpdateTargetOnTheSameSnapshot) {
  tg::nn::Trainer tr(trainer_model(), trainer_options());
  tg::Tensor x = random_tensor({32, 4}), y = random_tensor({32, 2});
  tr.step(x, y);
  tg::nn::Model target = tr.snapshot();
  tr.step(x, y);
  tr.update_target(target, 0.5f);
  tr.update_target(target, 0.5f);
  EXPECT_EQ(allocations_in(100, [&] { tr.update_target(target, 0.05f); }), 0);
  EXPECT_EQ(allocations_in(100, [&] { tr.update_target(target, 1.0f); }), 0);
  // The last update was a copy: the target predicts as the trainer.
  tg::Tensor one = x.rows(0, 1);
  EXPECT_EQ(target.predict(one, 1).to_vector(), tr.predict(one).to_vector());
}

TEST_P(AllocationFree, TrainerOneRowPredictIntoCallerMemory) {
  tg::nn::Trainer tr(trainer_model(), trainer_options());
  tg::Tensor x = random_tensor({32, 4}), y = random_tensor({32, 2});
  tr.step(x, y);
  tg::Tensor one = random_tensor({1, 4}), q = tg::Tensor::empty({1, 2});
  tr.predict(one, q);
  tr.predict(one, q);
  EXPECT_EQ(allocations_in(100, [&] { tr.predict(one, q); }), 0);
  EXPECT_EQ(q.to_vector(), tr.predict(one).to_vector());
}

// Token ids: int32 ids are bound in place and float32 ids are converted into
// staging made on the first step, so neither allocates afterwards (the
// Embedding-GRU shape of a text classifier).
namespace {
tg::nn::Sequential token_model() {
  tg::manual_seed(4);
  tg::nn::Sequential model({6});
  model.add(tg::nn::Embedding(50, 8));
  model.add(tg::nn::GRU(16));
  model.add(tg::nn::Dense(3, "softmax"));
  model.compile(tg::OptimizerSpec::adam(1e-2f), "sparse_categorical_crossentropy");
  return model;
}

tg::Tensor token_ids(int64_t rows, bool as_int32) {
  tg::Tensor t = tg::Tensor::empty({rows, 6}, as_int32 ? tg::DType::Int32 : tg::DType::Float32);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int id = int((i * 7 + 3) % 50);
    if (as_int32) t.data<int32_t>()[i] = id;
    else t.data<float>()[i] = float(id);
  }
  return t;
}
}  // namespace

// The fused LSTM and GRU at a size whose input projection and weight
// gradients run on OpenBLAS (kernels/matmul.cpp) and whose sequences are
// split over the pool: still nothing allocated per step or predict.
TEST_P(AllocationFree, FusedRecurrentStepsAndPredict) {
  for (bool lstm : {true, false}) {
    SCOPED_TRACE(lstm ? "LSTM" : "GRU");
    tg::manual_seed(6);
    tg::nn::Sequential model({20});
    model.add(tg::nn::Embedding(200, 64));
    if (lstm) model.add(tg::nn::LSTM(64));
    else model.add(tg::nn::GRU(64, /*return_sequences=*/true)), model.add(tg::nn::Flatten());
    model.add(tg::nn::Dense(2, "softmax"));
    model.compile(tg::OptimizerSpec::adam(1e-3f), "sparse_categorical_crossentropy");
    tg::Tensor x = tg::Tensor::empty({32, 20}, tg::DType::Int32), y = tg::Tensor::zeros({32}, tg::DType::Int32);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<int32_t>()[i] = int32_t((i * 13 + 5) % 200);
    for (int i = 0; i < 32; ++i) y.data<int32_t>()[i] = i % 2;
    auto& ctx = model.optimizer_context(32);
    for (int i = 0; i < 3; ++i) ctx.step(x, y);
    EXPECT_EQ(allocations_in(20, [&] { ctx.step(x, y); }), 0);
    tg::Tensor out = tg::Tensor::empty({32, 2});
    model.predict(x, out);
    EXPECT_EQ(allocations_in(20, [&] { model.predict(x, out); }), 0);
    EXPECT_NEAR(out.data<float>()[0] + out.data<float>()[1], 1.0f, 1e-5f);
  }
}

TEST_P(AllocationFree, TokenIdStepsEvalAndOneRowPredict) {
  for (bool as_int32 : {true, false}) {
    SCOPED_TRACE(as_int32 ? "int32 ids" : "float32 ids");
    tg::nn::TrainerOptions o;
    o.batch_size = 16;
    tg::nn::Trainer tr(token_model(), o);
    const tg::Tensor x = token_ids(16, as_int32), one = token_ids(1, as_int32);
    tg::Tensor y = tg::Tensor::zeros({16}, tg::DType::Int32), q = tg::Tensor::empty({1, 3});
    for (int i = 0; i < 16; ++i) y.data<int32_t>()[i] = i % 3;
    for (int i = 0; i < 2; ++i) {
      tr.step(x, y);
      tr.eval(x, y);
      tr.predict(one, q);
    }
    const float before = tr.eval(x, y);
    EXPECT_EQ(allocations_in(50, [&] { tr.step(x, y); }), 0);
    EXPECT_EQ(allocations_in(50, [&] { tr.eval(x, y); }), 0);
    EXPECT_EQ(allocations_in(50, [&] { tr.predict(one, q); }), 0);
    EXPECT_LT(tr.eval(x, y), before);  // the steps read the ids and trained
  }
}

// A batch larger than the machine is refused before it costs anything:
// less than 1 MB allocated, a ValueError naming the batch size and the bytes.
TEST(MemoryLimit, HugeBatchIsRefusedBeforeAllocating) {
  tg::nn::Sequential model = trainer_model();
  const int64_t huge = 1000000000;
  std::string message;
  tg::nn::TrainerOptions o;
  o.batch_size = huge;
  EXPECT_LT(bytes_before_throw<tg::ValueError>([&] { tg::nn::Trainer tr(model, o); }, message), 1u << 20);
  EXPECT_NE(message.find("batch_size 1000000000"), std::string::npos) << message;
  EXPECT_NE(message.find("bytes"), std::string::npos) << message;
  EXPECT_NE(message.find("physical memory"), std::string::npos) << message;

  EXPECT_LT(bytes_before_throw<tg::ValueError>([&] { model.optimizer_context(huge); }, message), 1u << 20);
  EXPECT_NE(message.find("batch_size 1000000000"), std::string::npos) << message;

  // Any plan (a prediction's, fit's) is checked before its arena exists.
  EXPECT_LT(bytes_before_throw<tg::ValueError>(
                [&] {
                  tg::Graph g;
                  tg::Value x = g.input("x", tg::Shape{huge, 4});
                  tg::Value w = g.parameter(model.weights()[0].value, "w", false);
                  tg::Executable exe(std::move(g), {g.apply(tg::OpKind::MatMul, {x, w})});
                },
                message),
            1u << 20);
  EXPECT_NE(message.find("batch of 1000000000 rows"), std::string::npos) << message;

  // Nothing was changed: the model still trains at a sane batch size.
  tg::nn::TrainerOptions sane;
  sane.batch_size = 8;
  tg::nn::Trainer tr(model, sane);
  EXPECT_TRUE(std::isfinite(tr.step(random_tensor({8, 4}), random_tensor({8, 2}))));
}

// free() gives the memory back even after contexts were handed out (and so
// retired, not destroyed): weights, optimizer moments, graphs and arenas.
TEST(MemoryLimit, FreeReleasesWeightsEvenAfterContextsExisted) {
  const long long start = g_live_bytes.load();
  {
    tg::nn::Sequential model({1000});
    model.add(tg::nn::Dense(1000, "relu"));  // 4 MB of kernel, 8 MB of Adam moments
    model.add(tg::nn::Dense(2));
    model.compile(tg::OptimizerSpec::adam(), "mse");
    tg::OptimizerContext& ctx = model.optimizer_context(8);
    ctx.step(random_tensor({8, 1000}), random_tensor({8, 2}));
    model.predict(random_tensor({3, 1000}));
    EXPECT_GT(g_live_bytes.load() - start, 12ll << 20);
    model.free();
    EXPECT_LT(g_live_bytes.load() - start, 1ll << 20);  // the model object and its retired context still exist
    EXPECT_THROW(ctx.step(random_tensor({8, 1000}), random_tensor({8, 2})), tg::StateError);
  }
}

// Several inputs and outputs: a Trainer step and a one-row predict into
// caller memory allocate nothing after warm-up (float and token-id inputs).
TEST_P(AllocationFree, MultiInputMultiOutputTrainerStepAndOneRowPredict) {
  tg::manual_seed(5);
  const tg::nn::SymbolicTensor state = tg::nn::Input({4}), ids = tg::nn::Input({3}, tg::DType::Int32);
  const tg::nn::SymbolicTensor emb = tg::nn::Flatten()(tg::nn::Embedding(10, 2)(ids));
  const tg::nn::SymbolicTensor h = tg::nn::Dense(32, "relu")(tg::nn::Concatenate()({state, emb}));
  tg::nn::Model model({state, ids}, {tg::nn::Dense(2)(h), tg::nn::Dense(3, "softmax")(h)});
  model.compile(tg::OptimizerSpec::adam(1e-2f), std::vector<tg::Loss>{"huber", "sparse_categorical_crossentropy"},
                {1.0f, 0.5f});
  tg::nn::TrainerOptions o;
  o.batch_size = 16;
  tg::nn::Trainer tr(model, o);
  tg::Tensor tok = tg::Tensor::empty({16, 3}, tg::DType::Int32), cls = tg::Tensor::empty({16}, tg::DType::Int32);
  for (int i = 0; i < 48; ++i) tok.data<int32_t>()[i] = i % 10;
  for (int i = 0; i < 16; ++i) cls.data<int32_t>()[i] = i % 3;
  const std::vector<tg::Tensor> x{random_tensor({16, 4}), tok}, y{random_tensor({16, 2}), cls};
  const std::vector<tg::Tensor> one{random_tensor({1, 4}), tok.rows(0, 1)};
  std::vector<tg::Tensor> out{tg::Tensor::empty({1, 2}), tg::Tensor::empty({1, 3})};
  for (int i = 0; i < 3; ++i) {
    tr.step(x, y);
    tr.predict(one, out);
  }
  const float before = tr.eval(x, y);
  EXPECT_EQ(allocations_in(50, [&] { tr.step(x, y); }), 0);
  EXPECT_EQ(allocations_in(50, [&] { tr.predict(one, out); }), 0);
  EXPECT_LT(tr.eval(x, y), before);
  float sum = 0;
  for (int c = 0; c < 3; ++c) sum += out[1].data<float>()[c];
  EXPECT_NEAR(sum, 1.0f, 1e-5f);  // the second output's probabilities were written
}

// A residual CNN (the resnet workload's shape, small): convolutions with 16
// filters and channels (the sixteen-wide product kernel, or Winograd's),
// batch norms with the ReLU folded in (their backward kernels mask the
// gradient themselves), a residual Add folded into the batch norm before
// it, the block input's two gradients summed inside the convolution's
// input gradient, and a strided block with a 1x1 projection (the strided
// input gradient by phases, with the folded addend and the block input's
// ReLU mask).
TEST_P(AllocationFree, ResidualCnnStepAndPredict) {
  tg::manual_seed(6);
  tg::nn::clear_session();
  const tg::nn::SymbolicTensor image = tg::nn::Input({8, 8, 3});
  auto conv_bn = [](const tg::nn::SymbolicTensor& x, int64_t size = 3, int64_t stride = 1) {
    return tg::nn::BatchNormalization()(
        tg::nn::Conv2D(16, {size, size}, {stride, stride}, "same", {1, 1}, "linear", false)(x));
  };
  const auto relu = [](const tg::nn::SymbolicTensor& x) { return tg::nn::ActivationLayer("relu")(x); };
  const tg::nn::SymbolicTensor stem = relu(conv_bn(image));
  const tg::nn::SymbolicTensor block = conv_bn(relu(conv_bn(stem)));
  const tg::nn::SymbolicTensor out = relu(tg::nn::Add()({block, stem}));
  const tg::nn::SymbolicTensor down = relu(tg::nn::Add()({conv_bn(relu(conv_bn(out, 3, 2))), conv_bn(out, 1, 2)}));
  tg::nn::Model model(image, tg::nn::Dense(4, "softmax")(tg::nn::GlobalAveragePooling2D()(down)));
  model.compile(tg::OptimizerSpec::adamw(1e-3f), "sparse_categorical_crossentropy");
  auto& ctx = model.optimizer_context(16);
  const tg::Tensor x = random_tensor({16, 8, 8, 3});
  tg::Tensor y = tg::Tensor::zeros({16}, tg::DType::Int32);
  for (int i = 0; i < 16; ++i) y.data<int32_t>()[i] = i % 4;
  const float first = ctx.step(x, y).loss;
  for (int i = 0; i < 3; ++i) ctx.step(x, y);
  EXPECT_EQ(allocations_in(20, [&] { ctx.step(x, y); }), 0);
  EXPECT_LT(ctx.step(x, y).loss, first) << "the steps trained";
  tg::Tensor probs = tg::Tensor::empty({16, 4});
  model.predict(x, probs);
  EXPECT_EQ(allocations_in(20, [&] { model.predict(x, probs); }), 0);
  float row = 0;
  for (int c = 0; c < 4; ++c) row += probs.data<float>()[c];
  EXPECT_NEAR(row, 1.0f, 1e-5f);
}

// The eager step (issue 12): after warm-up, a step of ag::nn modules and
// ag::optim::Adam takes every tensor's storage from the caching allocator
// (no miss), its handles and recorded ops from the per-thread pools, and
// backward's tape from per-thread lists; what still comes from the heap are
// the five vectors of the ops layer's walk (backward_walk: which values
// depend on a parameter, which feed the loss, their gradients, the result,
// and the result handed back), counted here and bounded.
TEST(EagerAllocations, AdamStepHasNoCacheMissesAfterWarmUp) {
  namespace ag = tg::ag;
  ag::manual_seed(0);
  auto net = std::make_shared<ag::nn::Sequential>(std::initializer_list<std::shared_ptr<ag::nn::Module>>{
      std::make_shared<ag::nn::Linear>(4, 64), std::make_shared<ag::nn::ReLU>(),
      std::make_shared<ag::nn::Linear>(64, 64), std::make_shared<ag::nn::ReLU>(),
      std::make_shared<ag::nn::Linear>(64, 2)});
  ag::optim::Adam opt(net->parameters(), 1e-3);
  const ag::Tensor x = ag::randn(tg::Shape{32, 4}), y = ag::randn(tg::Shape{32, 2});
  auto step = [&] {
    opt.zero_grad();
    ag::Tensor loss = ag::mse_loss((*net)(x), y);
    loss.backward();
    opt.step();
  };
  for (int i = 0; i < 20; ++i) step();
  ag::reset_memory_stats();
  const int kSteps = 100;
  const long allocations = allocations_in(kSteps, step);
  EXPECT_EQ(ag::memory_stats().misses, 0u);
  EXPECT_GT(ag::memory_stats().hits, 0u);
  const long per_step = allocations / kSteps;
  RecordProperty("heap_allocations_per_step", std::to_string(per_step));
  std::printf("eager Adam step: %ld heap allocations per step after warm-up (backward_walk's vectors)\n", per_step);
  EXPECT_LE(per_step, 5);
}

// A training step of an MLP on a Vulkan device: tensorgrad's own code
// allocates nothing on the thread that steps. The Vulkan driver is another
// matter: Mesa allocates on every submit, on its own threads and on the
// caller's; the driver's allocations made through the allocation callbacks
// the device was given (VkAllocationCallbacks) are counted by the library
// and subtracted, and the rest are reported, not forbidden.
TEST(VulkanAllocations, AnMlpStepAllocatesNothingOfOurs) {
  std::shared_ptr<const tg::Backend> vk;
  try {
    vk = tg::backend(tg::Device("vulkan"));
  } catch (const tg::StateError& e) {
    GTEST_SKIP() << e.what();
  }
  tg::manual_seed(1);
  tg::nn::Sequential model({64});
  model.add(tg::nn::Dense(32, "relu"));
  model.add(tg::nn::Dropout(0.2f));
  model.add(tg::nn::Dense(10, "softmax"));
  model.compile(tg::OptimizerSpec::adamw(1e-3f), "sparse_categorical_crossentropy", {"accuracy"}, vk->device());
  tg::nn::TrainerOptions options;
  options.batch_size = 16;
  tg::nn::Trainer tr(model, options);
  std::vector<int32_t> ids(16);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i % 10);
  const tg::Tensor x = random_tensor({16, 64}), y = tg::Tensor::from_vector(ids, tg::Shape{16});
  for (int i = 0; i < 3; ++i) tr.step(x, y);
  tl_counted = true;
  g_other_threads = 0;
  g_one_thread = true;
  const uint64_t driver_before = tg::vulkan_driver_allocations();
  const long mine = allocations_in(50, [&] { tr.step(x, y); });
  const uint64_t driver = tg::vulkan_driver_allocations() - driver_before;
  g_one_thread = false;
  tl_counted = false;
  std::printf("50 Vulkan steps: %ld allocations on the stepping thread, %llu of them the driver's through its "
              "callbacks; %ld on the driver's other threads\n",
              mine, (unsigned long long)driver, g_other_threads.load());
  RecordProperty("driver_callback_allocations", std::to_string(driver));
  RecordProperty("other_thread_allocations", std::to_string(g_other_threads.load()));
  EXPECT_EQ(mine - long(driver), 0);
}

// rl::ReplayBuffer and rl::PrioritizedReplayBuffer: add() copies into the storage allocated once, sample()
// fills a batch made once, update_priorities() rewrites the sum tree in place.
TEST(RlAllocations, ReplayAddSampleAndPriorityUpdatesAllocateNothing) {
  tg::rl::ReplayBufferOptions o;
  o.capacity = 64;
  o.observation_shape = tg::Shape{4};
  o.n_step = 3;
  tg::rl::ReplayBuffer uniform(o);
  tg::rl::PrioritizedReplayBuffer prioritized(o);
  const tg::Tensor x = random_tensor({4}), x1 = random_tensor({1, 4}), next = random_tensor({4});
  const tg::Tensor action = tg::Tensor::zeros(tg::Shape{}, tg::DType::Int32);
  tg::rl::ReplayBatch ub = uniform.make_batch(32), pb = prioritized.make_batch(32);
  const tg::Tensor td = random_tensor({32});
  for (int i = 0; i < 40; ++i) {
    uniform.add(x, int64_t(i % 2), 1.0f, next, i % 9 == 8, false);
    prioritized.add(x1, action, 1.0f, next, false, i % 11 == 10);
  }
  long n = allocations_in(200, [&] {
    uniform.add(x, int64_t(1), 0.5f, next, false, false);
    uniform.add(x1, action, 0.5f, next, true, false);
    uniform.sample(ub);
    prioritized.add(x, int64_t(0), 0.5f, next, false, true);
    prioritized.sample(pb);
    prioritized.update_priorities(pb.indices, td);
  });
  EXPECT_EQ(n, 0);
}
