#pragma once
// SHA-256 over a stream of bytes (OpenSSL EVP), for verifying an image while
// it is downloaded: the bytes are hashed as they pass, never read twice.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

struct evp_md_ctx_st;

namespace egress::mirror {

class sha256 {
public:
  /// Throws std::bad_alloc if OpenSSL cannot allocate a digest context.
  sha256();
  ~sha256();
  sha256(sha256&& other) noexcept;
  sha256& operator=(sha256&& other) noexcept;
  sha256(const sha256&) = delete;
  sha256& operator=(const sha256&) = delete;

  void update(const char* data, size_t n);
  void update(std::string_view data) { update(data.data(), data.size()); }

  /// Bytes fed so far. A hasher seeded with an image's first N bytes must say
  /// N here: the download checks it against its resume offset, because a
  /// seed of the wrong length would make every digest "mismatch" for a
  /// reason nobody could see.
  uint64_t size() const { return size_; }

  /// The digest of everything fed so far, lowercase hex. Finalizes a copy of
  /// the state, so feeding may continue afterwards.
  std::string hex() const;

private:
  evp_md_ctx_st* ctx_ = nullptr;
  uint64_t size_ = 0;
};

/// The sha256 of `data`, lowercase hex.
std::string sha256_hex(std::string_view data);

} // namespace egress::mirror
