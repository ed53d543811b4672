// Trains y = 2 x0 - x1 + 0.5 with a one-unit Dense layer through the
// installed library and prints the prediction at (1, 1), which must be 1.5.
#include <tensorgrad/tensorgrad.h>

#include <cmath>
#include <cstdio>
#include <vector>

namespace tg = tensorgrad;

int main() {
  tg::manual_seed(0);
  std::vector<float> x, y;
  for (int i = 0; i < 32; ++i) {
    const float a = float(i % 8) / 4.0f - 1.0f, b = float(i / 8) / 2.0f - 0.75f;
    x.insert(x.end(), {a, b});
    y.push_back(2.0f * a - b + 0.5f);
  }
  tg::nn::Sequential model({2});
  model.add(tg::nn::Dense(1));
  model.compile(tg::OptimizerSpec::sgd(0.2f), "mse");
  tg::nn::FitOptions fit;
  fit.epochs = 300;
  fit.batch_size = 32;
  fit.verbose = 0;
  const tg::nn::History h = model.fit(tg::Tensor::from_vector(x, tg::Shape{32, 2}),
                                      tg::Tensor::from_vector(y, tg::Shape{32, 1}), fit);
  const std::vector<float> one{1.0f, 1.0f};
  const float p = model.predict(tg::Tensor::from_vector(one, tg::Shape{1, 2})).to_vector()[0];
  std::printf("loss %.6f -> %.6f, prediction at (1, 1): %.4f\n", h["loss"].front(), h["loss"].back(), p);
  if (!(std::fabs(p - 1.5f) < 1e-2f)) {
    std::printf("tensorgrad consumer: FAILED (expected 1.5)\n");
    return 1;
  }
  std::printf("tensorgrad consumer: ok\n");
  return 0;
}
