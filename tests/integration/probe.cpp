// Proxy probes against real parts: an OpenSSH sshd in a network namespace
// whose direct-tcpip connects land on a REAL tinyproxy, a python http.server
// as the proxy's target and a listener that never answers, all inside the
// namespace on an address only it has (as a VM network behind a host). The
// direct TCP prober runs against listeners in this process. Everything a
// case starts is stopped by PID when the case ends.
#define BOOST_TEST_MODULE probe
#include <boost/test/unit_test.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "messages/error.hpp"
#include "providers/probe/probe.hpp"
#include "testbed/testbed.hpp"

using namespace egress;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

// The "VM network": an address only the namespace has. sshd (in the
// namespace) reaches it; this process cannot, so every probe of it really
// goes through the host's sshd.
const std::string vm_addr = "192.168.122.23";
constexpr uint16_t proxy_port = 8888;  // tinyproxy
constexpr uint16_t web_port = 8080;    // the proxy's target
constexpr uint16_t silent_port = 9999; // accepts, never answers
constexpr uint16_t closed_port = 9;    // nobody listens

std::string web_url() {
  return "http://" + vm_addr + ":" + std::to_string(web_port) + "/";
}

double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

double ms_of(std::chrono::microseconds d) {
  return static_cast<double>(d.count()) / 1000.0;
}

// Figures for the report, on stdout regardless of the log level.
void report(const std::string& line) {
  std::cout << "[measure] " << line << std::endl;
}

std::string describe(const caf::expected<probe::outcome>& r) {
  if (!r)
    return "error " + render(r.error());
  return std::string(r->ok ? "ok" : "failed") + " stage=" + r->stage + " detail='"
         + r->detail + "' status=" + std::to_string(r->http_status)
         + " latency=" + std::to_string(ms_of(r->latency)) + "ms";
}

probe::settings with(std::string target, std::chrono::milliseconds timeout = 3s) {
  probe::settings s;
  s.target = std::move(target);
  s.timeout = timeout;
  return s;
}

size_t count_of(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1))
    ++n;
  return n;
}

struct root_checked {
  root_checked() {
    testbed::require_root_or_skip();
    for (auto tool : {"/usr/bin/tinyproxy", "/usr/bin/python3"})
      if (::access(tool, X_OK) != 0)
        testbed::skip(std::string(tool) + " is not installed (scripts/install-deps)");
  }
};

// A namespace with sshd, tinyproxy, a web server and a silent listener.
struct bed {
  root_checked check;
  testbed::netns net;
  testbed::sshd ssh{testbed::sshd_options::in(net)};
  testbed::temp_dir dir{"probe"};
  testbed::process web, proxy, silent;

  bed() {
    net.exec({"ip", "addr", "add", vm_addr + "/32", "dev", "lo"});
    ssh.start();
    testbed::write_file(dir / "index.html", "<html>probe target</html>\n");
    testbed::write_file(dir / "tinyproxy.conf",
                        "Port " + std::to_string(proxy_port) + "\n"
                        "Listen " + vm_addr + "\n"
                        "Timeout 10\n"
                        "MaxClients 8\n"
                        "Allow " + vm_addr + "\n"
                        "LogLevel Info\n"
                        "LogFile \"" + (dir / "tinyproxy.log") + "\"\n"
                        "PidFile \"" + (dir / "tinyproxy.pid") + "\"\n");
    // Listens (so connects succeed and the kernel acknowledges data) but
    // never accepts or answers: a hung proxy.
    testbed::write_file(dir / "silent.py",
                        "import socket, sys, time\n"
                        "s = socket.socket()\n"
                        "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                        "s.bind((sys.argv[1], int(sys.argv[2])))\n"
                        "s.listen(64)\n"
                        "time.sleep(3600)\n");
    web = in_ns({"/usr/bin/python3", "-m", "http.server", "--bind", vm_addr, "--directory",
                 dir.path(), std::to_string(web_port)},
                "web.log");
    proxy = in_ns({"/usr/bin/tinyproxy", "-d", "-c", dir / "tinyproxy.conf"}, "tinyproxy.out");
    silent = in_ns({"/usr/bin/python3", dir / "silent.py", vm_addr, std::to_string(silent_port)},
                   "silent.log");
    wait_ready();
  }

  ~bed() {
    silent.stop();
    proxy.stop();
    web.stop();
    net.exec({"ip", "addr", "del", vm_addr + "/32", "dev", "lo"});
  }

  testbed::process in_ns(std::vector<std::string> argv, const std::string& log) {
    auto full = net.exec_prefix();
    full.insert(full.end(), argv.begin(), argv.end());
    return testbed::process({full, {}, dir / log});
  }

