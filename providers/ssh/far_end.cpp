#include "providers/ssh/far_end.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/time_text.hpp"
#include "messages/error.hpp"

namespace egress::ssh {

namespace {

// libssh2's texts for a dead TCP connection ("transport read") do not say
// what happened; these do.
std::string libssh2_failure(const std::string& what, ssize_t rc, const std::string& text) {
  std::string out = what + ": ";
  if (rc == LIBSSH2_ERROR_SOCKET_RECV || rc == LIBSSH2_ERROR_SOCKET_DISCONNECT)
    out += "connection to the server lost (" + text + ")";
  else if (rc == LIBSSH2_ERROR_SOCKET_SEND)
    out += "cannot send to the server (" + text + ")";
  else
    out += text;
  return out + " (rc=" + std::to_string(rc) + ")";
}

} // namespace

far_end::~far_end() = default;

far_source::~far_source() = default;

// -- socket_end ---------------------------------------------------------------

ssize_t socket_end::read(char* buf, size_t len) {
  auto n = ::recv(fd_, buf, len, 0);
  if (n > 0)
    return n;
  if (n == 0)
    return end_of_stream;
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
    return would_block;
  failure_ = "daemon socket " + path_ + ": recv: " + std::strerror(errno);
  return failed;
}

ssize_t socket_end::write(const char* buf, size_t len) {
  auto n = ::send(fd_, buf, len, MSG_NOSIGNAL);
  if (n >= 0)
    return n;
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
    return would_block;
  failure_ = "daemon socket " + path_ + ": send: " + std::strerror(errno);
  return failed;
}

short socket_end::poll_events(bool want_read, bool want_write) const {
  return static_cast<short>((want_read ? POLLIN : 0) | (want_write ? POLLOUT : 0));
}

std::string socket_end::end_reason() const {
  return "daemon socket " + path_ + " EOF";
}

// -- channel_end --------------------------------------------------------------

channel_end::channel_end(session& s, channel& ch, std::chrono::seconds keepalive,
                         std::chrono::milliseconds watchdog, std::string host)
  : session_(s), channel_(ch), keepalive_(keepalive), watchdog_(watchdog),
    host_(std::move(host)) {
}

ssize_t channel_end::read(char* buf, size_t len) {
  if (!session_.room_for_packet())
    return would_block; // a read may send a window adjust (session.hpp)
  auto n = channel_.read(buf, len);
  // Drained on every read, see channel::drain_stderr: without it an exec
  // channel's EOF stays hidden behind unread stderr.
  channel_.drain_stderr();
  if (n > 0)
    return n;
  if (n == 0 || n == LIBSSH2_ERROR_EAGAIN)
    return channel_.eof() ? end_of_stream : would_block;
  failure_ = libssh2_failure("channel read", n, session_.last_error());
  return failed;
}

ssize_t channel_end::write(const char* buf, size_t len) {
  if (!session_.room_for_packet())
    return would_block;
  auto n = channel_.write(buf, len);
  if (n >= 0)
    return n;
  if (n == LIBSSH2_ERROR_EAGAIN)
    return would_block;
  failure_ = libssh2_failure("channel write", n, session_.last_error());
  return failed;
}

int channel_end::flush() {
  auto rc = session_.flush();
  if (rc >= 0)
    return rc;
  failure_ = libssh2_failure("channel write", LIBSSH2_ERROR_SOCKET_SEND,
                             std::string{"send: "} + std::strerror(-rc));
  return static_cast<int>(failed);
}

short channel_end::poll_events(bool want_read, bool want_write) const {
  // No room for a whole packet: nothing moves until the socket takes some
  // (a POLLIN here would spin: the reads wait for room too).
  if (!session_.room_for_packet())
    return POLLOUT;
  // Gathered bytes still to go out: the socket's room is what we wait for.
  if (session_.output_pending())
    return static_cast<short>(POLLOUT | (want_read ? POLLIN : 0));
  // Nothing wanted, nothing polled: libssh2 may report "blocked inbound"
  // from an old read, and a POLLIN on a socket we are not going to read
  // (the client is slow, our buffer toward it is full) would spin the pump.
  if (!want_read && !want_write)
    return 0;
  // libssh2 knows which way it is stuck: a write may wait for the server's
  // window adjust (inbound), a read may need to finish sending a packet
  // (outbound). Never ask for POLLOUT otherwise: the socket is almost always
  // writable and the poll would spin.
  auto dirs = libssh2_session_block_directions(session_.get());
  short events = want_read ? POLLIN : 0;
  if (dirs & LIBSSH2_SESSION_BLOCK_INBOUND)
    events |= POLLIN;
  if (dirs & LIBSSH2_SESSION_BLOCK_OUTBOUND)
    events |= POLLOUT;
  if (events == 0)
    events = POLLIN;
  return events;
}

std::string channel_end::tick(bool reading) {
  if (keepalive_.count() > 0) {
    // Sends keepalive@openssh.com (want-reply) once the interval has passed;
    // the server's answer is what keeps the watchdog quiet on an idle link.
    // Errors are ignored on purpose: while a channel packet is half sent,
    // libssh2 refuses to start another one (EAGAIN), and a broken socket
    // shows up on the next read or write anyway.
    int next = 1;
    if (session_.room_for_packet())
      libssh2_keepalive_send(session_.get(), &next);
    next_keepalive_ms_ = std::max(1, next) * 1000;
  }
  if (watchdog_.count() > 0) {
    // While the pump does not read (libvirt's client is slow to take what we
    // have), silence from the server is our own doing: the clock restarts.
    if (!reading) {
      session_.touch_received();
      return {};
    }
    auto silent = std::chrono::steady_clock::now() - session_.last_received();
    if (silent >= watchdog_)
      return "ssh watchdog: no bytes from " + host_ + " for " + duration_text(watchdog_);
  }
  return {};
}

int channel_end::next_tick_ms() const {
  int result = next_keepalive_ms_;
  if (watchdog_.count() > 0) {
    auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - session_.last_received());
    auto left = static_cast<int>(std::max<int64_t>(1, (watchdog_ - silent).count() + 1));
    result = result < 0 ? left : std::min(result, left);
  }
  return result;
}

