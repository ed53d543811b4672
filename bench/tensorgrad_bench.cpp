// tensorgrad's side of the reference workloads in /work/shared/bench
// (peer_pytorch.py, libtorch/peer_libtorch.cpp, dlib/peer_dlib.cpp): the same
// models, optimizers, batch sizes and data shapes, timed the way the peers
// time them (warm-up first, then the median of individually timed units).
//
//   mlp_fit     784-500-10 ReLU MLP (Dense(500, relu), Dense(10, softmax)),
//               AdamW lr 1e-3, sparse categorical cross-entropy, batch 500:
//               one model.fit epoch (verbose 0) over 57,000 random rows shaped
//               like Fashion-MNIST (uniform [0, 1) x, int32 labels 0..9).
//               Counter s_per_epoch. The headline: it is what users run.
//   mlp_steps   the same epoch written by hand on the public step fit uses:
//               114 ctx.step calls on consecutive 500-row slices of x (the
//               rows are uniform random, so they are already in random order).
//               Counter s_per_epoch.
//   rlstep      4-64-64-2 ReLU MLP, Adam lr 1e-3, MSE, batch 32: one ctx.step
//               on a fixed random batch. Counter us_per_step (median of 2,000
//               steps after 200 warm-up steps, as the peers).
//   cnn_fit     ggml's MNIST CNN as peer_pytorch.py's cnn: Conv2D(8, 3x3, same,
//               relu), MaxPooling2D(2), Conv2D(16, 3x3, same, relu),
//               MaxPooling2D(2), Flatten, Dense(10, softmax); AdamW lr 1e-3,
//               batch 500; one fit epoch over 57,000 random 28x28x1 images.
//               Counter s_per_epoch.
//   resnet_fit  the small residual CNN of peer_pytorch.py's resnet workload
//               (apps/fashion_models.h: functional, Add skip connections,
//               batch norm), AdamW lr 1e-3, batch 128: one fit epoch over
//               57,000 random 28x28x1 images. Counter s_per_epoch. One
//               repetition by default (an epoch takes minutes).
//   trainer_step  the rlstep workload through nn::Trainer::step (the RL
//               user's entry point) instead of the optimizer context.
//               Counter us_per_step.
//   eager_step  the rlstep network (4-64-64-2 ReLU, MSE, batch 32) written in
//               the eager API (tensorgrad::ag), each op run when called: the
//               forward, loss.backward(), then a hand-written SGD update
//               (lr 1e-2) under ag::NoGradGuard: p.add_(p.grad(), -lr) and
//               p.set_grad(ag::Tensor()) per parameter (PyTorch's
//               zero_grad(set_to_none=True)). Parameters in the engine's
//               {in, out} layout, uniform in +-1/sqrt(fan_in) as torch's
//               Linear. Counter us_per_step, timed as rlstep. The peers are
//               bench/eager_peer_pytorch.py and bench/eager_peer_libtorch/.
//   eager_step_vulkan, eager_adam_step_vulkan  the two eager steps on the
//               first Vulkan device, each timed step ending with
//               synchronize(); counters submits_per_step,
//               dispatches_per_step, barriers_per_step (an error row when
//               there is no Vulkan device).
//   gpt_step    peer_pytorch.py's gpt workload (apps/char_gpt.h): the
//               character-level GPT (4 pre-norm TransformerDecoder blocks of
//               width 128, 4 heads, GELU MLP 512, dropout 0.1, context 128)
//               on random 32 x 128-byte windows of GCIDE's text, AdamW on the
//               cosine schedule; one Trainer::step. Counter ms_per_step
//               (median of 60 steps after 10 warm-up steps, as the peer with
//               --steps 0).
//   gpt_sample  the untrained model's greedy generation of 300 bytes from the
//               peer's prompt through nn::CausalLM (one position at a time,
//               key-value cache). Counter bytes_per_s.
//   llama_step  peer_pytorch.py's llama workload (apps/char_llama.h): the
//               LLaMA-style byte model (4 blocks of width 192, 6 query and 2
//               key-value heads, SwiGLU 512, RMS norm, rotary embedding,
//               context 128) on random 32 x 128-byte windows of GCIDE's
//               text, AdamW on the cosine schedule; one Trainer::step.
//               Counter ms_per_step (median of 60 steps after 10 warm-up).
//   llama_sample  the untrained model's greedy generation of 300 bytes from
//               the peer's prompt through nn::CausalLM. Counter
//               bytes_per_s.
//   llama_write  writes that model to TG_LLAMA_DIR as f32.gguf and q8_0.gguf
//               (io::save_llama), for llama.cpp's rows.
//   llama_file_f32, llama_file_q8_0  nn::CausalLM on those files (read back
//               with io::load_llama): counters prompt_tokens_per_s (127
//               tokens from an empty cache, one position at a time) and
//               generation_tokens_per_s (127 greedy tokens after 2).
//   predict     the 784-500-10 MLP, model.predict(x, out) of {500, 784} into a
//               caller-owned {500, 10}. Counter us_per_image (median of 200
//               calls after 20 warm-up calls, divided by 500).
//
// Each repetition builds a fresh model. Google Benchmark reports the
// aggregates over repetitions; the "_median" rows are the numbers to quote.
// Environment (Google Benchmark owns the command-line flags):
//   TG_THREADS  compute threads, passed to tensorgrad::set_num_threads (default 2)
//   TG_REPS     repetitions of every benchmark (default: mlp 3, others 5)
//   TG_WINOGRAD 0: the direct convolution kernels only
//               (tensorgrad::set_winograd_convolutions(false)), to compare
//   TG_DEVICE_STEPS  timed steps of the _vulkan benchmarks (default 500)
// Example:
//   TG_THREADS=2 build/bench/tensorgrad_bench --benchmark_filter=rlstep
#include <benchmark/benchmark.h>
#include <tensorgrad/tensorgrad.h>

