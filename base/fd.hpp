#pragma once
// A file descriptor that closes itself, and whole positional reads and
// writes (and a hole at the end): what the config reader, the upload spool
// and the node's image copies (providers/images/stage.hpp) each wrote for
// themselves.

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <utility>

#include <unistd.h>

namespace egress {

/// Owns a descriptor (-1: none) and closes it; moves, never copies.
class unique_fd {
public:
  unique_fd() = default;
  explicit unique_fd(int fd) : fd_(fd) {}
  unique_fd(unique_fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  unique_fd& operator=(unique_fd&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  ~unique_fd() {
    if (fd_ >= 0)
      ::close(fd_);
  }

  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }

private:
  int fd_ = -1;
};

/// Writes all `n` bytes at `offset` (interrupted writes retried): 0, or the
/// errno of the failure (EIO for a write that wrote nothing).
inline int pwrite_all(int fd, uint64_t offset, const char* data, size_t n) {
  while (n > 0) {
    auto w = ::pwrite(fd, data, n, static_cast<off_t>(offset));
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return w == 0 ? EIO : errno;
    data += w;
    n -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
  return 0;
}

/// Makes the file `length` bytes long (ftruncate): longer, the new part is
/// a hole that reads as zeros and takes no room; shorter, the rest is cut
/// off. 0, or the errno of the failure.
inline int set_length(int fd, uint64_t length) {
  return ::ftruncate(fd, static_cast<off_t>(length)) == 0 ? 0 : errno;
}

/// Reads all `n` bytes at `offset` (interrupted reads retried): 0, or the
/// errno of the failure (ENODATA when the file ends first).
inline int pread_all(int fd, uint64_t offset, char* data, size_t n) {
  while (n > 0) {
    auto r = ::pread(fd, data, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return r == 0 ? ENODATA : errno;
    data += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return 0;
}

} // namespace egress
