#pragma once
// The graph path's gradient check (tests/ops/): an op's gradient rule and
// backward kernel against central finite differences of a loss, through the
// real static path: Graph -> Graph::gradients -> Executable::run.
//
// How a check works. The differentiated tensors are trainable parameters
// (param(), g.parameter); fixed data (labels, ids, weights, projection
// vectors) are inputs bound with Executable::bind (data()). An op's output y
// is reduced to a scalar with loss = sum(y * w) for a fixed random w in
// [-1, 1] (project()), so every output element enters the loss with its own
// weight (a wrong sign or a swapped element cannot cancel). The analytic
// gradient is read from one run. For the numeric one, each element of the
// parameter's memory is set to x + h and x - h (the graph reads that same
// memory) and the loss re-read: num = (L(x+h) - L(x-h)) / (x+h - x-h), the
// denominator being the actually representable float32 step. The
// perturb-and-compare step is the public ag::gradcheck_buffers
// (include/tensorgrad/ag/gradcheck.h), the core of the eager ag::gradcheck.
// Each caller passes its step and tolerances (CheckOptions) and argues them
// at the top of its file.
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "test_support.h"
#include "tensorgrad/ag/gradcheck.h"
#include "tensorgrad/backend/executable.h"
#include "tensorgrad/graph/graph.h"

namespace test_support {

struct CheckOptions {
  // The finite-difference step h; per element |num - ana| <= atol + rtol * |num|.
  float step = 1e-2f;
  double rtol = 1e-2, atol = 1e-3;
  // Every parameter's gradient (numeric or analytic) must reach this
  // somewhere, else the check is vacuous (0 == 0 proves nothing) and fails.
  double min_grad = 1e-2;
  // Dropout streams mix the run counter in; every run (analytic and numeric)
  // is started from the same counter so they all see the same mask.
  uint64_t rng_counter = 41;
  // Sanity tests only: corrupts the analytic gradient of parameter i.
  std::function<void(size_t, std::vector<float>&)> corrupt;
};

struct CheckResult {
  bool ok = true;
  std::string message;                       // empty when ok; else what failed
  std::vector<std::vector<float>> analytic;  // per parameter
  std::vector<std::vector<float>> numeric;   // per parameter
  std::vector<std::vector<float>> extras;    // values of the extra outputs, unperturbed run
  float loss = 0.0f;
};

// One gradient check: build the graph through `g`, register parameters and
// data, then call check() once (it moves the graph into its Executable).
class GradCheck {
 public:
  explicit GradCheck(uint32_t seed) : rng(seed) {}

  tensorgrad::Graph g;
  std::mt19937 rng;

  // A trainable parameter that is differentiated; the tensor's memory is
  // perturbed for the finite differences.
  tensorgrad::Value param(const tensorgrad::Tensor& t, const std::string& name) {
    tensorgrad::Value v = g.parameter(t, name.c_str(), /*trainable=*/true);
    params_.push_back({v, t, name});
    return v;
  }
  // Fixed data: an input leaf bound to `t` for every run.
  tensorgrad::Value data(const tensorgrad::Tensor& t, const std::string& name) {
    tensorgrad::Value v = g.input(name, t.shape(), t.dtype());
    binds_.push_back({v, t});
    return v;
  }
  // sum(y * w) with w uniform in [-1, 1], fixed: every element of y matters.
  tensorgrad::Value project(tensorgrad::Value y) {
    last_weights = uniform(g.shape(y), rng, -1.0f, 1.0f);
    return g.sum(g.mul(y, data(last_weights, "w" + std::to_string(binds_.size()))));
  }
  tensorgrad::Tensor last_weights;

  size_t params() const { return params_.size(); }
  size_t binds() const { return binds_.size(); }

  // Binds every data leaf (for tests that run the graph themselves).
  void bind_data(tensorgrad::Executable& exe) const {
    for (auto& b : binds_) exe.bind(b.v, b.t);
  }

  CheckResult check(tensorgrad::Value loss, const CheckOptions& opt = {},
                    std::vector<tensorgrad::Value> extra = {}) {
    using tensorgrad::Value;
    CheckResult r;
    std::ostringstream msg;
    std::vector<Value> wrt;
    for (auto& p : params_) wrt.push_back(p.v);
    std::vector<Value> grads = g.gradients(loss, wrt);
    std::vector<Value> outputs{loss};
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!grads[i].valid()) {
        r.ok = false;
        msg << "parameter '" << params_[i].name << "' got no gradient\n";
        r.message = msg.str();
        return r;
      }
      outputs.push_back(grads[i]);
    }
    for (Value v : extra) outputs.push_back(v);
    tensorgrad::Executable exe(std::move(g), outputs);
    bind_data(exe);
    auto run_loss = [&] {
      exe.set_rng_counter(opt.rng_counter);
      exe.run();
      return exe.scalar(loss);
    };

    r.loss = run_loss();
    if (!std::isfinite(r.loss)) {
      r.ok = false;
      r.message = "loss is not finite: " + std::to_string(r.loss);
      return r;
    }
    for (size_t i = 0; i < grads.size(); ++i) {
      tensorgrad::Tensor gt = exe.output(grads[i]);
      if (gt.shape() != params_[i].t.shape()) {
        r.ok = false;
        msg << "parameter '" << params_[i].name << "' " << params_[i].t.shape().str() << " got a gradient of shape "
            << gt.shape().str() << "\n";
      }
      r.analytic.push_back(gt.to_vector());
      if (opt.corrupt) opt.corrupt(i, r.analytic.back());
    }
    for (Value v : extra) r.extras.push_back(exe.output(v).to_vector());
    if (!r.ok) {
      r.message = msg.str();
      return r;
    }

    // The comparison is the public one (ag::gradcheck_buffers): each
    // parameter's memory is perturbed and the loss re-read from a run.
    std::vector<tensorgrad::ag::GradcheckBuffer> buffers;
    for (size_t i = 0; i < params_.size(); ++i) {
      const Param& p = params_[i];
      buffers.push_back({std::span<float>(p.t.data<float>(), size_t(p.t.numel())), r.analytic[i],
                         "parameter '" + p.name + "' " + p.t.shape().str()});
    }
    tensorgrad::ag::GradcheckOptions gopt;
    gopt.eps = opt.step;
    gopt.atol = opt.atol, gopt.rtol = opt.rtol, gopt.min_grad = opt.min_grad;
    tensorgrad::ag::GradcheckResult cmp =
        tensorgrad::ag::gradcheck_buffers([&] { return double(run_loss()); }, buffers, gopt);
    r.ok = cmp.ok;
    msg << cmp.message;
    for (tensorgrad::ag::GradcheckInputReport& rep : cmp.inputs) r.numeric.push_back(std::move(rep.numeric));
    r.message = msg.str();
    return r;
  }

 private:
  struct Param {
    tensorgrad::Value v;
    tensorgrad::Tensor t;
    std::string name;
  };
  struct Bind {
    tensorgrad::Value v;
    tensorgrad::Tensor t;
  };
  std::vector<Param> params_;
  std::vector<Bind> binds_;
};

}  // namespace test_support
