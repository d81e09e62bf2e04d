#include "providers/ssh/channel.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <utility>

#include "messages/error.hpp"

namespace egress::ssh {

namespace {

void put_u32(std::string& out, uint32_t v) {
  uint32_t be = htonl(v);
  out.append(reinterpret_cast<const char*>(&be), 4);
}

// Trims trailing newlines and makes control characters visible, so a remote
// error message fits on one log line.
std::string one_line(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\n' || c == '\r')
      out += out.empty() || out.back() == ' ' ? "" : " | ";
    else if (static_cast<unsigned char>(c) < 0x20)
      out += '?';
    else
      out += c;
  }
  while (!out.empty() && (out.back() == ' ' || out.back() == '|'))
    out.pop_back();
  return out;
}

std::string streamlocal_payload(const std::string& socket_path) {
  // RFC 4254 CHANNEL_OPEN type-specific data for OpenSSH's
  // direct-streamlocal@openssh.com (PROTOCOL, section 2.4):
  //   string socket path, string reserved (""), uint32 reserved (0).
  std::string payload;
  put_u32(payload, static_cast<uint32_t>(socket_path.size()));
  payload += socket_path;
  put_u32(payload, 0);
  put_u32(payload, 0);
  return payload;
}

constexpr char streamlocal_type[] = "direct-streamlocal@openssh.com";

bool would_block(session& s) {
  return libssh2_session_last_errno(s.get()) == LIBSSH2_ERROR_EAGAIN;
}

caf::error streamlocal_refused(session& s, const std::string& socket_path) {
  auto text = s.last_error();
  auto msg = s.who() + ": cannot open a channel to the remote socket " + socket_path
             + ": " + text;
  if (text.find("prohibited") != std::string::npos)
    msg += " (sshd needs AllowStreamLocalForwarding yes, or set remote_command "
           "to use an exec channel)";
  return make_error(ec::ssh_failed, std::move(msg));
}

caf::error exec_refused(session& s, const std::string& command) {
  return make_error(ec::ssh_failed,
                    s.who() + ": exec '" + command + "' refused: " + s.last_error());
}

caf::error session_refused(session& s) {
  // Exec channels are sessions: sshd allows MaxSessions (10 by default) per
  // connection, one per lane here.
  return make_error(ec::ssh_failed, s.who() + ": cannot open a session channel: "
                                      + s.last_error()
                                      + " (one per libvirt connection: sshd's MaxSessions?)");
}

} // namespace

namespace {

// The blocking opens are the opener's steps on a blocking session, where
// libssh2 never says it would block.
caf::expected<channel_ptr> open_blocking(session& s, std::string socket_path,
                                         std::string command) {
  auto r = channel::opener{s, std::move(socket_path), std::move(command)}.step();
  if (r && !*r)
    return make_error(ec::ssh_failed, s.who() + ": channel open would block on a "
                                                "blocking session");
  return r;
}

} // namespace

caf::expected<channel_ptr> channel::open_streamlocal(session& s,
                                                     const std::string& socket_path) {
  return open_blocking(s, socket_path, {});
}

caf::expected<channel_ptr> channel::open_exec(session& s, const std::string& command) {
  return open_blocking(s, {}, command);
}

channel::opener::~opener() {
  if (exec_pending_)
    libssh2_channel_free(exec_pending_);
}

caf::expected<channel_ptr> channel::opener::step() {
  auto& s = session_;
  if (command_.empty()) {
    // Default window (2 MiB): a larger one made reads bimodal and up to 5x
    // slower with libssh2 1.10 (docs/notes/transport.md#throughput).
    auto payload = streamlocal_payload(socket_path_);
    auto ch = libssh2_channel_open_ex(s.get(), streamlocal_type,
                                      sizeof(streamlocal_type) - 1,
                                      LIBSSH2_CHANNEL_WINDOW_DEFAULT,
                                      LIBSSH2_CHANNEL_PACKET_DEFAULT, payload.data(),
                                      static_cast<unsigned>(payload.size()));
    if (ch)
      return channel_ptr{new channel(s.get(), ch, "socket " + socket_path_)};
    if (would_block(s))
      return channel_ptr{};
    return streamlocal_refused(s, socket_path_);
  }
  if (!exec_pending_) {
    exec_pending_ = libssh2_channel_open_session(s.get());
    if (!exec_pending_)
      return would_block(s) ? caf::expected<channel_ptr>{channel_ptr{}} : session_refused(s);
  }
  auto rc = libssh2_channel_exec(exec_pending_, command_.c_str());
  if (rc == LIBSSH2_ERROR_EAGAIN)
    return channel_ptr{};
  if (rc != 0)
    return exec_refused(s, command_);
  auto ch = std::exchange(exec_pending_, nullptr);
  return channel_ptr{new channel(s.get(), ch, "command '" + command_ + "'")};
}

channel::~channel() {
  if (ch_)
    libssh2_channel_free(ch_);
}

ssize_t channel::read(char* buf, size_t len) noexcept {
  return libssh2_channel_read(ch_, buf, len);
}

ssize_t channel::write(const char* buf, size_t len) noexcept {
  return libssh2_channel_write(ch_, buf, len);
}

bool channel::eof() const noexcept {
  return libssh2_channel_eof(ch_) != 0;
}

void channel::drain_stderr() noexcept {
  char buf[4096];
  for (;;) {
    auto n = libssh2_channel_read_stderr(ch_, buf, sizeof buf);
    if (n <= 0)
      return;
    auto room = stderr_limit - std::min(stderr_limit, stderr_.size());
    stderr_.append(buf, std::min(room, static_cast<size_t>(n)));
  }
}

std::string channel::end_detail() const {
  std::string out;
  auto add = [&](const std::string& part) {
    out += out.empty() ? " (" : "; ";
    out += part;
  };
  char* signal = nullptr;
  libssh2_channel_get_exit_signal(ch_, &signal, nullptr, nullptr, nullptr, nullptr,
                                  nullptr);
  if (signal) {
    add(std::string{"killed by signal "} + signal);
    libssh2_free(session_, signal);
  } else if (auto status = libssh2_channel_get_exit_status(ch_); status != 0) {
    add("exit status " + std::to_string(status));
  }
  if (!stderr_.empty())
    add("remote stderr: " + one_line(stderr_));
  if (!out.empty())
    out += ")";
  return out;
}

} // namespace egress::ssh
