// Tests of ggml's quantized block types (include/tensorgrad/io/quants.h) and
// of GGUF files holding them (GGUFWriter::add_tensor, GGUFFile::read): known
// answers from blocks built byte by byte and decoded here by ggml's formulas
// written out plainly, round trips within each format's bound, sizes, and the
// reader's refusals.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "tensorgrad/core/error.h"
#include "tensorgrad/io/gguf.h"
#include "tensorgrad/io/quants.h"
#include "sealed_device.h"

namespace fs = std::filesystem;
using namespace tensorgrad;
using namespace tensorgrad::io;

namespace {

using Bytes = std::vector<uint8_t>;

template <class E, class F>
void expect_throw_with(F&& f, std::initializer_list<std::string> needles) {
  try {
    f();
    ADD_FAILURE() << "expected an exception, none was thrown";
  } catch (const E& e) {
    const std::string msg = e.what();
    for (const std::string& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type; message: " << e.what();
  }
}

void put_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }
uint16_t get_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

std::vector<float> decode(TensorType type, const Bytes& block, size_t n) {
  std::vector<float> y(n);
  dequantize_row(type, block, y);
  return y;
}

std::vector<float> normal_values(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Where a tensor's info sits in a file: its type and offset fields, and
// its first dimension (ne[0]).
struct InfoPos {
  size_t ne0, type, offset;
};
InfoPos info_pos(const Bytes& b, const std::string& name) {
  // The name's uint64 length, the name, n_dims, ne[n_dims], type, offset.
  std::string needle(8, '\0');
  const uint64_t len = name.size();
  std::memcpy(needle.data(), &len, 8);
  needle += name;
  const auto it = std::search(b.begin(), b.end(), needle.begin(), needle.end());
  EXPECT_NE(it, b.end()) << name;
  const size_t at = size_t(it - b.begin()) + needle.size();
  uint32_t n_dims;
  std::memcpy(&n_dims, b.data() + at, 4);
  return {at + 4, at + 4 + 8 * n_dims, at + 4 + 8 * n_dims + 4};
}

Bytes file_with(TensorType type, const Shape& shape, const Bytes& block) {
  // A tensor of `type` whose every block is `block`: written by the writer
  // (zeros), then its data replaced byte by byte.
  GGUFWriter w;
  w.add_tensor("q", Tensor::zeros(shape), type);
  Bytes b = w.to_bytes();
  const GGUFFile f = GGUFFile::parse(b);
  const TensorInfo& t = f.tensors()[0];
  EXPECT_EQ(t.nbytes % block.size(), 0u);
  for (uint64_t at = 0; at < t.nbytes; at += block.size()) std::memcpy(b.data() + t.offset + at, block.data(), block.size());
  return b;
}

fs::path temp_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("tensorgrad_gguf_quants_" + name + "_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

// ---------------------------------------------------------------- sizes

TEST(GGUFQuants, BlockSizesAndRowBytesAreGgmls) {
  struct Case {
    TensorType type;
    int64_t block;
    size_t bytes;
    const char* name;
  };
  const Case cases[] = {{TensorType::F32, 1, 4, "F32"},     {TensorType::F16, 1, 2, "F16"},
                        {TensorType::BF16, 1, 2, "BF16"},   {TensorType::I32, 1, 4, "I32"},
                        {TensorType::I64, 1, 8, "I64"},     {TensorType::Q4_0, 32, 18, "Q4_0"},
                        {TensorType::Q8_0, 32, 34, "Q8_0"}, {TensorType::Q4_K, 256, 144, "Q4_K"},
                        {TensorType::Q6_K, 256, 210, "Q6_K"}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_STREQ(tensor_type_name(c.type), c.name);
    EXPECT_EQ(tensor_type_block_size(c.type), c.block);
    EXPECT_EQ(tensor_type_block_bytes(c.type), c.bytes);
    EXPECT_EQ(tensor_type_is_quantized(c.type), c.block > 1);
    EXPECT_EQ(tensor_type_row_bytes(c.type, 0), 0u);
    EXPECT_EQ(tensor_type_row_bytes(c.type, 4096), uint64_t(4096 / c.block) * c.bytes);
  }
  // ggml's ids.
  EXPECT_EQ(uint32_t(TensorType::Q4_0), 2u);
  EXPECT_EQ(uint32_t(TensorType::Q8_0), 8u);
  EXPECT_EQ(uint32_t(TensorType::Q4_K), 12u);
  EXPECT_EQ(uint32_t(TensorType::Q6_K), 14u);
  EXPECT_EQ(tensor_type_row_bytes(TensorType::Q4_0, 64), 36u);
  EXPECT_EQ(tensor_type_row_bytes(TensorType::Q6_K, 4096), 16u * 210u);
}

TEST(GGUFQuants, RowBytesOfAPartialBlockIsAnError) {
  expect_throw_with<ValueError>([] { (void)tensor_type_row_bytes(TensorType::Q4_0, 33); },
                                {"Q4_0", "blocks of 32", "33", "multiple of 32"});
  expect_throw_with<ValueError>([] { (void)tensor_type_row_bytes(TensorType::Q6_K, 128); },
                                {"Q6_K", "blocks of 256", "128"});
  expect_throw_with<ValueError>([] { (void)tensor_type_row_bytes(TensorType::F32, -1); }, {"-1"});
}

TEST(GGUFQuants, ElementSizeOfABlockTypePointsToRowBytes) {
  EXPECT_EQ(tensor_type_size(TensorType::F32), 4u);
  EXPECT_EQ(tensor_type_size(TensorType::BF16), 2u);
  for (TensorType t : {TensorType::Q4_0, TensorType::Q8_0, TensorType::Q4_K, TensorType::Q6_K})
    expect_throw_with<ValueError>([&] { (void)tensor_type_size(t); },
                                  {tensor_type_name(t), "tensor_type_row_bytes"});
  expect_throw_with<ValueError>([] { (void)tensor_type_block_size(TensorType(13)); },
                                {"13 is not a TensorType", "Q4_K (12)"});
}

TEST(GGUFQuants, RowFunctionsCheckTheirSpans) {
  std::vector<float> y(32);
  Bytes b(33);
  expect_throw_with<ValueError>([&] { dequantize_row(TensorType::Q8_0, b, y); }, {"34 bytes", "33"});
  expect_throw_with<ValueError>([&] { quantize_row(TensorType::Q8_0, y, b); }, {"34 bytes", "33"});
  std::vector<float> y31(31);
  Bytes b34(34);
  expect_throw_with<ValueError>([&] { dequantize_row(TensorType::Q8_0, b34, y31); }, {"31", "32"});
  Bytes b4(4 * 32);
  expect_throw_with<ValueError>([&] { dequantize_row(TensorType::I32, b4, y); }, {"I32", "not a float type"});
}

// ---------------------------------------------------------------- known answers

TEST(GGUFQuantsKnownAnswer, Q8_0) {
  // d = 0.5 (f16 0x3800), qs[j] = -128, -120, ... (int8).
  Bytes b(34);
  put_u16(b.data(), 0x3800);
  for (int j = 0; j < 32; ++j) b[2 + j] = uint8_t(int8_t(-128 + 8 * j + (j == 31 ? 7 : 0)));
  const std::vector<float> y = decode(TensorType::Q8_0, b, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 0.5f * float(int8_t(b[2 + j]))) << j;
  EXPECT_EQ(y[0], -64.0f);
  EXPECT_EQ(y[31], 0.5f * 127.0f);
}

TEST(GGUFQuantsKnownAnswer, Q4_0) {
  // d = -0.25 (f16 0xB400); byte j holds element j in its low nibble (j) and
  // element j + 16 in its high one (15 - j); x = d * (q - 8).
  Bytes b(18);
  put_u16(b.data(), 0xB400);
  for (int j = 0; j < 16; ++j) b[2 + j] = uint8_t(j | ((15 - j) << 4));
  const std::vector<float> y = decode(TensorType::Q4_0, b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], -0.25f * float(j - 8)) << j;
    EXPECT_EQ(y[j + 16], -0.25f * float(15 - j - 8)) << j;
  }
  EXPECT_EQ(y[0], 2.0f);
}

TEST(GGUFQuantsKnownAnswer, Q4_K) {
  // d = 0.5 (0x3800), dmin = 0.25 (0x3400); sub-block s of 32 elements has
  // 6-bit scale sc[s] and min m[s], packed as ggml's get_scale_min_k4 reads
  // them: bytes 0-3 the scales 0-3 (low 6 bits) with the top 2 bits of
  // scales 4-7 above them; bytes 4-7 the mins 0-3 with the top 2 bits of
  // mins 4-7; bytes 8-11 the low 4 bits of scale (low nibble) and min (high
  // nibble) 4-7. E.g. byte 0 = 1 | (45 >> 4) << 6 = 0x81, byte 8 = (45 & 15) | (40 & 15) << 4 = 0x8D.
  const int sc[8] = {1, 63, 17, 32, 45, 2, 60, 33};
  const int m[8] = {0, 5, 63, 12, 40, 1, 50, 7};
  const uint8_t scales[12] = {0x81, 0x3F, 0xD1, 0xA0, 0x80, 0x05, 0xFF, 0x0C, 0x8D, 0x12, 0x2C, 0x71};
  Bytes b(144);
  put_u16(b.data(), 0x3800);
  put_u16(b.data() + 2, 0x3400);
  std::memcpy(b.data() + 4, scales, 12);
  for (int i = 0; i < 128; ++i) b[16 + i] = uint8_t(i * 37 + 11);
  const std::vector<float> y = decode(TensorType::Q4_K, b, 256);
  for (int e = 0; e < 256; ++e) {
    // Element e: sub-block e / 32; the 64 elements of chunk e / 64 are the low
    // nibbles of its 32 bytes, then their high nibbles.
    const int s = e / 32;
    const uint8_t byte = b[16 + 32 * (e / 64) + e % 32];
    const int q = (s % 2 == 0) ? (byte & 0xF) : (byte >> 4);
    EXPECT_EQ(y[e], 0.5f * float(sc[s]) * float(q) - 0.25f * float(m[s])) << e;
  }
  // Element 64: sub-block 2 (scale 17, min 63), low nibble of byte 64 of the block ((64 * 37 + 11) & 255 = 123 -> 11).
  EXPECT_EQ(y[64], 0.5f * 17.0f * 11.0f - 0.25f * 63.0f);
}

TEST(GGUFQuantsKnownAnswer, Q6_K) {
  // ql[128], qh[64], scales[16] (int8), d = 0.125 (0x3000). Element e =
  // 128 h + 32 k + l: low 4 bits from ql[64 h + l + 32 (k % 2)] (low nibble
  // for k < 2, high for k >= 2), high 2 bits from bits 2k..2k+1 of
  // qh[32 h + l]; x = d * scales[e / 16] * (q - 32).
  Bytes b(210);
  for (int i = 0; i < 128; ++i) b[i] = uint8_t(i * 53 + 7);
  for (int i = 0; i < 64; ++i) b[128 + i] = uint8_t(i * 29 + 200);
  const int8_t scales[16] = {-128, 127, 1, -1, 0, 5, -7, 33, 64, -64, 12, 99, -99, 2, 3, -4};
  std::memcpy(b.data() + 192, scales, 16);
  put_u16(b.data() + 208, 0x3000);
  const std::vector<float> y = decode(TensorType::Q6_K, b, 256);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, k = (e % 128) / 32, l = e % 32;
    const uint8_t lowbyte = b[64 * h + l + 32 * (k % 2)];
    const int low = k < 2 ? (lowbyte & 0xF) : (lowbyte >> 4);
    const int high = (b[128 + 32 * h + l] >> (2 * k)) & 3;
    const int q = (low | (high << 4)) - 32;
    EXPECT_EQ(y[e], 0.125f * float(scales[e / 16]) * float(q)) << e;
  }
}

