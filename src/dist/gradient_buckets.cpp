#include "tensorgrad/dist/gradient_buckets.h"

#include <algorithm>
#include <string>

#include "tensorgrad/core/error.h"

namespace tensorgrad::dist {

size_t bucket_elements(size_t bucket_bytes, const char* where) {
  if (bucket_bytes < sizeof(float))
    throw ValueError(std::string(where) + ": bucket_bytes must be at least 4 (one float32 gradient element); got " +
                     std::to_string(bucket_bytes) + ". The default is 25 MiB (" +
                     std::to_string(kDefaultGradientBucketBytes) + " bytes)");
  return bucket_bytes / sizeof(float);
}

size_t bucket_count(size_t n, size_t bucket_bytes) {
  const size_t per = bucket_elements(bucket_bytes);
  return (n + per - 1) / per;
}

std::pair<size_t, size_t> bucket_range(size_t n, size_t bucket_bytes, size_t k) {
  const size_t count = bucket_count(n, bucket_bytes);
  if (k >= count)
    throw IndexError("gradient bucket " + std::to_string(k) + " is out of range: a buffer of " + std::to_string(n) +
                     " elements has " + std::to_string(count) + " bucket(s) of at most " +
                     std::to_string(bucket_bytes) + " bytes; use k < bucket_count()");
  const size_t per = bucket_elements(bucket_bytes);
  return {k * per, std::min(k * per + per, n)};
}

void reduce_buckets(Communicator& comm, std::span<float> data, size_t bucket_bytes, size_t trailing) {
  if (trailing > data.size())
    throw ValueError("reduce_buckets: " + std::to_string(trailing) + " trailing elements in a span of " +
                     std::to_string(data.size()) + "; they are the span's last elements, so at most its size");
  const size_t per = bucket_elements(bucket_bytes, "reduce_buckets");
  if (data.empty()) return;
  const size_t n = data.size() - trailing;
  for (size_t begin = 0;; begin += per) {
    const size_t end = std::min(n, begin + per);
    const size_t stop = end == n ? data.size() : end;  // the last bucket carries the trailing elements
    comm.reduce_broadcast(data.subspan(begin, stop - begin));
    if (stop == data.size()) return;
  }
}

}  // namespace tensorgrad::dist
