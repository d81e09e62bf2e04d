#include "providers/ssh/bridge.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <vector>

namespace egress::ssh {

namespace {

// Per direction. Large enough that an upload (libvirt stream, 256 KiB
// chunks) never waits on the pump's buffer, small enough for many links.
constexpr size_t buffer_capacity = size_t{1} << 20;

// How long the pump waits after the far end's EOF for its last words (an
// exec channel's exit status), see far_end::settle.
constexpr auto settle_grace = std::chrono::milliseconds{500};

// A linear byte queue: producers append at the tail, consumers take from
// the head; the data moves to the front only when the tail room gets short.
class byte_queue {
public:
  explicit byte_queue(size_t capacity) : data_(capacity) {}

  bool empty() const noexcept { return head_ == tail_; }
  bool full() const noexcept { return size() == data_.size(); }
  size_t size() const noexcept { return tail_ - head_; }
  const char* data() const noexcept { return data_.data() + head_; }

  /// Room at the tail, compacting first if the tail is cramped.
  char* tail(size_t& room) noexcept {
    if (head_ > 0 && data_.size() - tail_ < data_.size() / 4) {
      std::memmove(data_.data(), data_.data() + head_, size());
      tail_ -= head_;
      head_ = 0;
    }
    room = data_.size() - tail_;
    return data_.data() + tail_;
  }

  void produced(size_t n) noexcept { tail_ += n; }

  void consumed(size_t n) noexcept {
    head_ += n;
    if (head_ == tail_)
      head_ = tail_ = 0;
  }

private:
  std::vector<char> data_;
  size_t head_ = 0;
  size_t tail_ = 0;
};

bool transient_errno(int err) {
  return err == EAGAIN || err == EWOULDBLOCK || err == EINTR;
}

std::string errno_text(const char* what) {
  return std::string{what} + ": " + std::strerror(errno);
}

} // namespace

// -- bridge_socket ------------------------------------------------------------

caf::expected<bridge_socket_ptr> bridge_socket::open(const std::string& base_dir,
                                                     kill_switch& ks, ec code) {
  auto base = base_dir.empty() ? std::string{"/tmp"} : base_dir;
  std::string name = base + "/egress-bridge-XXXXXX";
  // mkdtemp creates the directory with mode 0700: only our user (and root)
  // can reach the socket inside, whatever the socket's own mode.
  if (!::mkdtemp(name.data()))
    return make_error(ec::invalid_argument, "bridge_dir " + base + ": "
                                              + std::strerror(errno));
  bridge_socket_ptr result{new bridge_socket(ks)};
  result->dir_ = name;
  auto path = name + "/libvirt.sock";
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path))
    return make_error(ec::invalid_argument,
                      "bridge socket path " + path + " is too long ("
                        + std::to_string(path.size()) + " bytes, a unix socket takes "
                        + std::to_string(sizeof(addr.sun_path) - 1)
                        + "): use a shorter bridge_dir");
  result->path_ = path;
  auto fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return make_error(code, errno_text("bridge socket"));
  result->listen_fd_ = fd;
  if (!ks.arm(kill_switch::listener, fd))
    return make_error(code, "killed before the bridge listened");
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    return make_error(code, errno_text(("bridge bind " + path).c_str()));
  ::chmod(path.c_str(), 0600);
  if (::listen(fd, 8) != 0)
    return make_error(code, errno_text("bridge listen"));
  return result;
}

bridge_socket::~bridge_socket() {
  if (client_fd_ >= 0)
    ::close(client_fd_);
  if (listen_fd_ >= 0)
    ::close(listen_fd_);
  if (!path_.empty())
    ::unlink(path_.c_str());
  if (!dir_.empty())
    ::rmdir(dir_.c_str());
}

bool bridge_socket::accept_client(std::string& error) {
  if (client_fd_ >= 0)
    return true;
  auto fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) {
    if (!transient_errno(errno) && errno != ECONNABORTED)
      error = errno_text("bridge accept");
    return false;
  }
  client_fd_ = fd;
  // If the switch fired meanwhile, the pump sees it at its next turn.
  kill_.arm(kill_switch::client, fd);
  // One connection per bridge: nobody else gets in.
  ::unlink(path_.c_str());
  return true;
}

