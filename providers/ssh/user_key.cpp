#include "providers/ssh/user_key.hpp"

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "messages/error.hpp"

namespace egress::ssh {

namespace {

bool read_file(const std::string& path, std::string& out) {
  std::ifstream in{path, std::ios::binary};
  if (!in)
    return false;
  std::ostringstream buf;
  buf << in.rdbuf();
  out = buf.str();
  return true;
}

// Decodes standard base64, skipping whitespace; stops at '=' or garbage.
std::string base64_decode(const std::string& text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    if (c == '\n' || c == '\r' || c == ' ' || c == '\t')
      continue;
    int v = value(c);
    if (v < 0)
      break;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return out;
}

// Reads one SSH wire-format "string" (uint32 length + bytes) at `pos`.
bool read_string(const std::string& blob, size_t& pos, std::string& out) {
  if (blob.size() < pos + 4)
    return false;
  auto b = reinterpret_cast<const unsigned char*>(blob.data() + pos);
  uint32_t len = (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16)
                 | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
  pos += 4;
  if (blob.size() - pos < len)
    return false;
  out.assign(blob, pos, len);
  pos += len;
  return true;
}

// The key type inside an "openssh-key-v1" container: magic, cipher name, kdf
// name, kdf options, key count, then the first public key blob, whose first
// field is the algorithm name. All of that precedes the encrypted part.
std::string openssh_key_type(const std::string& pem) {
  static const char begin[] = "-----BEGIN OPENSSH PRIVATE KEY-----";
  auto from = pem.find(begin);
  auto to = pem.find("-----END", from);
  if (from == std::string::npos || to == std::string::npos)
    return {};
  from += sizeof(begin) - 1;
  auto blob = base64_decode(pem.substr(from, to - from));
  static const char magic[] = "openssh-key-v1"; // followed by a NUL
  if (blob.compare(0, sizeof(magic), std::string(magic, sizeof(magic))) != 0)
    return {};
  size_t pos = sizeof(magic);
  std::string cipher, kdf, kdf_opts, pub, type;
  if (!read_string(blob, pos, cipher) || !read_string(blob, pos, kdf)
      || !read_string(blob, pos, kdf_opts) || blob.size() < pos + 4)
    return {};
  pos += 4; // number of keys
  if (!read_string(blob, pos, pub))
    return {};
  size_t p = 0;
  if (!read_string(pub, p, type))
    return {};
  return type;
}

} // namespace

std::string user_key_type(const std::string& key_file) {
  std::string text;
  // A public key file: "<type> <base64> [comment]".
  if (read_file(key_file + ".pub", text)) {
    auto end = text.find_first_of(" \t\n");
    auto type = text.substr(0, end);
    if (!type.empty())
      return type;
  }
  if (!read_file(key_file, text))
    return {};
  if (text.find("-----BEGIN OPENSSH PRIVATE KEY-----") != std::string::npos)
    return openssh_key_type(text);
  // Traditional PEM files name their algorithm in the header.
  if (text.find("-----BEGIN RSA PRIVATE KEY-----") != std::string::npos)
    return "ssh-rsa";
  if (text.find("-----BEGIN DSA PRIVATE KEY-----") != std::string::npos)
    return "ssh-dss";
  if (text.find("-----BEGIN EC PRIVATE KEY-----") != std::string::npos)
    return "ecdsa-sha2";
  return {};
}

caf::error check_user_key(const std::string& key_file) {
  if (key_file.empty())
    return make_error(ec::invalid_argument, "ssh: no key_file given");
  if (::access(key_file.c_str(), R_OK) != 0)
    return make_error(ec::invalid_argument, "ssh: cannot read key_file " + key_file
                                              + ": " + std::strerror(errno));
  auto type = user_key_type(key_file);
  if (type.empty() || type == "ssh-ed25519")
    return {};
  std::string why;
  if (type == "ssh-rsa")
    why = "libssh2 1.10 signs RSA keys with SHA-1 (ssh-rsa), which OpenSSH 8.8 and "
          "later (OpenSSH 9) refuse";
  else if (type == "ssh-dss")
    why = "OpenSSH disabled DSA keys in 7.0";
  else
    why = "only ed25519 keys are supported with libssh2 1.10";
  return make_error(ec::auth_failed, "ssh: key_file " + key_file + " is a " + type
                                       + " key: " + why
                                       + "; use an ed25519 key (ssh-keygen -t ed25519)");
}

} // namespace egress::ssh
