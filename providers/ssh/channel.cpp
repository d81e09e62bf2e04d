#include "providers/ssh/channel.hpp"

#include <algorithm>
#include <arpa/inet.h>

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

} // namespace

caf::expected<channel_ptr> channel::open_streamlocal(session& s,
                                                     const std::string& socket_path) {
  // RFC 4254 CHANNEL_OPEN type-specific data for OpenSSH's
  // direct-streamlocal@openssh.com (PROTOCOL, section 2.4):
  //   string socket path, string reserved (""), uint32 reserved (0).
  std::string payload;
  put_u32(payload, static_cast<uint32_t>(socket_path.size()));
  payload += socket_path;
  put_u32(payload, 0);
  put_u32(payload, 0);
  static const char type[] = "direct-streamlocal@openssh.com";
  // Default window (2 MiB): a larger one made reads bimodal and up to 5x
  // slower with libssh2 1.10 (docs/notes/transport.md#throughput).
  auto ch = libssh2_channel_open_ex(s.get(), type, sizeof(type) - 1,
                                    LIBSSH2_CHANNEL_WINDOW_DEFAULT,
                                    LIBSSH2_CHANNEL_PACKET_DEFAULT, payload.data(),
                                    static_cast<unsigned>(payload.size()));
  if (!ch) {
    auto text = s.last_error();
    auto msg = s.who() + ": cannot open a channel to the remote socket " + socket_path
               + ": " + text;
    if (text.find("prohibited") != std::string::npos)
      msg += " (sshd needs AllowStreamLocalForwarding yes, or set remote_command "
             "to use an exec channel)";
    return make_error(ec::ssh_failed, std::move(msg));
  }
  return channel_ptr{new channel(s.get(), ch, "socket " + socket_path)};
}

caf::expected<channel_ptr> channel::open_exec(session& s, const std::string& command) {
  auto ch = libssh2_channel_open_session(s.get());
  if (!ch)
    return make_error(ec::ssh_failed, s.who() + ": cannot open a session channel: "
                                        + s.last_error());
  channel_ptr result{new channel(s.get(), ch, "command '" + command + "'")};
  if (auto rc = libssh2_channel_exec(ch, command.c_str()); rc != 0)
    return make_error(ec::ssh_failed, s.who() + ": exec '" + command
                                        + "' refused: " + s.last_error());
  return result;
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
