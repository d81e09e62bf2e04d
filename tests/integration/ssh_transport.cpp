#define BOOST_TEST_MODULE ssh_transport
#include <boost/test/unit_test.hpp>

// The SSH transport against a REAL OpenSSH sshd on 127.0.0.1 (own host key,
// own authorized ed25519 key, all in a temp dir), with a unix-socket echo
// server run by the test as the "remote daemon". Needs root (sshd's
// privilege separation); exits 77 (skipped) otherwise.

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <netinet/in.h>
#include <poll.h>
#include <random>
#include <sstream>
#include <filesystem>
#include <string>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <dirent.h>

#include "actors/parts/transport_choice.hpp"
#include "messages/error.hpp"
#include "providers/ssh/bridge.hpp"
#include "providers/ssh/ssh_transport.hpp"
#include "providers/ssh/user_key.hpp"

using namespace egress;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

// -- small helpers ------------------------------------------------------------

double ms_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

std::string code_of(const caf::error& err) {
  if (!err)
    return "none";
  return to_string(static_cast<ec>(err.code()));
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string slurp(const std::string& path) {
  std::ifstream in{path};
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void spit(const std::string& path, const std::string& text) {
  std::ofstream out{path};
  out << text;
}

void run_or_die(const std::string& cmd) {
  if (std::system(cmd.c_str()) != 0) {
    std::cerr << "command failed: " << cmd << "\n";
    std::exit(1);
  }
}

bool have_program(const std::string& name) {
  return std::system(("command -v " + name + " >/dev/null 2>&1").c_str()) == 0;
}

// Figures for the report, on stdout regardless of the log level.
void report(const std::string& line) {
  std::cout << "[measure] " << line << std::endl;
}

uint16_t free_tcp_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

int connect_unix(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// A client of the bridge, as libvirt would be. Closed on scope exit, so a
// failed REQUIRE still ends the pump (client EOF) instead of leaving it
// running under a test that has given up.
struct client_socket {
  explicit client_socket(const std::string& path) : fd(connect_unix(path)) {}
  ~client_socket() {
    if (fd >= 0)
      ::close(fd);
  }
  client_socket(const client_socket&) = delete;
  client_socket& operator=(const client_socket&) = delete;
  int fd;
};

// A thread blocked in recv() on `fd`, as libvirt waiting for a reply; notes
// what recv() returned and when. Its destructor unblocks it if need be.
struct blocked_reader {
  explicit blocked_reader(int fd) : fd_(fd) {
    thread_ = std::thread{[this] {
      char c;
      got = ::recv(fd_, &c, 1, 0);
      returned = clock_type::now();
      done = true;
    }};
  }
  ~blocked_reader() {
    if (thread_.joinable()) {
      ::shutdown(fd_, SHUT_RDWR);
      thread_.join();
    }
  }
  /// True if recv() returned within `d` (then `got` and `returned` are set).
  bool wait(std::chrono::milliseconds d) {
    auto deadline = clock_type::now() + d;
    while (!done && clock_type::now() < deadline)
      std::this_thread::sleep_for(1ms);
    if (done)
      thread_.join();
    return done;
  }

  int fd_;
  std::thread thread_;
  std::atomic<bool> done{false};
  ssize_t got = -2;
  clock_type::time_point returned;
};

bool write_all(int fd, const char* data, size_t len) {
  while (len > 0) {
    auto n = ::send(fd, data, len, MSG_NOSIGNAL);
    if (n <= 0)
      return false;
    data += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

// Reads exactly `len` bytes or until EOF/error/timeout; returns what it got.
std::string read_n(int fd, size_t len, std::chrono::milliseconds timeout = 10s) {
  std::string out;
  auto deadline = clock_type::now() + timeout;
  char buf[65536];
  while (out.size() < len) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline
                                                                      - clock_type::now());
    if (left.count() <= 0)
      break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0)
      break;
    auto n = ::recv(fd, buf, std::min(sizeof buf, len - out.size()), 0);
    if (n <= 0)
      break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::string random_bytes(size_t n) {
  std::mt19937_64 rng{42};
  std::string out(n, '\0');
  for (auto& c : out)
    c = static_cast<char>(rng());
  return out;
}

// All processes below `root` (children, grandchildren...), from /proc.
std::vector<pid_t> descendants(pid_t root) {
  std::multimap<pid_t, pid_t> children;
  if (auto dir = ::opendir("/proc")) {
    while (auto e = ::readdir(dir)) {
      auto pid = std::atoi(e->d_name);
      if (pid <= 0)
        continue;
      auto stat = slurp("/proc/" + std::string{e->d_name} + "/stat");
      auto close_paren = stat.rfind(')');
      if (close_paren == std::string::npos)
        continue;
      char state = 0;
      int ppid = 0;
      if (std::sscanf(stat.c_str() + close_paren + 1, " %c %d", &state, &ppid) == 2)
        children.emplace(ppid, pid);
    }
    ::closedir(dir);
  }
  std::vector<pid_t> out;
  std::vector<pid_t> todo{root};
  while (!todo.empty()) {
    auto p = todo.back();
    todo.pop_back();
    auto [from, to] = children.equal_range(p);
    for (auto i = from; i != to; ++i) {
      out.push_back(i->second);
      todo.push_back(i->second);
    }
  }
  return out;
}

// -- the remote "daemon": a unix-socket echo server ---------------------------

class echo_server {
public:
  explicit echo_server(std::string path) : path_(std::move(path)) {
    ::unlink(path_.c_str());
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path_.c_str(), sizeof a.sun_path - 1);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0
        || ::listen(fd_, 16) != 0) {
      std::cerr << "echo server: " << std::strerror(errno) << "\n";
      std::exit(1);
    }
    acceptor_ = std::thread{[this] { accept_loop(); }};
  }

  ~echo_server() {
    ::shutdown(fd_, SHUT_RDWR);
    acceptor_.join();
    {
      std::lock_guard<std::mutex> g{mtx_};
      for (auto fd : conns_)
        ::shutdown(fd, SHUT_RDWR);
    }
    for (auto& t : workers_)
      t.join();
    ::close(fd_);
    ::unlink(path_.c_str());
  }

  const std::string& path() const { return path_; }

private:
  void accept_loop() {
    for (;;) {
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) {
        if (errno == EINTR)
          continue;
        return;
      }
      std::lock_guard<std::mutex> g{mtx_};
      conns_.push_back(c);
      workers_.emplace_back([c] {
        char buf[65536];
        for (;;) {
          auto n = ::recv(c, buf, sizeof buf, 0);
          if (n <= 0 || !write_all(c, buf, static_cast<size_t>(n)))
            break;
        }
        ::shutdown(c, SHUT_RDWR);
      });
    }
  }

  std::string path_;
  int fd_ = -1;
  std::thread acceptor_;
  std::mutex mtx_;
  std::vector<int> conns_;
  std::vector<std::thread> workers_;
};

// -- the sshd fixture ---------------------------------------------------------

struct sshd_env {
  std::string dir;
  uint16_t port = 0;
  pid_t pid = -1;
  std::string host_pub, other_host_pub;
  std::string client_key, stranger_key, rsa_key;
  std::string known_hosts, known_hosts_empty, known_hosts_wrong, known_hosts_port22,
    known_hosts_hashed;
  std::string log;
  std::unique_ptr<echo_server> echo;

  sshd_env() {
    if (::geteuid() != 0) {
      std::cout << "SKIP ssh_transport: needs root to run a real sshd "
                   "(privilege separation); exiting 77\n";
      std::exit(77);
    }
    if (::access("/usr/sbin/sshd", X_OK) != 0 || !have_program("ssh-keygen")) {
      std::cout << "SKIP ssh_transport: /usr/sbin/sshd or ssh-keygen missing; exiting 77\n";
      std::exit(77);
    }
    char tmpl[] = "/tmp/egress-sshd-XXXXXX";
    dir = ::mkdtemp(tmpl);
    // If setup dies half way (std::exit), the temp dir goes anyway.
    setup_dir() = dir;
    std::atexit(remove_setup_dir);
    auto keygen = [&](const std::string& name, const std::string& type) {
      run_or_die("ssh-keygen -q -t " + type + " -N '' -C " + name + " -f " + dir + "/"
                 + name);
      return dir + "/" + name;
    };
    auto host_key = keygen("host_ed25519", "ed25519");
    keygen("other_host_ed25519", "ed25519");
    client_key = keygen("client_ed25519", "ed25519");
    stranger_key = keygen("stranger_ed25519", "ed25519");
    rsa_key = keygen("client_rsa", "rsa -b 2048");
    host_pub = slurp(host_key + ".pub");
    other_host_pub = slurp(dir + "/other_host_ed25519.pub");
    // The RSA key IS authorized: the only thing wrong with it is libssh2's
    // SHA-1 signature, which is what the auth test wants to isolate.
    spit(dir + "/authorized_keys",
         slurp(client_key + ".pub") + slurp(rsa_key + ".pub"));
    port = free_tcp_port();
    auto name = "[127.0.0.1]:" + std::to_string(port);
    known_hosts = dir + "/known_hosts";
    spit(known_hosts, "# test known_hosts\n" + name + " " + host_pub);
    known_hosts_empty = dir + "/known_hosts_empty";
    spit(known_hosts_empty, "");
    known_hosts_wrong = dir + "/known_hosts_wrong";
    spit(known_hosts_wrong, name + " " + other_host_pub);
    known_hosts_port22 = dir + "/known_hosts_port22";
    spit(known_hosts_port22, "127.0.0.1 " + host_pub);
    known_hosts_hashed = dir + "/known_hosts_hashed";
    spit(known_hosts_hashed, name + " " + host_pub);
    run_or_die("ssh-keygen -q -H -f " + known_hosts_hashed + " >/dev/null 2>&1");
    log = dir + "/sshd.log";
    auto cfg = dir + "/sshd_config";
    spit(cfg, "ListenAddress 127.0.0.1\n"
              "Port " + std::to_string(port) + "\n"
              "HostKey " + host_key + "\n"
              "AuthorizedKeysFile " + dir + "/authorized_keys\n"
              "PasswordAuthentication no\n"
              "KbdInteractiveAuthentication no\n"
              "UsePAM no\n"
              "StrictModes no\n"
              "PermitRootLogin prohibit-password\n"
              "AllowStreamLocalForwarding yes\n"
              "LogLevel VERBOSE\n"
              "PidFile " + dir + "/sshd.pid\n");
    run_or_die("mkdir -p /run/sshd");
    pid = ::fork();
    if (pid == 0) {
      // Should the test die without its fixture's teardown (abort, signal),
      // the kernel stops sshd too; its per-connection children end with
      // their connections, which die with us.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::execl("/usr/sbin/sshd", "/usr/sbin/sshd", "-D", "-e", "-f", cfg.c_str(),
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    // Ready when the port answers.
    for (int i = 0; i < 100; ++i) {
      int st = 0;
      if (::waitpid(pid, &st, WNOHANG) == pid) {
        std::cerr << "sshd exited at start:\n" << slurp(log);
        pid = -1;
        std::exit(1);
      }
      int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(port);
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      bool up = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
      ::close(fd);
      if (up)
        break;
      std::this_thread::sleep_for(50ms);
    }
    echo = std::make_unique<echo_server>(dir + "/echo.sock");
  }

  ~sshd_env() {
    echo.reset();
    if (pid > 0) {
      // Per-connection children first (they outlive the listener otherwise),
      // woken in case a test left them stopped.
      for (auto child : descendants(pid)) {
        ::kill(child, SIGCONT);
        ::kill(child, SIGKILL);
      }
      ::kill(pid, SIGTERM);
      int st = 0;
      for (int i = 0; i < 100 && ::waitpid(pid, &st, WNOHANG) == 0; ++i)
        std::this_thread::sleep_for(20ms);
      if (::waitpid(pid, &st, WNOHANG) == 0) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &st, 0);
      }
    }
    std::error_code ignored;
    if (!dir.empty() && dir.rfind("/tmp/egress-sshd-", 0) == 0)
      std::filesystem::remove_all(dir, ignored);
    setup_dir().clear();
  }

  static std::string& setup_dir() {
    static std::string path;
    return path;
  }

  static void remove_setup_dir() {
    std::error_code ignored;
    if (!setup_dir().empty())
      std::filesystem::remove_all(setup_dir(), ignored);
  }

  size_t log_size() const { return slurp(log).size(); }

  // The log written since `from`, once sshd logged the end of a connection
  // (or after `wait`).
  std::string log_since(size_t from, std::chrono::milliseconds wait = 3s) const {
    auto deadline = clock_type::now() + wait;
    std::string text;
    do {
      text = slurp(log).substr(std::min(from, slurp(log).size()));
      if (contains(text, "Connection closed") || contains(text, "Disconnected")
          || contains(text, "Connection reset"))
        break;
      std::this_thread::sleep_for(20ms);
    } while (clock_type::now() < deadline);
    return text;
  }

  // The engine's defaults for this host, as a config with these keys gives
  // them (the one place options are made: actors/parts/transport_choice.cpp).
  ssh_transport_options options() const {
    host_config h;
    h.name = "testhost";
    h.transport = "ssh";
    h.address = "127.0.0.1";
    h.port = port;
    h.key_file = client_key;
    h.known_hosts = known_hosts;
    h.uri = "qemu:///system";
    h.remote_socket = echo->path();
    h.bridge_dir = dir;
    h.connect_timeout = 5s;
    auto o = ssh_options_of(h);
    o.connections = 1;
    return o;
  }
};