TEST(GGUFQuantsKnownAnswer, FilesOfEachTypeReadAsTheirBlocks) {
  // The same hand-built blocks through a file: read() and read_into() give
  // dequantize_row's values for every block of a {3, 256} tensor.
  Bytes q8(34), q4(18), q4k(144), q6k(210);
  put_u16(q8.data(), 0x3400);
  for (int j = 0; j < 32; ++j) q8[2 + j] = uint8_t(j * 9);
  put_u16(q4.data(), 0x3C00);
  for (int j = 0; j < 16; ++j) q4[2 + j] = uint8_t(j * 17 + 3);
  put_u16(q4k.data(), 0x3800);
  put_u16(q4k.data() + 2, 0x2C00);
  for (int i = 4; i < 144; ++i) q4k[i] = uint8_t(i * 31);
  for (int i = 0; i < 208; ++i) q6k[i] = uint8_t(i * 13 + 1);
  put_u16(q6k.data() + 208, 0x2000);
  const std::pair<TensorType, const Bytes*> cases[] = {
      {TensorType::Q8_0, &q8}, {TensorType::Q4_0, &q4}, {TensorType::Q4_K, &q4k}, {TensorType::Q6_K, &q6k}};
  for (auto [type, block] : cases) {
    SCOPED_TRACE(tensor_type_name(type));
    const Bytes file = file_with(type, Shape{3, 256}, *block);
    const GGUFFile f = GGUFFile::parse(file);
    const TensorInfo& info = f.tensors()[0];
    EXPECT_EQ(info.type, type);
    EXPECT_EQ(info.shape, (Shape{3, 256}));
    EXPECT_EQ(info.nbytes, 3 * tensor_type_row_bytes(type, 256));
    const int64_t per_block = tensor_type_block_size(type);
    const std::vector<float> one = decode(type, *block, size_t(per_block));
    const Tensor t = f.read("q");
    ASSERT_EQ(t.dtype(), DType::Float32);
    Tensor into = Tensor::zeros(Shape{3, 256});
    f.read_into("q", into);
    for (int64_t i = 0; i < 3 * 256; ++i) {
      ASSERT_EQ(t.data<float>()[i], one[size_t(i % per_block)]) << i;
      ASSERT_EQ(into.data<float>()[i], one[size_t(i % per_block)]) << i;
    }
  }
}

