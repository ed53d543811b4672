// Where threads start to pay: a ladder of small training steps (CNNs of
// 3x3 convolutions with batch norm and ReLU, and MLPs), each timed on one
// thread and on TG_THREADS threads (default 2), median of 9 rounds of 20
// steps after warm-up. A graph whose work (op_flops summed: a
// product op's 2 M N K or 2 outputs kh kw C, one per output element for
// the rest) is under kernels::kParallelFlops runs on the calling thread
// whatever the thread count, so below the threshold the two columns
// measure the same path; the rows just above it say whether the threshold
// is too low. Not Google Benchmark: one table.
//
//   TG_THREADS=2 build-bench/bench/parallel_threshold
#include <tensorgrad/tensorgrad.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace tg = tensorgrad;

namespace {

tg::Tensor uniform(const tg::Shape& shape, float lo, float hi) {
  std::vector<float> v(size_t(shape.numel()));
  uint32_t s = 12345;
  for (float& x : v) {
    s = s * 1664525u + 1013904223u;
    x = lo + (hi - lo) * float(s >> 8) / float(1u << 24);
  }
  return tg::Tensor::from_vector(v, shape);
}

tg::Tensor classes(int64_t rows, int64_t n) {
  tg::Tensor y = tg::Tensor::zeros({rows}, tg::DType::Int32);
  for (int64_t i = 0; i < rows; ++i) y.data<int32_t>()[i] = int32_t(i % n);
  return y;
}

// Microseconds a step: the median of 9 rounds of 20 steps, after 10 warm-up steps.
double step_us(tg::OptimizerContext& ctx, const tg::Tensor& x, const tg::Tensor& y) {
  for (int i = 0; i < 10; ++i) ctx.step(x, y);
  std::vector<double> rounds;
  for (int r = 0; r < 9; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 20; ++i) ctx.step(x, y);
    rounds.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / 20);
  }
  std::nth_element(rounds.begin(), rounds.begin() + 4, rounds.end());
  return rounds[4];
}

struct Row {
  std::string name;
  double us[2];
};

// A CNN step: two 3x3 convolutions of `filters` (batch norm, ReLU), global
// average pooling, a 4-way softmax.
Row cnn(int64_t batch, int64_t side, int64_t filters, int threads) {
  Row row{"cnn b" + std::to_string(batch) + " " + std::to_string(side) + "x" + std::to_string(side) + " f" +
              std::to_string(filters),
          {0, 0}};
  const tg::Tensor x = uniform({batch, side, side, 3}, -1, 1), y = classes(batch, 4);
  for (int t = 0; t < 2; ++t) {
    tg::set_num_threads(t == 0 ? 1 : threads);
    tg::manual_seed(1);
    tg::nn::Sequential m({side, side, 3});
    for (int l = 0; l < 2; ++l) {
      m.add(tg::nn::Conv2D(filters, {3, 3}, {1, 1}, "same", {1, 1}, "linear", false));
      m.add(tg::nn::BatchNormalization());
      m.add(tg::nn::ActivationLayer("relu"));
    }
    m.add(tg::nn::GlobalAveragePooling2D());
    m.add(tg::nn::Dense(4, "softmax"));
    m.compile(tg::OptimizerSpec::adam(), "sparse_categorical_crossentropy");
    row.us[t] = step_us(m.optimizer_context(batch), x, y);
  }
  return row;
}

// An MLP step: inputs 32, two hidden ReLU layers of `width`, 4-way softmax.
Row mlp(int64_t batch, int64_t width, int threads) {
  Row row{"mlp b" + std::to_string(batch) + " w" + std::to_string(width), {0, 0}};
  const tg::Tensor x = uniform({batch, 32}, -1, 1), y = classes(batch, 4);
  for (int t = 0; t < 2; ++t) {
    tg::set_num_threads(t == 0 ? 1 : threads);
    tg::manual_seed(1);
    tg::nn::Sequential m({32});
    m.add(tg::nn::Dense(width, "relu"));
    m.add(tg::nn::Dense(width, "relu"));
    m.add(tg::nn::Dense(4, "softmax"));
    m.compile(tg::OptimizerSpec::adam(), "sparse_categorical_crossentropy");
    row.us[t] = step_us(m.optimizer_context(batch), x, y);
  }
  return row;
}

}  // namespace

int main() {
  const char* env = std::getenv("TG_THREADS");
  const int threads = env ? std::atoi(env) : 2;
  std::vector<Row> rows;
  for (int64_t batch : {1, 2, 4, 8, 16, 32})
    for (int64_t filters : {8, 16}) rows.push_back(cnn(batch, 8, filters, threads));
  for (int64_t batch : {8, 32}) rows.push_back(cnn(batch, 16, 16, threads));
  for (int64_t batch : {8, 32, 128})
    for (int64_t width : {64, 128, 256, 512}) rows.push_back(mlp(batch, width, threads));
  std::printf("%-22s %12s %12s %10s\n", "step", "1 thread us", "threads us", "ratio");
  for (const Row& r : rows) std::printf("%-22s %12.1f %12.1f %10.3f\n", r.name.c_str(), r.us[0], r.us[1], r.us[1] / r.us[0]);
  return 0;
}
