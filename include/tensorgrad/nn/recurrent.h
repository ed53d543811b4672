#pragma once
// Embedding and recurrent layers (keras.layers). Sequences are
// {steps, features}, batch first.
#include "tensorgrad/nn/layers.h"

namespace tensorgrad::nn {

/// Token embedding (keras.layers.Embedding): ids {steps} -> vectors
/// {steps, output_dim}; embeddings {input_dim, output_dim} drawn from
/// U(-0.05, 0.05) as Keras. Ids come as int32 (read in place), or float32
/// holding whole numbers (converted to int32 once per batch), and must be the
/// model's input: Embedding is the first layer, and the model's input dtype
/// is then int32. A fractional id throws ValueError, one outside
/// [0, input_dim) IndexError, both naming the id and the vocabulary size.
/// With mask_zero (Keras'), id 0 is padding: the output carries a mask
/// {steps} (0 at padding) that the layers after it pass on or read
/// (Layer::supports_masking): attention skips padded keys and the loss skips
/// padded positions.
class Embedding : public Layer {
 public:
  LayerConfig config() const override;
  /// Throws ValueError for input_dim or output_dim < 1.
  Embedding(int64_t input_dim, int64_t output_dim, bool mask_zero = false);
  const char* type() const override { return "Embedding"; }
  /// Throws ShapeError unless the input is {steps}.
  Shape build(const Shape& input_shape) override;
  Value call(Builder& b, Value x, const CallOptions& options) override;
  void validate_input(const Tensor& x) const override;
  bool takes_token_ids() const override { return true; }
  /// With mask_zero: the output carries the padding mask.
  bool produces_mask(const std::vector<bool>&) const override { return mask_zero_; }
  /// 0 where the id is 0, 1 elsewhere.
  Value compute_mask(Builder& b, std::span<const Value> inputs, std::span<const Value> masks) override;
  std::shared_ptr<Layer> clone() const override { return clone_layer(*this); }

 private:
  int64_t input_dim_, output_dim_;
  bool mask_zero_;
  WeightId embeddings_;
};

/// What LSTM and GRU share: `units`, return_sequences, and the weights
/// kernel {features, gates*units} (Glorot uniform), recurrent_kernel
/// {units, gates*units} (orthogonal) and bias (zeros). Initial states are zeros.
class RecurrentLayer : public Layer {
 public:
  LayerConfig config() const override;
  /// Throws ShapeError unless the input is {steps, features}.
  Shape build(const Shape& input_shape) override;

 protected:
  /// Throws ValueError for units < 1. `bias` makes the bias's first value
  /// ({gates*units} or {2, gates*units}).
  RecurrentLayer(const char* prefix, int64_t units, bool return_sequences, int64_t gates, Shape bias_shape,
                 Initializer bias = initializers::zeros());
  /// The three weights as values of one Builder.
  struct Bound {
    /// kernel {features, gates*units}, recurrent_kernel {units,
    /// gates*units}, bias of bias_shape_.
    ///@{
    Value kernel, recurrent_kernel, bias;
    ///@}
  };
  /// The weights bound into `b`; throws StateError before build().
  Bound bind(Builder& b) const;

  int64_t units_;                 ///< the state's width
  bool return_sequences_;         ///< output every step, not only the last
  int64_t gates_;                 ///< gate blocks: 4 (LSTM) or 3 (GRU)
  Shape bias_shape_;              ///< {gates*units} or {2, gates*units}
  Initializer bias_initializer_;  ///< makes the bias's first value
  /// The weights' handles.
  ///@{
  WeightId kernel_, recurrent_kernel_, bias_;
  ///@}
};

/// Long short-term memory (keras.layers.LSTM, Hochreiter & Schmidhuber
/// 1997): gates in the order i, f, c, o; tanh activation, sigmoid recurrent
/// activation. kernel {features, 4*units}, recurrent_kernel {units, 4*units},
/// bias {4*units} with the forget-gate quarter set to one (unit_forget_bias).
/// Output {units} (last step) or {steps, units} with return_sequences.
class LSTM : public RecurrentLayer {
 public:
  /// Throws ValueError for units < 1.
  explicit LSTM(int64_t units, bool return_sequences = false);
  const char* type() const override { return "LSTM"; }
  Value call(Builder& b, Value x, const CallOptions& options) override;
  std::shared_ptr<Layer> clone() const override { return clone_layer(*this); }
};

/// Gated recurrent unit (keras.layers.GRU with reset_after = true, the cuDNN
/// and PyTorch formula, Cho et al. 2014): gates z, r, h;
///   z = sigmoid(x Wz + bz + h Uz + rz), r = sigmoid(x Wr + br + h Ur + rr),
///   n = tanh(x Wh + bh + r * (h Uh + rh)), h' = z * h + (1 - z) * n.
/// kernel {features, 3*units}, recurrent_kernel {units, 3*units}, bias
/// {2, 3*units} (row 0 input bias, row 1 recurrent bias). Output as LSTM.
class GRU : public RecurrentLayer {
 public:
  /// Throws ValueError for units < 1.
  explicit GRU(int64_t units, bool return_sequences = false);
  const char* type() const override { return "GRU"; }
  Value call(Builder& b, Value x, const CallOptions& options) override;
  std::shared_ptr<Layer> clone() const override { return clone_layer(*this); }
};

}  // namespace tensorgrad::nn
