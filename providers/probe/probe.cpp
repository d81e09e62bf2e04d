#include "providers/probe/probe.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <libssh2.h>

#include "messages/error.hpp"
#include "providers/ssh/kill_switch.hpp"

namespace egress::probe {

namespace {

using clock_type = std::chrono::steady_clock;

// Rounded up: a poll() for 0.4 ms left must not become a busy poll(0).
int ms_left(clock_type::time_point deadline) {
  auto left = deadline - clock_type::now();
  if (left <= clock_type::duration::zero())
    return 0;
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::min<int64_t>(ms, 1'000'000));
}

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) {
    return static_cast<char>(std::tolower(c));
  });
  return text;
}

std::string endpoint(const std::string& address, uint16_t port) {
  auto host = address.find(':') == std::string::npos ? address : "[" + address + "]";
  return host + ":" + std::to_string(port);
}

std::string no_reply(const settings& s) {
  return "no reply within " + std::to_string(s.timeout.count()) + " ms";
}

// -- the HTTP part, shared by both probers ------------------------------------

// The target as the request needs it. The proxy, not we, resolves and
// connects to it; we only check that the request line cannot be broken.
struct target_url {
  std::string url;
  std::string authority; // the Host header
};

// No target (nullopt) means a TCP connect is the whole probe.
caf::expected<std::optional<target_url>> parse_target(const std::string& target) {
  if (target.empty())
    return std::optional<target_url>{};
  auto bad = [&](const std::string& why) {
    return make_error(ec::invalid_argument, "probe target '" + target + "': " + why);
  };
  static const std::string scheme = "http://";
  if (lower(target.substr(0, scheme.size())) != scheme)
    return bad("not an http:// URL (the probe speaks plain HTTP to the proxy)");
  for (unsigned char c : target)
    if (c <= 0x20 || c == 0x7f)
      return bad("contains a space or control character");
  auto rest = target.substr(scheme.size());
  auto authority = rest.substr(0, rest.find_first_of("/?#"));
  if (authority.empty() || authority.find('@') != std::string::npos)
    return bad("no host, or credentials in the URL");
  return std::optional<target_url>{target_url{target, authority}};
}

// What one send or receive step got from a transport.
struct io_result {
  ssize_t n = 0;          // bytes moved; 0 (with nothing else set) = end of stream
  bool timed_out = false; // the probe's deadline passed first
  std::string failed;     // the connection to the proxy failed: an outcome
  caf::error route;       // the route to the host broke: the probe's error
};

using send_fn = std::function<io_result(const char*, size_t)>;
using recv_fn = std::function<io_result(char*, size_t)>;

class outcome_clock {
public:
  outcome_clock() : start_(clock_type::now()) {}

  outcome make(bool ok, std::string stage, std::string detail, int status = 0) const {
    outcome out;
    out.ok = ok;
    out.stage = std::move(stage);
    out.detail = std::move(detail);
    out.http_status = status;
    out.latency = std::chrono::duration_cast<std::chrono::microseconds>(clock_type::now()
                                                                        - start_);
    return out;
  }

  outcome fail(std::string stage, std::string detail) const {
    return make(false, std::move(stage), std::move(detail));
  }

private:
  clock_type::time_point start_;
};

// Reason phrases are free text from a stranger: keep them printable and short.
std::string printable(const std::string& text, size_t limit = 60) {
  std::string out;
  for (unsigned char c : text.substr(0, limit))
    out += c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '?';
  return out;
}

outcome judge_status_line(const std::string& line, const outcome_clock& t) {
  // "HTTP/1.1 200 OK": version, one space, three digits, then a space or the end.
  auto sp = line.find(' ');
  bool well_formed = line.rfind("HTTP/", 0) == 0 && sp != std::string::npos
                     && line.size() >= sp + 4
                     && std::all_of(line.begin() + static_cast<ptrdiff_t>(sp) + 1,
                                    line.begin() + static_cast<ptrdiff_t>(sp) + 4,
                                    [](unsigned char c) { return std::isdigit(c); })
                     && (line.size() == sp + 4 || line[sp + 4] == ' ');
  if (!well_formed)
    return t.fail("status", "not an HTTP status line: '" + printable(line) + "'");
  auto status = std::stoi(line.substr(sp + 1, 3));
  auto reason = line.size() > sp + 5 ? " " + printable(line.substr(sp + 5)) : "";
  auto detail = "HTTP " + std::to_string(status) + reason;
  bool ok = status >= 200 && status < 400;
  return t.make(ok, ok ? "ok" : "status", std::move(detail), status);
}

