#pragma once
// Gradient checking against central finite differences, as
// torch.autograd.gradcheck, but in float32 (PyTorch checks in float64) with
// the method of tests/support/gradient_check.h (its header comment gives the
// precision argument):
//  * the output y of the checked function is reduced to a scalar
//    loss = sum(y * w) with a fixed random w, uniform in [-1, 1] (from
//    `seed`), so every output element enters with its own weight and a wrong
//    sign or a swapped element cannot cancel;
//  * numeric gradient, per element: num = (L(x + h) - L(x - h)) / ((x + h) - (x - h)),
//    the denominator being the step float32 actually represents;
//  * an element passes when |num - ana| <= atol + rtol * |num|;
//  * every checked input's gradient must exceed min_grad in magnitude
//    somewhere, else the check fails as vacuous (0 == 0 proves nothing).
//
// Two levels: `gradcheck` checks an eager function of ag::Tensors (what a
// user calls); `gradcheck_buffers` is the numeric core under it, comparing
// given analytic gradients with central differences of a caller-supplied
// loss over caller-owned float buffers (the graph-path harness of
// tests/support/gradient_check.h uses it directly, so both paths share one code).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "tensorgrad/ag/tensor.h"

namespace tensorgrad::ag {

/// Settings of a gradient check (torch.autograd.gradcheck's eps, atol, rtol,
/// raise_exception; min_grad and seed are tensorgrad's). The defaults are
/// tuned for float32 inputs and gradients of magnitude O(1) and a loss
/// sum(y * w) of magnitude <= ~10 (tests/support/gradient_check.h explains why).
struct GradcheckOptions {
  /// Finite-difference step h, in the inputs' units. Inputs near a kink
  /// (relu at 0, max-pool ties, l1 at equality) must stay > h away from it.
  float eps = 1e-2f;
  /// Per element: |numeric - analytic| <= atol + rtol * |numeric|.
  ///@{
  double atol = 1e-3, rtol = 1e-2;
  ///@}
  /// Every checked input's gradient (numeric or analytic) must reach this
  /// magnitude in some element, else the check is vacuous and fails.
  double min_grad = 1e-2;
  /// Seed of the projection weights w (gradcheck only; gradcheck_buffers
  /// takes the loss as given).
  uint64_t seed = 0;
  /// Throw ValueError with the result's message on failure, instead of
  /// returning ok == false. (PyTorch's default is to raise; here the default
  /// returns, so tests can assert on the result.)
  bool raise_exception = false;
};

/// What a gradient check found, per checked input.
struct GradcheckInputReport {
  /// Numeric gradient d(loss)/d(input), flat, one value per element.
  std::vector<float> numeric;
  /// Largest |numeric| and |analytic| over the input's elements.
  ///@{
  double max_abs_numeric = 0, max_abs_analytic = 0;
  ///@}
  /// The element with the largest error / tolerance ratio (-1 for an empty
  /// input) and that ratio (> 1: the element fails; infinite when a value is
  /// not finite).
  ///@{
  int64_t worst_index = -1;
  double worst_error = 0;
  ///@}
  bool mismatch = false;  ///< some element fails the tolerance
  bool vacuous = false;   ///< max(max_abs_numeric, max_abs_analytic) < min_grad
};

/// The outcome of gradcheck / gradcheck_buffers.
struct GradcheckResult {
  /// True when every element of every checked input is within tolerance and
  /// no checked input is vacuous.
  bool ok = true;
  /// Empty when ok; else one line per failing input saying what failed: the
  /// worst element (input, flat index, numeric, analytic, error / tolerance)
  /// or that the gradient is ~0 everywhere (the output does not depend on
  /// that input), and what to do.
  std::string message;
  /// The worst element over every checked input (largest error relative to
  /// its tolerance): `input` counts the checked inputs as given (for
  /// gradcheck: the position in `inputs`, including inputs held fixed),
  /// `index` is the flat row-major element index (-1 when nothing was
  /// checked), `error` = |numeric - analytic| / (atol + rtol * |numeric|),
  /// so the element fails when error > 1.
  ///@{
  size_t input = 0;
  int64_t index = -1;
  double analytic = 0, numeric = 0, error = 0;
  ///@}
  /// The smallest, over checked inputs, of the input's largest |gradient|
  /// (numeric or analytic): below min_grad the check is vacuous.
  double max_abs_grad = 0;
  /// One report per checked input, in order (gradcheck: only the inputs
  /// that require grad; `checked_inputs` gives their positions).
  ///@{
  std::vector<GradcheckInputReport> inputs;
  std::vector<size_t> checked_inputs;
  ///@}
};

/// One buffer gradcheck_buffers perturbs: `values` is the memory the loss
/// reads (changed in place and restored bit for bit), `analytic` the
/// gradient to check, of the same length; `label` names the buffer in
/// messages ("input 0 {3, 4}", "parameter 'w' {4, 5}").
struct GradcheckBuffer {
  std::span<float> values;          ///< the memory the loss reads
  std::span<const float> analytic;  ///< the gradient to check, values.size() long
  std::string label;                ///< the buffer's name in messages
};

/// The numeric core of gradcheck: for each buffer and each element x of it,
/// sets x to x + eps and to x - eps, calls `loss` after each, restores x,
/// and compares (L+ - L-) / ((x + eps) - (x - eps)) with the analytic value
/// within atol + rtol * |numeric|; then checks min_grad. Uses eps, atol,
/// rtol, min_grad and raise_exception from `options` (not seed). `loss` must
/// be a deterministic function of the buffers' contents. Buffers are
/// restored even when `loss` throws (the exception then propagates).
/// Throws ShapeError when a buffer's analytic gradient differs in length
/// from its values, ValueError when raise_exception is set and the check
/// fails (message as GradcheckResult::message).
GradcheckResult gradcheck_buffers(const std::function<double()>& loss, std::span<const GradcheckBuffer> buffers,
                                  const GradcheckOptions& options = {});

/// Checks the gradients the eager autograd computes for `fn` against central
/// finite differences, as torch.autograd.gradcheck (in float32; see the top
/// of this header for the method).
///
/// `fn` maps the inputs (given in the order of `inputs`) to one float32
/// tensor of any shape, which must be the same on every call; it must be
/// deterministic (no fresh randomness per call) and must not keep the
/// tensors it is given. Every input in `inputs` must be float32; those that
/// require grad are checked, the others are held fixed (integer data such
/// as class ids goes into fn's closure). Inputs may be leaves or results of
/// recorded ops.
///
/// The projection sum(y * w) is summed in double on the host from fn's
/// float32 output (the analytic side is y.backward(w)), so the reduction adds
/// no float32 rounding of its own to the differences.
///
/// The analytic gradient comes from one backward through detached copies
/// that share the inputs' memory, so the inputs' own grad() and history are
/// left untouched. The numeric one perturbs each element of the inputs' own
/// memory under a NoGradGuard and restores it bit for bit (not counted by
/// the version counter: a history the caller recorded through the inputs
/// stays usable). Cost: 2 * (checked elements) + 1 forward calls.
///
/// Throws StateError for an undefined input, TypeError for an input or an
/// output that is not float32, ValueError when no input requires grad, when
/// fn's output changes shape between calls, or (with raise_exception) when
/// the check fails. Exceptions from fn propagate (inputs restored).
GradcheckResult gradcheck(const std::function<Tensor(std::span<const Tensor>)>& fn, std::span<const Tensor> inputs,
                          GradcheckOptions options = {});
/// gradcheck on a brace list of inputs.
GradcheckResult gradcheck(const std::function<Tensor(std::span<const Tensor>)>& fn,
                          std::initializer_list<Tensor> inputs, GradcheckOptions options = {});

}  // namespace tensorgrad::ag