void bridge_socket::refuse_queued() noexcept {
  for (;;) {
    auto fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
      return;
    ::close(fd);
  }
}

// -- the pump -----------------------------------------------------------------

namespace {

// One pump run. Every step is non-blocking and reports whether it moved
// anything; the loop polls only after a full turn without progress, so data
// libssh2 has already buffered internally is never left waiting for a poll()
// that the socket will not wake.
class pump_loop {
public:
  pump_loop(bridge_socket& bridge, far_end& far, kill_switch& ks)
    : bridge_(bridge), far_(far), kill_(ks) {
  }

  /// Runs until the pump must end; returns why.
  std::string run() {
    while (reason_.empty()) {
      if (kill_.fired())
        return "killed";
      progress_ = false;
      // Each step returns false once reason_ is set.
      if (!accept() || !client_to_up() || !up_to_far() || !far_to_down() || !timers()
          || !flush_far() || !down_to_client() || finished())
        break;
      if (!progress_)
        wait();
    }
    return reason_;
  }

private:
  bool stop(std::string why) {
    reason_ = std::move(why);
    return false;
  }

  bool accept() {
    std::string error;
    have_client_ = bridge_.accept_client(error);
    if (!error.empty())
      return stop(error);
    return true;
  }

  bool client_to_up() {
    if (!have_client_ || client_eof_ || up_.full())
      return true;
    size_t room = 0;
    auto dst = up_.tail(room);
    auto n = ::recv(bridge_.client_fd(), dst, room, 0);
    if (n > 0) {
      up_.produced(static_cast<size_t>(n));
      progress_ = true;
    } else if (n == 0) {
      client_eof_ = true;
      progress_ = true;
    } else if (!transient_errno(errno)) {
      return stop(errno_text("local client recv"));
    }
    return true;
  }

  bool up_to_far() {
    while (!up_.empty()) {
      auto n = far_.write(up_.data(), up_.size());
      if (n == far_end::would_block)
        break;
      if (n < 0)
        return stop(far_.failure());
      up_.consumed(static_cast<size_t>(n));
      progress_ = true;
    }
    return true;
  }

  bool far_to_down() {
    while (!far_eof_ && !down_.full()) {
      size_t room = 0;
      auto dst = down_.tail(room);
      auto n = far_.read(dst, room);
      if (n == far_end::would_block)
        break;
      if (n == far_end::end_of_stream) {
        far_eof_ = true;
        progress_ = true;
        break;
      }
      if (n < 0)
        return stop(far_.failure());
      down_.produced(static_cast<size_t>(n));
      progress_ = true;
    }
    return true;
  }

  bool timers() {
    auto why = far_.tick(wants_far_data());
    return why.empty() ? true : stop(why);
  }

  // Once per turn: what the far end gathered during this turn's writes (and
  // keepalives) goes out now, in one send.
  bool flush_far() {
    auto rc = far_.flush();
    if (rc < 0)
      return stop(far_.failure());
    flush_pending_ = rc > 0;
    return true;
  }

  bool down_to_client() {
    if (!have_client_ || down_.empty())
      return true;
    auto n = ::send(bridge_.client_fd(), down_.data(), down_.size(), MSG_NOSIGNAL);
    if (n > 0) {
      down_.consumed(static_cast<size_t>(n));
      progress_ = true;
    } else if (n < 0 && !transient_errno(errno)) {
      return stop(errno_text("local client send"));
    }
    return true;
  }

  // Each side's EOF ends the pump once what it sent has been delivered.
  bool finished() {
    if (far_eof_ && down_.empty()) {
      if (!settling_) {
        settling_ = true;
        settle_deadline_ = std::chrono::steady_clock::now() + settle_grace;
      }
      if (far_.settle() || std::chrono::steady_clock::now() >= settle_deadline_)
        return !stop(far_.end_reason());
    }
    if (client_eof_ && up_.empty() && !flush_pending_)
      return !stop("local client EOF");
    return false;
  }

  bool wants_far_data() const { return !far_eof_ && !down_.full(); }