// One request through the proxy, read up to the end of the status line. The
// rest of the answer is of no interest: the caller closes the connection.
caf::expected<outcome> http_exchange(const target_url& target, const settings& s,
                                     const outcome_clock& t, const send_fn& send,
                                     const recv_fn& recv) {
  auto request = "GET " + target.url + " HTTP/1.1\r\nHost: " + target.authority
                 + "\r\nConnection: close\r\nUser-Agent: egress-probe\r\n\r\n";
  for (size_t sent = 0; sent < request.size();) {
    auto r = send(request.data() + sent, request.size() - sent);
    if (r.route)
      return std::move(r.route);
    if (r.timed_out)
      return t.fail("send", "request not taken within " + std::to_string(s.timeout.count())
                              + " ms");
    if (!r.failed.empty() || r.n <= 0)
      return t.fail("send", r.failed.empty() ? "connection closed" : r.failed);
    sent += static_cast<size_t>(r.n);
  }
  // Bounded: a peer that streams bytes without a newline is not HTTP.
  constexpr size_t max_status_line = 4096;
  std::string head;
  char buf[1024];
  for (;;) {
    if (auto eol = head.find('\n'); eol != std::string::npos) {
      head.resize(eol);
      if (!head.empty() && head.back() == '\r')
        head.pop_back();
      return judge_status_line(head, t);
    }
    if (head.size() > max_status_line)
      return t.fail("status", "no end of the status line in "
                                + std::to_string(max_status_line) + " bytes");
    auto r = recv(buf, sizeof buf);
    if (r.route)
      return std::move(r.route);
    if (r.timed_out)
      return t.fail("reply", no_reply(s));
    if (!r.failed.empty())
      return t.fail("reply", r.failed);
    if (r.n <= 0)
      return t.fail("reply", head.empty() ? "connection closed without a reply"
                                          : "connection closed within the status line");
    head.append(buf, static_cast<size_t>(r.n));
  }
}

// -- what kill() reaches -------------------------------------------------------

// The connection a probe blocks on, published so that kill() can shut it
// down from another thread without the probe's mutex. Shared ownership is
// the point: the connection (and its fd) cannot be closed while a kill still
// holds it, so a kill never shuts down an fd number reused by someone else.
template <class Conn>
class kill_slot {
public:
  void kill() noexcept {
    kills_.fetch_add(1);
    if (auto conn = current_.load())
      conn->fire();
  }

  /// Taken when a probe starts; publish() compares against it.
  uint64_t generation() const noexcept { return kills_.load(); }

  /// Makes `conn` reachable by kill(). False (and `conn` fired) if a kill
  /// came since `since`: it was meant for this probe, which had no
  /// connection to shut down at that moment. Store-then-load here and
  /// increment-then-load in kill() (both sequentially consistent): either
  /// this sees the kill or the kill sees `conn`.
  bool publish(const std::shared_ptr<Conn>& conn, uint64_t since) noexcept {
    current_.store(conn);
    if (kills_.load() == since)
      return true;
    conn->fire();
    return false;
  }

  void clear() noexcept { current_.store(nullptr); }

private:
  std::atomic<std::shared_ptr<Conn>> current_;
  std::atomic<uint64_t> kills_{0};
};

caf::error killed_error(const std::string& who) {
  return make_error(ec::ssh_failed, who + ": probe killed");
}

// -- through SSH ----------------------------------------------------------------

// libssh2 codes that concern one channel: the session around it is fine.
bool is_channel_error(int rc) {
  return rc <= LIBSSH2_ERROR_CHANNEL_FAILURE && rc >= LIBSSH2_ERROR_CHANNEL_EOF_SENT;
}

struct ssh_link {
  ssh::kill_switch ks; // before the session, which refers to it
  ssh::session session{ks};
  void fire() noexcept { ks.fire(); }
};

enum class wait_result { ready, timed_out, killed };

