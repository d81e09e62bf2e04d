#pragma once
// The bridge: a private unix socket that libvirt's client connects to
// (URI "qemu+unix:///system?socket=<path>"), and the pump that moves bytes
// between that one client and a far end (SSH channel or local socket).
//
// The engine, not libvirt, owns every fd on this path, so a kill is just
// shutdown() on them (kill_switch.hpp) and every blocked libvirt call on the
// connection returns within milliseconds.

#include <memory>
#include <string>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "messages/error.hpp"
#include "providers/ssh/far_end.hpp"
#include "providers/ssh/kill_switch.hpp"

namespace egress::ssh {

class bridge_socket;
using bridge_socket_ptr = std::unique_ptr<bridge_socket>;

class bridge_socket {
public:
  /// Creates a fresh 0700 directory under `base_dir` (mkdtemp; "/tmp" if
  /// empty) holding a listening socket of mode 0600, and publishes the
  /// listening fd in `ks`. A bad base_dir is invalid_argument; other
  /// failures carry `code`.
  static caf::expected<bridge_socket_ptr> open(const std::string& base_dir,
                                               kill_switch& ks, ec code);

  /// Closes the fds, removes the socket and the directory.
  ~bridge_socket();

  bridge_socket(const bridge_socket&) = delete;
  bridge_socket& operator=(const bridge_socket&) = delete;

  /// The socket path for libvirt's URI.
  const std::string& path() const noexcept { return path_; }
  const std::string& directory() const noexcept { return dir_; }

  int listen_fd() const noexcept { return listen_fd_; }
  int client_fd() const noexcept { return client_fd_; }

  /// Accepts the single client without blocking: true if it is in (or was
  /// before). Publishes its fd in the kill switch; removes the socket path
  /// so nobody else can connect. Sets `error` on a real failure.
  bool accept_client(std::string& error);

  /// Accepts and drops clients queued behind the first one, so a client
  /// that connected late sees EOF now instead of waiting for the destructor.
  void refuse_queued() noexcept;

private:
  bridge_socket(kill_switch& ks) : kill_(ks) {}

  kill_switch& kill_;
  std::string dir_;
  std::string path_;
  int listen_fd_ = -1;
  int client_fd_ = -1;
};

/// Moves bytes both ways between the bridge's single client and `far` until
/// one side ends, something fails, or `ks` fires; then fires `ks` so both
/// sides see EOF at once. Returns the reason as `code`:
/// "<who>: local client EOF", "<who>: remote channel EOF ...", "<who>: killed",
/// "<who>: ssh watchdog: ...", or the read/write error. Never returns an
/// empty error. Buffers up to 1 MiB per direction.
caf::error run_pump(bridge_socket& bridge, far_end& far, kill_switch& ks, ec code,
                    const std::string& who);

/// Turns a libvirt URI without transport or host ("qemu:///system",
/// "test:///default") into the one that reaches it through a bridge socket:
/// "qemu+unix:///system?socket=<path>". invalid_argument if the URI names a
/// host or a socket itself.
caf::expected<std::string> bridged_uri(const std::string& libvirt_uri,
                                       const std::string& socket_path);

} // namespace egress::ssh
