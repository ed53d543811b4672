// backward_walk (ops/gradients.h) on its own terms: a tape that is not a Graph.
// ScalarTape is a tiny eager builder over rank-0 float32 values: it computes
// each op as it is applied and records it, as the eager API's tape will. The
// walk then runs the op table's gradient rules on it, and the gradients are
// read off the computed values and checked against the derivative by hand.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tensorgrad/core/error.h"
#include "tensorgrad/ops/gradients.h"

namespace tensorgrad {
namespace {

class ScalarTape final : public Builder, public Tape {
 public:
  Value leaf(float x) {
    entries_.push_back({OpKind::Leaf, {}, {}, x});
    return Value{int32_t(entries_.size() - 1)};
  }
  float value(Value v) const { return entries_.at(size_t(v.id)).value; }
  OpKind op(Value v) const { return entries_.at(size_t(v.id)).op; }
  size_t count(OpKind op) const {
    size_t c = 0;
    for (const Entry& e : entries_) c += e.op == op;
    return c;
  }

  Value apply(OpKind op, std::span<const Value> inputs, const OpAttrs& attrs) override {
    for (Value in : inputs) shape(in);
    auto x = [&](size_t i) { return value(inputs[i]); };
    float y;
    // Only the ops the rules of Add, Sub and Mul emit on scalars.
    if (op == OpKind::Add) y = x(0) + x(1);
    else if (op == OpKind::Sub) y = x(0) - x(1);
    else if (op == OpKind::Mul) y = x(0) * x(1);
    else if (op == OpKind::Scale) y = x(0) * attrs.factor;
    else if (op == OpKind::Fill) y = attrs.value;
    else throw Error(std::string("ScalarTape does not run ") + op_info(op).name);
    entries_.push_back({op, attrs, std::vector<Value>(inputs.begin(), inputs.end()), y});
    return Value{int32_t(entries_.size() - 1)};
  }
  Value parameter(const Tensor&, const char*, bool) override { throw Error("ScalarTape has no parameters"); }
  Value rng_counter() override { throw Error("ScalarTape has no random stream"); }
  Shape shape(Value v) const override {
    if (v.id < 0 || size_t(v.id) >= entries_.size()) throw IndexError("not a value of this tape");
    return Shape{};
  }
  DType dtype(Value v) const override {
    shape(v);
    return DType::Float32;
  }

  size_t size() const override { return entries_.size(); }
  Application application(size_t i) const override {
    const Entry& e = entries_[i];
    return {e.op, e.attrs, e.inputs};
  }

 private:
  struct Entry {
    OpKind op;
    OpAttrs attrs;
    std::vector<Value> inputs;
    float value;
  };
  std::vector<Entry> entries_;
};

// loss = x w + x - label: x is used twice, so its gradient is a sum (w + 1);
// label is no wrt, so Sub's rule must not build its gradient (a Scale).
TEST(BackwardWalk, ThreeApplicationsAgainstHandDerivatives) {
  ScalarTape t;
  Value x = t.leaf(3.0f), w = t.leaf(-2.0f), label = t.leaf(5.0f), unused = t.leaf(7.0f);
  Value loss = t.sub(t.add(t.mul(x, w), x), label);
  Value after = t.leaf(1.0f);  // made after the loss: cannot feed it
  ASSERT_FLOAT_EQ(t.value(loss), -8.0f);

  const Value wrt[] = {x, w, unused, after};
  std::vector<Value> g = backward_walk(t, t, loss, wrt, t.fill(Shape{}, 2.0f));
  ASSERT_EQ(g.size(), 4u);
  ASSERT_TRUE(g[0].valid());
  ASSERT_TRUE(g[1].valid());
  EXPECT_FLOAT_EQ(t.value(g[0]), 2.0f * (-2.0f + 1.0f));  // seed (w + 1)
  EXPECT_FLOAT_EQ(t.value(g[1]), 2.0f * 3.0f);            // seed x
  EXPECT_EQ(t.op(g[0]), OpKind::Add);                     // x's two uses accumulated
  EXPECT_FALSE(g[2].valid());
  EXPECT_FALSE(g[3].valid());
  EXPECT_EQ(t.count(OpKind::Scale), 0u);
}

TEST(BackwardWalk, AWrtOfAnotherBuilderIsAnIndexError) {
  ScalarTape t;
  Value x = t.leaf(1.0f);
  Value loss = t.mul(x, x);
  const Value wrt[] = {Value{99}};
  EXPECT_THROW(backward_walk(t, t, loss, wrt, t.fill(Shape{}, 1.0f)), IndexError);
}

}  // namespace
}  // namespace tensorgrad
