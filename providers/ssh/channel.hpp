#pragma once
// The SSH channel that carries libvirt's RPC bytes to the remote daemon.
//
// Preferred: `direct-streamlocal@openssh.com`, sshd connecting straight to
// the remote unix socket (needs AllowStreamLocalForwarding, on by default).
// libssh2 1.10 has no libssh2_channel_direct_streamlocal_ex (it came in
// 1.11), so we build the channel-open request by hand.
// Fallback: exec a remote command that bridges stdin/stdout to the socket
// (`nc -U /path`, `virt-ssh-helper qemu:///system`); its stderr is drained
// and kept for error messages.

#include <memory>
#include <string>

#include <caf/expected.hpp>

#include <libssh2.h>

#include "providers/ssh/session.hpp"

namespace egress::ssh {

class channel;
using channel_ptr = std::unique_ptr<channel>;

class channel {
public:
  /// How much remote stderr is kept for messages.
  static constexpr size_t stderr_limit = 4096;

  /// Opens direct-streamlocal to `socket_path` on the server. On failure:
  /// ssh_failed naming the path and the server's answer.
  static caf::expected<channel_ptr> open_streamlocal(session& s,
                                                     const std::string& socket_path);

  /// Opens a session channel and execs `command` in it.
  static caf::expected<channel_ptr> open_exec(session& s, const std::string& command);

  /// Either of the above, chosen as ssh_transport_options choose (a command
  /// if one is given), on a session in blocking or non-blocking mode: see
  /// opener.
  class opener;

  /// Frees the channel. The owner shuts the TCP socket down before, so the
  /// close libssh2 sends here fails at once instead of waiting for sshd.
  ~channel();

  channel(const channel&) = delete;
  channel& operator=(const channel&) = delete;

  LIBSSH2_CHANNEL* get() const noexcept { return ch_; }

  /// What the channel leads to, for messages: "socket /path" or "command '...'".
  const std::string& what() const noexcept { return what_; }

  /// libssh2 return conventions (bytes, LIBSSH2_ERROR_EAGAIN, < 0 error).
  ssize_t read(char* buf, size_t len) noexcept;
  ssize_t write(const char* buf, size_t len) noexcept;

  /// True once the server sent EOF (or closed the channel).
  bool eof() const noexcept;

  /// Reads whatever stderr is pending and keeps the first stderr_limit bytes.
  /// Exec channels need this: in libssh2 1.10 unread stderr data stays
  /// queued ahead of the EOF, so libssh2_channel_eof() never turns true
  /// and the pump would hang on a finished command.
  void drain_stderr() noexcept;

  /// " (exit status 1; remote stderr: ...)" or "" if there is nothing to say.
  std::string end_detail() const;

private:
  friend class opener;
  channel(LIBSSH2_SESSION* s, LIBSSH2_CHANNEL* ch, std::string what)
    : session_(s), ch_(ch), what_(std::move(what)) {}

  LIBSSH2_SESSION* session_; // 1.10 has no libssh2_channel_get_session
  LIBSSH2_CHANNEL* ch_;
  std::string what_;
  std::string stderr_;
};

/// Opens one channel step by step on a non-blocking session, for the
/// bridge's later lanes (bridge.hpp): the pump calls step() on each turn
/// until it gives the channel or an error, and polls the session's socket in
/// between. libssh2 takes one channel open at a time on a session, with the
/// same arguments on every retry, so one opener works at a time.
class channel::opener {
public:
  /// `command` empty: direct-streamlocal to `socket_path`; else exec it.
  opener(session& s, std::string socket_path, std::string command)
    : session_(s), socket_path_(std::move(socket_path)), command_(std::move(command)) {}
  ~opener();

  opener(const opener&) = delete;
  opener& operator=(const opener&) = delete;

  /// The channel once open; an empty pointer while libssh2 would block (on
  /// a blocking session never); ssh_failed naming what was refused.
  caf::expected<channel_ptr> step();

private:
  session& session_;
  std::string socket_path_;
  std::string command_;
  LIBSSH2_CHANNEL* exec_pending_ = nullptr; // session channel open, exec not yet accepted
};

} // namespace egress::ssh
