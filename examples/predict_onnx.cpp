// Loads an ONNX file (torch.onnx.export or any other writer) with
// io::load_onnx, prints the model it became, and, when its input takes a
// Fashion-MNIST image ({784}, {1, 28, 28} as PyTorch's NCHW, or
// {28, 28, 1}), predicts the test images with it and reports the accuracy
// of its ten outputs; else it runs one row of zeros and prints the output
// shape.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include <tensorgrad/io/onnx.h>
#include <tensorgrad/tensorgrad.h>

namespace tg = tensorgrad;

int main(int argc, char** argv) {
  CLI::App app{"Load an ONNX model with tensorgrad and predict Fashion-MNIST test images when its input fits"};
  std::string path;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  app.add_option("model", path, "an ONNX file (e.g. tests/fixtures/onnx/cnn.onnx)")->required();
  app.add_option("--data", data_dir, "directory with the four IDX files (plain or .gz)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    tg::nn::Model model = tg::io::load_onnx(path);
    std::printf("%s", model.summary().c_str());
    const tg::Shape in = model.input_shape();
    if (in.numel() != 784 || model.inputs()[0].dtype() != tg::DType::Float32) {
      const std::vector<tg::Tensor> out = model.predict(std::vector<tg::Tensor>{tg::Tensor::zeros(in.with_batch(1), model.inputs()[0].dtype())}, 1);
      std::printf("input %s is not a 28x28 image; one row of zeros gives an output of shape %s\n", in.str().c_str(),
                  out.at(0).shape().str().c_str());
      return 0;
    }
    const auto data = tg::data::load_mnist(data_dir);
    const int64_t rows = data.test.x.shape()[0];
    const tg::Tensor x = data.test.x.reshape(in.with_batch(rows));  // one channel: NCHW and NHWC agree
    const tg::Tensor probs = model.predict(x, 256);
    if (probs.shape() != tg::Shape{rows, 10}) {
      std::printf("output %s is not ten classes per image\n", probs.shape().str().c_str());
      return 0;
    }
    int64_t right = 0;
    for (int64_t i = 0; i < rows; ++i) {
      const float* p = probs.data<float>() + i * 10;
      int best = 0;
      for (int c = 1; c < 10; ++c)
        if (p[c] > p[best]) best = c;
      right += best == data.test.y.data<int32_t>()[i];
    }
    std::printf("test accuracy %.2f%% on %lld images\n", 100.0 * double(right) / double(rows), (long long)rows);
  } catch (const tg::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
