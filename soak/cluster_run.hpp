#pragma once
// The soak's run of several nodes (soak/main.cpp, --nodes N): N caf-run
// nodes of one cluster (soak/cluster_bed.hpp) share the bed's hosts, every
// node with the same hosts and proxies. The cluster's first convergence is
// awaited, then the nemesis (soak/nemesis.hpp) plays the schedule, whose
// faults include the cluster's own (a node killed, stopped or cut from etcd,
// etcd restarted; an engine restart restarts one node), while the run reads
// the truth from outside every ~300 ms: the owner keys from etcd and the
// marks from each libvirtd, fed to the cluster's checker
// (soak/cluster_checker.hpp), and once a second each node's /rotation and
// metrics. Once the last fault is healed the cluster must converge, and the
// rest of the time is steady state, checked as well.
//
// Violations, each with its time and what was seen:
//  - those of soak/cluster_checker.hpp: a fencing token (an owner key's, a
//    mark's) that goes back; a domain made anew while its host's owner kept
//    it; a domain made with a superseded token; a host not owned again
//    within the lease TTL + its guard (docs/spec.md 38: the call budget +
//    1 s here, the nodes' TCP user timeout being no longer) + 5 s of its
//    owner's loss, not counting while etcd is down or no node can act;
//  - a domain with our mark that no proxy declares on its host for longer
//    than 90 s; the unmarked domain "foreign" touched (soak/checker.hpp);
//  - a node that fails its stop or kill, ends on its own, does not come up,
//    or refuses a valid reload;
//  - not converged within 90 s of the last heal, or no longer at the end:
//    every node running and a member, every host owned by one of them (and
//    the nodes' owned hosts adding up to the hosts), every declared proxy in
//    every node's /rotation, exactly the declared domains on each host, each
//    stamped with its host's current token.
//
// Output as the one-engine run's (soak/run.hpp): timeline.csv, violations.csv,
// timeline.svg (soak/cluster.gp) and the summary line, which adds the nodes
// and the measured take-over times (min/median/max).

#include <memory>
#include <vector>

#include "soak/bed.hpp"
#include "soak/cluster_bed.hpp"
#include "soak/run.hpp"
#include "soak/schedule.hpp"

namespace egress::soak {

/// Runs `schedule` (its faults within `nemesis_s` seconds of the first
/// convergence) against the nodes of `cluster` on `hosts`. Prints the
/// summary line; returns 0 without violations, 1 with. Throws interruption.
int run_cluster_soak(const run_options& o, std::vector<std::unique_ptr<soak_host>>& hosts,
                     soak_cluster& cluster, const std::vector<fault>& schedule,
                     double nemesis_s);

} // namespace egress::soak
