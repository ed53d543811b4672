// The data adapter (src/nn/data_adapter.h): fit, evaluate, predict,
// train_on_batch and test_on_batch check their data in one place, so each
// bad input is refused by every one of them with the same error type and
// the same words after the call's name ("fit: ", "evaluate: ", ...).
#include <gtest/gtest.h>

#include "test_support.h"

#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tensorgrad/tensorgrad.h"

using namespace tensorgrad;
using namespace tensorgrad::nn;

namespace {
constexpr int64_t kRows = 8;

Sequential model() {
  manual_seed(3);
  Sequential m({3});
  m.add(Dense(2));
  m.compile(OptimizerSpec::sgd(0.1f), "mse");
  return m;
}

Tensor features(int64_t rows = kRows, int64_t width = 3) { return Tensor::full(Shape{rows, width}, 0.5f); }
Tensor targets(int64_t rows = kRows) { return Tensor::full(Shape{rows, 2}, 0.25f); }

// What one call threw: the error's type and its message without the call's
// "<name>: " (the adapter names the call first; the rest is the same words).
struct Refusal {
  std::string type, message;
};

std::optional<Refusal> refusal(const std::function<void()>& f, const std::string& call) {
  try {
    f();
  } catch (const Error& e) {
    std::string m = e.what();
    if (m.rfind(call + ": ", 0) == 0) m = m.substr(call.size() + 2);
    return Refusal{typeid(e).name(), m};
  }
  return std::nullopt;
}

// One bad input: x, y and sample_weight as every call gets them, the error
// type and the words its message must hold.
struct Case {
  const char* name;
  std::vector<Tensor> x, y;
  Tensor w;
  std::function<bool(const Error&)> is_type;
  std::vector<std::string> words;
  bool predict = true;  // predict reads x alone: the cases about y and weights do not apply
};

template <class E>
std::function<bool(const Error&)> type() {
  return [](const Error& e) { return dynamic_cast<const E*>(&e) != nullptr; };
}

std::vector<Case> cases() {
  Tensor nan_x = features();
  nan_x.data<float>()[2 * 3 + 1] = std::nanf("");
  Tensor inf_y = targets();
  inf_y.data<float>()[5 * 2] = INFINITY;
  return {
      {"two x tensors", {features(), features()}, {targets()}, {}, type<ShapeError>(),
       {"the model has 1 input(s)", "got 2 x tensor(s)"}},
      {"no target", {features()}, {}, {}, type<ShapeError>(), {"1 output(s)", "got 0 target tensor(s)"}, false},
      {"y with other rows", {features()}, {targets(kRows - 1)}, {}, type<ShapeError>(),
       {"x has 8 rows but y has 7", "one label row per input row"}, false},
      {"weights with other rows", {features()}, {targets()}, Tensor::full(Shape{kRows - 2}, 1.0f), type<ShapeError>(),
       {"sample_weight must have one weight per row of x (8)", "{6}"}, false},
      {"a weight matrix", {features()}, {targets()}, Tensor::full(Shape{kRows, 2}, 1.0f), type<ValueError>(),
       {"one weight per row ({8} or {8, 1})", "loss_mask"}, false},
      {"int32 weights", {features()}, {targets()}, Tensor::zeros(Shape{kRows}, DType::Int32), type<TypeError>(),
       {"sample_weight must be float32", "int32"}, false},
      {"x of the wrong width", {features(kRows, 4)}, {targets()}, {}, type<ShapeError>(), {"{8, 3}", "{8, 4}"}},
      {"int32 x", {Tensor::zeros(Shape{kRows, 3}, DType::Int32)}, {targets()}, {}, type<TypeError>(),
       {"x must be float32", "int32"}},
      {"NaN in x", {nan_x}, {targets()}, {}, type<ValueError>(), {"x contains NaN at row 2, column 1"}},
      {"infinity in y", {features()}, {inf_y}, {}, type<ValueError>(), {"y contains infinity at row 5"}, false},
      {"an undefined x", {Tensor()}, {targets()}, {}, type<ValueError>(), {"x is an undefined tensor"}},
      {"a scalar x", {Tensor::full(Shape{}, 1.0f)}, {targets()}, {}, type<ShapeError>(),
       {"x must have a batch dimension; got a scalar"}},
      {"no rows", {features(0)}, {targets(0)}, {}, type<ValueError>(), {"x has no rows"}, false},
  };
}
}  // namespace

// Each bad input once through every call: the same type, the same words.
TEST(DataAdapter, EveryCallRefusesEachBadInputAlike) {
  for (const Case& c : cases()) {
    Sequential m = model();
    const std::vector<float> before = m.get_weights()[0].to_vector();
    FitOptions o;
    o.verbose = 0;
    o.sample_weight = c.w;
    std::vector<std::pair<std::string, std::function<void()>>> calls{
        {"fit", [&] { m.fit(c.x, c.y, o); }},
        {"evaluate", [&] { m.evaluate(c.x, c.y, 4, c.w); }},
        {"train_on_batch", [&] { m.train_on_batch(Batch{c.x, c.y, c.w}); }},
        {"test_on_batch", [&] { m.test_on_batch(Batch{c.x, c.y, c.w}); }},
    };
    if (c.predict) calls.push_back({"predict", [&] { m.predict(c.x); }});
    std::optional<Refusal> first;
    for (const auto& [call, f] : calls) {
      try {
        f();
        ADD_FAILURE() << c.name << ": " << call << " did not throw";
        continue;
      } catch (const Error& e) {
        EXPECT_TRUE(c.is_type(e)) << c.name << ": " << call << " threw " << typeid(e).name() << ": " << e.what();
        for (const std::string& w : c.words)
          EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << c.name << ": " << call << ": " << e.what();
      }
      const std::optional<Refusal> r = refusal(f, call);
      ASSERT_TRUE(r.has_value());
      if (!first) first = r;
      EXPECT_EQ(r->type, first->type) << c.name << ": " << call;
      EXPECT_EQ(r->message, first->message) << c.name << ": " << call;
    }
    EXPECT_EQ(m.get_weights()[0].to_vector(), before) << c.name << ": a refused call trained";
  }
}

// Validation data goes through the same checks, named as validation data.
TEST(DataAdapter, ValidationDataIsCheckedAsTrainingData) {
  Sequential m = model();
  FitOptions o;
  o.verbose = 0;
  o.validation_data = std::make_pair(features(kRows, 4), targets());
  EXPECT_TRUE(test_support::throws<ShapeError>([&] { m.fit(features(), targets(), o); },
                                               {"validation x must be {8, 3}", "{8, 4}"}));
  o.validation_data = std::make_pair(features(), targets(kRows - 1));
  EXPECT_TRUE(test_support::throws<ShapeError>([&] { m.fit(features(), targets(), o); },
                                               {"validation_data: x has 8 rows but y has 7"}));
  o.validation_data.reset();
  o.validation_x = {features()};
  o.validation_y = {};
  EXPECT_TRUE(test_support::throws<ShapeError>([&] { m.fit(features(), targets(), o); },
                                               {"validation_x/validation_y", "got 0 target tensor(s)"}));
}

// A batch holds at most batch_size rows; the in-memory calls split theirs.
TEST(DataAdapter, ABatchIsHeldToItsBatchSize) {
  Sequential m = model();
  EXPECT_TRUE(test_support::throws<ShapeError>([&] { m.train_on_batch(Batch{{features()}, {targets()}, {}}, 4); },
                                               {"train_on_batch: the batch has 8 rows, more than batch_size 4"}));
  EXPECT_NO_THROW(m.evaluate(features(), targets(), 4));
}
