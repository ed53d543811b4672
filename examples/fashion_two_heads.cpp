// A functional model with two inputs and two outputs on real data:
// Fashion-MNIST images and their horizontally flipped copies go through one
// shared convolutional encoder (the same layers, so the same weights, on both
// inputs); the joined features feed two heads, the class (10-way softmax,
// sparse categorical cross-entropy) and whether the item is footwear (sandal,
// sneaker or ankle boot: a sigmoid, binary cross-entropy), trained together
// with per-output losses and loss weights. Prints each output's test loss
// and accuracy.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <tensorgrad/tensorgrad.h>

namespace tg = tensorgrad;
using tg::nn::SymbolicTensor;

namespace {
// Each image {28, 28, 1} mirrored left to right.
tg::Tensor flipped(const tg::Tensor& images) {
  tg::Tensor out = tg::Tensor::empty(images.shape());
  const float* src = images.data<float>();
  float* dst = out.data<float>();
  for (int64_t n = 0; n < images.shape()[0]; ++n)
    for (int64_t r = 0; r < 28; ++r)
      for (int64_t c = 0; c < 28; ++c) dst[(n * 28 + r) * 28 + c] = src[(n * 28 + r) * 28 + (27 - c)];
  return out;
}

// 1 for sandals (5), sneakers (7) and ankle boots (9), else 0: {rows, 1}.
tg::Tensor footwear(const tg::Tensor& labels) {
  tg::Tensor out = tg::Tensor::empty({labels.shape()[0], 1});
  for (int64_t i = 0; i < labels.shape()[0]; ++i) {
    const int32_t c = labels.data<int32_t>()[i];
    out.data<float>()[i] = c == 5 || c == 7 || c == 9 ? 1.0f : 0.0f;
  }
  return out;
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Two inputs (image, flipped image), two outputs (class, footwear) on Fashion-MNIST"};
  int epochs = 8;
  int threads = 0;
  uint64_t seed = 0;
  float footwear_weight = 0.5f;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int verbose = 2;
  app.add_option("--epochs", epochs, "training epochs")->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_option("--footwear-weight", footwear_weight, "loss weight of the footwear output (the class output's is 1)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--threads", threads, "compute threads (0: one per core)")->check(CLI::Range(0, 1024));
  app.add_option("--seed", seed, "random seed")->capture_default_str();
  app.add_option("--data", data_dir, "directory with the four IDX files (plain or .gz)")->capture_default_str();
  app.add_option("--verbose", verbose, "0 silent, 1 progress bar, 2 one line per epoch")->check(CLI::Range(0, 2));
  CLI11_PARSE(app, argc, argv);
  try {
    if (threads > 0) tg::set_num_threads(threads);
    tg::manual_seed(seed);
    const tg::data::MnistFiles data = tg::data::load_mnist(data_dir, /*flatten=*/false);

    // One encoder, held by shared_ptr so both inputs share its weights.
    auto conv1 = std::make_shared<tg::nn::Conv2D>(16, 3, "same", "relu");
    auto pool1 = std::make_shared<tg::nn::MaxPooling2D>();
    auto conv2 = std::make_shared<tg::nn::Conv2D>(32, 3, "same", "relu");
    auto pool2 = std::make_shared<tg::nn::MaxPooling2D>();
    auto flat = std::make_shared<tg::nn::Flatten>();
    auto encode = [&](const SymbolicTensor& x) { return (*flat)((*pool2)((*conv2)((*pool1)((*conv1)(x))))); };
    const SymbolicTensor image = tg::nn::Input({28, 28, 1}, tg::DType::Float32, "image");
    const SymbolicTensor mirror = tg::nn::Input({28, 28, 1}, tg::DType::Float32, "mirror");
    const SymbolicTensor joined = tg::nn::Concatenate()({encode(image), encode(mirror)});
    const SymbolicTensor hidden = tg::nn::Dropout(0.3f)(tg::nn::Dense(128, "relu")(joined));
    auto class_head = std::make_shared<tg::nn::Dense>(10, "softmax");
    class_head->set_name("class");
    auto footwear_head = std::make_shared<tg::nn::Dense>(1, "sigmoid");
    footwear_head->set_name("footwear");
    tg::nn::Model model({image, mirror}, {(*class_head)(hidden), (*footwear_head)(hidden)}, "two_heads");
    model.compile(tg::OptimizerSpec::adamw(1e-3f),
                  std::map<std::string, tg::Loss>{{"class", "sparse_categorical_crossentropy"},
                                                  {"footwear", "binary_crossentropy"}},
                  {{"class", 1.0f}, {"footwear", footwear_weight}}, {{"class", {"accuracy"}}, {"footwear", {"accuracy"}}});
    std::printf("%s", model.summary().c_str());

    const std::map<std::string, tg::Tensor> train_x{{"image", data.train.x}, {"mirror", flipped(data.train.x)}};
    const std::map<std::string, tg::Tensor> train_y{{"class", data.train.y}, {"footwear", footwear(data.train.y)}};
    tg::nn::FitOptions fit;
    fit.epochs = epochs;
    fit.batch_size = 64;
    fit.validation_split = 0.05;
    fit.verbose = verbose;
    model.fit(train_x, train_y, fit);

    const auto test = model.evaluate(
        std::map<std::string, tg::Tensor>{{"image", data.test.x}, {"mirror", flipped(data.test.x)}},
        std::map<std::string, tg::Tensor>{{"class", data.test.y}, {"footwear", footwear(data.test.y)}}, 500);
    std::printf("test: loss %.4f (class %.4f + %.2f x footwear %.4f)\n", test.at("loss"), test.at("class_loss"),
                double(footwear_weight), test.at("footwear_loss"));
    std::printf("test: class accuracy %.2f%%, footwear accuracy %.2f%%\n", 100.0 * test.at("class_accuracy"),
                100.0 * test.at("footwear_accuracy"));
  } catch (const tg::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
