#pragma once
// A libssh2 session over a TCP socket the engine owns.
//
// We open the socket ourselves (instead of letting a library dial) for one
// reason: the kill. The fd is published to the kill_switch before connect()
// starts, so a kill from any thread can shutdown() it while the TCP connect,
// the SSH handshake or the login blocks, and each of them returns within
// milliseconds (measured: docs/notes/transport.md#kill-timings).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <caf/error.hpp>

#include <libssh2.h>

#include "providers/ssh/kill_switch.hpp"

namespace egress::ssh {

// What the host's config gives has no default here: the engine's options are
// made from the config in one place (actors/parts/transport_choice.cpp), whose
// defaults are the config's (messages/config.hpp); an option left unset is
// refused by validate().
struct session_options {
  /// The host's name in messages (e.g. "hv1"); the address if empty.
  std::string host;
  /// Numeric IPv4 or IPv6 address. Names are refused: a DNS lookup blocks in
  /// getaddrinfo(), which no shutdown() can interrupt.
  std::string address;
  uint16_t port = 0;
  std::string user;
  /// An ed25519 private key (see user_key.hpp for why only ed25519).
  std::string key_file;
  /// OpenSSH known_hosts file; mandatory (invariant 13).
  std::string known_hosts;
  /// Bounds the TCP connect, and separately each SSH step (handshake, login,
  /// channel open).
  std::chrono::milliseconds connect_timeout{0};
  /// TCP_USER_TIMEOUT: how long sent data may stay unacknowledged before the
  /// kernel kills the connection (0 = kernel default, about 15 minutes).
  std::chrono::milliseconds tcp_user_timeout{0};
  /// TCP keepalive for an idle link: first probe, probe interval, count.
  std::chrono::seconds tcp_keepalive_idle{10};
  std::chrono::seconds tcp_keepalive_interval{5};
  int tcp_keepalive_count = 3;
};

/// Checks options that need no I/O (address literal, port, user, files).
/// Returns invalid_argument (or auth_failed for a non-ed25519 key).
caf::error validate(const session_options& opts);

/// How messages name an SSH server: "hv1 (10.0.0.5:22)", "hv2 ([fd00::2]:22)";
/// the address stands in for an empty host name.
std::string endpoint_name(const std::string& host, const std::string& address,
                          uint16_t port);

class session {
public:
  /// Publishes its TCP fd in `ks` as kill_switch::far.
  explicit session(kill_switch& ks) noexcept;
  ~session();

  session(const session&) = delete;
  session& operator=(const session&) = delete;

  /// TCP connect, SSH handshake, host key check, ed25519 login. Blocks,
  /// bounded by the options' timeouts and by the kill switch. Errors:
  /// invalid_argument / auth_failed / host_key_rejected (permanent), or
  /// ssh_failed (transient: refused, reset, timeout, EOF, killed).
  /// After a host key rejection nothing more is sent, no login is tried.
  caf::error open(const session_options& opts);

  LIBSSH2_SESSION* get() const noexcept { return session_; }
  int fd() const noexcept { return fd_; }

  /// "hv1 (10.0.0.5:22)": how messages name the far end.
  const std::string& who() const noexcept { return who_; }

  /// libssh2's text for its last error ("" if none).
  std::string last_error() const;

  /// When the last byte arrived from the server (fed by libssh2's recv
  /// callback, so it counts keepalive replies too). The pump's watchdog
  /// reads it.
  std::chrono::steady_clock::time_point last_received() const noexcept;

  /// Restarts the receive clock, e.g. while the pump chooses not to read.
  void touch_received() noexcept;

  /// Send coalescing for the pump (non-blocking mode only): from here on,
  /// what libssh2 sends is gathered in a userspace buffer and goes out in
  /// one send() per flush() (or when the buffer fills) instead of one per
  /// SSH packet. Off during the blocking setup steps.
  void coalesce_sends(bool on) noexcept;

  /// Sends what coalescing holds, without blocking. Returns 0 when nothing
  /// is left, 1 when the socket took only part (poll for POLLOUT, call
  /// again), or -errno on a broken socket.
  int flush() noexcept;

  /// Receive gating for the pump (non-blocking mode only), the reading twin
  /// of coalesce_sends: once the socket has answered EAGAIN, libssh2's
  /// further reads in the same pump turn get EAGAIN without a recv(). Every
  /// libssh2 call that may read tries the socket first (each lane's read, its
  /// stderr drain, each write's window-adjust drain), so a turn over five
  /// lanes made about ten recv() calls, nearly all EAGAIN: four in five of
  /// the pump's syscalls in bench/converge
  /// (docs/notes/fleet-supervision.md#what-bounds-the-engines-cpu-per-converged-proxy).
  /// What one recv() brought sits in libssh2's queue for every lane; what
  /// arrives later is the next turn's, which starts at once after a turn
  /// that moved bytes, or after the poll() that the socket wakes. Off
  /// during the blocking setup steps, where libssh2 waits on the socket.
  void gate_receives(bool on) noexcept;

  /// A new pump turn: the socket is worth one recv() again.
  void new_turn() noexcept { drained_ = false; }

  /// Whether flush() left bytes behind.
  bool output_pending() const noexcept { return out_len_ > 0; }

  /// Whether the coalescing buffer takes one more whole SSH packet. The pump
  /// asks before every libssh2 call that may send (a channel's write, read
  /// with its window adjusts, open, keepalive): libssh2 1.10 keeps a packet
  /// the socket did not take whole as pending and answers any other packet
  /// with LIBSSH2_ERROR_BAD_USE until that one is out, and with several
  /// channels on one session the next packet is often another channel's. So
  /// no packet is ever left half sent: without room the pump waits for
  /// POLLOUT and flushes first.
  bool room_for_packet() const noexcept;

  /// Bytes received from the server so far (the pump's thread only). libssh2
  /// reads whatever the socket holds, for any channel, into its own queue:
  /// the pump counts a turn that received bytes as progress, so that what
  /// one lane's read queued for another is read before the next poll (which
  /// the empty socket would not wake).
  uint64_t received() const noexcept { return received_; }

private:
  static ssize_t send_hook(libssh2_socket_t fd, const void* buf, size_t len,
                           int flags, void** abstract);
  static ssize_t recv_hook(libssh2_socket_t fd, void* buf, size_t len, int flags,
                           void** abstract);

  caf::error tcp_connect(const session_options& opts,
                         std::chrono::steady_clock::time_point deadline);
  caf::error fail(const std::string& step, int rc);

  kill_switch& kill_;
  int fd_ = -1;
  LIBSSH2_SESSION* session_ = nullptr;
  std::string who_;
  std::atomic<int64_t> last_rx_ns_{0};
  uint64_t received_ = 0;
  // Receive gating: only the pump's thread touches these.
  bool gate_ = false;
  bool drained_ = false; // the socket said EAGAIN in this turn
  // The coalescing buffer: only the pump's thread touches it.
  bool coalesce_ = false;
  std::unique_ptr<char[]> out_;
  size_t out_len_ = 0;
  int out_errno_ = 0; // a failed flush, reported by the next send
};

} // namespace egress::ssh