  ssh::session_options options() const {
    ssh::session_options o;
    o.host = "hv1";
    o.address = ssh.address();
    o.port = static_cast<uint16_t>(ssh.port());
    o.user = ssh.user();
    o.key_file = ssh.client_key();
    o.known_hosts = ssh.known_hosts();
    o.connect_timeout = 5s;
    o.tcp_user_timeout = 10s;
    return o;
  }

  size_t logins() const { return count_of(ssh.log_text(), "Accepted publickey for root"); }

  // The daemons start listening some time after their PIDs exist; probe
  // until they answer (this also checks the probe path end to end).
  void wait_ready() {
    auto p = probe::through_ssh(options());
    auto ready = [&](uint16_t port, const std::string& target) {
      auto deadline = clock_type::now() + 15s;
      caf::expected<probe::outcome> r = probe::outcome{};
      while (clock_type::now() < deadline) {
        r = p->probe(vm_addr, port, with(target, 1s));
        if (r && r->ok)
          return;
        std::this_thread::sleep_for(50ms);
      }
      throw std::runtime_error("probe test bed: port " + std::to_string(port)
                               + " not ready: " + describe(r) + "\ntinyproxy:\n"
                               + testbed::read_file(dir / "tinyproxy.log") + "\nweb:\n"
                               + testbed::read_file(dir / "web.log"));
    };
    ready(silent_port, "");
    ready(proxy_port, web_url());
  }
};

// -- direct TCP listeners in this process --------------------------------------

int listen_on(int family, int backlog) {
  int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_storage ss{};
  socklen_t len;
  if (family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    len = sizeof *a;
  } else {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_addr = in6addr_loopback;
    len = sizeof *a;
  }
  if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 || ::listen(fd, backlog) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

uint16_t port_of(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  return ntohs(ss.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&ss)->sin_port
                                       : reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
}

// A minimal HTTP server: answers every request with `status_line`.
struct answering_listener {
  int fd;
  std::thread thread;
  std::atomic<bool> stop{false};
  std::string last_request;
  std::mutex mutex;

  answering_listener(int family, std::string status_line) : fd(listen_on(family, 16)) {
    if (fd < 0)
      return;
    thread = std::thread{[this, status_line] {
      while (!stop.load()) {
        int c = ::accept(fd, nullptr, nullptr);
        if (c < 0)
          return; // shutdown() by the destructor
        std::string req;
        char buf[1024];
        while (req.find("\r\n\r\n") == std::string::npos) {
          auto n = ::recv(c, buf, sizeof buf, 0);
          if (n <= 0)
            break;
          req.append(buf, static_cast<size_t>(n));
        }
        {
          std::lock_guard<std::mutex> g{mutex};
          last_request = req;
        }
        auto reply = status_line + "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        ::send(c, reply.data(), reply.size(), MSG_NOSIGNAL);
        ::close(c);
      }
    }};
  }
  ~answering_listener() {
    stop = true;
    if (fd >= 0) {
      ::shutdown(fd, SHUT_RDWR);
      if (thread.joinable())
        thread.join();
      ::close(fd);
    }
  }
  uint16_t port() const { return port_of(fd); }
  std::string request() {
    std::lock_guard<std::mutex> g{mutex};
    return last_request;
  }
};

// Kills `p` from another thread after `after`.
class killer {
public:
  killer(probe::prober_ptr p, std::chrono::milliseconds after)
    : thread_{[this, p, after] {
        std::this_thread::sleep_for(after);
        fired_at_ = clock_type::now();
        p->kill();
      }} {}
  ~killer() {
    if (thread_.joinable())
      thread_.join();
  }
  /// How long after the kill `returned` was (negative: before it).
  double ms_until(clock_type::time_point returned) {
    thread_.join();
    return std::chrono::duration<double, std::milli>(returned - fired_at_).count();
  }

private:
  clock_type::time_point fired_at_;
  std::thread thread_;
};

} // namespace

// -- direct TCP (no root needed: first, before any case can skip) --------------

