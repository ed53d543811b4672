// "One include is enough": every public header under include/tensorgrad/ is
// reached from tensorgrad/tensorgrad.h through its #include lines, so a
// program written from the documentation never needs a second include.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#ifndef TENSORGRAD_SOURCE_DIR
#error "tests/CMakeLists.txt defines TENSORGRAD_SOURCE_DIR (the source tree)"
#endif

namespace fs = std::filesystem;

TEST(UmbrellaHeader, ReachesEveryPublicHeader) {
  const fs::path include = fs::path(TENSORGRAD_SOURCE_DIR) / "include";
  std::set<std::string> all;
  for (const auto& e : fs::recursive_directory_iterator(include / "tensorgrad"))
    if (e.is_regular_file() && e.path().extension() == ".h")
      all.insert(fs::relative(e.path(), include).generic_string());
  ASSERT_TRUE(all.count("tensorgrad/tensorgrad.h"));
  const std::regex line(R"re(^\s*#\s*include\s*"(tensorgrad/[^"]+)")re");
  std::set<std::string> reached{"tensorgrad/tensorgrad.h"};
  std::vector<std::string> todo{"tensorgrad/tensorgrad.h"};
  while (!todo.empty()) {
    const std::string h = todo.back();
    todo.pop_back();
    std::ifstream in(include / h);
    ASSERT_TRUE(in) << h;
    for (std::string l; std::getline(in, l);) {
      std::smatch m;
      if (std::regex_search(l, m, line) && reached.insert(m[1]).second) todo.push_back(m[1]);
    }
  }
  for (const std::string& h : all) EXPECT_TRUE(reached.count(h)) << h << " is not reached from tensorgrad/tensorgrad.h";
}
