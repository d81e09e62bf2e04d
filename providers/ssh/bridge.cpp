#include "providers/ssh/bridge.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <string_view>
#include <utility>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <vector>

namespace egress::ssh {

namespace {

// Per direction. Lane 0's is large enough that an upload (libvirt stream,
// 256 KiB chunks, on a transport of its own with one lane) never waits on
// the pump's buffer; the other lanes carry calls, whose RPC messages are
// small. The memory is reserved, not touched: pages come as bytes pass.
constexpr size_t first_lane_capacity = size_t{1} << 20;
constexpr size_t other_lane_capacity = size_t{256} << 10;

// How long the pump waits after the far end's EOF for its last words (an
// exec channel's exit status), see far_end::settle.
constexpr auto settle_grace = std::chrono::milliseconds{500};

// How soon a pump that never waits (every turn moves bytes) still looks for
// a new client; one that waits is told by its poll() at once (pump_loop::
// accept).
constexpr auto accept_recheck = std::chrono::milliseconds{10};

// A linear byte queue: producers append at the tail, consumers take from
// the head; the data moves to the front only when the tail room gets short.
class byte_queue {
public:
  explicit byte_queue(size_t capacity) : data_(new char[capacity]), capacity_(capacity) {}

  bool empty() const noexcept { return head_ == tail_; }
  bool full() const noexcept { return size() == capacity_; }
  size_t size() const noexcept { return tail_ - head_; }
  const char* data() const noexcept { return data_.get() + head_; }

  /// Room at the tail, compacting first if the tail is cramped.
  char* tail(size_t& room) noexcept {
    if (head_ > 0 && capacity_ - tail_ < capacity_ / 4) {
      std::memmove(data_.get(), data_.get() + head_, size());
      tail_ -= head_;
      head_ = 0;
    }
    room = capacity_ - tail_;
    return data_.get() + tail_;
  }

  void produced(size_t n) noexcept { tail_ += n; }

  void consumed(size_t n) noexcept {
    head_ += n;
    if (head_ == tail_)
      head_ = tail_ = 0;
  }

private:
  std::unique_ptr<char[]> data_; // default-initialized: untouched until used
  size_t capacity_;
  size_t head_ = 0;
  size_t tail_ = 0;
};

bool transient_errno(int err) {
  return err == EAGAIN || err == EWOULDBLOCK || err == EINTR;
}

std::string errno_text(const char* what) {
  return std::string{what} + ": " + std::strerror(errno);
}

// A process that ends without its destructors (SIGKILL, a crash) leaves
// its bridges' directories behind, each with a socket nobody listens on.
// Their names carry the owner's PID: the first bridge a process opens in a
// directory removes those of owners that no longer run (same user only;
// a PID in use by another process keeps its directories, the safe side).
void sweep_dead_owners(const std::string& base) {
  static std::mutex mtx;
  static std::set<std::string> swept;
  std::lock_guard<std::mutex> guard{mtx};
  if (!swept.insert(base).second)
    return;
  std::error_code ec;
  for (auto& entry : std::filesystem::directory_iterator(base, ec)) {
    auto name = entry.path().filename().string();
    constexpr std::string_view prefix = "egress-bridge-";
    if (!name.starts_with(prefix))
      continue;
    auto dash = name.find('-', prefix.size());
    if (dash == std::string::npos)
      continue;
    auto pid_text = name.substr(prefix.size(), dash - prefix.size());
    if (pid_text.empty() || pid_text.size() > 9
        || !std::all_of(pid_text.begin(), pid_text.end(),
                        [](char ch) { return ch >= '0' && ch <= '9'; }))
      continue;
    auto pid = static_cast<pid_t>(std::stol(pid_text));
    struct stat sb{};
    if (::lstat(entry.path().c_str(), &sb) != 0 || !S_ISDIR(sb.st_mode)
        || sb.st_uid != ::geteuid() || pid == ::getpid())
      continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH)
      continue;
    ::unlink((entry.path() / "libvirt.sock").c_str());
    ::rmdir(entry.path().c_str());
  }
}

} // namespace