// ---------------------------------------------------------------- ggml's own answers

// Bytes and floats that ggml's ggml-quants.c (ggml-org/ggml d99724f2, built
// with -O2 for x86-64) gave for x[i] = ((37 i) mod 61 - 30) / 8, less 9.5
// where i mod 32 = 7 (every value exact in float32): its reference
// quantizers' Q8_0 and Q4_0 blocks for x[0..31], which tensorgrad's encoder
// must reproduce byte for byte, and its Q4_K and Q6_K reference blocks for
// x[0..255] with values its dequantize_row_q4_K and _q6_K gave, which
// tensorgrad's decoders must reproduce bit for bit.
std::vector<float> ggml_input() {
  std::vector<float> x(256);
  for (int i = 0; i < 256; ++i) x[size_t(i)] = float((i * 37) % 61 - 30) / 8.0f - (i % 32 == 7 ? 9.5f : 0.0f);
  return x;
}

TEST(GGUFQuantsGgml, Q8_0AndQ4_0EncodeToGgmlsBytes) {
  const Bytes q8_0 = {
  0xBB, 0x2D, 0xD6, 0x0A, 0xE8, 0x1C, 0xFA, 0xD9, 0x0D, 0x81, 0x1F, 0xFD, 0xDC, 0x0F, 0xEE, 0x21,
  0x00, 0xDF, 0x12, 0xF1, 0x24, 0x03, 0xE1, 0x15, 0xF3, 0x27, 0x06, 0xE4, 0x18, 0xF6, 0x2A, 0x08,
  0xE7, 0x1B};
  const Bytes q4_0 = {
  0xB0, 0x3D, 0x95, 0x79, 0xA7, 0x8A, 0x68, 0x96, 0x79, 0xA0, 0x8A, 0x68, 0x96, 0x79, 0xB7, 0x9A,
  0x68, 0xA6};
  const std::vector<float> x = ggml_input();
  Bytes b8(34), b4(18);
  quantize_row(TensorType::Q8_0, std::span<const float>(x.data(), 32), b8);
  quantize_row(TensorType::Q4_0, std::span<const float>(x.data(), 32), b4);
  EXPECT_EQ(b8, q8_0);
  EXPECT_EQ(b4, q4_0);
}

