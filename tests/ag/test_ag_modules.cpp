// Eager modules (ag/nn/module.h, ag/nn/modules.h): registration and names,
// train/eval, state dicts (order, strict and non-strict loading, the
// mismatch list), and Linear against its formula.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "tensorgrad/ag/functional.h"
#include "tensorgrad/ag/nn/modules.h"
#include "tensorgrad/core/error.h"
#include "test_support.h"

using namespace tensorgrad;
namespace ag = tensorgrad::ag;
namespace agnn = tensorgrad::ag::nn;

namespace {

std::shared_ptr<agnn::Sequential> mlp() {
  return std::make_shared<agnn::Sequential>(std::initializer_list<std::shared_ptr<agnn::Module>>{
      std::make_shared<agnn::Linear>(4, 8), std::make_shared<agnn::ReLU>(), std::make_shared<agnn::Dropout>(0.5f),
      std::make_shared<agnn::Linear>(8, 2)});
}

std::vector<std::string> names(const std::vector<std::pair<std::string, ag::Tensor>>& v) {
  std::vector<std::string> out;
  for (const auto& [n, t] : v) out.push_back(n);
  return out;
}

}  // namespace

TEST(AgModules, LinearComputesXWtPlusBWithPyTorchLayoutAndInit) {
  ag::manual_seed(1);
  agnn::Linear fc(3, 2);
  EXPECT_EQ(fc.weight.shape(), (Shape{2, 3}));
  EXPECT_EQ(fc.bias.shape(), (Shape{2}));
  const float bound = 1.0f / std::sqrt(3.0f);
  for (float w : fc.weight.to_vector()) EXPECT_LE(std::fabs(w), bound);
  ag::Tensor x = ag::tensor({1, 2, 3, -1, 0, 2}, Shape{2, 3});
  const std::vector<float> y = fc(x).to_vector(), w = fc.weight.to_vector(), b = fc.bias.to_vector(),
                           xv = x.to_vector();
  for (int r = 0; r < 2; ++r)
    for (int o = 0; o < 2; ++o) {
      double want = b[size_t(o)];
      for (int i = 0; i < 3; ++i) want += double(xv[size_t(r * 3 + i)]) * w[size_t(o * 3 + i)];
      EXPECT_NEAR(y[size_t(r * 2 + o)], want, 1e-6);
    }
  // {..., in}: leading axes kept.
  EXPECT_EQ(fc(ag::ones(Shape{4, 5, 3})).shape(), (Shape{4, 5, 2}));
  EXPECT_TRUE(test_support::throws<ShapeError>([&] { fc(ag::ones(Shape{2, 4})); }, {"Linear", "{2, 4}", "3"}));
  EXPECT_TRUE(test_support::throws<ValueError>([] { agnn::Linear(0, 2); }, {"Linear", ">= 1"}));
}

TEST(AgModules, SequentialNamesFollowPyTorch) {
  auto m = mlp();
  EXPECT_EQ(names(m->named_parameters()), (std::vector<std::string>{"0.weight", "0.bias", "3.weight", "3.bias"}));
  EXPECT_EQ(m->parameters().size(), 4u);
  EXPECT_EQ(m->children().size(), 4u);
  EXPECT_EQ(m->state_dict().size(), 4u);
  for (const ag::Tensor& p : m->parameters()) EXPECT_TRUE(p.requires_grad());
  EXPECT_EQ((*m)[3]->type(), std::string("Linear"));
}

TEST(AgModules, EvalTurnsDropoutOffInEveryChild) {
  auto m = mlp();
  ag::Tensor x = ag::ones(Shape{16, 4});
  m->eval();
  EXPECT_FALSE((*m)[2]->is_training());
  const std::vector<float> a = m->forward(x).to_vector();
  EXPECT_EQ(a, m->forward(x).to_vector());
  m->train();
  EXPECT_TRUE((*m)[2]->is_training());
}

TEST(AgModules, BackwardFillsEveryParameterAndZeroGradResets) {
  auto m = mlp();
  m->eval();
  ag::Tensor loss = ag::mse_loss(m->forward(ag::rand(Shape{8, 4})), ag::zeros(Shape{8, 2}));
  loss.backward();
  for (const ag::Tensor& p : m->parameters()) ASSERT_TRUE(p.grad().defined());
  m->zero_grad(false);
  for (const ag::Tensor& p : m->parameters())
    for (float g : p.grad().to_vector()) EXPECT_EQ(g, 0.0f);
  m->zero_grad();
  for (const ag::Tensor& p : m->parameters()) EXPECT_FALSE(p.grad().defined());
}

TEST(AgModules, LoadStateDictCopiesInPlaceAndGivesBitIdenticalOutputs) {
  auto a = mlp(), b = mlp();
  a->eval();
  b->eval();
  ag::Tensor w_handle = std::static_pointer_cast<agnn::Linear>((*b)[0])->weight;
  ag::Tensor x = ag::rand(Shape{5, 4});
  EXPECT_NE(a->forward(x).to_vector(), b->forward(x).to_vector());
  agnn::LoadResult r = b->load_state_dict(a->state_dict());
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(a->forward(x).to_vector(), b->forward(x).to_vector());
  EXPECT_EQ(w_handle.to_vector(), std::static_pointer_cast<agnn::Linear>((*a)[0])->weight.to_vector());
}

