#pragma once
// The main job in eager form (scripts/train.sh --api eager): the same
// 784-500-10 MLP as the graph job, written as a PyTorch user writes it, with
// tensorgrad::ag modules, a DataLoader, AdamW, and a hand-written loop.
#include <tensorgrad/tensorgrad.h>

#include <chrono>
#include <cstdio>
#include <memory>

namespace fashion {

namespace ag = tensorgrad::ag;

struct EagerOptions {
  int epochs = 20;
  int64_t batch_size = 500;
  double learning_rate = 1e-3;
  double validation_split = 0.05;  // the last rows, as the graph job's fit
  uint64_t seed = 0;
  int verbose = 1;  // 0: the result only; 1 and 2: a line per epoch
  tensorgrad::Device device = tensorgrad::Device::CPU;  // where the model trains (--device)
};

/// Loss and accuracy of `model` (in eval mode, without recording) on x, y, in batches.
inline std::pair<double, double> eager_evaluate(ag::nn::Module& model, const tensorgrad::Tensor& x,
                                                const tensorgrad::Tensor& y, int64_t batch_size,
                                                tensorgrad::Device device) {
  ag::NoGradGuard no_grad;
  model.eval();
  double loss = 0, correct = 0;
  const int64_t n = x.shape()[0];
  for (ag::Batch b : ag::DataLoader(ag::Tensor(x), ag::Tensor(y), {.batch_size = batch_size, .device = device})) {
    ag::Tensor logits = model(b.x);
    const int64_t rows = logits.size(0);
    loss += double(ag::cross_entropy(logits, b.y).item()) * double(rows);
    const std::vector<float> best = ag::amax(logits, 1, true).to_vector(), all = logits.to_vector();
    const std::vector<float> labels = b.y.to_vector();
    for (int64_t r = 0; r < rows; ++r) correct += all[size_t(r * 10 + int64_t(labels[size_t(r)]))] == best[size_t(r)];
  }
  model.train();
  return {loss / double(n), correct / double(n)};
}

/// Trains the MLP on data.train (less the validation rows) and returns the test accuracy.
inline double train_eager(const tensorgrad::data::MnistFiles& data, const EagerOptions& o) {
  ag::manual_seed(o.seed);
  auto model = std::make_shared<ag::nn::Sequential>(std::initializer_list<std::shared_ptr<ag::nn::Module>>{
      std::make_shared<ag::nn::Linear>(784, 500), std::make_shared<ag::nn::ReLU>(),
      std::make_shared<ag::nn::Linear>(500, 10)});
  model->to(o.device);  // before the optimizer, as in PyTorch
  ag::optim::AdamW optimizer(model->parameters(), o.learning_rate);
  const int64_t n = data.train.x.shape()[0];
  const int64_t n_val = int64_t(double(n) * o.validation_split + 0.5), n_train = n - n_val;
  ag::DataLoader loader(ag::Tensor(data.train.x.rows(0, n_train)), ag::Tensor(data.train.y.rows(0, n_train)),
                        {.batch_size = o.batch_size, .shuffle = true, .seed = o.seed, .device = o.device});
  std::printf("eager: %s, AdamW lr %g weight decay 0.01 (PyTorch's default), batch %lld, %d epochs, %lld "
              "training rows, %lld validation rows, on %s\n",
              "784-500-10 MLP (ag::nn::Sequential of Linear, ReLU, Linear)", o.learning_rate,
              (long long)o.batch_size, o.epochs, (long long)n_train, (long long)n_val, o.device.str().c_str());
  for (int epoch = 1; epoch <= o.epochs; ++epoch) {
    const auto t0 = std::chrono::steady_clock::now();
    double loss_sum = 0;
    int64_t rows = 0;
    for (ag::Batch b : loader) {
      ag::Tensor loss = ag::cross_entropy((*model)(b.x), b.y);
      optimizer.zero_grad();
      loss.backward();
      optimizer.step();
      loss_sum += double(loss.item()) * double(b.x.size(0));
      rows += b.x.size(0);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (o.verbose > 0) {
      std::printf("epoch %2d/%d  loss %.4f", epoch, o.epochs, loss_sum / double(rows));
      if (n_val > 0) {
        auto [vl, va] = eager_evaluate(*model, data.train.x.rows(n_train, n), data.train.y.rows(n_train, n),
                                       o.batch_size, o.device);
        std::printf("  val_loss %.4f  val_accuracy %.4f", vl, va);
      }
      std::printf("  (%.2f s)\n", seconds);
    }
  }
  auto [test_loss, test_acc] = eager_evaluate(*model, data.test.x, data.test.y, o.batch_size, o.device);
  std::printf("test loss %.4f, test accuracy %.2f%%\n", test_loss, 100.0 * test_acc);
  return test_acc;
}

}  // namespace fashion
