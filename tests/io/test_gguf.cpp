// Tests of the GGUF v3 reader and writer (include/tensorgrad/io/gguf.h):
// metadata and tensors of every type round-tripped, F16/BF16 rounding checked
// bit by bit, the file layout (dimension order, alignment) checked in the raw
// bytes, crash-safe writing, and every class of malformed file refused with a
// FormatError that names what is wrong and where.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tensorgrad/core/error.h"
#include "tensorgrad/io/gguf.h"

namespace fs = std::filesystem;
using namespace tensorgrad;
using namespace tensorgrad::io;

namespace {

using Bytes = std::vector<uint8_t>;

// Expects `f()` to throw exactly E, with every one of `needles` in its message.
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

// Parsing `b` must fail with a FormatError naming every one of `needles`.
void expect_malformed(const Bytes& b, std::initializer_list<std::string> needles) {
  expect_throw_with<FormatError>([&] { GGUFFile::parse(b); }, needles);
}

template <class T> void put(Bytes& b, size_t pos, T v) {
  ASSERT_LE(pos + sizeof v, b.size());
  std::memcpy(b.data() + pos, &v, sizeof v);
}
template <class T> T get(const Bytes& b, size_t pos) {
  T v{};
  std::memcpy(&v, b.data() + pos, sizeof v);
  return v;
}

// Position of the first occurrence of `text` in `b` (a key's or a name's
// bytes; its uint64 length is the 8 bytes before).
size_t find_text(const Bytes& b, const std::string& text) {
  auto it = std::search(b.begin(), b.end(), text.begin(), text.end());
  EXPECT_NE(it, b.end()) << text;
  return size_t(it - b.begin());
}

// Hand-built GGUF bytes, independent of the writer.
struct GgufBytes {
  Bytes b;
  template <class T> GgufBytes& num(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof v);
    return *this;
  }
  GgufBytes& str(const std::string& s) {
    num<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  GgufBytes& header(uint64_t tensors, uint64_t kvs) {
    b.insert(b.end(), {'G', 'G', 'U', 'F'});
    return num<uint32_t>(3).num<uint64_t>(tensors).num<uint64_t>(kvs);
  }
  GgufBytes& kv(const std::string& key, ValueType t) { return str(key).num<uint32_t>(uint32_t(t)); }
  GgufBytes& pad(size_t alignment) {
    while (b.size() % alignment) b.push_back(0);
    return *this;
  }
};

Tensor float_tensor(const std::vector<float>& v, const Shape& shape) { return Tensor::from_vector(v, shape); }

Tensor int64_tensor(const std::vector<int64_t>& v, const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::Int64);
  std::memcpy(t.raw(), v.data(), v.size() * sizeof(int64_t));
  return t;
}

std::vector<float> iota_values(size_t n, float scale = 0.25f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(i) * scale - 3.0f;
  return v;
}

// A small valid file: metadata of several kinds and three tensors.
//   "kv.first" STRING (100 bytes), "kv.second" UINT32, "kv.array" ARRAY of UINT64,
//   tensors "tensor_a" {2, 3} F32, "tensor_b" {4} F32, "tensor_c" {3} I32.
Bytes sample_file(uint32_t alignment = 32) {
  GGUFWriter w(alignment);
  w.set_string("kv.first", std::string(100, 's'));
  w.set_u32("kv.second", 7);
  const std::vector<uint64_t> arr = {1, 2, 3};
  w.set_u64_array("kv.array", arr);
  w.add_tensor("tensor_a", float_tensor(iota_values(6), {2, 3}));
  w.add_tensor("tensor_b", float_tensor(iota_values(4), {4}));
  const std::vector<int32_t> ints = {1, -2, 3};
  w.add_tensor("tensor_c", Tensor::from_vector(std::span<const int32_t>(ints), {3}), TensorType::I32);
  return w.to_bytes();
}

// Tensor-info field positions of tensor `name` in `b` (1 dims known by caller).
struct InfoPos {
  size_t name, n_dims, ne0;
  size_t type(uint32_t n) const { return ne0 + 8 * n; }
  size_t offset(uint32_t n) const { return ne0 + 8 * n + 4; }
};
InfoPos info_pos(const Bytes& b, const std::string& name) {
  const size_t p = find_text(b, name);
  return {p, p + name.size(), p + name.size() + 4};
}

class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = fs::temp_directory_path() / ("tensorgrad_gguf_test_" + std::to_string(rd()));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  fs::path operator/(const std::string& name) const { return path_ / name; }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

Bytes read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

void write_file(const fs::path& p, const Bytes& b) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }
float float_of(uint32_t u) { return std::bit_cast<float>(u); }

}  // namespace

// ---------------------------------------------------------------- conversions

