// The fuzzing corpus (fuzz/corpus/, made by scripts/fuzz.sh) as a regression
// suite: every file, malformed or not, either parses and reads or is refused
// with a tensorgrad::Error. Any other exception fails; a crash ends the run.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <typeinfo>
#include <vector>

#include "tensorgrad/io/gguf.h"
#include "tensorgrad/tensorgrad.h"

#ifndef TENSORGRAD_SOURCE_DIR
#error "tests/CMakeLists.txt defines TENSORGRAD_SOURCE_DIR (the source tree, for fuzz/corpus)"
#endif

namespace {

namespace fs = std::filesystem;
using namespace tensorgrad;
using namespace tensorgrad::io;

std::vector<uint8_t> slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

/// Parses `bytes` and reads every tensor. Returns "" on success, the typed
/// error's message prefixed by "refused: ", or throws whatever else came.
std::string parse_and_read(const std::vector<uint8_t>& bytes, int& tensors_read) {
  try {
    const GGUFFile file = GGUFFile::parse(bytes);
    for (const MetadataEntry& entry : file.metadata()) {
      if (entry.value.type == ValueType::String) (void)file.get_string(entry.key);
    }
    for (const TensorInfo& info : file.tensors()) {
      const Tensor t = file.read(info.name);
      if (t.shape() != info.shape)
        throw std::logic_error("read() gave shape " + t.shape().str() + " for " + info.name + ", the table has " +
                               info.shape.str());
      ++tensors_read;
    }
    return "";
  } catch (const Error& e) {
    return std::string("refused: ") + e.what();
  }
}

}  // namespace

TEST(GGUFCorpus, EveryCorpusFileGivesATypedError) {
  const fs::path corpus = fs::path(TENSORGRAD_SOURCE_DIR) / "fuzz" / "corpus";
  ASSERT_TRUE(fs::is_directory(corpus)) << corpus << " is missing: it is committed; scripts/fuzz.sh remakes it";
  int files = 0, parsed = 0, refused = 0, tensors_read = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(corpus)) {
    if (!entry.is_regular_file()) continue;
    ++files;
    const std::vector<uint8_t> bytes = slurp(entry.path());
    try {
      const std::string outcome = parse_and_read(bytes, tensors_read);
      if (outcome.empty()) {
        ++parsed;
      } else {
        ++refused;
      }
    } catch (const std::exception& e) {
      ADD_FAILURE() << entry.path().filename() << " (" << bytes.size() << " bytes): a " << typeid(e).name()
                    << " instead of a tensorgrad::Error or success: " << e.what();
    } catch (...) {
      ADD_FAILURE() << entry.path().filename() << ": threw something that is not a std::exception";
    }
  }
  std::printf("[          ] %d corpus files: %d parsed (%d tensors read), %d refused with a tensorgrad::Error\n",
              files, parsed, tensors_read, refused);
  ASSERT_GT(files, 0) << corpus << " is empty: run scripts/fuzz.sh to remake it";
  // A corpus made from valid seeds keeps some valid files and many refused ones.
  EXPECT_GT(parsed, 0) << "no corpus file parses: the reader refuses everything";
  EXPECT_GT(refused, 0) << "no corpus file is refused: the corpus does not exercise the checks";
}
