// ggml's element types and block formats. See include/tensorgrad/io/quants.h
// for the layouts; the decoders follow ggml's dequantize_row_q8_0, _q4_0,
// _q4_K and _q6_K (ggml-quants.c) operation for operation so that they give
// the same floats, and the Q8_0 and Q4_0 encoders its quantize_row_*_ref.
#include "tensorgrad/io/quants.h"

#include <fp16.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>

#include "tensorgrad/core/error.h"
#include "tensorgrad/io/gguf.h"  // the F16 and BF16 conversions

namespace tensorgrad::io {

static_assert(std::endian::native == std::endian::little, "the block formats are read as little-endian bytes");

namespace {

constexpr int64_t kQK = 32;     // ggml's QK4_0 and QK8_0
constexpr int64_t kQK_K = 256;  // ggml's QK_K
constexpr size_t kQ8_0Bytes = 2 + 32;
constexpr size_t kQ4_0Bytes = 2 + 16;
constexpr size_t kKScaleSize = 12;                       // ggml's K_SCALE_SIZE
constexpr size_t kQ4_KBytes = 2 + 2 + kKScaleSize + 128;  // d, dmin, scales, qs
constexpr size_t kQ6_KBytes = 128 + 64 + 16 + 2;          // ql, qh, scales, d

float half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_ieee_to_fp32_value(h);
}
void put_half(uint8_t* p, uint16_t h) { std::memcpy(p, &h, 2); }

[[noreturn]] void bad_type(const char* fn, TensorType type) {
  throw ValueError(std::string(fn) + ": " + std::to_string(uint32_t(type)) +
                   " is not a TensorType; expected F32 (0), F16 (1), Q4_0 (2), Q8_0 (8), Q4_K (12), Q6_K (14), "
                   "I32 (26), I64 (27) or BF16 (30), the ggml type ids tensorgrad stores; pass one of the "
                   "TensorType enumerators");
}

// ggml's get_scale_min_k4: scale and min `j` (0..7) of a Q4_K block's 12
// scale bytes. The first four pairs are the low 6 bits of bytes 0-3 (scales)
// and 4-7 (mins); the last four keep their low 4 bits in bytes 8-11 (scale
// in the low nibble, min in the high one) and their top 2 bits in the top
// bits of bytes 0-3 (scales) and 4-7 (mins).
void scale_min_k4(int j, const uint8_t* q, uint8_t& sc, uint8_t& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = uint8_t((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    m = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// The inverse of scale_min_k4 over all eight pairs.
void pack_scale_min_k4(const uint8_t* sc, const uint8_t* m, uint8_t* q) {
  for (int j = 0; j < 4; ++j) {
    q[j] = uint8_t(sc[j] | ((sc[j + 4] >> 4) << 6));
    q[j + 4] = uint8_t(m[j] | ((m[j + 4] >> 4) << 6));
    q[j + 8] = uint8_t((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
  }
}

void dequantize_q8_0(const uint8_t* b, float* y, size_t blocks) {
  for (size_t i = 0; i < blocks; ++i, b += kQ8_0Bytes, y += kQK) {
    const float d = half(b);
    for (int j = 0; j < kQK; ++j) y[j] = float(int8_t(b[2 + j])) * d;
  }
}

void dequantize_q4_0(const uint8_t* b, float* y, size_t blocks) {
  for (size_t i = 0; i < blocks; ++i, b += kQ4_0Bytes, y += kQK) {
    const float d = half(b);
    const uint8_t* qs = b + 2;
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = float((qs[j] & 0x0F) - 8) * d;
      y[j + kQK / 2] = float((qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantize_q4_k(const uint8_t* b, float* y, size_t blocks) {
  for (size_t i = 0; i < blocks; ++i, b += kQ4_KBytes) {
    const float d = half(b);
    const float dmin = half(b + 2);
    const uint8_t* scales = b + 4;
    const uint8_t* q = b + 4 + kKScaleSize;
    // 64 elements at a time: 32 low nibbles (sub-block is), then the same
    // 32 bytes' high nibbles (sub-block is + 1).
    for (int is = 0; is < 8; is += 2, q += 32) {
      uint8_t sc, m;
      scale_min_k4(is, scales, sc, m);
      const float d1 = d * float(sc), m1 = dmin * float(m);
      scale_min_k4(is + 1, scales, sc, m);
      const float d2 = d * float(sc), m2 = dmin * float(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * float(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * float(q[l] >> 4) - m2;
    }
  }
}

void dequantize_q6_k(const uint8_t* b, float* y, size_t blocks) {
  for (size_t i = 0; i < blocks; ++i, b += kQ6_KBytes) {
    const uint8_t* ql = b;
    const uint8_t* qh = b + 128;
    const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
    const float d = half(b + 208);
    // Each half of 128 elements: 64 ql bytes (two nibbles each) and 32 qh
    // bytes (four 2-bit fields each); element 32k + l takes ql[l + 32(k&1)]'s
    // nibble k/2 and qh[l]'s field k, scaled by sc[(32k + l) / 16].
    for (int n = 0; n < kQK_K; n += 128, ql += 64, qh += 32, sc += 8, y += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * float(sc[is]) * float(q1);
        y[l + 32] = d * float(sc[is + 2]) * float(q2);
        y[l + 64] = d * float(sc[is + 4]) * float(q3);
        y[l + 96] = d * float(sc[is + 6]) * float(q4);
      }
    }
  }
}

// A positive scale as f16, rounded up (never below `v`) so that no value is
// clamped by the scale's rounding; ValueError when it is past f16's range.
uint16_t half_at_least(float v, const char* type) {
  uint16_t h = fp16_ieee_from_fp32_value(v);
  if (fp16_ieee_to_fp32_value(h) < v) ++h;  // the next f16 up (v is positive and finite)
  if ((h & 0x7C00) == 0x7C00)
    throw ValueError(std::string("quantize_row: ") + type + ": a block's values are too large for its f16 scale (" +
                     std::to_string(v) + " > 65504); scale the tensor down or store it as F32");
  return h;
}

// ggml's GGML_FP32_TO_FP16 of a block scale, which must stay finite.
uint16_t half_scale(float v, const char* type) {
  const uint16_t h = fp16_ieee_from_fp32_value(v);
  if ((h & 0x7C00) == 0x7C00)
    throw ValueError(std::string("quantize_row: ") + type + ": a block's values are too large for its f16 scale (" +
                     std::to_string(v) + " > 65504); scale the tensor down or store it as F32");
  return h;
}

// `v` within [lo, hi] and a NaN as their middle: a no-op for every value
// ggml's reference quantizers form from a normal scale (so their bytes stay
// theirs), and a defined conversion to an integer where a scale so small
// that its inverse overflows (the f16 scale is 0 then, and every value
// decodes to 0 whatever its q) would make an infinity or a NaN.
float to_range(float v, float lo, float hi) { return std::isnan(v) ? (lo + hi) / 2 : std::clamp(v, lo, hi); }

void quantize_q8_0(const float* x, uint8_t* b, size_t blocks) {
  for (size_t i = 0; i < blocks; ++i, x += kQK, b += kQ8_0Bytes) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_half(b, half_scale(d, "Q8_0"));
    for (int j = 0; j < kQK; ++j) b[2 + j] = uint8_t(int8_t(std::roundf(to_range(x[j] * id, -127.0f, 127.0f))));
  }
}

void quantize_q4_0(const float* x, uint8_t* b, size_t blocks) {
  for (size_t i = 0; i < blocks; ++i, x += kQK, b += kQ4_0Bytes) {
    float amax = 0.0f, max = 0.0f;  // the value of largest magnitude, with its sign
    for (int j = 0; j < kQK; ++j)
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_half(b, half_scale(d, "Q4_0"));
    for (int j = 0; j < kQK / 2; ++j) {
      const auto lo = uint8_t(std::min<int8_t>(15, int8_t(to_range(x[j] * id + 8.5f, 0.0f, 16.0f))));
      const auto hi = uint8_t(std::min<int8_t>(15, int8_t(to_range(x[j + kQK / 2] * id + 8.5f, 0.0f, 16.0f))));
      b[2 + j] = uint8_t(lo | (hi << 4));
    }
  }
}

void quantize_q4_k(const float* x, uint8_t* b, size_t blocks) {
  for (size_t i = 0; i < blocks; ++i, x += kQK_K, b += kQ4_KBytes) {
    // Sub-block s covers [lo_s, hi_s] with lo_s = min(0, min x) as
    // x = d * sc_s * q - dmin * m_s, q in 0..15: the min first (dmin * m_s
    // at least -lo_s), then the scale over what is left of the range.
    float neg_lo[8], hi[8], max_neg_lo = 0.0f;
    for (int s = 0; s < 8; ++s) {
      float lo = 0.0f, h = 0.0f;
      for (int l = 0; l < 32; ++l) {
        lo = std::min(lo, x[32 * s + l]);
        h = std::max(h, x[32 * s + l]);
      }
      neg_lo[s] = -lo;
      hi[s] = h;
      max_neg_lo = std::max(max_neg_lo, -lo);
    }
    const uint16_t dmin_h = max_neg_lo > 0.0f ? half_at_least(max_neg_lo / 63.0f, "Q4_K") : 0;
    const float dmin = fp16_ieee_to_fp32_value(dmin_h);
    uint8_t m[8], sc[8];
    float range[8], max_range = 0.0f;
    for (int s = 0; s < 8; ++s) {
      m[s] = dmin > 0.0f ? uint8_t(std::min(63.0f, std::ceil(neg_lo[s] / dmin))) : 0;
      range[s] = hi[s] + dmin * float(m[s]);
      max_range = std::max(max_range, range[s]);
    }
    const uint16_t d_h = max_range > 0.0f ? half_at_least(max_range / (15.0f * 63.0f), "Q4_K") : 0;
    const float d = fp16_ieee_to_fp32_value(d_h);
    for (int s = 0; s < 8; ++s) sc[s] = d > 0.0f ? uint8_t(std::min(63.0f, std::ceil(range[s] / (15.0f * d)))) : 0;
    put_half(b, d_h);
    put_half(b + 2, dmin_h);
    pack_scale_min_k4(sc, m, b + 4);
    uint8_t* qs = b + 4 + kKScaleSize;
    for (int s = 0; s < 8; ++s) {
      const float ds = d * float(sc[s]), ms = dmin * float(m[s]);  // as the decoder forms them
      for (int l = 0; l < 32; ++l) {
        const float q = ds > 0.0f ? std::nearbyint((x[32 * s + l] + ms) / ds) : 0.0f;
        const auto v = uint8_t(std::clamp(q, 0.0f, 15.0f));
        uint8_t& byte = qs[32 * (s / 2) + l];
        byte = (s % 2 == 0) ? uint8_t((byte & 0xF0) | v) : uint8_t((byte & 0x0F) | (v << 4));
      }
    }
  }
}

void quantize_q6_k(const float* x, uint8_t* b, size_t blocks) {
  for (size_t i = 0; i < blocks; ++i, x += kQK_K, b += kQ6_KBytes) {
    // Sub-block s of 16: x = d * sc_s * q, q in -31..31 (the format's -32 unused).
    float step[16], max_step = 0.0f;
    for (int s = 0; s < 16; ++s) {
      float amax = 0.0f;
      for (int l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(x[16 * s + l]));
      step[s] = amax / 31.0f;
      max_step = std::max(max_step, step[s]);
    }
    const uint16_t d_h = max_step > 0.0f ? half_at_least(max_step / 127.0f, "Q6_K") : 0;
    const float d = fp16_ieee_to_fp32_value(d_h);
    uint8_t* ql = b;
    uint8_t* qh = b + 128;
    auto* sc = reinterpret_cast<int8_t*>(b + 192);
    std::memset(b, 0, kQ6_KBytes);
    for (int s = 0; s < 16; ++s) sc[s] = d > 0.0f ? int8_t(std::min(127.0f, std::ceil(step[s] / d))) : 0;
    put_half(b + 208, d_h);
    for (int e = 0; e < kQK_K; ++e) {
      const float ds = d * float(sc[e / 16]);
      const float q = ds > 0.0f ? std::nearbyint(x[e] / ds) : 0.0f;
      const auto v = uint8_t(int(std::clamp(q, -32.0f, 31.0f)) + 32);  // 0..63
      // Element e = 128 h + 32 k + l: nibble k/2 of ql[64 h + l + 32 (k & 1)], field k of qh[32 h + l].
      const int h = e / 128, k = (e % 128) / 32, l = e % 32;
      uint8_t& low = ql[64 * h + l + 32 * (k & 1)];
      low = uint8_t(low | ((v & 0xF) << (4 * (k / 2))));
      qh[32 * h + l] = uint8_t(qh[32 * h + l] | ((v >> 4) << (2 * k)));
    }
  }
}

// ValueError unless `n` is a whole number of blocks and `bytes` its size.
void check_sizes(const char* fn, TensorType type, size_t n, size_t bytes) {
  const uint64_t want = tensor_type_row_bytes(type, int64_t(n));  // throws for a partial block
  if (bytes != want)
    throw ValueError(std::string(fn) + ": " + std::to_string(n) + " elements of " + tensor_type_name(type) +
                     " take " + std::to_string(want) + " bytes, but the byte span holds " + std::to_string(bytes) +
                     "; pass tensor_type_row_bytes(type, n) bytes");
}

}  // namespace

const char* tensor_type_name(TensorType type) {
  switch (type) {
    case TensorType::F32: return "F32";
    case TensorType::F16: return "F16";
    case TensorType::Q4_0: return "Q4_0";
    case TensorType::Q8_0: return "Q8_0";
    case TensorType::Q4_K: return "Q4_K";
    case TensorType::Q6_K: return "Q6_K";
    case TensorType::I32: return "I32";
    case TensorType::I64: return "I64";
    case TensorType::BF16: return "BF16";
  }
  return "?";
}

bool tensor_type_is_quantized(TensorType type) { return tensor_type_block_size(type) > 1; }

int64_t tensor_type_block_size(TensorType type) {
  switch (type) {
    case TensorType::F32:
    case TensorType::F16:
    case TensorType::I32:
    case TensorType::I64:
    case TensorType::BF16: return 1;
    case TensorType::Q4_0:
    case TensorType::Q8_0: return kQK;
    case TensorType::Q4_K:
    case TensorType::Q6_K: return kQK_K;
  }
  bad_type("tensor_type_block_size", type);
}

size_t tensor_type_block_bytes(TensorType type) {
  switch (type) {
    case TensorType::F32:
    case TensorType::I32: return 4;
    case TensorType::F16:
    case TensorType::BF16: return 2;
    case TensorType::I64: return 8;
    case TensorType::Q4_0: return kQ4_0Bytes;
    case TensorType::Q8_0: return kQ8_0Bytes;
    case TensorType::Q4_K: return kQ4_KBytes;
    case TensorType::Q6_K: return kQ6_KBytes;
  }
  bad_type("tensor_type_block_bytes", type);
}

size_t tensor_type_size(TensorType type) {
  // Reached with a cast value, a size of 0 would make every size computed from it silently 0.
  const int64_t block = [&] {
    switch (type) {
      case TensorType::F32:
      case TensorType::F16:
      case TensorType::Q4_0:
      case TensorType::Q8_0:
      case TensorType::Q4_K:
      case TensorType::Q6_K:
      case TensorType::I32:
      case TensorType::I64:
      case TensorType::BF16: return tensor_type_block_size(type);
    }
    bad_type("tensor_type_size", type);
  }();
  if (block > 1)
    throw ValueError(std::string("tensor_type_size: ") + tensor_type_name(type) + " stores blocks of " +
                     std::to_string(block) + " elements in " + std::to_string(tensor_type_block_bytes(type)) +
                     " bytes, not whole bytes per element; use tensor_type_row_bytes(type, n) for the bytes of n "
                     "elements");
  return tensor_type_block_bytes(type);
}

uint64_t tensor_type_row_bytes(TensorType type, int64_t n) {
  const int64_t block = tensor_type_block_size(type);
  if (n < 0 || n % block != 0)
    throw ValueError("tensor_type_row_bytes: " + std::string(tensor_type_name(type)) + " stores blocks of " +
                     std::to_string(block) + " elements; " + std::to_string(n) +
                     " elements are not a whole number of blocks; give a multiple of " + std::to_string(block));
  return uint64_t(n / block) * tensor_type_block_bytes(type);
}

void dequantize_row(TensorType type, std::span<const uint8_t> src, std::span<float> dst) {
  check_sizes("dequantize_row", type, dst.size(), src.size());
  const size_t n = dst.size();
  if (n == 0 && (type != TensorType::I32 && type != TensorType::I64)) return;  // empty spans may hold null
  switch (type) {
    case TensorType::F32: std::memcpy(dst.data(), src.data(), src.size()); return;
    case TensorType::F16:
    case TensorType::BF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src.data() + 2 * i, 2);
        dst[i] = type == TensorType::F16 ? f16_to_float(h) : bf16_to_float(h);
      }
      return;
    case TensorType::Q8_0: dequantize_q8_0(src.data(), dst.data(), n / kQK); return;
    case TensorType::Q4_0: dequantize_q4_0(src.data(), dst.data(), n / kQK); return;
    case TensorType::Q4_K: dequantize_q4_k(src.data(), dst.data(), n / kQK_K); return;
    case TensorType::Q6_K: dequantize_q6_k(src.data(), dst.data(), n / kQK_K); return;
    case TensorType::I32:
    case TensorType::I64: break;
  }
  throw ValueError(std::string("dequantize_row: ") + tensor_type_name(type) +
                   " holds integers, not a float type; read its bytes as they are");
}

void quantize_row(TensorType type, std::span<const float> src, std::span<uint8_t> dst) {
  check_sizes("quantize_row", type, src.size(), dst.size());
  const size_t n = src.size();
  if (n == 0 && (type != TensorType::I32 && type != TensorType::I64)) return;  // empty spans may hold null
  if (tensor_type_is_quantized(type))
    for (size_t i = 0; i < n; ++i)
      if (!std::isfinite(src[i]))
        throw ValueError("quantize_row: value " + std::to_string(i) + " is " + std::to_string(src[i]) + "; " +
                         tensor_type_name(type) +
                         " blocks share a scale, which a NaN or infinity would make NaN for the whole block; "
                         "replace non-finite values first or store the tensor as F32");
  switch (type) {
    case TensorType::F32: std::memcpy(dst.data(), src.data(), dst.size()); return;
    case TensorType::F16:
    case TensorType::BF16:
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = type == TensorType::F16 ? float_to_f16(src[i]) : float_to_bf16(src[i]);
        std::memcpy(dst.data() + 2 * i, &h, 2);
      }
      return;
    case TensorType::Q8_0: quantize_q8_0(src.data(), dst.data(), n / kQK); return;
    case TensorType::Q4_0: quantize_q4_0(src.data(), dst.data(), n / kQK); return;
    case TensorType::Q4_K: quantize_q4_k(src.data(), dst.data(), n / kQK_K); return;
    case TensorType::Q6_K: quantize_q6_k(src.data(), dst.data(), n / kQK_K); return;
    case TensorType::I32:
    case TensorType::I64: break;
  }
  throw ValueError(std::string("quantize_row: ") + tensor_type_name(type) +
                   " holds integers, not a float type; store int32 and int64 tensors as they are");
}

}  // namespace tensorgrad::io
