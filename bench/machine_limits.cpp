// The machine's limits for the roofline (issue 15): the single-precision GEMM
// rate of OpenBLAS (the library tensorgrad's large products run on) on a
// large square product, and the memory bandwidth of a STREAM triad
// (McCalpin's a = b + s c, three arrays of 32 MiB, counted as three streams),
// and the same triad on arrays that stay in cache, each at 1 thread and at 2
// threads (two threads working at once on their own data, so that they share
// the caches and memory as two of tensorgrad's workers do). Prints one line of
// key=value: gemm_gflops_1, gemm_gflops_2, bandwidth_gbs_1, bandwidth_gbs_2,
// cache_gbs_1, cache_gbs_2; best of the repetitions, as a limit is.
//
// usage: build-bench/bench/machine_limits
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

extern "C" void openblas_set_num_threads(int);

namespace {
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Runs work(t) on `threads` threads at once, `reps` times; the best wall time.
template <class F>
double best_parallel(int threads, int reps, F work) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const Clock::time_point t0 = Clock::now();
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(work, t);
    work(0);
    for (std::thread& th : pool) th.join();
    best = std::min(best, seconds_since(t0));
  }
  return best;
}
}  // namespace

int main() {
  openblas_set_num_threads(1);  // as tensorgrad runs it: one BLAS thread per worker
  constexpr int n = 1024;
  struct Gemm {
    std::vector<float> a, b, c;
  };
  std::vector<Gemm> g(2);
  for (Gemm& m : g) {
    m.a.assign(size_t(n) * n, 0.5f);
    m.b.assign(size_t(n) * n, 0.25f);
    m.c.assign(size_t(n) * n, 0.0f);
  }
  auto gemm = [&](int t) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, g[size_t(t)].a.data(), n,
                g[size_t(t)].b.data(), n, 0.0f, g[size_t(t)].c.data(), n);
  };
  const double flops = 2.0 * n * n * n;
  best_parallel(2, 1, gemm);  // warm-up
  const double gemm1 = flops / best_parallel(1, 7, gemm) * 1e-9;
  const double gemm2 = 2.0 * flops / best_parallel(2, 7, gemm) * 1e-9;

  constexpr size_t len = size_t(32) << 18;  // 32 MiB of floats an array
  struct Triad {
    std::vector<float> a, b, c;
  };
  std::vector<Triad> s(2);
  for (Triad& t : s) {
    t.a.assign(len, 0.0f);
    t.b.assign(len, 1.0f);
    t.c.assign(len, 2.0f);
  }
  auto triad = [&](int t) {
    float* __restrict a = s[size_t(t)].a.data();
    const float* __restrict b = s[size_t(t)].b.data();
    const float* __restrict c = s[size_t(t)].c.data();
    for (size_t i = 0; i < len; ++i) a[i] = b[i] + 3.0f * c[i];
  };
  const double bytes = 3.0 * sizeof(float) * double(len);
  best_parallel(2, 1, triad);
  const double bw1 = bytes / best_parallel(1, 7, triad) * 1e-9;
  const double bw2 = 2.0 * bytes / best_parallel(2, 7, triad) * 1e-9;
  // The same triad on three arrays of 32 KiB, 4,096 times over: data that
  // stay in the core's L2 (and mostly L1), the limit of a small step whose
  // weights, moments and activations fit there (the rlstep network: ~120 KB).
  constexpr size_t small = size_t(32) << 8;
  constexpr int passes = 4096;
  auto cached = [&](int t) {
    float* __restrict a = s[size_t(t)].a.data();
    const float* __restrict b = s[size_t(t)].b.data();
    const float* __restrict c = s[size_t(t)].c.data();
    for (int p = 0; p < passes; ++p) {
      for (size_t i = 0; i < small; ++i) a[i] = b[i] + 3.0f * c[i];
      asm volatile("" ::: "memory");  // every pass is done, not folded into one
    }
  };
  const double cached_bytes = 3.0 * sizeof(float) * double(small) * passes;
  const double cache1 = cached_bytes / best_parallel(1, 7, cached) * 1e-9;
  const double cache2 = 2.0 * cached_bytes / best_parallel(2, 7, cached) * 1e-9;
  std::printf("gemm_gflops_1=%.1f gemm_gflops_2=%.1f bandwidth_gbs_1=%.1f bandwidth_gbs_2=%.1f cache_gbs_1=%.1f "
              "cache_gbs_2=%.1f\n",
              gemm1, gemm2, bw1, bw2, cache1, cache2);
  return 0;
}
