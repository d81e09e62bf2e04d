// bench/converge: how fast a fleet of image-less proxies converges from zero,
// the engine against a libvirt-python reconcile loop shaped like the earlier
// Go operator (a worker pool over the proxies, one cached connection per
// host; docs/notes/failures.md#stalled-host-holds-up-others).
//
//   bench-converge [--runs R] [--hosts H] [--proxies P] [--poll-ms MS]
//                  [--rtt 0,10] [--workers 3,8] [--transports ssh,libssh2]
//                  [--only engine,py] [--script PATH] [--hold S]
//                                                      (root; exit 77 otherwise)
//
// Test bed: H hosts (default 8), each a private libvirtd of its own
// (testbed/testbed.hpp) and a private OpenSSH sshd on 127.0.0.1 whose
// sessions see that libvirtd's socket dir as /run/libvirt
// (sshd_options::libvirt_socket_dir), as on a real host. Every host entry
// names test:///default: a libvirtd's test driver keeps one test:///default
// state for every client while any connection to it is open (the bench holds
// one per host for the whole run; it checks before it measures that each
// script transport reaches a host's state and that no other host sees it,
// and after each step that every host holds its share of the domains), so
// domains "run" at once without booting and the driver makes their lease
// addresses up. Each host sees only its own domains and their events, as a
// fleet's hosts do. (Until 2026-12 all H entries shared one daemon and one state:
// each of the engine's links then got every domain's events, eight times a
// fleet's share, which doubled its time at RTT 0.) P proxies (default 200,
// c000.., round-robin over the hosts), no image, 64 MiB (the engine's
// minimum), 1 vCPU, network "default" (the test driver's).
//
// Each run, in rotating order, starting from zero domains every time:
//  engine   egress::engine::start with the H ssh hosts (the engine's libssh2
//           transport, direct-streamlocal to /run/libvirt/libvirt-sock),
//           poll interval MS (default 2000 ms, the engine's default), run
//           twice, as the script is:
//             cold  started with the P proxies, timed from engine::start;
//             warm  started with the hosts alone and every link up before
//                   the clock (a running daemon), then one engine::reload
//                   declares the P proxies, timed from the reload.
//           Either ends at the first status (asked every 20 ms) in which
//           every proxy is phase running with an address. A proxy's path (docs/spec.md 27): its first look is its
//           link's bulk read after the dial (1 RPC per host, all its
//           proxies), which finds no domain; it creates (define + start +
//           lease addresses: 3 RPCs), and the test driver's made-up lease
//           makes it running at once. The links' dial (SSH + libvirt open +
//           event registration) is inside the cold window only. Probes are
//           off (the test driver's addresses are not real) and so is gc (the
//           script collects nothing either).
//  py W     bench/converge_libvirt.py with W workers (default W = 3, the earlier
//           operator's MaxConcurrentReconciles, and 8, one per host): per
//           proxy lookupByName (VIR_ERR_NO_DOMAIN), defineXML (the same
//           domain XML and mark), create, interfaceAddresses(LEASE) until an
//           address shows. Over libvirt's own SSH transports, same sshd, the
//           host key verified:
//             ssh:     test+ssh://root@127.0.0.1:PORT/default?keyfile=..&no_tty=1
//                      &no_verify=0&command=<wrapper>  (the OpenSSH client; the
//                      wrapper pins the relays' known_hosts with
//                      StrictHostKeyChecking=yes and reads no config, agent or
//                      other key, as in bench/upload)
//             libssh2: test+libssh2://root@127.0.0.1:PORT/default?keyfile=..
//                      &known_hosts=..&known_hosts_verify=normal&sshauth=privkey
//           Both run `sh -c '... virt-ssh-helper test:///default'` through the
//           remote login shell (no socket=: with it libvirt 9.0 runs `nc -U`,
//           and nc is not installed here), and virt-ssh-helper reaches
//           /run/libvirt/libvirt-sock. Each W runs twice:
//             warm  every host's connection opened before the clock (a long-
//                   running operator's pool), the reconciles alone timed;
//             cold  the first reconcile per host opens it, inside the window
//                   (as the engine's links dial inside its window).
//           The time is the script's own: interpreter start and import are
//           never in it, as the engine's actor system start is not.
// Latency (--rtt, ms, a comma list; default 0 and 10): every client, the
// engine's links and the script's connections alike, reaches each sshd through
// a userspace TCP relay of its own in this process (latency_relay below: this
// kernel has no netem) that delays each chunk by RTT/2 in each direction,
// order kept, throughput not limited; RTT 0 goes through it too, so the
// relay's own cost is in every figure. Host keys are still verified: the
// relays' [127.0.0.1]:ports have their own known_hosts file with each sshd's
// key, used by the engine's hosts, the libssh2 URI and the OpenSSH wrapper. Each
// run goes over every RTT (their order rotating per run); one table per RTT,
// then a summary of the python/engine ratios per RTT. The relay's threads'
// CPU is taken out of the client figure and shown on its own.
// After each step every host must hold its share of the domains; then every
// domain but the drivers' own "test" is destroyed and undefined over the
// bench's held connections.
// Medians over R runs (default 3); per-run ratios too. CPU: user + system
// seconds of the client side (this process with the engine's threads, or the
// script with its ssh children, minus the interpreter's start-up; the
// daemons, children of this process, are not in it) and of the server side
// (every libvirtd, sshd and its sessions) over each step, the connections'
// setup and teardown included (also for warm). The client's own CPU per
// converged proxy (what the engine controls; at RTT 0 the machine's CPU
// bounds the time and half of it is the daemons'): from the clock's start to
// convergence, to the nanosecond, for the engine this process's CPU (every
// thread) minus the relays' threads and the harness's status polls (its
// thread while it polls, and the fleet's answers at their cost measured on
// the converged engine), for a pool the script's process (every thread) and
// its descendants (ssh: the OpenSSH clients; libssh2: none), the daemons on
// neither side; one table per RTT and a summary with engine/pool for each
// pool size, in the CSV as own_ms_per_proxy and engine_own_ratio. After the runs:
// per-call latency through one engine link, per RTT. --only runs the steps whose label
// starts with one of the given prefixes; --hold S sets up, prints the URIs and
// waits S seconds (to poke at the bed with virsh). Figures only.

#include <algorithm>
#include <any>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <libssh2.h>
#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/parts/transport_choice.hpp"
#include "base/log.hpp"
#include "messages/error.hpp"
#include "providers/libvirt/connection.hpp"
#include "providers/libvirt/domains.hpp"
#include "providers/libvirt/error.hpp"
#include "runtime/engine.hpp"
#include "testbed/ssh_host.hpp"
#include "testbed/testbed.hpp"

#include "figures.hpp"
#include "proc_cpu.hpp"

using namespace egress;
using namespace egress::procfs;
using egress::test::figures;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

const std::string entry = "bench";
const std::string remote_socket = "/run/libvirt/libvirt-sock";

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

double median(std::vector<double> xs) {
  if (xs.empty())
    return 0;
  std::sort(xs.begin(), xs.end());
  auto n = xs.size();
  return n % 2 == 1 ? xs[n / 2] : (xs[n / 2 - 1] + xs[n / 2]) / 2;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in{s};
  for (std::string item; std::getline(in, item, sep);)
    if (!item.empty())
      out.push_back(item);
  return out;
}

// Thread CPU seconds of one thread of this process, from
// /proc/self/task/<tid>/schedstat (nanoseconds on the CPU). Not from its
// stat's utime and stime: those count whole clock ticks (10 ms), and a relay
// thread's share of a step is often less than one.
double thread_cpu_seconds(pid_t tid) {
  // A thread that just ended has no file either: only a kernel without
  // schedstat at all is worth a word (once).
  static bool told = false;
  if (!std::exchange(told, true) && testbed::read_file("/proc/thread-self/schedstat").empty())
    std::fprintf(stderr, "bench: no /proc/thread-self/schedstat (a kernel without "
                         "schedstat?): the relays' CPU column reads 0\n");
  auto text = testbed::read_file("/proc/self/task/" + std::to_string(tid) + "/schedstat");
  return std::strtod(text.c_str(), nullptr) / 1e9;
}

