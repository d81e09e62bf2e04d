#pragma once
// Small things many suites need: reproducible bytes, the process's thread and
// fd counts (for "nothing leaked" checks), and millisecond arithmetic for
// messages. Header-only and free of Boost.Test: the benchmarks use it too.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <ostream>
#include <string>

namespace egress::test {

/// Pseudo-random bytes (splitmix64): unlike a short repeating pattern, a
/// chunk sent twice, dropped or written at the wrong offset never matches.
inline std::string pattern(size_t n, uint64_t seed) {
  std::string out(n, '\0');
  uint64_t x = seed;
  for (size_t i = 0; i < n; i += 8) {
    x += 0x9e3779b97f4a7c15ULL;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    for (size_t k = 0; k < 8 && i + k < n; ++k)
      out[i + k] = static_cast<char>(z >> (8 * k));
  }
  return out;
}

/// The process's threads and open descriptors.
struct resources {
  size_t threads = 0;
  size_t fds = 0;
  bool operator==(const resources&) const = default;
};

inline size_t count_entries(const char* dir) {
  size_t n = 0;
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator(dir))
    ++n;
  return n;
}

inline resources now_resources() {
  return {count_entries("/proc/self/task"), count_entries("/proc/self/fd")};
}

inline std::ostream& operator<<(std::ostream& os, const resources& r) {
  return os << r.threads << " threads, " << r.fds << " fds";
}

template <class Duration>
long long ms_of(Duration d) {
  return static_cast<long long>(
    std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
}

/// steady_clock now, in nanoseconds: for timestamps shared between threads.
inline int64_t now_ns() {
  return std::chrono::steady_clock::now().time_since_epoch().count();
}

} // namespace egress::test
