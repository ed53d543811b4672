// Loads a model saved by `train_fashion_mnist --save PATH` (or any
// classifier over 28x28 Fashion-MNIST images saved with io::save_model) and
// predicts the test images with it: no model code, the file carries the
// architecture, the weights and the compile settings.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include <tensorgrad/tensorgrad.h>

namespace tg = tensorgrad;

int main(int argc, char** argv) {
  CLI::App app{"Load a model saved with tensorgrad's io::save_model and predict Fashion-MNIST test images"};
  std::string path;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  app.add_option("model", path, "a GGUF file written by train_fashion_mnist --save")->required();
  app.add_option("--data", data_dir, "directory with the four IDX files (plain or .gz)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    tg::nn::Model model = tg::io::load_model(path);
    std::printf("%s", model.summary().c_str());
    const auto data = tg::data::load_mnist(data_dir);
    // The test images in the model's input shape: {rows, 784} or {rows, 28, 28, 1}.
    const tg::Tensor x = data.test.x.reshape(model.input_shape().with_batch(data.test.x.shape()[0]));
    if (model.compiled()) {
      auto result = model.evaluate(x, data.test.y, 256);
      std::printf("test loss %.4f, test accuracy %.2f%%\n", result["loss"], 100.0 * result["accuracy"]);
    }
    const tg::Tensor probs = model.predict(x.rows(0, 8));
    for (int i = 0; i < 8; ++i) {
      const float* p = probs.data<float>() + i * 10;
      int best = 0;
      for (int c = 1; c < 10; ++c)
        if (p[c] > p[best]) best = c;
      std::printf("  image %d: class %d (%5.1f%%), true %d\n", i, best, 100.0 * p[best],
                  data.test.y.data<int32_t>()[i]);
    }
  } catch (const tg::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
