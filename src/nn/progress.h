#pragma once
// Progress of fit: a live bar with ETA on a terminal, one line per epoch
// otherwise (as Keras' verbose=1 / verbose=2). No C++ progress-bar library is
// packaged in Debian 12 (apt-cache search finds only Rust and Haskell ones),
// so this small printer is our own.
#include <chrono>
#include <cstdio>
#include <string>

namespace tensorgrad::nn {

class ProgressPrinter {
 public:
  /// verbose as FitOptions::verbose; writes to stdout.
  ProgressPrinter(int verbose, int epochs);
  void begin_epoch(int epoch, int64_t steps);
  /// After each step: steps done and the running metrics text.
  void step(int64_t done, const std::string& metrics);
  /// The epoch's final line with every metric.
  void end_epoch(const std::string& metrics);

 private:
  int verbose_;
  int epochs_;
  bool live_;
  int epoch_ = 0;
  int64_t steps_ = 0;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace tensorgrad::nn