TEST(GGUFQuantsGgml, Q4_KAndQ6_KDecodeToGgmlsFloats) {
  const Bytes q4_k = {
  0x85, 0x24, 0x64, 0x32, 0xB8, 0xEC, 0xBD, 0xF0, 0xB9, 0xE9, 0xBF, 0xF0, 0x05, 0x75, 0x7B, 0xEF,
  0xA8, 0x6C, 0xC9, 0x8E, 0xEB, 0xA8, 0x6D, 0x00, 0x8E, 0xEB, 0xA8, 0x7D, 0xCA, 0x9F, 0xFC, 0xB8,
  0x7D, 0xDA, 0x9F, 0xFC, 0xB9, 0x7D, 0xDA, 0x9F, 0xFC, 0xB9, 0x7E, 0xDB, 0xAF, 0x6C, 0xC9, 0x8E,
  0x9E, 0xEB, 0xB8, 0x7D, 0xDA, 0x9E, 0xFB, 0x00, 0x8D, 0xDA, 0xAE, 0xFC, 0xB9, 0x8D, 0xDA, 0xAF,
  0xFC, 0xC9, 0x8D, 0xEB, 0xAF, 0xFC, 0xC9, 0x9E, 0xEB, 0xAF, 0x7C, 0xCA, 0x9E, 0xEB, 0xB8, 0x7D,
  0x8C, 0xD7, 0xAE, 0xF9, 0xC5, 0x8C, 0xD7, 0x00, 0xFA, 0xC5, 0x9C, 0xE8, 0xAF, 0xFA, 0xC6, 0x9D,
  0xE8, 0xBF, 0xFB, 0xC6, 0x9D, 0xE8, 0xBF, 0x8B, 0xD6, 0x9D, 0xE9, 0xB4, 0x8B, 0xD7, 0xAE, 0xF9,
  0xEA, 0xB6, 0x8C, 0xC8, 0xAE, 0xEA, 0xB6, 0x00, 0xD8, 0xAF, 0xEB, 0xB7, 0x9D, 0xD9, 0xAF, 0xEB,
  0xC7, 0x9D, 0xD9, 0xAF, 0x8B, 0xC7, 0x9D, 0xD9, 0xB5, 0x8C, 0xC8, 0x9E, 0xEA, 0xB6, 0x8C, 0xC8};
  const Bytes q6_k = {
  0x66, 0xF2, 0x7A, 0x37, 0xBF, 0x76, 0xF3, 0x01, 0x37, 0xCF, 0x87, 0x04, 0x8C, 0x48, 0xD0, 0x88,
  0xE3, 0x7B, 0x15, 0x9E, 0x37, 0xC1, 0x59, 0xE3, 0x7C, 0x15, 0xAE, 0x37, 0xC1, 0x5A, 0xE3, 0x8C,
  0xAE, 0x82, 0xF4, 0x58, 0x4A, 0xAF, 0x93, 0x10, 0x69, 0x5B, 0xB0, 0xA4, 0x06, 0x7A, 0x6C, 0xC0,
  0xC8, 0x3E, 0xA6, 0x0C, 0x83, 0xEA, 0x50, 0xC8, 0x3E, 0xA5, 0x1C, 0x73, 0xEA, 0x51, 0xC7, 0x3E,
  0xF6, 0x37, 0x6E, 0x9F, 0xC0, 0x07, 0x48, 0x00, 0xA0, 0xD1, 0x18, 0x59, 0x80, 0xB1, 0xE2, 0x29,
  0x5A, 0xE2, 0x7C, 0x05, 0xAE, 0x37, 0xC0, 0x5A, 0xF3, 0x8C, 0x15, 0xAF, 0x38, 0xD1, 0x5A, 0xF3,
  0x76, 0x04, 0x8B, 0x48, 0xC0, 0x87, 0x04, 0x00, 0x59, 0xD0, 0x98, 0x15, 0x9C, 0x5A, 0xD1, 0x98,
  0x51, 0xC8, 0x3F, 0xA5, 0x1C, 0x73, 0xEA, 0x50, 0xC7, 0x3E, 0x95, 0x1C, 0x72, 0xEA, 0x50, 0xB7,
  0x65, 0x96, 0x59, 0x66, 0x99, 0x65, 0x96, 0x00, 0x66, 0x99, 0x69, 0xA6, 0x99, 0x66, 0x9A, 0x69,
  0xD1, 0xBA, 0x14, 0xED, 0x4B, 0xD1, 0xBE, 0x04, 0xED, 0x4B, 0x10, 0xBE, 0x04, 0xE1, 0x7B, 0x10,
  0x96, 0x99, 0x66, 0x99, 0x69, 0xA6, 0x99, 0x00, 0x9A, 0x69, 0xA6, 0x99, 0x67, 0x9A, 0x69, 0xA6,
  0xBE, 0x04, 0xED, 0x4B, 0x10, 0xBE, 0x04, 0xE1, 0x7B, 0x10, 0xBE, 0x47, 0xE1, 0x7B, 0x14, 0xAE,
  0x8A, 0x27, 0xAD, 0xD9, 0x80, 0x27, 0x9C, 0xD9, 0xBF, 0x26, 0x92, 0xDA, 0xB1, 0x26, 0x84, 0xD9,
  0x5F, 0x9A};
  const std::pair<int, uint32_t> q4_k_values[] = {{0, 0xC05E5800u}, {7, 0xC1362200u}, {37, 0xBED71000u}, {100, 0x3FB71800u}, {200, 0xBFDB9400u}, {255, 0x3F770400u}};
  const std::pair<int, uint32_t> q6_k_values[] = {{0, 0xC06AEF20u}, {7, 0xC13612ECu}, {37, 0xBE843340u}, {100, 0x3F9F4700u}, {200, 0xBFBCBE60u}, {255, 0x3FAAD330u}};
  const std::vector<float> y4 = decode(TensorType::Q4_K, q4_k, 256), y6 = decode(TensorType::Q6_K, q6_k, 256);
  for (auto [i, bits] : q4_k_values) EXPECT_EQ(std::bit_cast<uint32_t>(y4[size_t(i)]), bits) << "Q4_K value " << i;
  for (auto [i, bits] : q6_k_values) EXPECT_EQ(std::bit_cast<uint32_t>(y6[size_t(i)]), bits) << "Q6_K value " << i;
  // And near what ggml encoded (its own search for scales; steps up to max|x| / 15 and / 31 of a sub-block).
  const std::vector<float> x = ggml_input();
  for (size_t i = 0; i < 256; ++i) {
    EXPECT_NEAR(y4[i], x[i], 0.6) << i;
    EXPECT_NEAR(y6[i], x[i], 0.25) << i;
  }
}

