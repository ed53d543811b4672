#include "tensorgrad/nn/recurrent.h"

#include <cmath>
#include <cstdio>
#include <span>
#include <utility>
#include <vector>

#include "core/host_copy.h"
#include "nn/token_ids.h"
#include "tensorgrad/core/error.h"

namespace tensorgrad::nn {

namespace {
Shape expect_sequence(const std::string& layer, const Shape& s) {
  if (s.rank() != 2)
    throw ShapeError(layer + " takes sequences {steps, features}; got input_shape " + s.str() +
                     (s.rank() == 1 ? " (add an Embedding for token ids, or give each step a feature axis)" : ""));
  if (s[0] < 1 || s[1] < 1)
    throw ShapeError(layer + " takes sequences of at least one step of at least one feature; got input_shape " +
                     s.str());
  return s;
}

// x {B, T, F} -> x W + bias as {B, T, G}: one GEMM for every step at once.
Value project_inputs(Builder& b, Value x, Value kernel, Value bias) {
  const Shape s = b.shape(x);
  const int64_t g = b.shape(kernel)[1];
  Value xw = b.matmul(b.reshape(x, Shape{s[0] * s[1], s[2]}), kernel);
  return b.reshape(b.add(xw, bias), Shape{s[0], s[1], g});
}

// The hidden states {B, T, H} (the first H columns of a fused sequence op's
// output {B, T, kept*H}), or the last step's {B, H}.
Value hidden_states(Builder& b, Value y, int64_t units, bool return_sequences) {
  const Shape s = b.shape(y);
  if (return_sequences) return b.slice(y, 2, 0, units);
  return b.reshape(b.slice(b.slice(y, 1, s[1] - 1, 1), 2, 0, units), Shape{s[0], units});
}
}  // namespace

Embedding::Embedding(int64_t input_dim, int64_t output_dim, bool mask_zero)
    : Layer("embedding"), input_dim_(input_dim), output_dim_(output_dim), mask_zero_(mask_zero) {
  if (input_dim < 1 || output_dim < 1)
    throw ValueError("Embedding: input_dim and output_dim must be >= 1; got " + std::to_string(input_dim) + " and " +
                     std::to_string(output_dim));
}

Shape Embedding::build(const Shape& input_shape) {
  if (input_shape.rank() != 1)
    throw ShapeError(name() + " takes a sequence of token ids {steps}; got input_shape " + input_shape.str());
  embeddings_ = add_weight({.name = "embeddings",
                            .shape = {input_dim_, output_dim_},
                            .initializer = initializers::random_uniform(-0.05f, 0.05f)});
  return Shape{input_shape[0], output_dim_};
}

void Embedding::validate_input(const Tensor& x) const { detail::check_token_ids(name(), x, input_dim_); }

namespace detail {

void check_token_ids(const std::string& layer, const Tensor& x, int64_t vocabulary) {
  const bool ints = x.dtype() == DType::Int32;
  const int64_t cols = std::max<int64_t>(x.shape().row_size(), 1);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = ints ? double(x.data<int32_t>()[i]) : double(x.data<float>()[i]);
    if (v >= 0.0 && v < double(vocabulary) && v == std::floor(v)) continue;
    const std::string where = " at row " + std::to_string(i / cols) + ", step " + std::to_string(i % cols);
    if (v != std::floor(v))
      throw ValueError(layer + ": token ids must be whole numbers in [0, " + std::to_string(vocabulary) +
                       ") (the vocabulary size is " + std::to_string(vocabulary) + ");" + where + " holds " +
                       std::to_string(v));
    char id[32];
    std::snprintf(id, sizeof id, std::fabs(v) < 1e15 ? "%.0f" : "%g", v);
    throw IndexError(layer + ": token id " + id + where + " is outside the vocabulary [0, " +
                     std::to_string(vocabulary) + "); raise input_dim or map the id");
  }
}

}  // namespace detail

Value Embedding::call(Builder& b, Value x, const CallOptions&) {
  const Value ids = b.dtype(x) == DType::Int32 ? x : b.apply(OpKind::ToIndex, {x});
  return b.apply(OpKind::Gather, {bind_weight(b, embeddings_), ids});
}

