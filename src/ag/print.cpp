// Printing an eager tensor as PyTorch prints one: nested brackets, four
// decimals for floats, summarised with "..." beyond 1000 elements (three
// items at each edge of every dimension), then the device and the autograd
// state when they are not the defaults.
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "tensorgrad/ag/tensor.h"

namespace tensorgrad::ag {

namespace {

constexpr int64_t kThreshold = 1000, kEdgeItems = 3;

struct Printer {
  const std::vector<float>& values;
  const Shape& shape;
  bool floating;
  bool summarise;
  std::ostream& os;

  void element(int64_t i) {
    const float v = values[size_t(i)];
    if (!floating) {
      os << int64_t(v);
      return;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.4f", double(v));
    os << buf;
  }

  // Dimension `d` of the block starting at flat index `at`, `indent` spaces deep.
  void block(int d, int64_t at, int indent) {
    if (d == shape.rank()) {
      element(at);
      return;
    }
    int64_t stride = 1;
    for (int k = d + 1; k < shape.rank(); ++k) stride *= shape[k];
    const int64_t n = shape[d];
    os << '[';
    for (int64_t i = 0; i < n; ++i) {
      if (summarise && n > 2 * kEdgeItems && i == kEdgeItems) {
        os << "...";
        i = n - kEdgeItems - 1;
        if (d + 1 == shape.rank()) os << ", ";
        else os << ",\n" << std::string(size_t(indent + 1), ' ');
        continue;
      }
      block(d + 1, at + i * stride, indent + 1);
      if (i + 1 < n) {
        if (d + 1 == shape.rank()) os << ", ";
        else os << ',' << std::string(size_t(shape.rank() - d - 1), '\n') << std::string(size_t(indent + 1), ' ');
      }
    }
    os << ']';
  }
};

}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  const std::vector<float> values = t.to_vector();
  os << "tensor(";
  Printer p{values, t.shape(), t.dtype() == DType::Float32, t.numel() > kThreshold, os};
  p.block(0, 0, 7);
  if (t.device() != Device::CPU) os << ", device='" << t.device().str() << "'";
  if (t.dtype() != DType::Float32) os << ", dtype=" << dtype_name(t.dtype());
  if (!t.grad_fn_name().empty()) os << ", grad_fn=<" << t.grad_fn_name() << ">";
  else if (t.requires_grad()) os << ", requires_grad=True";
  return os << ')';
}

}  // namespace tensorgrad::ag
