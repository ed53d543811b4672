// Trainer checkpoints (io::save_checkpoint / load_checkpoint): N steps, save,
// load, M steps give bit for bit what N + M uninterrupted steps give — in the
// middle of an accumulation window, with dropout, batch-norm statistics, a
// learning-rate schedule and clipping — in this process and in a new one
// started with posix_spawn; and what load_checkpoint refuses.
#include <gtest/gtest.h>

#include "test_files.h"
#include "test_support.h"
#include "trainer_resume_model.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "tensorgrad/tensorgrad.h"

extern char** environ;

using namespace tensorgrad;
using test_support::TempDir;
using test_support::same_files;
using test_support::ThreadsGuard;
using test_support::throws;

namespace {

constexpr int kFirst = 7;   // 7 steps: one micro-step into the third accumulation window of 3
constexpr int kSecond = 11;

// The uninterrupted run's losses and final checkpoint.
std::vector<float> uninterrupted(const std::string& final_path) {
  nn::Trainer t = trainer_resume::make_trainer();
  std::vector<float> losses = trainer_resume::run(t, 0, kFirst + kSecond);
  io::save_checkpoint(t, final_path);
  return losses;
}

std::vector<float> tail(const std::vector<float>& v) { return {v.begin() + kFirst, v.end()}; }

}  // namespace

TEST(Checkpoint, TrainerResumesExactlyInProcess) {
  ThreadsGuard threads;
  set_num_threads(1);
  TempDir dir;
  const std::vector<float> all = uninterrupted(dir / "full.gguf");
  {
    nn::Trainer first = trainer_resume::make_trainer();
    EXPECT_EQ(trainer_resume::run(first, 0, kFirst), std::vector<float>(all.begin(), all.begin() + kFirst));
    io::save_checkpoint(first, dir / "mid.gguf");
    const io::GGUFFile f = io::GGUFFile::open(dir / "mid.gguf");
    EXPECT_EQ(f.get_i64("tensorgrad.optimizer.micro_step"), 1);  // saved inside an accumulation window
    EXPECT_EQ(f.get_i64("tensorgrad.trainer.n_steps"), kFirst);
    EXPECT_NE(f.find_tensor("optimizer/dense/kernel/acc"), nullptr);
  }
  // A trainer that has stepped already (its graphs planned, its moments made)
  // and drew other random numbers is overwritten in place.
  nn::Trainer second = trainer_resume::make_trainer();
  trainer_resume::run(second, 100, 2);
  io::load_checkpoint(second, dir / "mid.gguf");
  EXPECT_EQ(second.n_steps(), kFirst);
  EXPECT_EQ(trainer_resume::run(second, kFirst, kSecond), tail(all));
  io::save_checkpoint(second, dir / "resumed.gguf");
  EXPECT_TRUE(same_files(dir / "full.gguf", dir / "resumed.gguf"));
}

TEST(Checkpoint, TrainerResumesExactlyInANewProcess) {
  ThreadsGuard threads;
  set_num_threads(1);
  TempDir dir;
  const std::vector<float> all = uninterrupted(dir / "full.gguf");
  {
    nn::Trainer first = trainer_resume::make_trainer();
    trainer_resume::run(first, 0, kFirst);
    io::save_checkpoint(first, dir / "mid.gguf");
  }
  const std::string child = TRAINER_RESUME_CHILD, ckpt = dir / "mid.gguf", out = dir / "child.gguf",
                    losses = dir / "losses.gguf", first = std::to_string(kFirst), steps = std::to_string(kSecond);
  std::vector<char*> argv{const_cast<char*>(child.c_str()), const_cast<char*>(ckpt.c_str()),
                         const_cast<char*>(first.c_str()), const_cast<char*>(steps.c_str()),
                         const_cast<char*>(out.c_str()),   const_cast<char*>(losses.c_str()), nullptr};
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, child.c_str(), nullptr, nullptr, argv.data(), environ), 0) << child;
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  EXPECT_EQ(io::GGUFFile::open(losses).read("losses").to_vector(), tail(all));
  EXPECT_TRUE(same_files(dir / "full.gguf", out));
}

TEST(Checkpoint, RefusesAnotherOptimizerArchitectureOrPeriod) {
  ThreadsGuard threads;
  set_num_threads(1);
  TempDir dir;
  nn::Trainer t = trainer_resume::make_trainer();
  trainer_resume::run(t, 0, 4);  // one micro-step into the second window
  io::save_checkpoint(t, dir / "ckpt.gguf");

  auto build = [](const OptimizerSpec& opt, float dropout, int64_t nbatch_logical) {
    manual_seed(42);
    nn::clear_session();
    const nn::SymbolicTensor in = nn::Input({4});
    nn::SymbolicTensor h = nn::Dense(16, "relu")(in);
    h = nn::Dropout(dropout)(h);
    h = nn::BatchNormalization(0.9f)(h);
    nn::Model m(in, nn::Dense(3)(h), "resumed");
    m.compile(opt, "mse");
    nn::TrainerOptions o;
    o.batch_size = 8;
    o.nbatch_logical = nbatch_logical;
    return nn::Trainer(m, o);
  };
  const OptimizerSpec adamw = OptimizerSpec::adamw(CosineDecay{1e-2f, 40, 0.1f}, 0.01f);
  {
    nn::Trainer sgd = build(OptimizerSpec::sgd(0.1f), 0.25f, 24);
    const std::vector<nn::Weight> before = sgd.weights();
    const std::vector<float> k0 = before[0].value.to_vector();
    EXPECT_TRUE(throws<ValueError>([&] { io::load_checkpoint(sgd, dir / "ckpt.gguf"); }, {"AdamW", "SGD"}));
    EXPECT_EQ(sgd.weights()[0].value.to_vector(), k0);  // nothing changed
  }
  {
    nn::Trainer other = build(adamw, 0.5f, 24);
    EXPECT_TRUE(throws<ValueError>([&] { io::load_checkpoint(other, dir / "ckpt.gguf"); },
                                   {"another model", "rate", "manual_seed"}));
  }
  {
    nn::Trainer period1 = build(adamw, 0.25f, 8);
    EXPECT_TRUE(throws<ValueError>([&] { io::load_checkpoint(period1, dir / "ckpt.gguf"); },
                                   {"1 micro-steps into an accumulation period", "1 batches", "nbatch_logical"}));
  }
  {
    // A longer period would take the open window's gradients at the wrong scale.
    nn::Trainer period4 = build(adamw, 0.25f, 32);
    EXPECT_TRUE(throws<ValueError>([&] { io::load_checkpoint(period4, dir / "ckpt.gguf"); },
                                   {"1 micro-steps into an accumulation period of 3 batches", "period is 4 batches",
                                    "nbatch_logical"}));
  }
  nn::Model m = t.model();
  io::save_model(m, dir / "model.gguf");
  EXPECT_TRUE(throws<FormatError>([&] { io::load_checkpoint(t, dir / "model.gguf"); }, {"'model'", "'checkpoint'"}));
  t.free();
  EXPECT_TRUE(throws<StateError>([&] { io::save_checkpoint(t, dir / "x.gguf"); }, {"free()"}));
}
