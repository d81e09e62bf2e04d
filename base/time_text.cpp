#include "base/time_text.hpp"

#include <cstdint>
#include <cstdio>
#include <ctime>
#include <utility>

namespace egress {

std::string duration_text(std::chrono::nanoseconds d) {
  auto ns = d.count();
  if (ns == 0)
    return "0s";
  std::string sign = ns < 0 ? "-" : "";
  // Magnitude as unsigned: the most negative value has no positive twin.
  auto abs_ns = ns < 0 ? uint64_t{0} - static_cast<uint64_t>(ns) : static_cast<uint64_t>(ns);
  static constexpr std::pair<uint64_t, const char*> units[] = {
    {3'600'000'000'000, "h"}, {60'000'000'000, "min"}, {1'000'000'000, "s"},
    {1'000'000, "ms"},        {1'000, "us"},
  };
  for (auto [factor, suffix] : units)
    if (abs_ns % factor == 0)
      return sign + std::to_string(abs_ns / factor) + suffix;
  return sign + std::to_string(abs_ns) + "ns";
}

std::string elapsed_text(std::chrono::nanoseconds d) {
  char buf[48];
  auto ms = std::chrono::duration<double, std::milli>(d).count();
  if (ms < 1000 && ms > -1000)
    std::snprintf(buf, sizeof buf, "%.1f ms", ms);
  else
    std::snprintf(buf, sizeof buf, "%.1f s", ms / 1000);
  return buf;
}

std::string now_rfc3339() {
  auto t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

} // namespace egress
