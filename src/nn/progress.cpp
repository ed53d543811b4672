#include "nn/progress.h"

#include <unistd.h>

namespace tensorgrad::nn {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
std::string format_seconds(double s) {
  char buf[32];
  if (s >= 60) std::snprintf(buf, sizeof buf, "%d:%02d", int(s) / 60, int(s) % 60);
  else std::snprintf(buf, sizeof buf, "%.1fs", s);
  return buf;
}
}  // namespace

ProgressPrinter::ProgressPrinter(int verbose, int epochs)
    : verbose_(verbose), epochs_(epochs), live_(verbose == 1 && isatty(STDOUT_FILENO)) {}

void ProgressPrinter::begin_epoch(int epoch, int64_t steps) {
  epoch_ = epoch;
  steps_ = steps;
  start_ = last_draw_ = std::chrono::steady_clock::now();
}

void ProgressPrinter::step(int64_t done, const std::string& metrics) {
  if (!live_ || (done < steps_ && seconds_since(last_draw_) < 0.1)) return;
  last_draw_ = std::chrono::steady_clock::now();
  constexpr int kWidth = 30;
  const int filled = steps_ ? int(kWidth * done / steps_) : kWidth;
  std::string bar(size_t(filled), '=');
  if (filled < kWidth) bar += '>' + std::string(size_t(kWidth - filled - 1), '.');
  const double elapsed = seconds_since(start_);
  const double eta = done ? elapsed / double(done) * double(steps_ - done) : 0.0;
  std::printf("\rEpoch %d/%d %lld/%lld [%s] ETA %s - %s\033[K", epoch_ + 1, epochs_, (long long)done,
              (long long)steps_, bar.c_str(), format_seconds(eta).c_str(), metrics.c_str());
  std::fflush(stdout);
}

void ProgressPrinter::end_epoch(const std::string& metrics) {
  if (verbose_ == 0) return;
  const double elapsed = seconds_since(start_);
  if (live_) std::printf("\r\033[K");
  std::printf("Epoch %d/%d - %s - %s\n", epoch_ + 1, epochs_, format_seconds(elapsed).c_str(), metrics.c_str());
  std::fflush(stdout);
}

}  // namespace tensorgrad::nn
