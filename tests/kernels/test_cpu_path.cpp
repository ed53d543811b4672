// The CPU kernel path chosen at run time and TENSORGRAD_CPU, the override
// that forces a lesser one: the suite runs these tests once per path this
// machine can run (tests/CMakeLists.txt), so each entry checks that the path
// it names is the one in use, and what the override refuses.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include <unistd.h>

#include "tensorgrad/backend/backend.h"
#include "tensorgrad/core/error.h"

using namespace tensorgrad;

namespace {

int path_rank(const std::string& path) {
  const std::array<std::string, 4> order = {"avx2", "avx512", "avx512bf16", "amx"};
  for (size_t i = 0; i < order.size(); ++i)
    if (order[i] == path) return int(i);
  return -1;
}

// Runs this test binary's CpuPath.ChildReport under `env` and returns what it printed.
std::string child_report(const std::string& env) {
  std::array<char, 4096> self{};
  const ssize_t n = readlink("/proc/self/exe", self.data(), self.size() - 1);
  if (n <= 0) return "readlink(/proc/self/exe) failed";
  const std::string command = "env " + env + " TENSORGRAD_CPU_CHILD=1 '" + std::string(self.data(), size_t(n)) +
                              "' --gtest_filter=CpuPath.ChildReport 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  if (!pipe) return "popen failed";
  std::string out;
  std::array<char, 256> buf{};
  while (fgets(buf.data(), int(buf.size()), pipe.get())) out += buf.data();
  return out;
}

}  // namespace

TEST(CpuPath, TheOverrideNamesThePathInUse) {
  const std::string path = cpu_kernel_path();
  ASSERT_GE(path_rank(path), 0) << path;
  const char* env = std::getenv("TENSORGRAD_CPU");
  if (env && *env) EXPECT_EQ(path, env);
  // What each path turns on under mixed_bfloat16.
  EXPECT_EQ(bfloat16_supported(), path_rank(path) >= path_rank("avx512bf16"));
  EXPECT_EQ(bfloat16_convolutions_supported(), path == "avx512bf16");
}

// Not a test of its own: the child process of the two below prints the
// path, or the error the override gave.
TEST(CpuPath, ChildReport) {
  if (!std::getenv("TENSORGRAD_CPU_CHILD")) GTEST_SKIP() << "runs only as the child of the override tests";
  try {
    std::printf("path: %s\n", cpu_kernel_path());
  } catch (const ValueError& e) {
    std::printf("ValueError: %s\n", e.what());
  }
}

TEST(CpuPath, AnUnknownNameIsAValueError) {
  const std::string out = child_report("TENSORGRAD_CPU=avx1024");
  EXPECT_NE(out.find("ValueError: TENSORGRAD_CPU: expected one of avx2, avx512, avx512bf16, amx; got 'avx1024'. "
                     "Unset it to use the best path this CPU has"),
            std::string::npos)
      << out;
}

TEST(CpuPath, EveryPathUpToTheCpusIsTakenAndNoneAbove) {
  const std::string best = child_report("-u TENSORGRAD_CPU");
  const size_t at = best.find("path: ");
  ASSERT_NE(at, std::string::npos) << best;
  const std::string detected = best.substr(at + 6, best.find('\n', at) - at - 6);
  ASSERT_GE(path_rank(detected), 0) << best;
  for (const std::string path : {"avx2", "avx512", "avx512bf16", "amx"}) {
    SCOPED_TRACE(path);
    const std::string out = child_report("TENSORGRAD_CPU=" + path);
    if (path_rank(path) <= path_rank(detected)) {
      EXPECT_NE(out.find("path: " + path + "\n"), std::string::npos) << out;
    } else {
      EXPECT_NE(out.find("ValueError: TENSORGRAD_CPU=" + path + " asks for a kernel path this CPU cannot run: it has " +
                         detected + " at most"),
                std::string::npos)
          << out;
    }
  }
}