TEST(AgModules, StrictLoadListsEveryMismatchAndCopiesNothing) {
  auto model = mlp();
  agnn::Sequential other{std::make_shared<agnn::Linear>(4, 6), std::make_shared<agnn::ReLU>(),
                         std::make_shared<agnn::Linear>(6, 2)};
  const std::vector<float> before = model->parameters()[0].to_vector();
  EXPECT_TRUE(test_support::throws<ValueError>([&] { model->load_state_dict(other.state_dict()); },
                                               {"0.weight: model {8, 4} vs state dict {6, 4}", "missing key: 3.weight",
                                                "missing key: 3.bias", "unexpected key: 2.weight",
                                                "unexpected key: 2.bias", "strict = false"}));
  EXPECT_EQ(model->parameters()[0].to_vector(), before);
  agnn::LoadResult r = model->load_state_dict(other.state_dict(), /*strict=*/false);
  EXPECT_EQ(r.missing_keys, (std::vector<std::string>{"3.weight", "3.bias"}));
  EXPECT_EQ(r.unexpected_keys, (std::vector<std::string>{"2.weight", "2.bias"}));
  EXPECT_EQ(r.shape_mismatches.size(), 2u);  // 0.weight and 0.bias, skipped
  EXPECT_EQ(model->parameters()[0].to_vector(), before);
}

TEST(AgModules, RegistrationErrorsAndTheTypeRegistry) {
  struct Custom : agnn::Module {
    Custom() { register_parameter("w", ag::zeros(Shape{2})); }
    const char* type() const override { return "Custom"; }
    void again() { register_buffer("w", ag::zeros(Shape{2})); }
    void dotted() { register_parameter("a.b", ag::zeros(Shape{2})); }
  };
  Custom c;
  EXPECT_TRUE(test_support::throws<ValueError>([&] { c.again(); }, {"'w'", "already a parameter"}));
  EXPECT_TRUE(test_support::throws<ValueError>([&] { c.dotted(); }, {"a.b", "without '.'"}));
  EXPECT_TRUE(test_support::throws<ValueError>([&] { c.forward(ag::ones(Shape{1})); }, {"Custom", "forward"}));
  auto linear = agnn::module_from_config(agnn::Linear(3, 5, false).config());
  EXPECT_EQ(linear->type(), std::string("Linear"));
  EXPECT_EQ(linear->state_dict().size(), 1u);
  EXPECT_EQ(linear->state_dict().at("weight").shape(), (Shape{5, 3}));
  EXPECT_TRUE(test_support::throws<ValueError>([] { agnn::module_from_config(agnn::ModuleConfig("Nope")); },
                                               {"Nope", "register_module_type", "Linear"}));
}

TEST(AgModules, AModuleTreeCannotLoop) {
  auto s = std::make_shared<agnn::Sequential>();
  EXPECT_TRUE(test_support::throws<ValueError>([&] { s->push_back(s); }, {"contains it", "loop"}));
  auto a = std::make_shared<agnn::Sequential>(), b = std::make_shared<agnn::Sequential>();
  a->push_back(b);
  EXPECT_TRUE(test_support::throws<ValueError>([&] { b->push_back(a); }, {"loop"}));
  EXPECT_EQ(b->size(), 0u);
  EXPECT_EQ(a->forward(ag::ones(Shape{2})).to_vector(), (std::vector<float>{1, 1}));
}

// torch.nn.GELU(approximate=...): the module applies ag::gelu with its choice,
// keeps it through its config, and refuses any other string.
TEST(AgModules, GeluTakesPyTorchsApproximateArgument) {
  ag::Tensor x = ag::tensor({-3.0f, -0.5f, 0.0f, 0.25f, 1.0f, 2.5f}, Shape{2, 3});
  agnn::GELU exact, tanh_form("tanh");
  const std::vector<float> e = exact.forward(x).to_vector(), t = tanh_form.forward(x).to_vector();
  const std::vector<float> want_e = ag::gelu(x).to_vector(), want_t = ag::gelu(x, "tanh").to_vector();
  for (size_t i = 0; i < e.size(); ++i) {
    EXPECT_EQ(e[i], want_e[i]) << i;
    EXPECT_EQ(t[i], want_t[i]) << i;
  }
  EXPECT_NE(t[1], e[1]);  // the two forms differ away from 0 (by ~1e-4 at -0.5)
  EXPECT_EQ(exact.approximate(), "none");
  auto rebuilt = agnn::module_from_config(tanh_form.config());
  EXPECT_EQ(std::dynamic_pointer_cast<agnn::GELU>(rebuilt)->approximate(), "tanh");
  // A config saved before the option existed has no "approximate": the exact form.
  auto old = agnn::module_from_config(agnn::ModuleConfig("GELU"));
  EXPECT_EQ(std::dynamic_pointer_cast<agnn::GELU>(old)->approximate(), "none");
  EXPECT_TRUE(test_support::throws<ValueError>([] { agnn::GELU("erf"); }, {"approximate", "\"none\"", "\"tanh\"", "erf"}));
}
