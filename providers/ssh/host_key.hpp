#pragma once
// Invariant 13: the server's host key is verified against a known_hosts file
// right after the key exchange, before anything else is sent. An unknown host
// or a different key is permanent (host_key_rejected): retrying cannot make
// an unverified server trustworthy, and sending our login to it would hand
// our identity to whoever answers.

#include <cstdint>
#include <string>

#include <caf/error.hpp>

#include <libssh2.h>

namespace egress::ssh {

/// The name under which OpenSSH files a host in known_hosts: "addr" on port
/// 22, "[addr]:port" otherwise.
std::string known_hosts_name(const std::string& address, uint16_t port);

/// The OpenSSH-style fingerprint of the session's host key, "SHA256:<base64>".
std::string host_key_fingerprint(LIBSSH2_SESSION* session);

/// Checks the host key of a session whose handshake is done. `who` names the
/// host in messages ("hv1 (10.0.0.5:22)"). Returns host_key_rejected, naming
/// host, port, key type and fingerprint, unless known_hosts holds exactly
/// this key for known_hosts_name(address, port). Does no network I/O.
caf::error verify_host_key(LIBSSH2_SESSION* session, const std::string& known_hosts,
                           const std::string& address, uint16_t port,
                           const std::string& who);

} // namespace egress::ssh