sshd_env* env_ptr = nullptr;

struct global_env {
  global_env() { env_ptr = new sshd_env; }
  ~global_env() {
    delete env_ptr;
    env_ptr = nullptr;
  }
};

sshd_env& env() {
  return *env_ptr;
}

// Runs pump() in a thread and notes when it returned.
struct pump_thread {
  explicit pump_thread(std::shared_ptr<transport> t) : t_(std::move(t)) {
    thread_ = std::thread{[this] {
      result_ = t_->pump();
      ended_ = clock_type::now();
      done_ = true;
    }};
  }
  ~pump_thread() {
    if (thread_.joinable()) {
      t_->kill();
      // A kill that does not end the pump is the bug invariant 1 is about;
      // fail loudly instead of hanging the suite in join().
      if (!wait(5s)) {
        std::cerr << "FATAL: pump() still running 5 s after kill()\n";
        sshd_env::remove_setup_dir();
        std::_Exit(1);
      }
    }
  }
  bool wait(std::chrono::milliseconds d) {
    auto deadline = clock_type::now() + d;
    while (!done_ && clock_type::now() < deadline)
      std::this_thread::sleep_for(1ms);
    if (done_)
      thread_.join();
    return done_;
  }
  const caf::error& result() const { return result_; }
  clock_type::time_point ended() const { return ended_; }

