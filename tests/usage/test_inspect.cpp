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