BOOST_AUTO_TEST_CASE(direct_tcp_against_loopback_listeners) {
  answering_listener web{AF_INET, "HTTP/1.1 204 No Content"};
  BOOST_REQUIRE(web.fd >= 0);
  auto p = probe::direct_tcp();

  auto r = p->probe("127.0.0.1", web.port(), with(""));
  BOOST_TEST_INFO(describe(r));
  BOOST_REQUIRE(r);
  BOOST_CHECK(r->ok);
  BOOST_CHECK_EQUAL(r->stage, "ok");
  BOOST_CHECK_EQUAL(r->http_status, 0);

  r = p->probe("127.0.0.1", web.port(), with("http://target.example:8080/health?x=1"));
  BOOST_TEST_INFO(describe(r));
  BOOST_REQUIRE(r);
  BOOST_CHECK(r->ok);
  BOOST_CHECK_EQUAL(r->stage, "ok");
  BOOST_CHECK_EQUAL(r->http_status, 204);
  BOOST_CHECK_EQUAL(web.request(), "GET http://target.example:8080/health?x=1 HTTP/1.1\r\n"
                                   "Host: target.example:8080\r\n"
                                   "Connection: close\r\n"
                                   "User-Agent: egress-probe\r\n\r\n");
  report("direct tcp, HTTP 204 from a loopback listener: " + std::to_string(ms_of(r->latency))
         + " ms");

  answering_listener web6{AF_INET6, "HTTP/1.0 302 Found"};
  if (web6.fd >= 0) {
    r = p->probe("::1", web6.port(), with("http://[fd00::1]/"));
    BOOST_TEST_INFO(describe(r));
    BOOST_REQUIRE(r);
    BOOST_CHECK(r->ok);
    BOOST_CHECK_EQUAL(r->http_status, 302);
  }

  answering_listener refusing{AF_INET, "HTTP/1.1 503 Service Unavailable"};
  r = p->probe("127.0.0.1", refusing.port(), with("http://t/"));
  BOOST_TEST_INFO(describe(r));
  BOOST_REQUIRE(r);
  BOOST_CHECK(!r->ok);
  BOOST_CHECK_EQUAL(r->stage, "status");
  BOOST_CHECK_EQUAL(r->http_status, 503);

  // A port nobody listens on: bound, closed, refused.
  int gone = listen_on(AF_INET, 1);
  auto gone_port = port_of(gone);
  ::close(gone);
  r = p->probe("127.0.0.1", gone_port, with(""));
  BOOST_TEST_INFO(describe(r));
  BOOST_REQUIRE(r);
  BOOST_CHECK(!r->ok);
  BOOST_CHECK_EQUAL(r->stage, "connect");
  BOOST_CHECK_EQUAL(r->detail, "connection refused");

  // The kernel completes the handshake and takes the request into the
  // backlog; nobody ever accepts: a hung proxy.
  int silent = listen_on(AF_INET, 16);
  BOOST_REQUIRE(silent >= 0);
  auto t0 = clock_type::now();
  r = p->probe("127.0.0.1", port_of(silent), with("http://t/", 500ms));
  auto took = ms_since(t0);
  BOOST_TEST_INFO(describe(r));
  BOOST_REQUIRE(r);
  BOOST_CHECK(!r->ok);
  BOOST_CHECK_EQUAL(r->stage, "reply");
  BOOST_CHECK_EQUAL(r->detail, "no reply within 500 ms");
  BOOST_CHECK_GE(took, 490.0);
  BOOST_CHECK_LE(took, 1500.0);

  {
    killer k{p, 200ms};
    r = p->probe("127.0.0.1", port_of(silent), with("http://t/", 10s));
    auto released = k.ms_until(clock_type::now());
    BOOST_TEST_INFO(describe(r));
    BOOST_REQUIRE(!r);
    BOOST_CHECK(kind_of(r.error()) == error_kind::transient);
    BOOST_CHECK_GE(released, 0.0);
    BOOST_CHECK_LE(released, 200.0);
    report("direct tcp kill released a probe blocked on a silent peer in "
           + std::to_string(released) + " ms");
  }
  ::close(silent);

  // Killed, the prober still probes.
  r = p->probe("127.0.0.1", web.port(), with(""));
  BOOST_TEST_INFO(describe(r));
  BOOST_REQUIRE(r);
  BOOST_CHECK(r->ok);

  // Names are refused before anything happens: a DNS lookup cannot be killed.
  r = p->probe("localhost", web.port(), with(""));
  BOOST_REQUIRE(!r);
  BOOST_CHECK(is(r.error(), ec::invalid_argument));
  r = p->probe("127.0.0.1", web.port(), with("https://t/"));
  BOOST_REQUIRE(!r);
  BOOST_CHECK(is(r.error(), ec::invalid_argument));
}

// -- through SSH ----------------------------------------------------------------

