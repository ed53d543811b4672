#pragma once
// ggml's tensor element types and their block formats: the element types a
// GGUF file stores, with ggml's type ids, and the row-level conversions
// between float32 and the quantized blocks (ggml's ggml-common.h and
// ggml-quants.c define the layouts; this is an independent implementation).
//
// A quantized type stores a row in blocks of a fixed number of elements
// (its block size), each block a fixed number of bytes holding one or more
// float16 scales and the small integers they multiply:
//
//   Q8_0  32 elements, 34 bytes:  d (f16), qs[32] (int8);       x = d * q
//   Q4_0  32 elements, 18 bytes:  d (f16), qs[16] (two 4-bit q); x = d * (q - 8),
//         element j in the low nibble of qs[j], element j + 16 in its high one
//   Q4_K  256 elements, 144 bytes: d, dmin (f16), scales[12] (eight 6-bit
//         scales and eight 6-bit mins), qs[128] (4-bit q); sub-block s of 32
//         elements: x = d * scale[s] * q - dmin * min[s]
//   Q6_K  256 elements, 210 bytes: ql[128] (low 4 bits of q), qh[64] (high 2
//         bits), scales[16] (int8), d (f16); sub-block s of 16 elements:
//         x = d * scales[s] * (q - 32)
//
// A row's element count must be a multiple of its type's block size (ggml's
// ggml_row_size); an unquantized type has a block of one element.
#include <cstddef>
#include <cstdint>
#include <span>

namespace tensorgrad::io {

/// The tensor element types tensorgrad reads and writes, with ggml's type
/// ids (enum ggml_type). Any other id in a file is a FormatError naming it.
enum class TensorType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,   ///< blocks of 32: one f16 scale, 4-bit values (ggml's block_q4_0)
  Q8_0 = 8,   ///< blocks of 32: one f16 scale, 8-bit values (block_q8_0)
  Q4_K = 12,  ///< super-blocks of 256: f16 scale and min, 6-bit sub-block scales and mins, 4-bit values (block_q4_K)
  Q6_K = 14,  ///< super-blocks of 256: f16 scale, int8 sub-block scales, 6-bit values (block_q6_K)
  I32 = 26,
  I64 = 27,
  BF16 = 30
};

/// ggml's name of the type: "F32", "F16", "Q4_0", "Q8_0", "Q4_K", "Q6_K",
/// "I32", "I64", "BF16" ("?" for a value that is none of the enumerators).
const char* tensor_type_name(TensorType type);
/// Whether `type` is stored in blocks of more than one element (Q4_0, Q8_0,
/// Q4_K, Q6_K).
bool tensor_type_is_quantized(TensorType type);
/// Elements per block (ggml's ggml_blck_size): 1 for F32, F16, BF16, I32
/// and I64; 32 for Q4_0 and Q8_0; 256 (ggml's QK_K) for Q4_K and Q6_K.
/// Throws ValueError for a value that is none of the enumerators.
int64_t tensor_type_block_size(TensorType type);
/// Bytes per block (ggml's ggml_type_size): 4 for F32 and I32, 2 for F16
/// and BF16, 8 for I64, 18 for Q4_0, 34 for Q8_0, 144 for Q4_K, 210 for
/// Q6_K. Throws ValueError as tensor_type_block_size.
size_t tensor_type_block_bytes(TensorType type);
/// Bytes of one element of an unquantized type (4 for F32 and I32, 2 for
/// F16 and BF16, 8 for I64). Throws ValueError for a quantized type (whose
/// elements have no whole-byte size: use tensor_type_row_bytes) and for a
/// value that is none of the enumerators.
size_t tensor_type_size(TensorType type);
/// Bytes of `n` elements of `type` (ggml's ggml_row_size): n / block size
/// blocks of tensor_type_block_bytes. Throws ValueError when `n` is negative
/// or not a multiple of the block size (naming both), and as
/// tensor_type_block_size.
uint64_t tensor_type_row_bytes(TensorType type, int64_t n);

/// Decodes `dst.size()` elements of `type` from `src` into float32, as
/// ggml's dequantize_row_* do (F32 copied, F16 and BF16 converted, the
/// quantized types by the formulas above, in ggml's order of float
/// operations so the results are the same floats). `dst.size()` must be a
/// multiple of the block size and `src.size()` exactly
/// tensor_type_row_bytes(type, dst.size()) (else ValueError naming both);
/// I32 and I64 are not float types (ValueError).
void dequantize_row(TensorType type, std::span<const uint8_t> src, std::span<float> dst);

/// Encodes `src.size()` float32 values as `type` into `dst`, which must
/// hold exactly tensor_type_row_bytes(type, src.size()) bytes (ValueError
/// otherwise, as for a size that is not a multiple of the block size).
///  - F32 copied; F16 and BF16 rounded to nearest even (NaN stays NaN).
///  - Q8_0 by ggml's quantize_row_q8_0_ref: d = max|x| / 127, q = round(x / d);
///    each value decodes within d/2 (plus the f16 rounding of d: at most
///    127 |d - f16(d)|).
///  - Q4_0 by ggml's quantize_row_q4_0_ref: d = m / -8, m the block's value
///    of largest magnitude, q = min(15, trunc(x / d + 8.5)); each value
///    decodes within d/2 (plus 8 |d - f16(d)|) except one of sign opposite
///    to m and magnitude above 7.5 |d|, clamped to q = 15 (within |d|).
///  - Q4_K and Q6_K by a plain encoder of tensorgrad's own (not ggml's
///    search for the best scales, so the bytes differ from llama.cpp's
///    quantizer, but they decode by ggml's formulas): Q4_K takes each
///    sub-block's min (at most 0) and range over 15 steps, Q6_K each
///    sub-block's largest magnitude over 31 steps; the f16 super-block
///    scales and the 6-bit or int8 sub-block scales are rounded up (so no
///    value is clamped) and the values to nearest: each value decodes
///    within half its sub-block's step (Q4_K: at most (max - min(0, min)) / 30
///    plus about 1/945 of the super-block's largest magnitude; Q6_K: at most
///    max|x| / 62 plus 1/7874 of the super-block's).
/// The quantized types refuse a NaN or infinite value (ValueError giving
/// its index), which would hide in a block's scale and turn every value of
/// the block into NaN; I32 and I64 are not float types (ValueError).
void quantize_row(TensorType type, std::span<const float> src, std::span<uint8_t> dst);

}  // namespace tensorgrad::io