// A userspace latency relay (this kernel has no netem): listens on
// 127.0.0.1:<ephemeral>, and for each accepted connection opens one to the
// target (the sshd) and forwards bytes both ways, each chunk delayed by RTT/2
// in its direction. Per connection and direction a reader thread timestamps
// every chunk it reads (up to 64 KiB) and queues it; a writer thread sleeps
// until timestamp + RTT/2 and writes it: order is kept and throughput is not
// limited (the queue is unbounded; TCP_NODELAY on both sockets, so the relay
// adds no Nagle wait of its own). An EOF is queued like a chunk and becomes
// shutdown(SHUT_WR) on the other side after the same delay (half-close
// preserved); a write error shuts both sockets down, which wakes every
// thread of that connection; the connection's last thread closes both fds,
// and the accept thread joins finished connections. stop() (or the
// destructor) wakes the accept thread, shuts every live connection down and
// joins all threads. Not modelled: the TCP handshake (the client's connect
// completes at once), so a connection costs one RTT less than on a network;
// the kernel's ACKs are immediate (loopback windows, no bandwidth-delay cap).
// The RTT can be changed between steps (set_rtt_ms); connections live within
// a step. CPU of the relay's threads is kept apart (cpu_seconds) so the
// bench can take it out of the client side's figure.
class latency_relay {
public:
  latency_relay(const std::string& target_address, int target_port) {
    std::memset(&target_, 0, sizeof target_);
    target_.sin_family = AF_INET;
    target_.sin_port = htons(static_cast<uint16_t>(target_port));
    if (::inet_pton(AF_INET, target_address.c_str(), &target_.sin_addr) != 1)
      throw std::runtime_error("relay: bad target address " + target_address);
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listen_fd_ < 0)
      throw std::runtime_error(std::string{"relay socket: "} + std::strerror(errno));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = 0;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0
        || ::listen(listen_fd_, 128) != 0
        || ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0
        || ::pipe2(wake_, O_CLOEXEC) != 0) {
      auto err = std::string{std::strerror(errno)};
      ::close(listen_fd_);
      throw std::runtime_error("relay listen: " + err);
    }
    port_ = ntohs(a.sin_port);
    acceptor_ = spawn([this] { accept_loop(); });
  }
  latency_relay(const latency_relay&) = delete;
  latency_relay& operator=(const latency_relay&) = delete;
  ~latency_relay() { stop(); }

  std::string address() const { return "127.0.0.1"; }
  int port() const { return port_; }
  void set_rtt_ms(double ms) { half_us_.store(static_cast<int64_t>(ms * 500.0)); }
  double rtt_ms() const { return static_cast<double>(half_us_.load()) / 500.0; }
  uint64_t connections() const { return accepted_.load(); }
  uint64_t failed_connects() const { return failed_.load(); }
  uint64_t bytes(int direction) const { return bytes_[direction].load(); } // 0: to target
  /// Connections whose threads have not all ended yet.
  size_t live() const { return live_conns_.load(); }

  /// CPU seconds of every relay thread so far, live and ended.
  double cpu_seconds() const {
    std::lock_guard<std::mutex> g{cpu_m_};
    double sum = ended_cpu_;
    for (auto tid : live_tids_)
      sum += thread_cpu_seconds(tid);
    return sum;
  }

  void stop() {
    if (acceptor_.joinable()) {
      char c = 0;
      (void) !::write(wake_[1], &c, 1);
      acceptor_.join();
    }
    // The accept thread has ended: conns_ is ours alone now.
    for (auto& c : conns_)
      c->shutdown_both();
    for (auto& c : conns_)
      c->join();
    conns_.clear();
    for (int* fd : {&listen_fd_, &wake_[0], &wake_[1]})
      if (*fd >= 0) {
        ::close(*fd);
        *fd = -1;
      }
  }

private:
  struct chunk {
    clock_type::time_point at;
    std::vector<char> bytes;
    bool eof = false;
  };
  struct direction {
    std::mutex m;
    std::condition_variable cv;
    std::deque<chunk> q;
  };
  struct conn {
    int fd[2] = {-1, -1}; // 0: the client's (accepted), 1: the target's
    direction dir[2];     // 0: client -> target, 1: target -> client
    std::thread threads[4];
    std::atomic<int> ended{0};
    std::mutex fd_m;
    bool closed = false;

    void shutdown_both() {
      std::lock_guard<std::mutex> g{fd_m};
      if (!closed)
        for (int f : fd)
          ::shutdown(f, SHUT_RDWR);
    }
    // Called by each of the four threads as it ends; the last closes.
    bool thread_ended() {
      if (ended.fetch_add(1) != 3)
        return false;
      std::lock_guard<std::mutex> g{fd_m};
      for (int& f : fd) {
        ::close(f);
        f = -1;
      }
      closed = true;
      return true;
    }
    bool finished() const { return ended.load() == 4; }
    void join() {
      for (auto& t : threads)
        if (t.joinable())
          t.join();
    }
  };

  template <class F>
  std::thread spawn(F f) {
    return std::thread([this, f = std::move(f)]() mutable {
      auto tid = static_cast<pid_t>(::syscall(SYS_gettid));
      {
        std::lock_guard<std::mutex> g{cpu_m_};
        live_tids_.insert(tid);
      }
      f();
      timespec ts{};
      ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
      std::lock_guard<std::mutex> g{cpu_m_};
      live_tids_.erase(tid);
      ended_cpu_ += static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
    });
  }

  static void nodelay(int fd) {
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }

  void accept_loop() {
    for (;;) {
      pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
      int r = ::poll(p, 2, 500);
      reap();
      if (r < 0) {
        if (errno == EINTR)
          continue;
        break;
      }
      if (p[1].revents != 0)
        break;
      if ((p[0].revents & POLLIN) == 0)
        continue;
      int a = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (a < 0)
        continue;
      int b = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (b < 0 || ::connect(b, reinterpret_cast<const sockaddr*>(&target_), sizeof target_) != 0) {
        if (b >= 0)
          ::close(b);
        ::close(a); // the client sees the connection reset/closed
        ++failed_;
        continue;
      }
      nodelay(a);
      nodelay(b);
      auto c = std::make_unique<conn>();
      c->fd[0] = a;
      c->fd[1] = b;
      auto* raw = c.get();
      ++live_conns_;
      for (int d = 0; d < 2; ++d) {
        raw->threads[2 * d] = spawn([this, raw, d] { reader(*raw, d); });
        raw->threads[2 * d + 1] = spawn([this, raw, d] { writer(*raw, d); });
      }
      conns_.push_back(std::move(c));
      ++accepted_;
    }
  }

  void reap() {
    for (auto it = conns_.begin(); it != conns_.end();) {
      if ((*it)->finished()) {
        (*it)->join();
        it = conns_.erase(it);
      } else {
        ++it;
      }
    }
  }

  void reader(conn& c, int d) {
    int src = c.fd[d];
    auto& q = c.dir[d];
    std::vector<char> buf(64 * 1024);
    for (;;) {
      auto n = ::read(src, buf.data(), buf.size());
      if (n < 0 && errno == EINTR)
        continue;
      chunk ch;
      ch.at = clock_type::now();
      if (n > 0) {
        ch.bytes.assign(buf.data(), buf.data() + n);
        bytes_[d] += static_cast<uint64_t>(n);
      } else {
        ch.eof = true; // EOF, or an error (reset): the other side gets a FIN
      }
      {
        std::lock_guard<std::mutex> g{q.m};
        q.q.push_back(std::move(ch));
      }
      q.cv.notify_one();
      if (n <= 0)
        break;
    }
    if (c.thread_ended())
      --live_conns_;
  }

  void writer(conn& c, int d) {
    int dst = c.fd[1 - d];
    auto& q = c.dir[d];
    bool broken = false;
    for (;;) {
      chunk ch;
      {
        std::unique_lock<std::mutex> l{q.m};
        q.cv.wait(l, [&] { return !q.q.empty(); });
        ch = std::move(q.q.front());
        q.q.pop_front();
      }
      if (!broken) {
        auto due = ch.at + std::chrono::microseconds(half_us_.load());
        if (due > clock_type::now())
          std::this_thread::sleep_until(due);
      }
      if (ch.eof) {
        if (!broken)
          ::shutdown(dst, SHUT_WR);
        break;
      }
      if (broken)
        continue; // drain until the reader's EOF
      const char* p = ch.bytes.data();
      size_t left = ch.bytes.size();
      while (left > 0) {
        auto n = ::send(dst, p, left, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
          continue;
        if (n <= 0) {
          broken = true;
          c.shutdown_both(); // wakes both readers (EOF), so both writers end
          break;
        }
        p += n;
        left -= static_cast<size_t>(n);
      }
    }
    if (c.thread_ended())
      --live_conns_;
  }

  sockaddr_in target_{};
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  int port_ = 0;
  std::atomic<int64_t> half_us_{0};
  std::atomic<uint64_t> accepted_{0}, failed_{0};
  std::atomic<uint64_t> bytes_[2] = {0, 0};
  std::atomic<size_t> live_conns_{0};
  std::list<std::unique_ptr<conn>> conns_; // the accept thread's until it ends
  std::thread acceptor_;
  mutable std::mutex cpu_m_;
  std::set<pid_t> live_tids_;
  double ended_cpu_ = 0;
};