BOOST_FIXTURE_TEST_CASE(probe_through_ssh_and_tinyproxy_fetches_the_target, bed) {
  auto p = probe::through_ssh(options());
  auto r = p->probe(vm_addr, proxy_port, with(web_url()));
  BOOST_TEST_INFO(describe(r));
  BOOST_REQUIRE(r);
  BOOST_CHECK(r->ok);
  BOOST_CHECK_EQUAL(r->stage, "ok");
  BOOST_CHECK_EQUAL(r->http_status, 200);
  BOOST_CHECK_GT(r->latency.count(), 0);
  report("first probe through ssh + tinyproxy (session opened before): "
         + std::to_string(ms_of(r->latency)) + " ms");
  std::vector<double> latencies;
  for (int i = 0; i < 10; ++i) {
    r = p->probe(vm_addr, proxy_port, with(web_url()));
    BOOST_TEST_INFO(describe(r));
    BOOST_REQUIRE(r);
    BOOST_CHECK(r->ok);
    latencies.push_back(ms_of(r->latency));
  }
  std::sort(latencies.begin(), latencies.end());
  report("probe through ssh + tinyproxy, kept session, 10 runs: min "
         + std::to_string(latencies.front()) + " ms, median "
         + std::to_string(latencies[5]) + " ms, max " + std::to_string(latencies.back())
         + " ms");
  // The target really was fetched by tinyproxy, with our request.
  BOOST_CHECK(testbed::read_file(dir / "web.log").find("\"GET / HTTP/1.1\" 200")
              != std::string::npos);
}

BOOST_FIXTURE_TEST_CASE(tcp_only_probe_through_ssh_is_ok_when_the_port_listens, bed) {
  auto p = probe::through_ssh(options());
  auto r = p->probe(vm_addr, proxy_port, with(""));
  BOOST_TEST_INFO(describe(r));
  BOOST_REQUIRE(r);
  BOOST_CHECK(r->ok);
  BOOST_CHECK_EQUAL(r->stage, "ok");
  BOOST_CHECK_EQUAL(r->http_status, 0);
  report("tcp-only probe through ssh: " + std::to_string(ms_of(r->latency)) + " ms");
}

BOOST_FIXTURE_TEST_CASE(closed_port_is_a_connect_outcome_and_the_session_is_kept, bed) {
  auto before = logins();
  auto p = probe::through_ssh(options());
  auto r = p->probe(vm_addr, closed_port, with(""));
  BOOST_TEST_INFO(describe(r));
  BOOST_REQUIRE(r);
  BOOST_CHECK(!r->ok);
  BOOST_CHECK_EQUAL(r->stage, "connect");
  BOOST_CHECK_EQUAL(r->http_status, 0);
  BOOST_TEST_MESSAGE("closed port: " << r->detail);
  r = p->probe(vm_addr, closed_port, with(web_url()));
  BOOST_REQUIRE(r);
  BOOST_CHECK_EQUAL(r->stage, "connect");
  r = p->probe(vm_addr, proxy_port, with(web_url()));
  BOOST_TEST_INFO(describe(r));
  BOOST_REQUIRE(r);
  BOOST_CHECK(r->ok);
  BOOST_CHECK_EQUAL(logins() - before, 1u); // one session for all three probes
}

BOOST_FIXTURE_TEST_CASE(unreachable_target_gives_the_proxys_5xx_status, bed) {
  auto p = probe::through_ssh(options());
  auto target = "http://" + vm_addr + ":" + std::to_string(closed_port) + "/";
  auto r = p->probe(vm_addr, proxy_port, with(target));
  BOOST_TEST_INFO(describe(r));
  BOOST_REQUIRE(r);
  BOOST_CHECK(!r->ok);
  BOOST_CHECK_EQUAL(r->stage, "status");
  BOOST_CHECK_GE(r->http_status, 500);
  BOOST_CHECK_LT(r->http_status, 600);
  BOOST_TEST_MESSAGE("tinyproxy on a refused target: " << r->detail);
}

BOOST_FIXTURE_TEST_CASE(silent_listener_is_a_reply_timeout_not_an_error, bed) {
  auto p = probe::through_ssh(options());
  BOOST_REQUIRE(p->probe(vm_addr, proxy_port, with(""))); // session open, out of the clock
  auto t0 = clock_type::now();
  auto r = p->probe(vm_addr, silent_port, with(web_url(), 1000ms));
  auto took = ms_since(t0);
  BOOST_TEST_INFO(describe(r));
  BOOST_REQUIRE(r);
  BOOST_CHECK(!r->ok);
  BOOST_CHECK_EQUAL(r->stage, "reply");
  BOOST_CHECK_EQUAL(r->detail, "no reply within 1000 ms");
  BOOST_CHECK_GE(took, 990.0);
  BOOST_CHECK_LE(took, 2500.0);
  report("silent listener through ssh, timeout 1000 ms: returned after " + std::to_string(took)
         + " ms");

  // A stopped tinyproxy: the same, seen through the real proxy.
  proxy.signal(SIGSTOP);
  r = p->probe(vm_addr, proxy_port, with(web_url(), 500ms));
  proxy.signal(SIGCONT);
  BOOST_TEST_INFO(describe(r));
  BOOST_REQUIRE(r);
  BOOST_CHECK(!r->ok);
  BOOST_CHECK_EQUAL(r->stage, "reply");

  // The timed-out session was dropped; the next probe has a fresh one.
  r = p->probe(vm_addr, proxy_port, with(web_url()));
  BOOST_TEST_INFO(describe(r));
  BOOST_REQUIRE(r);
  BOOST_CHECK(r->ok);
}