TEST(GGUFConvert, F16RoundsToNearestEvenOnTies) {
  // 1 + 2^-11 lies halfway between 1.0 (0x3C00) and 1 + 2^-10 (0x3C01).
  EXPECT_EQ(float_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  // 1 + 3·2^-11 lies halfway between 0x3C01 and 0x3C02: the even one wins.
  EXPECT_EQ(float_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  // Just above a tie rounds up, just below rounds down.
  EXPECT_EQ(float_to_f16(float_of(bits_of(1.0f + std::ldexp(1.0f, -11)) + 1)), 0x3C01);
  EXPECT_EQ(float_to_f16(float_of(bits_of(1.0f + std::ldexp(1.0f, -11)) - 1)), 0x3C00);
  // 65520 is halfway between 65504 (0x7BFF, odd) and 2^16, which overflows to +inf.
  EXPECT_EQ(float_to_f16(65520.0f), 0x7C00);
  EXPECT_EQ(float_to_f16(65519.0f), 0x7BFF);
  // Subnormals: half the smallest one rounds to 0 (even), 1.5 of it to 2 units.
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(float_to_f16(3 * std::ldexp(1.0f, -25)), 0x0002);
  EXPECT_EQ(float_to_f16(-0.0f), 0x8000);
}

TEST(GGUFConvert, F16KeepsNaNAndInfinities) {
  EXPECT_EQ(float_to_f16(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(float_to_f16(-std::numeric_limits<float>::infinity()), 0xFC00);
  for (uint32_t nan_bits : {0x7FC00000u, 0x7F800001u, 0xFFC00000u, 0x7FFFFFFFu}) {
    const uint16_t h = float_to_f16(float_of(nan_bits));
    EXPECT_EQ(h & 0x7C00, 0x7C00) << std::hex << nan_bits;
    EXPECT_NE(h & 0x03FF, 0) << std::hex << nan_bits;  // a NaN, not an infinity
    EXPECT_TRUE(std::isnan(f16_to_float(h)));
  }
  EXPECT_TRUE(std::isinf(f16_to_float(0x7C00)));
}

TEST(GGUFConvert, F16EveryHalfRoundTripsExactly) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16_to_float(uint16_t(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_f16(f), h) << std::hex << h;
  }
}

TEST(GGUFConvert, BF16RoundsToNearestEvenOnTies) {
  EXPECT_EQ(float_to_bf16(float_of(0x3F808000u)), 0x3F80);  // tie, 0x3F80 even
  EXPECT_EQ(float_to_bf16(float_of(0x3F818000u)), 0x3F82);  // tie, 0x3F82 even
  EXPECT_EQ(float_to_bf16(float_of(0x3F808001u)), 0x3F81);  // above the tie
  EXPECT_EQ(float_to_bf16(float_of(0x3F807FFFu)), 0x3F80);  // below the tie
  EXPECT_EQ(float_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bf16(-2.5f), 0xC020);
  EXPECT_EQ(float_to_bf16(float_of(0x7F7FFFFFu)), 0x7F80);  // FLT_MAX rounds to +inf
}

TEST(GGUFConvert, BF16KeepsNaNQuietAndInfinities) {
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::infinity()), 0xFF80);
  // Truncation or rounding of these would give an infinity or carry into the sign.
  EXPECT_EQ(float_to_bf16(float_of(0x7F800001u)), 0x7FC0);
  EXPECT_EQ(float_to_bf16(float_of(0xFF800001u)), 0xFFC0);
  EXPECT_EQ(float_to_bf16(float_of(0x7FFFFFFFu)), 0x7FFF);
  EXPECT_EQ(float_to_bf16(float_of(0x7FC00000u)), 0x7FC0);
  EXPECT_TRUE(std::isnan(bf16_to_float(0x7FC0)));
}

TEST(GGUFConvert, BF16EveryValueRoundTripsExactly) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = bf16_to_float(uint16_t(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_bf16(f), h) << std::hex << h;
  }
}

TEST(GGUFConvert, TypeNamesAndSizes) {
  EXPECT_STREQ(tensor_type_name(TensorType::BF16), "BF16");
  EXPECT_EQ(tensor_type_size(TensorType::F16), 2u);
  EXPECT_EQ(tensor_type_size(TensorType::I64), 8u);
  EXPECT_STREQ(value_type_name(ValueType::Float64), "FLOAT64");
  EXPECT_STREQ(value_type_name(ValueType::UInt8), "UINT8");
}

TEST(GGUFConvert, SizeOfAnUnknownTypeIsAnError) {
  // 3 is ggml's Q4_1: a type id, but none tensorgrad stores; 99 is no type at all.
  for (uint32_t id : {3u, 99u})
    expect_throw_with<ValueError>([&] { (void)tensor_type_size(TensorType(id)); },
                                  {"tensor_type_size: " + std::to_string(id) + " is not a TensorType",
                                   "F32 (0), F16 (1), Q4_0 (2), Q8_0 (8), Q4_K (12), Q6_K (14), I32 (26), I64 (27) or "
                                   "BF16 (30)"});
}

// ---------------------------------------------------------------- metadata

