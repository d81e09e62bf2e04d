#pragma once
// Whether a buffer holds only zeros: what an image's upload sends as a hole
// (providers/libvirt/volumes.hpp) and the node's copy leaves unwritten
// (providers/images/stage.hpp).

#include <cstddef>
#include <cstring>

namespace egress {

/// True if the `n` bytes at `p` are all zero (also for n == 0). The first
/// byte, then each byte against the one before it: memcmp runs at memory
/// speed, far below what the bytes cost to encrypt or write.
inline bool all_zero(const char* p, size_t n) {
  return n == 0 || (p[0] == 0 && std::memcmp(p, p + 1, n - 1) == 0);
}

} // namespace egress