// -- bridge_socket ------------------------------------------------------------

caf::expected<bridge_socket_ptr> bridge_socket::open(const std::string& base_dir,
                                                     kill_switch& ks, ec code,
                                                     size_t lanes) {
  if (lanes == 0 || lanes > kill_switch::max_lanes)
    return make_error(ec::invalid_argument,
                      "bridge: " + std::to_string(lanes) + " lanes (1 to "
                        + std::to_string(kill_switch::max_lanes) + ")");
  auto base = base_dir.empty() ? std::string{"/tmp"} : base_dir;
  sweep_dead_owners(base);
  std::string name = base + "/egress-bridge-" + std::to_string(::getpid()) + "-XXXXXX";
  // mkdtemp creates the directory with mode 0700: only our user (and root)
  // can reach the socket inside, whatever the socket's own mode.
  if (!::mkdtemp(name.data()))
    return make_error(ec::invalid_argument, "bridge_dir " + base + ": "
                                              + std::strerror(errno));
  bridge_socket_ptr result{new bridge_socket(ks)};
  result->dir_ = name;
  result->lanes_ = lanes;
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
  if (::listen(fd, static_cast<int>(std::max<size_t>(8, lanes))) != 0)
    return make_error(code, errno_text("bridge listen"));
  return result;
}

bridge_socket::~bridge_socket() {
  for (auto fd : client_fds_)
    ::close(fd);
  if (listen_fd_ >= 0)
    ::close(listen_fd_);
  if (!path_.empty())
    ::unlink(path_.c_str());
  if (!dir_.empty())
    ::rmdir(dir_.c_str());
}

int bridge_socket::accept_client(std::string& error) {
  if (!accepting())
    return -1;
  auto fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) {
    if (!transient_errno(errno) && errno != ECONNABORTED)
      error = errno_text("bridge accept");
    return -1;
  }
  auto lane = client_fds_.size();
  client_fds_.push_back(fd);
  // If the switch fired meanwhile, the pump sees it at its next turn.
  kill_.arm(kill_switch::client, fd, lane);
  // One connection per lane: once all are taken nobody else gets in.
  if (!accepting())
    ::unlink(path_.c_str());
  return static_cast<int>(lane);
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
// libssh2 has already buffered internally (for any lane's channel, or for a
// channel still opening) is never left waiting for a poll() that the socket
// will not wake.
class pump_loop {
public:
  pump_loop(bridge_socket& bridge, far_source& far, kill_switch& ks,
            std::chrono::milliseconds stall_limit)
    : bridge_(bridge), far_(far), kill_(ks), stall_limit_(stall_limit) {
  }

  /// Runs until the pump must end; returns why.
  std::string run() {
    // Lane 0's far end was opened by the transport's connect().
    if (!open_far_ends())
      return reason_;
    if (!lanes_.front().far)
      return "the first connection's far end is not open";
    while (reason_.empty()) {
      if (kill_.fired())
        return "killed";
      progress_ = false;
      turn_started_ = std::chrono::steady_clock::now();
      // The lanes share lane 0's session (timers(), flush_far()).
      lanes_.front().far->new_turn();
      if (!std::exchange(polled_, false))
        peek_clients();
      // Each step returns false once reason_ is set. Far ends are opened
      // after the reads, which may have taken a channel's confirmation off
      // the socket into libssh2's queue.
      if (!accept() || !each_lane(&pump_loop::client_to_up)
          || !each_lane(&pump_loop::up_to_far) || !far_to_down_all() || !open_far_ends()
          || !timers() || !flush_far() || !each_lane(&pump_loop::down_to_client)
          || finished())
        break;
      // Bytes libssh2 took off the socket after lane 0's read may wait in
      // its queue for a lane read earlier in the turn (session.hpp,
      // received()). With one lane busy, nothing does.
      if (lanes_.front().far->received() != received_after_first_)
        progress_ = true;
      if (!progress_)
        wait();
    }
    return reason_;
  }

private:
  struct lane {
    explicit lane(size_t capacity) : up(capacity), down(capacity) {}
    int client = -1;        // -1 until libvirt's client connects
    far_end* far = nullptr; // nullptr while opening
    byte_queue up;          // client -> far
    byte_queue down;        // far -> client
    bool client_eof = false;
    bool client_ready = true; // its socket may hold bytes (client_to_up)
    bool far_eof = false;
    bool settling = false; // far EOF delivered, waiting for far->settle()
    std::chrono::steady_clock::time_point settle_deadline;

