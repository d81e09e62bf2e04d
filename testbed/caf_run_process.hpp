#pragma once
// caf-run as a child process, for the suites that test the launchers and
// what they serve (tests/process; header-only, since it checks with
// Boost.Test and needs the paths CMake gives each suite): a config made from config/default.ini,
// the log read back for the ports it listens on, caf-shell run against it,
// plain HTTP to its metrics endpoint, and a strict reader of the Prometheus
// text it serves.

#include <chrono>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>

#include "testbed/engine_fixture.hpp"
#include "testbed/http_get.hpp"
#include "testbed/testbed.hpp"

namespace egress::test {

/// config/default.ini with extra [engine] lines, written into `dir` (its
/// test-node path made absolute; polls only on request: poll-interval 1h).
std::string config_with(testbed::temp_dir& dir, const std::string& extra);

/// caf-run as a child; its log shows the inspector's port.
struct daemon_run {
  testbed::temp_dir dir{"shell"};
  testbed::process proc;
  std::string address;

  explicit daemon_run(const std::string& extra = "inspect = { port = 0 }");
  /// The same, run through `prefix` (prlimit --nofile=..., ip netns exec).
  daemon_run(const std::string& extra, std::vector<std::string> prefix);
  /// caf-run on a whole configuration text (its paths absolute).
  struct text {
    std::string ini;
  };
  /// `prefix` runs it elsewhere (ip netns exec NAME).
  explicit daemon_run(const text& t, std::vector<std::string> prefix = {});
  void start(const std::string& ini, std::vector<std::string> argv = {});
  ~daemon_run() { proc.stop(); }

  std::string log() const;
  /// The metrics endpoint's port, from the log (0 until it listens).
  int metrics_port() const;
  /// Waits (20 s at most) for "inspector listening" and keeps the address.
  bool wait_listening();
  /// caf-shell against the address, with `args`.
  testbed::run_result shell(std::vector<std::string> args);
};

/// A process's resident set (VmRSS), in KiB; 0 when it is gone.
uint64_t rss_kib(pid_t pid);

/// A plain TCP connection to 127.0.0.1:port (-1 when refused).
int tcp_connect(int port);

/// Raises this process's open-file limit to `n` (root may raise the hard
/// limit too): a test that holds thousands of connections needs it.
void raise_fd_limit(rlim_t n);

/// Two distinct loopback ports that were free a moment ago.
std::pair<int, int> free_ports();

/// One node of several: its own host (on the test driver) and two proxies,
/// its inspector on `port`, the other node's at `peer`.
daemon_run::text node_ini(const std::string& node, int port, int peer, const std::string& host);

/// Prometheus text format 0.0.4, parsed strictly enough to catch a broken
/// exposition (Boost.Test checks: HELP and TYPE before samples, names and
/// labels well formed, values numbers): "name{labels}" -> value.
std::map<std::string, double> parse_exposition(const std::string& text);

// -- definitions ------------------------------------------------------------


namespace detail {

inline const std::string default_ini = std::string{EGRESS_SOURCE_DIR} + "/config/default.ini";

} // namespace detail


inline std::string config_with(testbed::temp_dir& dir, const std::string& extra) {
  auto text = testbed::read_file(detail::default_ini);
  text = std::regex_replace(text, std::regex("test-node = \"testnode.xml\""),
                            "test-node = \"" + std::string{EGRESS_SOURCE_DIR}
                              + "/config/testnode.xml\"");
  // A key the extra lines set replaces default.ini's own (a key given twice
  // is refused: runtime/config_text.hpp).
  std::istringstream lines{extra};
  for (std::string line; std::getline(lines, line);) {
    auto eq = line.find(" = ");
    if (eq == std::string::npos)
      continue;
    // Built by appending: GCC 12 at -O3 warns falsely (-Wrestrict) on
    // "\n" + line.substr(...).
    std::string key_line = "\n";
    key_line.append(line, 0, eq).append(" = [^\n]*");
    text = std::regex_replace(text, std::regex(key_line), "");
  }
  text = std::regex_replace(text, std::regex("\\[engine\\]\n"), "[engine]\n" + extra + "\n");
  // Polls only on request: a test can tell a reconcile from the schedule.
  text = std::regex_replace(text, std::regex("poll-interval = 1s"), "poll-interval = 1h");
  auto path = dir / "engine.ini";
  testbed::write_file(path, text);
  return path;
}

inline daemon_run::daemon_run(const std::string& extra) {
  start(config_with(dir, extra));
}

inline daemon_run::daemon_run(const std::string& extra, std::vector<std::string> prefix) {
  start(config_with(dir, extra), std::move(prefix));
}

inline uint64_t rss_kib(pid_t pid) {
  auto text = testbed::read_file("/proc/" + std::to_string(pid) + "/status");
  auto at = text.find("VmRSS:");
  return at == std::string::npos ? 0 : std::stoull(text.substr(at + 6));
}

inline int tcp_connect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0)
    return fd;
  if (fd >= 0)
    ::close(fd);
  return -1;
}

