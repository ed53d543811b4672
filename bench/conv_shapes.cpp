// The resnet workload's convolutions one shape at a time: a graph of the
// forward pass, the input gradient (where a training step needs it) and the
// filter gradient of one shape, as a training step runs them, with
// Winograd's convolutions on and off (tensorgrad::set_winograd_convolutions):
// best of 15 runs after 2 warm-up runs, the GFLOP/s of the three, and the
// seconds they come to in one epoch (446 steps of 128 images, each shape as
// many times as the network has it). The three run in one graph, as in a
// training step; TG_PROFILE=1 on the resnet_fit benchmark splits the kernels. Not Google
// Benchmark: one table, the two algorithms side by side.
//
//   TG_THREADS=2 build-bench/bench/conv_shapes
#include <tensorgrad/tensorgrad.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace tg = tensorgrad;

namespace {

struct ConvShape {
  const char* name;
  int64_t side, channels, filters, kernel, stride;
  int per_step;      // convolutions of this shape in the network
  bool input_grad;   // whether a training step needs the input gradient
};

tg::Tensor uniform(const tg::Shape& shape, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(size_t(shape.numel()));
  for (float& x : v) x = d(rng);
  return tg::Tensor::from_vector(v, shape);
}

// Milliseconds of the best of 15 runs of one op after 2 warm-up runs.
double best_ms(tg::Executable& exe) {
  double best = 1e30;
  for (int r = 0; r < 17; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    exe.run();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (r >= 2) best = std::min(best, ms);
  }
  return best;
}

}  // namespace

int main() {
  const char* threads_env = std::getenv("TG_THREADS");
  tg::set_num_threads(threads_env ? std::atoi(threads_env) : 2);
  constexpr int64_t kBatch = 128, kStepsPerEpoch = 446;
  // peer_pytorch.py's resnet: stem, two blocks of 16, a strided block of 32
  // with a 1x1 projection, a block of 32.
  const std::vector<ConvShape> shapes = {
      {"stem 3x3 1->16", 28, 1, 16, 3, 1, 1, false},  {"3x3 16->16", 28, 16, 16, 3, 1, 4, true},
      {"3x3 16->32 s2", 28, 16, 32, 3, 2, 1, true},   {"1x1 16->32 s2", 28, 16, 32, 1, 2, 1, true},
      {"3x3 32->32", 14, 32, 32, 3, 1, 3, true},
  };
  std::printf("threads %d, batch %ld: forward, input gradient and filter gradient of each shape in one graph\n",
              tg::num_threads(), long(kBatch));
  std::printf("%-16s %14s %10s %12s %14s %10s %12s\n", "shape", "winograd on", "GFLOP/s", "s/epoch", "winograd off",
              "GFLOP/s", "s/epoch");
  double epoch[2] = {0, 0};
  std::mt19937 rng(7);
  for (const ConvShape& s : shapes) {
    tg::Window2D w;
    w.kh = w.kw = s.kernel;
    w.sh = w.sw = s.stride;
    if (s.kernel == 3 && s.stride == 1) w.pad_top = w.pad_left = w.pad_bottom = w.pad_right = 1;
    if (s.kernel == 3 && s.stride == 2) w.pad_bottom = w.pad_right = 1;  // "same" at stride 2 (TensorFlow's split)
    const int64_t out = w.out_h(s.side);
    const tg::Shape xs{kBatch, s.side, s.side, s.channels}, ks{s.kernel, s.kernel, s.channels, s.filters},
        ys{kBatch, out, out, s.filters};
    const tg::Tensor tx = uniform(xs, rng), tk = uniform(ks, rng), tgy = uniform(ys, rng);
    const double flop = 2.0 * double(ys.numel()) * double(s.channels * s.kernel * s.kernel) * (s.input_grad ? 3 : 2);
    double ms[2] = {0, 0};
    for (int on = 1; on >= 0; --on) {
      tg::set_winograd_convolutions(on == 1);
      tg::Graph g;
      const tg::Value x = g.input("x", xs), k = g.input("k", ks), gy = g.input("g", ys);
      tg::OpAttrs at;
      at.window = w;
      std::vector<tg::Value> outputs{g.apply(tg::OpKind::Conv2D, {x, k}, at)};
      if (s.input_grad) {
        at.shape = xs;
        outputs.push_back(g.apply(tg::OpKind::Conv2DBackwardInput, {gy, k}, at));
      }
      at.shape = ks;
      outputs.push_back(g.apply(tg::OpKind::Conv2DBackwardFilter, {x, gy}, at));
      tg::Executable exe(std::move(g), outputs);
      exe.bind(x, tx);
      exe.bind(k, tk);
      exe.bind(gy, tgy);
      ms[on] = best_ms(exe);
      epoch[on] += ms[on] * 1e-3 * s.per_step * kStepsPerEpoch;
    }
    std::printf("%-16s %11.3f ms %10.0f %12.2f %11.3f ms %10.0f %12.2f\n", s.name, ms[1], flop / (ms[1] * 1e6),
                ms[1] * 1e-3 * s.per_step * kStepsPerEpoch, ms[0], flop / (ms[0] * 1e6),
                ms[0] * 1e-3 * s.per_step * kStepsPerEpoch);
  }
  std::printf("the convolutions of one epoch: %.2f s with Winograd, %.2f s without\n", epoch[1], epoch[0]);
  return 0;
}