struct options {
  int runs = 3;
  int hosts = 8;
  int proxies = 200;
  int poll_ms = 2000;
  std::vector<int> workers{3, 8};
  std::vector<std::string> transports{"ssh", "libssh2"};
  std::string script;
  std::vector<std::string> only; // run only steps whose label starts with one of these
  int hold_s = 0; // set up, print the URIs, wait (to poke at it by hand)
  std::vector<double> rtts{0, 10}; // ms, through the latency relay; one table each
};

struct measurement {
  std::string label;
  double seconds = 0;      // to convergence (0: failed)
  double client_cpu = 0;   // engine process, or the script and its ssh children
  double server_cpu = 0;   // libvirtd + sshd (and its sessions)
  double relay_cpu = 0;    // the latency relay's threads (taken out of client_cpu)
  // The client's own CPU from the clock's start to convergence (own_cpu_meter
  // for the engine; the script's process and its descendants): per converged
  // proxy, the figure the engine controls.
  double window_cpu = 0;
  std::string note;        // timeline or per-call figures
  std::string error;
  bool ok() const { return error.empty() && seconds > 0; }
};

std::string host_name(int i);

// The relays of every host, driven as one: the same RTT for all, their
// figures summed.
class relay_set {
public:
  latency_relay& add(const std::string& address, int port) {
    return *all_.emplace_back(std::make_unique<latency_relay>(address, port));
  }
  latency_relay& at(size_t i) { return *all_.at(i); }
  const latency_relay& at(size_t i) const { return *all_.at(i); }

  void set_rtt_ms(double ms) {
    for (auto& r : all_)
      r->set_rtt_ms(ms);
  }
  double cpu_seconds() const {
    return sum([](const latency_relay& r) { return r.cpu_seconds(); });
  }
  uint64_t connections() const {
    return sum([](const latency_relay& r) { return r.connections(); });
  }
  uint64_t failed_connects() const {
    return sum([](const latency_relay& r) { return r.failed_connects(); });
  }
  uint64_t bytes(int direction) const {
    return sum([direction](const latency_relay& r) { return r.bytes(direction); });
  }
  size_t live() const { return sum([](const latency_relay& r) { return r.live(); }); }
  void stop() {
    for (auto& r : all_)
      r->stop();
  }

private:
  template <class F>
  auto sum(F f) const -> decltype(f(std::declval<const latency_relay&>())) {
    decltype(f(std::declval<const latency_relay&>())) total{};
    for (auto& r : all_)
      total += f(*r);
    return total;
  }

  std::vector<std::unique_ptr<latency_relay>> all_;
};

