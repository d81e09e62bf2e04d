// A network namespace joined to the root namespace by a veth pair.
//
// The /30 comes from 10.250.0.0/16, at a random slot that overlaps no
// address or route of this machine. Parallel tests may race for a slot: each
// one adds its address, then looks for another interface holding one in the
// same /30 and moves on if it finds one (at worst both move; never both stay).
#include "testbed/testbed.hpp"

#include <atomic>
#include <cstdint>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace egress::testbed {

namespace {

struct prefix {
  uint32_t net = 0;
  int len = 32;
  bool overlaps(const prefix& o) const {
    int l = std::min(len, o.len);
    uint32_t mask = l == 0 ? 0 : ~uint32_t{0} << (32 - l);
    return ((net ^ o.net) & mask) == 0;
  }
};

std::optional<prefix> parse_prefix(const std::string& s) {
  auto slash = s.find('/');
  in_addr a{};
  if (::inet_pton(AF_INET, s.substr(0, slash).c_str(), &a) != 1)
    return std::nullopt;
  prefix p{ntohl(a.s_addr), slash == std::string::npos ? 32 : std::stoi(s.substr(slash + 1))};
  return p;
}

std::string to_string(uint32_t addr) {
  in_addr a{htonl(addr)};
  char buf[INET_ADDRSTRLEN];
  return ::inet_ntop(AF_INET, &a, buf, sizeof buf);
}

/// (interface, prefix) of every IPv4 address in the root namespace.
std::vector<std::pair<std::string, prefix>> addresses() {
  std::vector<std::pair<std::string, prefix>> out;
  std::stringstream lines(run_checked({"ip", "-4", "-o", "addr", "show"}));
  for (std::string line; std::getline(lines, line);) {
    std::stringstream ws(line);
    std::string idx, dev, family, addr;
    ws >> idx >> dev >> family >> addr;
    if (auto p = parse_prefix(addr))
      out.emplace_back(dev, *p);
  }
  return out;
}

/// Destinations of every IPv4 route in every table (default routes excluded).
std::vector<prefix> routes() {
  std::vector<prefix> out;
  std::stringstream lines(run_checked({"ip", "-4", "route", "show", "table", "all"}));
  for (std::string line; std::getline(lines, line);) {
    std::stringstream ws(line);
    std::string first, second;
    ws >> first >> second;
    auto p = parse_prefix(first);
    if (!p)
      p = parse_prefix(second);  // "local 1.2.3.4 …", "blackhole 10.0.0.0/8"
    if (p)
      out.push_back(*p);
  }
  return out;
}

bool slot_in_use(const prefix& slot, const std::string& except_dev) {
  for (auto& [dev, p] : addresses())
    if (dev != except_dev && p.overlaps(slot))
      return true;
  return false;
}

void wait_operstate_up(const std::string& dev) {
  for (int i = 0; i < 200; ++i) {
    if (read_file("/sys/class/net/" + dev + "/operstate").rfind("up", 0) == 0)
      return;
    std::this_thread::sleep_for(ms(10));
  }
  throw std::runtime_error("testbed: " + dev + " did not come up");
}

std::atomic<int> counter{0};

} // namespace

std::string netns::rule_tag() {
  return "egress-test-" + std::to_string(::getpid());
}

netns::netns() {
  auto pid = std::to_string(::getpid());
  auto n = std::to_string(counter++);
  name_ = "egt-" + pid + "-" + n;
  host_if_ = "egt" + pid + "h" + n;  // IFNAMSIZ: at most 15 characters
  peer_if_ = "egt" + pid + "p" + n;
  if (host_if_.size() > 15)
    throw std::runtime_error("testbed: interface name too long: " + host_if_);
  run_checked({"ip", "netns", "add", name_});
  try {
    run_checked({"ip", "link", "add", host_if_, "type", "veth", "peer", "name", peer_if_,
                 "netns", name_});
    std::mt19937 rng(std::random_device{}() ^ static_cast<unsigned>(::getpid()));
    auto taken = routes();
    for (int attempt = 0;; ++attempt) {
      if (attempt == 200)
        throw std::runtime_error("testbed: no free /30 in 10.250.0.0/16");
      prefix slot{(10u << 24 | 250u << 16) + static_cast<uint32_t>(rng() % 16384) * 4, 30};
      bool busy = false;
      for (auto& r : taken)
        busy |= r.overlaps(slot);
      if (busy || slot_in_use(slot, ""))
        continue;
      host_addr_ = to_string(slot.net + 1);
      peer_addr_ = to_string(slot.net + 2);
      run_checked({"ip", "addr", "add", host_addr_ + "/30", "dev", host_if_});
      if (!slot_in_use(slot, host_if_))
        break;
      run_checked({"ip", "addr", "del", host_addr_ + "/30", "dev", host_if_});
    }
    run_checked({"ip", "-n", name_, "addr", "add", peer_addr_ + "/30", "dev", peer_if_});
    run_checked({"ip", "-n", name_, "link", "set", "lo", "up"});
    run_checked({"ip", "-n", name_, "link", "set", peer_if_, "up"});
    run_checked({"ip", "link", "set", host_if_, "up"});
    wait_operstate_up(host_if_);
  } catch (...) {
    run({"ip", "link", "del", host_if_});
    run({"ip", "netns", "del", name_});
    throw;
  }
}