inline void raise_fd_limit(rlim_t n) {
  rlimit r{n, n};
  BOOST_REQUIRE_MESSAGE(::setrlimit(RLIMIT_NOFILE, &r) == 0, "setrlimit: needs root for more");
}

inline daemon_run::daemon_run(const text& t, std::vector<std::string> prefix) {
  auto ini = dir / "engine.ini";
  testbed::write_file(ini, t.ini);
  start(ini, std::move(prefix));
}

inline void daemon_run::start(const std::string& ini, std::vector<std::string> argv) {
  argv.insert(argv.end(), {EGRESS_CAF_RUN, "--config-file=" + ini});
  proc = testbed::process({argv, {}, dir / "caf-run.log"});
}

inline std::string daemon_run::log() const {
  return testbed::read_file(dir / "caf-run.log");
}

inline int daemon_run::metrics_port() const {
  static const std::regex re("metrics listening: http://127.0.0.1:([0-9]+)/metrics");
  std::smatch m;
  auto text = log();
  return std::regex_search(text, m, re) ? std::stoi(m[1]) : 0;
}

inline bool daemon_run::wait_listening() {
  static const std::regex re("inspector listening: caf-shell ([0-9.]+:[0-9]+)");
  return test::eventually([&] {
    std::smatch m;
    auto text = log();
    if (!std::regex_search(text, m, re))
      return false;
    address = m[1];
    return true;
  }, std::chrono::seconds(20));
}

inline testbed::run_result daemon_run::shell(std::vector<std::string> args) {
  std::vector<std::string> argv{EGRESS_CAF_SHELL, address};
  argv.insert(argv.end(), args.begin(), args.end());
  return testbed::run(argv, std::chrono::seconds(20));
}
inline std::pair<int, int> free_ports() {
  int fds[2];
  int ports[2];
  for (int i = 0; i < 2; ++i) {
    fds[i] = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    BOOST_REQUIRE(::bind(fds[i], reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
    BOOST_REQUIRE(::getsockname(fds[i], reinterpret_cast<sockaddr*>(&sa), &len) == 0);
    ports[i] = ntohs(sa.sin_port);
  }
  for (int fd : fds)
    ::close(fd);
  return {ports[0], ports[1]};
}

inline daemon_run::text node_ini(const std::string& node, int port, int peer, const std::string& host) {
  auto n = std::string{"px-"} + node.back();
  return {"[engine]\nentry = \"multi\"\nnode = \"" + node + "\"\npeers = [\"127.0.0.1:"
          + std::to_string(peer) + "\"]\npoll-interval = 1h\nprobe = { mode = \"off\" }\n"
          + "inspect = { port = " + std::to_string(port) + " }\nmetrics = { enabled = false }\n"
          + "hosts = [ { name = \"" + host + "\", test-node = \"" + EGRESS_SOURCE_DIR
          + "/config/testnode.xml\", pool = \"default\", network = \"default\" } ]\n"
          + "proxies = [ { name = \"" + n + "-1\", host = \"" + host + "\" }, { name = \"" + n
          + "-2\", host = \"" + host + "\" } ]\n"};
}

inline std::map<std::string, double> parse_exposition(const std::string& text) {
  static const std::regex sample_re(
    R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="(\\.|[^"\\])*"(,[a-zA-Z_][a-zA-Z0-9_]*="(\\.|[^"\\])*")*)?\})? ([-+0-9.eEInfa]+)$)");
  std::map<std::string, double> out;
  std::set<std::string> helped, typed;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# HELP ", 0) == 0) {
      helped.insert(line.substr(7, line.find(' ', 7) - 7));
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) {
      typed.insert(line.substr(7, line.find(' ', 7) - 7));
      continue;
    }
    std::smatch m;
    BOOST_REQUIRE_MESSAGE(std::regex_match(line, m, sample_re), "not a sample: " + line);
    auto name = m[1].str();
    auto family = std::regex_replace(name, std::regex("_(bucket|sum|count)$"), "");
    BOOST_CHECK_MESSAGE(helped.contains(name) || helped.contains(family), "no HELP: " + line);
    BOOST_CHECK_MESSAGE(typed.contains(name) || typed.contains(family), "no TYPE: " + line);
    out[name + m[2].str()] = std::stod(m[7].str());
  }
  return out;
}

} // namespace egress::test
