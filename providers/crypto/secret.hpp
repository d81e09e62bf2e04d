#pragma once
// The inspector's shared secret, without ever sending it: random tokens and
// nonces, and HMAC-SHA-256 proofs (OpenSSL), compared in constant time.

#include <cstddef>
#include <string>

namespace egress::crypto {

/// Bytes as lowercase hex (digests, tokens).
std::string to_hex(const unsigned char* p, size_t n);

/// `bytes` random bytes from OpenSSL's CSPRNG, as lowercase hex. Throws
/// std::runtime_error if the generator fails (it never silently degrades).
std::string random_hex(size_t bytes);

/// HMAC-SHA-256 of `data` under `key`, as lowercase hex.
std::string hmac_sha256_hex(const std::string& key, const std::string& data);

/// True if a and b are equal; the time taken depends on their lengths only.
bool equal_constant_time(const std::string& a, const std::string& b);

} // namespace egress::crypto
