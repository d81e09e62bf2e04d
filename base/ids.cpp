#include "base/ids.hpp"

#include <cerrno>
#include <cstdint>
#include <random>

#include <sys/random.h>

namespace egress {

namespace {

// 16 bytes from the kernel's random pool in one getrandom() call. Not a
// std::random_device per uid: constructing one probes the CPU (cpuid), which
// traps to the hypervisor on this project's VM kind: 18 us of CPU per uid
// against 0.55 us, and in bench/converge's profile 8 % of the actors'
// threads while proxies were created
// (docs/notes/fleet-supervision.md#what-bounds-the-engines-cpu-per-converged-proxy).
// A device is the fallback where the call fails (a kernel before 3.17).
void random_bytes(uint8_t (&out)[16]) {
  size_t got = 0;
  while (got < sizeof out) {
    auto n = ::getrandom(out + got, sizeof out - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    std::random_device rd;
    for (auto& b : out)
      b = static_cast<uint8_t>(rd());
    return;
  }
}

} // namespace

std::string new_uid() {
  uint8_t bytes[16];
  random_bytes(bytes);
  std::string out;
  out.reserve(32);
  static const char hex[] = "0123456789abcdef";
  for (auto b : bytes) {
    out += hex[b >> 4];
    out += hex[b & 0xf];
  }
  return out;
}

} // namespace egress
