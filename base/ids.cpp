#include "base/ids.hpp"

#include <cstdio>
#include <random>

namespace egress {

std::string new_uid() {
  std::random_device rd;
  std::string out;
  char buf[9];
  for (int i = 0; i < 4; ++i) {
    std::snprintf(buf, sizeof buf, "%08x", static_cast<unsigned>(rd()));
    out += buf;
  }
  return out;
}

} // namespace egress