// Waits until the session's socket can do what libssh2 last blocked on.
wait_result wait_session(ssh_link& link, clock_type::time_point deadline) {
  for (;;) {
    if (link.ks.fired())
      return wait_result::killed;
    auto left = ms_left(deadline);
    if (left == 0)
      return wait_result::timed_out;
    auto dirs = libssh2_session_block_directions(link.session.get());
    short events = 0;
    if (dirs & LIBSSH2_SESSION_BLOCK_INBOUND)
      events |= POLLIN;
    if (dirs & LIBSSH2_SESSION_BLOCK_OUTBOUND)
      events |= POLLOUT;
    pollfd p{link.session.fd(), events ? events : short{POLLIN}, 0};
    auto n = ::poll(&p, 1, left);
    if (link.ks.fired())
      return wait_result::killed;
    if (n > 0)
      return wait_result::ready;
    if (n < 0 && errno != EINTR)
      return wait_result::ready; // let libssh2 run into the error and name it
  }
}

class ssh_prober final : public prober {
public:
  explicit ssh_prober(ssh::session_options opts)
    : opts_(std::move(opts)),
      who_(ssh::endpoint_name(opts_.host, opts_.address, opts_.port)) {}

  ~ssh_prober() override { slot_.clear(); }

  caf::expected<outcome> probe(const std::string& address, uint16_t port,
                               const settings& s) override {
    std::lock_guard<std::mutex> guard{mutex_};
    auto since = slot_.generation();
    auto target = parse_target(s.target);
    if (!target)
      return std::move(target.error());
    for (int attempt = 0;; ++attempt) {
      // A fired switch means a kill between probes: that session is dead.
      bool reused = link_ && !link_->ks.fired();
      if (!reused) {
        drop();
        if (auto err = connect(since))
          return err;
      }
      auto run = probe_once(*link_, address, port, s, *target);
      if (!run.keep)
        drop();
      // A kept session may have died while idle (sshd's ClientAlive, a
      // restarted sshd): that says nothing about the route now, so one fresh
      // session gets to try before the route counts as broken.
      if (!run.result && run.may_retry && reused && attempt == 0
          && slot_.generation() == since)
        continue;
      return std::move(run.result);
    }
  }

  void kill() noexcept override { slot_.kill(); }

private:
  caf::error connect(uint64_t since) {
    auto link = std::make_shared<ssh_link>();
    if (!slot_.publish(link, since))
      return killed_error(who_);
    link_ = link;
    if (auto err = link->session.open(opts_)) {
      drop();
      return err;
    }
    // Non-blocking from here: every wait is our poll() with the probe's
    // deadline, not libssh2's own timeout, and a kill wakes it.
    libssh2_session_set_blocking(link->session.get(), 0);
    return {};
  }

  void drop() {
    slot_.clear();
    link_.reset();
  }

  caf::error route_error(ssh_link& link, const std::string& to, int rc) {
    if (link.ks.fired())
      return killed_error(who_);
    return make_error(ec::ssh_failed, who_ + ": probe of " + to + ": "
                                        + link.session.last_error()
                                        + " (rc=" + std::to_string(rc) + ")");
  }

  struct attempt {
    caf::expected<outcome> result;
    bool keep = false;      // the session is in a clean state afterwards
    bool may_retry = false; // the session failed at once: it may have been stale
  };

  attempt probe_once(ssh_link& link, const std::string& address, uint16_t port,
                     const settings& s, const std::optional<target_url>& target) {
    auto* sess = link.session.get();
    auto to = endpoint(address, port);
    auto deadline = clock_type::now() + s.timeout;
    outcome_clock t;
    LIBSSH2_CHANNEL* ch = nullptr;
    while (!ch) {
      ch = libssh2_channel_direct_tcpip_ex(sess, address.c_str(), port, "127.0.0.1", 0);
      if (ch)
        break;
      auto rc = libssh2_session_last_errno(sess);
      if (rc == LIBSSH2_ERROR_EAGAIN) {
        auto w = wait_session(link, deadline);
        if (w == wait_result::killed)
          return {killed_error(who_)};
        // The open is half done inside libssh2: only a new session is clean.
        if (w == wait_result::timed_out) {
          if (auto err = silent_host(link, s))
            return {std::move(err)};
          return {t.fail("connect", no_reply(s))};
        }
        continue;
      }
      if (rc != LIBSSH2_ERROR_CHANNEL_FAILURE || link.ks.fired())
        return {route_error(link, to, rc), false, true};
      // The open failure is sshd's answer; libssh2 1.10 keeps only the
      // reason code, not sshd's text (which would say refused or
      // unreachable).
      auto text = link.session.last_error();
      if (text.find("prohibited") != std::string::npos)
        return {make_error(ec::ssh_failed, who_ + ": probe of " + to + ": " + text
                                             + " (sshd needs AllowTcpForwarding yes)"),
                true};
      return {t.fail("connect", who_ + " could not connect to " + to + ": " + text), true};
    }
    attempt run{t.make(true, "ok", "connected")};
    if (target)
      run.result = http_exchange(*target, s, t, channel_send(link, s, ch, deadline, to),
                                 channel_recv(link, s, ch, deadline, to));
    run.keep = close_channel(link, ch, deadline);
    return run;
  }

