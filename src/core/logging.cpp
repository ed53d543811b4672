#include "tensorgrad/core/logging.h"

#include <cstdio>
#include <mutex>

namespace tensorgrad {

namespace {
std::mutex g_log_mutex;
LogHandler g_handler;
}  // namespace

void set_log_handler(LogHandler handler) {
  std::lock_guard<std::mutex> lock(g_log_mutex);
  g_handler = std::move(handler);
}

void log_message(LogLevel level, const std::string& message) {
  std::lock_guard<std::mutex> lock(g_log_mutex);
  if (g_handler) {
    g_handler(level, message);
    return;
  }
  std::fprintf(stderr, "tensorgrad %s: %s\n", level == LogLevel::Warning ? "warning" : "info", message.c_str());
}

}  // namespace tensorgrad
