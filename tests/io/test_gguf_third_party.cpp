// A GGUF file written by tensorgrad, read by another implementation: Hugging
// Face's reader (the npm package @huggingface/gguf, pinned in
// tests/gguf_js/package.json) through tests/gguf_js/check.mjs, which prints
// what it sees as JSON. Needs `node` on PATH and `npm ci` run in
// tests/gguf_js (scripts/test.sh does both when it can); skips otherwise.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "run_process.h"
#include "tensorgrad/io/gguf.h"
#include "tensorgrad/tensorgrad.h"

#ifndef TENSORGRAD_SOURCE_DIR
#error "tests/CMakeLists.txt defines TENSORGRAD_SOURCE_DIR (the source tree, for tests/gguf_js)"
#endif

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace tensorgrad;
using namespace tensorgrad::io;
using test_support::find_on_path;
using test_support::run_capture;
using test_support::RunResult;

/// A folder under the system's temporary folder, removed with its contents
/// at scope exit.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "tensorgrad-gguf-js-XXXXXX").string();
    if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed for " + pattern);
    path = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

/// One metadata entry as the reader should report it: its GGUF type id, the
/// element type id for arrays (else null), and its value in check.mjs's JSON
/// form (64-bit integers as decimal strings).
struct Expected {
  uint32_t type;
  json sub_type;
  json value;
};

}  // namespace