  // A probe that timed out cannot tell a silent proxy from a vanished host
  // by the SSH session alone: nothing comes back either way. The kernel
  // can: a host that is there acknowledges our last packets within a round
  // trip, even while its sshd waits for the VM. Unacknowledged segments at
  // the deadline mean the route is gone, not the proxy.
  caf::error silent_host(ssh_link& link, const settings& s) {
    tcp_info info{};
    socklen_t len = sizeof info;
    // Unacknowledged bytes alone could be a packet sent a moment ago; no
    // acknowledgement for half the timeout cannot.
    auto quiet_ms = static_cast<uint32_t>(s.timeout.count() / 2);
    if (::getsockopt(link.session.fd(), IPPROTO_TCP, TCP_INFO, &info, &len) != 0
        || info.tcpi_unacked == 0 || info.tcpi_last_ack_recv < quiet_ms)
      return {};
    return make_error(ec::ssh_failed, who_ + ": host acknowledged nothing within "
                                        + std::to_string(s.timeout.count())
                                        + " ms (" + std::to_string(info.tcpi_unacked)
                                        + " segments outstanding)");
  }

  // Turns a libssh2 channel call into an io_result, waiting out EAGAIN.
  template <class Call>
  io_result channel_io(ssh_link& link, const settings& s, clock_type::time_point deadline,
                       const std::string& to, Call call) {
    for (;;) {
      auto n = call();
      if (n >= 0)
        return {n, false, {}, {}};
      if (n == LIBSSH2_ERROR_EAGAIN) {
        auto w = wait_session(link, deadline);
        if (w == wait_result::killed)
          return {0, false, {}, killed_error(who_)};
        if (w == wait_result::timed_out)
          return {0, true, {}, silent_host(link, s)};
        continue;
      }
      auto rc = static_cast<int>(n);
      if (is_channel_error(rc) && !link.ks.fired())
        return {0, false, "channel: " + link.session.last_error(), {}};
      return {0, false, {}, route_error(link, to, rc)};
    }
  }

  send_fn channel_send(ssh_link& link, const settings& s, LIBSSH2_CHANNEL* ch,
                       clock_type::time_point deadline, const std::string& to) {
    return [this, &link, &s, ch, deadline, to](const char* buf, size_t len) {
      return channel_io(link, s, deadline, to,
                        [&] { return libssh2_channel_write(ch, buf, len); });
    };
  }

  recv_fn channel_recv(ssh_link& link, const settings& s, LIBSSH2_CHANNEL* ch,
                       clock_type::time_point deadline, const std::string& to) {
    return [this, &link, &s, ch, deadline, to](char* buf, size_t len) {
      return channel_io(link, s, deadline, to,
                        [&] { return libssh2_channel_read(ch, buf, len); });
    };
  }

  // Frees the channel without blocking past the deadline. True if the
  // session is clean afterwards. A channel libssh2 could not finish closing
  // stays on the session's list, and dropping the session frees it.
  bool close_channel(ssh_link& link, LIBSSH2_CHANNEL* ch, clock_type::time_point deadline) {
    for (;;) {
      auto rc = libssh2_channel_free(ch);
      if (rc == 0)
        return !link.ks.fired();
      if (rc != LIBSSH2_ERROR_EAGAIN)
        return false;
      if (wait_session(link, deadline) != wait_result::ready)
        return false;
    }
  }

  ssh::session_options opts_;
  std::string who_;
  std::mutex mutex_;               // one probe at a time; kill() never takes it
  std::shared_ptr<ssh_link> link_; // guarded by mutex_
  kill_slot<ssh_link> slot_;
};

// -- direct TCP -------------------------------------------------------------------

