#pragma once
// Engine nodes sharing hosts through etcd, as real processes (the cluster's
// faults suite and bench/failover): a private etcd, hosts that are each a
// private libvirtd serving its test driver behind an sshd in a network
// namespace of its own, and caf-run nodes with `engine.cluster`, every node
// declaring every host and each host two proxies. What the nodes did is
// read from the outside: the owner keys from etcd, the marks from each
// libvirtd, the rotation from each node's GET /rotation, its phase from its
// metrics. Needs root (the namespaces); throws std::runtime_error when
// something of the bed cannot be made.
//
//   test::cluster_bed bed;                 // etcd, 3 hosts, 3 nodes (not started)
//   bed.start_all();
//   bed.until([&] { return bed.everything_served({0, 1, 2}); }, 60s);
//   bed.nodes[0]->proc.signal(SIGKILL);

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "messages/config.hpp"
#include "providers/libvirt/connection.hpp"
#include "testbed/etcd.hpp"
#include "testbed/testbed.hpp"

namespace egress::test {

struct cluster_host {
  testbed::netns net;
  testbed::libvirtd lv;
  testbed::sshd ssh;
  lv::connection_ptr witness; // the test driver drops its domains with its last connection

  cluster_host();
};

// One caf-run node: its config file, its metrics port, its log.
struct cluster_node {
  std::string name;
  testbed::temp_dir dir{"node"};
  int metrics_port = 0;
  testbed::process proc;

  std::string log() const;
};

struct cluster_bed_options {
  size_t hosts = 3;
  size_t nodes = 3;
  std::chrono::milliseconds lease_ttl{3000};
  std::string entry = "cluster";
  /// false: the nodes run without engine.cluster (each one every host).
  bool cluster = true;
};

class cluster_bed {
public:
  explicit cluster_bed(cluster_bed_options o = {});
  ~cluster_bed();
  cluster_bed(const cluster_bed&) = delete;
  cluster_bed& operator=(const cluster_bed&) = delete;

  cluster_bed_options opts;
  test::etcd_server etcd;
  std::vector<std::unique_ptr<cluster_host>> hosts;
  std::vector<std::unique_ptr<cluster_node>> nodes;
  /// The nodes' etcd endpoints when they are not this bed's etcd's (a
  /// cluster of etcd members the test started).
  std::vector<std::string> store;

  /// Node i's config: every host, two proxies each ("px-<h><a|b>").
  engine_config config_of(size_t i) const;
  void start_node(size_t i);
  void start_all();

  /// The owner keys as etcd holds them: host -> (node, token).
  std::map<std::string, std::pair<std::string, int64_t>> owners() const;
  /// The marks of host h's domains, read from its libvirtd.
  std::map<std::string, domain_mark> marks_on(size_t h) const;
  /// GET /rotation of node i: the names it serves (none on no answer).
  std::set<std::string> rotation_of(size_t i) const;
  /// Node i's cluster phase, from its metrics ("" on no answer).
  std::string phase_of(size_t i) const;
  /// Every proxy in the rotation of each node of `by`, every host owned.
  bool everything_served(const std::vector<size_t>& by) const;
  /// Every host owned, none by `node` (its lease expired: the others took
  /// its hosts).
  bool taken_from(const std::string& node) const;
  /// Drops node i's packets to etcd (a tagged iptables rule, removed by the
  /// destructor or heal_from_etcd).
  void cut_from_etcd(size_t i);
  void heal_from_etcd(size_t i);
  size_t index_of(const std::string& node) const;
  /// Every node's index but `i`'s.
  std::vector<size_t> all_but(size_t i) const;
  /// caf-shell against node i's inspector with `args` (its output; "" when
  /// the node has not said where it listens).
  std::string shell(size_t i, std::vector<std::string> args) const;
  size_t proxies() const { return hosts.size() * 2; }
  int etcd_port() const;

  /// Polls `pred` every `step` until it holds or `max` passed.
  template <class Pred>
  static bool until(Pred pred, std::chrono::milliseconds max,
                    std::chrono::milliseconds step = std::chrono::milliseconds(100)) {
    auto deadline = std::chrono::steady_clock::now() + max;
    while (std::chrono::steady_clock::now() < deadline) {
      if (pred())
        return true;
      std::this_thread::sleep_for(step);
    }
    return pred();
  }

private:
  std::string endpoint_of(size_t i) const;
  std::string rule_of(size_t i) const;
  std::map<size_t, std::string> rules_; // node -> its iptables rule
};

} // namespace egress::test
