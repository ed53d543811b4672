#pragma once
// The model, data and steps of the Trainer exact-resume test, shared by the
// test (test_checkpoint.cpp) and the child process it starts
// (trainer_resume_child.cpp), so both run the very same program.
#include <random>

#include "tensorgrad/tensorgrad.h"

namespace trainer_resume {

/// 4 -> Dense(16, relu) -> Dropout(0.25) -> BatchNormalization -> Dense(3),
/// MSE, AdamW with a cosine schedule and global clipping; a Trainer of 8-row
/// steps accumulated over 24 rows (a window of 3 micro-steps).
inline tensorgrad::nn::Trainer make_trainer() {
  using namespace tensorgrad;
  manual_seed(42);
  nn::clear_session();
  const nn::SymbolicTensor in = nn::Input({4});
  nn::SymbolicTensor h = nn::Dense(16, "relu")(in);
  h = nn::Dropout(0.25f)(h);
  h = nn::BatchNormalization(0.9f)(h);
  nn::Model m(in, nn::Dense(3)(h), "resumed");
  OptimizerSpec opt = OptimizerSpec::adamw(CosineDecay{1e-2f, 40, 0.1f}, 0.01f);
  opt.global_clipnorm = 1.0f;
  m.compile(opt, "mse");
  nn::TrainerOptions o;
  o.batch_size = 8;
  o.nbatch_logical = 24;
  return nn::Trainer(m, o);
}

/// Step i's batch: a function of i alone.
inline std::pair<tensorgrad::Tensor, tensorgrad::Tensor> batch(int i) {
  using namespace tensorgrad;
  std::mt19937 gen(1000u + uint32_t(i));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Tensor x = Tensor::empty({8, 4}), y = Tensor::empty({8, 3});
  for (int64_t r = 0; r < 8; ++r) {
    float* xr = x.data<float>() + r * 4;
    for (int j = 0; j < 4; ++j) xr[j] = u(gen);
    float* yr = y.data<float>() + r * 3;
    yr[0] = xr[0] + xr[1];
    yr[1] = xr[2] * xr[3];
    yr[2] = xr[0] - xr[3];
  }
  return {x, y};
}

/// Steps [first, first + count): their losses.
inline std::vector<float> run(tensorgrad::nn::Trainer& t, int first, int count) {
  std::vector<float> losses;
  for (int i = first; i < first + count; ++i) {
    const auto [x, y] = batch(i);
    losses.push_back(t.step(x, y));
  }
  return losses;
}

}  // namespace trainer_resume