struct tcp_conn {
  explicit tcp_conn(int fd) : fd(fd) {}
  ~tcp_conn() { ::close(fd); }
  tcp_conn(const tcp_conn&) = delete;
  tcp_conn& operator=(const tcp_conn&) = delete;

  void fire() noexcept {
    fired.store(true);
    ::shutdown(fd, SHUT_RDWR);
  }

  const int fd;
  std::atomic<bool> fired{false};
};

class tcp_prober final : public prober {
public:
  ~tcp_prober() override { slot_.clear(); }

  caf::expected<outcome> probe(const std::string& address, uint16_t port,
                               const settings& s) override {
    std::lock_guard<std::mutex> guard{mutex_};
    auto since = slot_.generation();
    auto to = endpoint(address, port);
    auto target = parse_target(s.target);
    if (!target)
      return std::move(target.error());
    addrinfo hints{};
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV; // a DNS lookup cannot be killed
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    auto service = std::to_string(port);
    if (auto rc = getaddrinfo(address.c_str(), service.c_str(), &hints, &res); rc != 0)
      return make_error(ec::invalid_argument,
                        "probe of " + to + ": not a numeric address: " + gai_strerror(rc));
    std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> guard_res{res, freeaddrinfo};
    auto fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
      return make_error(ec::ssh_failed, "probe of " + to + ": socket: " + std::strerror(errno));
    auto conn = std::make_shared<tcp_conn>(fd);
    struct unpublish {
      kill_slot<tcp_conn>& slot;
      ~unpublish() { slot.clear(); }
    } unpublish_on_return{slot_};
    if (!slot_.publish(conn, since))
      return killed_error("probe of " + to);
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto deadline = clock_type::now() + s.timeout;
    outcome_clock t;
    if (::connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
      if (errno != EINPROGRESS)
        return t.fail("connect", lower(std::strerror(errno)));
      auto r = wait_fd(*conn, POLLOUT, deadline, to);
      if (r.route)
        return std::move(r.route);
      if (r.timed_out)
        return t.fail("connect", no_reply(s));
      int err = 0;
      socklen_t len = sizeof err;
      if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
      if (err != 0)
        return t.fail("connect", lower(std::strerror(err)));
    }
    if (!*target)
      return t.make(true, "ok", "connected");
    auto send = [&](const char* buf, size_t len) {
      return socket_io(*conn, POLLOUT, deadline, to,
                       [&] { return ::send(fd, buf, len, MSG_NOSIGNAL); });
    };
    auto recv = [&](char* buf, size_t len) {
      return socket_io(*conn, POLLIN, deadline, to, [&] { return ::recv(fd, buf, len, 0); });
    };
    return http_exchange(**target, s, t, send, recv);
  }

  void kill() noexcept override { slot_.kill(); }

private:
  // An io_result with nothing set means "ready".
  static io_result wait_fd(tcp_conn& conn, short events, clock_type::time_point deadline,
                           const std::string& to) {
    for (;;) {
      if (conn.fired.load())
        return {0, false, {}, killed_error("probe of " + to)};
      auto left = ms_left(deadline);
      if (left == 0)
        return {0, true, {}, {}};
      pollfd p{conn.fd, events, 0};
      auto n = ::poll(&p, 1, left);
      if (conn.fired.load())
        return {0, false, {}, killed_error("probe of " + to)};
      if (n > 0 || (n < 0 && errno != EINTR))
        return {};
    }
  }

  template <class Call>
  static io_result socket_io(tcp_conn& conn, short events, clock_type::time_point deadline,
                             const std::string& to, Call call) {
    for (;;) {
      auto n = call();
      if (conn.fired.load())
        return {0, false, {}, killed_error("probe of " + to)};
      if (n >= 0)
        return {n, false, {}, {}};
      if (errno == EINTR)
        continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        return {0, false, lower(std::strerror(errno)), {}};
      auto r = wait_fd(conn, events, deadline, to);
      if (r.route || r.timed_out)
        return r;
    }
  }

  std::mutex mutex_; // one probe at a time; kill() never takes it
  kill_slot<tcp_conn> slot_;
};

} // namespace

prober_ptr through_ssh(ssh::session_options opts) {
  return std::make_shared<ssh_prober>(std::move(opts));
}

prober_ptr direct_tcp() {
  return std::make_shared<tcp_prober>();
}

} // namespace egress::probe
