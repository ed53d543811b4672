// Training curves as a picture: the gnuplot script carries every History
// value; with gnuplot installed the PNG is written (its signature checked);
// without it plot says so once and returns false.
#include <gtest/gtest.h>

#include "test_support.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tensorgrad/tensorgrad.h"

using namespace tensorgrad;
using namespace tensorgrad::nn;

namespace {
History sample_history() {
  History h;
  h.epoch = {0, 1, 2};
  h.history["loss"] = {0.9, 0.5123456789012345, 0.25};
  h.history["val_loss"] = {1.0, 0.75, std::nan("")};
  h.history["accuracy"] = {0.5, 0.75, 0.875};
  h.history["val_accuracy"] = {0.25, 0.5, 0.625};
  h.history["learning_rate"] = {0.001, 0.0005, 0.00025};
  return h;
}

bool have_gnuplot() { return std::system("command -v gnuplot > /dev/null 2>&1") == 0; }

bool is_png(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char sig[8] = {};
  f.read(sig, 8);
  return f.gcount() == 8 && std::string(sig, 8) == std::string("\x89PNG\r\n\x1a\n", 8);
}
}  // namespace

// Every value of the History is in the script's data, as the number it is
// (read back exactly), in its panel, by epoch from 1; NaN where missing.
TEST(Plot, ScriptHoldsEveryHistoryValue) {
  const History h = sample_history();
  const std::string s = history_gnuplot_script(h, "/tmp/x.png");
  std::istringstream in(s);
  std::map<std::string, std::vector<std::vector<double>>> blocks;  // title -> rows
  std::vector<std::vector<double>> rows;
  std::string line;
  bool in_block = false;
  while (std::getline(in, line)) {
    if (line.find("<< EOD") != std::string::npos) {
      in_block = true;
      rows.clear();
    } else if (line == "EOD") {
      in_block = false;
    } else if (in_block) {
      std::istringstream f(line);
      std::vector<double> r;
      for (std::string tok; f >> tok;) r.push_back(tok == "NaN" ? std::nan("") : std::stod(tok));
      rows.push_back(r);
    } else if (line.rfind("set title '", 0) == 0) {
      blocks[line.substr(11, line.size() - 12)] = rows;
    }
  }
  ASSERT_EQ(blocks.size(), 3u);  // loss, accuracy, learning_rate; val_* beside their twins
  for (const std::string& key : {"loss", "accuracy", "learning_rate"}) {
    SCOPED_TRACE(key);
    const auto& b = blocks.at(key);
    ASSERT_EQ(b.size(), 3u);
    const bool val = h.has("val_" + std::string(key));
    for (size_t e = 0; e < 3; ++e) {
      ASSERT_EQ(b[e].size(), val ? 3u : 2u);
      EXPECT_EQ(b[e][0], double(e + 1));
      EXPECT_EQ(b[e][1], h[key][e]);
      if (val) {
        const double want = h["val_" + std::string(key)][e];
        if (std::isnan(want)) EXPECT_TRUE(std::isnan(b[e][2]));
        else EXPECT_EQ(b[e][2], want);
      }
    }
  }
  EXPECT_NE(s.find("set output '/tmp/x.png'"), std::string::npos);
}

TEST(Plot, WritesAPngWithGnuplot) {
  if (!have_gnuplot()) GTEST_SKIP() << "gnuplot is not installed (scripts/setup.sh --plot installs gnuplot-nox)";
  const std::string path = ::testing::TempDir() + "tg_history.png";
  std::remove(path.c_str());
  EXPECT_TRUE(sample_history().plot(path));
  EXPECT_TRUE(is_png(path));
  std::remove(path.c_str());
  EXPECT_TRUE(test_support::throws<IOError>([] { plot_history(sample_history(), "/nonexistent-dir/x.png"); },
                                            {"gnuplot", "/nonexistent-dir/x.png"}));
  // The callback redraws after every epoch of a fit.
  Sequential m({1});
  m.add(Dense(1));
  m.compile(OptimizerSpec::sgd(0.1f), "mse");
  FitOptions o;
  o.verbose = 0;
  o.epochs = 2;
  o.callbacks = {std::make_shared<PlotHistory>(path)};
  m.fit(Tensor::full({4, 1}, 1.0f), Tensor::full({4, 1}, 2.0f), o);
  EXPECT_TRUE(is_png(path));
  std::remove(path.c_str());
}

TEST(Plot, WithoutGnuplotSaysSoOnceAndGoesOn) {
  const char* old = std::getenv("PATH");
  const std::string saved = old ? old : "";
  setenv("PATH", "/nonexistent-bin", 1);
  std::vector<std::string> warnings;
  set_log_handler([&](LogLevel, const std::string& m) { warnings.push_back(m); });
  const bool first = plot_history(sample_history(), "/tmp/never.png");
  const bool second = plot_history(sample_history(), "/tmp/never.png");
  set_log_handler(nullptr);
  setenv("PATH", saved.c_str(), 1);
  EXPECT_FALSE(first);
  EXPECT_FALSE(second);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("gnuplot is not installed"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("gnuplot-nox"), std::string::npos) << warnings[0];
}

// One epoch, a constant series and a series without a finite value: gnuplot
// draws them without a word on stderr ("empty x range", "empty y range",
// "all points y value undefined" before), and key names are plain text (no
// enhanced-mode subscript in learning_rate).
TEST(Plot, OneEpochAndConstantSeriesDrawSilently) {
  History h;
  h.epoch = {0};
  h.history["loss"] = {0.5};
  h.history["val_loss"] = {std::nan("")};
  h.history["learning_rate"] = {0.001};
  h.history["accuracy"] = {0.0};
  const std::string s = history_gnuplot_script(h, "/tmp/x.png");
  EXPECT_NE(s.find("pngcairo noenhanced"), std::string::npos) << s;
  if (!have_gnuplot()) GTEST_SKIP() << "gnuplot is not installed (scripts/setup.sh --plot installs gnuplot-nox)";
  const std::string path = ::testing::TempDir() + "tg_history_one_epoch.png";
  std::remove(path.c_str());
  History constant;
  constant.epoch = {0, 1, 2};
  constant.history["loss"] = {0.25, 0.25, 0.25};
  constant.history["val_loss"] = {std::nan(""), std::nan(""), std::nan("")};
  for (const History* hist : {&h, &constant}) {
    ::testing::internal::CaptureStderr();  // fd 2, which gnuplot inherits
    const bool drawn = hist->plot(path);
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_TRUE(drawn);
    EXPECT_EQ(err, "");
    EXPECT_TRUE(is_png(path));
    std::remove(path.c_str());
  }
}