netns::~netns() {
  try {
    heal();  // were the namespace to linger (a process in it), so would its rules
    run({"ip", "link", "del", host_if_});  // deletes both ends
    run({"ip", "netns", "del", name_});
  } catch (...) {
    // Only fork can fail here; sweep_stale() removes what is left.
  }
}

int free_port(const std::string& address, const std::string& netns) {
  if (!netns.empty()) {
    auto r = run({"ip", "netns", "exec", netns, "/usr/bin/python3", "-c",
                  "import socket; s = socket.socket(); s.bind(('" + address
                    + "', 0)); print(s.getsockname()[1])"});
    if (!r.ok())
      throw std::runtime_error("testbed: free_port in " + netns + ": " + r.output);
    return std::stoi(r.output);
  }
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  ::inet_pton(AF_INET, address.c_str(), &sa.sin_addr);
  socklen_t len = sizeof sa;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0
      && ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0)
    port = ntohs(sa.sin_port);
  ::close(fd);
  if (port == 0)
    throw std::runtime_error("testbed: no free port on " + address);
  return port;
}

std::vector<std::string> netns::exec_prefix() const {
  return {"ip", "netns", "exec", name_};
}

run_result netns::exec(const std::vector<std::string>& argv, ms timeout) const {
  auto full = exec_prefix();
  full.insert(full.end(), argv.begin(), argv.end());
  return run(full, timeout);
}

std::vector<std::string> netns::rule(const char* op, const char* chain) const {
  auto argv = exec_prefix();
  bool in = std::string(chain) == "INPUT";
  argv.insert(argv.end(), {"iptables", "-w", op, chain, in ? "-i" : "-o", peer_if_, "-m",
                           "comment", "--comment", rule_tag(), "-j", "DROP"});
  return argv;
}

void netns::partition() {
  if (partitioned_)
    return;
  run_checked(rule("-I", "INPUT"));
  partitioned_ = true;  // from here on heal() has something to remove
  run_checked(rule("-I", "OUTPUT"));
}

void netns::heal() {
  if (!partitioned_)
    return;
  // Delete each rule as often as it is there (a half-done partition() left one).
  for (auto chain : {"INPUT", "OUTPUT"})
    while (run(rule("-D", chain)).ok()) {
    }
  partitioned_ = false;
}

void netns::link_down() {
  run_checked({"ip", "-n", name_, "link", "set", peer_if_, "down"});
  // The host end stays up, so the /30 route stays (flagged linkdown) and the
  // kernel still sends our traffic into the dead veth. If this machine set
  // ignore_routes_with_linkdown it would go to the default route instead.
  auto route = run_checked({"ip", "route", "get", peer_addr_});
  if (route.find("dev " + host_if_) == std::string::npos) {
    link_up();
    throw std::runtime_error("testbed: with the link down, " + peer_addr_
                             + " would be routed elsewhere: " + route);
  }
}

void netns::link_up() {
  run_checked({"ip", "-n", name_, "link", "set", peer_if_, "up"});
  wait_operstate_up(host_if_);
  // Connects while the link was down left the peer's ARP entry FAILED; until
  // the kernel re-probes, connect() would fail with EHOSTUNREACH.
  run_checked({"ip", "neigh", "flush", "dev", host_if_});
  run_checked({"ip", "-n", name_, "neigh", "flush", "dev", peer_if_});
}

} // namespace egress::testbed
