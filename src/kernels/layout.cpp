// Ops that move elements without arithmetic (or with only sums of copies):
// slices, concatenation, embedding lookups.
#include <algorithm>
#include <cstring>
#include <utility>

#include "kernels/kernels.h"
#include "tensorgrad/core/error.h"

namespace tensorgrad::kernels {


void slice(const OpAttrs& at, const TensorRef& x, const TensorRef& y) {
  const Around a = around(x.shape, at.axis);
  const size_t elem = dtype_size(x.dtype), chunk = size_t(at.length * a.inner) * elem;
  const char* src = static_cast<const char*>(x.data);
  char* dst = static_cast<char*>(y.data);
  for (int64_t o = 0; o < a.outer; ++o)
    std::memcpy(dst + size_t(o) * chunk, src + size_t((o * a.axis + at.start) * a.inner) * elem, chunk);
}

void slice_backward(const OpAttrs& at, const TensorRef& g, const TensorRef& dx) {
  std::memset(dx.data, 0, size_t(dx.numel()) * sizeof(float));
  const Around a = around(dx.shape, at.axis);
  const size_t chunk = size_t(at.length * a.inner);
  for (int64_t o = 0; o < a.outer; ++o)
    std::memcpy(dx.f() + (o * a.axis + at.start) * a.inner, g.f() + size_t(o) * chunk, chunk * sizeof(float));
}

void concat(const OpAttrs& at, std::span<const TensorRef> in, const TensorRef& y) {
  const size_t elem = dtype_size(y.dtype);
  const Around ay = around(y.shape, at.axis);
  const size_t row = size_t(ay.axis * ay.inner) * elem;
  char* dst = static_cast<char*>(y.data);
  size_t offset = 0;
  for (const TensorRef& x : in) {
    const Around ax = around(x.shape, at.axis);
    const size_t chunk = size_t(ax.axis * ax.inner) * elem;
    const char* src = static_cast<const char*>(x.data);
    for (int64_t o = 0; o < ay.outer; ++o) std::memcpy(dst + size_t(o) * row + offset, src + size_t(o) * chunk, chunk);
    offset += chunk;
  }
}

namespace {
// Walks y in row-major order; the input element of y's index is at
// sum(index[d] * xs[d]) with xs x's strides permuted like y's axes.
template <class T>
void transpose_as(const T* __restrict x, T* __restrict y, const Shape& ys, const int64_t* xs) {
  const int r = ys.rank();
  const int64_t inner = ys[r - 1], outer = ys.numel() / std::max<int64_t>(inner, 1), step = xs[r - 1];
  if (inner == 0) return;
  for (int64_t o = 0; o < outer; ++o) {
    int64_t off = 0, rem = o;
    for (int d = r - 2; d >= 0; --d) {
      off += (rem % ys[d]) * xs[d];
      rem /= ys[d];
    }
    T* row = y + o * inner;
    for (int64_t j = 0; j < inner; ++j) row[j] = x[off + j * step];
  }
}
}  // namespace

void transpose(const OpAttrs& at, const TensorRef& x, const TensorRef& y) {
  const int r = x.shape.rank();
  int64_t strides[Shape::kMaxRank];
  int64_t stride = 1;
  for (int d = r - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= x.shape[d];
  }
  std::swap(strides[at.axis], strides[at.axis2]);
  if (dtype_size(x.dtype) == 8)
    transpose_as(static_cast<const uint64_t*>(x.data), static_cast<uint64_t*>(y.data), y.shape, strides);
  else
    transpose_as(static_cast<const uint32_t*>(x.data), static_cast<uint32_t*>(y.data), y.shape, strides);
}

// y[i, :] = table[ids[i], :]; ids were range-checked where they entered.
IndexError gather_id_error(int64_t id, int64_t position, int64_t rows) {
  return IndexError("gather: id " + std::to_string(id) + " at position " + std::to_string(position) +
                    " is outside the table of " + std::to_string(rows) + " rows [0, " + std::to_string(rows) +
                    ") (an embedding lookup's or index_select's ids); map the id into the table or enlarge it");
}

void gather(const TensorRef& table, const TensorRef& ids, const TensorRef& y, const KernelContext& ctx) {
  const int64_t d = table.shape[1], n = ids.numel();
  const float* t = table.f();
  const int32_t* id = ids.i();
  // Checked before any row is copied, so a bad id stops the run before the
  // update ops that follow it in the schedule.
  const int64_t vocab = table.shape[0];
  for (int64_t i = 0; i < n; ++i)
    if (id[i] < 0 || id[i] >= vocab)
      throw gather_id_error(id[i], i, vocab);
  float* out = y.f();
  parallel_for(ctx.pool, size_t(n), 256, [=](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) std::memcpy(out + i * size_t(d), t + size_t(id[i]) * size_t(d), size_t(d) * sizeof(float));
  });
}

// dtable[v, :] = sum of g[i, :] over i with ids[i] == v; sequential so that
// repeated ids sum in a fixed order.
void gather_backward(const TensorRef& g, const TensorRef& ids, const TensorRef& dtable) {
  const int64_t d = dtable.shape[1], n = ids.numel();
  std::memset(dtable.data, 0, size_t(dtable.numel()) * sizeof(float));
  for (int64_t i = 0; i < n; ++i) {
    float* row = dtable.f() + int64_t(ids.i()[i]) * d;
    const float* gi = g.f() + i * d;
    for (int64_t j = 0; j < d; ++j) row[j] += gi[j];
  }
}

void to_index(const TensorRef& x, const TensorRef& y) {
  for (int64_t i = 0; i < x.numel(); ++i) y.i()[i] = int32_t(x.f()[i]);
}

}  // namespace tensorgrad::kernels
