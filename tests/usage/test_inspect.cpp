// tensorgrad-inspect (apps/tensorgrad_inspect.cpp), run as a program: the
// metadata and tensor table of a saved model, and a non-zero exit with the
// error's message for a malformed file.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "tensorgrad/tensorgrad.h"
#include "test_files.h"

using namespace tensorgrad;

namespace {
// Runs the command; returns its exit status and what it wrote to stdout and stderr.
std::pair<int, std::string> run(const std::string& command) {
  std::string out;
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (!p) return {-1, "popen failed"};
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}
}  // namespace

TEST(Inspect, PrintsMetadataAndTensorTableAndFailsOnMalformedFiles) {
#ifndef TENSORGRAD_INSPECT
  GTEST_SKIP() << "tensorgrad-inspect is not built (configure with TENSORGRAD_BUILD_APPS=ON)";
#else
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("tg_inspect_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string good = (dir / "m.gguf").string(), cut = (dir / "cut.gguf").string();
  manual_seed(0);
  nn::clear_session();
  const nn::SymbolicTensor in = nn::Input({784});
  nn::Model m(in, nn::Dense(10)(nn::Dense(500, "relu")(in)), "inspected");
  io::save_weights(m, good, io::TensorType::F16);
  const auto [rc, out] = run(std::string(TENSORGRAD_INSPECT) + " " + good);
  EXPECT_EQ(rc, 0) << out;
  for (const char* want : {"general.architecture", "\"tensorgrad\"", "tensorgrad.file_kind", "\"weights\"",
                           "dense/kernel", "F16", "{784, 500}", "784000", "dense_1/bias", "{10}", "20"})
    EXPECT_NE(out.find(want), std::string::npos) << "no \"" << want << "\" in:\n" << out;
  // The same file cut in its tensor table: exit status 1 and the reader's message.
  {
    std::ifstream in_file(good, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in_file)), {});
    std::ofstream(cut, std::ios::binary).write(bytes.data(), 200);
  }
  const auto [rc2, out2] = run(std::string(TENSORGRAD_INSPECT) + " " + cut);
  EXPECT_EQ(rc2, 1) << out2;
  EXPECT_EQ(out2.rfind("tensorgrad-inspect: ", 0), 0u) << out2;
  EXPECT_NE(out2.find("cut.gguf"), std::string::npos) << out2;
  const auto [rc3, out3] = run(std::string(TENSORGRAD_INSPECT) + " " + (dir / "missing.gguf").string());
  EXPECT_EQ(rc3, 1) << out3;
  // A file without ag::save's provenance keys has no provenance lines.
  EXPECT_EQ(out.find("software:"), std::string::npos) << out;
  EXPECT_EQ(out.find("created:"), std::string::npos) << out;
  std::filesystem::remove_all(dir);
#endif
}