  std::shared_ptr<transport> t_;
  std::thread thread_;
  caf::error result_;
  clock_type::time_point ended_;
  std::atomic<bool> done_{false};
};

// Sends `data` through the bridge and checks that the echo comes back.
void round_trip(const std::string& bridge, const std::string& data) {
  client_socket client{bridge};
  BOOST_REQUIRE_GE(client.fd, 0);
  std::thread writer{[&] { write_all(client.fd, data.data(), data.size()); }};
  auto echoed = read_n(client.fd, data.size());
  if (echoed.size() != data.size())
    ::shutdown(client.fd, SHUT_RDWR); // frees a writer stuck on a dead pump
  writer.join();
  BOOST_CHECK_EQUAL(echoed.size(), data.size());
  BOOST_CHECK(echoed == data);
}

std::shared_ptr<ssh_transport> connected(ssh_transport_options opts) {
  auto t = std::make_shared<ssh_transport>(std::move(opts));
  auto err = t->connect();
  BOOST_REQUIRE_MESSAGE(!err, "connect: " + render(err));
  return t;
}

} // namespace

BOOST_TEST_GLOBAL_FIXTURE(global_env);

// -- URIs and options ---------------------------------------------------------

BOOST_AUTO_TEST_CASE(bridged_uri_rewrites_driver_uris) {
  auto q = ssh::bridged_uri("qemu:///system", "/tmp/d/libvirt.sock");
  BOOST_REQUIRE(q);
  BOOST_CHECK_EQUAL(*q, "qemu+unix:///system?socket=/tmp/d/libvirt.sock");
  auto t = ssh::bridged_uri("test:///default", "/tmp/a b/s");
  BOOST_REQUIRE(t);
  BOOST_CHECK_EQUAL(*t, "test+unix:///default?socket=/tmp/a%20b/s");
  auto k = ssh::bridged_uri("qemu:///session?mode=legacy", "/s");
  BOOST_REQUIRE(k);
  BOOST_CHECK_EQUAL(*k, "qemu+unix:///session?mode=legacy&socket=/s");
  BOOST_CHECK(!ssh::bridged_uri("qemu+ssh://root@hv1/system", "/s"));
  BOOST_CHECK(!ssh::bridged_uri("qemu:///system?socket=/x", "/s"));
  BOOST_CHECK(!ssh::bridged_uri("nonsense", "/s"));
}