// ---------------------------------------------------------------- encoders

TEST(GGUFQuantsEncode, Q8_0IsGgmlsReference) {
  // quantize_row_q8_0_ref: d = max|x| / 127, q = round(x / d).
  std::vector<float> x(64);
  for (int j = 0; j < 64; ++j) x[j] = 0.37f * float(j - 20) + (j % 3 == 0 ? 0.05f : 0.0f);
  Bytes b(68);
  quantize_row(TensorType::Q8_0, x, b);
  for (int blk = 0; blk < 2; ++blk) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[32 * blk + j]));
    const float d = amax / 127.0f;
    EXPECT_EQ(get_u16(b.data() + 34 * blk), float_to_f16(d));
    for (int j = 0; j < 32; ++j)
      EXPECT_EQ(int8_t(b[34 * blk + 2 + j]), int8_t(std::roundf(x[32 * blk + j] * (1.0f / d)))) << blk << " " << j;
  }
}

TEST(GGUFQuantsEncode, Q4_0IsGgmlsReference) {
  // quantize_row_q4_0_ref: m = the value of largest magnitude (here -1.6),
  // d = m / -8 = 0.2, q = min(15, trunc(x / d + 8.5)): x = 0.1 (j - 16) gives
  // trunc(0.5 j + 0.5), and the top value, 1.5 = 7.5 d, is clamped from 16 to 15.
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = 0.1f * float(j - 16);
  Bytes b(18);
  quantize_row(TensorType::Q4_0, x, b);
  const float d = x[0] / -8.0f;
  EXPECT_EQ(get_u16(b.data()), float_to_f16(d));
  for (int j = 0; j < 32; ++j) {
    volatile float scaled = x[j] * (1.0f / d);  // rounded before the addition, as ggml's C (no fused multiply-add)
    const int want = std::min(15, int(int8_t(scaled + 8.5f)));
    const int got = j < 16 ? (b[2 + j] & 0xF) : (b[2 + j - 16] >> 4);
    EXPECT_EQ(got, want) << j;
  }
  EXPECT_EQ(b[2] & 0xF, 0);       // x = -1.6 -> q = 0
  EXPECT_EQ(b[2 + 15] >> 4, 15);  // x = 1.5 -> 16, clamped
}

TEST(GGUFQuantsEncode, Q8_0AndQ4_0RoundTripWithinHalfAStep) {
  // Per value: |x - decoded| <= d/2 + (rounding of d to f16: |q| |d - f16(d)|)
  // with d the block's unrounded scale (Q8_0: max|x| / 127; Q4_0: m / -8),
  // except Q4_0's clamped top (x / d >= 7.5, decoded as 7 d): within |d| + 7 |d - f16(d)|.
  std::vector<float> x = normal_values(32 * 64, 1);
  x[5] = 40.0f;  // an outlier
  x[100] = -1e-3f;
  std::fill(x.begin() + 320, x.begin() + 352, 0.0f);  // an all-zero block: d = 0, decodes to 0
  for (TensorType type : {TensorType::Q8_0, TensorType::Q4_0}) {
    SCOPED_TRACE(tensor_type_name(type));
    Bytes b(size_t(tensor_type_row_bytes(type, int64_t(x.size()))));
    quantize_row(type, x, b);
    std::vector<float> y(x.size());
    dequantize_row(type, b, y);
    for (size_t blk = 0; blk < x.size() / 32; ++blk) {
      float amax = 0, m = 0;
      for (int j = 0; j < 32; ++j)
        if (std::fabs(x[32 * blk + j]) > amax) amax = std::fabs(x[32 * blk + j]), m = x[32 * blk + j];
      const float d = type == TensorType::Q8_0 ? amax / 127.0f : std::fabs(m / -8.0f);
      const float dh = std::fabs(f16_to_float(float_to_f16(d)));
      const float qmax = type == TensorType::Q8_0 ? 127.0f : 8.0f;
      const float slack = qmax * std::fabs(d - dh) + 1e-6f * amax;
      for (int j = 0; j < 32; ++j) {
        const float xv = x[32 * blk + j], err = std::fabs(xv - y[32 * blk + j]);
        const bool clamped = type == TensorType::Q4_0 && d > 0 && xv / (m / -8.0f) >= 7.5f;
        ASSERT_LE(err, (clamped ? d : d / 2) + slack) << "block " << blk << " value " << j << " x " << xv;
      }
    }
  }
}

