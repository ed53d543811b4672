#include "tensorgrad/ag/eager_builder.h"

#include <string>

#include "ag/autograd.h"
#include "tensorgrad/core/error.h"
#include "tensorgrad/ops/gradients.h"

namespace tensorgrad::ag {

Value EagerBuilder::input(const Tensor& tensor) {
  if (!tensor.defined()) throw StateError("EagerBuilder::input: the tensor is undefined");
  values_.push_back(tensor);
  return Value{int32_t(values_.size() - 1)};
}

const Tensor& EagerBuilder::tensor(Value v) const {
  if (v.id < 0 || size_t(v.id) >= values_.size())
    throw IndexError("value " + std::to_string(v.id) + " is not a value of this EagerBuilder (" +
                     std::to_string(values_.size()) + " values)");
  return values_[size_t(v.id)];
}

Value EagerBuilder::apply(OpKind op, std::span<const Value> inputs, const OpAttrs& attrs) {
  if (inputs.size() > size_t(kMaxOpInputs))
    throw ValueError(std::string(op_info(op).name) + ": at most " + std::to_string(kMaxOpInputs) + " inputs; got " +
                     std::to_string(inputs.size()));
  Tensor in[kMaxOpInputs];
  for (size_t i = 0; i < inputs.size(); ++i) in[i] = tensor(inputs[i]);
  values_.push_back(detail::apply(op, {in, inputs.size()}, attrs));
  return Value{int32_t(values_.size() - 1)};
}

Value EagerBuilder::parameter(const tensorgrad::Tensor& t, const char* name, bool trainable) {
  if (!t.defined()) throw StateError(std::string("EagerBuilder::parameter: '") + name + "' is an undefined tensor");
  auto found = parameter_values_.find(t.raw());
  if (found != parameter_values_.end()) return found->second;
  Tensor leaf(t, trainable && t.dtype() == DType::Float32);
  const Value v = input(leaf);
  parameter_values_.emplace(t.raw(), v);
  parameters_.emplace_back(name, leaf);
  return v;
}

Value EagerBuilder::rng_counter() {
  if (counter_value_.valid()) return counter_value_;
  tensorgrad::Tensor c = tensorgrad::Tensor::empty(Shape{1}, DType::Int64);
  c.data<int64_t>()[0] = int64_t(counter_);
  counter_value_ = input(Tensor(c));
  return counter_value_;
}

void EagerBuilder::set_counter_value(uint64_t counter) {
  counter_ = counter;
  counter_value_ = Value{};
}

}  // namespace tensorgrad::ag
