// Trains y = 2 x0 - x1 + 0.5 with a one-unit Dense layer through the
// installed library and prints the prediction at (1, 1), which must be 1.5;
// again on the first Vulkan device where the library has the Vulkan backend
// and the machine a device (the loader is opened at run time: nothing of
// Vulkan's is linked). A byte-level BPE tokenizer trained and run checks
// the text layer's PCRE2 dependency.
#include <tensorgrad/tensorgrad.h>

#include <cmath>
#include <cstdio>
#include <vector>

namespace tg = tensorgrad;

namespace {

// The prediction at (1, 1) after training on `device`.
float train(tg::Device device) {
  tg::manual_seed(0);
  std::vector<float> x, y;
  for (int i = 0; i < 32; ++i) {
    const float a = float(i % 8) / 4.0f - 1.0f, b = float(i / 8) / 2.0f - 0.75f;
    x.insert(x.end(), {a, b});
    y.push_back(2.0f * a - b + 0.5f);
  }
  tg::nn::Sequential model({2});
  model.add(tg::nn::Dense(1));
  model.compile(tg::OptimizerSpec::sgd(0.2f), "mse", {}, device);
  tg::nn::FitOptions fit;
  fit.epochs = 300;
  fit.batch_size = 32;
  fit.verbose = 0;
  const tg::nn::History h = model.fit(tg::Tensor::from_vector(x, tg::Shape{32, 2}),
                                      tg::Tensor::from_vector(y, tg::Shape{32, 1}), fit);
  const std::vector<float> one{1.0f, 1.0f};
  const float p = model.predict(tg::Tensor::from_vector(one, tg::Shape{1, 2})).to_vector()[0];
  std::printf("%s: loss %.6f -> %.6f, prediction at (1, 1): %.4f\n", device.str().c_str(), h["loss"].front(),
              h["loss"].back(), p);
  return p;
}

}  // namespace

int main() {
  // Linked with tensorgrad::mpi (TENSORGRAD_CONSUMER_MPI) the communicator is
  // there; linked without it, nothing of MPI's is.
#ifdef TENSORGRAD_CONSUMER_MPI
  const bool want_mpi = true;
#else
  const bool want_mpi = false;
#endif
  std::printf("MPI communicator: %s\n", tg::dist::built_with_mpi() ? "linked" : "not linked");
  if (tg::dist::built_with_mpi() != want_mpi) {
    std::printf("tensorgrad consumer: FAILED: expected the MPI communicator %s\n", want_mpi ? "linked" : "absent");
    return 1;
  }
  std::vector<tg::Device> targets{tg::Device::CPU};
  for (const tg::DeviceInfo& d : tg::devices())
    if (d.device.kind() == "vulkan" && targets.size() == 1) targets.push_back(d.device);
  if (targets.size() == 1)
    std::printf("vulkan: %s\n", tg::built_with_vulkan() ? "no device here" : "not built");
  // The text layer's pre-tokenizer links PCRE2 (found again by the installed
  // package): LLaMA 3's regex splits "it's 12345" into it, 's, ' ', 123, 45.
  const auto tok = tg::text::BpeTokenizer::train("it's 12345 it's", 258, {});
  const auto ids = tok.encode("it's 12345", false);
  std::printf("tokens of \"it's 12345\": %zu\n", ids.size());
  if (tok.decode(ids) != "it's 12345") {
    std::printf("tensorgrad consumer: FAILED: the tokenizer did not give the text back\n");
    return 1;
  }
  for (const tg::Device& device : targets)
    if (!(std::fabs(train(device) - 1.5f) < 1e-2f)) {
      std::printf("tensorgrad consumer: FAILED on %s (expected 1.5)\n", device.str().c_str());
      return 1;
    }
  std::printf("tensorgrad consumer: ok\n");
  return 0;
}