BOOST_AUTO_TEST_CASE(bad_options_are_invalid_argument_before_any_io) {
  auto o = env().options();
  o.session.address = "localhost"; // a DNS name could block in getaddrinfo()
  auto t = std::make_shared<ssh_transport>(o);
  auto err = t->connect();
  BOOST_CHECK_EQUAL(code_of(err), "invalid_argument");
  BOOST_CHECK(kind_of(err) == error_kind::permanent);
  o = env().options();
  o.ssh_keepalive_interval = 0s; // watchdog on, no keepalive: idle links would trip
  BOOST_CHECK_EQUAL(code_of(validate(o)), "invalid_argument");
  o = env().options();
  o.session.known_hosts = env().dir + "/no-such-file";
  BOOST_CHECK_EQUAL(code_of(validate(o)), "invalid_argument");
}

// -- data through the bridge --------------------------------------------------

BOOST_AUTO_TEST_CASE(streamlocal_round_trip_through_bridge) {
  auto t = connected(env().options());
  BOOST_CHECK(t->has_pump());
  BOOST_CHECK_EQUAL(t->uri(), "qemu+unix:///system?socket=" + t->bridge_path());
  // The bridge lives in a fresh 0700 directory; the socket itself is 0600.
  struct stat st{};
  auto dir = t->bridge_path().substr(0, t->bridge_path().rfind('/'));
  BOOST_REQUIRE_EQUAL(::stat(dir.c_str(), &st), 0);
  BOOST_CHECK_EQUAL(st.st_mode & 0777, 0700u);
  BOOST_REQUIRE_EQUAL(::stat(t->bridge_path().c_str(), &st), 0);
  BOOST_CHECK(S_ISSOCK(st.st_mode));
  BOOST_CHECK_EQUAL(st.st_mode & 0777, 0600u);
  pump_thread pump{t};
  // 8 MiB: several times the 1 MiB pump buffers and the 2 MiB SSH window.
  auto data = random_bytes(8 << 20);
  auto t0 = clock_type::now();
  round_trip(t->bridge_path(), data);
  report("streamlocal echo of 8 MiB: " + std::to_string(ms_between(t0, clock_type::now()))
         + " ms");
  BOOST_REQUIRE(pump.wait(5s));
  BOOST_CHECK_EQUAL(code_of(pump.result()), "ssh_failed");
  BOOST_CHECK_MESSAGE(contains(render(pump.result()), "local client EOF"),
                      render(pump.result()));
  pump.t_.reset();
  t.reset();
  BOOST_CHECK_NE(::access(dir.c_str(), F_OK), 0); // the bridge dir is gone
}

BOOST_AUTO_TEST_CASE(exec_fallback_round_trip_with_cat) {
  // `cat` is an echo by itself: this pins the exec path (session channel,
  // stderr draining, EOF) without needing nc on the server.
  auto o = env().options();
  o.remote_command = "cat";
  auto t = connected(o);
  pump_thread pump{t};
  round_trip(t->bridge_path(), random_bytes(1 << 20));
  BOOST_REQUIRE(pump.wait(5s));
  BOOST_CHECK_MESSAGE(contains(render(pump.result()), "local client EOF"),
                      render(pump.result()));
}

// Lanes (docs/spec.md 26): a bridge of three lanes takes three clients at
// once, each on a channel of its own over the one SSH session (each its own
// connection to the far socket: the echoes never mix), opened by the pump
// as the clients come; a fourth finds the socket gone. Any client's end
// ends the pump, and the others see EOF: a link's connections die together.
template <class Transport>
void three_lanes(std::shared_ptr<Transport> t) {
  pump_thread pump{t};
  std::vector<std::unique_ptr<client_socket>> clients;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(std::make_unique<client_socket>(t->bridge_path()));
    BOOST_REQUIRE_GE(clients.back()->fd, 0);
  }
  std::vector<std::string> data;
  for (int i = 0; i < 3; ++i) {
    data.push_back(random_bytes(size_t{300} << 10));
    for (auto& c : data.back()) // a different stream on each lane
      c = static_cast<char>(c ^ (i + 1));
  }
  std::vector<std::thread> writers;
  for (int i = 0; i < 3; ++i)
    writers.emplace_back([&, i] { write_all(clients[i]->fd, data[i].data(), data[i].size()); });
  for (int i = 0; i < 3; ++i)
    BOOST_CHECK_MESSAGE(read_n(clients[i]->fd, data[i].size()) == data[i],
                        "lane " << i << " echoed someone else's bytes, or too few");
  for (auto& w : writers)
    w.join();
  // All three accepted (they echoed): the socket is gone, no fourth gets in.
  BOOST_CHECK_NE(::access(t->bridge_path().c_str(), F_OK), 0);
  BOOST_CHECK_LT(connect_unix(t->bridge_path()), 0);
  clients[1].reset(); // one connection closed
  BOOST_REQUIRE(pump.wait(5s));
  BOOST_CHECK_MESSAGE(contains(render(pump.result()), "local client EOF"),
                      render(pump.result()));
  char byte;
  BOOST_CHECK_EQUAL(::recv(clients[0]->fd, &byte, 1, 0), 0);
  BOOST_CHECK_EQUAL(::recv(clients[2]->fd, &byte, 1, 0), 0);
}

BOOST_AUTO_TEST_CASE(spec_26_three_lanes_over_streamlocal_channels) {
  auto o = env().options();
  o.connections = 3;
  three_lanes(connected(o));
}

