// `make cluster-run` (root): three engine nodes and an etcd on this machine,
// sharing three hosts (private libvirtds serving their test driver, each
// behind a private sshd in a network namespace of its own), as the cluster
// bed builds them (testbed/cluster_bed.hpp). It prints who owns what (from
// etcd) and every node's rotation, kills the node that owns hv1 with
// SIGKILL and shows its hosts taken over and its proxies back in the
// rotation, then starts it again and shows it rejoin. Every process it
// started is stopped by PID at the end, every file removed.
//
// The three nodes' configs and logs stay in their directories while it
// runs (printed), with `caf-shell` lines to inspect each one (`ls cluster`,
// `ls hosts`).
#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>

#include <unistd.h>

#include "testbed/cluster_bed.hpp"
#include "testbed/testbed.hpp"

using namespace std::chrono;
using namespace egress;

namespace {

void show(test::cluster_bed& bed, const char* when) {
  std::printf("\n== %s\n", when);
  for (auto& [host, owner] : bed.owners())
    std::printf("   %s: owner %s, token %lld\n", host.c_str(), owner.first.c_str(),
                static_cast<long long>(owner.second));
  for (size_t i = 0; i < bed.nodes.size(); ++i) {
    if (!bed.nodes[i]->proc.alive()) {
      std::printf("   node %s: not running\n", bed.nodes[i]->name.c_str());
      continue;
    }
    auto r = bed.rotation_of(i);
    std::printf("   node %s (%s): %zu of %zu in its /rotation (port %d)\n",
                bed.nodes[i]->name.c_str(), bed.phase_of(i).c_str(), r.size(), bed.proxies(),
                bed.nodes[i]->metrics_port);
  }
}

double seconds_since(steady_clock::time_point t) {
  return duration<double>(steady_clock::now() - t).count();
}

} // namespace

int main() {
  if (::geteuid() != 0) {
    std::fprintf(stderr, "cluster-run needs root (network namespaces, private daemons)\n");
    return 1;
  }
  testbed::sweep_stale();
  test::cluster_bed bed{test::cluster_bed_options{3, 3, seconds{5}, "demo", true}};
  std::printf("etcd at %s; hosts hv1..hv3, two proxies each; lease-ttl 5 s\n",
              bed.etcd.endpoint().c_str());
  bed.start_all();
  for (auto& n : bed.nodes)
    std::printf("node %s: config and log in %s (caf-shell: the address its log names as "
                "\"inspector listening\", --identity=%s/identity)\n",
                n->name.c_str(), n->dir.path().c_str(), n->dir.path().c_str());
  if (!bed.until([&] { return bed.everything_served({0, 1, 2}); }, seconds{90})) {
    std::fprintf(stderr, "the cluster did not come up:\n%s\n",
                 testbed::detail::tail(bed.nodes[0]->log(), 30).c_str());
    return 1;
  }
  show(bed, "every host owned, every proxy in every node's rotation");
  auto victim = bed.owners().at("hv1").first;
  auto v = bed.index_of(victim);
  auto others = bed.all_but(v);
  std::printf("\nkill -9 %s (pid %d), the owner of hv1\n", victim.c_str(),
              static_cast<int>(bed.nodes[v]->proc.pid()));
  bed.nodes[v]->proc.signal(SIGKILL);
  bed.nodes[v]->proc.stop();
  auto killed = steady_clock::now();
  // Its keys live until etcd expires its lease; then the others claim.
  bed.until([&] { return bed.taken_from(victim) && bed.everything_served(others); },
            seconds{60});
  std::printf("its hosts owned again and its proxies back in the others' rotation %.1f s "
              "later (TTL 5 s + guard 6 s)\n", seconds_since(killed));
  show(bed, "after the take-over");
  std::printf("\nstarting %s again\n", victim.c_str());
  bed.start_node(v);
  bed.until([&] { return bed.everything_served({0, 1, 2}) && bed.owners().size() == 3; },
            seconds{60});
  std::this_thread::sleep_for(seconds{12}); // a hand-over waits a TTL, then a guard
  show(bed, "after it rejoined (its share handed back)");
  std::printf("\nstopping everything\n");
  return 0;
}