#include "../apps/char_gpt.h"
#include "../apps/char_llama.h"
#include "../apps/fashion_models.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace tg = tensorgrad;

namespace {

constexpr int64_t kRows = 57000, kFeatures = 784, kClasses = 10, kBatch = 500;

int env_int(const char* name, int fallback) {
  const char* s = std::getenv(name);
  if (!s || !*s) return fallback;
  char* end = nullptr;
  long v = std::strtol(s, &end, 10);
  if (*end || v < 1) {
    std::fprintf(stderr, "tensorgrad_bench: %s must be a positive integer; got '%s'\n", name, s);
    std::exit(2);
  }
  return int(v);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

tg::Tensor uniform(const tg::Shape& shape, std::mt19937_64& rng) {
  tg::Tensor t = tg::Tensor::empty(shape);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = u(rng);
  return t;
}

tg::Tensor normal(const tg::Shape& shape, std::mt19937_64& rng) {
  tg::Tensor t = tg::Tensor::empty(shape);
  std::normal_distribution<float> n(0.0f, 1.0f);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = n(rng);
  return t;
}

// 57,000 rows shaped like Fashion-MNIST, made once per process (untimed).
struct MnistLike {
  tg::Tensor x, y;
};
const MnistLike& mnist_like() {
  static const MnistLike data = [] {
    std::mt19937_64 rng(12345);
    MnistLike d;
    d.x = uniform(tg::Shape{kRows, kFeatures}, rng);
    d.y = tg::Tensor::empty(tg::Shape{kRows}, tg::DType::Int32);
    std::uniform_int_distribution<int32_t> label(0, int32_t(kClasses) - 1);
    int32_t* y = d.y.data<int32_t>();
    for (int64_t i = 0; i < kRows; ++i) y[i] = label(rng);
    return d;
  }();
  return data;
}

tg::nn::Sequential make_mlp(bool compile, tg::DTypePolicy policy = tg::DTypePolicy::kFloat32) {
  tg::nn::clear_session();
  tg::nn::Sequential model(tg::Shape{kFeatures});
  model.add(tg::nn::Dense(500, "relu"));
  model.add(tg::nn::Dense(kClasses, "softmax"));
  if (compile) model.compile(tg::OptimizerSpec::adamw(1e-3f), "sparse_categorical_crossentropy", {}, policy);
  return model;
}

// One fit epoch (verbose 0) of a compiled model on (x, y) per iteration,
// after one warm-up step that builds and plans the batch-500 context fit
// uses, so every timed epoch is a steady-state one. Counter s_per_epoch.
void time_fit_epochs(benchmark::State& state, tg::nn::Model& model, const tg::Tensor& x, const tg::Tensor& y,
                     int64_t batch = kBatch) {
  tg::OptimizerContext& ctx = model.optimizer_context(batch);
  benchmark::DoNotOptimize(ctx.step(x.rows(0, batch), y.rows(0, batch)).loss);
  tg::nn::FitOptions fit;
  fit.epochs = 1;
  fit.batch_size = batch;
  fit.verbose = 0;
  std::vector<double> times;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    tg::nn::History h = model.fit(x, y, fit);
    const double dt = seconds_since(t0);
    benchmark::DoNotOptimize(h);
    state.SetIterationTime(dt);
    times.push_back(dt);
  }
  state.counters["s_per_epoch"] = median(times);
}

// The fit epochs under the float32 policy, or (mlp_fit_bf16, cnn_fit_bf16)
// under mixed_bfloat16: state.range(0) is the DTypePolicy.
tg::DTypePolicy policy_of(const benchmark::State& state) { return tg::DTypePolicy(state.range(0)); }

void BM_mlp_fit(benchmark::State& state) {
  try {
    const MnistLike& d = mnist_like();
    tg::manual_seed(0);
    tg::nn::Sequential model = make_mlp(true, policy_of(state));
    time_fit_epochs(state, model, d.x, d.y);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

void BM_cnn_fit(benchmark::State& state) {
  try {
    const MnistLike& d = mnist_like();
    tg::manual_seed(0);
    tg::nn::clear_session();
    tg::nn::Sequential model(tg::Shape{28, 28, 1});
    model.add(tg::nn::Conv2D(8, 3, "same", "relu"));
    model.add(tg::nn::MaxPooling2D());
    model.add(tg::nn::Conv2D(16, 3, "same", "relu"));
    model.add(tg::nn::MaxPooling2D());
    model.add(tg::nn::Flatten());
    model.add(tg::nn::Dense(kClasses, "softmax"));
    model.compile(tg::OptimizerSpec::adamw(1e-3f), "sparse_categorical_crossentropy", {}, policy_of(state));
    time_fit_epochs(state, model, d.x.reshape(tg::Shape{kRows, 28, 28, 1}), d.y);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

void BM_resnet_fit(benchmark::State& state) {
  try {
    const MnistLike& d = mnist_like();
    tg::manual_seed(0);
    tg::nn::clear_session();
    tg::nn::Model model = fashion::resnet();
    model.compile(tg::OptimizerSpec::adamw(1e-3f), "sparse_categorical_crossentropy");
    time_fit_epochs(state, model, d.x.reshape(tg::Shape{kRows, 28, 28, 1}), d.y, 128);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

void BM_mlp_steps(benchmark::State& state) {
  try {
    const MnistLike& d = mnist_like();
    tg::manual_seed(0);
    tg::nn::Sequential model = make_mlp(true);
    tg::OptimizerContext& ctx = model.optimizer_context(kBatch);
    benchmark::DoNotOptimize(ctx.step(d.x.rows(0, kBatch), d.y.rows(0, kBatch)).loss);
    const int64_t steps = kRows / kBatch;  // 114
    std::vector<double> times;
    for (auto _ : state) {
      const auto t0 = std::chrono::steady_clock::now();
      float loss = 0.0f;
      for (int64_t i = 0; i < steps; ++i)
        loss += ctx.step(d.x.rows(i * kBatch, (i + 1) * kBatch), d.y.rows(i * kBatch, (i + 1) * kBatch)).loss;
      const double dt = seconds_since(t0);
      benchmark::DoNotOptimize(loss);
      state.SetIterationTime(dt);
      times.push_back(dt);
    }
    state.counters["s_per_epoch"] = median(times);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

tg::nn::Sequential make_rl_model() {
  tg::manual_seed(0);
  tg::nn::clear_session();
  tg::nn::Sequential model(tg::Shape{4});
  model.add(tg::nn::Dense(64, "relu"));
  model.add(tg::nn::Dense(64, "relu"));
  model.add(tg::nn::Dense(2));
  model.compile(tg::OptimizerSpec::adam(1e-3f), "mse");
  return model;
}

// Times `step()` (returning the loss) once per iteration after 200 warm-up
// steps, as the peers do. Counter us_per_step: the median.
template <class Step>
void time_steps(benchmark::State& state, Step step, const std::function<void()>& after_warm_up = [] {}) {
  for (int i = 0; i < 200; ++i) benchmark::DoNotOptimize(step());
  after_warm_up();
  std::vector<double> times;
  times.reserve(size_t(state.max_iterations));
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto loss = step();
    const double dt = seconds_since(t0);
    benchmark::DoNotOptimize(loss);
    state.SetIterationTime(dt);
    times.push_back(dt);
  }
  state.counters["us_per_step"] = 1e6 * median(times);
}

void BM_trainer_step(benchmark::State& state) {
  try {
    tg::nn::TrainerOptions options;
    options.batch_size = 32;
    tg::nn::Trainer trainer(make_rl_model(), options);
    std::mt19937_64 rng(7);
    const tg::Tensor x = normal(tg::Shape{32, 4}, rng), y = normal(tg::Shape{32, 2}, rng);
    time_steps(state, [&] { return trainer.step(x, y); });
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// One row through the rlstep network's Trainer::predict into a caller-owned
// {1, 2}: an RL agent acting (issue 15's one-row target). us_per_step: the
// median call.
void BM_trainer_predict_row(benchmark::State& state) {
  try {
    tg::nn::TrainerOptions options;
    options.batch_size = 32;
    tg::nn::Trainer trainer(make_rl_model(), options);
    std::mt19937_64 rng(7);
    const tg::Tensor x = normal(tg::Shape{1, 4}, rng);
    tg::Tensor out = tg::Tensor::empty(tg::Shape{1, 2});
    time_steps(state, [&] {
      trainer.predict(x, out);
      return out.data<float>()[0];
    });
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

void BM_rlstep(benchmark::State& state) {
  try {
    tg::nn::Sequential model = make_rl_model();
    std::mt19937_64 rng(7);
    const tg::Tensor x = normal(tg::Shape{32, 4}, rng), y = normal(tg::Shape{32, 2}, rng);
    tg::OptimizerContext& ctx = model.optimizer_context(32);
    time_steps(state, [&] { return ctx.step(x, y).loss; });
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// A device's eager steps are queued: each timed step ends with
// synchronize() (as PyTorch's CUDA benchmarks call torch.cuda.synchronize),
// and the device's submits, dispatches and barriers per step are counted.
void count_device_work(benchmark::State& state, tg::Device device, const tg::DeviceCounters& before) {
  if (device == tg::Device::CPU) return;
  const tg::DeviceCounters after = tg::device_counters(device);
  const double n = double(state.iterations());
  state.counters["submits_per_step"] = double(after.submits - before.submits) / n;
  state.counters["dispatches_per_step"] = double(after.dispatches - before.dispatches) / n;
  state.counters["barriers_per_step"] = double(after.barriers - before.barriers) / n;
}

void end_step(tg::Device device) {
  if (device != tg::Device::CPU) tg::synchronize(device);
}

// The eager small step (issue 11): every op of forward, backward and update
// runs when called; nothing is traced or replayed. On `device` (the CPU, or
// eager_step_vulkan) the parameters and the batch are placed there.
void BM_eager_step(benchmark::State& state, tg::Device device) {
  try {
    namespace ag = tg::ag;
    std::mt19937_64 rng(7);
    const auto param = [&](const tg::Shape& shape, int64_t fan_in) {
      tg::Tensor t = tg::Tensor::empty(shape);
      const float k = 1.0f / std::sqrt(float(fan_in));
      std::uniform_real_distribution<float> u(-k, k);
      float* p = t.data<float>();
      for (int64_t i = 0; i < t.numel(); ++i) p[i] = u(rng);
      return ag::Tensor(t, /*requires_grad=*/true).to(device);
    };
    ag::Tensor w1 = param(tg::Shape{4, 64}, 4), b1 = param(tg::Shape{64}, 4);
    ag::Tensor w2 = param(tg::Shape{64, 64}, 64), b2 = param(tg::Shape{64}, 64);
    ag::Tensor w3 = param(tg::Shape{64, 2}, 64), b3 = param(tg::Shape{2}, 64);
    const ag::Tensor x = ag::Tensor(normal(tg::Shape{32, 4}, rng)).to(device);
    const ag::Tensor y = ag::Tensor(normal(tg::Shape{32, 2}, rng)).to(device);
    ag::Tensor* params[] = {&w1, &b1, &w2, &b2, &w3, &b3};
    const float lr = 1e-2f;
    tg::DeviceCounters before;
    time_steps(state, [&] {
      ag::Tensor h = ag::relu(ag::matmul(x, w1) + b1);
      h = ag::relu(ag::matmul(h, w2) + b2);
      ag::Tensor out = ag::matmul(h, w3) + b3;
      ag::Tensor loss = ag::mse_loss(out, y);
      loss.backward();
      {
        ag::NoGradGuard no_grad;
        for (ag::Tensor* p : params) {
          p->add_(p->grad(), -lr);
          p->set_grad(ag::Tensor());
        }
      }
      // The loss is not read back (the peers do not call item() either).
      benchmark::DoNotOptimize(loss.data().raw());
      end_step(device);
      return 0.0f;
    }, [&] { before = device == tg::Device::CPU ? tg::DeviceCounters{} : tg::device_counters(device); });
    count_device_work(state, device, before);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// The eager small step with modules and Adam (issue 12): the rlstep network as
// ag::nn::Sequential, ag::optim::Adam (lr 1e-3), mse_loss; zero_grad,
// forward, backward, step, every op run when called. The peers are the
// shared peers' rlstep (torch.nn.Sequential and torch.optim.Adam, written the
// same way). Also counts the caching allocator's misses per timed step.
void BM_eager_adam_step(benchmark::State& state, tg::Device device) {
  try {
    namespace ag = tg::ag;
    ag::manual_seed(0);
    auto net = std::make_shared<ag::nn::Sequential>(std::initializer_list<std::shared_ptr<ag::nn::Module>>{
        std::make_shared<ag::nn::Linear>(4, 64), std::make_shared<ag::nn::ReLU>(),
        std::make_shared<ag::nn::Linear>(64, 64), std::make_shared<ag::nn::ReLU>(),
        std::make_shared<ag::nn::Linear>(64, 2)});
    net->to(device);
    ag::optim::Adam opt(net->parameters(), 1e-3);
    std::mt19937_64 rng(7);
    const ag::Tensor x = ag::Tensor(normal(tg::Shape{32, 4}, rng)).to(device);
    const ag::Tensor y = ag::Tensor(normal(tg::Shape{32, 2}, rng)).to(device);
    auto step = [&] {
      opt.zero_grad();
      ag::Tensor loss = ag::mse_loss((*net)(x), y);
      loss.backward();
      opt.step();
      benchmark::DoNotOptimize(loss.data().raw());
      end_step(device);
      return 0.0f;
    };
    for (int i = 0; i < 200; ++i) step();
    tg::DeviceCounters before;
    uint64_t misses = 0;
    time_steps(state, step, [&] {
      misses = ag::memory_stats(device).misses;
      before = device == tg::Device::CPU ? tg::DeviceCounters{} : tg::device_counters(device);
    });
    state.counters["cache_misses_per_step"] =
        double(ag::memory_stats(device).misses - misses) / double(state.iterations());
    count_device_work(state, device, before);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

void BM_predict(benchmark::State& state) {
  try {
    tg::manual_seed(0);
    tg::nn::Sequential model = make_mlp(false);
    std::mt19937_64 rng(11);
    const tg::Tensor x = uniform(tg::Shape{kBatch, kFeatures}, rng);
    tg::Tensor out = tg::Tensor::empty(tg::Shape{kBatch, kClasses});
    for (int i = 0; i < 20; ++i) model.predict(x, out);  // warm-up, as the peers
    std::vector<double> times;
    times.reserve(size_t(state.max_iterations));
    for (auto _ : state) {
      const auto t0 = std::chrono::steady_clock::now();
      model.predict(x, out);
      const double dt = seconds_since(t0);
      benchmark::DoNotOptimize(out.raw());
      benchmark::ClobberMemory();
      state.SetIterationTime(dt);
      times.push_back(dt);
    }
    state.counters["us_per_image"] = 1e6 * median(times) / double(kBatch);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// The text classifier of peer_pytorch.py's lstm and gru workloads:
// Embedding(20000, 128) -> LSTM(128) or GRU(128) -> Dense(2) on random token
// sequences of 100 steps, batch 64, Adam lr 1e-3, softmax cross-entropy on
// the last step. us_per_step: a training step; us_per_batch: predict of the
// 64 rows. The embedding's gradient is dense {20000, 128}, as the peer's.
template <class Cell>
void text_rnn(benchmark::State& state, bool train) {
  try {
    tg::manual_seed(0);
    tg::nn::clear_session();
    constexpr int64_t kRows = 64, kSteps = 100, kVocabulary = 20000;
    tg::nn::Sequential model(tg::Shape{kSteps});
    model.add(tg::nn::Embedding(kVocabulary, 128));
    model.add(Cell(128));
    model.add(tg::nn::Dense(2, "softmax"));
    model.compile(tg::OptimizerSpec::adam(1e-3f), "sparse_categorical_crossentropy");
    std::mt19937_64 rng(5);
    std::vector<int32_t> ids(static_cast<size_t>(kRows * kSteps)), labels(static_cast<size_t>(kRows));
    for (int32_t& id : ids) id = int32_t(rng() % uint64_t(kVocabulary));
    for (int32_t& l : labels) l = int32_t(rng() % 2);
    const tg::Tensor x = tg::Tensor::from_vector(std::span<const int32_t>(ids), tg::Shape{kRows, kSteps});
    const tg::Tensor y = tg::Tensor::from_vector(std::span<const int32_t>(labels), tg::Shape{kRows});
    tg::Tensor out = tg::Tensor::empty(tg::Shape{kRows, 2});
    tg::OptimizerContext& ctx = model.optimizer_context(kRows);
    auto once = [&] { train ? (void)ctx.step(x, y) : model.predict(x, out); };
    for (int i = 0; i < 3; ++i) once();  // warm-up: plans, pools, pages
    std::vector<double> times;
    for (auto _ : state) {
      const auto t0 = std::chrono::steady_clock::now();
      once();
      const double dt = seconds_since(t0);
      benchmark::ClobberMemory();
      state.SetIterationTime(dt);
      times.push_back(dt);
    }
    state.counters[train ? "us_per_step" : "us_per_batch"] = 1e6 * median(times);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

void BM_lstm_step(benchmark::State& state) { text_rnn<tg::nn::LSTM>(state, true); }
void BM_lstm_infer(benchmark::State& state) { text_rnn<tg::nn::LSTM>(state, false); }
void BM_gru_step(benchmark::State& state) { text_rnn<tg::nn::GRU>(state, true); }
void BM_gru_infer(benchmark::State& state) { text_rnn<tg::nn::GRU>(state, false); }

// A language model's training step, as the peers time it: 10 warm-up steps, then one step per iteration on
// the next random batch; counter ms_per_step (the median).
template <class Batches>
void time_language_model_steps(benchmark::State& state, tg::nn::Trainer& trainer, Batches& batches) {
  for (int i = 0; i < 10; ++i) batches.next(), trainer.step(batches.x, batches.y);
  std::vector<double> times;
  for (auto _ : state) {
    batches.next();
    const auto t0 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(trainer.step(batches.x, batches.y));
    const double dt = seconds_since(t0);
    state.SetIterationTime(dt);
    times.push_back(dt);
  }
  state.counters["ms_per_step"] = 1e3 * median(times);
}

// 300 greedy bytes from the prompt per iteration after a warm-up; counter bytes_per_s (the median's rate).
void time_generation(benchmark::State& state, tg::nn::CausalLM& lm, const std::vector<int32_t>& prompt) {
  lm.generate(prompt, 20);
  std::vector<double> times;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(lm.generate(prompt, 300));
    const double dt = seconds_since(t0);
    state.SetIterationTime(dt);
    times.push_back(dt);
  }
  state.counters["bytes_per_s"] = 300.0 / median(times);
}

void BM_gpt_step(benchmark::State& state) {
  try {
    tg::manual_seed(0);
    tg::nn::clear_session();
    const std::vector<uint8_t> text = char_gpt::read_text(char_gpt::kGcide);
    tg::nn::Model model = char_gpt::model();
    char_gpt::init_like_pytorch(model, 0);
    model.compile(char_gpt::optimizer(2000), "sparse_categorical_crossentropy");
    tg::nn::Trainer trainer(model, {.batch_size = char_gpt::kBatch});
    char_gpt::Batches batches(text, 1);
    time_language_model_steps(state, trainer, batches);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

void BM_gpt_sample(benchmark::State& state) {
  try {
    tg::manual_seed(0);
    tg::nn::clear_session();
    tg::nn::Model model = char_gpt::model();
    char_gpt::init_like_pytorch(model, 0);
    tg::nn::CausalLM lm(model);
    const std::vector<int32_t> prompt = char_gpt::tokens_of(char_gpt::RunOptions{}.prompt);
    time_generation(state, lm, prompt);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

void BM_llama_step(benchmark::State& state) {
  try {
    tg::manual_seed(0);
    tg::nn::clear_session();
    const std::vector<uint8_t> text = char_gpt::read_text(char_gpt::kGcide);
    const std::vector<int32_t> tokens(text.begin(), text.end());
    tg::nn::LlamaCausalLM model(char_llama::config());
    char_llama::init_like_pytorch(model, 0);
    model.compile(char_gpt::optimizer(2000), "sparse_categorical_crossentropy");
    tg::nn::Trainer trainer(model, {.batch_size = char_llama::kBatch});
    char_llama::Batches batches(tokens, 1);
    time_language_model_steps(state, trainer, batches);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

void BM_llama_sample(benchmark::State& state) {
  try {
    tg::manual_seed(0);
    tg::nn::clear_session();
    tg::nn::LlamaCausalLM model(char_llama::config());
    char_llama::init_like_pytorch(model, 0);
    tg::nn::CausalLM lm(model);
    const std::vector<int32_t> prompt = char_gpt::tokens_of(char_gpt::RunOptions{}.prompt);
    time_generation(state, lm, prompt);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// The files of llama.cpp's rows in bench/compare.py: the untrained llama_sample
// model at F32 and Q8_0, in TG_LLAMA_DIR (f32.gguf, q8_0.gguf).
void BM_llama_write(benchmark::State& state) {
  try {
    const char* dir = std::getenv("TG_LLAMA_DIR");
    if (!dir) throw tg::ValueError("llama_write: set TG_LLAMA_DIR to the folder for f32.gguf and q8_0.gguf");
    tg::manual_seed(0);
    tg::nn::clear_session();
    tg::nn::LlamaCausalLM model(char_llama::config());
    char_llama::init_like_pytorch(model, 0);
    const tg::text::Tokenizer bytes = tg::text::Tokenizer::byte_level();
    for (auto _ : state) {
      tg::io::save_llama(model, std::string(dir) + "/f32.gguf", {.type = tg::io::TensorType::F32, .tokenizer = &bytes});
      tg::io::save_llama(model, std::string(dir) + "/q8_0.gguf", {.type = tg::io::TensorType::Q8_0, .tokenizer = &bytes});
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// tensorgrad's CausalLM on a file llama_write wrote (read with io::load_llama, its weights dequantized):
// prompt processing, 127 tokens fed from an empty cache (one position at a time: CausalLM has no batched
// prompt yet), and generation, 127 greedy tokens after a 2-token prompt; tokens per second, medians.
void llama_file(benchmark::State& state, const char* file) {
  try {
    const char* dir = std::getenv("TG_LLAMA_DIR");
    if (!dir) throw tg::ValueError("llama_file: set TG_LLAMA_DIR (bench/compare.py --workloads llama does)");
    tg::io::LlamaFile f = tg::io::load_llama(std::string(dir) + "/" + file);
    tg::nn::CausalLM lm(*f.model);
    std::vector<int32_t> prompt(128);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 7919 + 13) % 256);  // bench.mjs's ids
    lm.generate(std::span<const int32_t>(prompt).first(2), 16);  // warm-up
    std::vector<double> pp, tg_;
    for (auto _ : state) {
      lm.reset();
      auto t0 = std::chrono::steady_clock::now();
      for (size_t i = 0; i + 1 < prompt.size(); ++i) lm.next(prompt[i]);
      pp.push_back(seconds_since(t0));
      t0 = std::chrono::steady_clock::now();
      benchmark::DoNotOptimize(lm.generate(std::span<const int32_t>(prompt).first(2), 127));
      const double dt = seconds_since(t0);
      tg_.push_back(dt);
      state.SetIterationTime(pp.back() + dt);
    }
    state.counters["prompt_tokens_per_s"] = 127.0 / median(pp);
    state.counters["generation_tokens_per_s"] = 127.0 / median(tg_);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}
void BM_llama_file_f32(benchmark::State& state) { llama_file(state, "f32.gguf"); }
void BM_llama_file_q8_0(benchmark::State& state) { llama_file(state, "q8_0.gguf"); }

}  // namespace

int main(int argc, char** argv) {
  const int threads = env_int("TG_THREADS", 2);
  const int mlp_reps = env_int("TG_REPS", 3);
  const int small_reps = env_int("TG_REPS", 5);
  try {
    tg::set_num_threads(threads);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tensorgrad_bench: set_num_threads(%d): %s\n", threads, e.what());
    return 2;
  }
  benchmark::AddCustomContext("tensorgrad_threads", std::to_string(tg::num_threads()));
  if (const char* w = std::getenv("TG_WINOGRAD"); w && std::string(w) == "0") tg::set_winograd_convolutions(false);
  benchmark::AddCustomContext("tensorgrad_winograd", tg::winograd_convolutions() ? "on" : "off");

  const int64_t f32 = int64_t(tg::DTypePolicy::kFloat32), bf16 = int64_t(tg::DTypePolicy::kMixedBFloat16);
  benchmark::RegisterBenchmark("mlp_fit", BM_mlp_fit)->Arg(f32)
      ->Iterations(1)->Repetitions(mlp_reps)->ReportAggregatesOnly(true)
      ->UseManualTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("mlp_fit_bf16", BM_mlp_fit)->Arg(bf16)
      ->Iterations(1)->Repetitions(mlp_reps)->ReportAggregatesOnly(true)
      ->UseManualTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("mlp_steps", BM_mlp_steps)
      ->Iterations(1)->Repetitions(mlp_reps)->ReportAggregatesOnly(true)
      ->UseManualTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("cnn_fit", BM_cnn_fit)->Arg(f32)
      ->Iterations(1)->Repetitions(mlp_reps)->ReportAggregatesOnly(true)
      ->UseManualTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("cnn_fit_bf16", BM_cnn_fit)->Arg(bf16)
      ->Iterations(1)->Repetitions(mlp_reps)->ReportAggregatesOnly(true)
      ->UseManualTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("resnet_fit", BM_resnet_fit)
      ->Iterations(1)->Repetitions(env_int("TG_REPS", 1))->ReportAggregatesOnly(true)
      ->UseManualTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("rlstep", BM_rlstep)
      ->Iterations(2000)->Repetitions(small_reps)->ReportAggregatesOnly(true)
      ->UseManualTime()->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("trainer_step", BM_trainer_step)
      ->Iterations(2000)->Repetitions(small_reps)->ReportAggregatesOnly(true)
      ->UseManualTime()->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("trainer_predict_row", BM_trainer_predict_row)
      ->Iterations(20000)->Repetitions(small_reps)->ReportAggregatesOnly(true)
      ->UseManualTime()->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("eager_step", BM_eager_step, tg::Device::CPU)
      ->Iterations(2000)->Repetitions(small_reps)->ReportAggregatesOnly(true)
      ->UseManualTime()->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("eager_adam_step", BM_eager_adam_step, tg::Device::CPU)
      ->Iterations(2000)->Repetitions(small_reps)->ReportAggregatesOnly(true)
      ->UseManualTime()->Unit(benchmark::kMicrosecond);
  // The same steps on the first Vulkan device (a GPU, or lavapipe on the
  // CPU); an error row where there is none. Fewer steps: a lavapipe step
  // takes milliseconds.
  const tg::Device vulkan("vulkan");
  benchmark::RegisterBenchmark("eager_step_vulkan", BM_eager_step, vulkan)
      ->Iterations(env_int("TG_DEVICE_STEPS", 500))->Repetitions(small_reps)->ReportAggregatesOnly(true)
      ->UseManualTime()->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("eager_adam_step_vulkan", BM_eager_adam_step, vulkan)
      ->Iterations(env_int("TG_DEVICE_STEPS", 500))->Repetitions(small_reps)->ReportAggregatesOnly(true)
      ->UseManualTime()->Unit(benchmark::kMicrosecond);
  struct Named {
    const char* name;
    void (*fn)(benchmark::State&);
  };
  for (Named b : {Named{"lstm_step", BM_lstm_step}, Named{"lstm_infer", BM_lstm_infer},
                  Named{"gru_step", BM_gru_step}, Named{"gru_infer", BM_gru_infer}})
    benchmark::RegisterBenchmark(b.name, b.fn)
        ->Iterations(20)->Repetitions(env_int("TG_REPS", 3))->ReportAggregatesOnly(true)
        ->UseManualTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("gpt_step", BM_gpt_step)
      ->Iterations(60)->Repetitions(env_int("TG_REPS", 1))->ReportAggregatesOnly(true)
      ->UseManualTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("gpt_sample", BM_gpt_sample)
      ->Iterations(5)->Repetitions(env_int("TG_REPS", 1))->ReportAggregatesOnly(true)
      ->UseManualTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("llama_step", BM_llama_step)
      ->Iterations(60)->Repetitions(env_int("TG_REPS", 1))->ReportAggregatesOnly(true)
      ->UseManualTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("llama_sample", BM_llama_sample)
      ->Iterations(5)->Repetitions(env_int("TG_REPS", 1))->ReportAggregatesOnly(true)
      ->UseManualTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("llama_write", BM_llama_write)->Iterations(1)->Repetitions(1);
  for (Named b : {Named{"llama_file_f32", BM_llama_file_f32}, Named{"llama_file_q8_0", BM_llama_file_q8_0}})
    benchmark::RegisterBenchmark(b.name, b.fn)
        ->Iterations(5)->Repetitions(env_int("TG_REPS", 1))->ReportAggregatesOnly(true)
        ->UseManualTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("predict", BM_predict)
      ->Iterations(200)->Repetitions(small_reps)->ReportAggregatesOnly(true)
      ->UseManualTime()->Unit(benchmark::kMicrosecond);

  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
