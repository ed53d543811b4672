#pragma once
// The fit that test_fit_checkpoint.cpp interrupts and fit_resume_child.cpp
// resumes in another process: both build it from here, so the two processes
// run the same model, data and callbacks. In-memory data, shuffle on,
// dropout, validation_split, Adam, an EarlyStopping with restore_best_weights
// (patience too large to stop) and a ReduceLROnPlateau that lowers the rate
// every few epochs, on one thread.
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tensorgrad/tensorgrad.h"

namespace fit_resume {

/// Epochs before the interruption, and after it.
constexpr int kFirst = 3, kMore = 4;

struct Setup {
  // Layer and model names from a fresh session ("sequential", "dense", ...),
  // the same in every process and every Setup.
  tensorgrad::nn::Sequential model = [] {
    tensorgrad::nn::clear_session();
    return tensorgrad::nn::Sequential(tensorgrad::Shape{6});
  }();
  tensorgrad::Tensor x, y;
  std::shared_ptr<tensorgrad::nn::EarlyStopping> early_stopping;
  std::shared_ptr<tensorgrad::nn::ReduceLROnPlateau> reduce_lr;

  Setup() {
    using namespace tensorgrad;
    set_num_threads(1);
    manual_seed(7);
    model.add(nn::Dense(16, "relu"));
    model.add(nn::Dropout(0.3f));
    model.add(nn::Dense(3, "softmax"));
    model.compile(OptimizerSpec::adam(0.01f), "sparse_categorical_crossentropy", {"accuracy"});
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> xs(96 * 6), ys(96);
    for (int64_t i = 0; i < 96; ++i) {
      float s = 0;
      for (int j = 0; j < 6; ++j) s += (xs[size_t(i * 6 + j)] = u(rng)) * float(j - 2);
      ys[size_t(i)] = s < -0.5f ? 0.0f : s < 0.5f ? 1.0f : 2.0f;
    }
    x = Tensor::from_vector(xs, {96, 6});
    y = Tensor::from_vector(ys, {96});
    early_stopping = std::make_shared<nn::EarlyStopping>("val_loss", 0.0, 1000, nn::MonitorMode::Auto, std::nullopt,
                                                         /*restore_best_weights=*/true);
    // min_delta 0.5: no epoch after the first improves, so the rate halves
    // every two epochs, with a cooldown of one between.
    reduce_lr = std::make_shared<nn::ReduceLROnPlateau>("val_loss", 0.5, 2, nn::MonitorMode::Auto, 0.5, 1);
  }

  /// fit's options: batches of 16, a quarter held out, shuffled.
  tensorgrad::nn::FitOptions options(int epochs, std::vector<std::shared_ptr<tensorgrad::nn::Callback>> extra) const {
    tensorgrad::nn::FitOptions o;
    o.epochs = epochs;
    o.batch_size = 16;
    o.validation_split = 0.25;
    o.shuffle = true;
    o.verbose = 0;
    o.callbacks = {early_stopping, reduce_lr};
    for (auto& c : extra) o.callbacks.push_back(c);
    return o;
  }

  /// The states the final checkpoint keeps: the two callbacks'.
  std::vector<tensorgrad::nn::Callback*> kept() const { return {early_stopping.get(), reduce_lr.get()}; }
};

/// The per-epoch losses of a History as exact hex floats, one epoch a line:
/// "<epoch> <loss> <val_loss> <learning_rate>".
inline bool write_losses(const std::string& path, const tensorgrad::nn::History& h) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return false;
  for (size_t i = 0; i < h.epoch.size(); ++i)
    std::fprintf(f, "%d %a %a %a\n", h.epoch[i], h["loss"][i], h["val_loss"][i], h["learning_rate"][i]);
  return std::fclose(f) == 0;
}

}  // namespace fit_resume
