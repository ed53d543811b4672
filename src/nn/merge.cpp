#include "tensorgrad/nn/merge.h"

#include "tensorgrad/core/error.h"

namespace tensorgrad::nn {

namespace {
std::string shapes_text(std::span<const Shape> shapes) {
  std::string s;
  for (const Shape& x : shapes) s += (s.empty() ? "" : ", ") + x.str();
  return s;
}
}  // namespace

Shape Merge::build(const Shape& input_shape) { return build_inputs(std::span<const Shape>(&input_shape, 1)); }

Shape Merge::build_inputs(std::span<const Shape> shapes) {
  if (shapes.size() < 2 || shapes.size() > max_inputs())
    throw ValueError(std::string(type()) + " layer '" + name() + "' merges " +
                     (max_inputs() == 2 ? std::string("exactly two inputs") : std::string("two or more inputs")) +
                     "; it was called on " + std::to_string(shapes.size()));
  Shape out = shapes[0];
  for (const Shape& s : shapes.subspan(1)) {
    if (s.rank() != out.rank())
      throw ShapeError(std::string(type()) + " layer '" + name() + "' needs inputs of the same rank; got " +
                       shapes_text(shapes));
    for (int d = 0; d < s.rank(); ++d) {
      if (s[d] == out[d] || s[d] == 1) continue;
      if (out[d] != 1)
        throw ShapeError(std::string(type()) + " layer '" + name() +
                         "' needs inputs of equal shapes (or sizes of 1 where they differ); got " + shapes_text(shapes));
      out.set(d, s[d]);
    }
  }
  return out;
}

Value Merge::call(Builder& b, Value x, const CallOptions& options) {
  return call_inputs(b, std::span<const Value>(&x, 1), options);
}

Value Merge::call_inputs(Builder& b, std::span<const Value> inputs, const CallOptions&) {
  if (inputs.size() < 2 || inputs.size() > max_inputs())
    throw ValueError(std::string(type()) + " layer '" + name() + "' called on " + std::to_string(inputs.size()) +
                     " input(s)");
  return merge(b, inputs);
}

Value Add::merge(Builder& b, std::span<const Value> in) const {
  Value v = in[0];
  for (Value x : in.subspan(1)) v = b.add(v, x);
  return v;
}

Value Subtract::merge(Builder& b, std::span<const Value> in) const { return b.sub(in[0], in[1]); }

Value Multiply::merge(Builder& b, std::span<const Value> in) const {
  Value v = in[0];
  for (Value x : in.subspan(1)) v = b.mul(v, x);
  return v;
}

Value Average::merge(Builder& b, std::span<const Value> in) const {
  Value v = in[0];
  for (Value x : in.subspan(1)) v = b.add(v, x);
  return b.scale(v, 1.0f / float(in.size()));
}

Value Maximum::merge(Builder& b, std::span<const Value> in) const {
  Value v = in[0];
  for (Value x : in.subspan(1)) v = b.maximum(v, x);
  return v;
}

Value Minimum::merge(Builder& b, std::span<const Value> in) const {
  Value v = in[0];
  for (Value x : in.subspan(1)) v = b.minimum(v, x);
  return v;
}

Concatenate::Concatenate(int axis) : Layer("concatenate"), axis_(axis) {
  if (axis == 0)
    throw ValueError("Concatenate: axis 0 is the batch and cannot be joined; use -1 (the last axis) or 1.. rank-1");
}

Shape Concatenate::build(const Shape& input_shape) { return build_inputs(std::span<const Shape>(&input_shape, 1)); }

Shape Concatenate::build_inputs(std::span<const Shape> shapes) {
  if (shapes.size() < 2)
    throw ValueError("Concatenate layer '" + name() + "' joins two or more inputs; it was called on " +
                     std::to_string(shapes.size()));
  const int rank = shapes[0].rank() + 1;  // with the batch
  const int axis = axis_ < 0 ? axis_ + rank : axis_;
  if (axis <= 0 || axis >= rank)
    throw ShapeError("Concatenate layer '" + name() + "': axis " + std::to_string(axis_) + " is outside inputs of " +
                     std::to_string(rank) + " dimensions (with the batch); got " + shapes_text(shapes));
  Shape out = shapes[0];
  for (const Shape& s : shapes.subspan(1)) {
    bool fits = s.rank() == out.rank();
    for (int d = 0; fits && d < s.rank(); ++d) fits = d + 1 == axis || s[d] == out[d];
    if (!fits)
      throw ShapeError("Concatenate layer '" + name() + "' needs inputs of the same rank and equal sizes off axis " +
                       std::to_string(axis_) + "; got " + shapes_text(shapes));
    out.set(axis - 1, out[axis - 1] + s[axis - 1]);
  }
  resolved_ = axis;
  return out;
}

Value Concatenate::call(Builder& b, Value x, const CallOptions& options) {
  return call_inputs(b, std::span<const Value>(&x, 1), options);
}

Value Concatenate::call_inputs(Builder& b, std::span<const Value> inputs, const CallOptions&) {
  if (inputs.size() < 2 || resolved_ == 0)
    throw ValueError("Concatenate layer '" + name() + "' called on " + std::to_string(inputs.size()) +
                     " input(s) before it was built for two or more");
  Value v = inputs[0];
  for (Value x : inputs.subspan(1)) v = b.concat(v, x, resolved_);
  return v;
}

Reshape::Reshape(std::vector<int64_t> target_shape) : Layer("reshape"), target_(std::move(target_shape)) {
  int unknown = 0;
  for (int64_t d : target_) {
    if (d == -1) ++unknown;
    else if (d < 1) throw ValueError("Reshape: sizes must be positive (or one -1); got " + std::to_string(d));
  }
  if (target_.empty() || unknown > 1)
    throw ValueError("Reshape: give a non-empty target shape with at most one -1; got " +
                     std::to_string(target_.size()) + " sizes with " + std::to_string(unknown) + " of -1");
}

Shape Reshape::build(const Shape& input_shape) {
  int64_t known = 1;
  int unknown_at = -1;
  for (size_t i = 0; i < target_.size(); ++i) {
    if (target_[i] == -1) unknown_at = int(i);
    else known *= target_[i];
  }
  std::vector<int64_t> dims = target_;
  const int64_t n = input_shape.numel();
  if (unknown_at >= 0) {
    if (n % known != 0)
      throw ShapeError("Reshape '" + name() + "': " + input_shape.str() + " (" + std::to_string(n) +
                       " elements) cannot fill a -1 among sizes whose product is " + std::to_string(known));
    dims[size_t(unknown_at)] = n / known;
  } else if (known != n) {
    throw ShapeError("Reshape '" + name() + "': " + input_shape.str() + " has " + std::to_string(n) +
                     " elements, the target shape " + Shape(std::span<const int64_t>(dims)).str() + " " +
                     std::to_string(known));
  }
  resolved_ = Shape(std::span<const int64_t>(dims));
  return resolved_;
}

Value Reshape::call(Builder& b, Value x, const CallOptions&) {
  return b.reshape(x, resolved_.with_batch(b.shape(x)[0]));
}

LayerConfig Concatenate::config() const { return LayerConfig(type()).set("axis", int64_t(axis_)); }

LayerConfig Reshape::config() const { return LayerConfig(type()).set("target_shape", target_); }

Value Merge::compute_mask(Builder& b, std::span<const Value>, std::span<const Value> masks) {
  Value m;
  for (Value v : masks)
    if (v.valid()) m = m.valid() ? b.mul(m, v) : v;
  return m;
}

}  // namespace tensorgrad::nn
