// libtorch's side of tensorgrad_bench's eager_step (issue 11), in the style of
// ../shared/bench/libtorch/peer_libtorch.cpp: the eager small step written by
// hand. 4-64-64-2 ReLU MLP on plain tensors with requires_grad (weights
// {in, out}, as tensorgrad's), batch 32, torch::mse_loss, backward, then under
// torch::NoGradGuard p.add_(p.grad(), -lr) and p.mutable_grad() = {} per
// parameter (zero_grad(set_to_none=true)). Median of --steps individually
// timed steps after 200 warm-up steps.
//   eager_peer_libtorch [--threads N] [--steps S]
// Prints one JSON line.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {
double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
torch::Tensor param(std::vector<int64_t> shape, int64_t fan_in) {  // as torch::nn::Linear
  const double k = 1.0 / std::sqrt(double(fan_in));
  return torch::empty(shape).uniform_(-k, k).requires_grad_();
}
}  // namespace

int main(int argc, char** argv) {
  int threads = 2, steps = 2000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: %s [--threads N] [--steps S]\n", argv[0]);
      return 2;
    }
  }
  torch::set_num_threads(threads);
  torch::manual_seed(0);
  auto w1 = param({4, 64}, 4), b1 = param({64}, 4);
  auto w2 = param({64, 64}, 64), b2 = param({64}, 64);
  auto w3 = param({64, 2}, 64), b3 = param({2}, 64);
  std::vector<torch::Tensor> params{w1, b1, w2, b2, w3, b3};
  auto x = torch::randn({32, 4}), y = torch::randn({32, 2});
  const double lr = 1e-2;
  std::vector<double> t;
  for (int i = 0; i < steps + 200; ++i) {
    const double t0 = now();
    {  // the step's tensors are freed inside the timed region, as tensorgrad's
      auto h = torch::relu(torch::matmul(x, w1) + b1);
      h = torch::relu(torch::matmul(h, w2) + b2);
      auto out = torch::matmul(h, w3) + b3;
      auto loss = torch::mse_loss(out, y);
      loss.backward();
      {
        torch::NoGradGuard no_grad;
        for (auto& p : params) {
          p.add_(p.grad(), -lr);
          p.mutable_grad() = torch::Tensor();
        }
      }
    }
    if (i >= 200) t.push_back(now() - t0);
  }
  std::printf("{\"peer\": \"libtorch %s\", \"workload\": \"eager\", \"threads\": %d, \"us_per_step_median\": %.2f, "
              "\"steps\": %d}\n",
              TORCH_VERSION, threads, 1e6 * median(t), steps);
}
