#include "tensorgrad/ag/distributed.h"

#include <cstring>
#include <string>

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
  std::vector<float> flat(size_t(total), 0.0f);
  size_t at = 0;
  for (const ag::Tensor& p : parameters) {
    const ag::Tensor g = p.grad();
    const size_t n = size_t(p.data().numel());
    if (g.defined()) g.data().copy_to_host(flat.data() + at, n * sizeof(float));
    at += n;
  }
  reduce_buckets(comm, flat, bucket_bytes);
  const float inv = 1.0f / float(comm.size());
  for (float& v : flat) v *= inv;
  at = 0;
  for (const ag::Tensor& p : parameters) {
    const size_t n = size_t(p.data().numel());
    ag::Tensor g = p.grad();
    if (!g.defined()) {
      ag::Tensor handle = p;  // shares the parameter: its gradient is the parameter's
      handle.set_grad(ag::Tensor(tensorgrad::Tensor::zeros(p.data().shape()).to(p.device())));
      g = p.grad();
    }
    tensorgrad::Tensor(g.data()).copy_from_host(flat.data() + at, n * sizeof(float));
    at += n;
  }
}

}  // namespace tensorgrad::dist