// CPU seconds to the nanosecond of `clock`: CLOCK_PROCESS_CPUTIME_ID (every
// thread of this process, the ended ones too) or CLOCK_THREAD_CPUTIME_ID.
// /proc's utime and stime count 10 ms ticks, a tenth of a warm window.
double cpu_clock_seconds(clockid_t clock) {
  timespec ts{};
  ::clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// The engine's own CPU over a window: this process's CPU minus what the bench
// itself does in it. The relays' threads are the bed's network; the harness's
// thread is left out while it polls the status (between harness_begin and
// harness_end), not while it runs engine::start or engine::reload, whose work
// on the caller's thread is the engine's. The fleet's answers to those polls
// run on the engine's threads: the caller takes them out at their measured
// cost (bench::status_cpu).
class own_cpu_meter {
public:
  explicit own_cpu_meter(const relay_set& relays)
    : relays_(relays), process0_(cpu_clock_seconds(CLOCK_PROCESS_CPUTIME_ID)),
      relay0_(relays.cpu_seconds()) {}

  void harness_begin() { harness_at_ = cpu_clock_seconds(CLOCK_THREAD_CPUTIME_ID); }
  void harness_end() { harness_ += cpu_clock_seconds(CLOCK_THREAD_CPUTIME_ID) - harness_at_; }

  /// The engine's CPU seconds since the meter was made.
  double seconds() const {
    return cpu_clock_seconds(CLOCK_PROCESS_CPUTIME_ID) - process0_
           - (relays_.cpu_seconds() - relay0_) - harness_;
  }

private:
  const relay_set& relays_;
  double process0_;
  double relay0_;
  double harness_at_ = 0;
  double harness_ = 0;
};

// One host of the bed: a libvirtd of its own (its own test:///default state,
// its own domains and events, as a KVM host has), an sshd whose sessions see
// that daemon's socket dir as /run/libvirt, and the held connection that
// keeps the state alive between steps and cleans it.
struct host_bed {
  testbed::libvirtd lv;
  testbed::sshd ssh;
  lv::connection_ptr admin;

  host_bed() : lv(lv_options()), ssh(ssh_options(lv)) {
    lv.start();
    ssh.start();
    auto c = lv::connection::open(lv.uri("test"));
    if (!c)
      throw std::runtime_error("open " + lv.uri("test") + ": " + render(c.error()));
    admin = *c;
  }

  /// Every domain name in this host's test:///default state.
  std::vector<std::string> domains() {
    virDomainPtr* raw = nullptr;
    int n = virConnectListAllDomains(admin->get(), &raw, 0);
    if (n < 0)
      throw std::runtime_error("list domains: " + render(lv::last_error("list")));
    std::vector<std::string> out;
    for (int i = 0; i < n; ++i) {
      if (auto* name = virDomainGetName(raw[i]))
        out.emplace_back(name);
      virDomainFree(raw[i]);
    }
    std::free(raw);
    return out;
  }

private:
  static testbed::libvirtd_options lv_options() {
    testbed::libvirtd_options o;
    o.warm_qemu_caps = false; // the test driver needs no QEMU probe
    return o;
  }
  static testbed::sshd_options ssh_options(const testbed::libvirtd& lv) {
    testbed::sshd_options o;
    o.libvirt_socket_dir = lv.socket_dir();
    return o;
  }
};

class setup {
public:
  explicit setup(const options& o) {
    for (int i = 0; i < o.hosts; ++i)
      hosts_.push_back(std::make_unique<host_bed>());
    // Every client (engine and script alike) reaches each sshd through a
    // latency relay of its own. known_hosts entries name [address]:port, so
    // the relays' ports get a file of their own with each sshd's host key:
    // the keys are still verified, against the relays' addresses.
    std::string known;
    for (auto& h : hosts_) {
      auto& r = relays_.add(h->ssh.address(), h->ssh.port());
      auto line = testbed::read_file(h->ssh.known_hosts());
      auto key = line.substr(line.find(' ') + 1); // "ssh-ed25519 AAAA...\n"
      known += "[" + r.address() + "]:" + std::to_string(r.port()) + " " + key;
    }
    relay_known_hosts_ = tmp_ / "known_hosts_relay";
    testbed::write_file(relay_known_hosts_, known);
    // libvirt's ssh transport runs `<command> [-p port] [-l user] [-i key] [-T]
    // ... host sh -c '...'`: the wrapper pins the relays' known_hosts (the
    // host key is verified, strictly) and reads no config, agent or other key.
    wrapper_ = tmp_ / "sshwrap";
    testbed::write_file(wrapper_,
                        "#!/bin/sh\nexec ssh -F /dev/null -o BatchMode=yes"
                        " -o IdentitiesOnly=yes -o IdentityAgent=none"
                        " -o StrictHostKeyChecking=yes -o GlobalKnownHostsFile=/dev/null"
                        " -o UserKnownHostsFile="
                          + relay_known_hosts_ + " \"$@\"\n",
                        0755);
  }

  size_t hosts() const { return hosts_.size(); }
  host_bed& host(size_t i) { return *hosts_.at(i); }
  const host_bed& host(size_t i) const { return *hosts_.at(i); }
  const testbed::temp_dir& tmp() const { return tmp_; }
  relay_set& relay() { return relays_; }
  const relay_set& relay() const { return relays_; }
  const std::string& relay_known_hosts() const { return relay_known_hosts_; }

  std::string authority(size_t i) const {
    auto& r = relays_.at(i);
    return "root@" + r.address() + ":" + std::to_string(r.port());
  }
  std::string python_uri(const std::string& transport, size_t i) const {
    auto key = host(i).ssh.client_key();
    if (transport == "ssh")
      return "test+ssh://" + authority(i) + "/default?keyfile=" + key
             + "&no_tty=1&no_verify=0&command=" + wrapper_;
    return "test+libssh2://" + authority(i) + "/default?keyfile=" + key
           + "&known_hosts=" + relay_known_hosts_
           + "&known_hosts_verify=normal&sshauth=privkey";
  }

  std::vector<pid_t> server_roots() const {
    std::vector<pid_t> out;
    for (auto& h : hosts_) {
      out.push_back(h->lv.pid());
      out.push_back(h->ssh.pid());
    }
    return out;
  }

  /// Removes every domain but the driver's own "test" on every host;
  /// returns how many.
  size_t clean() {
    size_t n = 0;
    for (auto& h : hosts_) {
      for (auto& name : h->domains()) {
        if (name == "test")
          continue;
        if (auto err = lv::delete_domain(*h->admin, name))
          throw std::runtime_error("delete " + name + ": " + render(err));
        ++n;
      }
      auto left = h->domains();
      if (left.size() != 1 || left[0] != "test")
        throw std::runtime_error("clean: " + std::to_string(left.size())
                                 + " domain(s) left besides or instead of \"test\"");
    }
    return n;
  }

  /// Empty if each host holds exactly its round-robin share of `proxies`
  /// domains (make_config: proxy i on host i % H), else what it holds: a
  /// relay or a host entry wired to another host's daemon shows here.
  std::string misplaced(int proxies) {
    std::string out;
    auto hosts = static_cast<int>(hosts_.size());
    for (int i = 0; i < hosts; ++i) {
      size_t n = 0;
      for (auto& name : hosts_[static_cast<size_t>(i)]->domains())
        n += name != "test";
      auto share = static_cast<size_t>(proxies / hosts + (i < proxies % hosts ? 1 : 0));
      if (n != share)
        out += (out.empty() ? "" : ", ") + host_name(i) + " holds " + std::to_string(n)
               + " domains, not " + std::to_string(share);
    }
    return out;
  }

private:
  testbed::temp_dir tmp_{"converge"};
  // Destroyed after the relays (declared first): a relay is stopped, its
  // threads joined, before the sshd it forwards to.
  std::vector<std::unique_ptr<host_bed>> hosts_;
  relay_set relays_;
  std::string relay_known_hosts_;
  std::string wrapper_;
};

std::string host_name(int i) {
  return "hv" + std::to_string(i);
}

std::string proxy_name(int i) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "c%03d", i);
  return buf;
}

engine_config make_config(const setup& s, const options& o, int hosts, int proxies,
                          const std::string& entry_name) {
  engine_config cfg;
  cfg.entry = entry_name;
  cfg.poll_interval = std::chrono::milliseconds(o.poll_ms);
  cfg.shutdown_timeout = 10s;
  // Probes off: the test driver's addresses are made up, nothing listens on
  // them. GC off: the script collects nothing either, and a bed cleaned
  // between steps has nothing to collect.
  cfg.probe.mode = "off";
  cfg.gc = false;
  for (int i = 0; i < hosts; ++i) {
    auto& bed = s.host(static_cast<size_t>(i));
    auto h = test::ssh_host(bed.ssh, bed.lv, host_name(i), "test:///default");
    h.remote_socket = remote_socket; // as on a real host (and as the script's URIs)
    auto& relay = s.relay().at(static_cast<size_t>(i)); // as the script
    h.address = relay.address();
    h.port = static_cast<uint32_t>(relay.port());
    h.known_hosts = s.relay_known_hosts();
    h.call_budget = 10s;
    h.connect_timeout = 10s;
    cfg.hosts.push_back(std::move(h));
  }
  for (int i = 0; i < proxies; ++i) {
    proxy_spec p;
    p.name = proxy_name(i);
    p.host = host_name(i % hosts);
    p.vcpus = 1;
    p.memory_mib = 64; // the engine's minimum
    p.network = "default";
    cfg.proxies.push_back(std::move(p));
  }
  return cfg;
}

std::string engine_label(const std::string& connect) {
  return connect == "before" ? "engine warm" : "engine cold";
}

std::string python_label(const std::string& transport, int workers,
                         const std::string& connect) {
  return "py " + transport + " W=" + std::to_string(workers)
         + (connect == "before" ? " warm" : " cold");
}

std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  return out + "\"";
}

// The script's input: entry, host -> URI, and the proxies as the engine has them.
std::string write_spec(const setup& s, const options& o, const std::string& transport) {
  auto cfg = make_config(s, o, o.hosts, o.proxies, entry);
  std::string j = "{\"entry\": " + json_quote(entry) + ", \"hosts\": {";
  for (size_t i = 0; i < cfg.hosts.size(); ++i)
    j += (i ? ", " : "") + json_quote(cfg.hosts[i].name) + ": "
         + json_quote(s.python_uri(transport, i));
  j += "}, \"proxies\": [";
  for (size_t i = 0; i < cfg.proxies.size(); ++i) {
    auto& p = cfg.proxies[i];
    j += std::string{i ? ",\n " : "\n "} + "{\"name\": " + json_quote(p.name)
         + ", \"host\": " + json_quote(p.host) + ", \"domain_type\": \"test\", \"vcpus\": "
         + std::to_string(p.vcpus) + ", \"memory_mib\": " + std::to_string(p.memory_mib)
         + ", \"network\": " + json_quote(p.network) + ", \"tags\": []}";
  }
  j += "]}\n";
  auto path = s.tmp() / ("spec-" + transport + ".json");
  testbed::write_file(path, j);
  return path;
}

class bench {
public:
  bench(setup& s, caf::actor_system& sys, const options& o) : s_(s), sys_(sys), o_(o) {}

