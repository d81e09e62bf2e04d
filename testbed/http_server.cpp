#include "testbed/http_server.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string_view>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

namespace egress::test {

namespace {

using clock_type = std::chrono::steady_clock;

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error("http_server: " + what + ": " + std::strerror(errno));
}

enum class waited { timeout, ready, client_gone, stopped };

/// Waits up to `timeout_ms` (-1: forever) for `events` on fd, while
/// watching the stop signal and, when not waiting to read, the client's
/// hang-up.
waited wait_fd(int fd, short events, int wake_fd, int timeout_ms) {
  for (;;) {
    pollfd p[2] = {{fd, static_cast<short>(events | POLLIN), 0}, {wake_fd, POLLIN, 0}};
    int r = ::poll(p, 2, timeout_ms);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      return waited::client_gone;
    if (p[1].revents)
      return waited::stopped;
    if (r == 0)
      return waited::timeout;
    if (p[0].revents & (POLLERR | POLLHUP | POLLNVAL))
      return waited::client_gone;
    if ((events & POLLOUT) && (p[0].revents & POLLOUT))
      return waited::ready;
    if (p[0].revents & POLLIN) {
      if (events & POLLIN)
        return waited::ready;
      // Not reading: only EOF matters; anything else the client sends is dropped.
      char buf[4096];
      ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
        return waited::client_gone;
    }
  }
}

/// Sends everything; false if the client went or the server stopped.
bool send_all(int fd, int wake_fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      p += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if (k < 0 && errno != EAGAIN && errno != EINTR)
      return false;
    if (wait_fd(fd, POLLOUT, wake_fd, -1) != waited::ready)
      return false;
  }
  return true;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string trim(const std::string& s) {
  auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos)
    return {};
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

const char* reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 206: return "Partial Content";
    case 302: return "Found";
    case 400: return "Bad Request";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 410: return "Gone";
    case 416: return "Range Not Satisfiable";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Status";
  }
}

/// "bytes=N-" or "bytes=N-M" -> [first, last]; nullopt for anything else
/// (suffix and multi ranges are ignored, as a server may).
std::optional<std::pair<uint64_t, std::optional<uint64_t>>> parse_range(const std::string& v) {
  if (v.rfind("bytes=", 0) != 0 || v.find(',') != std::string::npos)
    return std::nullopt;
  auto spec = v.substr(6);
  auto dash = spec.find('-');
  if (dash == 0 || dash == std::string::npos)
    return std::nullopt;
  try {
    uint64_t first = std::stoull(spec.substr(0, dash));
    std::optional<uint64_t> last;
    if (dash + 1 < spec.size())
      last = std::stoull(spec.substr(dash + 1));
    return std::pair{first, last};
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

} // namespace

http_server::http_server(std::string body, std::string path)
  : path_(std::move(path)), body_(std::make_shared<const std::string>(std::move(body))) {}

http_server::~http_server() {
  stop();
}

void http_server::start() {
  if (thread_.joinable())
    return;
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0)
    fail("eventfd");
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0)
    fail("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    fail("bind 127.0.0.1:0");
  if (::listen(listen_fd_, 16) != 0)
    fail("listen");
  socklen_t len = sizeof addr;
  if (::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    fail("getsockname");
  port_ = ntohs(addr.sin_port);
  thread_ = std::thread([this] { run(); });
}

void http_server::stop() {
  if (wake_fd_ >= 0) {
    uint64_t one = 1;
    // The counter stays non-zero: every later poll sees the stop.
    [[maybe_unused]] auto r = ::write(wake_fd_, &one, sizeof one);
  }
  if (thread_.joinable())
    thread_.join();
  if (listen_fd_ >= 0)
    ::close(listen_fd_);
  if (wake_fd_ >= 0)
    ::close(wake_fd_);
  listen_fd_ = wake_fd_ = -1;
}

std::string http_server::url(const std::string& path) const {
  return "http://127.0.0.1:" + std::to_string(port_) + (path.empty() ? path_ : path);
}

void http_server::set(http_behaviour b) {
  std::lock_guard lock{mu_};
  behaviour_ = std::move(b);
  errors_sent_ = 0;
}

void http_server::set_body(std::string body) {
  std::lock_guard lock{mu_};
  body_ = std::make_shared<const std::string>(std::move(body));
}

size_t http_server::requests() const {
  std::lock_guard lock{mu_};
  return log_.size();
}

std::vector<http_request> http_server::log() const {
  std::lock_guard lock{mu_};
  return log_;
}

void http_server::clear_log() {
  std::lock_guard lock{mu_};
  log_.clear();
}

bool http_server::wait_idle(std::chrono::milliseconds timeout) const {
  std::unique_lock lock{mu_};
  return idle_cv_.wait_for(lock, timeout, [this] { return !busy_; });
}

void http_server::run() {
  for (;;) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    int r = ::poll(p, 2, -1);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0 || p[1].revents)
      return;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
      continue;
    {
      std::lock_guard lock{mu_};
      busy_ = true;
    }
    serve(fd);
    // Our FIN first, then the fd: the client reads a clean end of stream.
    ::shutdown(fd, SHUT_WR);
    ::close(fd);
    {
      std::lock_guard lock{mu_};
      busy_ = false;
    }
    idle_cv_.notify_all();
  }
}