TEST(Inspect, NamesGgmlsQuantizedTypes) {
#ifndef TENSORGRAD_INSPECT
  GTEST_SKIP() << "tensorgrad-inspect is not built (configure with TENSORGRAD_BUILD_APPS=ON)";
#else
  test_support::TempDir dir("tg_inspect");
  io::GGUFWriter w;
  w.set_string("general.architecture", "llama");
  const Tensor x = Tensor::zeros(Shape{4, 256});
  w.add_tensor("blk.0.attn_q.weight", x, io::TensorType::Q4_0);
  w.add_tensor("blk.0.attn_k.weight", x, io::TensorType::Q8_0);
  w.add_tensor("blk.0.ffn_up.weight", x, io::TensorType::Q4_K);
  w.add_tensor("output.weight", x, io::TensorType::Q6_K);
  w.write((dir / "q.gguf"));
  const auto [rc, out] = run(std::string(TENSORGRAD_INSPECT) + " " + (dir / "q.gguf"));
  EXPECT_EQ(rc, 0) << out;
  // Each type by ggml's name with its bytes: 4 rows of 256 in blocks (Q4_0 8 x 18, Q8_0 8 x 34, Q4_K 144, Q6_K 210).
  const std::pair<std::string, std::string> rows[] = {{"blk.0.attn_q.weight", "  Q4_0  {4, 256} "},
                                                       {"blk.0.attn_k.weight", "  Q8_0  {4, 256} "},
                                                       {"blk.0.ffn_up.weight", "  Q4_K  {4, 256} "},
                                                       {"output.weight", "  Q6_K  {4, 256} "}};
  const char* bytes[] = {" 576\n", " 1088\n", " 576\n", " 840\n"};
  for (size_t i = 0; i < 4; ++i) {
    const size_t at = out.find("  " + rows[i].first + " ");
    ASSERT_NE(at, std::string::npos) << rows[i].first << " not in:\n" << out;
    const std::string line = out.substr(at, out.find('\n', at) - at + 1);
    EXPECT_NE(line.find(rows[i].second), std::string::npos) << line;
    EXPECT_NE(line.find(bytes[i]), std::string::npos) << line;
  }
#endif
}

TEST(Inspect, ShowsWhichTensorgradWroteAnEagerFileAndWhen) {
#ifndef TENSORGRAD_INSPECT
  GTEST_SKIP() << "tensorgrad-inspect is not built (configure with TENSORGRAD_BUILD_APPS=ON)";
#else
  test_support::TempDir dir("tg_inspect");
  ag::manual_seed(0);
  ag::nn::Linear layer(3, 2);
  ag::save(layer, dir / "linear.gguf");
  const std::string created = io::GGUFFile::open(dir / "linear.gguf").get_string("tensorgrad.created");
  const auto [rc, out] = run(std::string(TENSORGRAD_INSPECT) + " " + (dir / "linear.gguf"));
  EXPECT_EQ(rc, 0) << out;
  for (const std::string& want :
       {std::string("software:  tensorgrad ") + TENSORGRAD_PROJECT_VERSION + "\n", "created:   " + created + "\n",
        std::string("tensorgrad.version"), "\"" + created + "\""})
    EXPECT_NE(out.find(want), std::string::npos) << "no \"" << want << "\" in:\n" << out;
#endif
}

// An ONNX file (a PyTorch export checked in under tests/fixtures/onnx/): its
// producer, opset, inputs and outputs, op counts and initializers; a file
// that is neither GGUF nor ONNX names both.
TEST(Inspect, SummarizesAnOnnxFile) {
#if !defined(TENSORGRAD_INSPECT) || !defined(TENSORGRAD_WITH_ONNX)
  GTEST_SKIP() << "tensorgrad-inspect or ONNX support is not built";
#else
  const auto [rc, out] = run(std::string(TENSORGRAD_INSPECT) + " " + TENSORGRAD_ONNX_FIXTURES + "/lstm.onnx");
  EXPECT_EQ(rc, 0) << out;
  for (const char* want : {"ONNX, IR version", "opset 14", "pytorch", "input_0  INT64  {batch, 7}",
                           "output  FLOAT  {batch, 4}", "LSTM", "Gather", "embed.weight", "{50, 8}", "1600"})
    EXPECT_NE(out.find(want), std::string::npos) << "no \"" << want << "\" in:\n" << out;
  test_support::TempDir dir("tg_inspect_onnx");
  std::ofstream(dir / "junk.bin", std::ios::binary) << "\x08\x07\x12\xff\xff\xff\xff\x0f not a protobuf";
  const auto [rc2, out2] = run(std::string(TENSORGRAD_INSPECT) + " " + (dir / "junk.bin"));
  EXPECT_EQ(rc2, 1) << out2;
  EXPECT_NE(out2.find("not a GGUF file"), std::string::npos) << out2;
  EXPECT_NE(out2.find("not an ONNX model"), std::string::npos) << out2;
#endif
}