// Q4_K and Q6_K: tensorgrad's encoder, decoded by ggml's formulas (the
// known-answer tests above). Bounds: Q6_K: half a step of its sub-block of
// 16, the step at most max|x_sub| / 31 + d (d = the super-block's f16 scale,
// about max|x_block| / (31 * 127)); Q4_K: half a step, at most
// (max - min(0, min)) / 15 of its sub-block of 32 plus the 6-bit roundings
// of the scale and min (each at most the super-block's spread / 945).
TEST(GGUFQuantsEncode, Q4_KAndQ6_KRoundTripWithinHalfAStep) {
  std::vector<float> x = normal_values(256 * 8, 2, 0.05f);
  x[7] = 3.0f;
  for (int i = 256; i < 512; ++i) x[size_t(i)] = 1.0f + 0.001f * float(i);  // all positive: min 0
  for (int i = 512; i < 768; ++i) x[size_t(i)] = -2.0f + 0.003f * float(i - 512);  // all negative
  std::fill(x.begin() + 768, x.begin() + 1024, 0.0f);
  for (TensorType type : {TensorType::Q4_K, TensorType::Q6_K}) {
    SCOPED_TRACE(tensor_type_name(type));
    Bytes b(size_t(tensor_type_row_bytes(type, int64_t(x.size()))));
    quantize_row(type, x, b);
    std::vector<float> y(x.size());
    dequantize_row(type, b, y);
    const int sub = type == TensorType::Q4_K ? 32 : 16;
    for (size_t blk = 0; blk < x.size() / 256; ++blk) {
      const float* xb = x.data() + 256 * blk;
      float spread = 0;
      for (int i = 0; i < 256; ++i) spread = std::max(spread, std::fabs(xb[i]));
      for (int s = 0; s < 256 / sub; ++s) {
        float lo = 0, hi = 0, amax = 0;
        for (int l = 0; l < sub; ++l) {
          lo = std::min(lo, xb[sub * s + l]);
          hi = std::max(hi, xb[sub * s + l]);
          amax = std::max(amax, std::fabs(xb[sub * s + l]));
        }
        const float bound = type == TensorType::Q6_K ? amax / 62.0f + spread / (31.0f * 127.0f) * 0.51f
                                                     : (hi - lo) / 30.0f + 2.0f * spread / 945.0f;
        for (int l = 0; l < sub; ++l) {
          const size_t i = 256 * blk + size_t(sub * s + l);
          ASSERT_LE(std::fabs(x[i] - y[i]), bound * 1.001f + 1e-7f) << "block " << blk << " value " << sub * s + l;
        }
      }
    }
    for (size_t i = 768; i < 1024; ++i) EXPECT_EQ(y[i], 0.0f) << i;
  }
}

TEST(GGUFQuantsEncode, NonFiniteOrHugeValuesAreRefused) {
  for (TensorType type : {TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_K, TensorType::Q6_K}) {
    SCOPED_TRACE(tensor_type_name(type));
    std::vector<float> x(256, 1.0f);
    Bytes b(size_t(tensor_type_row_bytes(type, 256)));
    x[77] = std::nanf("");
    expect_throw_with<ValueError>([&] { quantize_row(type, x, b); }, {"value 77", "nan", tensor_type_name(type)});
    x[77] = -INFINITY;
    expect_throw_with<ValueError>([&] { quantize_row(type, x, b); }, {"value 77", "inf"});
    x[77] = 1e12f;  // a scale past f16's 65504 would be infinite
    expect_throw_with<ValueError>([&] { quantize_row(type, x, b); }, {"too large for its f16 scale", "65504"});
  }
  // F16 and BF16 keep a NaN, as before.
  std::vector<float> x(1, std::nanf(""));
  Bytes b(2);
  quantize_row(TensorType::F16, x, b);
  EXPECT_TRUE(std::isnan(f16_to_float(get_u16(b.data()))));
}

TEST(GGUFQuantsEncode, ScalesBelowF16DecodeToZero) {
  // max|x| = 1e-39: the scale's inverse overflows float32 (0 * inf would be
  // NaN) and the f16 scale is 0; every value decodes to 0 (ggml's answer),
  // with no undefined float-to-integer conversion on the way.
  std::vector<float> x(256, 0.0f);
  x[0] = 1e-39f;
  x[40] = -5e-40f;
  for (TensorType type : {TensorType::Q8_0, TensorType::Q4_0}) {
    SCOPED_TRACE(tensor_type_name(type));
    Bytes b(size_t(tensor_type_row_bytes(type, 256)));
    quantize_row(type, x, b);
    std::vector<float> y(256);
    dequantize_row(type, b, y);
    for (size_t i = 0; i < 256; ++i) ASSERT_EQ(y[i], 0.0f) << i;
  }
  // Empty rows are nothing to do.
  quantize_row(TensorType::Q4_K, {}, {});
  dequantize_row(TensorType::F32, {}, {});
}

// ---------------------------------------------------------------- files

