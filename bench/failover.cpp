// bench/failover: engine nodes sharing hosts through etcd (root; exit 77
// otherwise), on the cluster bed (testbed/cluster_bed.hpp: a private etcd,
// three hosts that are private libvirtds behind sshds, caf-run nodes).
//
//   bench-failover [--ttls 3,6,10] [--rest-s 30]
//
// Prints, side by side in one run:
//  - failover: from kill -9 of the node owning hv1 to each of its hosts
//    owned again and its proxies back in every survivor's GET /rotation,
//    per lease TTL, against the bound the engine promises (TTL + the hosts'
//    call budget + 2 s; the guard is the call budget and a second). Without
//    a cluster a dead node's proxies never come back by themselves.
//  - cost at rest: etcd requests per second per node (from etcd's own
//    metrics, by method: the keepalives should be all), and the CPU of one
//    node running the fleet with engine.cluster against the same node
//    without it.
// No assertions: figures only.

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "testbed/cluster_bed.hpp"
#include "testbed/http_get.hpp"
#include "testbed/testbed.hpp"

#include "figures.hpp"
#include "proc_cpu.hpp"

using namespace std::chrono;
using namespace egress;

namespace {

using clock_type = steady_clock;

double seconds_since(clock_type::time_point t) {
  return duration<double>(clock_type::now() - t).count();
}

constexpr double guard_s = 6; // testbed/ssh_host.hpp: call budget 5 s, + 1 s

struct failover_figures {
  double ttl_s = 0, owned_s = -1, back_s = -1;
};

// One cluster, one kill: when the victim's hosts were owned again and its
// proxies back in every survivor's rotation.
failover_figures failover_once(seconds ttl) {
  failover_figures out;
  out.ttl_s = static_cast<double>(ttl.count());
  test::cluster_bed bed{test::cluster_bed_options{3, 3, ttl, "failover", true}};
  bed.start_all();
  if (!bed.until([&] { return bed.everything_served({0, 1, 2}); }, 90s)) {
    std::fprintf(stderr, "failover: the cluster did not serve everything:\n%s\n",
                 testbed::detail::tail(bed.nodes[0]->log(), 20).c_str());
    return out;
  }
  auto victim = bed.owners().at("hv1").first;
  auto v = bed.index_of(victim);
  auto survivors = bed.all_but(v);
  bed.nodes[v]->proc.signal(SIGKILL);
  auto killed = clock_type::now();
  bed.until([&] { return bed.taken_from(victim); }, 120s, 20ms);
  out.owned_s = seconds_since(killed);
  if (bed.until([&] { return bed.everything_served(survivors); }, 120s, 50ms))
    out.back_s = seconds_since(killed);
  return out;
}

// etcd's gRPC messages received so far, by method (its own /metrics).
std::map<std::string, double> etcd_messages(int port) {
  std::map<std::string, double> out;
  auto [code, body] = test::http_get(port, "/metrics", 5s);
  if (code != 200)
    return out;
  static const std::regex line(
    R"re(^grpc_server_msg_received_total\{[^}]*grpc_method="([A-Za-z]+)"[^}]*\} ([0-9.e+]+))re");
  std::istringstream in{body};
  for (std::string l; std::getline(in, l);) {
    std::smatch m;
    if (std::regex_search(l, m, line))
      out[m[1].str()] += std::stod(m[2].str());
  }
  return out;
}

// A node's CPU seconds over `rest` once everything is served.
double node_cpu_at_rest(test::cluster_bed& bed, seconds rest) {
  if (!bed.until([&] { return bed.rotation_of(0).size() == bed.proxies(); }, 90s))
    return -1;
  std::this_thread::sleep_for(5s); // the start's own work settles
  auto pid = bed.nodes[0]->proc.pid();
  auto before = procfs::tree_cpu_seconds({pid});
  std::this_thread::sleep_for(rest);
  return procfs::tree_cpu_seconds({pid}) - before;
}

void print_failover(const std::vector<seconds>& ttls) {
  test::figures csv{"ttl_s", "owned_s", "back_s", "bound_s"};
  std::printf("failover: kill -9 of a node (3 nodes, 3 hosts, 6 proxies; guard %.0f s)\n",
              guard_s);
  std::printf("  %-8s %-14s %-18s %-10s %s\n", "TTL", "owned again", "back in rotation",
              "bound", "back/bound");
  for (auto ttl : ttls) {
    auto f = failover_once(ttl);
    auto bound = f.ttl_s + guard_s - 1 + 2; // TTL + call budget + 2 s
    std::printf("  %-8.0f %-14.2f %-18.2f %-10.1f %.2fx\n", f.ttl_s, f.owned_s, f.back_s, bound,
                f.back_s / bound);
    csv.row({test::figures::cell(f.ttl_s), test::figures::cell(f.owned_s),
             test::figures::cell(f.back_s), test::figures::cell(bound)});
  }
}

void print_rest(seconds rest) {
  std::printf("\ncost at rest (%lld s, TTL 3 s, 3 hosts, 6 proxies)\n",
              static_cast<long long>(rest.count()));
  {
    test::cluster_bed bed{test::cluster_bed_options{3, 3, 3s, "rest", true}};
    bed.start_all();
    bed.until([&] { return bed.everything_served({0, 1, 2}); }, 90s);
    std::this_thread::sleep_for(5s);
    auto before = etcd_messages(bed.etcd_port());
    std::this_thread::sleep_for(rest);
    auto after = etcd_messages(bed.etcd_port());
    std::printf("  etcd requests per second per node (3 nodes), by method:\n");
    for (auto& [method, n] : after) {
      auto per = (n - before[method]) / static_cast<double>(rest.count()) / 3;
      if (per > 0)
        std::printf("    %-16s %.3f/s\n", method.c_str(), per);
    }
    std::printf("    (a keepalive every third of the TTL: %.3f/s)\n", 1.0);
  }
  double cpu[2] = {-1, -1};
  for (int clustered = 0; clustered < 2; ++clustered) {
    test::cluster_bed bed{test::cluster_bed_options{3, 1, 3s, "rest", clustered == 1}};
    bed.start_node(0);
    cpu[clustered] = node_cpu_at_rest(bed, rest);
  }
  std::printf("  CPU of one node with the whole fleet: alone %.3f s, in a cluster %.3f s "
              "(%.2fx; +%.4f of a core)\n",
              cpu[0], cpu[1], cpu[1] / cpu[0], (cpu[1] - cpu[0]) / static_cast<double>(rest.count()));
}

std::vector<seconds> parse_ttls(const std::string& text) {
  std::vector<seconds> out;
  std::stringstream in{text};
  for (std::string x; std::getline(in, x, ',');)
    out.emplace_back(std::stoi(x));
  return out;
}

} // namespace

int main(int argc, char** argv) {
  std::vector<seconds> ttls{3s, 6s, 10s};
  seconds rest{30};
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--ttls")
      ttls = parse_ttls(argv[i + 1]);
    else if (a == "--rest-s")
      rest = seconds{std::stoi(argv[i + 1])};
  }
  if (::geteuid() != 0) {
    std::printf("SKIPPED: bench-failover needs root (network namespaces)\n");
    return 77;
  }
  testbed::sweep_stale();
  print_failover(ttls);
  print_rest(rest);
  return 0;
}
