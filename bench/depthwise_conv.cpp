// The depthwise 3x3 convolutions of MobileNetV2 (channels-last, batch 32,
// stride 1 and 2) one shape at a time: the forward pass, the input gradient
// and the filter gradient, each in a graph of its own, best of 15 runs after
// 2 warm-up runs. A depthwise 3x3 does 9 multiply-adds per output and reads
// each input about 9 / stride^2 times from cache, so it is bound by memory:
// each line gives the bytes each op must move (its operands read once and
// its result written once) over its time, in GB/s, to set beside
// machine_limits' bandwidth_gbs (a STREAM triad) at the same thread count.
//
//   build-bench/bench/depthwise_conv [threads]   (default: tensorgrad's)
#include <tensorgrad/tensorgrad.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <random>
#include <vector>

namespace tg = tensorgrad;

namespace {

struct Shape {
  int64_t side, channels, stride;
};

tg::Tensor random_tensor(const tg::Shape& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(size_t(s.numel()));
  for (float& e : v) e = u(rng);
  return tg::Tensor::from_vector(v, s);
}

// Best seconds of one op's graph.
double best_seconds(tg::OpKind op, const std::vector<tg::Tensor>& inputs, const tg::OpAttrs& at) {
  tg::Graph g;
  std::vector<tg::Value> in;
  for (size_t i = 0; i < inputs.size(); ++i) in.push_back(g.input("in" + std::to_string(i), inputs[i].shape()));
  const tg::Value out = g.apply(op, in, at);
  tg::Executable exe(std::move(g), {out});
  for (size_t i = 0; i < inputs.size(); ++i) exe.bind(in[i], inputs[i]);
  for (int i = 0; i < 2; ++i) exe.run();
  double best = 1e30;
  for (int i = 0; i < 15; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    exe.run();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) tg::set_num_threads(std::atoi(argv[1]));
  constexpr int64_t kBatch = 32;
  const std::vector<Shape> shapes{{112, 32, 1}, {112, 96, 2}, {56, 144, 1}, {56, 144, 2}, {28, 192, 1},
                                  {14, 384, 1}, {14, 576, 1}, {7, 960, 1}};
  std::printf("threads=%d batch=%lld\n", tg::num_threads(), static_cast<long long>(kBatch));
  std::printf("%-22s %10s %10s %10s   %8s %8s %8s\n", "shape", "fwd ms", "dx ms", "dk ms", "fwd GB/s", "dx GB/s",
              "dk GB/s");
  for (const Shape& s : shapes) {
    tg::OpAttrs at;
    at.window.kh = at.window.kw = 3;
    at.window.sh = at.window.sw = s.stride;
    at.window.groups = s.channels;
    // TensorFlow's "same" pads.
    const int64_t out = (s.side + s.stride - 1) / s.stride;
    const int64_t total = std::max<int64_t>((out - 1) * s.stride + 3 - s.side, 0);
    at.window.pad_top = at.window.pad_left = total / 2;
    at.window.pad_bottom = at.window.pad_right = total - total / 2;
    const tg::Shape xs{kBatch, s.side, s.side, s.channels}, ys{kBatch, out, out, s.channels},
        ks{3, 3, 1, s.channels};
    const tg::Tensor x = random_tensor(xs, 1), k = random_tensor(ks, 2), gy = random_tensor(ys, 3);
    const double fwd = best_seconds(tg::OpKind::Conv2D, {x, k}, at);
    tg::OpAttrs dx_at = at;
    dx_at.shape = xs;
    const double dx = best_seconds(tg::OpKind::Conv2DBackwardInput, {gy, k}, dx_at);
    tg::OpAttrs dk_at = at;
    dk_at.shape = ks;
    const double dk = best_seconds(tg::OpKind::Conv2DBackwardFilter, {x, gy}, dk_at);
    // Bytes each must move: the image and the output (or gradients) once each.
    const double bytes = 4.0 * double(xs.numel() + ys.numel());
    char name[64];
    std::snprintf(name, sizeof name, "%lldx%lldx%lld s%lld", static_cast<long long>(s.side),
                  static_cast<long long>(s.side), static_cast<long long>(s.channels),
                  static_cast<long long>(s.stride));
    std::printf("%-22s %10.3f %10.3f %10.3f   %8.1f %8.1f %8.1f\n", name, fwd * 1e3, dx * 1e3, dk * 1e3,
                bytes / fwd * 1e-9, bytes / dx * 1e-9, bytes / dk * 1e-9);
  }
  return 0;
}
