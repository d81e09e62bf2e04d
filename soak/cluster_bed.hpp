#pragma once
// The soak's cluster (soak/main.cpp, --nodes N): a private etcd and N
// caf-run nodes that share the bed's hosts through it (docs/architecture.md,
// "Node failover"); what the nemesis does to them (a node killed, stopped or
// cut from etcd, etcd restarted) and what the run reads of them from
// outside, as tests/faults/cluster.cpp does: the owner keys from etcd, each
// node's GET /rotation, and its phase and owned hosts from its metrics.
//
// etcd listens on every address and node i reaches it at 127.0.0.<i+2>, so
// that one iptables rule in OUTPUT (tagged testbed::netns::rule_tag()) cuts
// that node alone; the soak itself reads etcd at 127.0.0.1. Every rule added
// is removed at the heal and, on a failed or interrupted run, by the
// destructor (testbed::sweep_stale removes a killed soak's).

#include <chrono>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "messages/config.hpp"
#include "providers/etcd/client.hpp"
#include "soak/cluster_checker.hpp"
#include "soak/engine_driver.hpp"
#include "testbed/etcd.hpp"

namespace egress::soak {

/// Every node's lease: short, so that a soak of minutes sees many take-overs.
inline constexpr std::chrono::seconds cluster_lease_ttl{3};

/// The guard docs/spec.md 38 gives a new owner of `h` before it changes
/// the host: its call budget (over SSH its TCP user timeout if longer) and
/// a second.
std::chrono::milliseconds guard_of(const host_config& h);

/// What the nemesis did to a node (one node fault at a time).
enum class node_fault { none, killed, stopped, cut };

/// What a node's metrics say of it.
struct node_reading {
  std::string phase; // joining, member, fenced, stopping
  int hosts_owned = 0;
};

class soak_cluster {
public:
  /// Starts etcd; the nodes' files go to `out`/n1 ... The nodes start with
  /// start().
  soak_cluster(int nodes, const std::string& out);
  /// The rules removed, the nodes stopped (continued first), etcd stopped.
  ~soak_cluster();
  soak_cluster(const soak_cluster&) = delete;
  soak_cluster& operator=(const soak_cluster&) = delete;

  size_t size() const { return nodes_.size(); }
  const std::string& name(size_t i) const { return nodes_[i].name; }
  node_fault fault(size_t i) const { return nodes_[i].fault; }
  bool etcd_up() const { return etcd_up_; }
  /// Whether some node can act: running and not cut from etcd.
  bool some_node_acts() const;
  std::chrono::seconds lease_ttl() const { return cluster_lease_ttl; }
  /// The node's caf-run process (0 while it is killed).
  pid_t pid(size_t i) const { return nodes_[i].driver->pid(); }

  /// `fleet` (the bed's hosts and proxies, as one engine would run them) as
  /// node i runs it: its name, its way to etcd, a 3 s lease, and each
  /// host's TCP user timeout no longer than its call budget (so that the
  /// guard is the call budget + 1 s, as in testbed/cluster_bed.cpp).
  engine_config config_of(size_t i, const engine_config& fleet) const;
  /// Throws std::runtime_error when the node does not come up.
  void start(size_t i, const engine_config& fleet);
  /// As on SIGTERM.
  caf::error stop(size_t i);
  /// SIGHUP with `fleet`'s config. A stopped node takes it when it is
  /// continued, a killed one when it starts again: both answer "pending".
  caf::expected<std::string> reload(size_t i, const engine_config& fleet);

  // The node faults and their heal, which restarts a killed node with
  // `fleet`, continues a stopped one (and reloads it if a reload passed it
  // by) or removes the rule that cut it.
  caf::error kill(size_t i);
  void pause(size_t i);
  void cut(size_t i);
  caf::error heal(size_t i, const engine_config& fleet);
  void stop_etcd();
  void start_etcd();

  /// The owner keys as etcd holds them; an error while it does not answer.
  caf::expected<owner_map> owners();
  /// Node i's GET /rotation: the names it serves; nothing when it does
  /// not answer (within 2 s).
  std::optional<std::set<std::string>> rotation_of(size_t i) const;
  /// Node i's metrics; nothing when it does not answer.
  std::optional<node_reading> metrics_of(size_t i) const;

private:
  struct node {
    std::string name;
    std::string dir;
    int metrics_port = 0;
    std::unique_ptr<engine_driver> driver;
    node_fault fault = node_fault::none;
    bool reload_pending = false; // a reload passed it by while it was stopped
    std::string rule;            // the iptables rule that cuts it ("" when none)
  };

  int etcd_port() const;
  std::string rule_for(size_t i) const;

  test::etcd_server etcd_;
  bool etcd_up_ = false;
  std::shared_ptr<etcd::client> reader_;
  std::vector<node> nodes_;
};

} // namespace egress::soak
