#pragma once
// A model's gradients against central finite differences (tests of
// functional and imported models).
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "tensorgrad/tensorgrad.h"
#include "test_support.h"

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

// The gradients of sum(output 0 * w) at xs, for reference fixtures: one per
// input index in `wrt`, then one per trainable weight, named by the weight's
// name without its layer ("self_attention.query_kernel").
struct ProjectionGradients {
  std::vector<tensorgrad::Tensor> inputs;
  std::vector<std::pair<std::string, tensorgrad::Tensor>> weights;
};
inline ProjectionGradients projection_gradients(const tensorgrad::nn::Model& model,
                                                const std::vector<tensorgrad::Tensor>& xs, const tensorgrad::Tensor& w,
                                                const std::vector<size_t>& wrt) {
  const tensorgrad::ModelFunction fn = model.model_function();
  tensorgrad::Graph g;
  std::vector<tensorgrad::Value> in;
  for (size_t i = 0; i < xs.size(); ++i) in.push_back(g.input(fn.inputs[i].name, xs[i].shape(), xs[i].dtype()));
  const tensorgrad::Value wv = g.input("w", w.shape());
  const tensorgrad::Value loss = g.sum(g.mul(fn.forward(g, in, false).at(0), wv));
  std::vector<tensorgrad::Value> of;
  for (size_t i : wrt) of.push_back(in.at(i));
  const std::vector<tensorgrad::Value> params = g.trainable_parameters();
  of.insert(of.end(), params.begin(), params.end());
  std::vector<std::string> names;  // the graph's creation order, not the declaration order
  for (tensorgrad::Value p : params) names.push_back(g.node(p).name.substr(g.node(p).name.find('/') + 1));
  const std::vector<tensorgrad::Value> grads = g.gradients(loss, of);
  tensorgrad::Executable exe(std::move(g), grads);
  for (size_t i = 0; i < xs.size(); ++i) exe.bind(in[i], xs[i]);
  exe.bind(wv, w);
  exe.run();
  ProjectionGradients out;
  for (size_t i = 0; i < wrt.size(); ++i) out.inputs.push_back(exe.output(grads[i]).clone());
  for (size_t i = 0; i < params.size(); ++i)
    out.weights.emplace_back(names[i], exe.output(grads[wrt.size() + i]).clone());
  return out;
}

}  // namespace test_support
