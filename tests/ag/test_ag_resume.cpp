// An eager training loop resumes exactly from files (issue 12): the module,
// its optimizer's and its scheduler's state dicts saved beside each other
// (ag::save), loaded into a fresh process-like set of objects (ag::load,
// ag::load_state_dict), and three more steps on both sides leave bit-identical
// parameters.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "tensorgrad/ag/functional.h"
#include "tensorgrad/ag/nn/modules.h"
#include "tensorgrad/ag/optim.h"
#include "tensorgrad/ag/save.h"
#include "tensorgrad/core/error.h"
#include "test_files.h"
#include "test_support.h"

using namespace tensorgrad;
namespace ag = tensorgrad::ag;

namespace {

std::shared_ptr<ag::nn::Sequential> mlp() {
  return std::make_shared<ag::nn::Sequential>(std::initializer_list<std::shared_ptr<ag::nn::Module>>{
      std::make_shared<ag::nn::Linear>(3, 8), std::make_shared<ag::nn::Tanh>(), std::make_shared<ag::nn::Linear>(8, 2)});
}

void train_steps(ag::nn::Module& net, ag::optim::Optimizer& opt, ag::optim::LRScheduler& sched, int steps) {
  const ag::Tensor x = ag::tensor({0.1f, -0.4f, 0.9f, 1.2f, 0.3f, -0.7f, -1.0f, 0.5f, 0.2f, 0.0f, 0.8f, -0.3f},
                                  Shape{4, 3});
  const ag::Tensor y = ag::tensor({1, 0, 0, 1, 0.5f, 0.5f, 1, 1}, Shape{4, 2});
  for (int i = 0; i < steps; ++i) {
    opt.zero_grad();
    ag::Tensor loss = ag::mse_loss(net(x), y);
    loss.backward();
    opt.step();
    sched.step();
  }
}

bool same_bits(const ag::Tensor& a, const ag::Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.data().raw(), b.data().raw(), a.data().nbytes()) == 0;
}

}  // namespace

TEST(AgResume, ModuleOptimizerAndSchedulerFromFilesContinueBitIdentically) {
  test_support::TempDir dir;
  ag::manual_seed(5);
  auto net = mlp();
  ag::optim::Adam opt(net->parameters(), 0.05);
  ag::optim::StepLR sched(opt, 2, 0.5);
  train_steps(*net, opt, sched, 3);

  const std::string model_path = (dir.path / "model.gguf").string();
  const std::string opt_path = (dir.path / "adam.gguf").string();
  const std::string sched_path = (dir.path / "steplr.gguf").string();
  ag::save(*net, model_path);
  ag::save(opt.state_dict(), opt_path, ag::kOptimizerStateKind);
  ag::save(sched.state_dict(), sched_path, ag::kSchedulerStateKind);

  // The resumed side: everything from the files (the module rebuilt without a factory).
  std::shared_ptr<ag::nn::Module> resumed = ag::load(model_path);
  EXPECT_FALSE(resumed->is_training());
  resumed->train();
  ag::optim::Adam opt2(resumed->parameters(), 0.05);
  ag::optim::StepLR sched2(opt2, 2, 0.5);
  opt2.load_state_dict(ag::load_state_dict(opt_path, ag::kOptimizerStateKind));
  sched2.load_state_dict(ag::load_state_dict(sched_path, ag::kSchedulerStateKind));
  EXPECT_EQ(sched2.get_last_lr(), sched.get_last_lr());

  train_steps(*net, opt, sched, 3);
  train_steps(*resumed, opt2, sched2, 3);
  const auto a = net->named_parameters(), b = resumed->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_TRUE(same_bits(a[i].second, b[i].second)) << a[i].first << " differs after resuming";
  }
  // The kinds are checked: an optimizer file is not a module's state dict.
  EXPECT_TRUE(test_support::throws<FormatError>([&] { ag::load_state_dict(opt_path); }, {"optimizer_state"}));
}