TEST(GGUFThirdParty, HuggingFaceReaderAgrees) {
  const fs::path js_dir = fs::path(TENSORGRAD_SOURCE_DIR) / "tests" / "gguf_js";
  const std::string node = find_on_path("node");
  if (node.empty()) GTEST_SKIP() << "`node` is not on PATH: install Node.js (scripts/setup.sh --test) to run the "
                                    "check against @huggingface/gguf";
  if (!fs::exists(js_dir / "node_modules" / "@huggingface" / "gguf" / "package.json"))
    GTEST_SKIP() << js_dir.string() << "/node_modules lacks @huggingface/gguf: run npm ci in tests/gguf_js "
                 << "(scripts/test.sh does when npm is present)";

  // The tensors: one of each type tensorgrad writes, shapes in tensorgrad's
  // order (outermost first).
  std::mt19937 rng(20240611);
  std::uniform_real_distribution<float> uniform(-3.0f, 3.0f);
  std::vector<float> big(784 * 500);
  for (float& x : big) x = uniform(rng);
  const Tensor f32 = Tensor::from_vector(big, Shape{784, 500});
  const std::vector<float> half_values = {1.0f, -2.5f, 65504.0f};
  const Tensor f16 = Tensor::from_vector(half_values, Shape{3});
  std::vector<float> bf_values(24);
  for (size_t i = 0; i < bf_values.size(); ++i) bf_values[i] = float(i) * 0.75f - 7.0f;
  const Tensor bf16 = Tensor::from_vector(bf_values, Shape{2, 3, 4});
  const std::vector<int32_t> i32_values = {-2147483647 - 1, -1, 0, 7, 2147483647};
  const Tensor i32 = Tensor::from_vector(i32_values, Shape{5});
  const std::vector<int64_t> i64_values = {INT64_MIN, -5, 1LL << 40, INT64_MAX};
  Tensor i64 = Tensor::empty(Shape{2, 2}, DType::Int64);
  std::copy(i64_values.begin(), i64_values.end(), i64.data<int64_t>());
  std::vector<float> q_values(3 * 64);
  for (size_t i = 0; i < q_values.size(); ++i) q_values[i] = float(i % 17) * 0.125f - 1.0f;
  const Tensor q = Tensor::from_vector(q_values, Shape{3, 64});

  struct TensorCase {
    std::string name;
    Tensor tensor;
    TensorType type;
  };
  const std::vector<TensorCase> cases = {
      {"dense/kernel", f32, TensorType::F32},   {"dense/bias.f16", f16, TensorType::F16},
      {"conv/kernel.bf16", bf16, TensorType::BF16}, {"ids", i32, TensorType::I32},
      {"optimizer/steps", i64, TensorType::I64},
      // ggml's block types: the reader reports their type ids and shapes (it decodes no data).
      {"blk.0.attn_q.weight", q, TensorType::Q8_0}, {"blk.0.ffn_up.weight", q, TensorType::Q4_0},
      // Longer than GGUF's 63 bytes: the reader sees its short stored name (GGUFWriter::add_tensor).
      {"optimizer/token_and_position_embedding/token_embedding.embeddings/m", f16, TensorType::F32},
  };

  GGUFWriter writer;
  writer.set_string("general.architecture", "tensorgrad");
  writer.set_string("tensorgrad.note", "a string with spaces, \"quotes\" and \xC3\xA9");
  const std::vector<uint64_t> u64s = {0, 1, 0x8000000000000001ULL, UINT64_MAX};
  writer.set_u64_array("tensorgrad.rng_state", u64s);
  writer.set_u32("tensorgrad.epochs", 15);
  writer.set_i32("tensorgrad.offset", -42);
  writer.set_u64("tensorgrad.step", 9007199254740993ULL);  // 2^53 + 1: not a double
  writer.set_i64("tensorgrad.delta", -1234567890123LL);
  writer.set_f32("tensorgrad.lr", 0.001f);
  writer.set_f64("tensorgrad.momentum", 0.9);
  writer.set_bool("tensorgrad.nesterov", true);
  const std::vector<int64_t> i64s = {-3, 0, INT64_MAX};
  writer.set_i64_array("tensorgrad.dims", i64s);
  const std::vector<double> f64s = {0.5, -1e300, 3.141592653589793};
  writer.set_f64_array("tensorgrad.decays", f64s);
  writer.set_string_array("tensorgrad.classes", {"T-shirt/top", "Trouser", ""});
  for (const TensorCase& c : cases) writer.add_tensor(c.name, c.tensor, c.type);

  // GGUF type ids (gguf.md): UINT32 4, INT32 5, FLOAT32 6, BOOL 7, STRING 8,
  // ARRAY 9, UINT64 10, INT64 11, FLOAT64 12.
  std::map<std::string, Expected> expected = {
      {"general.architecture", {8, nullptr, "tensorgrad"}},
      {"tensorgrad.note", {8, nullptr, "a string with spaces, \"quotes\" and \xC3\xA9"}},
      {"tensorgrad.rng_state", {9, 10, json::array({"0", "1", "9223372036854775809", "18446744073709551615"})}},
      {"tensorgrad.epochs", {4, nullptr, 15}},
      {"tensorgrad.offset", {5, nullptr, -42}},
      {"tensorgrad.step", {10, nullptr, "9007199254740993"}},
      {"tensorgrad.delta", {11, nullptr, "-1234567890123"}},
      {"tensorgrad.lr", {6, nullptr, double(0.001f)}},
      {"tensorgrad.momentum", {12, nullptr, 0.9}},
      {"tensorgrad.nesterov", {7, nullptr, true}},
      {"tensorgrad.dims", {9, 11, json::array({"-3", "0", "9223372036854775807"})}},
      {"tensorgrad.decays", {9, 12, json::array({0.5, -1e300, 3.141592653589793})}},
      {"tensorgrad.classes", {9, 8, json::array({"T-shirt/top", "Trouser", ""})}},
  };

  TempDir dir;
  const std::string file = (dir.path / "third_party.gguf").string();
  writer.write(file);
  const GGUFFile ours = GGUFFile::open(file);
  const std::string long_name = cases.back().name;
  const std::string stored = ours.find_tensor(long_name)->stored_name;
  ASSERT_EQ(stored.size(), 63u);
  expected.emplace(kLongNamesStoredKey, Expected{9, 8, json::array({stored})});
  expected.emplace(kLongNamesFullKey, Expected{9, 8, json::array({long_name})});

  const RunResult run = run_capture({node, (js_dir / "check.mjs").string(), file});
  ASSERT_EQ(run.exit_status, 0) << "node check.mjs " << file << " failed (its message is above); stdout: " << run.out;
  json got;
  try {
    got = json::parse(run.out);
  } catch (const json::exception& e) {
    FAIL() << "check.mjs printed something that is not JSON (" << e.what() << "): " << run.out;
  }
  SCOPED_TRACE("reader: " + got.value("reader", std::string("?")));

  EXPECT_EQ(got.at("version").get<int>(), 3);
  EXPECT_EQ(got.at("tensor_count").get<std::string>(), std::to_string(cases.size()));
  EXPECT_EQ(got.at("kv_count").get<std::string>(), std::to_string(expected.size()));

  // Metadata: every key, with its type, element type and value; nothing else.
  const json& metadata = got.at("metadata");
  ASSERT_EQ(metadata.size(), expected.size()) << metadata.dump(1);
  std::map<std::string, int> seen;
  for (const json& entry : metadata) {
    const std::string key = entry.at("key").get<std::string>();
    ++seen[key];
    const auto it = expected.find(key);
    if (it == expected.end()) {
      ADD_FAILURE() << "the reader reports a key tensorgrad did not write: " << entry.dump();
      continue;
    }
    EXPECT_EQ(entry.at("type").get<uint32_t>(), it->second.type) << key;
    EXPECT_EQ(entry.at("sub_type"), it->second.sub_type) << key;
    EXPECT_EQ(entry.at("value"), it->second.value) << key << ": the reader has " << entry.at("value").dump()
                                                    << ", tensorgrad wrote " << it->second.value.dump();
  }
  for (const auto& [key, value] : expected) EXPECT_EQ(seen[key], 1) << key << " reported " << seen[key] << " times";

  // Tensors: name, shape (ne order, tensorgrad's reversed), type, where the
  // data lies, and the first elements decoded from there.
  const json& tensors = got.at("tensors");
  ASSERT_EQ(tensors.size(), cases.size()) << tensors.dump(1);
  const uint64_t data_start = std::stoull(got.at("tensor_data_offset").get<std::string>());
  for (size_t i = 0; i < cases.size(); ++i) {
    const TensorCase& c = cases[i];
    const json& t = tensors[i];
    SCOPED_TRACE("tensor " + c.name);
    const TensorInfo* info = ours.find_tensor(c.name);
    ASSERT_NE(info, nullptr);
    ASSERT_EQ(t.at("name").get<std::string>(), info->stored_name);
    EXPECT_EQ(info->stored_name == c.name, c.name.size() <= 63);
    std::vector<std::string> ne;
    const Shape& shape = c.tensor.shape();
    for (int d = shape.rank() - 1; d >= 0; --d) ne.push_back(std::to_string(shape[d]));
    EXPECT_EQ(t.at("shape").get<std::vector<std::string>>(), ne) << "tensorgrad's shape " << shape.str();
    EXPECT_EQ(t.at("dtype").get<uint32_t>(), uint32_t(c.type));
    EXPECT_EQ(t.at("dtype_name").get<std::string>(), tensor_type_name(c.type));

    EXPECT_EQ(data_start + std::stoull(t.at("offset").get<std::string>()), info->offset)
        << "the readers disagree on where the data lies";
    EXPECT_EQ(info->offset % 32, 0u) << "data not aligned to general.alignment (32)";

    const json& head = t.at("head");
    if (tensor_type_is_quantized(c.type)) {  // check.mjs decodes no blocks
      EXPECT_TRUE(head.is_null()) << head.dump();
      EXPECT_EQ(info->nbytes, 3 * tensor_type_row_bytes(c.type, 64));
      continue;
    }
    const size_t n = std::min<size_t>(8, size_t(c.tensor.numel()));
    ASSERT_EQ(head.size(), n) << head.dump();
    for (size_t k = 0; k < n; ++k) {
      switch (c.type) {
        case TensorType::F32:
          EXPECT_EQ(head[k].get<double>(), double(c.tensor.data<float>()[k])) << "element " << k;
          break;
        case TensorType::F16:
          EXPECT_EQ(head[k].get<uint16_t>(), float_to_f16(c.tensor.data<float>()[k])) << "element " << k;
          break;
        case TensorType::BF16:
          EXPECT_EQ(head[k].get<uint16_t>(), float_to_bf16(c.tensor.data<float>()[k])) << "element " << k;
          break;
        case TensorType::I32:
          EXPECT_EQ(head[k].get<int64_t>(), c.tensor.data<int32_t>()[k]) << "element " << k;
          break;
        case TensorType::I64:
          EXPECT_EQ(head[k].get<std::string>(), std::to_string(c.tensor.data<int64_t>()[k])) << "element " << k;
          break;
        case TensorType::Q4_0:
        case TensorType::Q8_0:
        case TensorType::Q4_K:
        case TensorType::Q6_K: FAIL() << "quantized tensors have no head (above)";
      }
    }
  }
  // The half-precision patterns themselves, so a shared conversion bug in
  // float_to_f16 cannot hide: 1.0 = 0x3C00, -2.5 = 0xC100, 65504 = 0x7BFF.
  EXPECT_EQ(tensors[1].at("head"), json::array({0x3C00, 0xC100, 0x7BFF}));
  // bfloat16 is float32's upper half: -7.0 = 0xC0E0, -6.25 = 0xC0C8.
  EXPECT_EQ(tensors[2].at("head")[0], 0xC0E0);
  EXPECT_EQ(tensors[2].at("head")[1], 0xC0C8);
}