    bool wants_far_data() const { return far && !far_eof && !down.full(); }
  };

  bool stop(std::string why) {
    reason_ = std::move(why);
    return false;
  }

  template <class Step>
  bool each_lane(Step step) {
    for (auto& l : lanes_)
      if (!(this->*step)(l))
        return false;
    return true;
  }

  // Lane 0 exists from the start (its far end open, its client to come);
  // each further client gets a lane of its own. Tried when the last poll()
  // found the listening socket readable (or accept_recheck has passed), not
  // on every turn: a non-blocking accept4() on an empty queue still makes
  // and frees a socket file in the kernel, and per turn it took an eighth of
  // the pump's CPU in bench/converge
  // (docs/notes/fleet-supervision.md#what-bounds-the-engines-cpu-per-converged-proxy).
  bool accept() {
    if (!bridge_.accepting())
      return true;
    if (!accept_due_ && turn_started_ - accept_tried_ < accept_recheck)
      return true;
    accept_tried_ = turn_started_;
    std::string error;
    auto index = bridge_.accept_client(error);
    if (!error.empty())
      return stop(error);
    accept_due_ = index >= 0; // another client may be queued behind it
    if (index < 0)
      return true;
    if (static_cast<size_t>(index) >= lanes_.size())
      lanes_.emplace_back(other_lane_capacity);
    lanes_[static_cast<size_t>(index)].client = bridge_.client_fd(static_cast<size_t>(index));
    lanes_[static_cast<size_t>(index)].client_ready = true;
    progress_ = true;
    return true;
  }

  bool open_far_ends() {
    if (lanes_.empty())
      lanes_.emplace_back(first_lane_capacity);
    for (size_t i = 0; i < lanes_.size(); ++i) {
      if (lanes_[i].far)
        continue;
      std::string error;
      lanes_[i].far = far_.open_lane(i, error);
      if (!error.empty())
        return stop("connection " + std::to_string(i + 1) + " of " + std::to_string(bridge_.lanes())
                    + ": " + error);
      if (!lanes_[i].far)
        return true; // in order: the next waits for this one
      progress_ = true;
    }
    return true;
  }

  bool reads_client(const lane& l) const {
    return l.client >= 0 && !l.client_eof && !l.up.full();
  }

  // Read only from a client whose socket may hold bytes: it has not said
  // EAGAIN since the last poll() found it readable. A libvirt client mostly
  // waits for its answer, and a recv() per lane and turn (most of them
  // EAGAIN, five lanes, several turns per call) was the pump's most
  // frequent syscall once the session's own were gated (session.hpp,
  // gate_receives;
  // docs/notes/fleet-supervision.md#what-bounds-the-engines-cpu-per-converged-proxy).
  bool client_to_up(lane& l) {
    if (!reads_client(l) || !l.client_ready)
      return true;
    size_t room = 0;
    auto dst = l.up.tail(room);
    auto n = ::recv(l.client, dst, room, 0);
    if (n > 0) {
      l.up.produced(static_cast<size_t>(n));
      progress_ = true;
    } else if (n == 0) {
      l.client_eof = true;
      progress_ = true;
    } else if (transient_errno(errno)) {
      l.client_ready = false;
    } else {
      return stop(errno_text("local client recv"));
    }
    return true;
  }

