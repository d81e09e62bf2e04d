#include "providers/ssh/session.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <mutex>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "messages/error.hpp"
#include "providers/ssh/host_key.hpp"
#include "providers/ssh/user_key.hpp"

namespace egress::ssh {

namespace {

using clock_type = std::chrono::steady_clock;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
           clock_type::now().time_since_epoch())
    .count();
}

long ms_left(clock_type::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline
                                                                    - clock_type::now());
  return left.count();
}

bool is_ip_literal(const std::string& address) {
  in6_addr buf;
  return inet_pton(AF_INET, address.c_str(), &buf) == 1
         || inet_pton(AF_INET6, address.c_str(), &buf) == 1;
}

// libssh2_init is not thread-safe and must run once before any session;
// links dial concurrently from detached actors.
void init_libssh2_once() {
  static std::once_flag once;
  std::call_once(once, [] { libssh2_init(0); });
}

// Errors from the login that mean "this key will not do" rather than "the
// connection broke": retrying cannot help, so they are permanent.
bool is_key_refusal(int rc) {
  return rc == LIBSSH2_ERROR_AUTHENTICATION_FAILED
         || rc == LIBSSH2_ERROR_PUBLICKEY_UNVERIFIED || rc == LIBSSH2_ERROR_FILE
         || rc == LIBSSH2_ERROR_PUBLICKEY_PROTOCOL
         || rc == LIBSSH2_ERROR_METHOD_NOT_SUPPORTED;
}

void set_int_option(int fd, int level, int name, int value) {
  // Best effort: a missing option (old kernel) must not fail the dial.
  ::setsockopt(fd, level, name, &value, sizeof value);
}

// The coalescing buffer. libssh2 1.10 hands its send callback one SSH packet
// at a time (32 KiB of channel data: the packet size sshd grants a
// direct-streamlocal channel), so the pump made one send() per packet.
// Measured (bench/upload, 512 MiB, perf trace of the pump thread): 17.3k
// send() calls without it, 2.5k with it, the pump's other syscalls
// unchanged; sshd already read ~160 KiB per read() either way (it is the
// slower side). The throughput gain is within this machine's noise (see
// the commit message); it costs one memcpy of what is sent. 256 KiB: one
// libvirt stream packet, and four loopback TCP segments.
constexpr size_t coalesce_capacity = size_t{256} << 10;

// The largest SSH packet libssh2 sends, with room to spare: 32 KiB of
// channel data (OpenSSH's packet size) plus header, padding and MAC; RFC
// 4253 caps a packet at 35000 bytes.
constexpr size_t packet_headroom = size_t{40} << 10;

} // namespace

std::string endpoint_name(const std::string& host, const std::string& address,
                          uint16_t port) {
  auto addr = address.find(':') == std::string::npos ? address : "[" + address + "]";
  return (host.empty() ? address : host) + " (" + addr + ":" + std::to_string(port) + ")";
}

caf::error validate(const session_options& opts) {
  auto bad = [](std::string what) {
    return make_error(ec::invalid_argument, "ssh: " + std::move(what));
  };
  if (!is_ip_literal(opts.address))
    return bad("address '" + opts.address
               + "' is not an IP literal (a DNS lookup could not be killed)");
  if (opts.port == 0)
    return bad("port 0");
  if (opts.user.empty())
    return bad("no user given");
  if (opts.known_hosts.empty())
    return bad("no known_hosts file given (host keys are always verified)");
  if (::access(opts.known_hosts.c_str(), R_OK) != 0)
    return bad("cannot read known_hosts " + opts.known_hosts + ": "
               + std::strerror(errno));
  if (opts.connect_timeout.count() <= 0)
    return bad("connect_timeout must be positive");
  if (opts.tcp_user_timeout.count() < 0)
    return bad("tcp_user_timeout must not be negative");
  return check_user_key(opts.key_file);
}

session::session(kill_switch& ks) noexcept : kill_(ks) {
  last_rx_ns_.store(now_ns());
}

session::~session() {
  // Shut the socket down first: libssh2 frees in blocking mode, and its
  // channel close waits for the server's reply unless the socket is dead.
  // On a shut-down socket every send/recv fails at once, so freeing never
  // blocks, whichever thread drops the last reference.
  if (fd_ >= 0)
    ::shutdown(fd_, SHUT_RDWR);
  coalesce_ = false; // the goodbye below goes straight to the (dead) socket
  gate_ = false;     // and libssh2 reads in blocking mode
  if (session_) {
    libssh2_session_set_blocking(session_, 1);
    libssh2_session_free(session_);
  }
  if (fd_ >= 0)
    ::close(fd_);
}