  // cold: engine::start with the hosts and the proxies, the links' dials in
  // the window. warm: engine::start with the hosts alone, every link up
  // before the clock (a running daemon's links), then one reload that
  // declares the proxies, timed from the reload.
  measurement engine_run(const std::string& connect) {
    measurement m;
    m.label = engine_label(connect);
    const bool warm = connect == "before";
    auto cfg = make_config(s_, o_, o_.hosts, o_.proxies, entry);
    auto cpu0 = sample_cpu();
    std::optional<own_cpu_meter> own{std::in_place, s_.relay()}; // warm: made anew at the reload
    auto t0 = clock_type::now();
    auto eng = egress::engine::start(sys_, warm ? make_config(s_, o_, o_.hosts, 0, entry) : cfg);
    if (!eng) {
      m.error = "engine start: " + render(eng.error());
      return m;
    }
    double warm_up = 0;
    cpu_sample window0; // warm: at the reload
    measurement window; // warm: its CPU from the reload to convergence
    if (warm) {
      if (auto err = wait_links_up(*eng)) {
        m.error = *err;
        eng->stop();
        return m;
      }
      warm_up = seconds_since(t0);
      window0 = sample_cpu();
      own.emplace(s_.relay());
      t0 = clock_type::now();
      if (auto summary = eng->reload(cfg); !summary) {
        m.error = "reload: " + render(summary.error());
        eng->stop();
        return m;
      }
    }
    double links_up = 0, all_created = 0;
    std::vector<double> quarter(4, 0); // first time 25/50/75/100 % ran
    size_t errors_seen = 0;
    uint64_t polls = 0;
    int statuses = 0; // the harness's polls in the window
    std::string last;
    for (;;) {
      own->harness_begin();
      ++statuses;
      auto st = eng->status();
      auto now = seconds_since(t0);
      if (!st) {
        last = "status: " + render(st.error());
      } else {
        size_t up = 0, created = 0, running = 0;
        polls = 0;
        for (auto& l : st->links)
          up += l.state == link_state::up;
        for (auto& p : st->proxies) {
          created += p.phase == proxy_phase::provisioning || p.phase == proxy_phase::running;
          running += p.phase == proxy_phase::running && !p.address.empty();
          polls += p.polls;
          if (!p.last_error.empty()) {
            ++errors_seen;
            last = p.name + ": " + p.last_error;
          }
        }
        if (links_up == 0 && up == st->links.size() && !st->links.empty())
          links_up = now;
        if (all_created == 0 && created == static_cast<size_t>(o_.proxies))
          all_created = now;
        for (size_t q = 0; q < 4; ++q)
          if (quarter[q] == 0 && running * 4 >= (q + 1) * static_cast<size_t>(o_.proxies))
            quarter[q] = now;
        if (running == static_cast<size_t>(o_.proxies) && st->proxies.size() == running) {
          own->harness_end();
          m.seconds = now;
          m.window_cpu = own->seconds();
          if (warm)
            charge_cpu(window, window0);
          break;
        }
      }
      own->harness_end();
      if (now > 120) {
        m.error = "not converged after 120 s; last: " + last;
        break;
      }
      std::this_thread::sleep_for(20ms);
    }
    double per_status = m.seconds > 0 ? status_cpu(*eng) : 0;
    m.window_cpu -= statuses * per_status;
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "links up %.0f ms, all created %.0f ms, running 25/50/75/100%% at"
                  " %.0f/%.0f/%.0f/%.0f ms; polls answered %llu",
                  links_up * 1000, all_created * 1000, quarter[0] * 1000, quarter[1] * 1000,
                  quarter[2] * 1000, quarter[3] * 1000, static_cast<unsigned long long>(polls));
    m.note = buf;
    std::snprintf(buf, sizeof buf,
                  "; own CPU in the window %.3f s (%.2f ms per proxy; the fleet's answers to"
                  " %d status polls taken out at %.3f ms each)",
                  m.window_cpu, m.window_cpu / o_.proxies * 1000, statuses, per_status * 1000);
    m.note += buf;
    if (warm) {
      std::snprintf(buf, sizeof buf,
                    "; links dialed before the clock in %.0f ms; CPU in the window: client"
                    " %.2f s, server %.2f s, relay %.2f s",
                    warm_up * 1000, window.client_cpu, window.server_cpu, window.relay_cpu);
      m.note += buf;
    }
    if (errors_seen > 0)
      m.note += "; proxy errors seen " + std::to_string(errors_seen) + ", last: " + last;
    if (auto err = eng->stop())
      m.note += "; stop: " + render(err);
    settle();
    charge_cpu(m, cpu0);
    if (m.error.empty()) {
      if (auto wrong = s_.misplaced(o_.proxies); !wrong.empty())
        m.error = "converged, but " + wrong;
    }
    return m;
  }

  measurement python_run(const std::string& transport, int workers, const std::string& connect,
                         const std::string& spec) {
    measurement m;
    m.label = python_label(transport, workers, connect);
    auto cpu0 = sample_cpu();
    auto t0 = clock_type::now();
    auto res = testbed::run({"/usr/bin/python3", o_.script, "--workers",
                             std::to_string(workers), "--connect", connect, "--spec", spec},
                            std::chrono::seconds(300));
    auto process_s = seconds_since(t0);
    settle();
    charge_cpu(m, cpu0);
    auto at = res.output.rfind("RESULT ");
    std::map<std::string, std::string> kv;
    if (at != std::string::npos) {
      auto line = res.output.substr(at + 7, res.output.find('\n', at) - at - 7);
      for (auto& item : split(line, ' '))
        if (auto eq = item.find('='); eq != std::string::npos)
          kv[item.substr(0, eq)] = item.substr(eq + 1);
    }
    auto num = [&](const std::string& k) {
      auto it = kv.find(k);
      return it == kv.end() ? 0.0 : std::strtod(it->second.c_str(), nullptr);
    };
    m.client_cpu -= num("cpu_pre"); // interpreter start-up and the import
    m.window_cpu = num("cpu") + num("cpu_children");
    if (!res.ok() || kv.empty() || num("converged") != o_.proxies) {
      m.error = "exit " + std::to_string(res.exit_code) + (res.timed_out ? " (timed out)" : "")
                + ": " + testbed::detail::tail(res.output, 12);
      return m;
    }
    m.seconds = num("wall");
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "process %.2f s%s; own CPU in the window %.3f s (%.2f ms per proxy:"
                  " the script %.3f s, its children %.3f s); mean ms per call: open %.0f,"
                  " lookup %.2f, define %.2f, create %.2f, addresses %.2f (x%.0f)",
                  process_s,
                  connect == "before"
                    ? (", opened before the clock in " + std::to_string(num("open_wall")).substr(0, 5)
                       + " s").c_str()
                    : "",
                  m.window_cpu, m.window_cpu / o_.proxies * 1000, num("cpu"),
                  num("cpu_children"), num("open_ms"), num("lookup_ms"), num("define_ms"),
                  num("create_ms"), num("addresses_ms"), num("addresses_n"));
    m.note = buf;
    if (auto wrong = s_.misplaced(o_.proxies); !wrong.empty())
      m.error = wrong;
    return m;
  }

  // Per-call latency through one engine link, no proxies running: `n` call
  // jobs of one lookup each, one after the other (request -> link -> call
  // worker -> libvirt -> SSH -> libvirtd and back), against `n` lookups
  // inside call jobs (libvirt's RPC over the engine's transport alone).
  std::string latency(int n) {
    auto cfg = make_config(s_, o_, 1, 0, "bench-latency");
    auto eng = egress::engine::start(sys_, cfg);
    if (!eng)
      return "engine start: " + render(eng.error());
    std::string out;
    caf::scoped_actor self{sys_};
    host_link_actor link;
    self->request(eng->fleet(), 5s, atom::link_v, host_name(0))
      .receive([&](host_link_actor& h) { link = h; },
               [&](caf::error& err) { out = "link: " + render(err); });
    auto lookup_once = [](lv::connection& c) {
      virDomainPtr d = virDomainLookupByName(c.get(), "no-such-domain");
      if (d != nullptr)
        virDomainFree(d);
      else
        virResetLastError();
    };
    auto call = [&](std::function<void(lv::connection&)> fn) {
      call_job job;
      job.what = "bench lookup";
      job.budget = 30s;
      job.fn = [fn = std::move(fn)](lv::connection& c) -> caf::expected<std::any> {
        fn(c);
        return std::any{};
      };
      bool ok = false;
      self->request(link, 60s, atom::call_v, std::move(job))
        .receive([&](call_result&) { ok = true; },
                 [&](caf::error& e) { out = "call: " + render(e); });
      return ok;
    };
    if (out.empty() && call(lookup_once)) { // dials
      // Interleaved batches, so that the machine's drift (this VM kind's
      // noise is wide) falls on both alike: per batch, `batch` jobs of one
      // lookup, then one job of `batch` lookups; the medians of the batches.
      const int batches = 10, batch = std::max(n / batches, 1);
      std::vector<double> per_job, per_rpc;
      for (int k = 0; k < batches && out.empty(); ++k) {
        auto t0 = clock_type::now();
        for (int i = 0; i < batch && out.empty(); ++i)
          call(lookup_once);
        per_job.push_back(seconds_since(t0) / batch);
        t0 = clock_type::now();
        call([&](lv::connection& c) {
          for (int i = 0; i < batch; ++i)
            lookup_once(c);
        });
        per_rpc.push_back(seconds_since(t0) / batch);
      }
      if (out.empty()) {
        auto job = median(per_job), rpc = median(per_rpc);
        char buf[256];
        std::snprintf(buf, sizeof buf,
                      "one lookup per call job: %.3f ms per job; the same lookups inside one"
                      " job: %.3f ms per RPC (%.2fx; medians of %d interleaved batches of %d)",
                      job * 1000, rpc * 1000, rpc > 0 ? job / rpc : 0, batches, batch);
        out = buf;
      }
    }
    eng->stop();
    return out;
  }

