// The data-parallel MLP epoch (issue 14), run by bench/dist_scaling.py under
// mpirun at 1 and 2 ranks: Fashion-MNIST's 60,000 training rows, the
// 784-500-10 MLP, AdamW, global batch 500, fit with FitOptions::communicator
// (at 1 rank the same binary and options train as one process). Prints, on
// rank 0, one line of key=value: the median epoch (fit, training only), the
// seconds the communicator spent in collectives per epoch (the gradient
// reduction, waiting for the slower rank included), the reduction of the
// gradient buffer alone (after a barrier), and the replicated optimizer
// update per step (a Trainer step that updates minus one that
// only accumulates, at this rank's share of the batch).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <tensorgrad/tensorgrad.h>

namespace tg = tensorgrad;
using Clock = std::chrono::steady_clock;

namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

int main(int argc, char** argv) {
  int epochs = 3, threads = 0;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--epochs") epochs = std::stoi(argv[i + 1]);
    else if (a == "--threads") threads = std::stoi(argv[i + 1]);
    else if (a == "--data") data_dir = argv[i + 1];
  }
  try {
    auto comm = std::make_shared<tg::dist::Communicator>(&argc, &argv);
    if (threads > 0) tg::set_num_threads(threads);
    const tg::data::MnistFiles data = tg::data::load_mnist(data_dir, /*flatten=*/true);
    tg::manual_seed(0);
    tg::nn::Sequential model(tg::Shape{784});
    model.add(tg::nn::Dense(500, "relu"));
    model.add(tg::nn::Dense(10, "softmax"));
    model.compile(tg::OptimizerSpec::adamw(1e-3f), "sparse_categorical_crossentropy", {"accuracy"});
    const int64_t batch = 500;
    tg::nn::FitOptions fit;
    fit.batch_size = batch;
    fit.verbose = 0;
    fit.communicator = comm;
    model.fit(data.train.x, data.train.y, fit);  // warm-up: plans, pools, pages
    std::vector<double> epoch_s, reduce_s;
    for (int e = 0; e < epochs; ++e) {
      comm->barrier();
      const double reduce_before = comm->collective_seconds();
      const Clock::time_point t0 = Clock::now();
      model.fit(data.train.x, data.train.y, fit);
      epoch_s.push_back(seconds_since(t0));
      reduce_s.push_back(comm->collective_seconds() - reduce_before);
    }
    // The replicated update: steps alternate accumulate-only and update.
    const int64_t share = batch * (comm->rank() + 1) / comm->size() - batch * comm->rank() / comm->size();
    tg::nn::TrainerOptions accumulating;
    accumulating.batch_size = share;
    accumulating.nbatch_logical = 2 * share;
    tg::nn::Trainer trainer(model, accumulating);
    const tg::Tensor x = data.train.x.rows(0, share), y = data.train.y.rows(0, share);
    std::vector<double> plain, updating;
    for (int s = 0; s < 60; ++s) {
      const Clock::time_point t0 = Clock::now();
      trainer.step(x, y);
      (s % 2 ? updating : plain).push_back(seconds_since(t0));
    }
    const double steps = double((data.train.x.shape()[0] + batch - 1) / batch);
    const double grad_bytes = 4.0 * double(784 * 500 + 500 + 500 * 10 + 10);
    // The reduction alone: the gradient buffer (and its row count) summed
    // over the ranks with nothing else running, after a barrier each time.
    std::vector<float> buffer(size_t(grad_bytes / 4) + 1, 1.0f);
    std::vector<double> alone;
    for (int s = 0; s < 50; ++s) {
      comm->barrier();
      const Clock::time_point t0 = Clock::now();
      comm->reduce_broadcast(buffer);
      alone.push_back(seconds_since(t0));
    }
    if (comm->rank() == 0)
      std::printf("ranks=%d threads=%d epoch_s=%.4f reduce_s=%.4f alone_ms=%.4f update_ms=%.4f step_plain_ms=%.4f "
                  "steps=%.0f grad_bytes=%.0f\n",
                  comm->size(), tg::num_threads(), median(epoch_s), median(reduce_s), 1e3 * median(alone),
                  1e3 * (median(updating) - median(plain)), 1e3 * median(plain), steps, grad_bytes);
  } catch (const tg::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
