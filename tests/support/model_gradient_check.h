#pragma once
// A model's gradients against central finite differences (tests of
// functional and imported models).
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "test_support.h"
#include "tensorgrad/tensorgrad.h"

namespace test_support {

// Central finite differences of sum(outputs * projections) against the
// graph's gradients, for every trainable weight of the model: empty when
// all agree, else what differs. `h` is the step: a smaller one for a model
// with kinks (ReLU-like gates) that a step of 1e-2 might cross.
inline std::string check_gradients(const tensorgrad::nn::Model& model, const std::vector<tensorgrad::Tensor>& xs,
                                   uint32_t seed, float h = 1e-2f) {
  std::mt19937 rng(seed);
  const tensorgrad::ModelFunction f = model.model_function();
  tensorgrad::Graph g;
  std::vector<tensorgrad::Value> in;
  for (size_t i = 0; i < xs.size(); ++i) in.push_back(g.input(f.inputs[i].name, xs[i].shape(), xs[i].dtype()));
  const std::vector<tensorgrad::Value> outs = f.forward(g, in, false);
  std::vector<tensorgrad::Tensor> projections;
  tensorgrad::Value loss;
  for (tensorgrad::Value o : outs) {
    projections.push_back(uniform(g.shape(o), rng, -1.0f, 1.0f));
    const tensorgrad::Value term = g.sum(g.mul(o, g.input("w" + std::to_string(projections.size()), g.shape(o))));
    loss = loss.valid() ? g.add(loss, term) : term;
  }
  const std::vector<tensorgrad::Value> params = g.trainable_parameters();
  std::vector<tensorgrad::Tensor> bound;
  for (tensorgrad::Value p : params) bound.push_back(g.node(p).bound);
  const std::vector<tensorgrad::Value> grads = g.gradients(loss, params);
  std::vector<tensorgrad::Value> results{loss};
  for (tensorgrad::Value v : grads) {
    if (!v.valid()) return "a weight got no gradient";
    results.push_back(v);
  }
  tensorgrad::Executable exe(std::move(g), results);
  for (size_t i = 0; i < xs.size(); ++i) exe.bind(in[i], xs[i]);
  for (size_t i = 0; i < projections.size(); ++i) {
    const tensorgrad::Node* w = nullptr;
    for (const tensorgrad::Node& n : exe.graph().nodes())
      if (n.role == tensorgrad::NodeRole::Input && n.name == "w" + std::to_string(i + 1)) w = &n;
    exe.bind(tensorgrad::Value{int32_t(w - exe.graph().nodes().data())}, projections[i]);
  }
  auto run = [&] {
    exe.run();
    return double(exe.scalar(loss));
  };
  run();
  std::vector<std::vector<float>> analytic;
  for (tensorgrad::Value v : grads) analytic.push_back(exe.output(v).to_vector());
  for (size_t p = 0; p < bound.size(); ++p) {
    float* x = bound[p].data<float>();
    for (int64_t k = 0; k < bound[p].numel(); ++k) {
      const float saved = x[k];
      x[k] = saved + h;
      const double lp = run();
      x[k] = saved - h;
      const double lm = run();
      x[k] = saved;
      const double num = (lp - lm) / (2.0 * double(h)), ana = analytic[p][size_t(k)];
      if (std::fabs(num - ana) > 1e-2 * std::max(1.0, std::fabs(num)))
        return "weight " + std::to_string(p) + "[" + std::to_string(k) + "]: numeric " + std::to_string(num) +
               ", analytic " + std::to_string(ana);
    }
  }
  return "";
}

}  // namespace test_support
