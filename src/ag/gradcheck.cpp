// Gradient checking against central finite differences (ag/gradcheck.h).
// gradcheck_buffers is the one numeric core: the eager gradcheck below and
// the graph-path harness of tests/support/gradient_check.h both run through it.
#include "tensorgrad/ag/gradcheck.h"

#include <cmath>
#include <limits>
#include <random>
#include <sstream>

#include "tensorgrad/core/error.h"

namespace tensorgrad::ag {

namespace {

// Puts a perturbed element back when a loss call throws.
struct RestoreElement {
  float* at;
  float saved;
  ~RestoreElement() { *at = saved; }
};

}  // namespace

GradcheckResult gradcheck_buffers(const std::function<double()>& loss, std::span<const GradcheckBuffer> buffers,
                                  const GradcheckOptions& options) {
  for (size_t b = 0; b < buffers.size(); ++b)
    if (buffers[b].values.size() != buffers[b].analytic.size())
      throw ShapeError("gradcheck_buffers: buffer " + std::to_string(b) + " ('" + buffers[b].label + "') has " +
                       std::to_string(buffers[b].values.size()) + " values but an analytic gradient of " +
                       std::to_string(buffers[b].analytic.size()) +
                       "; give one gradient value per element, in the same order");
  GradcheckResult r;
  r.max_abs_grad = buffers.empty() ? 0.0 : std::numeric_limits<double>::infinity();
  double global_worst = -1;
  std::ostringstream msg;
  for (size_t b = 0; b < buffers.size(); ++b) {
    const GradcheckBuffer& buf = buffers[b];
    GradcheckInputReport rep;
    rep.numeric.resize(buf.values.size());
    for (size_t k = 0; k < buf.values.size(); ++k) {
      float* x = &buf.values[k];
      double lp, lm;
      const float saved = *x;
      const float xp = saved + options.eps, xm = saved - options.eps;
      {
        RestoreElement restore{x, saved};
        *x = xp;
        lp = loss();
        *x = xm;
        lm = loss();
      }
      const float num = float((lp - lm) / (double(xp) - double(xm)));
      const float ana = buf.analytic[k];
      rep.numeric[k] = num;
      rep.max_abs_numeric = std::max(rep.max_abs_numeric, std::fabs(double(num)));
      rep.max_abs_analytic = std::max(rep.max_abs_analytic, std::fabs(double(ana)));
      const double err = std::fabs(double(num) - double(ana));
      const double tol = options.atol + options.rtol * std::fabs(double(num));
      double ratio;
      if (!std::isfinite(num) || !std::isfinite(ana))
        ratio = std::numeric_limits<double>::infinity();
      else
        ratio = tol > 0 ? err / tol : (err > 0 ? std::numeric_limits<double>::infinity() : 0.0);
      if (ratio > 1) rep.mismatch = true;
      if (rep.worst_index < 0 || ratio > rep.worst_error) rep.worst_index = int64_t(k), rep.worst_error = ratio;
      if (ratio > global_worst) {
        global_worst = ratio;
        r.input = b, r.index = int64_t(k), r.analytic = ana, r.numeric = num, r.error = ratio;
      }
    }
    const double max_grad = std::max(rep.max_abs_numeric, rep.max_abs_analytic);
    r.max_abs_grad = std::min(r.max_abs_grad, max_grad);
    rep.vacuous = !(max_grad >= options.min_grad);
    if (rep.mismatch) {
      const size_t w = size_t(rep.worst_index);
      msg << buf.label << ": gradient mismatch, worst at element " << rep.worst_index << ": numeric "
          << rep.numeric[w] << " vs analytic " << buf.analytic[w] << " (|diff| "
          << std::fabs(double(rep.numeric[w]) - double(buf.analytic[w])) << " is " << rep.worst_error
          << "x the tolerance " << options.atol << " + " << options.rtol << " * |numeric|, step " << options.eps
          << "). Check the backward rule, or keep the inputs more than the step away from kinks and ties\n";
    }
    if (rep.vacuous) {
      msg << buf.label << ": gradient is ~0 everywhere (max |numeric| " << rep.max_abs_numeric << ", max |analytic| "
          << rep.max_abs_analytic << ", below min_grad " << options.min_grad
          << "): the check would be vacuous. The output does not depend on this input (or hardly); make it "
             "depend, choose inputs where the gradient is not ~0, or do not mark the input as checked\n";
    }
    r.ok = r.ok && !rep.mismatch && !rep.vacuous;
    r.inputs.push_back(std::move(rep));
  }
  r.message = msg.str();
  if (!r.ok && options.raise_exception) throw ValueError("gradcheck failed:\n" + r.message);
  return r;
}

GradcheckResult gradcheck(const std::function<Tensor(std::span<const Tensor>)>& fn,
                          std::initializer_list<Tensor> inputs, GradcheckOptions options) {
  return gradcheck(fn, std::span<const Tensor>(inputs.begin(), inputs.size()), options);
}

GradcheckResult gradcheck(const std::function<Tensor(std::span<const Tensor>)>& fn, std::span<const Tensor> inputs,
                          GradcheckOptions options) {
  if (!fn) throw ValueError("gradcheck: fn is empty; pass the function whose gradients are to be checked");
  std::vector<size_t> checked;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined())
      throw StateError("gradcheck: input " + std::to_string(i) +
                       " is an undefined tensor (default-constructed, or grad() before any backward); pass a tensor");
    if (inputs[i].dtype() != DType::Float32)
      throw TypeError("gradcheck: input " + std::to_string(i) + " is " + dtype_name(inputs[i].dtype()) +
                      "; expected float32 (gradcheck perturbs float32 values only). Pass fixed integer data "
                      "(class ids, indices) through fn's closure instead of inputs");
    if (inputs[i].requires_grad()) checked.push_back(i);
  }
  if (checked.empty())
    throw ValueError("gradcheck: none of the " + std::to_string(inputs.size()) +
                     " inputs requires grad, so there is nothing to check; call requires_grad_() on the inputs "
                     "whose gradients are to be checked");
  if (!grad_enabled())
    throw StateError("gradcheck: gradient mode is off on this thread (a NoGradGuard is alive), so no backward can "
                     "run; call gradcheck outside the guard");

  // Detached copies over the inputs' own memory: backward fills their grad(),
  // not the caller's, and works for non-leaf inputs too.
  std::vector<Tensor> work;
  work.reserve(inputs.size());
  for (const Tensor& x : inputs) {
    Tensor d = x.detach();
    if (x.requires_grad()) d.requires_grad_(true);
    work.push_back(d);
  }
  const std::span<const Tensor> args(work);

  auto check_output = [](const Tensor& y) {
    if (!y.defined())
      throw ValueError("gradcheck: fn returned an undefined tensor; return the float32 output to check");
    if (y.dtype() != DType::Float32)
      throw TypeError(std::string("gradcheck: fn returned a ") + dtype_name(y.dtype()) +
                      " tensor; expected float32 (gradients exist for float32 outputs only)");
  };

  // Analytic: one backward of loss = sum(y * w), i.e. y.backward(w).
  Shape out_shape;
  std::vector<float> w;
  std::vector<std::vector<float>> analytic(checked.size());
  {
    Tensor y = fn(args);
    check_output(y);
    out_shape = y.shape();
    std::mt19937_64 rng(options.seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    w.resize(size_t(y.numel()));
    for (float& v : w) v = dist(rng);
    if (y.requires_grad()) y.backward(tensor(std::span<const float>(w), out_shape).to(y.device()));
    for (size_t c = 0; c < checked.size(); ++c) {
      Tensor g = work[checked[c]].grad();
      analytic[c] = g.defined() ? g.to_vector() : std::vector<float>(size_t(work[checked[c]].numel()), 0.0f);
    }
  }

  // Inputs on a device are perturbed in host copies, uploaded before each
  // call of fn, and uploaded as they were when the check ends however it
  // ends.
  std::vector<std::vector<float>> host(checked.size());
  for (size_t c = 0; c < checked.size(); ++c)
    if (work[checked[c]].device() != Device::CPU) host[c] = work[checked[c]].to_vector();
  auto upload = [&] {
    for (size_t c = 0; c < checked.size(); ++c)
      if (!host[c].empty()) {
        tensorgrad::Tensor memory = work[checked[c]].data();  // shares the input's storage
        memory.copy_from_host(host[c].data(), host[c].size() * sizeof(float));
      }
  };
  struct Reupload {
    const std::function<void()> f;
    ~Reupload() {
      try {
        f();
      } catch (...) {  // a lost device: its memory is gone, and the caller hears of it at the next use
      }
    }
  } reupload{upload};

  auto loss = [&]() -> double {
    upload();
    NoGradGuard no_grad;
    Tensor y = fn(args);
    check_output(y);
    if (y.shape() != out_shape)
      throw ValueError("gradcheck: fn's output changed shape between calls (" + out_shape.str() + ", then " +
                       y.shape().str() + "); fn must return the same shape for inputs of the same shapes");
    const std::vector<float> v = y.to_vector();
    double s = 0;
    for (size_t k = 0; k < v.size(); ++k) s += double(v[k]) * double(w[k]);
    return s;
  };

  std::vector<GradcheckBuffer> buffers;
  buffers.reserve(checked.size());
  for (size_t c = 0; c < checked.size(); ++c) {
    const Tensor& x = work[checked[c]];
    const std::span<float> values = host[c].empty() ? std::span<float>(x.data().data<float>(), size_t(x.numel()))
                                                     : std::span<float>(host[c]);
    buffers.push_back({values, analytic[c],
                       "input " + std::to_string(checked[c]) + " " + x.shape().str()});
  }
  GradcheckResult r = gradcheck_buffers(loss, buffers, options);
  r.input = checked[r.input];
  r.checked_inputs = std::move(checked);
  return r;
}

}  // namespace tensorgrad::ag
