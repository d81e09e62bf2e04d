#pragma once
// The soak's fault schedule (soak/main.cpp): every fault, its start,
// its host and how long it holds, drawn from the seed before the run starts,
// so a seed that found a violation replays the same faults in the same order
// at the same offsets. Pure: no clock, no daemon.

#include <cstdint>
#include <string>
#include <vector>

namespace egress::soak {

enum class fault_kind : uint8_t {
  partition,        // the host's namespace drops every packet, both ways; heal
  stop_libvirtd,    // SIGSTOP libvirtd; SIGCONT at the end
  kill_libvirtd,    // SIGKILL libvirtd; restarted at the end (the test driver's state is lost)
  kill_sshd,        // SIGKILL the sshd listener (open sessions live on, as on a real host): new dials fail until it is restarted at the end
  destroy_domain,   // virDomainDestroy of one of our domains behind the engine's back
  undefine_domain,  // destroy + undefine of one of our domains
  reload,           // a changed config: one proxy removed, added or changed
  restart_engine,   // engine stop (as on SIGTERM) and start again
  // Only on the VM bed (schedule_options::images), where the pool holds images:
  lose_image,       // a cached image's data file or marker removed from the pool, and a VM there destroyed
  break_mirror,     // the mirror stalls, cuts, corrupts or answers 500 (by the pick); fixed at the end
  fill_pool,        // a file takes every free byte of the host's pool filesystem; removed at the end
  // Only with a proxy group (schedule_options::groups):
  drain_host,       // caf-shell drain-host: its members handed over elsewhere; undrain-host at the end
  lose_host,        // a partition past host-grace: its members placed again elsewhere; heal
  // Only with several nodes (schedule_options::nodes), each a caf-run in one
  // cluster:
  kill_node,          // SIGKILL a node; started again at the end
  stop_node,          // SIGSTOP a node for 2-3 lease TTLs; SIGCONT at the end
  restart_etcd,       // etcd stopped by its PID; started again (same data dir) at the end
  cut_node_from_etcd, // an iptables rule drops a node's packets to etcd; removed at the end
};

const char* to_string(fault_kind k);

/// Whether the fault takes a host out (one at a time per host).
bool holds_host(fault_kind k);
/// Whether the fault takes a node out (one at a time per node).
bool holds_node(fault_kind k);
/// Whether the fault holds until a heal (the host faults, the mirror, a
/// full pool, the node faults, etcd).
bool held(fault_kind k);

struct fault {
  double at_s = 0;       // offset from the start of the nemesis
  double hold_s = 0;     // until the heal (0: nothing to heal)
  fault_kind kind{};
  int host = 0;          // index, for the host faults and the domain faults
  uint64_t pick = 0;     // draws the proxy (domain faults) or the change (reload)
  int node = -1;         // index, for the node faults and a restart in a cluster; -1: none
};

struct schedule_options {
  uint64_t seed = 1;
  int hosts = 3;
  double seconds = 120;  // faults start in [0, seconds - quiet_s)
  double quiet_s = 30;   // no fault starts in the last quiet_s, and every heal is before
  double min_gap_s = 1, max_gap_s = 6;
  double min_hold_s = 1, max_hold_s = 10;
  /// Draws lose_image, break_mirror and fill_pool too (the VM bed). Without,
  /// the draws are those of the bed without images: a seed replays the same
  /// faults.
  bool images = false;
  /// Draws drain_host and lose_host too (a proxy group is declared). A
  /// lose_host holds `lose_min_s` to `lose_max_s`, past host-grace.
  bool groups = false;
  double lose_min_s = 15, lose_max_s = 25;
  /// With 2 or more: draws kill_node, stop_node, restart_etcd and
  /// cut_node_from_etcd too, and a restart_engine restarts one node (the
  /// nodes of one cluster). 0: one engine, and the draws are those without.
  int nodes = 0;
  /// A stop_node holds 2 to 3 lease TTLs (the node finds its deadline past
  /// when it runs again); a cut_node_from_etcd `cut_min_s` to `cut_max_s`.
  double lease_ttl_s = 3;
  double cut_min_s = 5, cut_max_s = 10;
};

/// The faults, sorted by start. At most hosts - 1 hosts are held at once (a
/// healthy host is always left to check that its proxies are untouched), a
/// host holds one host fault at a time, the mirror one break at a time and a
/// pool one fill at a time (a full pool does not take its host out). Likewise
/// at most nodes - 1 nodes are held at once (one node is always left to take
/// the others' hosts over), a node holds one node fault at a time and is not
/// restarted while it holds one, and etcd is restarted once at a time.
std::vector<fault> make_schedule(const schedule_options& o);

/// "12.5s partition hv1 for 4.0s": one line per fault, for the log.
std::string describe(const fault& f);

} // namespace egress::soak