TEST(GGUFQuantsFile, WriterRoundTripsEachTypeThroughADiskFile) {
  const fs::path dir = temp_dir("roundtrip");
  const std::vector<float> v = normal_values(4 * 512, 3);
  const Tensor x = Tensor::from_vector(v, Shape{2, 2, 512});
  GGUFWriter w;
  const TensorType types[] = {TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_K, TensorType::Q6_K};
  for (TensorType t : types) w.add_tensor(std::string("w.") + tensor_type_name(t), x, t);
  w.add_tensor("w.f32", x, TensorType::F32);
  w.write((dir / "q.gguf").string());
  const GGUFFile f = GGUFFile::open((dir / "q.gguf").string());
  for (TensorType t : types) {
    const std::string name = std::string("w.") + tensor_type_name(t);
    SCOPED_TRACE(name);
    const TensorInfo* info = f.find_tensor(name);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->type, t);
    EXPECT_EQ(info->shape, (Shape{2, 2, 512}));
    EXPECT_EQ(info->nbytes, 4 * tensor_type_row_bytes(t, 512));
    // The file's bytes are quantize_row's, and read() is dequantize_row of them.
    Bytes want(size_t(info->nbytes));
    quantize_row(t, v, want);
    const std::span<const uint8_t> got = f.data(name);
    ASSERT_TRUE(std::equal(got.begin(), got.end(), want.begin(), want.end()));
    std::vector<float> y(v.size());
    dequantize_row(t, want, y);
    const Tensor r = f.read(name);
    for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(r.data<float>()[i], y[i]) << i;
    // data() stays valid after read() gave the pages back.
    const std::span<const uint8_t> again = f.data(name);
    ASSERT_TRUE(std::equal(again.begin(), again.end(), want.begin(), want.end()));
  }
  fs::remove_all(dir);
}

TEST(GGUFQuantsFile, WriterRefusesAPartialBlockNamingTheTensor) {
  GGUFWriter w;
  const Tensor t = Tensor::zeros(Shape{64, 40});
  expect_throw_with<ValueError>([&] { w.add_tensor("blk.0.attn_q.weight", t, TensorType::Q4_0); },
                                {"'blk.0.attn_q.weight'", "{64, 40}", "40", "multiple of 32", "Q4_0"});
  expect_throw_with<ValueError>([&] { w.add_tensor("k", Tensor::zeros(Shape{2, 128}), TensorType::Q6_K); },
                                {"'k'", "{2, 128}", "multiple of 256", "Q6_K"});
  expect_throw_with<ValueError>([&] { w.add_tensor("s", Tensor::zeros(Shape{}), TensorType::Q8_0); },
                                {"'s'", "multiple of 32"});
  const std::vector<int32_t> ints(32, 1);
  expect_throw_with<TypeError>(
      [&] { w.add_tensor("i", Tensor::from_vector(std::span<const int32_t>(ints), Shape{32}), TensorType::Q8_0); },
      {"'i'", "int32", "Q8_0"});
  // Nothing was added: the same names are free.
  w.add_tensor("k", Tensor::zeros(Shape{2, 256}), TensorType::Q6_K);
  EXPECT_EQ(GGUFFile::parse(w.to_bytes()).tensors().size(), 1u);
}

TEST(GGUFQuantsFile, WriterRefusesNonFiniteValuesNamingTheTensor) {
  GGUFWriter w;
  std::vector<float> v(64, 0.5f);
  v[40] = std::nanf("");
  expect_throw_with<ValueError>(
      [&] { w.add_tensor("output.weight", Tensor::from_vector(v, Shape{2, 32}), TensorType::Q8_0); },
      {"'output.weight'", "{2, 32}", "nan", "flat index 40"});
  // A value changed to NaN after add_tensor is caught when the file is written.
  std::vector<float> ok(64, 0.5f);
  Tensor t = Tensor::from_vector(ok, Shape{2, 32});
  w.add_tensor("later", t, TensorType::Q4_0);
  t.data<float>()[33] = INFINITY;
  expect_throw_with<ValueError>([&] { (void)w.to_bytes(); }, {"'later'", "{2, 32}", "inf"});
}

TEST(GGUFQuantsFile, ReaderRefusesAnInnermostDimensionNotAMultipleOfTheBlock) {
  GGUFWriter w;
  w.add_tensor("a", Tensor::zeros(Shape{4, 64}), TensorType::Q8_0);
  Bytes b = w.to_bytes();
  const InfoPos p = info_pos(b, "a");
  const uint64_t ne0 = 48;  // 4 * 48 elements would fit in the bytes, but not as whole rows of blocks
  std::memcpy(b.data() + p.ne0, &ne0, 8);
  expect_throw_with<FormatError>([&] { GGUFFile::parse(b); },
                                 {"tensor 'a'", "Q8_0", "ne[0] = 48", "not a multiple of 32"});
}

TEST(GGUFQuantsFile, ReaderNamesAQuantizedTypeItDoesNotRead) {
  GGUFWriter w;
  w.add_tensor("blk.0.ffn_down.weight", Tensor::zeros(Shape{1, 256}), TensorType::Q4_K);
  Bytes b = w.to_bytes();
  const InfoPos p = info_pos(b, "blk.0.ffn_down.weight");
  const std::pair<uint32_t, const char*> unread[] = {{13, "Q5_K"}, {3, "Q4_1"},    {6, "Q5_0"},   {7, "Q5_1"},
                                                     {9, "Q8_1"},  {10, "Q2_K"},   {11, "Q3_K"},  {15, "Q8_K"},
                                                     {16, "IQ2_XXS"}, {23, "IQ4_XS"}, {35, "TQ2_0"}};
  for (auto [id, name] : unread) {
    const uint32_t type = id;
    std::memcpy(b.data() + p.type, &type, 4);
    expect_throw_with<FormatError>(
        [&] { GGUFFile::parse(b); },
        {"tensor 'blk.0.ffn_down.weight'", "GGML type " + std::to_string(id) + " (" + name + ")",
         "which tensorgrad does not read", "types read: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K"});
  }
}