BOOST_AUTO_TEST_CASE(spec_26_three_lanes_over_exec_channels) {
  auto o = env().options();
  o.remote_command = "cat";
  o.connections = 3;
  three_lanes(connected(o));
}

BOOST_AUTO_TEST_CASE(spec_26_three_lanes_over_local_sockets) {
  local_socket_options o;
  o.socket_path = env().echo->path();
  o.bridge_dir = env().dir;
  o.connections = 3;
  o.libvirt_uri = "qemu:///system";
  auto t = std::make_shared<local_socket_transport>(o);
  auto err = t->connect();
  BOOST_REQUIRE_MESSAGE(!err, render(err));
  three_lanes(t);
}

BOOST_AUTO_TEST_CASE(connections_beyond_the_kill_switch_are_invalid_argument) {
  auto o = env().options();
  o.connections = 0;
  BOOST_CHECK_EQUAL(code_of(validate(o)), "invalid_argument");
  o.connections = 65;
  BOOST_CHECK_EQUAL(code_of(validate(o)), "invalid_argument");
}

// A kill releases a blocked reader on every lane at once.
BOOST_AUTO_TEST_CASE(spec_01_kill_releases_every_lane_at_once) {
  auto o = env().options();
  o.connections = 3;
  auto t = connected(o);
  pump_thread pump{t};
  std::vector<std::unique_ptr<client_socket>> clients;
  std::vector<std::unique_ptr<blocked_reader>> readers;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(std::make_unique<client_socket>(t->bridge_path()));
    BOOST_REQUIRE_GE(clients.back()->fd, 0);
    // The lane is open end to end before its reader blocks.
    BOOST_REQUIRE(write_all(clients.back()->fd, "ping", 4));
    BOOST_REQUIRE_EQUAL(read_n(clients.back()->fd, 4), "ping");
    readers.push_back(std::make_unique<blocked_reader>(clients.back()->fd));
  }
  std::this_thread::sleep_for(100ms);
  auto kill_at = clock_type::now();
  t->kill();
  for (auto& r : readers) {
    BOOST_REQUIRE(r->wait(5s));
    BOOST_CHECK_LT(ms_between(kill_at, r->returned), 100.0);
  }
  BOOST_REQUIRE(pump.wait(5s));
}

BOOST_AUTO_TEST_CASE(exec_fallback_round_trip_with_nc) {
  if (!have_program("nc")) {
    BOOST_TEST_MESSAGE("skipped: nc is not installed (the cat case covers the exec path)");
    std::cout << "SKIP exec_fallback_round_trip_with_nc: no nc on this machine\n";
    return;
  }
  auto o = env().options();
  o.remote_command = "nc -U " + env().echo->path();
  auto t = connected(o);
  pump_thread pump{t};
  round_trip(t->bridge_path(), random_bytes(1 << 20));
  BOOST_REQUIRE(pump.wait(5s));
}

BOOST_AUTO_TEST_CASE(exec_failure_reports_remote_stderr_and_status) {
  auto o = env().options();
  o.remote_command = "echo 'nc: unix connect failed: No such file' >&2; exit 3";
  auto t = connected(o);
  pump_thread pump{t};
  BOOST_REQUIRE(pump.wait(5s));
  auto text = render(pump.result());
  BOOST_TEST_MESSAGE(text);
  BOOST_CHECK_EQUAL(code_of(pump.result()), "ssh_failed");
  BOOST_CHECK_MESSAGE(contains(text, "remote channel EOF"), text);
  BOOST_CHECK_MESSAGE(contains(text, "unix connect failed"), text);
  BOOST_CHECK_MESSAGE(contains(text, "exit status 3"), text);
}

BOOST_AUTO_TEST_CASE(streamlocal_to_missing_socket_names_the_path) {
  auto o = env().options();
  o.remote_socket = env().dir + "/no-such.sock";
  auto t = std::make_shared<ssh_transport>(o);
  auto err = t->connect();
  BOOST_TEST_MESSAGE(render(err));
  BOOST_CHECK_EQUAL(code_of(err), "ssh_failed");
  BOOST_CHECK(kind_of(err) == error_kind::transient);
  BOOST_CHECK_MESSAGE(contains(render(err), o.remote_socket), render(err));
}

// -- invariant 13: host keys --------------------------------------------------

namespace {

void expect_no_auth_attempt(const std::string& log) {
  BOOST_TEST_MESSAGE("sshd log:\n" + log);
  BOOST_CHECK_MESSAGE(!contains(log, "Accepted"), log);
  BOOST_CHECK_MESSAGE(!contains(log, "Failed publickey"), log);
  BOOST_CHECK_MESSAGE(!contains(log, "Postponed"), log);
  BOOST_CHECK_MESSAGE(!contains(log, "userauth"), log);
  BOOST_CHECK_MESSAGE(!contains(log, "Invalid user"), log);
}

} // namespace

BOOST_AUTO_TEST_CASE(spec_13_unknown_host_is_rejected_and_nothing_is_sent) {
  auto o = env().options();
  o.session.known_hosts = env().known_hosts_empty;
  auto from = env().log_size();
  auto t = std::make_shared<ssh_transport>(o);
  auto err = t->connect();
  auto text = render(err);
  BOOST_TEST_MESSAGE(text);
  BOOST_CHECK_EQUAL(code_of(err), "host_key_rejected");
  BOOST_CHECK(kind_of(err) == error_kind::permanent);
  BOOST_CHECK_MESSAGE(contains(text, "127.0.0.1:" + std::to_string(env().port)), text);
  BOOST_CHECK_MESSAGE(contains(text, "ssh-ed25519"), text);
  t.reset(); // closes the connection, so sshd logs its end
  expect_no_auth_attempt(env().log_since(from));
}