  // A turn that follows a turn that moved bytes (no poll() in between): one
  // poll() without a timeout tells which of the quiet clients wrote since,
  // for all of them at once.
  void peek_clients() {
    peeks_.clear();
    for (auto& l : lanes_)
      if (reads_client(l) && !l.client_ready)
        peeks_.push_back({l.client, POLLIN, 0});
    if (peeks_.empty() || ::poll(peeks_.data(), peeks_.size(), 0) <= 0)
      return;
    mark_ready_clients(peeks_);
  }

  // Every lane whose client socket the poll found readable, hung up or
  // failed: its next read says which.
  void mark_ready_clients(const std::vector<pollfd>& polled) {
    for (auto& p : polled)
      if (p.fd >= 0 && p.revents != 0)
        for (auto& l : lanes_)
          if (l.client == p.fd)
            l.client_ready = true;
  }

  // What a client wrote before the process stood still is not sent after.
  bool stood_still(std::chrono::steady_clock::time_point since, std::chrono::milliseconds slack) {
    if (stall_limit_.count() <= 0)
      return false;
    auto gap = std::chrono::steady_clock::now() - since;
    if (gap <= stall_limit_ + slack)
      return false;
    stop("the pump stood still for "
         + std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(gap).count())
         + " ms (the process was stopped or starved): what it held is not sent");
    return true;
  }

  bool up_to_far(lane& l) {
    if (!l.up.empty() && stood_still(turn_started_, std::chrono::milliseconds{0}))
      return false;
    while (l.far && !l.up.empty()) {
      auto n = l.far->write(l.up.data(), l.up.size());
      if (n == far_end::would_block)
        break;
      if (n < 0)
        return stop(l.far->failure());
      l.up.consumed(static_cast<size_t>(n));
      progress_ = true;
    }
    return true;
  }

  bool far_to_down(lane& l) {
    while (l.wants_far_data()) {
      size_t room = 0;
      auto dst = l.down.tail(room);
      auto n = l.far->read(dst, room);
      if (n == far_end::would_block)
        break;
      if (n == far_end::end_of_stream) {
        l.far_eof = true;
        progress_ = true;
        break;
      }
      if (n < 0)
        return stop(l.far->failure());
      l.down.produced(static_cast<size_t>(n));
      progress_ = true;
    }
    return true;
  }

  // Every lane's far end to its client; notes what the session had received
  // once lane 0 had read.
  bool far_to_down_all() {
    for (size_t i = 0; i < lanes_.size(); ++i) {
      if (!far_to_down(lanes_[i]))
        return false;
      if (i == 0)
        received_after_first_ = lanes_[0].far->received();
    }
    return true;
  }

  // The timers (SSH keepalive and watchdog) belong to the session, which
  // every lane shares: lane 0's far end runs them for all. A lane whose
  // client is slow to take what it has stops the watchdog's clock, as one
  // lane did before there were several.
  bool timers() {
    auto why = lanes_.front().far->tick(all_reading());
    return why.empty() ? true : stop(why);
  }

  bool all_reading() const {
    return std::all_of(lanes_.begin(), lanes_.end(), [](const lane& l) {
      return !l.far || l.wants_far_data();
    });
  }

  // Once per turn: what the session gathered during this turn's writes (and
  // keepalives), for every lane, goes out now, in one send.
  bool flush_far() {
    auto rc = lanes_.front().far->flush();
    if (rc < 0)
      return stop(lanes_.front().far->failure());
    flush_pending_ = rc > 0;
    return true;
  }

  bool down_to_client(lane& l) {
    if (l.client < 0 || l.down.empty())
      return true;
    auto n = ::send(l.client, l.down.data(), l.down.size(), MSG_NOSIGNAL);
    if (n > 0) {
      l.down.consumed(static_cast<size_t>(n));
      progress_ = true;
    } else if (n < 0 && !transient_errno(errno)) {
      return stop(errno_text("local client send"));
    }
    return true;
  }

  // Each side's EOF, on any lane, ends the pump once what it sent has been
  // delivered: the link's connections end together.
  bool finished() {
    for (auto& l : lanes_) {
      if (l.far_eof && l.down.empty()) {
        if (!l.settling) {
          l.settling = true;
          l.settle_deadline = std::chrono::steady_clock::now() + settle_grace;
        }
        if (l.far->settle() || std::chrono::steady_clock::now() >= l.settle_deadline)
          return !stop(l.far->end_reason());
      }
      if (l.client_eof && l.up.empty() && !flush_pending_)
        return !stop("local client EOF");
    }
    return false;
  }

  short client_events(const lane& l) const {
    return static_cast<short>((!l.client_eof && !l.up.full() ? POLLIN : 0)
                              | (!l.down.empty() ? POLLOUT : 0));
  }

  // Milliseconds until the first settling lane's grace ends; -1 if none.
  int settle_timeout() const {
    int result = -1;
    for (auto& l : lanes_) {
      if (!l.settling)
        continue;
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    l.settle_deadline - std::chrono::steady_clock::now())
                    .count();
      auto ms = static_cast<int>(std::max<int64_t>(1, left + 1));
      result = result < 0 ? ms : std::min(result, ms);
    }
    return result;
  }

  void wait() {
    polls_.clear();
    bool opening = false;
    for (auto& l : lanes_) {
      if (l.far)
        polls_.push_back({l.far->fd(),
                          l.settling ? short{POLLIN}
                                     : l.far->poll_events(l.wants_far_data(),
                                                          !l.up.empty() || flush_pending_),
                          0});
      else
        opening = true;
      if (l.client >= 0)
        polls_.push_back({l.client, client_events(l), 0});
    }
    // A far end still opening waits on the session's answer.
    if (opening)
      polls_.push_back({lanes_.front().far->fd(),
                        lanes_.front().far->poll_events(true, flush_pending_), 0});
    auto listener = polls_.size();
    if (bridge_.accepting())
      polls_.push_back({bridge_.listen_fd(), POLLIN, 0});
    // An fd with no events is left out (-1): a peer that hung up reports
    // POLLHUP whatever we ask for, and would make the poll spin.
    for (auto& entry : polls_)
      if (entry.events == 0)
        entry.fd = -1;
    auto timeout = lanes_.front().far->next_tick_ms();
    if (auto settle = settle_timeout(); settle >= 0)
      timeout = timeout < 0 ? settle : std::min(timeout, settle);
    if (stall_limit_.count() > 0)
      timeout = timeout < 0 ? stall_poll_ms : std::min(timeout, stall_poll_ms);
    auto polled = std::chrono::steady_clock::now();
    if (::poll(polls_.data(), polls_.size(), timeout) < 0 && errno != EINTR) {
      stop(errno_text("poll"));
      return;
    }
    polled_ = true;
    if (listener < polls_.size() && polls_[listener].revents != 0)
      accept_due_ = true;
    mark_ready_clients(polls_);
    stood_still(polled, std::chrono::milliseconds{std::max(timeout, 0)});
  }

  // With a stall limit the poll wakes at least this often, so a stop
  // shows as an overshoot of its timeout.
  static constexpr int stall_poll_ms = 250;

  bridge_socket& bridge_;
  far_source& far_;
  kill_switch& kill_;
  std::chrono::milliseconds stall_limit_;
  std::chrono::steady_clock::time_point turn_started_ = std::chrono::steady_clock::now();
  std::vector<lane> lanes_;
  std::vector<pollfd> polls_;
  std::vector<pollfd> peeks_; // peek_clients()'s
  bool polled_ = false;       // the last turn ended in wait()
  bool progress_ = false;
  bool flush_pending_ = false; // the session's flush left bytes behind
  bool accept_due_ = true;     // the listening socket may hold a client
  std::chrono::steady_clock::time_point accept_tried_;
  uint64_t received_after_first_ = 0;
  std::string reason_;
};

} // namespace

caf::error run_pump(bridge_socket& bridge, far_source& far, kill_switch& ks, ec code,
                    const std::string& who, std::chrono::milliseconds stall_limit) {
  auto reason = pump_loop{bridge, far, ks, stall_limit}.run();
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