TEST(GGUFQuantsFile, ReaderRefusesSizesThatDisagree) {
  // Q4_0 {1, 256} takes 144 bytes (padded to 160); as Q8_0 it would take 272
  // and run into the next tensor; as Q8_0 the last tensor runs past the end.
  GGUFWriter w;
  w.add_tensor("first", Tensor::zeros(Shape{1, 256}), TensorType::Q4_0);
  w.add_tensor("last", Tensor::zeros(Shape{1, 256}), TensorType::Q4_0);
  const Bytes good = w.to_bytes();
  const uint32_t q8 = uint32_t(TensorType::Q8_0);
  Bytes b = good;
  std::memcpy(b.data() + info_pos(b, "first").type, &q8, 4);
  expect_throw_with<FormatError>([&] { GGUFFile::parse(b); }, {"'first'", "'last'", "overlap"});
  b = good;
  std::memcpy(b.data() + info_pos(b, "last").type, &q8, 4);
  expect_throw_with<FormatError>([&] { GGUFFile::parse(b); }, {"'last'", "272 bytes", "truncated"});
}

TEST(GGUFQuantsFile, ReadIntoChecksShapeAndDtype) {
  GGUFWriter w;
  w.add_tensor("q", Tensor::zeros(Shape{2, 32}), TensorType::Q8_0);
  const GGUFFile f = GGUFFile::parse(w.to_bytes());
  Tensor wrong = Tensor::zeros(Shape{64});
  expect_throw_with<ShapeError>([&] { f.read_into("q", wrong); }, {"'q'", "{2, 32}", "{64}"});
  Tensor ints = Tensor::zeros(Shape{2, 32}, DType::Int32);
  expect_throw_with<TypeError>([&] { f.read_into("q", ints); }, {"Q8_0", "float32", "int32"});
  f.release_pages("q");  // nothing to give back for parse()'s copy
  expect_throw_with<ValueError>([&] { f.release_pages("nope"); }, {"'nope'"});
}

TEST(GGUFQuantsFile, ReadIntoADeviceTensorGoesThroughChunks) {
  // A device whose memory the host cannot touch: read_into reaches it only by
  // copies, in chunks of whole blocks (the tensor spans several chunks).
  static const bool registered = [] {
    static const auto sealed = std::make_shared<const test_support::SealedBackend>(Device("ggufquantsoft:0"));
    register_backend({"ggufquantsoft",
                      [] {
                        return std::vector<DeviceInfo>{
                            {Device("ggufquantsoft:0"), "soft", DeviceType::kCpuImplementation, 0}};
                      },
                      [](int) { return sealed; }});
    return true;
  }();
  (void)registered;
  const std::vector<float> v = normal_values(3 * 256 * 512, 4);
  GGUFWriter w;
  w.add_tensor("q", Tensor::from_vector(v, Shape{3 * 256, 512}), TensorType::Q4_K);
  const GGUFFile f = GGUFFile::parse(w.to_bytes());
  const Tensor host = f.read("q");
  Tensor dev = Tensor::zeros(Shape{3 * 256, 512}, DType::Float32, Device("ggufquantsoft:0"));
  f.read_into("q", dev);
  const std::vector<float> back = dev.to_vector();
  for (size_t i = 0; i < back.size(); ++i) ASSERT_EQ(back[i], host.data<float>()[i]) << i;
}

// Resident pages of this process, in bytes (/proc/self/statm's second field).
uint64_t resident_bytes() {
  std::ifstream in("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  in >> size >> resident;
  return resident * uint64_t(::sysconf(_SC_PAGESIZE));
}

TEST(GGUFQuantsFile, ReadGivesTheMappedPagesBack) {
  // A 32 MiB Q8_0 tensor: touching data() maps its pages in; read() gives
  // them back (the float32 result, 4 * 32 / 34 as large, stays), and
  // release_pages does the same after a caller's own pass over data().
  const fs::path dir = temp_dir("pages");
  const int64_t rows = 1024, cols = 32 * 1024;  // 32 Mi elements: 34 MiB of Q8_0
  {
    Tensor x = Tensor::empty(Shape{rows, cols});
    float* p = x.data<float>();
    for (int64_t i = 0; i < rows * cols; ++i) p[i] = float(i % 251) - 125.0f;
    GGUFWriter w;
    w.add_tensor("big", x, TensorType::Q8_0);
    w.write((dir / "big.gguf").string());
  }
  const GGUFFile f = GGUFFile::open((dir / "big.gguf").string());
  const uint64_t nbytes = f.find_tensor("big")->nbytes;
  auto touch = [&] {
    uint64_t sum = 0;
    const std::span<const uint8_t> d = f.data("big");
    for (size_t i = 0; i < d.size(); i += 4096) sum += d[i];
    return sum;
  };
  const uint64_t sum = touch();
  const uint64_t mapped = resident_bytes();
  f.release_pages("big");
  const uint64_t released = resident_bytes();
  EXPECT_GT(mapped, released + nbytes * 9 / 10) << "resident " << mapped << " -> " << released;
  EXPECT_EQ(touch(), sum);  // the bytes read again from the file
  f.release_pages("big");
  {
    const uint64_t before = resident_bytes();
    const Tensor t = f.read("big");
    const uint64_t after = resident_bytes();
    // The result (128 MiB) is resident; the file's 34 MiB, read through, are not.
    EXPECT_LT(after, before + uint64_t(t.nbytes()) + nbytes / 10) << before << " -> " << after;
    EXPECT_GE(after, before + uint64_t(t.nbytes()) * 9 / 10) << before << " -> " << after;
    const int64_t i = cols + 5;  // within half of its block's step, max|x| / 127 / 2 <= 0.5
    EXPECT_NEAR(t.data<float>()[i], float(i % 251) - 125.0f, 0.5f);
  }
  fs::remove_all(dir);
}

}  // namespace
