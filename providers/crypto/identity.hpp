#pragma once
// The inspector's TLS identity on one machine (docs/spec.md 24): a private
// directory holding a CA certificate, and one certificate and key it signed.
// caf-run makes it on its first start and presents it; caf-shell, run by a
// user who may read the directory, presents the same one. CAF's OpenSSL
// module checks a certificate of that CA on both sides before a single
// BASP byte is read, so a local user who cannot read the directory never
// reaches a code path that allocates by a length it declares. The CA's key
// is thrown away once the certificate is signed: nobody can mint another.
//
//   <dir>/ca.pem         the trust anchor (cafile)
//   <dir>/identity.pem   the certificate (both sides)
//   <dir>/identity.key   its key, mode 0600
//
// The directory is mode 0700; one that others may write into, or a key
// others may read, is refused.

#include <string>

#include <caf/expected.hpp>

namespace egress::crypto {

struct identity_files {
  std::string dir;
  std::string ca;          // ca.pem
  std::string certificate; // identity.pem
  std::string key;         // identity.key
};

/// The identity in `dir`: ec::invalid_argument when a file is missing,
/// ec::access_denied when the directory or the key is not private (the
/// message names the file and says what to change).
caf::expected<identity_files> load_identity(const std::string& dir);

/// load_identity, after making one when `dir` holds none: the parent
/// folders are created (0700 for `dir` itself), the files are written into
/// a fresh directory beside it and renamed into place, so two processes
/// starting at once end up with one identity.
caf::expected<identity_files> ensure_identity(const std::string& dir);

/// Where the identity lives when nothing says otherwise, in this order:
/// $STATE_DIRECTORY/inspect (systemd's StateDirectory=), $XDG_STATE_HOME/
/// egress-engine/inspect, $HOME/.local/state/egress-engine/inspect, and
/// /var/lib/egress/inspect for a process without a home.
std::string default_identity_dir();

} // namespace egress::crypto
