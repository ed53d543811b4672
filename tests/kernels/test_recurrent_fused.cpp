// The fused recurrent ops (LstmSequence, GruSequence) against the reference
// implementation they replace: the same cells composed step by step from
// small graph ops (matmul, slice, sigmoid, tanh, mul, add), as nn::LSTM and
// nn::GRU built them before. Forward values and every gradient agree; the
// fused ops' results are also the same bits at 1 and 2 threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "test_support.h"
#include "tensorgrad/backend/executable.h"
#include "tensorgrad/core/threads.h"
#include "tensorgrad/graph/graph.h"

using namespace tensorgrad;
using test_support::uniform;

namespace {

Value step_of(Graph& g, Value seq, int64_t t) {
  const Shape s = g.shape(seq);
  return g.reshape(g.slice(seq, 1, t, 1), Shape{s[0], s[2]});
}

Value gate(Graph& g, Value z, int64_t index, int64_t units) { return g.slice(z, 1, index * units, units); }

// Joins per-step {B, H} into {B, T, H}, pairwise.
Value stack(Graph& g, const std::vector<Value>& steps) {
  std::vector<Value> rows;
  for (Value v : steps) {
    const Shape s = g.shape(v);
    rows.push_back(g.reshape(v, Shape{s[0], 1, s[1]}));
  }
  while (rows.size() > 1) {
    std::vector<Value> next;
    for (size_t i = 0; i + 1 < rows.size(); i += 2) next.push_back(g.concat(rows[i], rows[i + 1], 1));
    if (rows.size() % 2) next.push_back(rows.back());
    rows = std::move(next);
  }
  return rows[0];
}

// The reference cells, written out step by step: every step's hidden state {B, T, H}.
Value lstm_reference(Graph& g, Value xw, Value u) {
  const Shape s = g.shape(xw);
  const int64_t h_units = g.shape(u)[0];
  Value h = g.fill(Shape{s[0], h_units}, 0.0f), c = h;
  std::vector<Value> states;
  for (int64_t t = 0; t < s[1]; ++t) {
    Value z = g.add(step_of(g, xw, t), g.matmul(h, u));
    Value i = g.sigmoid(gate(g, z, 0, h_units)), f = g.sigmoid(gate(g, z, 1, h_units));
    Value gg = g.tanh(gate(g, z, 2, h_units)), o = g.sigmoid(gate(g, z, 3, h_units));
    c = g.add(g.mul(f, c), g.mul(i, gg));
    h = g.mul(o, g.tanh(c));
    states.push_back(h);
  }
  return stack(g, states);
}

Value gru_reference(Graph& g, Value xw, Value u, Value rb) {
  const Shape s = g.shape(xw);
  const int64_t n_units = g.shape(u)[0];
  Value h = g.fill(Shape{s[0], n_units}, 0.0f);
  std::vector<Value> states;
  for (int64_t t = 0; t < s[1]; ++t) {
    Value xt = step_of(g, xw, t);
    Value hu = g.add(g.matmul(h, u), rb);
    Value z = g.sigmoid(g.add(gate(g, xt, 0, n_units), gate(g, hu, 0, n_units)));
    Value r = g.sigmoid(g.add(gate(g, xt, 1, n_units), gate(g, hu, 1, n_units)));
    Value n = g.tanh(g.add(gate(g, xt, 2, n_units), g.mul(r, gate(g, hu, 2, n_units))));
    h = g.add(n, g.mul(z, g.sub(h, n)));
    states.push_back(h);
  }
  return stack(g, states);
}

struct Outcome {
  std::vector<float> states;
  std::vector<std::vector<float>> grads;
};

enum class Cell { Lstm, Gru };

// Runs the fused op or the reference on the same tensors: the hidden states
// and the gradients of sum(states * w) with respect to every input.
Outcome run(Cell cell, bool fused, const std::vector<Tensor>& inputs, const Tensor& w) {
  Graph g;
  std::vector<Value> params;
  for (size_t i = 0; i < inputs.size(); ++i)
    params.push_back(g.parameter(inputs[i], ("p" + std::to_string(i)).c_str(), true));
  const int64_t h = inputs[1].shape()[0];
  Value states;
  if (fused) {
    Value y = cell == Cell::Lstm ? g.apply(OpKind::LstmSequence, {params[0], params[1]})
                                 : g.apply(OpKind::GruSequence, {params[0], params[1], params[2]});
    states = g.slice(y, 2, 0, h);
  } else {
    states = cell == Cell::Lstm ? lstm_reference(g, params[0], params[1])
                                : gru_reference(g, params[0], params[1], params[2]);
  }
  Value wv = g.input("w", w.shape());
  Value loss = g.sum(g.mul(states, wv));
  std::vector<Value> grads = g.gradients(loss, params);
  std::vector<Value> outputs{loss, states};
  outputs.insert(outputs.end(), grads.begin(), grads.end());
  Executable exe(std::move(g), outputs);
  exe.bind(wv, w);
  exe.run();
  Outcome r;
  r.states = exe.output(states).to_vector();
  for (Value v : grads) r.grads.push_back(exe.output(v).to_vector());
  return r;
}

// max |a - b| / max(max |b|, 1): the worst difference against the reference's scale.
double worst(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, scale = 1;
  for (size_t i = 0; i < a.size(); ++i) {
    d = std::max(d, double(std::fabs(a[i] - b[i])));
    scale = std::max(scale, double(std::fabs(b[i])));
  }
  return d / scale;
}

std::vector<Tensor> inputs(Cell cell, int64_t b, int64_t t, int64_t h, std::mt19937& rng) {
  const int64_t gates = cell == Cell::Lstm ? 4 : 3;
  std::vector<Tensor> in{uniform({b, t, gates * h}, rng, -1.5f, 1.5f), uniform({h, gates * h}, rng, -0.4f, 0.4f)};
  if (cell == Cell::Gru) in.push_back(uniform({gates * h}, rng, -0.5f, 0.5f));
  return in;
}

class FusedRecurrent : public ::testing::TestWithParam<Cell> {};

TEST_P(FusedRecurrent, MatchesTheStepByStepCells) {
  std::mt19937 rng(31);
  struct Size {
    int64_t b, t, h;
  };
  for (Size s : {Size{1, 1, 1}, Size{3, 7, 5}, Size{8, 12, 16}, Size{5, 30, 9}}) {
    SCOPED_TRACE("B " + std::to_string(s.b) + " T " + std::to_string(s.t) + " H " + std::to_string(s.h));
    const std::vector<Tensor> in = inputs(GetParam(), s.b, s.t, s.h, rng);
    const Tensor w = uniform({s.b, s.t, s.h}, rng, -1.0f, 1.0f);
    const Outcome fused = run(GetParam(), true, in, w), ref = run(GetParam(), false, in, w);
    EXPECT_LT(worst(fused.states, ref.states), 1e-5);
    ASSERT_EQ(fused.grads.size(), ref.grads.size());
    for (size_t i = 0; i < ref.grads.size(); ++i) EXPECT_LT(worst(fused.grads[i], ref.grads[i]), 1e-5) << "input " << i;
  }
}

// Rows split over threads in blocks; a row's arithmetic does not depend on
// its block, so the results are the same bits at any thread count.
TEST_P(FusedRecurrent, SameBitsAtOneAndTwoThreads) {
  std::mt19937 rng(32);
  const std::vector<Tensor> in = inputs(GetParam(), 17, 20, 32, rng);  // enough work for the pool
  const Tensor w = uniform({17, 20, 32}, rng, -1.0f, 1.0f);
  const int before = num_threads();
  set_num_threads(1);
  const Outcome one = run(GetParam(), true, in, w);
  set_num_threads(2);
  const Outcome two = run(GetParam(), true, in, w);
  set_num_threads(before);
  EXPECT_EQ(one.states, two.states);
  EXPECT_EQ(one.grads, two.grads);
}

INSTANTIATE_TEST_SUITE_P(Cells, FusedRecurrent, ::testing::Values(Cell::Lstm, Cell::Gru),
                         [](const auto& info) { return std::string(info.param == Cell::Lstm ? "Lstm" : "Gru"); });

}  // namespace
