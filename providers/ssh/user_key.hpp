#pragma once
// The user key check that runs before any byte goes to the network.
//
// libssh2 1.10 signs RSA user keys with SHA-1 ("ssh-rsa"); OpenSSH 8.8 and
// later (Debian 12 ships 9.2) refuse that signature, and all the client ever
// sees is the generic "Username/PublicKey combination invalid" (measured:
// docs/notes/transport.md#user-keys-ed25519-only). A refused key looks exactly like a key
// that is not authorized, so we tell the key type from the file first and
// give the real reason instead of sending a login that cannot succeed.

#include <string>

#include <caf/error.hpp>

namespace egress::ssh {

/// The algorithm name of a key file ("ssh-ed25519", "ssh-rsa",
/// "ecdsa-sha2-nistp256", "ssh-dss", ...). Read from "<key_file>.pub" when
/// that exists, else from the private key: its PEM header, or the public part
/// of an OpenSSH-format key (never encrypted, even with a passphrase).
/// Empty if the type cannot be told (e.g. PKCS#8 "BEGIN PRIVATE KEY").
std::string user_key_type(const std::string& key_file);

/// Fails with invalid_argument if the key file cannot be read, and with
/// auth_failed (permanent) if it is any type but ssh-ed25519, saying why.
/// An undeterminable type passes: the server gets to decide.
caf::error check_user_key(const std::string& key_file);

} // namespace egress::ssh