BOOST_AUTO_TEST_CASE(spec_13_host_key_mismatch_is_rejected_and_nothing_is_sent) {
  auto o = env().options();
  o.session.known_hosts = env().known_hosts_wrong;
  auto from = env().log_size();
  auto t = std::make_shared<ssh_transport>(o);
  auto err = t->connect();
  auto text = render(err);
  BOOST_TEST_MESSAGE(text);
  BOOST_CHECK_EQUAL(code_of(err), "host_key_rejected");
  BOOST_CHECK(kind_of(err) == error_kind::permanent);
  BOOST_CHECK_MESSAGE(contains(text, "MISMATCH"), text);
  BOOST_CHECK_MESSAGE(contains(text, "ssh-ed25519"), text);
  t.reset();
  expect_no_auth_attempt(env().log_since(from));
}

BOOST_AUTO_TEST_CASE(spec_13_a_port_22_entry_does_not_vouch_for_another_port) {
  // OpenSSH files non-22 ports as "[addr]:port"; libssh2's own port lookup
  // would also accept the plain "addr" entry. We follow OpenSSH.
  auto o = env().options();
  o.session.known_hosts = env().known_hosts_port22;
  auto t = std::make_shared<ssh_transport>(o);
  auto err = t->connect();
  BOOST_TEST_MESSAGE(render(err));
  BOOST_CHECK_EQUAL(code_of(err), "host_key_rejected");
}

BOOST_AUTO_TEST_CASE(spec_13_hashed_known_hosts_entry_is_accepted) {
  auto o = env().options();
  o.session.known_hosts = env().known_hosts_hashed;
  BOOST_REQUIRE(contains(slurp(o.session.known_hosts), "|1|"));
  auto t = std::make_shared<ssh_transport>(o);
  auto err = t->connect();
  BOOST_CHECK_MESSAGE(!err, render(err));
}

// -- user keys ----------------------------------------------------------------

BOOST_AUTO_TEST_CASE(unauthorized_key_is_auth_failed_naming_user_and_key) {
  auto o = env().options();
  o.session.key_file = env().stranger_key;
  auto t = std::make_shared<ssh_transport>(o);
  auto err = t->connect();
  auto text = render(err);
  BOOST_TEST_MESSAGE(text);
  BOOST_CHECK_EQUAL(code_of(err), "auth_failed");
  BOOST_CHECK(kind_of(err) == error_kind::permanent);
  BOOST_CHECK_MESSAGE(contains(text, "'root'"), text);
  BOOST_CHECK_MESSAGE(contains(text, env().stranger_key), text);
}

BOOST_AUTO_TEST_CASE(rsa_key_is_auth_failed_with_the_sha1_reason) {
  auto o = env().options();
  o.session.key_file = env().rsa_key;
  auto from = env().log_size();
  auto t = std::make_shared<ssh_transport>(o);
  auto err = t->connect();
  auto text = render(err);
  BOOST_TEST_MESSAGE(text);
  BOOST_CHECK_EQUAL(code_of(err), "auth_failed");
  BOOST_CHECK(kind_of(err) == error_kind::permanent);
  BOOST_CHECK_MESSAGE(contains(text, "SHA-1"), text);
  BOOST_CHECK_MESSAGE(contains(text, "ed25519"), text);
  // Told from the file, not from a refused login: sshd saw nothing.
  std::this_thread::sleep_for(200ms);
  auto log = slurp(env().log).substr(from);
  BOOST_CHECK_MESSAGE(!contains(log, "Failed publickey"), log);
}

BOOST_AUTO_TEST_CASE(rsa_key_type_is_read_without_the_pub_file) {
  // The private key alone (OpenSSH format): the type is in its public part.
  auto copy = env().dir + "/rsa_copy";
  run_or_die("cp " + env().rsa_key + " " + copy);
  BOOST_CHECK_EQUAL(ssh::user_key_type(copy), "ssh-rsa");
  auto ed = env().dir + "/ed_copy";
  run_or_die("cp " + env().client_key + " " + ed);
  BOOST_CHECK_EQUAL(ssh::user_key_type(ed), "ssh-ed25519");
  auto pem = env().dir + "/rsa_pem";
  run_or_die("cp " + env().rsa_key + " " + pem + " && ssh-keygen -q -p -m PEM -N '' -f "
             + pem + " >/dev/null");
  ::unlink((pem + ".pub").c_str());
  BOOST_CHECK_EQUAL(ssh::user_key_type(pem), "ssh-rsa");
}

// -- invariant 1: kills -------------------------------------------------------