TEST(GGUFMetadata, WriterTypesRoundTrip) {
  GGUFWriter w;
  w.set_string("s", "hello");
  w.set_string("s.empty", "");
  w.set_string("s.nul", std::string("a\0b", 3));
  w.set_bool("b.t", true);
  w.set_bool("b.f", false);
  w.set_u32("u32", 0xFFFFFFFFu);
  w.set_i32("i32", std::numeric_limits<int32_t>::min());
  w.set_u64("u64", std::numeric_limits<uint64_t>::max());
  w.set_i64("i64", std::numeric_limits<int64_t>::min());
  w.set_f32("f32", 0.1f);
  w.set_f64("f64", 0.1);
  const std::vector<uint64_t> u64s = {0, 1, std::numeric_limits<uint64_t>::max(), 0x8000000000000000ull};
  const std::vector<int64_t> i64s = {-1, std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()};
  const std::vector<double> f64s = {1.5, -0.0, 1e300, std::numeric_limits<double>::infinity()};
  const std::vector<std::string> strs = {"x", "", "long string"};
  w.set_u64_array("a.u64", u64s);
  w.set_u64_array("a.empty", std::span<const uint64_t>());
  w.set_i64_array("a.i64", i64s);
  w.set_f64_array("a.f64", f64s);
  w.set_string_array("a.str", strs);

  const GGUFFile f = GGUFFile::parse(w.to_bytes());
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.find("general.alignment"), nullptr);  // written only when not 32
  EXPECT_EQ(f.get_string("s"), "hello");
  EXPECT_EQ(f.get_string("s.empty"), "");
  EXPECT_EQ(f.get_string("s.nul"), std::string("a\0b", 3));
  EXPECT_TRUE(f.get_bool("b.t"));
  EXPECT_FALSE(f.get_bool("b.f"));
  EXPECT_EQ(f.get_u32("u32"), 0xFFFFFFFFu);
  EXPECT_EQ(f.get_i64("i32"), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(f.get_u64("u64"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(f.get_u64("u32"), 0xFFFFFFFFu);  // narrower unsigned accepted
  EXPECT_EQ(f.get_i64("i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(f.get_f64("f32"), double(0.1f));
  EXPECT_EQ(f.get_f64("f64"), 0.1);
  EXPECT_EQ(f.get_u64_array("a.u64"), u64s);
  EXPECT_TRUE(f.get_u64_array("a.empty").empty());
  EXPECT_EQ(f.get_i64_array("a.i64"), i64s);
  const std::vector<double> got = f.get_f64_array("a.f64");
  ASSERT_EQ(got.size(), f64s.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(std::bit_cast<uint64_t>(got[i]), std::bit_cast<uint64_t>(f64s[i]));
  EXPECT_EQ(f.get_string_array("a.str"), strs);

  // Keys in insertion order, with their types.
  const auto& md = f.metadata();
  ASSERT_EQ(md.size(), 16u);
  EXPECT_EQ(md[0].key, "s");
  EXPECT_EQ(md[3].value.type, ValueType::Bool);
  EXPECT_EQ(md[5].value.type, ValueType::UInt32);
  EXPECT_EQ(md[6].value.type, ValueType::Int32);
  EXPECT_EQ(md[9].value.type, ValueType::Float32);
  EXPECT_EQ(md[11].key, "a.u64");
  EXPECT_EQ(md[11].value.type, ValueType::Array);
  EXPECT_EQ(md[11].value.element_type, ValueType::UInt64);
  EXPECT_EQ(md[15].value.element_type, ValueType::String);
}

TEST(GGUF, Int32AndFloat32ArraysKeepTheirTypesAsLlamaCppReadsThem) {
  GGUFWriter w;
  const std::vector<int32_t> i32s = {1, -2, std::numeric_limits<int32_t>::min()};
  const std::vector<float> f32s = {0.1f, -1e30f, -0.0f};
  w.set_i32_array("tokenizer.ggml.token_type", i32s);
  w.set_f32_array("tokenizer.ggml.scores", f32s);
  const GGUFFile f = GGUFFile::parse(w.to_bytes());
  const MetadataValue* types = f.find("tokenizer.ggml.token_type");
  const MetadataValue* scores = f.find("tokenizer.ggml.scores");
  ASSERT_NE(types, nullptr);
  ASSERT_NE(scores, nullptr);
  EXPECT_EQ(types->element_type, ValueType::Int32);
  EXPECT_EQ(scores->element_type, ValueType::Float32);
  EXPECT_EQ(f.get_i64_array("tokenizer.ggml.token_type"), (std::vector<int64_t>{1, -2, std::numeric_limits<int32_t>::min()}));
  const std::vector<double> got = f.get_f64_array("tokenizer.ggml.scores");
  ASSERT_EQ(got.size(), 3u);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(std::bit_cast<uint32_t>(float(got[i])), std::bit_cast<uint32_t>(f32s[i]));
}

TEST(GGUFMetadata, ReaderReadsEveryValueType) {
  GgufBytes b;
  b.header(0, 15);
  b.kv("u8", ValueType::UInt8).num<uint8_t>(200);
  b.kv("i8", ValueType::Int8).num<int8_t>(-100);
  b.kv("u16", ValueType::UInt16).num<uint16_t>(60000);
  b.kv("i16", ValueType::Int16).num<int16_t>(-30000);
  b.kv("u32", ValueType::UInt32).num<uint32_t>(4000000000u);
  b.kv("i32", ValueType::Int32).num<int32_t>(-2000000000);
  b.kv("f32", ValueType::Float32).num<float>(1.25f);
  b.kv("bool", ValueType::Bool).num<uint8_t>(1);
  b.kv("str", ValueType::String).str("text");
  b.kv("u64", ValueType::UInt64).num<uint64_t>(~uint64_t(0));
  b.kv("i64", ValueType::Int64).num<int64_t>(-5);
  b.kv("f64", ValueType::Float64).num<double>(-2.5);
  b.kv("arr.u8", ValueType::Array).num<uint32_t>(uint32_t(ValueType::UInt8)).num<uint64_t>(3);
  b.num<uint8_t>(1).num<uint8_t>(2).num<uint8_t>(255);
  b.kv("arr.f32", ValueType::Array).num<uint32_t>(uint32_t(ValueType::Float32)).num<uint64_t>(2);
  b.num<float>(0.5f).num<float>(-1.0f);
  b.kv("arr.i16", ValueType::Array).num<uint32_t>(uint32_t(ValueType::Int16)).num<uint64_t>(2);
  b.num<int16_t>(-1).num<int16_t>(7);

  const GGUFFile f = GGUFFile::parse(b.b);
  EXPECT_EQ(f.get_u32("u8"), 200u);
  EXPECT_EQ(f.get_i64("i8"), -100);
  EXPECT_EQ(f.get_u32("u16"), 60000u);
  EXPECT_EQ(f.get_i64("i16"), -30000);
  EXPECT_EQ(f.get_u32("u32"), 4000000000u);
  EXPECT_EQ(f.get_i64("i32"), -2000000000);
  EXPECT_EQ(f.get_f64("f32"), 1.25);
  EXPECT_TRUE(f.get_bool("bool"));
  EXPECT_EQ(f.get_string("str"), "text");
  EXPECT_EQ(f.get_u64("u64"), ~uint64_t(0));
  EXPECT_EQ(f.get_i64("i64"), -5);
  EXPECT_EQ(f.get_f64("f64"), -2.5);
  EXPECT_EQ(f.get_u64_array("arr.u8"), (std::vector<uint64_t>{1, 2, 255}));
  EXPECT_EQ(f.get_f64_array("arr.f32"), (std::vector<double>{0.5, -1.0}));
  EXPECT_EQ(f.get_i64_array("arr.i16"), (std::vector<int64_t>{-1, 7}));
  EXPECT_TRUE(f.tensors().empty());
  EXPECT_EQ(f.find("u8")->type, ValueType::UInt8);
}

TEST(GGUFMetadata, TypedGettersRefuseMissingAndWrongTypes) {
  GGUFWriter w;
  w.set_string("name", "x");
  w.set_i32("count", 3);
  const GGUFFile f = GGUFFile::parse(w.to_bytes());
  expect_throw_with<FormatError>([&] { f.get_string("nope"); }, {"'nope'", "missing", "<memory>"});
  expect_throw_with<FormatError>([&] { f.get_u64("name"); }, {"'name'", "is STRING", "unsigned"});
  expect_throw_with<FormatError>([&] { f.get_u64("count"); }, {"'count'", "INT32"});
  expect_throw_with<FormatError>([&] { f.get_u64_array("name"); }, {"'name'", "ARRAY"});
  expect_throw_with<FormatError>([&] { f.get_bool("count"); }, {"'count'", "BOOL"});
}

TEST(GGUFWriter, RefusesBadKeysAndAlignment) {
  GGUFWriter w;
  w.set_u32("k", 1);
  expect_throw_with<ValueError>([&] { w.set_u32("k", 2); }, {"'k'", "twice"});
  expect_throw_with<ValueError>([&] { w.set_string("", "v"); }, {"empty"});
  expect_throw_with<ValueError>([&] { w.set_string(std::string(65536, 'k'), "v"); }, {"65536 bytes"});
  expect_throw_with<ValueError>([&] { w.set_u32("general.alignment", 64); }, {"general.alignment", "constructor"});
  for (uint32_t a : {0u, 4u, 12u, 33u})
    expect_throw_with<ValueError>([&] { GGUFWriter bad(a); }, {"power of two", std::to_string(a)});
}

TEST(GGUFWriter, RefusesBadTensors) {
  GGUFWriter w;
  const Tensor t = float_tensor({1, 2}, {2});
  w.add_tensor(std::string(63, 'n'), t);  // 63 bytes is the longest stored as it is
  w.add_tensor(std::string(64, 'n'), t);  // longer ones under a short name (test_long_names.cpp)
  w.add_tensor("", t);  // stored under a short name, as one with a NUL byte (below)
  expect_throw_with<ValueError>([&] { w.add_tensor("", t); }, {"''", "twice"});
  w.add_tensor("w", t);
  expect_throw_with<ValueError>([&] { w.add_tensor("w", t); }, {"'w'", "twice"});
  expect_throw_with<ValueError>([&] { w.add_tensor("undef", Tensor()); }, {"'undef'", "undefined"});
  const std::vector<int32_t> ints = {1, 2};
  const Tensor it = Tensor::from_vector(std::span<const int32_t>(ints), {2});
  expect_throw_with<TypeError>([&] { w.add_tensor("i", it, TensorType::F16); }, {"'i'", "int32", "F16"});
  expect_throw_with<TypeError>([&] { w.add_tensor("f", t, TensorType::I32); }, {"'f'", "float32", "I32"});
  expect_throw_with<TypeError>([&] { w.add_tensor("f", t, TensorType::I64); }, {"float32", "I64"});
  const Tensor five = Tensor::zeros({1, 1, 1, 1, 2});
  expect_throw_with<ShapeError>([&] { w.add_tensor("five", five); }, {"'five'", "{1, 1, 1, 1, 2}", "at most 4"});
  const Tensor none = Tensor::zeros({2, 0});
  expect_throw_with<ShapeError>([&] { w.add_tensor("none", none); }, {"'none'", "no elements"});
}

TEST(GGUFWriter, RefusesNulBytesInKeysAndStoresNamesWithThemUnderShortOnes) {
  // The reader refuses them in keys and stored names (ggml would cut the name at the NUL): a key is refused, a
  // tensor name stored under a short one (its bytes before the NUL, '~', its CRC-32) and read back by itself.
  GGUFWriter w;
  expect_throw_with<ValueError>([&] { w.set_u32(std::string("a\0b", 3), 1); },
                                {"metadata key 'a\\x00b'", "NUL byte at position 1"});
  const std::string name("dense/\0kernel", 13);
  w.add_tensor(name, float_tensor({1}, {1}));
  const GGUFFile f = GGUFFile::parse(w.to_bytes());
  EXPECT_EQ(f.tensors().at(0).name, name);
  EXPECT_EQ(f.tensors().at(0).stored_name.substr(0, 7), "dense/~");
  EXPECT_EQ(f.tensors().at(0).stored_name.size(), 15u);
  EXPECT_EQ(f.read(name).item(), 1.0f);
  EXPECT_EQ(f.metadata().size(), 2u);  // the two lists of long names
}

// ---------------------------------------------------------------- tensors

TEST(GGUFTensors, EveryTypeRoundTrips) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> values(1000);
  for (float& v : values) v = normal(rng);
  const Tensor x = float_tensor(values, {10, 100});
  const std::vector<int32_t> i32 = {0, -1, std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()};
  const std::vector<int64_t> i64 = {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min(), 5, -6};
  GGUFWriter w;
  w.add_tensor("f32", x, TensorType::F32);
  w.add_tensor("f16", x, TensorType::F16);
  w.add_tensor("bf16", x, TensorType::BF16);
  w.add_tensor("i32", Tensor::from_vector(std::span<const int32_t>(i32), {2, 2}), TensorType::I32);
  w.add_tensor("i64", int64_tensor(i64, {4}), TensorType::I64);
  const GGUFFile f = GGUFFile::parse(w.to_bytes());

  ASSERT_EQ(f.tensors().size(), 5u);
  EXPECT_EQ(f.tensors()[1].type, TensorType::F16);
  EXPECT_EQ(f.tensors()[1].nbytes, 2000u);
  EXPECT_EQ(f.tensors()[4].nbytes, 32u);
  const Tensor a = f.read("f32"), h = f.read("f16"), b = f.read("bf16");
  for (const Tensor* t : {&a, &h, &b}) {
    EXPECT_EQ(t->shape(), Shape({10, 100}));
    EXPECT_EQ(t->dtype(), DType::Float32);
  }
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(bits_of(a.data<float>()[i]), bits_of(values[i]));
    EXPECT_NEAR(h.data<float>()[i], values[i], std::abs(values[i]) * std::ldexp(1.0, -11) + 1e-7);
    EXPECT_NEAR(b.data<float>()[i], values[i], std::abs(values[i]) * std::ldexp(1.0, -8));
    EXPECT_EQ(h.data<float>()[i], f16_to_float(float_to_f16(values[i])));
  }
  const Tensor ti = f.read("i32");
  EXPECT_EQ(ti.dtype(), DType::Int32);
  EXPECT_EQ(ti.shape(), Shape({2, 2}));
  EXPECT_EQ(std::vector<int32_t>(ti.data<int32_t>(), ti.data<int32_t>() + 4), i32);
  const Tensor tl = f.read("i64");
  EXPECT_EQ(tl.dtype(), DType::Int64);
  EXPECT_EQ(std::vector<int64_t>(tl.data<int64_t>(), tl.data<int64_t>() + 4), i64);
  // data(): the raw bytes as stored.
  const auto raw = f.data("f16");
  ASSERT_EQ(raw.size(), 2000u);
  uint16_t first;
  std::memcpy(&first, raw.data(), 2);
  EXPECT_EQ(first, float_to_f16(values[0]));
}

TEST(GGUFTensors, HalfTypesExactOnRepresentableValuesTiesAndSpecials) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> exact = {0.0f, -0.0f, 1.0f, -2.25f, 0.5f, 1024.0f, -256.0f, 3.0f * 2048.0f, inf, -inf};
  const std::vector<float> ties = {1.0f + std::ldexp(1.0f, -11), 1.0f + 3 * std::ldexp(1.0f, -11),
                                   float_of(0x3F808000u), float_of(0x3F818000u)};
  std::vector<float> all = exact;
  all.insert(all.end(), ties.begin(), ties.end());
  all.push_back(std::numeric_limits<float>::quiet_NaN());
  all.push_back(float_of(0x7F800001u));  // a NaN that truncation would make an infinity
  GGUFWriter w;
  w.add_tensor("h", float_tensor(all, {int64_t(all.size())}), TensorType::F16);
  w.add_tensor("b", float_tensor(all, {int64_t(all.size())}), TensorType::BF16);
  const GGUFFile f = GGUFFile::parse(w.to_bytes());
  const Tensor h = f.read("h"), b = f.read("b");
  for (size_t i = 0; i < exact.size(); ++i) {
    EXPECT_EQ(bits_of(h.data<float>()[i]), bits_of(exact[i])) << i;
    EXPECT_EQ(bits_of(b.data<float>()[i]), bits_of(exact[i])) << i;
  }
  // Raw bits of the ties, hand-computed: F16 of 1+2^-11 → 0x3C00, of 1+3·2^-11 → 0x3C02.
  auto raw16 = [](std::span<const uint8_t> d, size_t i) {
    uint16_t v;
    std::memcpy(&v, d.data() + 2 * i, 2);
    return v;
  };
  const size_t t0 = exact.size();
  EXPECT_EQ(raw16(f.data("h"), t0 + 0), 0x3C00);
  EXPECT_EQ(raw16(f.data("h"), t0 + 1), 0x3C02);
  EXPECT_EQ(raw16(f.data("b"), t0 + 2), 0x3F80);
  EXPECT_EQ(raw16(f.data("b"), t0 + 3), 0x3F82);
  EXPECT_EQ(raw16(f.data("b"), t0 + 5), 0x7FC0);
  for (size_t i = all.size() - 2; i < all.size(); ++i) {
    EXPECT_TRUE(std::isnan(h.data<float>()[i])) << i;
    EXPECT_TRUE(std::isnan(b.data<float>()[i])) << i;
  }
}

TEST(GGUFTensors, LargeHalfTensorConvertsAcrossChunks) {
  const size_t n = (size_t(1) << 18) * 2 + 77;  // more than two conversion chunks
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(i % 2048);  // integers up to 2047: exact in F16
  GGUFWriter w;
  w.add_tensor("big", float_tensor(v, {int64_t(n)}), TensorType::F16);
  const GGUFFile f = GGUFFile::parse(w.to_bytes());
  const Tensor t = f.read("big");
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(t.data<float>()[i], v[i]) << i;
}

TEST(GGUFTensors, ShapesOneToFourDimsAndRawDimensionOrder) {
  GGUFWriter w;
  w.add_tensor("d1", float_tensor(iota_values(5), {5}));
  w.add_tensor("d2", float_tensor(iota_values(6), {2, 3}));
  w.add_tensor("d3", float_tensor(iota_values(24), {2, 3, 4}));
  w.add_tensor("d4", float_tensor(iota_values(120), {2, 3, 4, 5}));
  w.add_tensor("scalar", float_tensor({4.5f}, Shape{}));
  const Bytes bytes = w.to_bytes();
  // A {2, 3} tensor is stored with n_dims 2 and ne = 3, 2 (innermost first).
  const InfoPos p = info_pos(bytes, "d2");
  EXPECT_EQ(get<uint32_t>(bytes, p.n_dims), 2u);
  EXPECT_EQ(get<uint64_t>(bytes, p.ne0), 3u);
  EXPECT_EQ(get<uint64_t>(bytes, p.ne0 + 8), 2u);
  const InfoPos p4 = info_pos(bytes, "d4");
  EXPECT_EQ(get<uint64_t>(bytes, p4.ne0), 5u);
  EXPECT_EQ(get<uint64_t>(bytes, p4.ne0 + 24), 2u);

  const GGUFFile f = GGUFFile::parse(bytes);
  EXPECT_EQ(f.find_tensor("d1")->shape, Shape({5}));
  EXPECT_EQ(f.find_tensor("d2")->shape, Shape({2, 3}));
  EXPECT_EQ(f.find_tensor("d3")->shape, Shape({2, 3, 4}));
  EXPECT_EQ(f.find_tensor("d4")->shape, Shape({2, 3, 4, 5}));
  EXPECT_EQ(f.find_tensor("scalar")->shape, Shape({1}));  // documented: stored as one dimension of 1
  EXPECT_EQ(f.find_tensor("nope"), nullptr);
  const Tensor d4 = f.read("d4");
  EXPECT_EQ(d4.to_vector(), iota_values(120));  // row-major order kept
  EXPECT_EQ(f.read("scalar").item(), 4.5f);
}

TEST(GGUFTensors, AlignmentDefaultAndCustom) {
  for (uint32_t alignment : {32u, 64u, 8u, 4096u}) {
    SCOPED_TRACE(alignment);
    const Bytes b = sample_file(alignment);
    const GGUFFile f = GGUFFile::parse(b);
    EXPECT_EQ(f.alignment(), alignment);
    if (alignment == 32) {
      EXPECT_EQ(f.find("general.alignment"), nullptr);
    } else {
      ASSERT_NE(f.find("general.alignment"), nullptr);
      EXPECT_EQ(f.get_u32("general.alignment"), alignment);
    }
    for (const TensorInfo& t : f.tensors()) EXPECT_EQ(t.offset % alignment, 0u) << t.name;
    // The file ends padded after the last tensor, as ggml writes it.
    EXPECT_EQ(b.size() % alignment, 0u);
    EXPECT_EQ(f.read("tensor_a").to_vector(), iota_values(6));
    EXPECT_EQ(f.read("tensor_c").to_vector(), (std::vector<float>{1, -2, 3}));
  }
}

TEST(GGUFTensors, ReadErrors) {
  const GGUFFile f = GGUFFile::parse(sample_file());
  expect_throw_with<ValueError>([&] { f.read("missing"); }, {"'missing'", "no tensor"});
  expect_throw_with<ValueError>([&] { f.data("missing"); }, {"'missing'"});
  Tensor wrong_shape = Tensor::zeros({3, 2});
  expect_throw_with<ShapeError>([&] { f.read_into("tensor_a", wrong_shape); }, {"'tensor_a'", "{2, 3}", "{3, 2}"});
  Tensor wrong_type = Tensor::zeros({3}, DType::Float32);
  expect_throw_with<TypeError>([&] { f.read_into("tensor_c", wrong_type); }, {"'tensor_c'", "int32", "float32"});
  Tensor out = Tensor::zeros({2, 3});
  f.read_into("tensor_a", out);
  EXPECT_EQ(out.to_vector(), iota_values(6));
}

// ---------------------------------------------------------------- files

TEST(GGUFFiles, WriteThenOpenAndMove) {
  TempDir dir;
  const fs::path path = dir / "model.gguf";
  GGUFWriter w;
  w.set_string("general.name", "m");
  w.add_tensor("w", float_tensor(iota_values(12), {3, 4}), TensorType::BF16);
  const WriteStats stats = w.write(path.string());
  EXPECT_EQ(stats.bytes, fs::file_size(path));
  EXPECT_GE(stats.write_seconds, 0.0);
  EXPECT_GE(stats.fsync_seconds, 0.0);
  EXPECT_EQ(read_file(path), w.to_bytes());
  // No temporary file is left beside it.
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) {
    ++entries;
    EXPECT_EQ(e.path().filename(), "model.gguf");
  }
  EXPECT_EQ(entries, 1u);

  GGUFFile f = GGUFFile::open(path.string());
  EXPECT_EQ(f.path(), path.string());
  GGUFFile g = std::move(f);
  EXPECT_EQ(g.get_string("general.name"), "m");
  EXPECT_EQ(g.read("w").to_vector(), iota_values(12));
  GGUFFile h = GGUFFile::parse(sample_file());
  h = std::move(g);
  EXPECT_EQ(h.read("w").shape(), Shape({3, 4}));
}

TEST(GGUFFiles, WriteReplacesAnExistingFile) {
  TempDir dir;
  const fs::path path = dir / "model.gguf";
  write_file(path, Bytes(5000, 0xAB));
  GGUFWriter w;
  w.set_u32("v", 2);
  w.write(path.string());
  EXPECT_EQ(read_file(path), w.to_bytes());
  EXPECT_EQ(GGUFFile::open(path.string()).get_u32("v"), 2u);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
}

// Saving through a symbolic link replaces the file it points to (in its
// folder, atomically) and keeps the link; a dangling link is replaced.
TEST(GGUFFiles, WriteThroughASymbolicLink) {
  TempDir dir;
  fs::create_directories(dir.path() / "store");
  const fs::path real = dir.path() / "store" / "model.gguf", link = dir / "latest.gguf";
  write_file(real, Bytes(100, 0xAB));
  fs::create_symlink(real, link);
  GGUFWriter w;
  w.set_u32("v", 3);
  w.write(link.string());
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(read_file(real), w.to_bytes());
  EXPECT_EQ(GGUFFile::open(link.string()).get_u32("v"), 3u);
  const fs::path dangling = dir / "dangling.gguf";
  fs::create_symlink(dir.path() / "nowhere" / "x.gguf", dangling);
  w.write(dangling.string());
  EXPECT_FALSE(fs::is_symlink(dangling));
  EXPECT_EQ(read_file(dangling), w.to_bytes());
}

TEST(GGUFFiles, FailedWriteRemovesTheTemporaryFileAndKeepsTheTarget) {
  // A file-size limit makes write() fail with EFBIG part-way through the data.
  TempDir dir;
  const fs::path path = dir / "model.gguf";
  const Bytes old(100, 0xCD);
  write_file(path, old);
  GGUFWriter w;
  w.add_tensor("big", Tensor::zeros({4096}));
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = saved;
  small.rlim_cur = 4096;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  expect_throw_with<IOError>([&] { w.write(path.string()); }, {path.string(), "File too large", "unchanged"});
  setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(read_file(path), old);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
}

TEST(GGUFFiles, WriteIntoMissingFolderIsIOError) {
  TempDir dir;
  const std::string path = (dir / "no_such_folder" / "model.gguf").string();
  GGUFWriter w;
  w.set_u32("v", 1);
  expect_throw_with<IOError>([&] { w.write(path); }, {path, "No such file or directory"});
  EXPECT_FALSE(fs::exists(dir / "no_such_folder"));
}

TEST(GGUFFiles, OpenMissingOrEmptyFile) {
  TempDir dir;
  const std::string missing = (dir / "missing.gguf").string();
  expect_throw_with<IOError>([&] { GGUFFile::open(missing); }, {missing, "No such file or directory"});
  expect_throw_with<IOError>([&] { GGUFFile::open(dir.path().string()); }, {"not a regular file"});
  const fs::path empty = dir / "empty.gguf";
  write_file(empty, {});
  expect_throw_with<FormatError>([&] { GGUFFile::open(empty.string()); }, {empty.string(), "empty"});
  expect_malformed({}, {"<memory>", "empty"});
}

TEST(GGUFFiles, FormatErrorsOfOpenNameThePath) {
  TempDir dir;
  Bytes b = sample_file();
  b[0] = 'X';
  const fs::path p = dir / "bad.gguf";
  write_file(p, b);
  expect_throw_with<FormatError>([&] { GGUFFile::open(p.string()); }, {p.string(), "not a GGUF file"});
}

// ---------------------------------------------------------------- malformed files

TEST(GGUFMalformed, SampleIsValid) {
  const GGUFFile f = GGUFFile::parse(sample_file());
  EXPECT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(f.metadata().size(), 3u);
}

TEST(GGUFMalformed, BadMagic) {
  Bytes b = sample_file();
  b[3] = 'G';
  expect_malformed(b, {"not a GGUF file", "byte 0", "47 47 55 47", "<memory>"});
}

TEST(GGUFMalformed, UnsupportedVersions) {
  for (uint32_t v : {1u, 2u, 4u, 0x03000000u}) {
    Bytes b = sample_file();
    put<uint32_t>(b, 4, v);
    expect_malformed(b, {"unsupported GGUF version " + std::to_string(v), "byte 4"});
  }
}

TEST(GGUFMalformed, TruncatedInTheHeader) {
  const Bytes full = sample_file();
  expect_malformed(Bytes(full.begin(), full.begin() + 2), {"truncated", "magic", "byte 0"});
  expect_malformed(Bytes(full.begin(), full.begin() + 6), {"truncated", "version", "byte 4"});
  expect_malformed(Bytes(full.begin(), full.begin() + 12), {"truncated", "tensor count", "byte 8"});
  expect_malformed(Bytes(full.begin(), full.begin() + 20), {"truncated", "metadata pair count", "byte 16"});
}

TEST(GGUFMalformed, TruncatedMidString) {
  const Bytes full = sample_file();
  const size_t value = find_text(full, std::string(100, 's'));
  // Cut in the middle of the 100-byte string value of "kv.first".
  const Bytes b(full.begin(), full.begin() + long(value + 50));
  expect_malformed(b, {"truncated", "'kv.first'", "STRING", "byte " + std::to_string(value)});
  // Cut in the middle of a key's length.
  const size_t key = find_text(full, "kv.array");
  expect_malformed(Bytes(full.begin(), full.begin() + long(key - 3)),
                   {"truncated", "metadata pair 2", "the key at byte " + std::to_string(key - 8)});
}

TEST(GGUFMalformed, TruncatedInTensorInfo) {
  Bytes full = sample_file();
  const InfoPos p = info_pos(full, "tensor_c");
  Bytes b(full.begin(), full.begin() + long(p.type(1) + 2));
  expect_malformed(b, {"truncated", "'tensor_c'", "ggml type"});
}

TEST(GGUFMalformed, TruncatedMidData) {
  const Bytes full = sample_file();
  const GGUFFile f = GGUFFile::parse(full);
  const TensorInfo& c = *f.find_tensor("tensor_c");
  const Bytes b(full.begin(), full.begin() + long(c.offset + 5));
  expect_malformed(b, {"'tensor_c'", "past the end of the file", std::to_string(b.size()) + " bytes"});
}

TEST(GGUFMalformed, AbsurdTensorCount) {
  Bytes b = sample_file();
  put<uint64_t>(b, 8, uint64_t(1) << 60);
  expect_malformed(b, {"declares 1152921504606846976 tensors", "byte 8"});
}

TEST(GGUFMalformed, AbsurdMetadataCount) {
  Bytes b = sample_file();
  put<uint64_t>(b, 16, ~uint64_t(0));
  expect_malformed(b, {"declares 18446744073709551615 metadata pairs", "byte 16"});
}

TEST(GGUFMalformed, StringLengthBeyondFile) {
  Bytes b = sample_file();
  const size_t key = find_text(b, "kv.second");
  put<uint64_t>(b, key - 8, uint64_t(1) << 40);
  expect_malformed(b, {"truncated", "metadata pair 1", "key", "byte " + std::to_string(key - 8), "1099511627776"});
  // And a tensor name's length.
  Bytes t = sample_file();
  const size_t name = find_text(t, "tensor_b");
  put<uint64_t>(t, name - 8, ~uint64_t(0));
  expect_malformed(t, {"truncated", "tensor info 1", "name"});
}

TEST(GGUFMalformed, UnknownValueType) {
  Bytes b = sample_file();
  const size_t key = find_text(b, "kv.second");
  put<uint32_t>(b, key + 9, 13);
  expect_malformed(b, {"'kv.second'", "value type 13", "byte " + std::to_string(key + 9)});
  Bytes a = sample_file();
  const size_t arr = find_text(a, "kv.array");
  put<uint32_t>(a, arr + 8 + 4, 99);  // element type
  expect_malformed(a, {"'kv.array'", "element type 99"});
}

TEST(GGUFMalformed, NestedArray) {
  Bytes b = sample_file();
  const size_t arr = find_text(b, "kv.array");
  put<uint32_t>(b, arr + 8 + 4, uint32_t(ValueType::Array));
  expect_malformed(b, {"'kv.array'", "array of arrays"});
}

TEST(GGUFMalformed, ArrayCountBeyondFile) {
  Bytes b = sample_file();
  const size_t arr = find_text(b, "kv.array");
  put<uint64_t>(b, arr + 8 + 4 + 4, uint64_t(1) << 50);
  expect_malformed(b, {"'kv.array'", "array of 1125899906842624 UINT64", "byte " + std::to_string(arr + 16)});
  // A string array's count, bounded by the 8 bytes each string takes at least.
  GGUFWriter w;
  w.set_string_array("strs", {"a", "b"});
  Bytes s = w.to_bytes();
  const size_t k = find_text(s, "strs");
  put<uint64_t>(s, k + 4 + 4 + 4, 1000);
  expect_malformed(s, {"'strs'", "array of 1000 STRING"});
}

TEST(GGUFMalformed, BadBool) {
  GGUFWriter w;
  w.set_bool("flag", true);
  Bytes b = w.to_bytes();
  const size_t k = find_text(b, "flag");
  b[k + 4 + 4] = 2;
  expect_malformed(b, {"'flag'", "BOOL byte 2"});
}

TEST(GGUFMalformed, DuplicateKey) {
  Bytes b = sample_file();
  const size_t first = find_text(b, "kv.first");
  const size_t second = find_text(b, "kv.array");
  std::memcpy(b.data() + second, "kv.first", 8);
  expect_malformed(b, {"duplicate metadata key 'kv.first'", "byte " + std::to_string(second - 8),
                       "first at byte " + std::to_string(first - 8)});
}

TEST(GGUFMalformed, DuplicateTensorName) {
  Bytes b = sample_file();
  const size_t second = find_text(b, "tensor_b");
  b[second + 7] = 'a';
  expect_malformed(b, {"duplicate tensor name 'tensor_a'", "byte " + std::to_string(second - 8)});
}

TEST(GGUFMalformed, DimensionCountZeroAndFive) {
  for (uint32_t n : {0u, 5u}) {
    Bytes b = sample_file();
    const InfoPos p = info_pos(b, "tensor_a");
    put<uint32_t>(b, p.n_dims, n);
    expect_malformed(b, {"'tensor_a'", "n_dims " + std::to_string(n), "byte " + std::to_string(p.n_dims), "1 to 4"});
  }
}

TEST(GGUFMalformed, ZeroDimension) {
  Bytes b = sample_file();
  const InfoPos p = info_pos(b, "tensor_a");
  put<uint64_t>(b, p.ne0 + 8, 0);
  expect_malformed(b, {"'tensor_a'", "ne[1] = 0", "byte " + std::to_string(p.ne0 + 8)});
}

TEST(GGUFMalformed, ElementCountOverflowOrTooLarge) {
  // 2^32 × 2^32 overflows 64 bits; 2^63 alone is far past the cap; 2^21 × 2^20 just passes 2^40.
  const std::vector<std::pair<uint64_t, uint64_t>> cases = {
      {uint64_t(1) << 32, uint64_t(1) << 32}, {uint64_t(1) << 63, 1}, {uint64_t(1) << 21, uint64_t(1) << 20}};
  for (auto [a, c] : cases) {
    Bytes b = sample_file();
    const InfoPos p = info_pos(b, "tensor_a");
    put<uint64_t>(b, p.ne0, a);
    put<uint64_t>(b, p.ne0 + 8, c);
    expect_malformed(b, {"'tensor_a'", "2^40 elements", std::to_string(a)});
  }
}

TEST(GGUFMalformed, UnknownTensorTypeIsNamed) {
  Bytes b = sample_file();
  const InfoPos p = info_pos(b, "tensor_b");
  put<uint32_t>(b, p.type(1), 3);
  expect_malformed(b, {"tensor 'tensor_b' has GGML type 3 (Q4_1)",
                       "types read: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, I32, I64",
                       "byte " + std::to_string(p.type(1))});
  put<uint32_t>(b, p.type(1), 1000);
  expect_malformed(b, {"GGML type 1000 (not a ggml type)"});
}

TEST(GGUFMalformed, MisalignedOffset) {
  Bytes b = sample_file();
  const InfoPos p = info_pos(b, "tensor_b");
  put<uint64_t>(b, p.offset(1), get<uint64_t>(b, p.offset(1)) + 4);
  expect_malformed(b, {"'tensor_b'", "not a multiple of the alignment 32", "byte " + std::to_string(p.offset(1))});
}

TEST(GGUFMalformed, DataBeyondFileEnd) {
  Bytes b = sample_file();
  const InfoPos p = info_pos(b, "tensor_c");
  put<uint64_t>(b, p.offset(1), 1024);
  expect_malformed(b, {"'tensor_c'", "offset 1024", "past the end of the file"});
  put<uint64_t>(b, p.offset(1), ~uint64_t(31));  // offset + size would overflow
  expect_malformed(b, {"'tensor_c'", "past the end of the file"});
}

TEST(GGUFMalformed, OverlappingTensors) {
  Bytes b = sample_file();
  const InfoPos p = info_pos(b, "tensor_b");
  put<uint64_t>(b, p.offset(1), 0);  // onto tensor_a's data
  expect_malformed(b, {"tensors 'tensor_a' and 'tensor_b' overlap"});
}

TEST(GGUFMalformed, BadAlignmentKey) {
  const Bytes good = sample_file(64);
  const size_t k = find_text(good, "general.alignment");
  const size_t value = k + 17 + 4;
  ASSERT_EQ(get<uint32_t>(good, value), 64u);
  for (uint32_t v : {0u, 48u}) {
    Bytes b = good;
    put<uint32_t>(b, value, v);
    expect_malformed(b, {"'general.alignment'", "is " + std::to_string(v), "nonzero power of two"});
  }
  Bytes t = good;
  put<uint32_t>(t, k + 17, uint32_t(ValueType::Int32));
  expect_malformed(t, {"'general.alignment'", "is INT32", "UINT32"});
}

TEST(GGUFMalformed, MissingDataSection) {
  // The tensor infos end, and the file with them, before the padded data start.
  GgufBytes b;
  b.header(1, 0).str("t").num<uint32_t>(1).num<uint64_t>(1).num<uint32_t>(0).num<uint64_t>(0);
  expect_malformed(b.b, {"data section", "past the end of the file"});
  b.pad(32).num<float>(1.0f);
  EXPECT_EQ(GGUFFile::parse(b.b).read("t").item(), 1.0f);
}

// One tensor "name" {1} F32 holding 1.0, hand-built (so that the writer's own
// checks on names cannot stop it): the tensor info starts at byte 24.
Bytes one_tensor_named(const std::string& name) {
  GgufBytes b;
  b.header(1, 0).str(name).num<uint32_t>(1).num<uint64_t>(1).num<uint32_t>(0).num<uint64_t>(0);
  b.pad(32).num<float>(1.0f);
  return b.b;
}

TEST(GGUFMalformed, TensorNameWithANulByte) {
  // ggml reads names as C strings: "dense/\0kernel" would be "dense/" there.
  const std::string name("dense/\0kernel", 13);
  expect_malformed(one_tensor_named(name),
                   {"tensor info 0 (at byte 24)", "'dense/\\x00kernel'", "NUL byte at byte " + std::to_string(24 + 8 + 6),
                    "<memory>"});
  // A NUL as the last byte too (a C writer's terminator counted in the length).
  expect_malformed(one_tensor_named(std::string("w\0", 2)), {"'w\\x00'", "NUL byte at byte " + std::to_string(24 + 8 + 1)});
}

TEST(GGUFMalformed, TensorNameLongerThanGgmlAllows) {
  // GGML_MAX_NAME is 64 with the terminating NUL: 63 bytes are read, 64 and 100 refused.
  EXPECT_EQ(GGUFFile::parse(one_tensor_named(std::string(63, 'n'))).read(std::string(63, 'n')).item(), 1.0f);
  for (size_t n : {size_t(64), size_t(100)})
    expect_malformed(one_tensor_named(std::string(n, 'n')),
                     {"tensor info 0 (at byte 24)", "is " + std::to_string(n) + " bytes long", "at most 63 bytes",
                      "GGML_MAX_NAME"});
}

TEST(GGUFMalformed, MetadataKeyWithANulByte) {
  GgufBytes b;
  b.header(0, 1).kv(std::string("general.na\0me", 13), ValueType::UInt32).num<uint32_t>(1);
  expect_malformed(b.b, {"metadata pair 0 (at byte 24)", "'general.na\\x00me'", "NUL byte at byte " + std::to_string(24 + 8 + 10)});
  // The same key without the NUL reads.
  GgufBytes ok;
  ok.header(0, 1).kv("general.name", ValueType::UInt32).num<uint32_t>(1);
  EXPECT_EQ(GGUFFile::parse(ok.b).get_u32("general.name"), 1u);
}

TEST(GGUFMalformed, EveryTruncationIsAFormatError) {
  // Each prefix of a valid file is refused with a FormatError, never a crash.
  const Bytes full = sample_file();
  for (size_t n = 0; n < full.size(); ++n) {
    try {
      GGUFFile::parse(Bytes(full.begin(), full.begin() + long(n)));
      // The only valid prefixes end inside the last tensor's padding.
      EXPECT_GE(n, GGUFFile::parse(full).tensors().back().offset + 12) << n;
    } catch (const FormatError&) {
    }
  }
}

TEST(GGUFMalformed, EveryByteFlipIsAFormatErrorOrParses) {
  // Flipping any header byte gives a FormatError or a valid file, never a crash.
  const Bytes full = sample_file();
  const size_t data_start = GGUFFile::parse(full).tensors().front().offset;
  for (size_t i = 0; i < data_start; ++i) {
    for (uint8_t flip : {uint8_t(0x01), uint8_t(0x80), uint8_t(0xFF)}) {
      Bytes b = full;
      b[i] ^= flip;
      try {
        const GGUFFile f = GGUFFile::parse(b);
        for (const TensorInfo& t : f.tensors()) (void)f.read(t.name);
      } catch (const FormatError&) {
      } catch (const ValueError&) {
      }
    }
  }
}
