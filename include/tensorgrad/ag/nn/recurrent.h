#pragma once
// Recurrent modules of the eager API, as torch.nn.LSTM and torch.nn.GRU: the
// same parameter names, layouts, gate orders and default initialisation, so
// a PyTorch state dict loads by name. Each layer runs as one linear for the
// input projection of every step at once, then the fused recurrent op the
// Keras-style layers use (LstmSequence, GruSequence: per step one small GEMM
// and one pass over the gates), with the initial states as its inputs;
// autograd comes from those ops' gradient rules.
#include <cstdint>
#include <vector>

#include "tensorgrad/ag/nn/module.h"
#include "tensorgrad/ag/tensor.h"

namespace tensorgrad::ag::nn {

/// What LSTM::forward returns: output {N, T, H} ({T, N, H} without
/// batch_first) and the final states h_n, c_n, each {num_layers, N, H}.
struct LSTMOutput {
  /// output: the last layer's h at every step; h_n and c_n: every layer's
  /// last hidden and cell state.
  ///@{
  Tensor output, h_n, c_n;
  ///@}
};

/// What LSTM and GRU share (torch.nn.RNNBase): the sizes, the per-layer
/// parameters (gates stacked along the first axis) and the configuration.
class RNNBase : public Module {
 public:
  /// input_size, hidden_size, num_layers, bias, batch_first.
  ModuleConfig config() const override;
  /// The constructor's sizes: features per input step, H, and stacked layers.
  ///@{
  int64_t input_size() const { return input_size_; }
  int64_t hidden_size() const { return hidden_size_; }
  int64_t num_layers() const { return num_layers_; }
  ///@}

 protected:
  /// Registers weight_ih_l{k}, weight_hh_l{k} (and the biases) for `gates`
  /// gate blocks per layer, U(-1/sqrt(H), 1/sqrt(H)). ValueError for a size < 1.
  RNNBase(const char* type, int64_t gates, int64_t input_size, int64_t hidden_size, int64_t num_layers, bool bias,
          bool batch_first);
  /// The sizes, as their accessors return them.
  ///@{
  int64_t input_size_, hidden_size_, num_layers_;
  ///@}
  /// Whether there are biases; whether inputs and outputs are {N, T, ...}
  /// rather than {T, N, ...}.
  ///@{
  bool bias_, batch_first_;
  ///@}
  /// The registered parameters, per layer; biases undefined without bias.
  ///@{
  std::vector<Tensor> w_ih_, w_hh_, b_ih_, b_hh_;
  ///@}
};

/// A multi-layer long short-term memory, as torch.nn.LSTM (without its
/// dropout, bidirectional and proj_size options). Per layer k (input size
/// input_size for k = 0, hidden_size above):
///   weight_ih_l{k} {4H, in}, weight_hh_l{k} {4H, H}, and with bias
///   bias_ih_l{k}, bias_hh_l{k} {4H},
/// gate blocks in PyTorch's order i, f, g, o:
///   i = s(W_ii x + b_ii + W_hi h + b_hi), f = s(...), g = tanh(...), o = s(...),
///   c' = f * c + i * g, h' = o * tanh(c').
/// Every parameter starts U(-1/sqrt(H), 1/sqrt(H)) from ag::default_generator()
/// (PyTorch's default). State-dict order: per layer weight_ih, weight_hh,
/// bias_ih, bias_hh (torch's). ValueError for a size < 1.
class LSTM : public RNNBase {
 public:
  /// torch.nn.LSTM's arguments, but batch_first by default (tensorgrad's
  /// sequences are batch first). ValueError for a size < 1.
  LSTM(int64_t input_size, int64_t hidden_size, int64_t num_layers = 1, bool bias = true, bool batch_first = true);
  const char* type() const override { return "LSTM"; }
  /// x {N, T, input_size} ({T, N, input_size} without batch_first), and
  /// optionally the initial states h0, c0, each {num_layers, N, H} (both or
  /// neither; zeros when not given). Returns output (the last layer's h at
  /// every step), h_n and c_n (every layer's last state). Throws ShapeError
  /// for an input that is not 3-D or whose last size is not input_size, or
  /// for initial states of another shape; ValueError when only one of h0, c0
  /// is given.
  LSTMOutput forward(const Tensor& x, const Tensor& h0, const Tensor& c0);
  /// The output sequence only, from zero initial states (forward(x, {}, {}).output).
  Tensor forward(const Tensor& x) override;
};

/// What GRU::forward returns: output {N, T, H} ({T, N, H} without
/// batch_first) and the final state h_n {num_layers, N, H}.
struct GRUOutput {
  /// output: the last layer's h at every step; h_n: every layer's last
  /// hidden state.
  ///@{
  Tensor output, h_n;
  ///@}
};

/// A multi-layer gated recurrent unit, as torch.nn.GRU (without dropout and
/// bidirectional). Per layer k: weight_ih_l{k} {3H, in}, weight_hh_l{k}
/// {3H, H}, and with bias bias_ih_l{k}, bias_hh_l{k} {3H}, gate blocks in
/// PyTorch's order r, z, n:
///   r = s(W_ir x + b_ir + W_hr h + b_hr), z = s(W_iz x + b_iz + W_hz h + b_hz),
///   n = tanh(W_in x + b_in + r * (W_hn h + b_hn)), h' = (1 - z) * n + z * h.
/// Initialisation, state-dict order and errors as LSTM.
class GRU : public RNNBase {
 public:
  /// torch.nn.GRU's arguments, but batch_first by default, as LSTM's.
  /// ValueError for a size < 1.
  GRU(int64_t input_size, int64_t hidden_size, int64_t num_layers = 1, bool bias = true, bool batch_first = true);
  const char* type() const override { return "GRU"; }
  /// x {N, T, input_size} ({T, N, input_size} without batch_first), and
  /// optionally h0 {num_layers, N, H} (zeros when undefined). Returns the
  /// output sequence and h_n. Throws ShapeError as LSTM::forward.
  GRUOutput forward(const Tensor& x, const Tensor& h0);
  /// The output sequence only, from a zero initial state (forward(x, {}).output).
  Tensor forward(const Tensor& x) override;
};

}  // namespace tensorgrad::ag::nn