std::string session::last_error() const {
  if (!session_)
    return {};
  char* msg = nullptr;
  int len = 0;
  libssh2_session_last_error(session_, &msg, &len, 0);
  return msg ? std::string(msg, static_cast<size_t>(len)) : std::string{};
}

std::chrono::steady_clock::time_point session::last_received() const noexcept {
  return clock_type::time_point{std::chrono::nanoseconds{last_rx_ns_.load()}};
}

void session::touch_received() noexcept {
  last_rx_ns_.store(now_ns());
}

ssize_t session::recv_hook(libssh2_socket_t fd, void* buf, size_t len, int flags,
                           void** abstract) {
  auto* self = abstract ? static_cast<session*>(*abstract) : nullptr;
  if (self && self->gate_ && self->drained_)
    return -EAGAIN; // it said so earlier in this turn (gate_receives)
  auto n = ::recv(fd, buf, len, flags);
  if (n < 0) {
    auto err = errno;
    if (self && self->gate_ && (err == EAGAIN || err == EWOULDBLOCK))
      self->drained_ = true;
    return -err; // libssh2 expects -errno from its recv callback
  }
  if (n > 0 && self) {
    self->last_rx_ns_.store(now_ns());
    self->received_ += static_cast<uint64_t>(n);
  }
  return n;
}

ssize_t session::send_hook(libssh2_socket_t fd, const void* buf, size_t len,
                           int flags, void** abstract) {
  auto* self = abstract ? static_cast<session*>(*abstract) : nullptr;
  if (self && self->coalesce_) {
    if (self->out_errno_ != 0)
      return -self->out_errno_;
    if (self->out_len_ + len > coalesce_capacity) {
      if (auto rc = self->flush(); rc < 0)
        return rc;
    }
    // An empty buffer and a big packet: nothing to gather, send it as is.
    if (self->out_len_ > 0 || len < coalesce_capacity) {
      auto room = coalesce_capacity - self->out_len_;
      if (room == 0)
        return -EAGAIN; // libssh2 keeps the packet and polls for POLLOUT
      auto n = std::min(room, len);
      std::memcpy(self->out_.get() + self->out_len_, buf, n);
      self->out_len_ += n;
      return static_cast<ssize_t>(n); // a short count: libssh2 sends the rest later
    }
  }
  // libssh2's own send() passes no MSG_NOSIGNAL: after a kill shut the
  // socket down, its next write would raise SIGPIPE and end the process.
  auto n = ::send(fd, buf, len, flags | MSG_NOSIGNAL);
  if (n < 0)
    return -errno;
  return n;
}

bool session::room_for_packet() const noexcept {
  return !coalesce_ || coalesce_capacity - out_len_ >= packet_headroom;
}

void session::coalesce_sends(bool on) noexcept {
  if (on && !out_)
    out_.reset(new (std::nothrow) char[coalesce_capacity]);
  coalesce_ = on && out_ != nullptr;
}

void session::gate_receives(bool on) noexcept {
  gate_ = on;
  drained_ = false;
}

int session::flush() noexcept {
  size_t sent = 0;
  while (sent < out_len_) {
    auto n = ::send(fd_, out_.get() + sent, out_len_ - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      out_errno_ = errno;
      return -errno;
    }
    break;
  }
  if (sent > 0) {
    std::memmove(out_.get(), out_.get() + sent, out_len_ - sent);
    out_len_ -= sent;
  }
  return out_len_ > 0 ? 1 : 0;
}

caf::error session::fail(const std::string& step, int rc) {
  if (kill_.fired())
    return make_error(ec::ssh_failed, who_ + ": killed during " + step);
  auto text = last_error();
  if (rc == LIBSSH2_ERROR_TIMEOUT)
    text = "timed out";
  return make_error(ec::ssh_failed, who_ + ": " + step + ": " + text + " (rc="
                                      + std::to_string(rc) + ")");
}

