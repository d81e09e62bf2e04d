#include "base/log.hpp"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <unistd.h>

namespace egress::log {

namespace {

level from_env() {
  const char* v = std::getenv("EGRESS_LOG");
  if (v == nullptr)
    return level::info;
  std::string_view s{v};
  if (s == "error")
    return level::error;
  if (s == "warn")
    return level::warn;
  if (s == "debug")
    return level::debug;
  return level::info;
}

std::atomic<int>& current() {
  static std::atomic<int> x{static_cast<int>(from_env())};
  return x;
}

const char* label(level x) {
  switch (x) {
    case level::error: return "ERROR";
    case level::warn: return "WARN ";
    case level::info: return "INFO ";
    case level::debug: return "DEBUG";
  }
  return "?    ";
}

} // namespace

void set_level(level x) { current() = static_cast<int>(x); }

bool enabled(level x) { return static_cast<int>(x) <= current().load(); }

void write(level x, std::string_view component, std::string_view text) {
  if (!enabled(x))
    return;
  auto now = std::chrono::system_clock::now();
  auto t = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
              now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char stamp[32];
  auto n = std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
  std::string line{stamp, n};
  char frac[8];
  std::snprintf(frac, sizeof frac, ".%03dZ ", static_cast<int>(ms));
  line += frac;
  line += label(x);
  line += ' ';
  line += component;
  line += ": ";
  line += text;
  line += '\n';
  // One write per line: atomic for pipes up to PIPE_BUF and good enough for
  // terminals and files.
  auto rc = ::write(STDERR_FILENO, line.data(), line.size());
  (void) rc;
}

} // namespace egress::log
