// The Trainer on a Vulkan device against the same Trainer on the CPU
// (tolerances as the model tests': 2e-4 relative plus 1e-5 absolute), its
// snapshots and target updates, checkpoints resumed exactly on the device,
// models moved between devices, and a snapshot predicting in one thread
// while the trainer steps in another.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "test_files.h"
#include "vulkan_support.h"

using namespace tensorgrad;
using test_support::all_weights;
using test_support::close;

namespace {

constexpr double kRtol = 2e-4, kAtol = 1e-5;

// A Q-network's shape: observations in, one value per action out, MSE.
nn::Sequential q_network(Device device) {
  nn::clear_session();
  manual_seed(9);
  nn::Sequential m({8});
  m.add(nn::Dense(32, "relu"));
  m.add(nn::Dropout(0.1f));
  m.add(nn::Dense(4));
  m.compile(OptimizerSpec::adam(1e-2f), "mse", {"mae"}, device);
  return m;
}

nn::TrainerOptions trainer_options() {
  nn::TrainerOptions o;
  o.batch_size = 16;
  return o;
}

}  // namespace

TEST(VulkanTrainer, StepsEvalPredictAndTargetsAsOnTheCpu) {
  TG_VULKAN_OR_SKIP(vk);
  const Tensor x = test_support::random_tensor(Shape{16, 8}, 1), y = test_support::random_tensor(Shape{16, 4}, 2);
  manual_seed(11);
  nn::Trainer tc(q_network(Device::CPU), trainer_options());
  manual_seed(11);
  nn::Trainer td(q_network(vk->device()), trainer_options());
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(close({td.step(x, y)}, {tc.step(x, y)}, kRtol, kAtol)) << "step " << i;
  EXPECT_TRUE(close({td.eval(x, y)}, {tc.eval(x, y)}, kRtol, kAtol));
  EXPECT_TRUE(close(test_support::values(td.predict(x)), test_support::values(tc.predict(x)), kRtol, kAtol));
  // One row into memory the caller owns (an RL agent's action).
  Tensor out_c = Tensor::empty(Shape{1, 4}), out_d = Tensor::empty(Shape{1, 4});
  tc.predict(x.rows(3, 4), out_c);
  td.predict(x.rows(3, 4), out_d);
  EXPECT_TRUE(close(test_support::values(out_d), test_support::values(out_c), kRtol, kAtol));

  nn::Model sc = tc.snapshot(), sd = td.snapshot();
  EXPECT_EQ(sd.backend()->device(), vk->device());
  EXPECT_TRUE(close(all_weights(sd), all_weights(sc), kRtol, kAtol));
  for (int i = 0; i < 2; ++i) (void)tc.step(x, y), (void)td.step(x, y);
  tc.update_target(sc, 0.25f);  // Polyak
  td.update_target(sd, 0.25f);
  EXPECT_TRUE(close(all_weights(sd), all_weights(sc), kRtol, kAtol));
  td.update_target(sd);  // hard: the trainer's weights exactly
  EXPECT_EQ(all_weights(sd), all_weights(td.model()));
  tc.set_learning_rate(1e-3);
  td.set_learning_rate(1e-3);
  EXPECT_FLOAT_EQ(float(td.learning_rate()), 1e-3f);
  EXPECT_TRUE(close({td.step(x, y)}, {tc.step(x, y)}, kRtol, kAtol));
  EXPECT_TRUE(close(all_weights(td.model()), all_weights(tc.model()), kRtol, kAtol));
}

// A checkpoint taken on the device and loaded into a fresh trainer on the
// device resumes exactly: the next steps give the same bits as the
// uninterrupted trainer's.
TEST(VulkanTrainer, ACheckpointResumesExactlyOnTheDevice) {
  TG_VULKAN_OR_SKIP(vk);
  test_support::TempDir dir;
  const std::string path = dir / "trainer.gguf";
  const Tensor x = test_support::random_tensor(Shape{16, 8}, 3), y = test_support::random_tensor(Shape{16, 4}, 4);
  manual_seed(5);
  nn::Trainer a(q_network(vk->device()), trainer_options());
  for (int i = 0; i < 3; ++i) (void)a.step(x, y);
  io::save_checkpoint(a, path);
  std::vector<float> uninterrupted;
  for (int i = 0; i < 3; ++i) uninterrupted.push_back(a.step(x, y));
  manual_seed(77);  // another stream: the checkpoint must bring its own
  nn::Trainer b(q_network(vk->device()), trainer_options());
  io::load_checkpoint(b, path);
  std::vector<float> resumed;
  for (int i = 0; i < 3; ++i) resumed.push_back(b.step(x, y));
  EXPECT_EQ(resumed, uninterrupted);
  EXPECT_EQ(all_weights(b.model()), all_weights(a.model()));
}

