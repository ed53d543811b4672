// The transcendental kernels (issue 15): each op's kernel (SLEEF's 16- or 8-lane
// exp, log, tanh, erf where built) against the scalar loop it replaced, the
// same formula on std::exp / std::log / std::tanh / std::erf compiled as the
// library is (the build type's -O, -march=native, -fno-math-errno), over 1,048,576
// floats on one thread. Counter ns_per_element: the median of the timed runs.
#include <benchmark/benchmark.h>
#include <tensorgrad/tensorgrad.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <vector>

namespace tg = tensorgrad;

namespace {
constexpr int64_t kN = 1 << 20;

std::vector<float> inputs(tg::OpKind op) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> d(op == tg::OpKind::Log ? 1e-3f : -8.0f, 8.0f);
  std::vector<float> x(static_cast<size_t>(kN));
  for (float& v : x) v = d(rng);
  return x;
}

template <class Body>
void timed(benchmark::State& state, Body body) {
  std::vector<double> times;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    body();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.SetIterationTime(dt);
    times.push_back(dt);
  }
  std::sort(times.begin(), times.end());
  state.counters["ns_per_element"] = 1e9 * times[times.size() / 2] / double(kN);
}

void BM_kernel(benchmark::State& state, tg::OpKind op) {
  const std::vector<float> x = inputs(op);
  tg::Graph g;
  tg::Value in = g.input("x", tg::Shape{kN});
  tg::Value y = g.apply(op, {in});
  tg::Executable exe(std::move(g), {y});
  const tg::Tensor bound = tg::Tensor::from_vector(x, tg::Shape{kN});  // bind keeps a view
  exe.bind(in, bound);
  exe.run();
  timed(state, [&] { exe.run(); });
}

template <class F>
void BM_scalar_loop(benchmark::State& state, tg::OpKind op, F f) {
  const std::vector<float> x = inputs(op);
  std::vector<float> y(x.size());
  timed(state, [&] {
    for (size_t i = 0; i < x.size(); ++i) y[i] = f(x[i]);
    benchmark::DoNotOptimize(y.data());
  });
}
}  // namespace

int main(int argc, char** argv) {
  tg::set_num_threads(1);
  struct Fn {
    const char* name;
    tg::OpKind op;
    float (*scalar)(float);
  };
  const Fn fns[] = {
      {"exp", tg::OpKind::Exp, [](float v) { return std::exp(v); }},
      {"log", tg::OpKind::Log, [](float v) { return std::log(v); }},
      {"tanh", tg::OpKind::Tanh, [](float v) { return std::tanh(v); }},
      {"sigmoid", tg::OpKind::Sigmoid, [](float v) { return 1.0f / (1.0f + std::exp(-v)); }},
      {"silu", tg::OpKind::Silu, [](float v) { return v / (1.0f + std::exp(-v)); }},
      {"gelu", tg::OpKind::Gelu, [](float v) { return 0.5f * v * (1.0f + std::erf(v * float(M_SQRT1_2))); }},
  };
  for (const Fn& f : fns) {
    benchmark::RegisterBenchmark((std::string(f.name) + "/kernel").c_str(), BM_kernel, f.op)
        ->Iterations(50)->Repetitions(3)->ReportAggregatesOnly(true)->UseManualTime();
    benchmark::RegisterBenchmark((std::string(f.name) + "/scalar_loop").c_str(), BM_scalar_loop<float (*)(float)>,
                                 f.op, f.scalar)
        ->Iterations(50)->Repetitions(3)->ReportAggregatesOnly(true)->UseManualTime();
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}
