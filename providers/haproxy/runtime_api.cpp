#include "providers/haproxy/runtime_api.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "messages/config.hpp"
#include "messages/error.hpp"

namespace egress::haproxy {

endpoint endpoint::parse(const std::string& text) {
  endpoint e;
  if (!text.empty() && text.front() != '/')
    if (auto hp = split_host_port(text)) {
      e.host = hp->first;
      e.port = hp->second;
      return e;
    }
  e.path = text;
  return e;
}

std::string endpoint::text() const {
  if (!path.empty())
    return path;
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":"
         + std::to_string(port);
}

namespace {

using clock = runtime_api::clock;

// Milliseconds left until `deadline`, rounded up (a poll for 0.4 ms left must
// not become a busy poll(0)); 0 once it passed.
int ms_left(clock::time_point deadline) {
  auto left = deadline - clock::now();
  if (left <= clock::duration::zero())
    return 0;
  return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(left).count());
}

// Waits for `events` on fd until the deadline: true when ready.
bool wait_for(int fd, short events, clock::time_point deadline, bool* hangup) {
  for (;;) {
    int left = ms_left(deadline);
    if (left == 0)
      return false;
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, left);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    if (hangup)
      *hangup = (p.revents & (POLLHUP | POLLERR)) != 0;
    return true;
  }
}

caf::error unreachable(const endpoint& where, const std::string& why) {
  return make_error(ec::gateway_unreachable, "HAProxy at " + where.text() + ": " + why);
}

caf::error too_late(const endpoint& where, const std::string& why) {
  return make_error(ec::gateway_timeout, "HAProxy at " + where.text() + ": " + why);
}

// The command as it appears in errors: the first words, never the payload.
std::string shown(const std::string& command) {
  return command.size() <= 80 ? command : command.substr(0, 77) + "...";
}

} // namespace

runtime_api::~runtime_api() {
  std::lock_guard<std::mutex> guard{mtx_};
  if (fd_ >= 0)
    ::close(fd_);
}

void runtime_api::kill() noexcept {
  std::lock_guard<std::mutex> guard{mtx_};
  killed_ = true;
  if (fd_ >= 0)
    ::shutdown(fd_, SHUT_RDWR);
}

void runtime_api::forget_socket(int fd) noexcept {
  std::lock_guard<std::mutex> guard{mtx_};
  if (fd_ == fd)
    fd_ = -1;
  ::close(fd);
}

int runtime_api::open_socket(std::string* why) {
  int family = where_.path.empty() ? (where_.host.find(':') != std::string::npos ? AF_INET6
                                                                                  : AF_INET)
                                   : AF_UNIX;
  int fd = ::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *why = std::string{"socket: "} + std::strerror(errno);
    return -1;
  }
  std::lock_guard<std::mutex> guard{mtx_};
  if (killed_) {
    ::close(fd);
    *why = "killed";
    return -1;
  }
  fd_ = fd;
  return fd;
}

caf::expected<std::string> runtime_api::run(const std::string& command,
                                            clock::time_point deadline, size_t max_reply) {
  std::string why;
  int fd = open_socket(&why);
  if (fd < 0)
    return unreachable(where_, why);
  struct closer {
    runtime_api* api;
    int fd;
    ~closer() { api->forget_socket(fd); }
  } close_on_return{this, fd};
  int rc;
  if (where_.path.empty()) {
    sockaddr_storage ss{};
    socklen_t len = 0;
    if (where_.host.find(':') != std::string::npos) {
      auto* sa = reinterpret_cast<sockaddr_in6*>(&ss);
      sa->sin6_family = AF_INET6;
      sa->sin6_port = htons(where_.port);
      ::inet_pton(AF_INET6, where_.host.c_str(), &sa->sin6_addr);
      len = sizeof *sa;
    } else {
      auto* sa = reinterpret_cast<sockaddr_in*>(&ss);
      sa->sin_family = AF_INET;
      sa->sin_port = htons(where_.port);
      ::inet_pton(AF_INET, where_.host.c_str(), &sa->sin_addr);
      len = sizeof *sa;
    }
    rc = ::connect(fd, reinterpret_cast<sockaddr*>(&ss), len);
  } else {
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    if (where_.path.size() >= sizeof sa.sun_path)
      return unreachable(where_, "socket path too long");
    std::memcpy(sa.sun_path, where_.path.data(), where_.path.size());
    rc = ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  }
  if (rc != 0 && errno != EINPROGRESS && errno != EAGAIN)
    return unreachable(where_, std::string{"connect: "} + std::strerror(errno));
  if (rc != 0) {
    if (!wait_for(fd, POLLOUT, deadline, nullptr))
      return too_late(where_, "connect: no answer before the deadline");
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0)
      return unreachable(where_, std::string{"connect: "} + std::strerror(err));
  }
  auto line = command + "\n";
  for (size_t sent = 0; sent < line.size();) {
    auto n = ::send(fd, line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)
        && wait_for(fd, POLLOUT, deadline, nullptr))
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return too_late(where_, "sending \"" + shown(command) + "\": no room before the deadline");
    return unreachable(where_, "sending \"" + shown(command) + "\": "
                                 + (n < 0 ? std::strerror(errno) : "no progress"));
  }
  std::string reply;
  char buf[16384];
  for (;;) {
    auto n = ::recv(fd, buf, sizeof buf, 0);
    if (n > 0) {
      if (reply.size() + static_cast<size_t>(n) > max_reply)
        return make_error(ec::gateway_garbage, "HAProxy at " + where_.text() + ": the answer to \""
                                                 + shown(command) + "\" is longer than "
                                                 + std::to_string(max_reply) + " bytes");
      reply.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0)
      break; // HAProxy closes after its answer
    if (errno == EINTR)
      continue;
    if ((errno == EAGAIN || errno == EWOULDBLOCK) && wait_for(fd, POLLIN, deadline, nullptr))
      continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK)
      return too_late(where_, "no whole answer to \"" + shown(command)
                                + "\" before the deadline");
    return unreachable(where_, "reading the answer to \"" + shown(command)
                                 + "\": " + std::strerror(errno));
  }
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (killed_)
      return unreachable(where_, "killed");
  }
  return reply;
}

} // namespace egress::haproxy