// Trained on Vulkan, saved and loaded on the CPU, a model predicts what it
// predicted on the device (within the tolerance), and the reverse; to()
// moves the weights and the optimizer state, so training goes on where it
// was, as on the model that stayed.
TEST(VulkanTrainer, ModelsMoveBetweenDevices) {
  TG_VULKAN_OR_SKIP(vk);
  test_support::TempDir dir;
  const Tensor x = test_support::random_tensor(Shape{32, 8}, 5), y = test_support::random_tensor(Shape{32, 4}, 6);
  nn::FitOptions fo;
  fo.epochs = 2;
  fo.batch_size = 16;
  fo.verbose = 0;
  fo.shuffle = false;
  for (const auto& [from, to] : {std::pair{vk->device(), Device::CPU}, std::pair{Device::CPU, vk->device()}}) {
    SCOPED_TRACE(from.str() + " -> " + to.str());
    nn::Sequential m = q_network(from);
    (void)m.fit(x, y, fo);
    const std::string path = dir / ("model_" + from.kind() + ".gguf");
    io::save_model(m, path);
    nn::Model loaded = io::load_model(path);
    loaded.compile(OptimizerSpec::adam(1e-2f), "mse", {"mae"}, to);
    EXPECT_EQ(loaded.backend()->device(), to);
    EXPECT_TRUE(close(test_support::values(loaded.predict(x, 8)), test_support::values(m.predict(x, 8)), kRtol, kAtol));
  }
  for (const auto& [from, to] : {std::pair{Device::CPU, vk->device()}, std::pair{vk->device(), Device::CPU}}) {
    SCOPED_TRACE("to(" + to.str() + ")");
    nn::Sequential stay = q_network(from), moved = q_network(from);
    (void)stay.fit(x, y, fo);
    (void)moved.fit(x, y, fo);
    moved.to(to);
    EXPECT_EQ(moved.backend()->device(), to);
    for (const nn::Weight& w : moved.weights()) EXPECT_EQ(w.value.device(), to) << w.name;
    const nn::History hs = stay.fit(x, y, fo), hm = moved.fit(x, y, fo);
    EXPECT_TRUE(close(hm["loss"], hs["loss"], kRtol, kAtol));
    EXPECT_TRUE(close(all_weights(moved), all_weights(stay), kRtol, kAtol));
  }
  nn::Sequential uncompiled({8});
  uncompiled.add(nn::Dense(2));
  try {
    uncompiled.to(vk->device());
    FAIL() << "an uncompiled model moved";
  } catch (const StateError& e) {
    EXPECT_NE(std::string(e.what()).find("not compiled"), std::string::npos) << e.what();
  }
}

// A snapshot predicting in one thread while its trainer steps in another,
// on one device: their submissions share the device's queue (serialised),
// their memory is their own, so both give what they give alone.
TEST(VulkanTrainer, ASnapshotPredictsWhileTheTrainerSteps) {
  TG_VULKAN_OR_SKIP(vk);
  const Tensor x = test_support::random_tensor(Shape{16, 8}, 7), y = test_support::random_tensor(Shape{16, 4}, 8);
  manual_seed(13);
  nn::Trainer tr(q_network(vk->device()), trainer_options());
  (void)tr.step(x, y);
  nn::Model snap = tr.snapshot();
  const std::vector<double> expected = test_support::values(snap.predict(x, 16));
  std::atomic<bool> stop{false};
  std::atomic<int> mismatches{0}, predictions{0};
  std::thread reader([&] {
    while (!stop) {
      if (test_support::values(snap.predict(x, 16)) != expected) ++mismatches;
      ++predictions;
    }
  });
  std::vector<float> losses;
  for (int i = 0; i < 40; ++i) losses.push_back(tr.step(x, y));
  stop = true;
  reader.join();
  EXPECT_GT(predictions.load(), 0);
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_LT(losses.back(), losses.front());  // the trainer trained meanwhile
}

// A DQN's Trainer: a loss mask with one weight per output (the action
// taken), and gradient accumulation over two steps per update, as on the CPU.
TEST(VulkanTrainer, LossMasksAndAccumulationAsOnTheCpu) {
  TG_VULKAN_OR_SKIP(vk);
  const Tensor x = test_support::random_tensor(Shape{16, 8}, 9), y = test_support::random_tensor(Shape{16, 4}, 10);
  std::vector<float> mask(16 * 4, 0.0f);
  for (size_t r = 0; r < 16; ++r) mask[r * 4 + r % 4] = 1.0f;
  const Tensor w = Tensor::from_vector(mask, Shape{16, 4});
  nn::TrainerOptions o = trainer_options();
  o.loss_mask = 4;
  o.nbatch_logical = 32;
  manual_seed(15);
  nn::Trainer tc(q_network(Device::CPU), o);
  manual_seed(15);
  nn::Trainer td(q_network(vk->device()), o);
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(close({td.step(x, y, w)}, {tc.step(x, y, w)}, kRtol, kAtol)) << "step " << i;
  EXPECT_EQ(td.n_steps(), tc.n_steps());
  EXPECT_TRUE(close(all_weights(td.model()), all_weights(tc.model()), kRtol, kAtol));
}