  void wait() {
    pollfd p[2];
    p[0].fd = far_.fd();
    p[0].events = settling_ ? short{POLLIN}
                            : far_.poll_events(wants_far_data(), !up_.empty() || flush_pending_);
    if (!have_client_) {
      p[1].fd = bridge_.listen_fd();
      p[1].events = POLLIN;
    } else {
      p[1].fd = bridge_.client_fd();
      p[1].events = static_cast<short>((!client_eof_ && !up_.full() ? POLLIN : 0)
                                       | (!down_.empty() ? POLLOUT : 0));
    }
    // An fd with no events is left out (-1): a peer that hung up reports
    // POLLHUP whatever we ask for, and would make the poll spin.
    for (auto& entry : p) {
      entry.revents = 0;
      if (entry.events == 0)
        entry.fd = -1;
    }
    auto timeout = far_.next_tick_ms();
    if (settling_) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    settle_deadline_ - std::chrono::steady_clock::now())
                    .count();
      auto settle_ms = static_cast<int>(std::max<int64_t>(1, left + 1));
      timeout = timeout < 0 ? settle_ms : std::min(timeout, settle_ms);
    }
    if (::poll(p, 2, timeout) < 0 && errno != EINTR)
      stop(errno_text("poll"));
  }

  bridge_socket& bridge_;
  far_end& far_;
  kill_switch& kill_;
  byte_queue up_{buffer_capacity};   // client -> far
  byte_queue down_{buffer_capacity}; // far -> client
  bool have_client_ = false;
  bool client_eof_ = false;
  bool far_eof_ = false;
  bool settling_ = false; // far EOF delivered, waiting for far.settle()
  std::chrono::steady_clock::time_point settle_deadline_;
  bool progress_ = false;
  bool flush_pending_ = false; // far_.flush() left bytes behind
  std::string reason_;
};

} // namespace

caf::error run_pump(bridge_socket& bridge, far_end& far, kill_switch& ks, ec code,
                    const std::string& who) {
  auto reason = pump_loop{bridge, far, ks}.run();
  if (ks.fired())
    reason = "killed";
  // Whatever ended the pump ends the whole path now: the client (libvirt)
  // and the server see EOF at once instead of waiting for the destructor.
  bridge.refuse_queued();
  ks.fire();
  return make_error(code, who + ": " + reason);
}

// -- URIs ---------------------------------------------------------------------

caf::expected<std::string> bridged_uri(const std::string& libvirt_uri,
                                       const std::string& socket_path) {
  auto bad = [&](const std::string& why) {
    return make_error(ec::invalid_argument, "libvirt_uri '" + libvirt_uri + "': " + why);
  };
  auto sep = libvirt_uri.find("://");
  if (sep == std::string::npos || sep == 0)
    return bad("expected driver:///path, e.g. qemu:///system");
  auto scheme = libvirt_uri.substr(0, sep);
  // "qemu+ssh" -> "qemu": the bridge decides the transport.
  auto driver = scheme.substr(0, scheme.find('+'));
  if (driver.empty()
      || !std::all_of(driver.begin(), driver.end(),
                      [](char c) { return std::isalnum(static_cast<unsigned char>(c)); }))
    return bad("bad driver name '" + driver + "'");
  auto rest = libvirt_uri.substr(sep + 3);
  auto path_at = rest.find_first_of("/?");
  if (path_at != 0)
    return bad("names a host; the transport reaches the host, give e.g. "
               + driver + ":///system");
  auto query_at = rest.find('?');
  auto path = rest.substr(0, query_at);
  auto query = query_at == std::string::npos ? std::string{} : rest.substr(query_at + 1);
  if (path.empty() || path == "/")
    return bad("no path (e.g. /system)");
  if (query.rfind("socket=", 0) == 0 || query.find("&socket=") != std::string::npos)
    return bad("already names a socket");
  // Percent-encode everything but unreserved characters and '/': libvirt
  // decodes query values.
  std::string escaped;
  static const char hex[] = "0123456789ABCDEF";
  for (unsigned char c : socket_path) {
    if (std::isalnum(c) || c == '/' || c == '-' || c == '.' || c == '_' || c == '~') {
      escaped += static_cast<char>(c);
    } else {
      escaped += '%';
      escaped += hex[c >> 4];
      escaped += hex[c & 0xf];
    }
  }
  return driver + "+unix://" + path + "?" + (query.empty() ? "" : query + "&")
         + "socket=" + escaped;
}

} // namespace egress::ssh
