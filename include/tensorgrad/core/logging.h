#pragma once
#include <functional>
#include <string>

namespace tensorgrad {

/// Severity of a log message.
enum class LogLevel { Info, Warning };

/// Receives every message tensorgrad logs. Default: writes "tensorgrad
/// warning: <message>" lines to standard error. Tests and applications may
/// redirect it; an empty handler restores the default.
using LogHandler = std::function<void(LogLevel level, const std::string& message)>;
/// Replaces the handler for the whole process (an empty one: the default).
void set_log_handler(LogHandler handler);
/// Sends a message through the handler (thread-safe).
void log_message(LogLevel level, const std::string& message);

}  // namespace tensorgrad