BOOST_FIXTURE_TEST_CASE(route_failure_is_an_error_and_the_next_probe_reconnects, bed) {
  // sshd not running: the session cannot be opened.
  ssh.stop();
  auto p = probe::through_ssh(options());
  auto r = p->probe(vm_addr, proxy_port, with(web_url()));
  BOOST_TEST_INFO(describe(r));
  BOOST_REQUIRE(!r);
  BOOST_CHECK(is(r.error(), ec::ssh_failed));
  BOOST_CHECK(kind_of(r.error()) == error_kind::transient);
  ssh.start();
  r = p->probe(vm_addr, proxy_port, with(web_url()));
  BOOST_TEST_INFO(describe(r));
  BOOST_REQUIRE(r);
  BOOST_CHECK(r->ok);

  // The host vanishes under a kept session: nothing is acknowledged, which
  // is the route's failure, not the proxy's.
  auto before = logins();
  net.partition();
  auto t0 = clock_type::now();
  r = p->probe(vm_addr, proxy_port, with(web_url(), 1000ms));
  auto took = ms_since(t0);
  net.heal();
  BOOST_TEST_INFO(describe(r));
  BOOST_REQUIRE(!r);
  BOOST_CHECK(is(r.error(), ec::ssh_failed));
  BOOST_CHECK_LE(took, 2500.0);
  BOOST_TEST_MESSAGE("partitioned: " << render(r.error()) << " after " << took << " ms");
  r = p->probe(vm_addr, proxy_port, with(web_url()));
  BOOST_TEST_INFO(describe(r));
  BOOST_REQUIRE(r);
  BOOST_CHECK(r->ok);
  BOOST_CHECK_EQUAL(logins() - before, 1u);
}

BOOST_FIXTURE_TEST_CASE(stale_kept_session_is_replaced_without_an_error, bed) {
  auto before = logins();
  auto p = probe::through_ssh(options());
  BOOST_REQUIRE(p->probe(vm_addr, proxy_port, with("")));
  // The test sshd's ClientAliveInterval 2 / CountMax 2 ends a session whose
  // client does not answer for ~6 s; between probes nobody reads the socket.
  auto deadline = clock_type::now() + 20s;
  while (ssh.log_text().find("Timeout, client not responding") == std::string::npos
         && clock_type::now() < deadline)
    std::this_thread::sleep_for(100ms);
  BOOST_REQUIRE(clock_type::now() < deadline);
  auto r = p->probe(vm_addr, proxy_port, with(web_url()));
  BOOST_TEST_INFO(describe(r));
  BOOST_REQUIRE(r);
  BOOST_CHECK(r->ok);
  BOOST_CHECK_EQUAL(logins() - before, 2u); // the dead session was replaced
}

BOOST_FIXTURE_TEST_CASE(kill_from_another_thread_frees_a_probe_blocked_on_a_silent_peer,
                        bed) {
  auto p = probe::through_ssh(options());
  BOOST_REQUIRE(p->probe(vm_addr, proxy_port, with("")));
  caf::expected<probe::outcome> r = probe::outcome{};
  double released = 0;
  {
    killer k{p, 300ms};
    r = p->probe(vm_addr, silent_port, with(web_url(), 10s));
    released = k.ms_until(clock_type::now());
  }
  BOOST_TEST_INFO(describe(r));
  BOOST_REQUIRE(!r);
  BOOST_CHECK(is(r.error(), ec::ssh_failed));
  BOOST_CHECK_GE(released, 0.0);
  BOOST_CHECK_LE(released, 250.0);
  report("kill released a probe through ssh blocked on a silent peer in "
         + std::to_string(released) + " ms");

  // A kill while nothing runs leaves nothing behind either.
  p->kill();
  p->kill();
  r = p->probe(vm_addr, proxy_port, with(web_url()));
  BOOST_TEST_INFO(describe(r));
  BOOST_REQUIRE(r);
  BOOST_CHECK(r->ok);
}