private:
  // The engine's CPU per status answer (the fleet's side; the caller's is
  // the harness's), over `n` polls of a converged, quiet engine: what the
  // harness's polls during convergence cost the engine, to take out.
  double status_cpu(egress::engine& eng, int n = 20) const {
    own_cpu_meter meter{s_.relay()};
    for (int i = 0; i < n; ++i) {
      meter.harness_begin();
      (void) eng.status();
      meter.harness_end();
    }
    return std::max(0.0, meter.seconds() / n);
  }

  struct cpu_sample {
    double tree = 0;   // this process and every descendant, live and reaped
    double server = 0; // the daemons' trees
    double relay = 0;  // the relays' threads
  };

  cpu_sample sample_cpu() const {
    // One pass over /proc for both trees: what a daemon used between two
    // passes would otherwise come off the client's figure unearned.
    auto procs = scan_processes();
    return {tree_cpu_seconds(procs, {::getpid()}), tree_cpu_seconds(procs, s_.server_roots()),
            s_.relay().cpu_seconds()};
  }

  // CPU since `before`, per side. The daemons are this process's children
  // (the testbed started them), so the client side is this process's tree
  // without them and without the relays' threads.
  void charge_cpu(measurement& m, const cpu_sample& before) const {
    auto now = sample_cpu();
    m.server_cpu = now.server - before.server;
    m.relay_cpu = now.relay - before.relay;
    m.client_cpu = now.tree - before.tree - m.server_cpu - m.relay_cpu;
  }

  // Every link of `eng` up within 60 s, or why not.
  static std::optional<std::string> wait_links_up(egress::engine& eng) {
    auto t0 = clock_type::now();
    std::string last = "no status";
    while (seconds_since(t0) < 60) {
      if (auto st = eng.status(); !st) {
        last = render(st.error());
      } else {
        size_t up = 0;
        for (auto& l : st->links)
          up += l.state == link_state::up;
        if (!st->links.empty() && up == st->links.size())
          return std::nullopt;
        last = std::to_string(up) + " of " + std::to_string(st->links.size()) + " links up";
      }
      std::this_thread::sleep_for(20ms);
    }
    return "links not up after 60 s: " + last;
  }

  // Lets sshd sessions and libvirtd finish the connections' teardown, so
  // their CPU lands in this step's figure.
  void settle() {
    std::this_thread::sleep_for(300ms);
  }

  setup& s_;
  caf::actor_system& sys_;
  const options& o_;
};

void print(const measurement& m) {
  if (!m.ok()) {
    std::printf("  %-18s FAILED: %s\n", m.label.c_str(), m.error.c_str());
    return;
  }
  std::printf("  %-18s %6.3f s  CPU client %5.2f s, server %5.2f s, relay %4.2f s  (%s)\n",
              m.label.c_str(), m.seconds, m.client_cpu, m.server_cpu, m.relay_cpu,
              m.note.c_str());
}

using step_results = std::map<std::string, std::vector<measurement>>;

// The median of `field` over the runs of `label` that converged.
template <class Field>
double median_of(const step_results& res, const std::string& label, Field field) {
  std::vector<double> xs;
  if (auto it = res.find(label); it != res.end())
    for (auto& m : it->second)
      if (m.ok())
        xs.push_back(field(m));
  return median(xs);
}

// What the engine controls (its own CPU, the daemons' left out), per
// converged proxy, in milliseconds.
double own_ms_per_proxy(const measurement& m, int proxies) {
  return m.window_cpu / proxies * 1000;
}

double median_own_ms(const step_results& res, const std::string& label, int proxies) {
  return median_of(res, label, [proxies](const measurement& m) {
    return own_ms_per_proxy(m, proxies);
  });
}

// One line: the engine's own CPU per converged proxy, each pool's of one
// transport and connect mode, and engine/pool (< 1: the engine spends less).
void print_own_cpu(const step_results& res, const options& o, double rtt,
                   const std::string& transport, const std::string& connect) {
  double e = median_own_ms(res, engine_label(connect), o.proxies);
  std::printf("  RTT %5g ms  %-8s %s  engine %5.2f ms", rtt, transport.c_str(),
              connect == "before" ? "warm" : "cold", e);
  for (auto w : o.workers) {
    double p = median_own_ms(res, python_label(transport, w, connect), o.proxies);
    std::printf("  py%d %5.2f ms (engine/py%d %5.2fx)", w, p, w, p > 0 ? e / p : 0);
  }
  std::printf("\n");
}

// What the client's own CPU counts, said once with the figures.
void print_own_cpu_legend() {
  std::printf("  (own CPU: from the clock's start to convergence, per converged proxy; the"
              " engine: this process, every thread, minus the relays' threads and the"
              " harness's status polls (its thread, and the fleet's answers at their"
              " measured cost); a pool: the script's process, every thread, and its"
              " descendants (ssh: the OpenSSH clients libvirt runs; libssh2: none); the"
              " daemons (libvirtd, sshd) on neither side)\n");
}

std::string versions() {
  unsigned long lib = 0, daemon = 0;
  virGetVersion(&lib, nullptr, nullptr);
  auto ver = [](unsigned long v) {
    return std::to_string(v / 1000000) + "." + std::to_string(v / 1000 % 1000) + "."
           + std::to_string(v % 1000);
  };
  (void) daemon;
  auto py = testbed::run({"/usr/bin/python3", "-c",
                          "import sys, libvirt; print(sys.version.split()[0],"
                          " libvirt.getVersion())"});
  auto text = py.output;
  while (!text.empty() && (text.back() == '\n' || text.back() == ' '))
    text.pop_back();
  return "libvirt " + ver(lib) + " (client and daemon), libssh2 "
         + std::string{libssh2_version(0)} + ", python3 + libvirt-python " + text;
}