BOOST_AUTO_TEST_CASE(spec_01_kill_frees_connect_blocked_on_a_silent_peer) {
  // A TCP listener that never accepts or answers: the kernel completes the
  // TCP handshake, libssh2 then waits forever for the server's banner.
  int silent = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  BOOST_REQUIRE_EQUAL(::bind(silent, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  BOOST_REQUIRE_EQUAL(::listen(silent, 4), 0);
  socklen_t len = sizeof a;
  ::getsockname(silent, reinterpret_cast<sockaddr*>(&a), &len);
  auto o = env().options();
  o.session.port = ntohs(a.sin_port);
  o.session.connect_timeout = 30s;
  auto t = std::make_shared<ssh_transport>(o);
  caf::error err;
  clock_type::time_point returned;
  std::thread dial{[&] {
    err = t->connect();
    returned = clock_type::now();
  }};
  std::this_thread::sleep_for(300ms);
  auto killed = clock_type::now();
  t->kill();
  auto kill_took = ms_between(killed, clock_type::now());
  dial.join();
  auto latency = ms_between(killed, returned);
  report("kill -> connect() return (silent peer, banner wait): "
         + std::to_string(latency) + " ms; kill() itself: " + std::to_string(kill_took)
         + " ms");
  BOOST_TEST_MESSAGE(render(err));
  BOOST_CHECK_LT(latency, 50.0);
  BOOST_CHECK_EQUAL(code_of(err), "ssh_failed");
  BOOST_CHECK_MESSAGE(contains(render(err), "killed"), render(err));
  t->kill(); // idempotent
  ::close(silent);
}

BOOST_AUTO_TEST_CASE(spec_01_kill_frees_connect_blocked_in_tcp_syn_sent) {
  // A listener whose accept queue is full drops further SYNs: our connect
  // sits in SYN_SENT, as against a blackholed host, without touching the
  // machine's firewall.
  int full = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  BOOST_REQUIRE_EQUAL(::bind(full, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  BOOST_REQUIRE_EQUAL(::listen(full, 0), 0);
  socklen_t len = sizeof a;
  ::getsockname(full, reinterpret_cast<sockaddr*>(&a), &len);
  std::vector<int> fillers;
  for (int i = 0; i < 4; ++i) {
    int c = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    ::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a);
    fillers.push_back(c);
  }
  std::this_thread::sleep_for(100ms);
  auto o = env().options();
  o.session.port = ntohs(a.sin_port);
  o.session.connect_timeout = 30s;
  auto t = std::make_shared<ssh_transport>(o);
  caf::error err;
  clock_type::time_point returned;
  std::thread dial{[&] {
    err = t->connect();
    returned = clock_type::now();
  }};
  std::this_thread::sleep_for(300ms);
  auto killed = clock_type::now();
  t->kill();
  dial.join();
  auto latency = ms_between(killed, returned);
  report("kill -> connect() return (accept queue full, SYN dropped): "
         + std::to_string(latency) + " ms (" + render(err) + ")");
  BOOST_CHECK_LT(latency, 50.0);
  BOOST_CHECK_EQUAL(code_of(err), "ssh_failed");
  BOOST_CHECK_MESSAGE(contains(render(err), "killed"), render(err));
  for (auto c : fillers)
    ::close(c);
  ::close(full);
}

BOOST_AUTO_TEST_CASE(spec_01_kill_before_connect_makes_connect_fail_at_once) {
  auto t = std::make_shared<ssh_transport>(env().options());
  t->kill();
  t->kill();
  auto t0 = clock_type::now();
  auto err = t->connect();
  BOOST_CHECK_LT(ms_between(t0, clock_type::now()), 50.0);
  BOOST_CHECK_EQUAL(code_of(err), "ssh_failed");
  BOOST_CHECK(contains(render(err), "killed"));
}

BOOST_AUTO_TEST_CASE(spec_01_kill_during_pump_returns_pump_and_client_sees_eof) {
  auto t = connected(env().options());
  pump_thread pump{t};
  client_socket client{t->bridge_path()};
  BOOST_REQUIRE_GE(client.fd, 0);
  BOOST_REQUIRE(write_all(client.fd, "hello", 5));
  BOOST_REQUIRE_EQUAL(read_n(client.fd, 5), "hello");
  // The client now blocks reading, as libvirt does waiting for a reply.
  blocked_reader reader{client.fd};
  std::this_thread::sleep_for(200ms);
  auto killed = clock_type::now();
  t->kill();
  auto kill_took = ms_between(killed, clock_type::now());
  BOOST_REQUIRE(pump.wait(2s));
  BOOST_REQUIRE_MESSAGE(reader.wait(2s), "the client saw no EOF");
  auto client_got = reader.got;
  auto pump_latency = ms_between(killed, pump.ended());
  auto client_latency = ms_between(killed, reader.returned);
  report("kill -> pump() return (ssh, client blocked reading): "
         + std::to_string(pump_latency) + " ms; -> client EOF: "
         + std::to_string(client_latency) + " ms; kill() itself: "
         + std::to_string(kill_took) + " ms");
  BOOST_CHECK_LT(pump_latency, 50.0);
  BOOST_CHECK_LT(client_latency, 50.0);
  BOOST_CHECK_EQUAL(client_got, 0); // EOF, not an error
  BOOST_CHECK_EQUAL(code_of(pump.result()), "ssh_failed");
  BOOST_CHECK_MESSAGE(contains(render(pump.result()), "killed"), render(pump.result()));
}

BOOST_AUTO_TEST_CASE(spec_01_kill_before_a_client_connects_returns_pump) {
  auto t = connected(env().options());
  pump_thread pump{t};
  std::this_thread::sleep_for(100ms);
  auto killed = clock_type::now();
  t->kill();
  BOOST_REQUIRE(pump.wait(2s));
  auto latency = ms_between(killed, pump.ended());
  report("kill -> pump() return (no client yet): " + std::to_string(latency) + " ms");
  BOOST_CHECK_LT(latency, 50.0);
  BOOST_CHECK(contains(render(pump.result()), "killed"));
}

// -- the watchdog -------------------------------------------------------------

BOOST_AUTO_TEST_CASE(watchdog_ends_pump_when_sshd_goes_silent) {
  auto o = env().options();
  o.ssh_keepalive_interval = 1s;
  o.ssh_watchdog = 3s;
  auto t = connected(o);
  pump_thread pump{t};
  client_socket client{t->bridge_path()};
  BOOST_REQUIRE_GE(client.fd, 0);
  BOOST_REQUIRE(write_all(client.fd, "ping", 4));
  BOOST_REQUIRE_EQUAL(read_n(client.fd, 4), "ping");
  // An idle but healthy link survives: keepalive replies feed the watchdog.
  BOOST_CHECK(!pump.wait(4500ms));
  // Freeze every sshd process serving connections (not the listener): the
  // kernel still ACKs TCP, but no SSH byte comes back.
  auto stopped = descendants(env().pid);
  BOOST_REQUIRE(!stopped.empty());
  auto froze = clock_type::now();
  for (auto p : stopped)
    ::kill(p, SIGSTOP);
  auto ended = pump.wait(6s);
  for (auto p : stopped)
    ::kill(p, SIGCONT);
  BOOST_REQUIRE(ended);
  auto after = ms_between(froze, pump.ended());
  report("sshd SIGSTOP -> pump() return by watchdog (keepalive 1s, watchdog 3s): "
         + std::to_string(after) + " ms");
  auto text = render(pump.result());
  BOOST_TEST_MESSAGE(text);
  BOOST_CHECK_EQUAL(code_of(pump.result()), "ssh_failed");
  BOOST_CHECK_MESSAGE(contains(text, "ssh watchdog: no bytes from testhost for 3s"), text);
  BOOST_CHECK_LE(after, 4000.0);
  // The client sees EOF once the pump is over.
  char c;
  BOOST_CHECK_EQUAL(::recv(client.fd, &c, 1, 0), 0);
}

BOOST_AUTO_TEST_CASE(refused_port_is_transient_ssh_failed) {
  auto o = env().options();
  o.session.port = free_tcp_port(); // nobody listens there
  auto t = std::make_shared<ssh_transport>(o);
  auto err = t->connect();
  BOOST_TEST_MESSAGE(render(err));
  BOOST_CHECK_EQUAL(code_of(err), "ssh_failed");
  BOOST_CHECK(kind_of(err) == error_kind::transient);
  BOOST_CHECK_MESSAGE(contains(render(err), "refused"), render(err));
}

BOOST_AUTO_TEST_CASE(server_process_dying_ends_pump_with_ssh_failed) {
  auto t = connected(env().options());
  pump_thread pump{t};
  client_socket client{t->bridge_path()};
  BOOST_REQUIRE_GE(client.fd, 0);
  BOOST_REQUIRE(write_all(client.fd, "ping", 4));
  BOOST_REQUIRE_EQUAL(read_n(client.fd, 4), "ping");
  auto killed = clock_type::now();
  for (auto p : descendants(env().pid))
    ::kill(p, SIGKILL);
  BOOST_REQUIRE(pump.wait(2s));
  report("sshd session SIGKILL -> pump() return: "
         + std::to_string(ms_between(killed, pump.ended())) + " ms ("
         + render(pump.result()) + ")");
  BOOST_CHECK_EQUAL(code_of(pump.result()), "ssh_failed");
  BOOST_CHECK(!contains(render(pump.result()), "killed"));
  char c;
  BOOST_CHECK_EQUAL(::recv(client.fd, &c, 1, 0), 0);
}

// -- the local variant --------------------------------------------------------

BOOST_AUTO_TEST_CASE(local_socket_round_trip) {
  local_socket_options o;
  o.host = "local";
  o.socket_path = env().echo->path();
  o.libvirt_uri = "test:///default";
  o.bridge_dir = env().dir;
  o.connections = 1;
  auto t = std::make_shared<local_socket_transport>(o);
  auto err = t->connect();
  BOOST_REQUIRE_MESSAGE(!err, render(err));
  BOOST_CHECK(t->has_pump());
  BOOST_CHECK_EQUAL(t->uri(), "test+unix:///default?socket=" + t->bridge_path());
  pump_thread pump{t};
  round_trip(t->bridge_path(), random_bytes(8 << 20));
  BOOST_REQUIRE(pump.wait(5s));
  BOOST_CHECK_EQUAL(code_of(pump.result()), "connection_broken");
  BOOST_CHECK(contains(render(pump.result()), "local client EOF"));
}

BOOST_AUTO_TEST_CASE(local_socket_missing_daemon_is_transient) {
  local_socket_options o;
  o.socket_path = env().dir + "/absent.sock";
  o.bridge_dir = env().dir;
  o.libvirt_uri = "qemu:///system";
  o.connections = 1;
  auto t = std::make_shared<local_socket_transport>(o);
  auto err = t->connect();
  BOOST_TEST_MESSAGE(render(err));
  BOOST_CHECK_EQUAL(code_of(err), "connection_broken");
  BOOST_CHECK(kind_of(err) == error_kind::transient);
}

BOOST_AUTO_TEST_CASE(spec_01_kill_local_pump_returns_and_client_sees_eof) {
  local_socket_options o;
  o.socket_path = env().echo->path();
  o.bridge_dir = env().dir;
  o.libvirt_uri = "qemu:///system";
  o.connections = 1;
  auto t = std::make_shared<local_socket_transport>(o);
  BOOST_REQUIRE(!t->connect());
  pump_thread pump{t};
  client_socket client{t->bridge_path()};
  BOOST_REQUIRE_GE(client.fd, 0);
  BOOST_REQUIRE(write_all(client.fd, "hi", 2));
  BOOST_REQUIRE_EQUAL(read_n(client.fd, 2), "hi");
  blocked_reader reader{client.fd};
  std::this_thread::sleep_for(200ms);
  auto killed = clock_type::now();
  t->kill();
  BOOST_REQUIRE(pump.wait(2s));
  BOOST_REQUIRE_MESSAGE(reader.wait(2s), "the client saw no EOF");
  auto got = reader.got;
  auto pump_latency = ms_between(killed, pump.ended());
  auto client_latency = ms_between(killed, reader.returned);
  report("kill -> pump() return (local socket): " + std::to_string(pump_latency)
         + " ms; -> client EOF: " + std::to_string(client_latency) + " ms");
  BOOST_CHECK_LT(pump_latency, 50.0);
  BOOST_CHECK_LT(client_latency, 50.0);
  BOOST_CHECK_EQUAL(got, 0);
  BOOST_CHECK(contains(render(pump.result()), "killed"));
}
