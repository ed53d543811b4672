// The main job: trains a 784-500-10 ReLU classifier on Fashion-MNIST with
// AdamW at batch 500 (the recipe of ggml's MNIST example and the seeds),
// reports test accuracy and shows a few test images' predicted and true
// classes. No argument is needed.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <tensorgrad/tensorgrad.h>

namespace tg = tensorgrad;

namespace {
const char* kClassNames[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                               "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
}

int main(int argc, char** argv) {
  CLI::App app{"Train a 784-500-10 MLP classifier on Fashion-MNIST with tensorgrad"};
  int epochs = 20;  // seeds 0-3 reach 88.4-89.2% test accuracy (15 epochs: 87.8-88.7%)
  int64_t batch_size = 500;
  int threads = 0;
  uint64_t seed = 0;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int verbose = 1;
  app.add_option("--epochs", epochs, "training epochs")->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_option("--batch-size", batch_size, "rows per optimizer step")->check(CLI::Range(1, 60000))->capture_default_str();
  app.add_option("--threads", threads, "compute threads (0: one per core)")->check(CLI::Range(0, 1024));
  app.add_option("--seed", seed, "random seed")->capture_default_str();
  app.add_option("--data", data_dir, "directory with the four IDX files (plain or .gz)")->capture_default_str();
  app.add_option("--verbose", verbose, "0 silent, 1 progress bar, 2 one line per epoch")->check(CLI::Range(0, 2));
  CLI11_PARSE(app, argc, argv);

  try {
    if (threads > 0) tg::set_num_threads(threads);
    tg::manual_seed(seed);
    std::printf("tensorgrad: Fashion-MNIST, 784-500-10 MLP, AdamW lr 1e-3, batch %lld, %d epochs, %d threads\n",
                (long long)batch_size, epochs, tg::num_threads());
    tg::data::MnistFiles data = tg::data::load_mnist(data_dir);
    std::printf("data: %lld training and %lld test images from %s\n", (long long)data.train.x.shape()[0],
                (long long)data.test.x.shape()[0], data_dir.c_str());

    tg::nn::Sequential model({784});
    model.add(tg::nn::Dense(500, "relu"));
    model.add(tg::nn::Dense(10, "softmax"));
    model.compile(tg::OptimizerSpec::adamw(1e-3f), "sparse_categorical_crossentropy", {"accuracy"});
    std::printf("%s", model.summary().c_str());

    tg::nn::FitOptions fit;
    fit.epochs = epochs;
    fit.batch_size = batch_size;
    fit.validation_split = 0.05;  // 57,000 rows train, 3,000 validate, as the seeds' example
    fit.verbose = verbose;
    model.fit(data.train.x, data.train.y, fit);

    auto result = model.evaluate(data.test.x, data.test.y, batch_size);
    std::printf("test loss %.4f, test accuracy %.2f%%\n", result["loss"], 100.0 * result["accuracy"]);

    tg::Tensor probs = model.predict(data.test.x.rows(0, 8));
    std::printf("first test images:\n");
    for (int i = 0; i < 8; ++i) {
      const float* p = probs.data<float>() + i * 10;
      int best = 0;
      for (int c = 1; c < 10; ++c)
        if (p[c] > p[best]) best = c;
      const int truth = data.test.y.data<int32_t>()[i];
      std::printf("  image %d: predicted %-11s (%5.1f%%), true %s%s\n", i, kClassNames[best], 100.0 * p[best],
                  kClassNames[truth], best == truth ? "" : "  <- wrong");
    }
  } catch (const tg::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
