#include "providers/ssh/host_key.hpp"

#include <cstdint>
#include <fstream>
#include <memory>

#include "messages/error.hpp"

namespace egress::ssh {

namespace {

std::string base64_unpadded(const unsigned char* data, size_t len) {
  static const char table[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < len; ++i) {
    acc = (acc << 8) | data[i];
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out.push_back(table[(acc >> bits) & 0x3f]);
    }
  }
  if (bits > 0)
    out.push_back(table[(acc << (6 - bits)) & 0x3f]);
  return out;
}

struct key_kind {
  const char* name;  // as OpenSSH writes it
  int known_host_mask; // LIBSSH2_KNOWNHOST_KEY_*
};

key_kind kind_of_host_key(int type) {
  switch (type) {
    case LIBSSH2_HOSTKEY_TYPE_RSA: return {"ssh-rsa", LIBSSH2_KNOWNHOST_KEY_SSHRSA};
    case LIBSSH2_HOSTKEY_TYPE_DSS: return {"ssh-dss", LIBSSH2_KNOWNHOST_KEY_SSHDSS};
    case LIBSSH2_HOSTKEY_TYPE_ECDSA_256:
      return {"ecdsa-sha2-nistp256", LIBSSH2_KNOWNHOST_KEY_ECDSA_256};
    case LIBSSH2_HOSTKEY_TYPE_ECDSA_384:
      return {"ecdsa-sha2-nistp384", LIBSSH2_KNOWNHOST_KEY_ECDSA_384};
    case LIBSSH2_HOSTKEY_TYPE_ECDSA_521:
      return {"ecdsa-sha2-nistp521", LIBSSH2_KNOWNHOST_KEY_ECDSA_521};
    case LIBSSH2_HOSTKEY_TYPE_ED25519:
      return {"ssh-ed25519", LIBSSH2_KNOWNHOST_KEY_ED25519};
    default: return {"unknown", LIBSSH2_KNOWNHOST_KEY_UNKNOWN};
  }
}

struct known_hosts_deleter {
  void operator()(LIBSSH2_KNOWNHOSTS* kh) const noexcept { libssh2_knownhost_free(kh); }
};

} // namespace

std::string known_hosts_name(const std::string& address, uint16_t port) {
  if (port == 22)
    return address;
  return "[" + address + "]:" + std::to_string(port);
}

std::string host_key_fingerprint(LIBSSH2_SESSION* session) {
  auto hash = libssh2_hostkey_hash(session, LIBSSH2_HOSTKEY_HASH_SHA256);
  if (!hash)
    return "SHA256:?";
  return "SHA256:" + base64_unpadded(reinterpret_cast<const unsigned char*>(hash), 32);
}

caf::error verify_host_key(LIBSSH2_SESSION* session, const std::string& known_hosts,
                           const std::string& address, uint16_t port,
                           const std::string& who) {
  auto reject = [&](const std::string& why) {
    return make_error(ec::host_key_rejected, who + ": " + why);
  };
  size_t key_len = 0;
  int key_type = 0;
  auto key = libssh2_session_hostkey(session, &key_len, &key_type);
  if (!key)
    return reject("the server sent no host key");
  auto kind = kind_of_host_key(key_type);
  auto offered = std::string{"server offered "} + kind.name + " "
                 + host_key_fingerprint(session);
  std::unique_ptr<LIBSSH2_KNOWNHOSTS, known_hosts_deleter> kh{
    libssh2_knownhost_init(session)};
  if (!kh)
    return reject("cannot allocate a known_hosts store");
  // Line by line rather than libssh2_knownhost_readfile: readfile gives up on
  // the first line libssh2 1.10 cannot parse (@cert-authority, sk-* keys...),
  // losing every line after it. A skipped line can only turn a match into
  // "not found", never into an acceptance.
  std::ifstream in{known_hosts};
  if (!in)
    return reject("cannot read known_hosts " + known_hosts);
  int skipped = 0;
  for (std::string line; std::getline(in, line);) {
    line += '\n';
    if (libssh2_knownhost_readline(kh.get(), line.data(), line.size(),
                                   LIBSSH2_KNOWNHOST_FILE_OPENSSH)
        != 0)
      ++skipped;
  }
  // Port -1: match only the exact name OpenSSH would use. With a port,
  // libssh2 would also accept a plain "addr" entry (the host's port-22 key)
  // for a server on another port, which OpenSSH does not.
  auto name = known_hosts_name(address, port);
  struct libssh2_knownhost* found = nullptr;
  auto check = libssh2_knownhost_checkp(kh.get(), name.c_str(), -1, key, key_len,
                                        LIBSSH2_KNOWNHOST_TYPE_PLAIN
                                          | LIBSSH2_KNOWNHOST_KEYENC_RAW
                                          | kind.known_host_mask,
                                        &found);
  auto note = skipped > 0 ? " (" + std::to_string(skipped)
                              + " line(s) libssh2 cannot parse were skipped)"
                          : std::string{};
  switch (check) {
    case LIBSSH2_KNOWNHOST_CHECK_MATCH:
      return {};
    case LIBSSH2_KNOWNHOST_CHECK_MISMATCH:
      return reject("HOST KEY MISMATCH: known_hosts " + known_hosts + " has a different "
                    + kind.name + " key for " + name + "; " + offered
                    + "; not logging in" + note);
    case LIBSSH2_KNOWNHOST_CHECK_NOTFOUND:
      return reject("host " + name + " has no " + kind.name + " key in known_hosts "
                    + known_hosts + "; " + offered + "; not logging in" + note);
    default:
      return reject("known_hosts check failed for " + name + "; " + offered);
  }
}

} // namespace egress::ssh