// The checks the bed rests on: every connection to a host's
// test:///default through its daemon sees that host's one state (a domain
// defined over the held local connection is visible over each transport the
// script uses), and no other host sees it (each host its own domains and
// events, as on a fleet).
void check_sharing(setup& s, const options& o) {
  auto xml = "<domain type='test'><name>share-check</name><memory unit='MiB'>16</memory>"
             "<vcpu>1</vcpu><os><type arch='x86_64'>hvm</type></os></domain>";
  auto last = s.hosts() - 1;
  virDomainPtr d = virDomainDefineXML(s.host(last).admin->get(), xml);
  if (d == nullptr)
    throw std::runtime_error("define share-check: " + render(lv::last_error("define")));
  virDomainFree(d);
  for (auto& t : o.transports) {
    auto r = testbed::run({"virsh", "-q", "-c", s.python_uri(t, last), "domstate", "share-check"});
    std::printf("  sharing over %-8s virsh domstate share-check: %s", t.c_str(),
                r.ok() ? r.output.c_str() : ("FAILED: " + r.output + "\n").c_str());
    if (!r.ok())
      throw std::runtime_error("test:///default over " + t + " does not reach the state");
  }
  for (size_t i = 0; i < last; ++i) {
    auto names = s.host(i).domains();
    if (std::find(names.begin(), names.end(), "share-check") != names.end())
      throw std::runtime_error(host_name(static_cast<int>(i)) + " sees "
                               + host_name(static_cast<int>(last)) + "'s domain");
  }
  s.clean();
}

} // namespace