bool channel_end::settle() {
  // sshd sends EOF, then exit-status, then CLOSE. Non-blocking, this returns
  // EAGAIN until the CLOSE is in; by then the exit status is recorded.
  auto rc = libssh2_channel_wait_closed(channel_.get());
  channel_.drain_stderr();
  return rc != LIBSSH2_ERROR_EAGAIN;
}

std::string channel_end::end_reason() const {
  return "remote channel EOF from " + channel_.what() + channel_.end_detail();
}

// -- channel_source -----------------------------------------------------------

channel_source::channel_source(session& s, channel& first, std::string socket_path,
                               std::string command, std::chrono::seconds keepalive,
                               std::chrono::milliseconds watchdog, std::string host)
  : session_(s), socket_path_(std::move(socket_path)), command_(std::move(command)) {
  ends_.push_back(std::make_unique<channel_end>(s, first, keepalive, watchdog,
                                                std::move(host)));
}

channel_source::~channel_source() = default;

far_end* channel_source::open_lane(size_t lane, std::string& error) {
  if (lane < ends_.size())
    return ends_[lane].get();
  if (!session_.room_for_packet())
    return nullptr; // the open is a packet too (session.hpp)
  if (!opening_)
    opening_ = std::make_unique<channel::opener>(session_, socket_path_, command_);
  auto ch = opening_->step();
  if (!ch) {
    error = detail(ch.error());
    return nullptr;
  }
  if (!*ch)
    return nullptr; // libssh2 would block: the next turn goes on
  opening_.reset();
  channels_.push_back(std::move(*ch));
  // Timers are lane 0's alone: no keepalive, no watchdog here.
  ends_.push_back(std::make_unique<channel_end>(session_, *channels_.back(),
                                                std::chrono::seconds{0},
                                                std::chrono::milliseconds{0}, std::string{}));
  return ends_.back().get();
}

// -- socket_source ------------------------------------------------------------

int connect_daemon_socket(const std::string& path, kill_switch& ks, size_t lane,
                          std::string& error) {
  auto fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    error = std::string{"socket: "} + std::strerror(errno);
    return -1;
  }
  if (!ks.arm(kill_switch::far, fd, lane)) {
    error = "killed before connect"; // the caller closes it, after the kill
    return fd;
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(),
              std::min(path.size() + 1, sizeof(addr.sun_path) - 1));
  // A unix connect completes or fails at once (EAGAIN: the daemon's backlog
  // is full), so there is nothing to wait for.
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    error = std::string{"connect: "} + std::strerror(errno);
  return fd;
}

socket_source::socket_source(int first_fd, std::string path, kill_switch& ks)
  : path_(std::move(path)), kill_(ks) {
  ends_.push_back(std::make_unique<socket_end>(first_fd, path_));
}

socket_source::~socket_source() {
  ends_.clear();
  for (auto fd : fds_)
    ::close(fd);
}

far_end* socket_source::open_lane(size_t lane, std::string& error) {
  if (lane < ends_.size())
    return ends_[lane].get();
  auto fd = connect_daemon_socket(path_, kill_, lane, error);
  if (fd >= 0)
    fds_.push_back(fd);
  if (!error.empty())
    return nullptr;
  ends_.push_back(std::make_unique<socket_end>(fd, path_));
  return ends_.back().get();
}

} // namespace egress::ssh
