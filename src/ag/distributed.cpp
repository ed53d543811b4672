#include "tensorgrad/ag/distributed.h"

#include <cstring>
#include <string>

#include "ag/autograd.h"
#include "tensorgrad/ag/functional.h"
#include "tensorgrad/core/error.h"

namespace tensorgrad::dist {

void all_reduce_gradients(Communicator& comm, const std::vector<ag::Tensor>& parameters, size_t bucket_bytes) {
  bucket_elements(bucket_bytes, "all_reduce_gradients");  // throws before any collective
  int64_t total = 0;
  for (size_t i = 0; i < parameters.size(); ++i) {
    const ag::Tensor& p = parameters[i];
    if (!p.defined())
      throw ValueError("all_reduce_gradients: parameter " + std::to_string(i) + " is undefined; pass the model's parameters");
    if (p.data().dtype() != DType::Float32)
      throw TypeError("all_reduce_gradients: parameter " + std::to_string(i) + " is " + dtype_name(p.data().dtype()) +
                      "; gradients are float32");
    if (p.device() != parameters[0].device())
      throw ValueError("all_reduce_gradients: parameter 0 is on " + parameters[0].device().str() + " and parameter " +
                       std::to_string(i) + " on " + p.device().str() +
                       "; expected all on the same device: move the model with Module::to");
    total += p.data().numel();
  }
  // Every rank must send the same sizes (MPI cannot tell): rank 0's count
  // goes to all, and every rank's verdict is summed, so all decide alike.
  int64_t first = total;
  comm.broadcast_bytes(std::as_writable_bytes(std::span<int64_t>(&first, 1)), 0);
  std::vector<float> mismatches{first == total ? 0.0f : 1.0f};
  comm.all_reduce(mismatches);
  if (mismatches[0] != 0.0f)
    throw ValueError("all_reduce_gradients: the ranks' parameters differ: rank 0 has " + std::to_string(first) +
                     " gradient elements, rank " + std::to_string(comm.rank()) + " " + std::to_string(total) + " (" +
                     std::to_string(int(mismatches[0])) + " rank(s) differ from rank 0); every rank must pass the "
                     "same parameters");
  // The gradients are packed into one flat buffer on their device by
  // queued copies (g * 1 is exact); MPI reduces host memory, so a device's
  // buffer travels bucket by bucket, one copy each way per bucket.
  const Device device = parameters.empty() ? Device::CPU : parameters[0].device();
  ag::TensorOptions options;
  options.device = device;
  const tensorgrad::Tensor flat = ag::zeros(Shape{total}, options).data();
  OpAttrs copy;
  copy.factor = 1.0f;
  int64_t at = 0;
  for (const ag::Tensor& p : parameters) {
    const int64_t n = p.data().numel();
    const ag::Tensor g = p.grad();
    if (g.defined()) ag::detail::run_into(OpKind::Scale, copy, {&g.data(), 1}, flat.rows(at, at + n).reshape(g.shape()));
    at += n;
  }
  const bool on_device = device != Device::CPU;
  std::vector<float> host(on_device ? size_t(total) : 0);
  float* data = on_device ? host.data() : flat.data<float>();
  const float inv = 1.0f / float(comm.size());
  for (size_t k = 0, buckets = bucket_count(size_t(total), bucket_bytes); k < buckets; ++k) {
    const auto [begin, end] = bucket_range(size_t(total), bucket_bytes, k);
    const size_t bytes = (end - begin) * sizeof(float);
    if (on_device) flat.copy_to_host(data + begin, bytes, begin * sizeof(float));
    comm.reduce_broadcast(std::span<float>(data + begin, end - begin));
    for (size_t i = begin; i < end; ++i) data[i] *= inv;
    if (on_device) tensorgrad::Tensor(flat).copy_from_host(data + begin, bytes, begin * sizeof(float));
  }
  at = 0;
  for (const ag::Tensor& p : parameters) {
    const int64_t n = p.data().numel();
    ag::Tensor g = p.grad();
    if (!g.defined()) {
      ag::Tensor handle = p;  // shares the parameter: its gradient is the parameter's
      handle.set_grad(ag::zeros(p.shape(), options));
      g = p.grad();
    }
    const tensorgrad::Tensor part = flat.rows(at, at + n).reshape(g.shape());
    ag::detail::run_into(OpKind::Scale, copy, {&part, 1}, g.data());
    at += n;
  }
}

}  // namespace tensorgrad::dist
