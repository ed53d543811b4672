// The eager API (tensorgrad::ag) in a hand-written training loop, as one
// writes it with PyTorch: parameters that require grad, a forward pass of
// ops that run when called, backward(), and an SGD-with-momentum update in
// place under a NoGradGuard. Fits y = sin(3x) on [-1, 1] with a 1-32-32-1
// tanh MLP and prints the loss as it falls.
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

#include "tensorgrad/tensorgrad.h"

namespace ag = tensorgrad::ag;
using tensorgrad::Shape;

int main(int argc, char** argv) {
  CLI::App app{"Eager autograd: fit sin(3x) with a small MLP and a hand-written SGD loop"};
  int steps = 3000, batch = 64;
  float lr = 0.05f, momentum = 0.9f;
  uint64_t seed = 0;
  app.add_option("--steps", steps, "training steps")->check(CLI::PositiveNumber);
  app.add_option("--batch", batch, "rows per step")->check(CLI::PositiveNumber);
  app.add_option("--lr", lr, "learning rate")->check(CLI::PositiveNumber);
  app.add_option("--momentum", momentum, "SGD momentum")->check(CLI::Range(0.0f, 0.999f));
  app.add_option("--seed", seed, "seed of every random draw");
  CLI11_PARSE(app, argc, argv);

  try {
    ag::manual_seed(seed);
    // PyTorch's Linear initialisation: U(-1/sqrt(in), 1/sqrt(in)), kernel {in, out}.
    auto linear = [](int64_t in, int64_t out) {
      const float bound = 1.0f / std::sqrt(float(in));
      ag::Tensor w = (ag::rand(Shape{in, out}) * (2 * bound) - bound).detach().requires_grad_();
      ag::Tensor b = (ag::rand(Shape{out}) * (2 * bound) - bound).detach().requires_grad_();
      return std::vector<ag::Tensor>{w, b};
    };
    std::vector<ag::Tensor> params;
    for (auto [in, out] : {std::pair<int64_t, int64_t>{1, 32}, {32, 32}, {32, 1}})
      for (ag::Tensor& p : linear(in, out)) params.push_back(p);
    std::vector<ag::Tensor> velocity;
    for (const ag::Tensor& p : params) velocity.push_back(ag::zeros(p.shape()));

    auto model = [&](const ag::Tensor& x) {
      ag::Tensor h = ag::tanh(ag::matmul(x, params[0]) + params[1]);
      h = ag::tanh(ag::matmul(h, params[2]) + params[3]);
      return ag::matmul(h, params[4]) + params[5];
    };
    auto target = [](const ag::Tensor& x) {
      std::vector<float> v = x.to_vector();
      for (float& e : v) e = std::sin(3.0f * e);
      return ag::tensor(v, x.shape());
    };

    for (int step = 1; step <= steps; ++step) {
      ag::Tensor x = ag::rand(Shape{batch, 1}) * 2.0f - 1.0f;
      ag::Tensor loss = ag::mse_loss(model(x), target(x));
      loss.backward();
      {
        ag::NoGradGuard no_grad;
        for (size_t i = 0; i < params.size(); ++i) {
          velocity[i].mul_(momentum).add_(params[i].grad());  // PyTorch's SGD momentum buffer
          params[i].add_(velocity[i], -lr);
          params[i].set_grad(ag::Tensor());  // zero_grad(set_to_none=True)
        }
      }
      if (step % 500 == 0 || step == 1) std::printf("step %5d  loss %.6f\n", step, loss.item());
    }
    ag::NoGradGuard no_grad;
    ag::Tensor grid = ag::reshape(ag::arange(-1.0, 1.0001, 0.01), Shape{201, 1});
    const std::vector<float> pred = model(grid).to_vector(), want = target(grid).to_vector();
    float worst = 0;
    for (size_t i = 0; i < pred.size(); ++i) worst = std::max(worst, std::fabs(pred[i] - want[i]));
    std::printf("final: max |error| on a 201-point grid of [-1, 1]: %.4f\n", worst);
  } catch (const tensorgrad::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
