#pragma once
// The engine's transports to libvirt daemons, both through a bridge socket
// of ours (bridge.hpp) so that kill() is only shutdown() calls:
//
//   libvirt client --unix (0700 dir)--> pump --libssh2 channel / TCP--> sshd --> libvirtd
//   libvirt client --unix (0700 dir)--> pump --unix--> local libvirtd
//
// Lifecycle (one object per dial): connect() in a detached actor; then the
// link runs pump() in another detached actor for the link's lifetime, and it
// must start before libvirt opens uri() (the open waits for the daemon's
// answer, which only the pump delivers). kill() from anywhere, any time.
// The last owner frees everything; after a kill that never blocks.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "providers/ssh/bridge.hpp"
#include "providers/ssh/channel.hpp"
#include "providers/ssh/far_end.hpp"
#include "providers/ssh/kill_switch.hpp"
#include "providers/ssh/session.hpp"
#include "providers/transport.hpp"

namespace egress {

// Made from the host's config in one place (actors/parts/transport_choice.cpp),
// with no defaults of its own: an option left unset is refused by validate().
struct ssh_transport_options {
  /// The SSH server and how to reach it (providers/ssh/session.hpp).
  ssh::session_options session;
  /// libvirtd's socket on the host, reached with direct-streamlocal.
  std::string remote_socket;
  /// Non-empty: exec this command instead (e.g. "nc -U /path" or
  /// "virt-ssh-helper qemu:///system"), for servers that forbid
  /// stream-local forwarding.
  std::string remote_command;
  /// What libvirt opens, without host or transport; uri() turns it into
  /// "qemu+unix:///system?socket=<bridge path>".
  std::string libvirt_uri;
  /// libvirt connections the transport carries, each through its own lane
  /// of the bridge: a channel of the one session (1..kill_switch::max_lanes);
  /// the first is opened by connect(), the others when libvirt's client
  /// connects again.
  size_t connections = 0;
  /// Where the private bridge directory is created.
  std::string bridge_dir;
  /// keepalive@openssh.com interval (libssh2 counts whole seconds); 0 = off.
  std::chrono::seconds ssh_keepalive_interval{0};
  /// End the pump if the server sends nothing for this long; 0 = off. Needs
  /// a keepalive interval shorter than itself, or an idle link would trip it.
  std::chrono::milliseconds ssh_watchdog{0};
  /// End the pump rather than send what it held across a stop of the
  /// process longer than this (run_pump, bridge.hpp); 0 = off.
  std::chrono::milliseconds stall_limit{0};
};

/// invalid_argument (or auth_failed for a non-ed25519 key) for options that
/// can never work; no I/O besides reading the key and known_hosts files.
caf::error validate(const ssh_transport_options& opts);

class ssh_transport final : public transport {
public:
  explicit ssh_transport(ssh_transport_options opts);
  ~ssh_transport() override;

  /// Bridge socket + TCP + SSH handshake + host key check + login + channel.
  /// Errors: invalid_argument, host_key_rejected, auth_failed (permanent);
  /// ssh_failed (transient, including "killed").
  caf::error connect() override;

  /// "qemu+unix:///system?socket=<bridge path>" once connect() succeeded.
  const std::string& uri() const noexcept override { return uri_; }

  bool has_pump() const noexcept override { return true; }

  /// Accepts libvirt's connection on the bridge and forwards until either
  /// side ends, the watchdog fires or kill() runs; always returns ssh_failed
  /// with the reason.
  caf::error pump() override;

  /// shutdown() on the TCP socket, the bridge's listening socket and every
  /// accepted client. Nothing else: no lock, no close, no libssh2 call.
  void kill() noexcept override { kill_.fire(); }

  const ssh_transport_options& options() const noexcept { return opts_; }

  /// The bridge socket's path ("" before connect()).
  std::string bridge_path() const;

private:
  caf::error connect_steps();

  ssh_transport_options opts_;
  ssh::kill_switch kill_;
  ssh::session session_;
  ssh::channel_ptr channel_;
  ssh::bridge_socket_ptr bridge_;
  std::unique_ptr<ssh::far_source> lanes_; // made by pump(), freed after the kill
  std::string uri_;
  std::atomic<bool> connect_started_{false};
  std::atomic<bool> connected_{false};
  std::atomic<bool> pump_started_{false};
};

// Made from the host's config with the SSH transport's options (no defaults).
struct local_socket_options {
  /// The host's name in messages; the socket path if empty.
  std::string host;
  /// The local daemon's socket, e.g. "/var/run/libvirt/libvirt-sock".
  std::string socket_path;
  std::string libvirt_uri;
  std::string bridge_dir;
  /// libvirt connections the transport carries, each through its own lane
  /// of the bridge: a socket to the daemon.
  size_t connections = 0;
  /// As ssh_transport_options::stall_limit.
  std::chrono::milliseconds stall_limit{0};
};

caf::error validate(const local_socket_options& opts);

/// The same bridge in front of a local daemon: local and remote hosts share
/// one pump and one kill path. Errors are connection_broken (transient)
/// unless the options are invalid.
class local_socket_transport final : public transport {
public:
  explicit local_socket_transport(local_socket_options opts);
  ~local_socket_transport() override;

  /// Bridge socket + connect to the daemon's socket (never blocks: a
  /// non-blocking unix connect either succeeds or fails at once).
  caf::error connect() override;
  const std::string& uri() const noexcept override { return uri_; }
  bool has_pump() const noexcept override { return true; }
  caf::error pump() override;
  void kill() noexcept override { kill_.fire(); }

  std::string bridge_path() const;

private:
  caf::error connect_steps();
  std::string who() const;

  local_socket_options opts_;
  ssh::kill_switch kill_;
  int daemon_fd_ = -1;
  ssh::bridge_socket_ptr bridge_;
  std::unique_ptr<ssh::far_source> lanes_; // made by pump(), freed after the kill
  std::string uri_;
  std::atomic<bool> connect_started_{false};
  std::atomic<bool> connected_{false};
  std::atomic<bool> pump_started_{false};
};

/// Factories for host links (see transport_factory): building the object
/// does no I/O.
transport_factory over_ssh(ssh_transport_options opts);
transport_factory over_local_socket(local_socket_options opts);

} // namespace egress
