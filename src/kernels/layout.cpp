// Ops that move elements without arithmetic (or with only sums of copies):
// slices, concatenation, embedding lookups.
#include <cstring>

#include "kernels/kernels.h"
#include "tensorgrad/core/error.h"

namespace tensorgrad::kernels {

namespace {
// Views a tensor as {outer, axis, inner} around `axis`.
struct Around {
  int64_t outer = 1, axis = 1, inner = 1;
};
Around around(const Shape& s, int axis) {
  Around a;
  for (int d = 0; d < axis; ++d) a.outer *= s[d];
  a.axis = s[axis];
  for (int d = axis + 1; d < s.rank(); ++d) a.inner *= s[d];
  return a;
}
}  // namespace

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

void concat(const OpAttrs& at, const TensorRef& a, const TensorRef& b, const TensorRef& y) {
  const Around aa = around(a.shape, at.axis), ab = around(b.shape, at.axis);
  const size_t elem = dtype_size(a.dtype);
  const size_t ca = size_t(aa.axis * aa.inner) * elem, cb = size_t(ab.axis * ab.inner) * elem;
  char* dst = static_cast<char*>(y.data);
  for (int64_t o = 0; o < aa.outer; ++o) {
    std::memcpy(dst + size_t(o) * (ca + cb), static_cast<const char*>(a.data) + size_t(o) * ca, ca);
    std::memcpy(dst + size_t(o) * (ca + cb) + ca, static_cast<const char*>(b.data) + size_t(o) * cb, cb);
  }
}

// y[i, :] = table[ids[i], :]; ids were range-checked where they entered.
void gather(const TensorRef& table, const TensorRef& ids, const TensorRef& y, const KernelContext& ctx) {
  const int64_t d = table.shape[1], n = ids.numel();
  const float* t = table.f();
  const int32_t* id = ids.i();
  // Checked before any row is copied, so a bad id stops the run before the
  // update ops that follow it in the schedule.
  const int64_t vocab = table.shape[0];
  for (int64_t i = 0; i < n; ++i)
    if (id[i] < 0 || id[i] >= vocab)
      throw IndexError("gather: id " + std::to_string(id[i]) + " at position " + std::to_string(i) +
                       " is outside the table of " + std::to_string(vocab) + " rows [0, " + std::to_string(vocab) +
                       "); map the id into the table or enlarge it");
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
