// Streaming training from a generator, two measurements (BENCHMARKS.md):
//   memory   the 784-500-10 MLP trained from an infinite generator that makes
//            a fresh {500, 784} batch of new random values per call, for
//            --rows rows (default 3.2 million: 10 GB of float32 in all);
//            prints the peak resident set size (VmHWM of /proc/self/status;
//            /usr/bin/time -v reports the same).
//   prefetch the step time of that MLP alone (a generator returning one
//            ready batch), then an epoch whose generator sleeps that long per
//            batch, with prefetch 2 (overlapped) and 0 (in series).
// Usage: generator_stream [memory|prefetch] [--rows N] [--steps N] [--threads N]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>

#include <tensorgrad/tensorgrad.h>

namespace tg = tensorgrad;

namespace {
tg::nn::Model mlp() {
  tg::manual_seed(0);
  tg::nn::Sequential m({784});
  m.add(tg::nn::Dense(500, "relu"));
  m.add(tg::nn::Dense(10, "softmax"));
  m.compile(tg::OptimizerSpec::adamw(1e-3f), "sparse_categorical_crossentropy");
  return tg::nn::Model(std::move(m));
}

double peak_rss_mb() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return -1;
}

double seconds_of(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "memory";
  int64_t rows = 3200000, steps = 200;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--rows")) rows = std::stoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--steps")) steps = std::stoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--threads")) tg::set_num_threads(std::stoi(argv[i + 1]));
  }
  try {
    tg::nn::Model model = mlp();
    tg::nn::GeneratorFitOptions o;
    o.batch_size = 500;
    o.verbose = 0;
    if (mode == "memory") {
      std::mt19937 rng(1);
      std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
      std::uniform_int_distribution<int32_t> label(0, 9);
      tg::nn::Generator fresh = [&]() -> std::optional<tg::nn::Batch> {
        tg::Tensor x = tg::Tensor::empty({500, 784});
        tg::Tensor y = tg::Tensor::empty({500}, tg::DType::Int32);
        for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = pixel(rng);
        for (int64_t i = 0; i < 500; ++i) y.data<int32_t>()[i] = label(rng);
        return tg::nn::Batch{{x}, {y}, {}};
      };
      o.steps_per_epoch = rows / 500;
      const double s = seconds_of([&] { model.fit(fresh, o); });
      std::printf("memory: %lld rows (%.1f GB of float32 inputs) in %.1f s; peak RSS %.0f MB\n", (long long)rows,
                  double(rows) * 784 * 4 / 1e9, s, peak_rss_mb());
    } else if (mode == "prefetch") {
      std::mt19937 rng(2);
      const tg::Tensor x = tg::Tensor::full({500, 784}, 0.5f);
      const tg::Tensor y = tg::Tensor::zeros({500}, tg::DType::Int32);
      tg::nn::Generator ready = [&]() -> std::optional<tg::nn::Batch> { return tg::nn::Batch{{x}, {y}, {}}; };
      o.steps_per_epoch = steps;
      o.prefetch = 0;
      model.fit(ready, o);  // warm-up: plans made
      const double alone = seconds_of([&] { model.fit(ready, o); }) / double(steps);
      const auto nap = std::chrono::duration<double>(alone);
      tg::nn::Generator slow = [&]() -> std::optional<tg::nn::Batch> {
        std::this_thread::sleep_for(nap);
        return tg::nn::Batch{{x}, {y}, {}};
      };
      o.prefetch = 2;
      const double overlapped = seconds_of([&] { model.fit(slow, o); }) / double(steps);
      o.prefetch = 0;
      const double serial = seconds_of([&] { model.fit(slow, o); }) / double(steps);
      std::printf("prefetch: step alone %.2f ms; with a generator sleeping that long per batch: prefetch 2 %.2f ms "
                  "(%.2fx), prefetch 0 %.2f ms (%.2fx)\n",
                  alone * 1e3, overlapped * 1e3, overlapped / alone, serial * 1e3, serial / alone);
    } else {
      std::fprintf(stderr, "usage: generator_stream [memory|prefetch] [--rows N] [--steps N] [--threads N]\n");
      return 2;
    }
  } catch (const tg::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
