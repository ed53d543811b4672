#include "tensorgrad/ag/nn/recurrent.h"

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "ag/autograd.h"
#include "tensorgrad/ag/functional.h"
#include "tensorgrad/core/error.h"

namespace tensorgrad::ag::nn {

namespace {

// U(-1/sqrt(hidden), 1/sqrt(hidden)), torch's RNN initialisation of every weight and bias.
Tensor rnn_init(const Shape& shape, int64_t hidden_size) {
  const float bound = 1.0f / std::sqrt(float(hidden_size));
  NoGradGuard no_grad;
  return (rand(shape) * (2.0f * bound) - bound).detach();
}

void check_sizes(const char* type, int64_t input_size, int64_t hidden_size, int64_t num_layers) {
  if (input_size < 1 || hidden_size < 1 || num_layers < 1)
    throw ValueError(std::string(type) + ": input_size, hidden_size and num_layers must be >= 1; got " +
                     std::to_string(input_size) + ", " + std::to_string(hidden_size) + " and " +
                     std::to_string(num_layers));
}

// Registers layer k's parameters in torch's order and appends their handles.
void make_layer(const std::function<Tensor(const std::string&, Tensor)>& reg, int64_t k, int64_t in,
                int64_t hidden, int64_t gates, bool bias, std::vector<Tensor>& w_ih, std::vector<Tensor>& w_hh,
                std::vector<Tensor>& b_ih, std::vector<Tensor>& b_hh) {
  const std::string s = "_l" + std::to_string(k);
  w_ih.push_back(reg("weight_ih" + s, rnn_init(Shape{gates * hidden, in}, hidden)));
  w_hh.push_back(reg("weight_hh" + s, rnn_init(Shape{gates * hidden, hidden}, hidden)));
  if (bias) {
    b_ih.push_back(reg("bias_ih" + s, rnn_init(Shape{gates * hidden}, hidden)));
    b_hh.push_back(reg("bias_hh" + s, rnn_init(Shape{gates * hidden}, hidden)));
  } else {
    b_ih.emplace_back();
    b_hh.emplace_back();
  }
}

// Checks x and returns it batch-first {N, T, in}.
Tensor batch_first_input(const char* type, const Tensor& x, int64_t input_size, bool batch_first) {
  if (!x.defined()) throw StateError(std::string(type) + ": the input is undefined");
  if (x.dim() != 3 || x.size(-1) != input_size)
    throw ShapeError(std::string(type) + ": expects an input {" + (batch_first ? "N, T, " : "T, N, ") +
                     std::to_string(input_size) + "} (input_size " + std::to_string(input_size) + "); got " +
                     x.shape().str());
  if (x.size(0) < 1 || x.size(1) < 1)
    throw ShapeError(std::string(type) + ": expects at least one sequence and one time step; got " + x.shape().str());
  return batch_first ? x : transpose(x, 0, 1);
}

void check_state(const char* type, const char* name, const Tensor& s, int64_t layers, int64_t n, int64_t hidden) {
  if (s.shape() != Shape{layers, n, hidden})
    throw ShapeError(std::string(type) + ": expects " + name + " {num_layers, N, hidden_size} = {" +
                     std::to_string(layers) + ", " + std::to_string(n) + ", " + std::to_string(hidden) + "}; got " +
                     s.shape().str());
}

// Layer k's initial state {N, H} from s {num_layers, N, H} (undefined: zeros, the op's default).
Tensor initial_state(const Tensor& s, int64_t k, int64_t n, int64_t hidden) {
  return s.defined() ? reshape(narrow(s, 0, k, 1), Shape{n, hidden}) : Tensor();
}

// x W_ih^T + b_ih + b_hh for every step at once, {N, T, G}: the fused ops'
// input projection (their recurrent product h U has no bias of its own).
Tensor input_projection(const Tensor& x, const Tensor& w_ih, const Tensor& b_ih, const Tensor& b_hh) {
  const Tensor xw = linear(x, w_ih, b_ih);
  return b_hh.defined() ? xw + b_hh : xw;
}

// The fused op's hidden states {N, T, H} (the first H columns of y), and
// column block `block` of its last step as {1, N, H} (h_n: 0; the LSTM's c_n: 1).
Tensor hidden_states(const Tensor& y, int64_t hidden) { return narrow(y, 2, 0, hidden); }
Tensor last_step(const Tensor& y, int64_t block, int64_t hidden) {
  const Tensor last = narrow(narrow(y, 1, y.size(1) - 1, 1), 2, block * hidden, hidden);
  return reshape(last, Shape{1, y.size(0), hidden});
}

// torch's GRU gate blocks r, z, n (along the first axis) in the fused op's order z, r, n.
Tensor zrn(const Tensor& w, int64_t hidden) {
  if (!w.defined()) return w;
  return cat({narrow(w, 0, hidden, hidden), narrow(w, 0, 0, hidden), narrow(w, 0, 2 * hidden, hidden)}, 0);
}

}  // namespace

// ---- RNNBase ----

RNNBase::RNNBase(const char* type, int64_t gates, int64_t input_size, int64_t hidden_size, int64_t num_layers,
                 bool bias, bool batch_first)
    : input_size_(input_size), hidden_size_(hidden_size), num_layers_(num_layers), bias_(bias),
      batch_first_(batch_first) {
  check_sizes(type, input_size, hidden_size, num_layers);
  auto reg = [this](const std::string& n, Tensor t) { return register_parameter(n, std::move(t)); };
  for (int64_t k = 0; k < num_layers; ++k)
    make_layer(reg, k, k == 0 ? input_size : hidden_size, hidden_size, gates, bias, w_ih_, w_hh_, b_ih_, b_hh_);
}

ModuleConfig RNNBase::config() const {
  ModuleConfig c(type());
  c.set("input_size", input_size_);
  c.set("hidden_size", hidden_size_);
  c.set("num_layers", num_layers_);
  c.set("bias", bias_);
  c.set("batch_first", batch_first_);
  return c;
}

// ---- LSTM ----

LSTM::LSTM(int64_t input_size, int64_t hidden_size, int64_t num_layers, bool bias, bool batch_first)
    : RNNBase("LSTM", 4, input_size, hidden_size, num_layers, bias, batch_first) {}

LSTMOutput LSTM::forward(const Tensor& input, const Tensor& h0, const Tensor& c0) {
  Tensor x = batch_first_input("LSTM", input, input_size_, batch_first_);
  const int64_t n = x.size(0), hs = hidden_size_;
  if (h0.defined() != c0.defined())
    throw ValueError("LSTM: give both initial states h0 and c0, or neither; got only " +
                     std::string(h0.defined() ? "h0" : "c0"));
  if (h0.defined()) {
    check_state("LSTM", "h0", h0, num_layers_, n, hs);
    check_state("LSTM", "c0", c0, num_layers_, n, hs);
  }
  std::vector<Tensor> h_last, c_last;
  for (int64_t k = 0; k < num_layers_; ++k) {
    const size_t i = size_t(k);
    // One fused op over every step (the graph layers' LstmSequence), torch's
    // gate order i, f, g, o being the op's.
    std::vector<Tensor> in{input_projection(x, w_ih_[i], b_ih_[i], b_hh_[i]), transpose(w_hh_[i], 0, 1)};
    if (h0.defined()) {
      in.push_back(initial_state(h0, k, n, hs));
      in.push_back(initial_state(c0, k, n, hs));
    }
    const Tensor y = ag::detail::apply(OpKind::LstmSequence, in);  // {N, T, 6H}: [h | c | gates]
    x = hidden_states(y, hs);
    h_last.push_back(last_step(y, 0, hs));
    c_last.push_back(last_step(y, 1, hs));
  }
  return {batch_first_ ? x : transpose(x, 0, 1), cat(h_last, 0), cat(c_last, 0)};
}

Tensor LSTM::forward(const Tensor& x) { return forward(x, Tensor(), Tensor()).output; }

// ---- GRU ----

GRU::GRU(int64_t input_size, int64_t hidden_size, int64_t num_layers, bool bias, bool batch_first)
    : RNNBase("GRU", 3, input_size, hidden_size, num_layers, bias, batch_first) {}

GRUOutput GRU::forward(const Tensor& input, const Tensor& h0) {
  Tensor x = batch_first_input("GRU", input, input_size_, batch_first_);
  const int64_t n = x.size(0), hs = hidden_size_;
  if (h0.defined()) check_state("GRU", "h0", h0, num_layers_, n, hs);
  std::vector<Tensor> h_last;
  for (int64_t k = 0; k < num_layers_; ++k) {
    const size_t i = size_t(k);
    // One fused op over every step (the graph layers' GruSequence, reset_after
    // as torch), torch's gate blocks reordered to the op's z, r, n; b_hh is
    // the op's recurrent bias, inside r * (W_hn h + b_hn).
    const Tensor rb = b_hh_[i].defined() ? zrn(b_hh_[i], hs) : zeros(Shape{3 * hs});
    std::vector<Tensor> in{input_projection(x, zrn(w_ih_[i], hs), zrn(b_ih_[i], hs), Tensor()),
                           transpose(zrn(w_hh_[i], hs), 0, 1), rb};
    if (h0.defined()) in.push_back(initial_state(h0, k, n, hs));
    const Tensor y = ag::detail::apply(OpKind::GruSequence, in);  // {N, T, 5H}: [h | z | r | n | hn]
    x = hidden_states(y, hs);
    h_last.push_back(last_step(y, 0, hs));
  }
  return {batch_first_ ? x : transpose(x, 0, 1), cat(h_last, 0)};
}

Tensor GRU::forward(const Tensor& x) { return forward(x, Tensor()).output; }

}  // namespace tensorgrad::ag::nn
