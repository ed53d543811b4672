#include "tensorgrad/ag/tensor.h"

#include <cmath>
#include <string>

#include "ag/autograd.h"
#include "tensorgrad/core/error.h"
#include "tensorgrad/core/random.h"

namespace tensorgrad::ag {

using detail::Access;
using detail::TensorImpl;

namespace {

void check_float_for_grad(DType dtype, bool requires_grad) {
  if (requires_grad && dtype != DType::Float32)
    throw ValueError(std::string("requires_grad: only float32 tensors can require gradients; this one is ") +
                     dtype_name(dtype));
}

// In-place ops may not change values a recorded op could need: allowed on a
// tensor that requires grad only with recording off.
TensorImpl& writable(const std::shared_ptr<TensorImpl>& impl, const char* op) {
  if (!impl) throw StateError(std::string(op) + ": the tensor is undefined");
  if (impl->requires_grad && grad_enabled())
    throw StateError(std::string(op) + ": this tensor (shape " + impl->data.shape().str() +
                     ") requires grad, and an in-place change would alter values its recorded ops need. Run the "
                     "update under an ag::NoGradGuard (as an optimizer step does), or use the out-of-place op");
  return *impl;
}

}  // namespace

Tensor::Tensor(const tensorgrad::Tensor& data, bool requires_grad) {
  if (!data.defined()) throw StateError("ag::Tensor: the engine tensor to wrap is undefined");
  check_float_for_grad(data.dtype(), requires_grad);
  impl_ = Access::impl(detail::make_leaf(data, requires_grad));
}

Tensor Tensor::from_blob(void* data, const Shape& shape, TensorOptions options) {
  if (!data) throw ValueError("from_blob: the data pointer is null");
  return Tensor(tensorgrad::Tensor::view(data, shape, options.dtype), options.requires_grad);
}

const TensorImpl& Tensor::impl() const {
  if (!impl_)
    throw StateError("ag::Tensor: the tensor is undefined (default-constructed, or the grad() of a tensor no backward "
                     "has reached yet)");
  return *impl_;
}

const Shape& Tensor::shape() const { return impl().data.shape(); }
DType Tensor::dtype() const { return impl().data.dtype(); }
const tensorgrad::Tensor& Tensor::data() const { return impl().data; }

int64_t Tensor::size(int d) const {
  const Shape& s = shape();
  if (d < -s.rank() || d >= s.rank())
    throw IndexError("size: dimension " + std::to_string(d) + " is outside [" + std::to_string(-s.rank()) + ", " +
                     std::to_string(s.rank()) + ") for shape " + s.str());
  return s[d < 0 ? d + s.rank() : d];
}

float Tensor::item() const {
  if (numel() != 1)
    throw ValueError("item: only a tensor of one element has an item; this one has shape " + shape().str() + " (" +
                     std::to_string(numel()) + " elements). Index or reduce it first");
  return impl().data.item(0);
}

std::vector<float> Tensor::to_vector() const { return impl().data.to_vector(); }

Device Tensor::device() const { return impl().data.device(); }

Tensor Tensor::to(Device device) const {
  const TensorImpl& t = impl();
  if (t.data.device() == device) return *this;
  if (t.grad_fn && grad_enabled())
    throw StateError("to(" + device.str() + "): this tensor was made by op '" + op_info(t.grad_fn->op).name +
                     "' and gradients do not flow between devices here. Move the leaves (parameters, inputs) with "
                     "to() and run the ops on the device, or detach() it first");
  return detail::make_leaf(detail::copy_to(t.data, device), t.requires_grad && grad_enabled());
}

bool Tensor::requires_grad() const { return impl().requires_grad; }

Tensor& Tensor::requires_grad_(bool requires_grad) {
  const TensorImpl& t = impl();
  if (t.grad_fn)
    throw StateError("requires_grad_: this tensor was made by op '" + std::string(op_info(t.grad_fn->op).name) +
                     "' and requires grad through its inputs; only a leaf's flag can be set. Use detach() for a "
                     "tensor without history");
  check_float_for_grad(t.data.dtype(), requires_grad);
  impl_->requires_grad = requires_grad;
  return *this;
}

bool Tensor::is_leaf() const { return !impl().grad_fn; }

std::string Tensor::grad_fn_name() const { return impl().grad_fn ? op_info(impl().grad_fn->op).name : ""; }

Tensor Tensor::grad() const {
  const TensorImpl& t = impl();
  if (!t.grad.defined()) return Tensor();
  return detail::make_leaf(t.grad, false);
}

void Tensor::set_grad(const Tensor& grad) {
  impl();
  if (!grad.defined()) {
    impl_->grad = tensorgrad::Tensor();
    return;
  }
  if (grad.shape() != shape() || grad.dtype() != dtype())
    throw ShapeError("set_grad: the gradient must be " + std::string(dtype_name(dtype())) + " " + shape().str() +
                     "; got " + dtype_name(grad.dtype()) + " " + grad.shape().str());
  if (grad.device() != device())
    throw ValueError("set_grad: the gradient is on " + grad.device().str() + " and this tensor on " +
                     device().str() + "; a gradient lives on its tensor's device: move it with to()");
  impl_->grad = grad.data();
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  impl();
  detail::backward(*this, gradient, retain_graph);
}

Tensor Tensor::detach() const { return detail::make_leaf(impl().data, false, impl_->share_version()); }

Tensor Tensor::clone() const {
  OpAttrs at;
  at.factor = 1.0f;
  if (dtype() != DType::Float32) return detail::make_leaf(impl().data.clone(), false);
  return detail::apply(OpKind::Scale, {*this}, at);  // x * 1 is exact, and its gradient is g
}

uint64_t Tensor::version() const {
  impl();
  return impl_->version();
}

// ---- in-place ops ----

namespace {
Tensor& bump(Tensor& self) {
  ++Access::impl(self)->version();
  return self;
}
tensorgrad::Tensor scalar(float v) { return tensorgrad::Tensor::full(Shape{}, v); }
}  // namespace

Tensor& Tensor::add_(const Tensor& other, float alpha) {
  TensorImpl& t = writable(impl_, "add_");
  if (!other.defined()) throw StateError("add_: the other tensor is undefined");
  tensorgrad::Tensor o = other.data();
  if (alpha != 1.0f) {
    OpAttrs at;
    at.factor = alpha;
    o = detail::run_op(OpKind::Scale, at, std::span<const tensorgrad::Tensor>(&o, 1));
  }
  const tensorgrad::Tensor in[2] = {t.data, o};
  detail::run_into(OpKind::Add, {}, in, t.data);
  return bump(*this);
}

Tensor& Tensor::add_(float value) {
  TensorImpl& t = writable(impl_, "add_");
  const tensorgrad::Tensor in[2] = {t.data, scalar(value)};
  detail::run_into(OpKind::Add, {}, in, t.data);
  return bump(*this);
}

Tensor& Tensor::mul_(const Tensor& other) {
  TensorImpl& t = writable(impl_, "mul_");
  if (!other.defined()) throw StateError("mul_: the other tensor is undefined");
  const tensorgrad::Tensor in[2] = {t.data, other.data()};
  detail::run_into(OpKind::Mul, {}, in, t.data);
  return bump(*this);
}

Tensor& Tensor::mul_(float value) {
  TensorImpl& t = writable(impl_, "mul_");
  OpAttrs at;
  at.factor = value;
  detail::run_into(OpKind::Scale, at, std::span<const tensorgrad::Tensor>(&t.data, 1), t.data);
  return bump(*this);
}

Tensor& Tensor::zero_() { return fill_(0.0f); }

Tensor& Tensor::fill_(float value) {
  TensorImpl& t = writable(impl_, "fill_");
  OpAttrs at;
  at.shape = t.data.shape();
  at.value = value;
  if (t.data.dtype() != DType::Float32)
    throw TypeError(std::string("fill_: only float32 tensors can be filled; this one is ") +
                    dtype_name(t.data.dtype()));
  detail::run_into(OpKind::Fill, at, {}, t.data);
  return bump(*this);
}

Tensor& Tensor::copy_(const Tensor& src) {
  TensorImpl& t = writable(impl_, "copy_");
  if (!src.defined()) throw StateError("copy_: the source tensor is undefined");
  if (src.dtype() != t.data.dtype())
    throw TypeError(std::string("copy_: the source is ") + dtype_name(src.dtype()) + " and this tensor " +
                    dtype_name(t.data.dtype()) + "; both must have the same dtype");
  if (src.shape() == t.data.shape()) {
    if (src.data().raw() != t.data.raw()) t.data.copy_from(src.data());
  } else {
    if (src.dtype() != DType::Float32)
      throw ShapeError("copy_: a " + std::string(dtype_name(src.dtype())) + " source must have this tensor's shape " +
                       t.data.shape().str() + " (only float32 broadcasts); got " + src.shape().str());
    OpAttrs at;
    at.shape = t.data.shape();
    detail::run_into(OpKind::BroadcastTo, at, std::span<const tensorgrad::Tensor>(&src.data(), 1), t.data);
  }
  return bump(*this);
}

Tensor& Tensor::clamp_(float min, float max) {
  TensorImpl& t = writable(impl_, "clamp_");
  OpAttrs at;
  at.clamp_min = min;
  at.clamp_max = max;
  detail::run_into(OpKind::Clamp, at, std::span<const tensorgrad::Tensor>(&t.data, 1), t.data);
  return bump(*this);
}

// ---- random streams ----

void Generator::manual_seed(uint64_t seed) {
  seed_ = seed;
  counter_ = 0;
  engine_.seed(seed);
}

Generator& default_generator() {
  static Generator generator(0);
  return generator;
}

void manual_seed(uint64_t seed) {
  tensorgrad::manual_seed(seed);
  default_generator().manual_seed(seed);
}

// ---- factories ----

namespace {
Tensor made(tensorgrad::Tensor data, const TensorOptions& options) {
  return Tensor(detail::copy_to(data, options.device), options.requires_grad);
}

// A float32 constant made where it lives: on a device by the Fill kernel,
// so that nothing of its size is allocated or copied on the host.
Tensor filled(const Shape& shape, float value, const TensorOptions& options) {
  if (options.device == Device::CPU) return made(tensorgrad::Tensor::full(shape, value), options);
  detail::DeviceScope on(options.device);
  OpAttrs at;
  at.shape = shape;
  at.value = value;
  return Tensor(detail::run_op(OpKind::Fill, at, {}), options.requires_grad);
}
}  // namespace

Tensor zeros(const Shape& shape, TensorOptions options) {
  if (options.dtype == DType::Float32) return filled(shape, 0.0f, options);
  return made(tensorgrad::Tensor::zeros(shape, options.dtype), options);
}

Tensor ones(const Shape& shape, TensorOptions options) {
  if (options.dtype != DType::Float32) {
    tensorgrad::Tensor t = tensorgrad::Tensor::empty(shape, options.dtype);
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (options.dtype == DType::Int32) t.data<int32_t>()[i] = 1;
      else t.data<int64_t>()[i] = 1;
    }
    return made(t, options);
  }
  return full(shape, 1.0f, options);
}