Value Embedding::compute_mask(Builder& b, std::span<const Value> inputs, std::span<const Value>) {
  const Value ids = b.dtype(inputs[0]) == DType::Int32 ? inputs[0] : b.apply(OpKind::ToIndex, {inputs[0]});
  return detail::padding_mask(b, ids, input_dim_);
}

namespace detail {

Value padding_mask(Builder& b, Value ids, int64_t vocabulary) {
  Tensor table = Tensor::full(Shape{vocabulary, 1}, 1.0f);
  table.data<float>()[0] = 0.0f;
  return b.reshape(b.apply(OpKind::Gather, {b.parameter(table, "padding_mask_table", false), ids}), b.shape(ids));
}

}  // namespace detail

RecurrentLayer::RecurrentLayer(const char* prefix, int64_t units, bool return_sequences, int64_t gates,
                               Shape bias_shape, Initializer bias)
    : Layer(prefix),
      units_(units),
      return_sequences_(return_sequences),
      gates_(gates),
      bias_shape_(bias_shape),
      bias_initializer_(std::move(bias)) {
  if (units < 1) throw ValueError(name() + ": units must be >= 1; got " + std::to_string(units));
}

Shape RecurrentLayer::build(const Shape& input_shape) {
  const Shape s = expect_sequence(name(), input_shape);
  kernel_ =
      add_weight({.name = "kernel", .shape = {s[1], gates_ * units_}, .initializer = initializers::glorot_uniform()});
  recurrent_kernel_ = add_weight(
      {.name = "recurrent_kernel", .shape = {units_, gates_ * units_}, .initializer = initializers::orthogonal()});
  bias_ = add_weight({.name = "bias", .shape = bias_shape_, .initializer = bias_initializer_});
  return return_sequences_ ? Shape{s[0], units_} : Shape{units_};
}

RecurrentLayer::Bound RecurrentLayer::bind(Builder& b) const {
  const Value kernel = bind_weight(b, kernel_);  // one statement each: bound in declaration order
  const Value recurrent_kernel = bind_weight(b, recurrent_kernel_);
  return {kernel, recurrent_kernel, bind_weight(b, bias_)};
}

namespace {
// Keras' unit_forget_bias: zeros, the forget gate's quarter (units..2 units) ones.
Initializer unit_forget_bias(int64_t units) {
  return [units](const Shape& shape) {
    Tensor bias = Tensor::zeros(shape);
    const std::vector<float> ones(size_t(units), 1.0f);  // one copy from the host
    tensorgrad::detail::write_elements(bias, units, std::span<const float>(ones));
    return bias;
  };
}
}  // namespace

LSTM::LSTM(int64_t units, bool return_sequences)
    : RecurrentLayer("lstm", units, return_sequences, 4, Shape{4 * units}, unit_forget_bias(units)) {}

// One fused op for every step (LstmSequence: the recurrent GEMM and the
// gates of a step in one pass), after one GEMM for every step's input.
Value LSTM::call(Builder& b, Value x, const CallOptions&) {
  const Bound w = bind(b);
  Value y = b.apply(OpKind::LstmSequence, {project_inputs(b, x, w.kernel, w.bias), w.recurrent_kernel});
  return hidden_states(b, y, units_, return_sequences_);
}

GRU::GRU(int64_t units, bool return_sequences)
    : RecurrentLayer("gru", units, return_sequences, 3, Shape{2, 3 * units}) {}

Value GRU::call(Builder& b, Value x, const CallOptions&) {
  const Bound w = bind(b);
  const int64_t u = units_;
  Value input_bias = b.reshape(b.slice(w.bias, 0, 0, 1), Shape{3 * u});
  Value recurrent_bias = b.reshape(b.slice(w.bias, 0, 1, 1), Shape{3 * u});
  Value y =
      b.apply(OpKind::GruSequence, {project_inputs(b, x, w.kernel, input_bias), w.recurrent_kernel, recurrent_bias});
  return hidden_states(b, y, u, return_sequences_);
}

LayerConfig Embedding::config() const {
  return LayerConfig(type()).set("input_dim", input_dim_).set("output_dim", output_dim_).set("mask_zero", mask_zero_);
}

LayerConfig RecurrentLayer::config() const {
  return LayerConfig(type()).set("units", units_).set("return_sequences", return_sequences_);
}

}  // namespace tensorgrad::nn
