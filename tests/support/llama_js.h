#pragma once
// llama.cpp as referee for LLaMA GGUF files: runs tests/llama_js/run.mjs
// (node-llama-cpp's prebuilt CPU llama.cpp, pinned by
// tests/llama_js/package-lock.json) on a file and returns its tokens,
// log-probabilities and greedy tokens. Tests call llama_js_available() first
// and GTEST_SKIP with its message when node or the package is missing:
//
//   std::string why;
//   if (!test_support::llama_js_available(&why)) GTEST_SKIP() << why;
//   test_support::LlamaJsRequest r;
//   r.prompt_tokens = {1, 2, 3};
//   r.logits = test_support::LlamaJsRequest::Logits::All;
//   r.greedy = 64;
//   const test_support::LlamaJsResult got = test_support::llama_js_run(path, r);
//   EXPECT_LE(test_support::log_prob_error(got.log_probs[i], logits_row_i), 1e-4);
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "run_process.h"

#ifndef TENSORGRAD_SOURCE_DIR
#error "tests/CMakeLists.txt defines TENSORGRAD_SOURCE_DIR (the source tree, for tests/llama_js)"
#endif

namespace test_support {

/// What run.mjs is asked (every part optional; see tests/llama_js/run.mjs).
struct LlamaJsRequest {
  enum class Logits { None, Last, All };
  std::vector<std::string> tokenize;   // texts for llama.cpp's tokenizer (no BOS added)
  bool special = false;                // parse special tokens' texts in them
  std::vector<int32_t> prompt_tokens;  // evaluated from position 0
  Logits logits = Logits::None;        // log-probabilities at every prompt position, or the last
  int greedy = 0;                      // greedy tokens after the prompt (end-of-generation ones included)
  int threads = 1;                     // llama.cpp's CPU threads (0: all cores)
  int context = 0;                     // context size; 0: the least that fits prompt and greedy tokens
  std::string kv_cache = "F32";        // key-value cache type, "F32" or "F16" (llama.cpp's default)
};

/// What llama.cpp answered.
struct LlamaJsResult {
  int64_t n_vocab = 0;
  int32_t bos = -1, eos = -1;  // -1: the file has none
  bool add_bos = false;        // whether llama.cpp prepends BOS to prompts (tokenizer.ggml.add_bos_token)
  std::vector<std::vector<int32_t>> tokens;  // one list per text of `tokenize`
  // One row of n_vocab per position asked (all, or the last only): log softmax of llama.cpp's
  // logits after that token. node-llama-cpp gives float32 probabilities, not raw logits: entries
  // below about -80 are imprecise (subnormal), and -infinity where the probability is 0.
  std::vector<std::vector<float>> log_probs;
  std::vector<int32_t> greedy;
};

/// tests/llama_js in the source tree.
inline std::filesystem::path llama_js_dir() { return std::filesystem::path(TENSORGRAD_SOURCE_DIR) / "tests" / "llama_js"; }

/// Whether node and tests/llama_js's packages are there; if not, `why` (when given) says what to install.
inline bool llama_js_available(std::string* why) {
  auto no = [&](const std::string& message) {
    if (why) *why = message;
    return false;
  };
  const std::string node = test_support::find_on_path("node");
  if (node.empty()) return no("`node` is not on PATH: install Node.js 20 or later (scripts/setup.sh --test)");
  // node-llama-cpp 3 asks for Node.js 20 ("engines"); Debian 12's own nodejs is 18.
  RunResult version = run_capture({node, "--version"});
  while (!version.out.empty() && std::isspace(static_cast<unsigned char>(version.out.back()))) version.out.pop_back();
  if (version.exit_status != 0 || version.out.size() < 2 || version.out[0] != 'v' || std::atoi(version.out.c_str() + 1) < 20)
    return no("node-llama-cpp needs Node.js 20 or later, and `node --version` says \"" + version.out + "\"" +
              ": install a newer Node.js (nodesource's packages, for instance)");
  const std::filesystem::path modules = llama_js_dir() / "node_modules";
  const char* install = "run `NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm ci --prefix tests/llama_js --ignore-scripts "
                        "--omit=optional` (scripts/test.sh does; it needs linux-x64 with glibc)";
  if (!std::filesystem::exists(modules / "node-llama-cpp" / "package.json"))
    return no(std::string("node-llama-cpp is not installed: ") + install);
  if (!std::filesystem::exists(modules / "@node-llama-cpp" / "linux-x64" / "package.json"))
    return no(std::string("node-llama-cpp's prebuilt CPU llama.cpp (@node-llama-cpp/linux-x64) is not installed: ") +
              install);
  return true;
}

/// Runs run.mjs on `gguf` with `request`. Throws std::runtime_error when it fails (llama.cpp's and
/// run.mjs's messages are on the test's stderr) or answers something else than asked.
inline LlamaJsResult llama_js_run(const std::string& gguf, const LlamaJsRequest& request) {
  using nlohmann::json;
  json q = json::object();
  if (!request.tokenize.empty()) q["tokenize"] = request.tokenize;
  if (request.special) q["special"] = true;
  if (!request.prompt_tokens.empty()) q["prompt_tokens"] = request.prompt_tokens;
  switch (request.logits) {
    case LlamaJsRequest::Logits::None:
      break;
    case LlamaJsRequest::Logits::Last:
      q["logits"] = "last";
      break;
    case LlamaJsRequest::Logits::All:
      q["logits"] = true;
      break;
  }
  if (request.greedy > 0) q["greedy"] = request.greedy;
  q["threads"] = request.threads;
  if (request.context > 0) q["context"] = request.context;
  q["kv_cache"] = request.kv_cache;
  // A file, not stdin: run_capture gives the child the test's stdin.
  static int serial = 0;
  const std::filesystem::path request_path = std::filesystem::temp_directory_path() /
      ("llama_js_request_" + std::to_string(::getpid()) + "_" + std::to_string(serial++) + ".json");
  std::ofstream(request_path) << q.dump();
  const RunResult run = run_capture({find_on_path("node"), (llama_js_dir() / "run.mjs").string(), gguf,
                                     request_path.string()});
  std::filesystem::remove(request_path);
  if (run.exit_status != 0)
    throw std::runtime_error("node tests/llama_js/run.mjs " + gguf + " failed with status " +
                             std::to_string(run.exit_status) + " (its message is above)");
  const json a = json::parse(run.out);
  LlamaJsResult r;
  const json& vocab = a.at("vocab");
  r.n_vocab = vocab.at("n_vocab").get<int64_t>();
  r.bos = vocab.at("bos").is_null() ? -1 : vocab.at("bos").get<int32_t>();
  r.eos = vocab.at("eos").is_null() ? -1 : vocab.at("eos").get<int32_t>();
  r.add_bos = vocab.at("add_bos").get<bool>();
  if (a.contains("tokens")) r.tokens = a.at("tokens").get<std::vector<std::vector<int32_t>>>();
  if (a.contains("log_probs")) {
    for (const json& row : a.at("log_probs")) {
      std::vector<float> v;
      v.reserve(row.size());
      for (const json& x : row) v.push_back(x.is_null() ? -std::numeric_limits<float>::infinity() : x.get<float>());
      if (int64_t(v.size()) != r.n_vocab)
        throw std::runtime_error("run.mjs gave a row of " + std::to_string(v.size()) + " log-probabilities for a " +
                                 std::to_string(r.n_vocab) + "-token vocabulary");
      r.log_probs.push_back(std::move(v));
    }
  }
  if (a.contains("greedy")) r.greedy = a.at("greedy").get<std::vector<int32_t>>();
  if (r.tokens.size() != request.tokenize.size() || int(r.greedy.size()) != request.greedy)
    throw std::runtime_error("run.mjs answered " + std::to_string(r.tokens.size()) + " tokenizations and " +
                             std::to_string(r.greedy.size()) + " greedy tokens, asked " +
                             std::to_string(request.tokenize.size()) + " and " + std::to_string(request.greedy));
  return r;
}

/// log softmax of one position's logits, in double.
inline std::vector<double> log_softmax(std::span<const float> logits) {
  double top = -std::numeric_limits<double>::infinity();
  for (float z : logits) top = std::max(top, double(z));
  double sum = 0;
  for (float z : logits) sum += std::exp(double(z) - top);
  std::vector<double> out;
  out.reserve(logits.size());
  for (float z : logits) out.push_back(double(z) - top - std::log(sum));
  return out;
}

/// How far llama.cpp's log-probabilities `llama` (a row of LlamaJsResult::log_probs) are from those of
/// `logits`: the largest |llama - want| / (1 + |want|) over the entries whose want = log_softmax(logits)
/// is above -80; below, float32 probabilities are subnormal, and only both being below -80 is asked
/// (else the error is infinite). Infinite too when the lengths differ or a value is NaN.
inline double log_prob_error(std::span<const float> llama, std::span<const float> logits) {
  if (llama.size() != logits.size()) return std::numeric_limits<double>::infinity();
  const std::vector<double> want = log_softmax(logits);
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double got = llama[i];
    if (std::isnan(got) || std::isnan(want[i])) return std::numeric_limits<double>::infinity();
    if (want[i] > -80) {
      worst = std::max(worst, std::fabs(got - want[i]) / (1 + std::fabs(want[i])));
    } else if (got > -80) {
      return std::numeric_limits<double>::infinity();
    }
  }
  return worst;
}

}  // namespace test_support