Tensor full(const Shape& shape, float value, TensorOptions options) {
  if (options.dtype != DType::Float32)
    throw TypeError(std::string("full: only float32 tensors can be filled with a float; asked for ") +
                    dtype_name(options.dtype));
  return filled(shape, value, options);
}

namespace {
// A float32 tensor of draws from `dist` on the generator's engine.
template <class Distribution>
Tensor drawn(const char* name, const Shape& shape, const TensorOptions& options, Generator* generator,
             Distribution dist) {
  if (options.dtype != DType::Float32)
    throw TypeError(std::string(name) + ": makes float32 tensors; asked for " + dtype_name(options.dtype));
  std::mt19937_64& engine = (generator ? *generator : default_generator()).engine();
  tensorgrad::Tensor t = tensorgrad::Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(engine);
  return made(t, options);
}
}  // namespace

Tensor rand(const Shape& shape, TensorOptions options, Generator* generator) {
  return drawn("rand", shape, options, generator, std::uniform_real_distribution<float>(0.0f, 1.0f));
}

Tensor randn(const Shape& shape, TensorOptions options, Generator* generator) {
  return drawn("randn", shape, options, generator, std::normal_distribution<float>(0.0f, 1.0f));
}

Tensor arange(double start, double end, double step, TensorOptions options) {
  if (step == 0.0 || !std::isfinite(step) || !std::isfinite(start) || !std::isfinite(end))
    throw ValueError("arange: start, end and step must be finite and step non-zero; got start " +
                     std::to_string(start) + ", end " + std::to_string(end) + ", step " + std::to_string(step));
  if ((end - start) * step < 0)
    throw ValueError("arange: a step of " + std::to_string(step) + " never gets from " + std::to_string(start) +
                     " to " + std::to_string(end));
  if (options.dtype == DType::Int64)
    throw TypeError("arange: makes float32 or int32 tensors; asked for int64");
  const int64_t n = int64_t(std::ceil((end - start) / step));
  tensorgrad::Tensor t = tensorgrad::Tensor::empty(Shape{n}, options.dtype);
  for (int64_t i = 0; i < n; ++i) {
    const double v = start + double(i) * step;
    if (options.dtype == DType::Int32) t.data<int32_t>()[i] = int32_t(v);
    else t.data<float>()[i] = float(v);
  }
  return made(t, options);
}

Tensor arange(double end, TensorOptions options) { return arange(0.0, end, 1.0, options); }

Tensor tensor(std::span<const float> values, const Shape& shape, TensorOptions options) {
  if (options.dtype != DType::Float32)
    throw TypeError(std::string("tensor: float values make a float32 tensor; asked for ") + dtype_name(options.dtype));
  return made(tensorgrad::Tensor::from_vector(values, shape), options);
}

Tensor tensor(std::initializer_list<float> values, const Shape& shape, TensorOptions options) {
  return tensor(std::span<const float>(values.begin(), values.size()), shape, options);
}

Tensor tensor(std::span<const int32_t> values, const Shape& shape) {
  return Tensor(tensorgrad::Tensor::from_vector(values, shape));
}

}  // namespace tensorgrad::ag
