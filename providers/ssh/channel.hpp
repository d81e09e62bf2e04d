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
  channel(LIBSSH2_SESSION* s, LIBSSH2_CHANNEL* ch, std::string what)
    : session_(s), ch_(ch), what_(std::move(what)) {}

  LIBSSH2_SESSION* session_; // 1.10 has no libssh2_channel_get_session
  LIBSSH2_CHANNEL* ch_;
  std::string what_;
  std::string stderr_;
};

} // namespace egress::ssh