void http_server::serve(int fd) {
  // -- the request: its head only (a GET has no body) ---------------------------
  std::string head;
  auto deadline = clock_type::now() + std::chrono::seconds(10);
  while (head.find("\r\n\r\n") == std::string::npos) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
    if (left.count() <= 0 || head.size() > 65536)
      return;
    if (wait_fd(fd, POLLIN, wake_fd_, static_cast<int>(left.count())) != waited::ready)
      return;
    char buf[4096];
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      if (n < 0 && (errno == EAGAIN || errno == EINTR))
        continue;
      return;
    }
    head.append(buf, static_cast<size_t>(n));
  }
  http_request req;
  {
    auto eol = head.find("\r\n");
    auto line = head.substr(0, eol);
    auto sp1 = line.find(' ');
    auto sp2 = line.find(' ', sp1 + 1);
    if (sp1 == std::string::npos || sp2 == std::string::npos)
      return;
    req.method = line.substr(0, sp1);
    req.path = line.substr(sp1 + 1, sp2 - sp1 - 1);
    req.path = req.path.substr(0, req.path.find('?'));
    size_t at = eol + 2;
    while (at < head.size()) {
      auto end = head.find("\r\n", at);
      auto h = head.substr(at, end - at);
      at = end + 2;
      auto colon = h.find(':');
      if (colon != std::string::npos && lower(h.substr(0, colon)) == "range")
        req.range = trim(h.substr(colon + 1));
    }
  }

  // -- what to answer: one snapshot of the behaviour --------------------------
  http_behaviour b;
  std::shared_ptr<const std::string> held;
  bool send_error = false;
  {
    std::lock_guard lock{mu_};
    log_.push_back(req);
    b = behaviour_;
    if (b.error_status != 0 && (b.error_count < 0 || errors_sent_ < b.error_count)) {
      send_error = true;
      ++errors_sent_;
    }
    if (!send_error && !b.redirects.count(req.path) && req.path == path_)
      held = body_;  // set_body() may run while we send: keep this one alive
  }
  auto simple = [&](int status, const std::string& extra, const std::string& text) {
    std::string out = "HTTP/1.1 " + std::to_string(status) + " " + reason(status) + "\r\n" + extra
                      + "Content-Type: text/plain\r\nContent-Length: "
                      + std::to_string(text.size()) + "\r\nConnection: close\r\n\r\n" + text;
    send_all(fd, wake_fd_, out.data(), out.size());
  };
  if (send_error)
    return simple(b.error_status, "", "error " + std::to_string(b.error_status) + "\n");
  if (auto it = b.redirects.find(req.path); it != b.redirects.end())
    return simple(302, "Location: " + it->second + "\r\n", "");
  if (req.method != "GET" || req.path != path_)
    return simple(404, "", "no such image\n");

  // -- the image, whole or a range -------------------------------------------------
  static const std::string none;
  const std::string& body = held ? *held : none;
  uint64_t size = body.size();
  uint64_t first = 0, last = size == 0 ? 0 : size - 1;
  int status = 200;
  std::string extra;
  if (b.ranges && !req.range.empty()) {
    if (auto r = parse_range(req.range)) {
      if (r->first >= size)
        return simple(416, "Content-Range: bytes */" + std::to_string(size) + "\r\n", "");
      first = static_cast<uint64_t>(std::clamp<int64_t>(
        static_cast<int64_t>(r->first) + b.range_shift, 0, static_cast<int64_t>(size) - 1));
      last = std::min(r->second.value_or(size - 1), size - 1);
      status = 206;
      extra = "Content-Range: bytes " + std::to_string(first) + "-" + std::to_string(last) + "/"
              + std::to_string(size) + "\r\n";
    }
  }
  std::string_view piece = size == 0 ? std::string_view{}
                                      : std::string_view{body}.substr(first, last - first + 1);
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + reason(status) + "\r\n" + extra
                    + "Content-Type: application/octet-stream\r\nAccept-Ranges: "
                    + (b.ranges ? "bytes" : "none") + "\r\n";
  if (!b.no_length) {
    auto declared = std::max<int64_t>(0, static_cast<int64_t>(piece.size()) + b.length_delta);
    out += "Content-Length: " + std::to_string(declared) + "\r\n";
  }
  out += "Connection: close\r\n\r\n";
  if (!send_all(fd, wake_fd_, out.data(), out.size()))
    return;

  size_t limit = piece.size();
  if (b.stall_after)
    limit = std::min(limit, *b.stall_after);
  if (b.truncate_after)
    limit = std::min(limit, *b.truncate_after);
  size_t step = b.drip_bytes > 0 ? b.drip_bytes : size_t{64} << 10;
  std::string scratch; // the one chunk that carries the corrupt byte
  for (size_t at = 0; at < limit;) {
    auto n = std::min(step, limit - at);
    const char* data = piece.data() + at;
    if (b.corrupt_at && *b.corrupt_at >= first + at && *b.corrupt_at < first + at + n) {
      scratch.assign(data, n);
      auto k = *b.corrupt_at - first - at;
      scratch[k] = static_cast<char>(~scratch[k]);
      data = scratch.data();
    }
    if (!send_all(fd, wake_fd_, data, n))
      return;
    at += n;
    if (b.drip_bytes > 0 && at < limit
        && wait_fd(fd, 0, wake_fd_, static_cast<int>(b.drip_interval.count())) != waited::timeout)
      return;
  }
  if (b.stall_after && *b.stall_after < piece.size())
    wait_fd(fd, 0, wake_fd_, -1);  // until the client goes or we stop
}

} // namespace egress::test