int main(int argc, char** argv) {
  options o;
  std::string src = __FILE__;
  o.script = src.substr(0, src.rfind('/') + 1) + "converge_libvirt.py";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--runs") {
      o.runs = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--hosts") {
      o.hosts = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--proxies") {
      o.proxies = std::clamp(std::atoi(next().c_str()), 1, 1000);
    } else if (a == "--poll-ms") {
      o.poll_ms = std::max(10, std::atoi(next().c_str()));
    } else if (a == "--workers") {
      o.workers.clear();
      for (auto& w : split(next(), ','))
        o.workers.push_back(std::max(1, std::atoi(w.c_str())));
    } else if (a == "--transports") {
      o.transports = split(next(), ',');
    } else if (a == "--only") {
      o.only = split(next(), ',');
    } else if (a == "--hold") {
      o.hold_s = std::max(0, std::atoi(next().c_str()));
    } else if (a == "--script") {
      o.script = next();
    } else if (a == "--rtt") {
      o.rtts.clear();
      for (auto& r : split(next(), ',')) {
        char* end = nullptr;
        double ms = std::strtod(r.c_str(), &end);
        if (end == r.c_str() || *end != '\0' || ms < 0 || ms > 10000) {
          std::fprintf(stderr, "--rtt takes milliseconds >= 0, comma separated: %s\n",
                       r.c_str());
          return 2;
        }
        o.rtts.push_back(ms);
      }
    } else {
      std::fprintf(stderr,
                   "usage: %s [--runs R] [--hosts H] [--proxies P] [--poll-ms MS]"
                   " [--rtt 0,10] [--workers 3,8] [--transports ssh,libssh2]"
                   " [--only engine,py] [--script PATH] [--hold S]\n",
                   argv[0]);
      return 2;
    }
  }
  if (o.rtts.empty()) {
    std::fprintf(stderr, "--rtt needs at least one value\n");
    return 2;
  }
  for (auto& t : o.transports)
    if (t != "ssh" && t != "libssh2") {
      std::fprintf(stderr, "--transports takes ssh and/or libssh2\n");
      return 2;
    }
  if (o.workers.empty()) {
    std::fprintf(stderr, "--workers needs at least one count\n");
    return 2;
  }
  if (::geteuid() != 0) {
    std::printf("SKIPPED: needs root\n");
    return 77;
  }
  testbed::require_root_or_skip(); // namespaces and tools; reaps stale leftovers
  if (::access("/usr/bin/python3", X_OK) != 0 || ::access(o.script.c_str(), R_OK) != 0
      || !testbed::run({"/usr/bin/python3", "-c", "import libvirt"}).ok())
    testbed::skip("needs /usr/bin/python3 with libvirt (python3-libvirt) and " + o.script);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  log::set_level(log::level::error);

  try {
    auto t0 = clock_type::now();
    setup s{o};
    std::printf("bench-converge: %d proxies over %d hosts, poll interval %d ms;"
                " %d run(s)\n",
                o.proxies, o.hosts, o.poll_ms, o.runs);
    std::printf("  %zu hosts, each a libvirtd of its own (test:///default, one state per"
                " daemon) behind an sshd of its own; setup %.1f s\n",
                s.hosts(), seconds_since(t0));
    for (size_t i = 0; i < s.hosts(); ++i)
      std::printf("    %s: libvirtd pid %d, sshd %s:%d pid %d, relay port %d\n",
                  host_name(static_cast<int>(i)).c_str(), static_cast<int>(s.host(i).lv.pid()),
                  s.host(i).ssh.address().c_str(), s.host(i).ssh.port(),
                  static_cast<int>(s.host(i).ssh.pid()), s.relay().at(i).port());
    std::string rtts_text;
    for (auto r : o.rtts) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%s%g", rtts_text.empty() ? "" : ", ", r);
      rtts_text += buf;
    }
    std::printf("  latency relays -> each sshd (every client, engine and script):"
                " RTT %s ms (RTT/2 each way), known_hosts %s\n",
                rtts_text.c_str(), s.relay_known_hosts().c_str());
    std::printf("  %s; %ld cores\n", versions().c_str(), ::sysconf(_SC_NPROCESSORS_ONLN));
    {
      host_config h;
      h.transport = "ssh";
      auto plan = plan_calls(h);
      std::printf("  engine: transport ssh (libssh2 + bridge + pump), remote socket %s,"
                  " max-calls %u per link on %u libvirt connection(s), probes off\n",
                  remote_socket.c_str(), plan.calls, plan.connections);
    }
    std::string workers_text;
    for (auto w : o.workers)
      workers_text += (workers_text.empty() ? "" : ", ") + std::to_string(w);
    std::printf("  script: %s, workers %s\n", o.script.c_str(), workers_text.c_str());
    std::map<std::string, std::string> specs;
    for (auto& t : o.transports) {
      specs[t] = write_spec(s, o, t);
      std::printf("  py %-8s %s (host 0)\n", t.c_str(), s.python_uri(t, 0).c_str());
    }
    if (o.hold_s > 0) {
      std::printf("  admin %s (host 0); holding %d s\n", s.host(0).lv.uri("test").c_str(),
                  o.hold_s);
      std::this_thread::sleep_for(std::chrono::seconds(o.hold_s));
      return 0;
    }
    check_sharing(s, o);

    caf::actor_system_config cfg;
    cfg.set("logger.file-verbosity", caf::atom("quiet"));
    configure(cfg);
    caf::actor_system sys{cfg};
    bench b{s, sys, o};

    using step = std::function<measurement()>;
    std::vector<std::pair<std::string, step>> steps;
    const std::vector<std::string> connects{"before", "lazy"};
    for (auto& c : connects)
      steps.emplace_back(engine_label(c), [&, c] { return b.engine_run(c); });
    for (auto& c : connects)
      for (auto& t : o.transports)
        for (auto w : o.workers)
          steps.emplace_back(python_label(t, w, c),
                             [&, t, w, c] { return b.python_run(t, w, c, specs[t]); });
    if (!o.only.empty())
      steps.erase(std::remove_if(steps.begin(), steps.end(),
                                 [&](auto& st) {
                                   for (auto& prefix : o.only)
                                     if (st.first.rfind(prefix, 0) == 0)
                                       return false;
                                   return true;
                                 }),
                  steps.end());
    // results[rtt index][label]: runs interleave the RTTs (their order
    // rotates per run) and, within one RTT, the steps (rotating too).
    const size_t nr = o.rtts.size();
    std::vector<std::map<std::string, std::vector<measurement>>> results(nr);
    for (int r = 0; r < o.runs; ++r) {
      for (size_t k = 0; k < nr; ++k) {
        size_t ri = (k + static_cast<size_t>(r)) % nr;
        s.relay().set_rtt_ms(o.rtts[ri]);
        std::printf("\n[run %d/%d, RTT %g ms] load average %s\n", r + 1, o.runs, o.rtts[ri],
                    load_average().c_str());
        for (size_t i = 0; i < steps.size(); ++i) {
          auto& [label, fn] = steps[(i + static_cast<size_t>(r)) % steps.size()];
          auto removed = s.clean();
          if (removed != 0)
            std::printf("  (removed %zu leftover domains)\n", removed);
          print(results[ri][label].emplace_back(fn()));
        }
      }
    }
    s.clean();

    auto secs = [](const measurement& m) { return m.seconds; };
    auto ccpu = [](const measurement& m) { return m.client_cpu; };
    auto scpu = [](const measurement& m) { return m.server_cpu; };
    auto rcpu = [](const measurement& m) { return m.relay_cpu; };
    auto has = [&](const std::string& label) {
      for (auto& st : steps)
        if (st.first == label)
          return true;
      return false;
    };
    std::vector<std::string> latencies(nr);
    auto wcpu = [](const measurement& m) { return m.window_cpu; };
    figures csv{"rtt_ms",         "path",          "seconds",
                "client_cpu_s",   "server_cpu_s",  "own_cpu_s",
                "own_ms_per_proxy", "engine_own_ratio"};
    for (size_t ri = 0; ri < nr; ++ri) {
      auto& res = results[ri];
      auto med = [&](const std::string& label, auto field) {
        std::vector<double> xs;
        for (auto& m : res[label])
          if (m.ok())
            xs.push_back(field(m));
        return median(xs);
      };
      // A python step against the engine step of the same connect mode.
      auto engine_of = [](const std::string& label) {
        return engine_label(label.size() >= 5 && label.compare(label.size() - 5, 5, " warm") == 0
                              ? "before"
                              : "lazy");
      };
      auto per_run_ratio = [&](const std::string& label) {
        std::vector<double> xs;
        auto& e = res[engine_of(label)];
        auto& p = res[label];
        for (size_t i = 0; i < e.size() && i < p.size(); ++i)
          if (e[i].ok() && p[i].ok())
            xs.push_back(p[i].seconds / e[i].seconds);
        return median(xs);
      };
      for (auto& [label, fn] : steps) {
        (void) fn;
        // engine_own_ratio: the engine's own CPU per proxy over this path's
        // (the engine run warm or cold as the path; 1 on the engine's rows).
        double own = median_own_ms(res, label, o.proxies);
        double engine_own = median_own_ms(res, engine_of(label), o.proxies);
        csv.row({figures::cell(o.rtts[ri]), figures::cell(label),
                 figures::cell(med(label, secs)), figures::cell(med(label, ccpu)),
                 figures::cell(med(label, scpu)), figures::cell(med(label, wcpu)),
                 figures::cell(own), figures::cell(own > 0 ? engine_own / own : 0)});
      }
      std::printf("\n==== RTT %g ms: %d proxies, %d hosts, poll %d ms: median of %d run(s) ====\n",
                  o.rtts[ri], o.proxies, o.hosts, o.poll_ms, o.runs);
      std::printf("  %-18s %8s %10s %12s %12s %11s %10s %12s\n", "path", "seconds",
                  "proxies/s", "client CPU", "server CPU", "relay CPU", "x engine",
                  "per-run med");
      std::printf("  (x engine: against the engine run warm or cold as the script)\n");
      for (auto& [label, fn] : steps) {
        (void) fn;
        double t = med(label, secs);
        std::printf("  %-18s %8.3f %10.1f %10.2f s %10.2f s %9.2f s", label.c_str(), t,
                    t > 0 ? o.proxies / t : 0, med(label, ccpu), med(label, scpu),
                    med(label, rcpu));
        double te = med(engine_of(label), secs);
        if (label.rfind("engine", 0) == 0)
          std::printf(" %10s %12s\n", "1.00", "-");
        else
          std::printf(" %9.2fx %11.2fx\n", te > 0 ? t / te : 0, per_run_ratio(label));
      }
      {
        std::printf("  ratios at RTT %g ms, python seconds / engine seconds (medians; > 1: the"
                    " engine is faster):\n",
                    o.rtts[ri]);
        for (auto& c : connects)
          for (auto& t : o.transports) {
            if (!has(python_label(t, o.workers[0], c)) || !has(engine_label(c)))
              continue;
            double te = med(engine_label(c), secs);
            std::printf("    %-8s %s", t.c_str(),
                        c == "before" ? "warm (connections opened before the clock)"
                                      : "cold (connections opened in the window)    ");
            for (auto w : o.workers) {
              double tp = med(python_label(t, w, c), secs);
              std::printf("  py%d/engine = %5.2fx", w, te > 0 ? tp / te : 0);
            }
            std::printf("\n");
          }
        std::printf("  the client's own CPU per converged proxy at RTT %g ms (medians):\n",
                    o.rtts[ri]);
        for (auto& c : connects)
          for (auto& t : o.transports)
            if (has(python_label(t, o.workers[0], c)) && has(engine_label(c)))
              print_own_cpu(res, o, o.rtts[ri], t, c);
      }
      s.relay().set_rtt_ms(o.rtts[ri]);
      latencies[ri] = b.latency(200);
      std::printf("  per-call latency at RTT %g ms, one engine link, no proxies: %s\n",
                  o.rtts[ri], latencies[ri].c_str());
    }

    // One summary across the RTTs: the medians again, side by side.
    {
      std::printf("\n==== summary: median seconds to convergence and python/engine ratios"
                  " per RTT (%d run(s)) ====\n",
                  o.runs);
      for (auto& c : connects)
        for (auto& t : o.transports) {
          if (!has(python_label(t, o.workers[0], c)) || !has(engine_label(c)))
            continue;
          for (size_t ri = 0; ri < nr; ++ri) {
            auto med = [&](const std::string& label) {
              std::vector<double> xs;
              for (auto& m : results[ri][label])
                if (m.ok())
                  xs.push_back(m.seconds);
              return median(xs);
            };
            double te = med(engine_label(c));
            std::printf("  RTT %5g ms  %-8s %s  engine %6.3f s", o.rtts[ri], t.c_str(),
                        c == "before" ? "warm" : "cold", te);
            for (auto w : o.workers) {
              double tp = med(python_label(t, w, c));
              std::printf("  py%d %6.3f s (py%d/engine %5.2fx)", w, tp, w,
                          te > 0 ? tp / te : 0);
            }
            std::printf("\n");
          }
        }
      std::printf("\n==== summary: the client's own CPU per converged proxy and engine/python"
                  " ratios per RTT (medians, %d run(s)) ====\n",
                  o.runs);
      print_own_cpu_legend();
      for (auto& c : connects)
        for (auto& t : o.transports)
          if (has(python_label(t, o.workers[0], c)) && has(engine_label(c)))
            for (size_t ri = 0; ri < nr; ++ri)
              print_own_cpu(results[ri], o, o.rtts[ri], t, c);
    }
    auto live_before = s.relay().live(); // the engine's links are stopped; the script exited
    auto stop_t = clock_type::now();
    s.relay().stop();
    std::printf("\nrelay: %llu connections (%llu failed connects), %.1f MB to sshd, %.1f MB"
                " back; %zu live before stop, %zu after; stopped and joined in %.0f ms\n",
                static_cast<unsigned long long>(s.relay().connections()),
                static_cast<unsigned long long>(s.relay().failed_connects()),
                static_cast<double>(s.relay().bytes(0)) / 1e6,
                static_cast<double>(s.relay().bytes(1)) / 1e6, live_before, s.relay().live(),
                seconds_since(stop_t) * 1000);
    std::printf("\ntotal %.1f s\n", seconds_since(t0));
  } catch (const std::exception& e) {
    std::printf("bench-converge: FAILED: %s\n", e.what());
    return 1;
  }
  return 0;
}
