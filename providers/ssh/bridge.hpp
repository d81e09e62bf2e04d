#pragma once
// The bridge: a private unix socket that libvirt's client connects to
// (URI "qemu+unix:///system?socket=<path>"), and the pump that moves bytes
// between each of its clients and a far end (SSH channel or local socket).
//
// A bridge has lanes: libvirt connections through one transport, each its
// own client on the socket and its own far end (a channel of the one SSH
// session, or a socket of its own to the local daemon). A host link opens
// one per call it runs at once, so that no two threads ever share a libvirt
// connection (docs/architecture.md, "One call at a time on a connection").
//
// The engine, not libvirt, owns every fd on this path, so a kill is just
// shutdown() on them (kill_switch.hpp) and every blocked libvirt call on the
// connection returns within milliseconds.

#include <cstddef>
#include <memory>
#include <chrono>
#include <string>
#include <vector>

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
  /// empty) holding a listening socket of mode 0600 for `lanes` clients
  /// (1..kill_switch::max_lanes), and publishes the listening fd in `ks`. A
  /// bad base_dir or lane count is invalid_argument; other failures carry
  /// `code`.
  static caf::expected<bridge_socket_ptr> open(const std::string& base_dir,
                                               kill_switch& ks, ec code,
                                               size_t lanes = 1);

  /// Closes the fds, removes the socket and the directory.
  ~bridge_socket();

  bridge_socket(const bridge_socket&) = delete;
  bridge_socket& operator=(const bridge_socket&) = delete;

  /// The socket path for libvirt's URI.
  const std::string& path() const noexcept { return path_; }
  const std::string& directory() const noexcept { return dir_; }

  int listen_fd() const noexcept { return listen_fd_; }
  size_t lanes() const noexcept { return lanes_; }
  /// Clients accepted so far, one per lane in order.
  size_t clients() const noexcept { return client_fds_.size(); }
  int client_fd(size_t lane) const noexcept { return client_fds_[lane]; }
  bool accepting() const noexcept { return clients() < lanes_; }

  /// Accepts the next client without blocking, if a lane is left: its lane,
  /// or -1 if none came (or none may). Publishes its fd in the kill switch;
  /// removes the socket path once every lane has its client, so nobody else
  /// can connect. Sets `error` on a real failure.
  int accept_client(std::string& error);

  /// Accepts and drops clients still queued when the pump ends, so a client
  /// that connected late sees EOF now instead of waiting for the destructor.
  void refuse_queued() noexcept;

private:
  bridge_socket(kill_switch& ks) : kill_(ks) {}

  kill_switch& kill_;
  std::string dir_;
  std::string path_;
  size_t lanes_ = 1;
  int listen_fd_ = -1;
  std::vector<int> client_fds_;
};

/// Moves bytes both ways between each of the bridge's clients and its lane's
/// far end (from `far`) until a side of any lane ends, something fails, or
/// `ks` fires; then fires `ks` so every side sees EOF at once: a link's
/// connections live and die together. Returns the reason as `code`:
/// "<who>: local client EOF", "<who>: remote channel EOF ...", "<who>: killed",
/// "<who>: ssh watchdog: ...", a lane's refusal, or the read/write error.
/// Never returns an empty error. Buffers up to 1 MiB per direction on lane
/// 0 (uploads use it) and 256 KiB on the others, taken as they fill.
///
/// `stall_limit` (0: off): a pump that finds it stood still longer than
/// this (its process stopped, SIGSTOP, or starved), between reading a
/// client's bytes and sending them or past its poll's timeout, ends
/// instead of sending what it holds: in a cluster those bytes were a call
/// made under a lease that may be gone now (docs/architecture.md, "Node
/// failover"). Its poll then wakes at least every 250 ms.
caf::error run_pump(bridge_socket& bridge, far_source& far, kill_switch& ks, ec code,
                    const std::string& who,
                    std::chrono::milliseconds stall_limit = std::chrono::milliseconds{0});

/// Turns a libvirt URI without transport or host ("qemu:///system",
/// "test:///default") into the one that reaches it through a bridge socket:
/// "qemu+unix:///system?socket=<path>". invalid_argument if the URI names a
/// host or a socket itself.
caf::expected<std::string> bridged_uri(const std::string& libvirt_uri,
                                       const std::string& socket_path);

} // namespace egress::ssh