caf::error session::tcp_connect(const session_options& opts,
                                clock_type::time_point deadline) {
  addrinfo hints{};
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV; // never a DNS lookup
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  auto port = std::to_string(opts.port);
  if (auto rc = getaddrinfo(opts.address.c_str(), port.c_str(), &hints, &res); rc != 0)
    return make_error(ec::invalid_argument, who_ + ": bad address: " + gai_strerror(rc));
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> guard{res, freeaddrinfo};
  fd_ = ::socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0)
    return make_error(ec::ssh_failed, who_ + ": socket: " + std::strerror(errno));
  // Published before the first blocking step: from here on a kill reaches us.
  if (!kill_.arm(kill_switch::far, fd_))
    return make_error(ec::ssh_failed, who_ + ": killed before tcp connect");
  set_int_option(fd_, IPPROTO_TCP, TCP_NODELAY, 1);
  // Without TCP_USER_TIMEOUT, data stuck unacknowledged to a vanished peer
  // keeps a write pending for tcp_retries2 (~15 minutes, docs/notes/failures.md#close-behind-a-stuck-write).
  if (opts.tcp_user_timeout.count() > 0)
    set_int_option(fd_, IPPROTO_TCP, TCP_USER_TIMEOUT,
                   static_cast<int>(opts.tcp_user_timeout.count()));
  set_int_option(fd_, SOL_SOCKET, SO_KEEPALIVE, 1);
  set_int_option(fd_, IPPROTO_TCP, TCP_KEEPIDLE,
                 static_cast<int>(opts.tcp_keepalive_idle.count()));
  set_int_option(fd_, IPPROTO_TCP, TCP_KEEPINTVL,
                 static_cast<int>(opts.tcp_keepalive_interval.count()));
  set_int_option(fd_, IPPROTO_TCP, TCP_KEEPCNT, opts.tcp_keepalive_count);
  if (::connect(fd_, res->ai_addr, res->ai_addrlen) == 0)
    return {};
  if (errno != EINPROGRESS)
    return make_error(ec::ssh_failed, who_ + ": tcp connect: " + std::strerror(errno));
  // Non-blocking connect + poll: a deadline of our own, and a shutdown()
  // from the kill wakes the poll at once.
  for (;;) {
    auto left = ms_left(deadline);
    if (left <= 0)
      return make_error(ec::ssh_failed, who_ + ": tcp connect timed out after "
                                          + std::to_string(opts.connect_timeout.count())
                                          + "ms");
    pollfd p{fd_, POLLOUT, 0};
    auto n = ::poll(&p, 1, static_cast<int>(left));
    if (kill_.fired())
      return make_error(ec::ssh_failed, who_ + ": killed during tcp connect");
    if (n < 0 && errno == EINTR)
      continue;
    if (n != 0)
      break;
  }
  int err = 0;
  socklen_t len = sizeof err;
  if (::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
    err = errno;
  if (err != 0)
    return make_error(ec::ssh_failed, who_ + ": tcp connect: " + std::strerror(err));
  return {};
}

caf::error session::open(const session_options& opts) {
  who_ = endpoint_name(opts.host, opts.address, opts.port);
  if (session_ || fd_ >= 0)
    return make_error(ec::invalid_argument, who_ + ": session opened twice");
  if (auto err = validate(opts))
    return err;
  auto deadline = clock_type::now() + opts.connect_timeout;
  if (auto err = tcp_connect(opts, deadline))
    return err;
  init_libssh2_once();
  session_ = libssh2_session_init_ex(nullptr, nullptr, nullptr, this);
  if (!session_)
    return make_error(ec::ssh_failed, who_ + ": cannot allocate a libssh2 session");
  libssh2_session_callback_set(session_, LIBSSH2_CALLBACK_RECV,
                               reinterpret_cast<void*>(&session::recv_hook));
  libssh2_session_callback_set(session_, LIBSSH2_CALLBACK_SEND,
                               reinterpret_cast<void*>(&session::send_hook));
  // Blocking mode with a timeout for the setup steps: libssh2 waits in
  // poll() on our fd, which the kill's shutdown() wakes.
  libssh2_session_set_blocking(session_, 1);
  libssh2_session_set_timeout(session_, std::max(1L, ms_left(deadline)));
  if (auto rc = libssh2_session_handshake(session_, fd_); rc != 0)
    return fail("ssh handshake", rc);
  // The host key is checked before anything else goes out: a rejected
  // server never sees a login attempt, user name or key (invariant 13).
  if (auto err = verify_host_key(session_, opts.known_hosts, opts.address, opts.port,
                                 who_))
    return err;
  if (kill_.fired())
    return make_error(ec::ssh_failed, who_ + ": killed after the ssh handshake");
  libssh2_session_set_timeout(session_, opts.connect_timeout.count());
  auto pub = opts.key_file + ".pub";
  auto have_pub = ::access(pub.c_str(), R_OK) == 0;
  // Without a public key file libssh2 derives the public key from the
  // private one (works for OpenSSH-format ed25519 keys).
  auto rc = libssh2_userauth_publickey_fromfile(session_, opts.user.c_str(),
                                                have_pub ? pub.c_str() : nullptr,
                                                opts.key_file.c_str(), nullptr);
  if (rc != 0) {
    if (!kill_.fired() && is_key_refusal(rc))
      return make_error(ec::auth_failed, who_ + ": user '" + opts.user
                                           + "' refused with key " + opts.key_file
                                           + ": " + last_error()
                                           + " (is the public key in the server's "
                                             "authorized_keys?)");
    return fail("ssh login", rc);
  }
  return {};
}

} // namespace egress::ssh
